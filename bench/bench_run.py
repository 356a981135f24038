"""Benchmark of ``nvfabric run`` (issues "The main job" and 15 "The supervisor as quick and
lean as a compiled wrapper") on the simulated DGX B200 with zero-delay fakes (NVLSM creates its
socket at once, fabric manager registers the GPUs at once), side by side with the yardstick
``limit-starter`` (tests/data/bench/limit-starter.c, the copy of ../shared/bench: start NVLSM,
inotify wait for its socket, start fabric manager, stop the other when one exits; built here
with ``cc`` into build/). Runs of the two alternate (interleaved) on fresh nodes.

Figures (medians over RUNS runs of each, min and max beside; ratio = nvfabric / yardstick):

- start -> NVLSM exec: from the spawn of the starter to the fake NVLSM's first record (its
  ``exec`` line in calls.jsonl, written once its Python started: the same for both starters);
  for nvfabric also to its "started nvlsm" log line (written when the exec succeeded).
- NVLSM socket -> fabric manager exec: from NVLSM's bind of its IPC socket (the fake's record)
  to the fake fabric manager's first record; for nvfabric also to its "started fabricmanager"
  log line (right after the exec), timestamped on arrival here.
- NVLSM killed (SIGKILL) -> starter exited, fabric manager stopped (both stop fabric manager
  before they exit).
- nvfabric run SIGKILLed -> NVLSM and fabric manager gone (their parent-death signal).
- idle: CPU over IDLE_S seconds once ready and resident memory (VmRSS) of the supervising
  process, for both.
- the floor: what a Python starter (bare, with subprocess only; or on click) needs to NVLSM's
  first record with this preflight (the interpreter with that imported, fabric manager's
  ``--version``, the yardstick's spawn -> NVLSM figure), to tell our own cost from the
  language's.
- where nvfabric's start -> NVLSM exec goes, by phase (TRACE_RUNS more runs with the phase
  tracer bench/phasetrace/sitecustomize.py: entry and exit of the host-access functions).

Usage: ``bench_run.py [RUNS] [IDLE_S] [TRACE_RUNS]`` (defaults 10, 30 and 5).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import PY, StderrLines, interleaved_ms, line  # noqa: E402

from nvfabric.bringup.nvlsm import SOCKET
from nvfabric.simulate import build, profile_spec
from nvfabric.simulate.fakes import calls, install, set_faults

REPO = Path(__file__).resolve().parents[1]
_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]
ZERO_DELAY = {"nvlsm": {"socket_delay_s": 0}, "fabricmanager": {"register_delay_s": 0}}
BOUND_S = 30.0
YARDSTICK_SRC = REPO / "tests" / "data" / "bench" / "limit-starter.c"
YARDSTICK = REPO / "build" / "limit-starter"
TRACER = Path(__file__).resolve().parent / "phasetrace"

#: Targets of issue 15 (medians, simulated DGX B200).
TARGET_START_MS = 60.0
TARGET_SOCKET_MS = 8.0
TARGET_EXIT_MS = 15.0
TARGET_RSS_MIB = 15.0


def build_yardstick() -> tuple[Path | None, str]:
    """build/limit-starter compiled with ``cc -O2`` when stale; (None, why) without cc."""
    cc = shutil.which("cc")
    if cc is None:
        return None, "no `cc` on this machine: the yardstick is not built, its figures are missing"
    if not YARDSTICK.exists() or YARDSTICK.stat().st_mtime < YARDSTICK_SRC.stat().st_mtime:
        YARDSTICK.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([cc, "-O2", "-o", str(YARDSTICK), str(YARDSTICK_SRC)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return None, f"cc failed: {proc.stderr.strip()[-300:]}"
    return YARDSTICK, f"{YARDSTICK.relative_to(REPO)} (cc -O2 {YARDSTICK_SRC.relative_to(REPO)})"


class Node:
    """A fresh simulated DGX B200 and a starter on it: ``nvfabric run`` (log lines timestamped
    on arrival; with ``trace``, the phase tracer records into ``self.trace``) or the yardstick
    with the argv and config file ``nvfabric run --dry-run`` lists (prepared before the start
    is timed)."""

    def __init__(self, base: str, n: int, yardstick: Path | None = None,
                 trace: bool = False) -> None:
        self.root = os.path.join(base, f"node{n}")
        build(profile_spec("dgx-b200"), self.root)
        install(self.root)
        set_faults(self.root, ZERO_DELAY)
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        self.trace = os.path.join(base, f"node{n}.trace")
        if trace:
            env["PYTHONPATH"] = os.pathsep.join(
                [str(TRACER), *filter(None, [env.get("PYTHONPATH")])])
            env["NVFABRIC_PHASE_TRACE"] = self.trace
        argv = [*NVFABRIC, "run", "--root", self.root]
        if yardstick is not None:
            argv = [str(yardstick), *self._yardstick_args()]
        self.t_start = time.time()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stderr is not None
        self.err = StderrLines(self.proc.stderr, BOUND_S)

    def _yardstick_args(self) -> list[str]:
        out = subprocess.run([*NVFABRIC, "run", "--dry-run", "--json", "--root", self.root],
                             capture_output=True, text=True, check=True).stdout
        plan = json.loads(out)
        for f in plan["files"]:
            os.makedirs(os.path.dirname(f["path"]), exist_ok=True)
            with open(f["path"], "w", encoding="utf-8") as fh:
                fh.write(f["content"])
        argv = {p["service"]: p["argv"] for p in plan["processes"]}
        sock = os.path.join(self.root, SOCKET.lstrip("/"))
        os.makedirs(os.path.dirname(sock), exist_ok=True)  # limit-starter watches its dir
        return [sock, *argv["nvlsm"], "--", *argv["fabricmanager"]]


    def until(self, needle: str) -> float:
        return self.err.until(needle)

    def event(self, prog: str, event: str) -> dict[str, object]:
        deadline = time.monotonic() + BOUND_S
        while True:
            found = [c for c in calls(self.root) if c["prog"] == prog and c["event"] == event]
            if found:
                return found[0]
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"no {prog} {event} record")
            time.sleep(0.005)

    def t(self, prog: str, event: str) -> float:
        return float(self.event(prog, event)["t"])  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def exit_time(proc: subprocess.Popen[str]) -> float:
    """Wall time at which ``proc`` exited: a blocking wait in a thread (``Popen.wait`` with a
    timeout polls with sleeps doubling up to 50 ms, which rounded an exit at 32 ms up to 64)."""
    done: list[float] = []

    def waiter() -> None:
        proc.wait()
        done.append(time.time())

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if not done:
        raise RuntimeError("nvfabric run did not exit")
    return done[0]


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its new parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
        for row in fh:
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
    return float("nan")



def stats(samples: list[float]) -> str:
    return (f"{statistics.median(samples):.1f} ms (min {min(samples):.1f}, "
            f"max {max(samples):.1f})")


def verdict(value: float, target: float) -> str:
    return f"target <= {target:g}: {'met' if value <= target else 'OVER'}"


def one_run(base: str, n: int, yardstick: Path | None) -> dict[str, float]:
    """One bring-up and one NVLSM kill; the figures of this run, in ms."""
    node = Node(base, n, yardstick)
    out: dict[str, float] = {}
    try:
        node.t("fabricmanager", "registered")
        if yardstick is None:
            node.until("fabric ready in")
            out["nvlsm_started_line"] = (node.until("started nvlsm") - node.t_start) * 1000
            out["fm_started_line"] = (node.until("started fabricmanager")
                                      - node.t("nvlsm", "socket")) * 1000
            out["ready"] = (node.until("fabric ready in") - node.t_start) * 1000
        sock = node.t("nvlsm", "socket")
        out["start_nvlsm"] = (node.t("nvlsm", "exec") - node.t_start) * 1000
        out["socket_fm"] = (node.t("fabricmanager", "exec") - sock) * 1000
        sm_pid = int(node.event("nvlsm", "exec")["pid"])  # type: ignore[call-overload]
        t_kill = time.time()
        os.kill(sm_pid, signal.SIGKILL)
        out["kill_exit"] = (exit_time(node.proc) - t_kill) * 1000
        if yardstick is None:
            out["kill_noticed"] = (node.until("error service_exited: nvlsm") - t_kill) * 1000
            out["kill_fm_stopped"] = (node.until("fabricmanager stopped") - t_kill) * 1000
    finally:
        node.stop()
    return out


def idle(base: str, n: int, yardstick: Path | None, idle_s: float) -> tuple[float, float, int]:
    """(CPU % of a core over ``idle_s`` once ready, RSS MiB, exit code after SIGTERM)."""
    node = Node(base, n, yardstick)
    try:
        node.t("fabricmanager", "registered")
        if yardstick is None:
            node.until("fabric ready in")
        time.sleep(1.0)  # let the ready-time work (probe thread, file writes) settle
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), cpu_ticks(node.proc.pid)
        time.sleep(idle_s)
        t1, c1 = time.monotonic(), cpu_ticks(node.proc.pid)
        rss = rss_mb(node.proc.pid)
        node.proc.send_signal(signal.SIGTERM)
        code = node.proc.wait(BOUND_S)
    finally:
        node.stop()
    return (c1 - c0) / hz / (t1 - t0) * 100, rss, code


#: Phases of nvfabric's start -> NVLSM exec: (label, traced function, which call: 0 first).
CALLS = (
    ("collect (inventory)", "nvfabric.facts.inventory.collect", 0),
    ("plan", "nvfabric.rules.plan.plan", 0),
    ("vendor files", "nvfabric.bringup.vendor.resolve", 0),
    ("shipped fabric manager config", "nvfabric.facts.fmconfig.read_shipped", 0),
    ("prepare (argv, files)", "nvfabric.bringup.fabricmanager.prepare", 0),
    ("run lock", "nvfabric.effects.runlock.acquire_run_lock", 0),
    ("probe: other starters (process table)", "nvfabric.facts.probes.running", 0),
    ("probe: fabric manager --version", "nvfabric.facts.probes.fm_version", 0),
    ("probe: GPU fabric state (node's nvidia-smi)", "nvfabric.facts.gpu.read_health", 0),
    ("probe: NVLSM socket already served", "nvfabric.effects.sockets.socket_listening", 0),
    ("files written (state dir, effective config)", "nvfabric.effects.apply.apply", 0),
    ("exec into the lean supervisor (spawns NVLSM)", "nvfabric.supervisor.lean.supervise", 0),
)
PROBES = CALLS[7:11]


def phases(node: Node) -> dict[str, float]:
    """ms per phase of one traced run (absent: the traced call did not happen)."""
    pairs: dict[str, list[list[float]]] = {}
    marks: dict[str, float] = {}
    with open(node.trace, encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row["ev"] == "mark":
                marks.setdefault(row["what"], row["t"])
            elif row["ev"] == "enter":
                pairs.setdefault(row["what"], []).append([row["t"], row["t"]])
            else:
                open_ = [p for p in pairs.get(row["what"], []) if p[0] == p[1]]
                if open_:
                    open_[0][1] = row["t"]
    t0 = node.t_start
    span = {label: pairs[fn][i] for label, fn, i in CALLS if len(pairs.get(fn, ())) > i}
    nvlsm_exec = node.t("nvlsm", "exec")
    out: dict[str, float] = {}
    if "site" in marks:
        out["interpreter start-up (to site)"] = (marks["site"] - t0) * 1000
        if "collect (inventory)" in span:
            out["imports + argument parsing (to collect)"] = (
                span["collect (inventory)"][0] - marks["site"]) * 1000
    for label, (a, b) in span.items():
        out[label] = (b - a) * 1000
    probes = [span[label] for label, _, _ in PROBES if label in span]
    if probes:
        out["preflight probes, wall (they overlap)"] = (
            max(b for _, b in probes) - min(a for a, _ in probes)) * 1000
        lean = "exec into the lean supervisor (spawns NVLSM)"
        if lean in span:
            out["preflight end -> exec (files, log lines)"] = (
                span[lean][0] - max(b for _, b in probes)) * 1000
    if "exec into the lean supervisor (spawns NVLSM)" in span:
        out["exec -> fake NVLSM's first record (lean start-up, spawn, the fake's start-up)"] = (
            nvlsm_exec - span["exec into the lean supervisor (spawns NVLSM)"][0]) * 1000
    out["total: start -> fake NVLSM's first record"] = (nvlsm_exec - t0) * 1000
    return out


def print_phases(base: str, n0: int, runs: int) -> None:
    table: dict[str, list[float]] = {}
    for n in range(runs):
        node = Node(base, n0 + n, trace=True)
        try:
            node.t("nvlsm", "exec")
            for label, ms in phases(node).items():
                table.setdefault(label, []).append(ms)
        finally:
            node.stop()
    print(f"-- where nvfabric's start -> NVLSM exec goes, median of {runs} traced runs")
    order = ["interpreter start-up (to site)", "imports + argument parsing (to collect)",
             *(label for label, _, _ in CALLS[:7]), "preflight probes, wall (they overlap)",
             *(f"  {label}" for label, _, _ in PROBES),
             "preflight end -> exec (files, log lines)",
             *(label for label, _, _ in CALLS[11:]),
             "exec -> fake NVLSM's first record (lean start-up, spawn, the fake's start-up)",
             "total: start -> fake NVLSM's first record"]
    for label in order:
        samples = table.get(label.strip())
        line(f"  {label}", f"{statistics.median(samples):.1f} ms" if samples
             else "not seen (the traced function moved?)")


def floor(base: str, yardstick_start_ms: float | None, runs: int) -> None:
    """The least a Python starter needs from its start to NVLSM's first record with this
    preflight, on this machine: the interpreter with what it cannot do without (subprocess,
    to run ``--version``; or click, the CLI library nvfabric parses its options with: no code
    of nvfabric either way), then fabric manager's ``--version`` (NVLSM may not start before
    its answer; the GPU read can overlap it), then the spawn of NVLSM and the fake's own
    start-up (the yardstick's start -> NVLSM figure). Each a median of ``runs`` whole
    processes, interleaved."""
    node = os.path.join(base, "floor")
    build(profile_spec("dgx-b200"), node)
    install(node)
    bare, spawner, click_, version = interleaved_ms([
        [PY, "-I", "-S", "-c", "pass"], [PY, "-I", "-S", "-c", "import subprocess"],
        [PY, "-c", "import click"],
        [os.path.join(node, "usr/bin/nv-fabricmanager"), "--version"]], runs)
    print(f"-- the floor of a Python starter, medians of {runs} runs (interleaved)")
    line("  interpreter alone (python -I -S -c pass)", f"{statistics.median(bare):.1f} ms")
    line("  interpreter + import subprocess (no site, no CLI library)",
         f"{statistics.median(spawner):.1f} ms")
    line("  interpreter + site + import click", f"{statistics.median(click_):.1f} ms")
    line("  fake nv-fabricmanager --version, whole process", f"{statistics.median(version):.1f} ms")
    if yardstick_start_ms is None:
        line("  floor", "not known without the yardstick")
        return
    line("  + spawn -> fake NVLSM's first record (the yardstick's)", f"{yardstick_start_ms:.1f} ms")
    for what, start in (("a bare Python starter (subprocess only)", spawner),
                        ("a Python + click starter", click_)):
        total = statistics.median(start) + statistics.median(version) + yardstick_start_ms
        line(f"  floor of {what}", f"{total:.1f} ms; target {TARGET_START_MS:g} ms is "
             + ("below it on this machine" if total > TARGET_START_MS else "above it"))


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    idle_s = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    trace_runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    yardstick, how = build_yardstick()
    line("yardstick", how)
    with open("/proc/loadavg", encoding="utf-8") as fh:
        line("load average at start (1, 5, 15 min)", " ".join(fh.read().split()[:3]))
    base = tempfile.mkdtemp(prefix="nvfabric-bench-run-")
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    try:
        for n in range(runs + 1):  # interleaved; run 0 of each is a warm-up
            starters = ((None, ours), (yardstick, theirs)) if yardstick else ((None, ours),)
            for starter, into in starters:
                figures = one_run(base, 2 * n + (starter is not None), starter)
                if n:
                    for key, ms in figures.items():
                        into.setdefault(key, []).append(ms)
        print(f"-- medians of {runs} interleaved runs each (min, max)")
        rows = (("start -> NVLSM exec (fake NVLSM's first record)", "start_nvlsm",
                 TARGET_START_MS),
                ("NVLSM socket -> fabric manager exec (fake's first record)", "socket_fm", None),
                ("NVLSM killed -> starter exited, fabric manager stopped", "kill_exit",
                 TARGET_EXIT_MS))
        for label, key, target in rows:
            line(f"{label}: nvfabric", stats(ours[key]) + (
                f"; {verdict(statistics.median(ours[key]), target)}" if target else ""))
            if key in theirs:
                ratio = statistics.median(ours[key]) / statistics.median(theirs[key])
                line("  yardstick limit-starter", f"{stats(theirs[key])}; nvfabric = "
                     f"{ratio:.2f}x the yardstick")
        started = ours["nvlsm_started_line"]
        line("start -> NVLSM exec, by nvfabric's 'started nvlsm' line",
             f"{stats(started)}; {verdict(statistics.median(started), TARGET_START_MS)}")
        line("socket -> fabric manager exec, by its 'started fabricmanager' line",
             stats(ours["fm_started_line"]) + "; " + verdict(
                 statistics.median(ours["fm_started_line"]), TARGET_SOCKET_MS))
        line("  for comparison: vendor start script / polling wrapper", "5000 ms / 100-1100 ms")
        line("nvfabric run -> fabric ready", stats(ours["ready"]))
        line("  of which: killed -> exit noticed and logged", stats(ours["kill_noticed"]))
        line("  of which: killed -> fabric manager stopped (its own shutdown)",
             stats(ours["kill_fm_stopped"]))

        orphans_gone = []
        for n in range(5):
            node = Node(base, 1000 + n)
            try:
                node.until("fabric ready in")
                pids = [int(node.event(prog, "exec")["pid"])  # type: ignore[call-overload]
                        for prog in ("nvlsm", "fabricmanager")]
                t_kill = time.monotonic()
                node.proc.kill()
                node.proc.wait(BOUND_S)
                while not all(gone(pid) for pid in pids):
                    if time.monotonic() - t_kill > BOUND_S:
                        raise RuntimeError(f"daemons {pids} outlived nvfabric run")
                    time.sleep(0.0005)
                orphans_gone.append((time.monotonic() - t_kill) * 1000)
            finally:
                node.stop()
        line("nvfabric run SIGKILLed -> NVLSM and fabric manager gone, median of 5",
             stats(orphans_gone))

        cpu, rss, code = idle(base, 2000, None, idle_s)
        line(f"idle supervisor CPU over {idle_s:g} s: nvfabric", f"{cpu:.3f} % of a core")
        line("idle supervisor RSS: nvfabric", f"{rss:.1f} MiB; {verdict(rss, TARGET_RSS_MIB)}")
        line("exit code after SIGTERM: nvfabric", str(code))
        if yardstick is not None:
            y_cpu, y_rss, y_code = idle(base, 2001, yardstick, idle_s)
            line(f"idle CPU over {idle_s:g} s: yardstick", f"{y_cpu:.3f} % of a core")
            line("idle RSS: yardstick", f"{y_rss:.1f} MiB; nvfabric = {rss / y_rss:.1f}x")
            line("exit code after SIGTERM: yardstick", str(y_code))
        floor(base, statistics.median(theirs["start_nvlsm"]) if theirs else None, runs)
        print_phases(base, 3000, trace_runs)
        with open("/proc/loadavg", encoding="utf-8") as fh:
            line("load average at the end (1, 5, 15 min)", " ".join(fh.read().split()[:3]))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

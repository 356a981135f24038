"""The supervisor in-process, with small Python programs as services: the wiring of the state
machine to real processes (socket readiness with and without inotify, the GPU reset command,
live diagnosis, readiness fallbacks, signals, systemd's notify socket) and the host helpers
(sd_notify, ensure_dir). The policy itself (back-off, start limit, R04/R09, stop order, R05)
is tested on a fake clock in tests/supervisor/test_machine.py."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from nvfabric.bringup import fabricmanager, mnnvl
from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects import notify
from nvfabric.effects.dirs import ensure_dir
from nvfabric.effects.log import Log, printable
from nvfabric.effects.notify import sd_notify
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.supervisor import loop
from nvfabric.supervisor.policy import Policy
from nvfabric.supervisor.supervise import Supervisor
from tests.runkit import TIMESTAMP

PY = sys.executable

SOCKET_SERVER = """
import os, socket, sys, time
time.sleep(float(sys.argv[2]))
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
print("socket up", flush=True)
time.sleep(60)
"""


class StopOn(Log):
    """A log that sends SIGTERM to this process once a line matches ``pattern`` (the way an
    operator stops the unit), and keeps every line."""

    def __init__(self, pattern: str, count: int = 1) -> None:
        super().__init__(io.StringIO())
        self.rx = re.compile(pattern)
        self.count = count
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)
        if self.rx.search(text):
            self.count -= 1
            if self.count == 0:
                os.kill(os.getpid(), signal.SIGTERM)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def service(name: str, code: str, *args: str, **kw: object) -> ServiceSpec:
    return ServiceSpec(name=name, argv=(PY, "-c", code, *args), **kw)  # type: ignore[arg-type]


def sleeper(name: str = "fm", **kw: object) -> ServiceSpec:
    return service(name, "import time; print('started', flush=True); time.sleep(60)", **kw)


def test_socket_readiness_with_inotify(tmp_path: Path) -> None:
    path = str(tmp_path / "ipc.sock")
    log = StopOn("fabric ready in")
    outcome = Supervisor([service("sm", SOCKET_SERVER, path, "0.1", ready_socket=path),
                          sleeper()], log=log).run()
    assert outcome.exit_code == 0 and outcome.reason == "stopped"
    assert "polling" not in log.text
    assert log.text.index("IPC socket") < log.text.index("started fm")


def test_socket_readiness_falls_back_to_polling_without_inotify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_inotify(directory: str) -> None:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(loop, "Inotify", no_inotify)
    path = str(tmp_path / "ipc.sock")
    log = StopOn("fabric ready in")
    outcome = Supervisor([service("sm", SOCKET_SERVER, path, "0.05", ready_socket=path),
                          sleeper()], log=log).run()
    assert outcome.exit_code == 0
    assert "inotify unavailable (Function not implemented); polling" in log.text
    assert "sm IPC socket" in log.text


def test_socket_timeout_stops_the_service(tmp_path: Path) -> None:
    path = str(tmp_path / "never.sock")
    log = StopOn("^$")  # never stops by itself
    outcome = Supervisor([sleeper("sm", ready_socket=path, grace_s=0.2), sleeper()],
                         Policy(socket_timeout_s=0.2), log=log).run()
    assert outcome.exit_code == 1
    assert outcome.findings[0].code == "socket_timeout"
    assert "started fm" not in log.text and "sm stopped" in log.text


def _probe(ready: bool = True, registered: bool = True, supported: bool = True
           ) -> Callable[[], GpuCheck]:
    return lambda: GpuCheck(ready, registered, "8 GPUs: completed x8", supported=supported)


#: A daemon that crashes (exit 1) on SIGUSR1: :class:`CrashOnReady` sends it once the unit is
#: ready, so the crash follows readiness however slow the machine (not a timer that a loaded
#: machine may make fire first).
CRASH_ON_USR1 = ("import signal, sys, time\n"
                 "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(1))\n"
                 "print('up', flush=True)\n"
                 "time.sleep(60)\n")


class CrashOnReady(StopOn):
    """:class:`StopOn` that, at the first ``fabric ready in`` line, makes the daemon the line
    names crash (SIGUSR1, :data:`CRASH_ON_USR1`)."""

    def line(self, text: str) -> None:
        m = re.search(r"fabric ready in .*\(\w+ pid (\d+)", text)
        first = m is not None and not any("fabric ready in" in x for x in self.lines)
        super().line(text)
        if m is not None and first:
            os.kill(int(m.group(1)), signal.SIGUSR1)


def _reset_aware_probe(marker: Path) -> Callable[[], GpuCheck]:
    """GPUs registered, except in the first reading after the reset command (which creates
    ``marker``): the reset is seen, as R09 wants it checked."""

    def probe() -> GpuCheck:
        if marker.exists():
            marker.unlink()
            return GpuCheck(False, False, "8 GPUs: not_started x8")
        return GpuCheck(True, True, "8 GPUs: completed x8")

    return probe


def test_r04_reset_command_runs_before_the_restart(tmp_path: Path) -> None:
    log = CrashOnReady("fabric ready in", count=2)
    spec = service("fabricmanager", CRASH_ON_USR1, ready_gpus=True,
                   restart_needs_gpu_reset=True)
    marker = tmp_path / "reset-done"
    policy = Policy(restart="on-failure", backoff_base_s=0.01,
                    gpu_reset_argv=(PY, "-c", f"print('GPUs reset'); open({str(marker)!r}, 'w')"))
    outcome = Supervisor([spec], policy, log=log, probe=_reset_aware_probe(marker)).run()
    assert outcome.exit_code == 0 and outcome.restarts == 1
    text = log.text
    assert text.index("gpu-reset: GPUs reset") < text.rindex("started fabricmanager")
    assert text.index("GPU reset checked: 8 GPUs: not_started x8") < text.rindex(
        "started fabricmanager")


class Catalogue:
    """A classifier with one signature: a line with 'NV_WARN_NOTHING_TO_DO'."""

    def __init__(self) -> None:
        self.seen: list[Finding] = []

    def feed(self, line: str) -> list[Finding]:
        if "NV_WARN_NOTHING_TO_DO" not in line:
            return []
        f = Finding("nvlsm_missing", "error", "fabric manager found nothing to do")
        self.seen.append(f)
        return [f]

    def findings(self) -> list[Finding]:
        return list(self.seen)


def test_a_known_failure_line_yields_its_finding_at_once_and_explains_the_exit() -> None:
    log = StopOn("^$")
    code = ("import time; print('WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]', flush=True); "
            "time.sleep(0.2); raise SystemExit(1)")
    outcome = Supervisor([service("fabricmanager", code)], log=log,
                         classifier=lambda name: Catalogue()).run()
    lines = log.lines
    child = next(i for i, x in enumerate(lines) if x.startswith("fabricmanager: WARNING"))
    assert lines[child + 1].startswith("nvfabric: error nvlsm_missing")  # before the exit
    assert [f.code for f in outcome.findings] == ["service_exited", "nvlsm_missing"]
    exited = outcome.findings[0]
    assert exited.fields["diagnosis"] == ["nvlsm_missing"] and exited.fields["exit_code"] == 1
    assert exited.fields["last_lines"] == ["WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"]


def test_a_last_line_without_newline_is_kept_when_the_output_closes_before_the_exit() -> None:
    # The daemon prints its last words without a newline, closes its output, then exits:
    # end-of-output is seen first, the exit later, and the line must still be logged.
    code = ("import os, time; os.write(1, b'fatal: cannot open /dev/nvidia-nvswitchctl'); "
            "os.close(1); os.close(2); time.sleep(0.3); os._exit(1)")
    log = StopOn("^$")
    outcome = Supervisor([service("fabricmanager", code)], log=log).run()
    assert outcome.exit_code == 1
    assert "fabricmanager: fatal: cannot open /dev/nvidia-nvswitchctl" in log.lines
    assert outcome.findings[0].fields["last_lines"] == [
        "fatal: cannot open /dev/nvidia-nvswitchctl"]


def test_without_fabric_state_the_success_line_means_ready() -> None:
    log = StopOn("fabric ready in")
    code = "import time; time.sleep(0.2); print('Successfully configured all', flush=True); " \
           "time.sleep(60)"
    spec = service("fabricmanager", code, ready_gpus=True,
                   ready_line="Successfully configured all")
    outcome = Supervisor([spec], log=log, probe=_probe(False, False, supported=False)).run()
    assert outcome.exit_code == 0 and outcome.ready_after_s is not None
    assert "taking fabricmanager's success line as readiness" in log.text


def test_gpus_that_never_register_are_reported_not_ready() -> None:
    log = StopOn("registration_stuck")
    check = GpuCheck(False, False, "8 GPUs: in_progress x8", "NVML: driver not loaded")
    spec = fabricmanager.spec(PY, "/usr/share/nvidia/nvswitch/fabricmanager.cfg", None,
                              needs_reset=False)
    spec = replace(spec, argv=sleeper().argv)
    outcome = Supervisor([spec],
                         Policy(ready_timeout_s=0.3, probe_interval_s=0.05), log=log,
                         probe=lambda: check).run()
    assert outcome.exit_code == 0 and outcome.ready_after_s is None
    assert [f.code for f in outcome.findings] == ["registration_stuck"]
    stuck = outcome.findings[0]
    assert "fabric manager" in stuck.message and "802" in stuck.message
    assert (stuck.fields["service"], stuck.fields["timeout_s"]) == ("fabricmanager", 0.3)
    assert "nvfabric: GPU fabric state not readable yet: NVML: driver not loaded" in log.lines
    assert "fabric ready" not in log.text and "IMEX" not in log.text


def test_imex_not_ready_is_logged_and_reported_in_imex_terms() -> None:
    # The IMEX probe (nvidia-imex-ctl -q, then -N -j) says why the daemon is not READY.
    log = StopOn("imex_not_ready")
    why = "domain DEGRADED, waiting for 198.51.100.1 (node 0)"
    spec = mnnvl.spec(PY, "/etc/nvidia-imex/config.cfg")
    spec = replace(spec, argv=(PY, "-c", "import time; time.sleep(60)"))
    outcome = Supervisor([spec], Policy(ready_timeout_s=0.3, probe_interval_s=0.05), log=log,
                         probe=lambda: GpuCheck(False, False, "not ready", why)).run()
    assert outcome.exit_code == 0 and outcome.ready_after_s is None
    assert [f.code for f in outcome.findings] == ["imex_not_ready"]
    stuck = outcome.findings[0]
    assert f"(last answer: {why})" in stuck.message  # the probe's words, not a guess
    assert "IMEX peers of its node list" in stuck.hint
    assert "fabric manager" not in stuck.message + stuck.hint
    assert (stuck.fields["service"], stuck.fields["last_probe"]) == ("imex", why)
    assert f"nvfabric: IMEX not READY yet: {why}" in log.lines
    assert "GPU fabric state" not in log.text and "registration_stuck" not in log.text


def test_a_binary_that_cannot_be_executed_is_a_clear_failure(tmp_path: Path) -> None:
    outcome = Supervisor([ServiceSpec("nvlsm", (str(tmp_path / "missing"),))],
                         log=StopOn("^$")).run()
    assert outcome.exit_code == 1
    assert outcome.findings[0].code == "binary_missing"


#: A service that reports how it was started: its parent-death signal (prctl
#: PR_GET_PDEATHSIG = 2), whether it leads its own process group, and its blocked and ignored
#: signal masks (/proc/self/status).
SPAWN_REPORT = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
sig = ctypes.c_int(-1)
libc.prctl(2, ctypes.byref(sig), 0, 0, 0)
with open("/proc/self/status") as fh:
    masks = {k: v.strip() for k, _, v in (l.partition(":") for l in fh)}
print("pdeathsig", sig.value, "leader", os.getpgid(0) == os.getpid(),
      "blocked", masks["SigBlk"], "ignored", masks["SigIgn"], "stdin", os.read(0, 1), flush=True)
"""


def test_children_get_sigterm_when_the_supervisor_dies_and_clean_signal_state() -> None:
    # The supervisor itself ignores SIGPIPE (Python) and here also SIGHUP (nohup) and blocks
    # SIGUSR1; none of that may leak into a daemon.
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        log = StopOn(r"^$")
        Supervisor([service("sm", SPAWN_REPORT)], log=log).run()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        signal.signal(signal.SIGHUP, old)
    (line,) = [t for t in log.lines if t.startswith("sm: pdeathsig")]
    _, pdeathsig, _, leader, _, blocked, _, ignored, _, stdin = line.split()[1:]
    assert (int(pdeathsig), leader, stdin) == (signal.SIGTERM, "True", "b''")
    assert int(blocked, 16) == 0
    # (a Python service sets SIGPIPE and SIGXFSZ to ignored itself at start-up)
    watched = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD)
    assert int(ignored, 16) & sum(1 << (s - 1) for s in watched) == 0


def test_ready_file_written_when_ready_and_removed_at_stop(tmp_path: Path) -> None:
    ready = tmp_path / "state/ready"
    seen: list[bool] = []

    class Watch(StopOn):
        def line(self, text: str) -> None:
            if "fabric ready in" in text:
                seen.append(ready.exists())
            super().line(text)

    Supervisor([sleeper()], log=Watch("fabric ready in"), ready_file=str(ready)).run()
    assert seen == [True] and not ready.exists()
    assert stat.S_IMODE(ready.parent.stat().st_mode) == 0o700


def test_sd_notify_abstract_and_path_sockets(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        name = f"nvfabric-test-{os.getpid()}"
        sock.bind("\0" + name)
        assert sd_notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"READY=1"
    assert not sd_notify("READY=1", {})
    assert not sd_notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "nobody")})


def test_ensure_dir_creates_0700_whatever_the_umask_and_leaves_existing_alone(
        tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        assert ensure_dir(str(tmp_path / "a/b"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a/b").stat().st_mode) == 0o700
    (tmp_path / "c").mkdir()
    os.chmod(tmp_path / "c", 0o751)
    assert not ensure_dir(str(tmp_path / "c"))
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o751


def test_control_characters_of_daemon_output_never_reach_the_terminal_raw() -> None:
    stream = io.StringIO()
    code = r"import sys; sys.stdout.write('\x1b[2Jwiped\x07\tok\x9b\rover\n')"
    outcome = Supervisor([service("sm", code)], log=Log(stream)).run()
    assert outcome.findings[0].code == "service_exited"
    text = stream.getvalue()
    assert all(TIMESTAMP.match(x) for x in text.splitlines())
    assert "sm: \\x1b[2Jwiped\\x07\tok\\x9b\\x0dover" in [
        TIMESTAMP.sub("", x, count=1) for x in text.splitlines()]
    assert not any(ord(c) < 32 and c not in "\t\n" or 127 <= ord(c) < 160 for c in text)


# ---------------------------------------------------------------- systemd: watchdog, STATUS=


@pytest.mark.parametrize(("env", "pid", "expected"), [
    ({}, 100, None),                                               # no watchdog configured
    ({"WATCHDOG_USEC": "30000000"}, 100, 30_000_000),              # no pid: it is ours
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "100"}, 100, 30_000_000),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "101"}, 100, None),  # a parent's: not ours
    ({"WATCHDOG_USEC": "0"}, 100, None),
    ({"WATCHDOG_USEC": "-5"}, 100, None),
    ({"WATCHDOG_USEC": "30s"}, 100, None),
    ({"WATCHDOG_USEC": "٣٠"}, 100, None),                          # Arabic-Indic digits
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, 100, None),
])
def test_watchdog_usec_follows_sd_watchdog_enabled(env: dict[str, str], pid: int,
                                                   expected: int | None) -> None:
    assert notify.watchdog_usec(env, (pid,)) == expected


def test_watchdog_usec_takes_any_pid_this_process_pings_for() -> None:
    # the single-file binary's child pings for itself and for the bootloader (its main pid)
    env = {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "101"}
    assert notify.watchdog_usec(env, (100, 101)) == 30_000_000
    assert notify.watchdog_usec(env, (100, 102)) is None


class Listener:
    """A systemd-like receiver of sd_notify datagrams on ``path``, read as they come (in a
    thread, as systemd does: the queue of a Unix datagram socket holds only 10).
    ``stop_after_pings``: SIGTERM this process once that many ``WATCHDOG=1`` came and
    ``also()`` holds (events, not a time a loaded machine may overrun)."""

    def __init__(self, path: Path, stop_after_pings: int | None = None) -> None:
        self.also: Callable[[], bool] = lambda: True
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self.stop_after_pings = stop_after_pings
        self.done = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _take(self, data: bytes) -> None:
        self.messages.append(data.decode())
        if self.stop_after_pings is not None and \
                self.messages.count("WATCHDOG=1") >= self.stop_after_pings and self.also():
            self.stop_after_pings = None
            os.kill(os.getpid(), signal.SIGTERM)

    def _read(self) -> None:
        while not self.done:
            try:
                self._take(self.sock.recv(4096))
            except TimeoutError:
                continue

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        # the sender is done (Supervisor.run returned): what it sent is read or queued here
        self.done = True
        self.thread.join()
        self.sock.setblocking(False)
        while True:
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                break
        self.sock.close()


def test_sd_notify_gives_up_on_a_receiver_that_never_reads(tmp_path: Path) -> None:
    # a Unix datagram socket queues net.unix.max_dgram_qlen datagrams; then senders block
    qlen = int(Path("/proc/sys/net/unix/max_dgram_qlen").read_text())
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "full.sock"))
        env = {"NOTIFY_SOCKET": str(tmp_path / "full.sock")}
        sent = 0
        while True:
            t0 = time.monotonic()
            if not sd_notify("WATCHDOG=1", env):
                waited = time.monotonic() - t0
                break
            sent += 1
            assert sent <= qlen + 1, "the queue never filled"
    assert sent >= qlen  # the queue took what it holds, then the sender gave up
    assert 0.4 <= waited < 2.0  # bounded (0.5 s), never blocked for good


class StopAfter(StopOn):
    """A log that sends SIGTERM ``delay_s`` after a matching line (from a timer thread, so the
    supervisor's loop is what keeps turning meanwhile)."""

    def __init__(self, pattern: str, delay_s: float) -> None:
        super().__init__(pattern)
        self.delay_s = delay_s

    def line(self, text: str) -> None:
        self.lines.append(text)
        if self.count and self.rx.search(text):
            self.count = 0
            threading.Timer(self.delay_s, os.kill, (os.getpid(), signal.SIGTERM)).start()


def test_watchdog_pings_at_half_the_interval_and_children_do_not_inherit_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener = Listener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # 0.2 s: a ping every 0.1 s
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    code = ("import os, time; print('env', os.environ.get('WATCHDOG_USEC'), "
            "os.environ.get('WATCHDOG_PID'), os.environ.get('NOTIFY_SOCKET'), flush=True); "
            "time.sleep(60)")
    log = StopOn("^$")
    # SIGTERM once 3 pings came (0.2 s of them at least) and the child printed its line
    listener.also = lambda: "fm: env None None None" in log.lines
    listener.stop_after_pings = 3
    started = time.monotonic()
    outcome = Supervisor([service("fm", code)], log=log).run()
    elapsed = time.monotonic() - started
    with listener:
        messages = listener.messages
    assert outcome.exit_code == 0
    pings = messages.count("WATCHDOG=1")
    # the wiring: one at once, then every 0.1 s (the exact schedule: the fake-clock test
    # test_supervisor_machine.py::test_the_watchdog_pings_every_half_interval_on_time)
    assert 2 <= pings <= elapsed / 0.1 + 2, (pings, elapsed, messages)
    assert "fm: env None None None" in log.lines


def test_no_watchdog_ping_without_watchdog_usec_or_for_another_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener = Listener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # meant for another process
    outcome = Supervisor([sleeper()], log=StopAfter("fabric ready in", 0.3)).run()
    with listener:
        messages = listener.messages
    assert outcome.exit_code == 0
    assert "WATCHDOG=1" not in messages and messages[0].startswith("READY=1")


def test_status_says_what_the_unit_waits_for_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener = Listener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    path = str(tmp_path / "ipc.sock")
    answers = iter([GpuCheck(False, False, "8 GPUs: in_progress x8", progress=(0, 8)),
                    GpuCheck(False, True, "8 GPUs: completed x3, in_progress x5",
                             progress=(3, 8))])

    def probe() -> GpuCheck:
        return next(answers, GpuCheck(True, True, "8 GPUs: completed x8", progress=(8, 8)))

    fm = replace(sleeper("fabricmanager"), ready_gpus=True)
    outcome = Supervisor([service("nvlsm", SOCKET_SERVER, path, "0.1", ready_socket=path), fm],
                         Policy(probe_interval_s=0.01), log=StopOn("fabric ready in"),
                         probe=probe).run()
    with listener:
        # a server that the kernel preempts between its bind and its listen is seen bound
        # first: then the unit also says that it waits for the listen (and only then)
        messages = [m for m in listener.messages
                    if m != f"STATUS=waiting for nvlsm to listen on {path}"]
    assert outcome.exit_code == 0
    assert messages[:5] == [
        f"STATUS=waiting for nvlsm IPC socket {path}",
        "STATUS=fabricmanager started; waiting for GPU fabric state",
        "STATUS=waiting for GPU fabric registration: 0/8 GPUs completed",
        "STATUS=waiting for GPU fabric registration: 3/8 GPUs completed",
        f"READY=1\nSTATUS=fabric ready in {outcome.ready_after_s:.1f} s",
    ]
    assert messages[5:] == ["STOPPING=1", "STATUS=stopping fabricmanager",
                            "STATUS=stopping nvlsm"]


def test_a_probe_answer_with_a_newline_cannot_forge_a_notify_assignment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener = Listener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    answers = iter([GpuCheck(False, False, "unreadable", "nvidia-smi said:\nREADY=1")])

    def probe() -> GpuCheck:
        return next(answers, GpuCheck(True, True, "8 GPUs: completed x8", progress=(8, 8)))

    fm = replace(sleeper("fabricmanager"), ready_gpus=True)
    Supervisor([fm], Policy(probe_interval_s=0.01), log=StopOn("fabric ready in"),
               probe=probe).run()
    with listener:
        messages = listener.messages
    assert "STATUS=waiting for GPU fabric state: nvidia-smi said:\\x0aREADY=1" in messages
    assert [m for m in messages if "READY=1" in m.split("\n")] == [
        m for m in messages if m.startswith("READY=1\nSTATUS=fabric ready in")]


def test_status_of_a_path_that_is_not_utf8_is_sent_escaped_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a --root or socket directory whose name is not UTF-8 (Python holds the byte 0xff as
    # the surrogate escape U+DCFF): the STATUS= line cannot be encoded as it is
    listener = Listener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/node\xff")
    os.mkdir(odd)
    path = odd + "/ipc.sock"
    outcome = Supervisor([service("nvlsm", SOCKET_SERVER, path, "0.1", ready_socket=path),
                          sleeper("fabricmanager")], log=StopOn("fabric ready in")).run()
    with listener:
        messages = listener.messages
    assert outcome.exit_code == 0
    assert messages[0] == f"STATUS=waiting for nvlsm IPC socket {tmp_path}/node\\xff/ipc.sock"
    assert any(m.startswith("READY=1\n") for m in messages)


def test_sd_notify_never_raises_for_text_that_is_not_utf8(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "n.sock"))
        assert sd_notify("STATUS=a\udcffb", {"NOTIFY_SOCKET": str(tmp_path / "n.sock")})
        assert sock.recv(100) == b"STATUS=a\\udcffb"
    assert printable("x\udcff\ud800\x1b") == "x\\xff\\ud800\\x1b"


def test_a_long_probe_answer_keeps_the_status_datagram_within_what_systemd_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi's error output can be long; systemd drops a notify datagram over 4096 bytes
    listener = Listener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    long_error = "NVML: " + "é" * 3000  # 6000 bytes of UTF-8
    answers = iter([GpuCheck(False, False, "unreadable", long_error)])

    def probe() -> GpuCheck:
        return next(answers, GpuCheck(True, True, "8 GPUs: completed x8", progress=(8, 8)))

    fm = replace(sleeper("fabricmanager"), ready_gpus=True)
    Supervisor([fm], Policy(probe_interval_s=0.01), log=StopOn("fabric ready in"),
               probe=probe).run()
    with listener:
        messages = listener.messages
    waiting = [m for m in messages if m.startswith("STATUS=waiting for GPU fabric state: NVML")]
    assert len(waiting) == 1 and waiting[0].endswith("é...")
    assert len(waiting[0].encode()) <= len("STATUS=") + notify.STATUS_MAX_BYTES


def test_ready_with_a_long_reason_stays_one_datagram_systemd_accepts(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch
                                                                    ) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "n.sock"))
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "n.sock"))
        assert notify.notify_nothing_to_start("fabric none: " + "x" * 5000)
        data = sock.recv(65536)
    assert data.startswith(b"READY=1\nSTATUS=fabric none: xxx") and data.endswith(b"...")
    assert len(data) <= 4096


def test_sd_notify_ignores_a_notify_socket_that_is_neither_absolute_nor_abstract(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # sd_notify(3) accepts "/path" or "@name" only; a relative name would reach whatever
    # socket of that name is in the working directory
    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("notify.sock")
        sock.settimeout(0.2)
        assert not sd_notify("READY=1", {"NOTIFY_SOCKET": "notify.sock"})
        assert not sd_notify("READY=1", {"NOTIFY_SOCKET": "@"})
        with pytest.raises(TimeoutError):
            sock.recv(100)
        assert sd_notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        assert sock.recv(100) == b"READY=1"


@pytest.mark.parametrize("grace_s, watchdog_usec", [(1e7, None), (10.0, str(10**14))])
def test_a_timer_further_away_than_epoll_can_wait_is_waited_for_not_a_crash(
        monkeypatch: pytest.MonkeyPatch, grace_s: float, watchdog_usec: str | None) -> None:
    # epoll_wait's timeout is an int of milliseconds (about 24.8 days): a --grace of 1e7 s
    # while stopping, or a watchdog interval of 100 million s once ready, is the only timer
    if watchdog_usec is not None:
        monkeypatch.setenv("WATCHDOG_USEC", watchdog_usec)
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    log = StopOn("fabric ready in")
    outcome = Supervisor([sleeper("fm", grace_s=grace_s)], log=log).run()
    assert (outcome.exit_code, outcome.reason) == (0, "stopped")
    assert "fm stopped" in log.text


def test_the_running_supervisor_can_be_read_while_it_runs() -> None:
    from nvfabric.supervisor.running import current as running

    seen: list[list[dict[str, object]]] = []

    class Snap(StopOn):
        def line(self, text: str) -> None:
            if "fabric ready in" in text:
                current = running()
                assert current is not None
                seen.append(current.snapshot())
            super().line(text)

    assert running() is None
    outcome = Supervisor([sleeper("fm")], log=Snap("fabric ready in")).run()
    assert outcome.exit_code == 0 and running() is None
    ((fm,),) = seen
    assert (fm["service"], fm["state"], fm["ready"], fm["restarts"]) == ("fm", "ready", True, 0)
    assert isinstance(fm["pid"], int) and fm["exits"] == {}

"""The lean supervisor (issue 15): ``nvfabric run`` plans and checks in the full CLI, then
execs into nvfabric.supervisor.lean with the prepared unit as JSON. Same pid (the run lock,
the readiness file, systemd's main pid), the lock kept across the exec and never inherited by
a daemon, the job validated before anything starts."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from nvfabric.bringup import fabricmanager, mnnvl
from nvfabric.effects.runlock import acquire_run_lock, adopt_run_lock, run_lock_holder
from nvfabric.model.commandline import HintContext
from nvfabric.supervisor.job import Job, JobError, Report, job_from_json
from nvfabric.supervisor.policy import Policy
from tests import runkit
from tests.runkit import Run, events, sim, until


def _job(**kw: object) -> Job:
    fm = fabricmanager.spec("/usr/bin/nv-fabricmanager", "/run/nvfabric/fabricmanager.cfg",
                            "0xe09d730300e400e8", needs_reset=True)
    imex = replace(mnnvl.spec("/usr/bin/nvidia-imex", "/etc/nvidia-imex/config.cfg"),
                   env=(("A", "1"),), runtime_dirs=("/run/x",))
    values: dict[str, object] = dict(
        specs=(fm, imex), policy=Policy(restart="on-failure", gpu_reset_argv=("/r", "-r"),
                                        start_limit_burst=5),
        report=Report(True, {"result": "stopped", "fabric": "nvlink5"},
                      ({"code": "x", "message": "m"},)),
        ready_file="/run/nvfabric/ready", ready_info={"fabric": "nvlink5"},
        pid_dir="/run/nvfabric", fabric="nvlink5", probe_root="/", state_dir="/run/nvfabric",
        fm_check=("/usr/bin/nv-fabricmanager", "570.133.20"), lock_fd=7,
        hints=HintContext("/srv/node", "nvfabric", True, "", "nvfabric", "nvfabric",
                          "/run/nvfabric/imex/config.cfg"))
    values.update(kw)
    return Job(**values)  # type: ignore[arg-type]


def test_a_job_survives_its_json_form_unchanged() -> None:
    job = _job()
    text = json.dumps(job.to_json())
    assert job_from_json(json.loads(text)) == job
    assert job_from_json(json.loads(json.dumps(_job(fm_check=None, lock_fd=None,
                                                    probe_root=None).to_json()))) == _job(
        fm_check=None, lock_fd=None, probe_root=None)


@pytest.mark.parametrize(("damage", "says"), [
    (lambda j: j.update(version=2), "not a job of version 1"),
    (lambda j: j.update(specs=[]), "specs"),
    (lambda j: j["specs"][0].update(argv=["relative/nv-fabricmanager"]), "specs[0]"),
    (lambda j: j["specs"][0].update(argv="/bin/sh -c x"), "specs[0].argv"),
    (lambda j: j["specs"][1].pop("ready_probe"), "specs[1]"),
    (lambda j: j["specs"][1].update(env=[["A"]]), "specs[1].env"),
    (lambda j: j["policy"].update(restart="always"), "policy"),
    (lambda j: j.update(lock_fd="7"), "lock_fd"),
    (lambda j: j.update(fm_check=["/usr/bin/nv-fabricmanager"]), "fm_check"),
    (lambda j: j.pop("hints"), "hints"),
    (lambda j: j["hints"].update(root=None), "hints"),
    (lambda j: j["hints"].update(fm_runner="systemd"), "hints"),
    (lambda j: j["hints"].update(extra=1), "hints"),
])
def test_a_damaged_job_is_refused_naming_where(damage: Callable[[dict[str, object]], None],
                                               says: str) -> None:
    raw = _job().to_json()
    damage(raw)
    with pytest.raises(JobError) as err:
        job_from_json(raw)
    assert str(err.value).startswith(says), err.value


def test_the_run_lock_is_adopted_only_through_its_own_descriptor(tmp_path: Path) -> None:
    lock, holder = acquire_run_lock(str(tmp_path / "state"))
    assert lock is not None and holder is None
    os.set_inheritable(lock.fd, True)  # as before the exec
    adopted = adopt_run_lock(str(tmp_path / "state"), lock.fd)
    assert adopted.fd == lock.fd and not os.get_inheritable(lock.fd)  # no daemon inherits it
    assert run_lock_holder(str(tmp_path / "state")) == os.getpid()
    other = os.open(tmp_path / "other", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        with pytest.raises(OSError, match="not the run lock"):
            adopt_run_lock(str(tmp_path / "state"), other)
    finally:
        os.close(other)
    os.close(lock.fd)


def _fds(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return out


def test_run_execs_into_the_lean_supervisor_with_the_same_pid_and_lock(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    pid = run.proc.pid
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--supervise-fd" in cmdline and b"nvfabric.supervisor.lean" in b" ".join(cmdline)
    state = root / "run/nvfabric"
    until(lambda: (state / "ready").exists(), "the ready file")
    assert json.loads((state / "ready").read_text())["pid"] == pid
    assert run_lock_holder(str(state)) == pid
    assert str(state / "run.lock") in _fds(pid)
    ready = runkit.run([sys.executable, "-m", "nvfabric", "ready", "--root", str(root), "--json"])
    assert ready.returncode == 0 and json.loads(ready.stdout)["run"]["pid"] == pid
    for prog in ("nvlsm", "fabricmanager"):  # neither the lock nor the job reached a daemon
        daemon = _fds(int(events(root, prog, "exec")[0]["pid"]))
        assert not [f for f in daemon if "run.lock" in f or "nvfabric-unit" in f], daemon
    assert not [f for f in _fds(pid) if "nvfabric-unit" in f]  # the job's memfd is closed
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    result = run.result()
    assert (result["result"], result["exit_code"], result["fabric"]) == ("stopped", 0, "nvlink5")
    assert [p["service"] for p in result["processes"]] == ["nvlsm", "fabricmanager"]
    assert result["files"] and result["ready_after_s"] is not None


def test_in_process_supervision_is_the_same_run(tmp_path: Path,
                                                start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    run = start(root, "--json", env={"NVFABRIC_SUPERVISE_IN_PROCESS": "1"})
    run.wait_line(r"fabric ready in")
    cmdline = Path(f"/proc/{run.proc.pid}/cmdline").read_bytes()
    assert b"--supervise-fd" not in cmdline
    run.signal(signal.SIGTERM)
    assert run.wait() == 0 and run.result()["result"] == "stopped"


def test_the_lean_entry_point_refuses_a_descriptor_that_is_not_a_job(tmp_path: Path) -> None:
    boot = "import sys; from nvfabric.supervisor.lean import main; main(sys.argv[1:])"
    bad = tmp_path / "job"
    bad.write_text('{"version": 1, "specs": []}')
    with open(bad, "rb") as fh:
        proc = runkit.run([sys.executable, "-c", boot, "--supervise-fd", str(fh.fileno())],
                          pass_fds=(fh.fileno(),))
    assert proc.returncode == 3
    assert proc.stderr.startswith("nvfabric: internal_error: the prepared unit cannot be "
                                  "taken over: specs: a non-empty list")
    usage = runkit.run([sys.executable, "-c", boot])
    assert usage.returncode == 2 and "started by nvfabric run" in usage.stderr


def test_a_stop_signal_during_the_exec_is_kept_for_the_lean_process(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # SIGTERM the moment the process is the lean interpreter (still importing, tens of ms):
    # blocked across the exec, it stays pending until the loop handles it: an orderly stop
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 30}})
    run = start(root, "--json")
    cmdline = Path(f"/proc/{run.proc.pid}/cmdline")
    until(lambda: b"--supervise-fd" in cmdline.read_bytes(), "the exec", bound=60)
    run.signal(signal.SIGTERM)
    assert run.wait() == 0, run.log
    assert run.result()["result"] == "stopped"
    assert not events(root, "fabricmanager", "exec")


#: Modules the lean supervisor process must not hold once the unit is ready (its idle resident
#: memory): the CLI and the procedures, the preflight's readers and rules, the GPU reading
#: (done in a short-lived child), logging and datetime (log lines are formatted directly),
#: subprocess (only a GPU reset runs one) and queue (the loop's own wakeups replace it).
#: socket is held, with the selectors and math it imports: effects/sockets uses the public
#: module, not the private C one under it (about 0.45 MiB; bench/bench_run.py). shlex is
#: held (about 29 KB): the run's hints are typed for its root, quoted
#: (nvfabric.model.commandline.HintContext, which the kernel watch's findings are rendered by).
HEAVY = (
    "logging", "datetime", "_datetime", "xml.etree.ElementTree", "pyexpat", "subprocess",
    "csv", "queue", "heapq", "textwrap",
    "traceback", "nvfabric.app", "nvfabric.facts.probes", "nvfabric.facts.gpu",
    "nvfabric.facts.smi", "nvfabric.facts.nvml", "nvfabric.rules.preflight",
    "nvfabric.rules.nodefacts",
    "nvfabric.artifacts", "nvfabric.model.versions", "nvfabric.model.inventory",
    "nvfabric.model.health", "nvfabric.model.mask",
    "nvfabric.effects.logformat", "nvfabric.cli", "nvfabric.bringup.prepared", "click", "rich",
)

#: Prepended to the lean bootstrap (nvfabric.supervisor.lean._BOOT): a thread that waits for
#: the readiness file (the GPU probe has answered: fabric manager is ready on GPUs), lets the
#: ready-time work settle, writes the process's modules and SIGTERMs it. It uses only
#: modules every interpreter starts with.
_WATCH = r'''
import os, sys, time, _thread
def _watch(ready=os.environ["LEAN_READY"], out=os.environ["LEAN_MODULES"]):
    while not os.path.exists(ready):
        time.sleep(0.02)
    time.sleep(0.5)
    with open(out + ".part", "w") as fh:
        fh.write("\n".join(sorted(sys.modules)))
    os.rename(out + ".part", out)
    os.kill(os.getpid(), 15)
_thread.start_new_thread(_watch, ())
'''
_RUN = r'''
import os, sys
import nvfabric.supervisor.lean as lean
lean._BOOT = os.environ["LEAN_WATCH"] + lean._BOOT
from nvfabric.cli import main
sys.argv = ["nvfabric", *sys.argv[1:]]
main()
'''


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_lean_process_holds_none_of_the_heavy_modules_once_ready(
        tmp_path: Path, log_format: str) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 0},
                                      "fabricmanager": {"register_delay_s": 0}})
    out = tmp_path / "modules"
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "NVFABRIC_DEBUG")}
    env.update(LEAN_WATCH=_WATCH, LEAN_READY=str(root / "run/nvfabric/ready"),
               LEAN_MODULES=str(out))
    done = runkit.run([sys.executable, "-c", _RUN, "run", "--root", str(root), "--log-format",
                       log_format],
                      env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # stopped by the SIGTERM, orderly
    modules = set(out.read_text().split())
    # it is the lean process that answered, after the probe and the readiness
    assert {"nvfabric.supervisor.lean", "nvfabric.supervisor.loop",
            "nvfabric.supervisor.gpuprobe", "nvfabric.rules.diagnose"} <= modules
    assert "nvfabric.cli" not in modules and "__main__" in modules
    held = sorted(m for m in modules for heavy in HEAVY
                  if m == heavy or m.startswith(heavy + "."))
    assert held == []  # JSON lines too are written without logging
    lines = done.stderr.splitlines()
    assert any("fabric ready in" in x for x in lines)
    if log_format == "json":
        assert all(json.loads(x)["time"].endswith("Z") for x in lines if x.startswith("{"))

"""The lean supervisor process: ``nvfabric run`` plans and checks in the full CLI, then
``execv``\\s into this entry point, which imports only what supervising needs, so that the
process that stays up for days holds a few MiB instead of the whole CLI.

- Same pid: systemd's main pid, ``$WATCHDOG_PID``, PID 1 in a container and the pid in the
  run lock and the readiness file all stay right; the environment (``$NOTIFY_SOCKET``, ...)
  is kept.
- The prepared unit crosses the exec as JSON (:mod:`nvfabric.supervisor.job`) in an anonymous
  memory file (memfd_create(2)) whose descriptor number is the argument; it is validated
  before anything starts (a job that does not parse is exit 3, a bug, nothing started).
- The run lock's descriptor is made inheritable for the exec only and adopted on the other
  side (:func:`nvfabric.effects.runlock.adopt_run_lock`: same file, still ours, close-on-exec
  again so that no daemon inherits it). The lock is never released in between: flock(2)
  locks belong to the open file, which the exec keeps.
- Command: ``python -S -c <bootstrap> run --supervise-fd N PATHS PYTHON ARGS`` (``-S``: no
  site import; the CLI's ``sys.path`` is passed instead; ``ARGS``: the command's own, shown
  by ps). The one-dir build (``make dist-dir``) execs itself:
  ``nvfabric --supervise-fd N ARGS``, which its entry (packaging/dist/nvfabric-entry.py,
  :func:`nvfabric.effects.frozen.supervising`) hands to :func:`main` before anything of the
  CLI is imported; its bootloader runs Python in the same
  process (same pid). The single-file binary is not re-executed: its executable is
  PyInstaller's bootloader, which would unpack itself again and run Python as a new child
  (another pid, the lock's pid no longer the supervisor's), so it supervises in-process (its
  caller says so: ``in_process``), as does a run where the exec fails.
- At the end the outcome is reported as ``nvfabric run`` reports it (``--json``: the one
  object; else one closing line on failure) and the process ends with ``os._exit`` once
  stdout and stderr are flushed: nothing is left to clean up, and the interpreter's teardown
  is not on the path from a dying daemon to the exit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from nvfabric.effects import stop
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.strict import is_uint, parse_json
from nvfabric.supervisor import running
from nvfabric.supervisor.gpuprobe import CHILD_BOUND_S, in_child
from nvfabric.supervisor.job import Job, job_from_json
from nvfabric.supervisor.outcome import Outcome

if TYPE_CHECKING:
    from nvfabric.effects.history import History
    from nvfabric.model.findings import Finding
    from nvfabric.supervisor.kernelwatch import KernelWatch
    from nvfabric.supervisor.policy import Classifier

#: The flag of the lean entry point (``python -S -c BOOT run --supervise-fd N PATHS PYTHON``).
FLAG = "--supervise-fd"
_BOOT = ("import sys, json; sys.path[:0] = json.loads(sys.argv[4]); sys.executable = sys.argv[5]; "
         "from nvfabric.supervisor.lean import main; main(sys.argv[2:])")
_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Set (to anything) to keep the supervisor in the CLI process (no exec), e.g. to debug it.
NO_EXEC_ENV = "NVFABRIC_SUPERVISE_IN_PROCESS"


def supervise(job: Job, in_process: bool = False) -> NoReturn:
    """Supervise ``job`` until it ends, then report and exit: in the lean process (exec, see
    the module docstring) where possible, else here (``in_process``: this process serves
    ``run --listen``'s HTTP endpoint, whose threads an exec would end)."""
    # the stop signals from here on belong to the supervisor (the lean process, or the loop
    # here); a stop that came before is the command's: Stopped (nvfabric.effects.stop)
    stop.handover()
    if not in_process and not os.environ.get(NO_EXEC_ENV) and sys.platform.startswith("linux"):
        _exec(job)  # returns only when the exec failed
    finish(job, run_job(job))


def _exec(job: Job) -> None:
    """``execv`` into the lean entry point with ``job``; returns (nothing changed but an
    extra descriptor) only when that failed. Stopped (nothing changed) when a stop signal
    came after the hand-over."""
    try:
        fd = os.memfd_create("nvfabric-unit", 0)  # close-on-exec unless made inheritable
    except (OSError, AttributeError):
        return
    blocked: set[int | signal.Signals] | None = None
    try:
        os.write(fd, json.dumps(job.to_json()).encode())
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
        if job.lock_fd is not None:
            os.set_inheritable(job.lock_fd, True)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        paths = [p for p in sys.path if p]
        # a stop signal during the exec stays pending for the lean process (its loop
        # unblocks it once its handlers are in place) instead of killing the run
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
        stop.check()  # recorded by the command's handler after the hand-over
        # the command's own arguments follow, so that ps and /proc/PID/cmdline still show
        # what runs (`... run --root /node --imex-owner host`; the Slurm prolog looks for that)
        if getattr(sys, "frozen", False):  # the one-dir build: its entry takes the flag
            argv = [_shown_as(), FLAG, str(fd), *sys.argv[1:]]
        else:
            argv = [_shown_as(), "-S", "-c", _BOOT, "run", FLAG, str(fd), json.dumps(paths),
                    sys.executable, *sys.argv[1:]]
        os.execv(sys.executable, argv)  # noqa: S606 - argv list: this program, our code
    except (OSError, stop.Stopped) as err:
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if job.lock_fd is not None:
            os.set_inheritable(job.lock_fd, False)
        os.close(fd)
        if isinstance(err, stop.Stopped):
            raise


def _shown_as() -> str:
    """The lean process's ``argv[0]``: the ``nvfabric`` command that started the run when it
    is the console script beside this interpreter (so ``ps``, ``/proc/PID/cmdline`` and a
    container's PID 1 still show ``/.../bin/nvfabric ... run``; Python derives its prefix from
    that directory, the same as the interpreter's), else the interpreter itself."""
    started = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(started) == "nvfabric" and \
            os.path.dirname(started) == os.path.dirname(os.path.abspath(sys.executable)):
        return started
    if getattr(sys, "frozen", False) and started and os.path.realpath(started) == \
            os.path.realpath(sys.executable):
        return started  # the one-dir build through its link (/usr/bin/nvfabric)
    return sys.executable


def read_job(fd: int) -> Job:
    """The job in the memory file ``fd`` (closed). Raises OSError, ValueError (JobError; a
    damaged document, one nested past the bound of :func:`nvfabric.model.strict.parse_json`)."""
    with os.fdopen(fd, "rb") as fh:
        return job_from_json(parse_json(fh.read()))


def run_job(job: Job) -> Outcome:
    """Build the supervisor of ``job`` and run it until the unit ends: its Outcome. What is
    needed only for a probe, a diagnosis or a restart check is imported when first used."""
    from nvfabric.supervisor.supervise import Supervisor

    history = _history(job)
    record = None if history is None else history.append
    return Supervisor(job.specs, job.policy, classifier=_classifier(job), probe=_probe(job),
                      ready_file=job.ready_file, ready_info=job.ready_info,
                      pid_dir=job.pid_dir, preflight=_restart_checks(job),
                      watch=_kernel_watch(job, record), history=record,
                      hints=job.hints).run()


def _history(job: Job) -> History | None:
    """The event history in the state directory (:mod:`nvfabric.effects.history`), its first
    record the run's start; None without a state directory."""
    if job.state_dir is None:
        return None
    from nvfabric.effects.history import begin

    return begin(job.state_dir, [s.name for s in job.specs], job.ready_info)


def _kernel_watch(job: Job, record: Callable[[str, dict[str, Any]], None] | None
                  ) -> KernelWatch | None:
    """The kernel log watch of ``job`` (:func:`nvfabric.supervisor.kernelwatch.from_spec`);
    None when it is off or no kernel log can be read."""
    if job.kernel_watch is None:
        return None
    from nvfabric.supervisor.kernelwatch import from_spec

    return from_spec(job.kernel_watch, job.fabric, record, job.hints)


def _classifier(job: Job) -> Callable[[str], Classifier] | None:
    """The live diagnosis of each service's lines (the catalogue of ``job.fabric``, its hints
    typed for ``job.hints``)."""
    fabric, hints = job.fabric, job.hints
    if fabric is None:
        return None

    def make(name: str) -> Classifier:
        from nvfabric.rules.diagnose import Classifier

        return Classifier(fabric, hints=hints)

    return make


def _probe(job: Job) -> Callable[[], GpuCheck] | None:
    """The readiness probe of ``job``: IMEX's ``nvidia-imex-ctl -q`` (``job.imex_probe``,
    :func:`nvfabric.facts.imex.ready.readiness_probe`), or the GPU probe of
    ``job.probe_root`` read in a short-lived child so that the NVML or nvidia-smi reading's
    modules never stay in the supervisor (:func:`gpu_check_in_child`)."""
    if job.imex_probe is not None:
        from nvfabric.facts.imex.ready import readiness_probe

        return readiness_probe(*job.imex_probe)
    root = job.probe_root
    if root is None:
        return None
    return lambda: gpu_check_in_child(root)


def gpu_check_in_child(root: str, bound_s: float = CHILD_BOUND_S) -> GpuCheck:
    """The GPUs' fabric state of ``root`` summarised for readiness
    (:func:`nvfabric.facts.gpu.check`), read in a forked child
    (:func:`nvfabric.supervisor.gpuprobe.in_child`): the same answer as in this process, and
    nothing of the reading stays here (the reading's modules are imported in the child)."""

    def check() -> GpuCheck:
        from nvfabric.facts.gpu import check

        return check(root)

    return in_child(check, bound_s)


def _restart_checks(job: Job) -> Callable[[], Sequence[Finding]] | None:
    """What is checked again before a restart: fabric manager's version against the driver's
    (``nvfabric run``'s own check, imported at the first restart only)."""
    if job.fm_check is None:
        return None
    binary, driver = job.fm_check

    def check() -> Sequence[Finding]:
        from nvfabric.facts.probes import fm_version
        from nvfabric.rules.preflight import fm_version as version_findings

        return version_findings(binary, driver, fm_version(binary), job.hints)

    return check


def finish(job: Job, outcome: Outcome) -> NoReturn:
    """Report ``outcome`` as ``nvfabric run`` does and end the process with its exit code."""
    from nvfabric.effects.log import Log

    findings = [*(f.to_json() for f in outcome.findings), *job.report.findings]
    if job.report.as_json:
        result = dict(job.report.result)
        result.update(result=outcome.reason, exit_code=outcome.exit_code,
                      ready_after_s=outcome.ready_after_s, restarts=outcome.restarts,
                      findings=findings)
        try:
            sys.stdout.write(json.dumps(result, indent=2, sort_keys=False) + "\n")
        except (OSError, ValueError):
            pass
    elif outcome.exit_code:
        # Each finding was logged with its hint when it happened; one closing line.
        Log().say(f"run failed: {findings[0]['code']}: {findings[0]['message']}" if findings
                  else "run failed")
    running.end()  # in-process only (run --publish): the last publish, bounded
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(outcome.exit_code)


def main(argv: list[str]) -> NoReturn:
    """The lean entry point: ``--supervise-fd N [PATHS]`` (see the module docstring)."""
    if len(argv) < 2 or argv[0] != FLAG or not is_uint(argv[1]):
        sys.stderr.write("nvfabric: the supervisor entry point is started by nvfabric run\n")
        os._exit(2)
    try:
        job = read_job(int(argv[1]))
        if job.lock_fd is not None and job.state_dir is not None:
            from nvfabric.effects.runlock import adopt_run_lock

            adopt_run_lock(job.state_dir, job.lock_fd)
    except (OSError, ValueError) as err:
        sys.stderr.write(f"nvfabric: internal_error: the prepared unit cannot be taken over: "
                         f"{err} (hint: this is a bug in nvfabric; nothing was started)\n")
        os._exit(3)
    from nvfabric.effects.log import set_format

    set_format("json" if job.log_format == "json" else "text")
    try:
        outcome = run_job(job)
    except Exception as err:  # noqa: BLE001 - last resort, as the CLI's guarded()
        from nvfabric.effects.stdio import debug_traceback, fail
        from nvfabric.model.errors import internal_error

        debug_traceback()
        fail(internal_error(err), 3, job.report.as_json)
    finish(job, outcome)

"""Read every GPU's fabric state from a node, through one of two sources behind one door.

The door (:func:`source_for`): a root whose ``proc`` is the running kernel's procfs
(:func:`nvfabric.facts.paths.is_live`: ``/`` on the node itself) is read through NVML
(:func:`nvml_source`, ``nvidia-ml-py``, the driver of the running kernel); any other root is a
directory holding a node's files and is read through its own ``bin/nvidia-smi -q -x``
(:func:`smi_source`; the fake written by ``nvfabric simulate``). A caller may inject a source
of its own (``read_health(root, source=...)``), as httpx takes a transport: the readers do
not branch on the root.

This is the contract the supervisor relies on: :func:`read` returns one GpuFabric per GPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from nvfabric.facts.paths import is_live, under
from nvfabric.model.findings import Finding
from nvfabric.model.health import FabricHealth, GpuFabric
from nvfabric.model.words import seconds

SMI_TIMEOUT_S = 15.0


#: A source of fabric state: given the probe's time bound (seconds), the reading.
Source = Callable[[float], FabricHealth]


def read(root: str) -> list[GpuFabric]:
    """The GPUs' fabric state (empty when it cannot be read; :func:`read_health` says why)."""
    return list(read_health(root).gpus)


def read_health(root: str, timeout: float = SMI_TIMEOUT_S,
                source: Source | None = None) -> FabricHealth:
    """The full reading with the reader's findings, from ``source`` (default
    :func:`source_for` ``(root)``). Never raises for a missing library or a failing
    nvidia-smi: those become findings (``nvml_unavailable``, ``driver_not_loaded``).

    ``timeout`` (seconds) bounds the whole probe: NVML is read in a helper thread that is
    abandoned when it does not answer in time, the node's nvidia-smi runs in its own process
    group, killed whole (its children too) at the timeout. Either way the answer is an
    ``nvml_unavailable`` finding with ``reason: timeout``.
    """
    return (source or source_for(root))(timeout)


def source_for(root: str) -> Source:
    """The door: NVML for a live root (:func:`nvfabric.facts.paths.is_live`), else the root's
    own ``bin/nvidia-smi``."""
    return nvml_source if is_live(root) else smi_source(root)


def nvml_source(timeout: float) -> FabricHealth:
    """NVML of the running system, bounded by ``timeout`` seconds (:func:`_bounded`)."""
    from nvfabric.facts import nvml

    return _bounded(nvml.read, timeout)


def smi_source(root: str) -> Source:
    """The source that runs ``root``'s ``bin/nvidia-smi -q -x`` and parses its XML; a root
    without an executable one is the finding ``nvml_unavailable`` (``reason: no_nvidia_smi``)."""
    smi = under(root, "/bin/nvidia-smi")

    def read_smi(timeout: float) -> FabricHealth:
        if not os.access(smi, os.X_OK):
            # the source this root has is its nvidia-smi (NVML is never read under a root)
            return FabricHealth("nvidia-smi-xml", (), findings=(Finding(
                "nvml_unavailable", "error",
                f"the simulated root {root} has no bin/nvidia-smi to read fabric state from",
                "write one with `nvfabric simulate PROFILE DIR`, or read a capture with "
                "--from-nvidia-smi FILE",
                {"reason": "no_nvidia_smi"},
            ),))
        return _run_smi(smi, timeout)

    return read_smi


def _run_smi(smi: str, timeout: float) -> FabricHealth:
    try:
        rc, out, err = run_bounded([smi, "-q", "-x"], timeout, meanwhile=_load_parser)
    except OSError as error:
        return _failed(f"{smi} -q -x did not run: {error.strerror or error}")
    if rc is None:
        return _failed(f"{smi} -q -x did not answer within {seconds(timeout)} s (killed)",
                       "timeout")
    if rc != 0:
        first = (err or out).decode("utf-8", "replace").strip().splitlines()
        return _failed(f"{smi} -q -x exited {rc}: {first[0] if first else ''}")
    from nvfabric.facts.smi import SmiFormatError, parse

    try:
        return parse(out.decode("utf-8", "replace"))
    except SmiFormatError as error:
        return _failed(f"{smi} -q -x printed no readable capture: {error}")


def _load_parser() -> None:
    """Import the XML reader while nvidia-smi runs (it is not needed before its answer)."""
    import nvfabric.facts.smi  # noqa: F401


def run_bounded(argv: list[str], timeout: float,
                meanwhile: Callable[[], None] | None = None) -> tuple[int | None, bytes, bytes]:
    """(exit code, stdout, stderr) of ``argv`` (no shell), or (None, ...) when it did not
    finish within ``timeout`` seconds: then its whole process group gets SIGKILL, so a
    grandchild holding the pipes cannot keep the caller waiting. ``meanwhile()`` is called
    once the program runs (work that does not need its answer, done while it is awaited).
    Raises OSError when the program cannot be started."""
    import subprocess  # lazy: `status --from-nvidia-smi` runs no probe

    proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=_die_with_parent(),
    )
    try:
        if meanwhile is not None:
            meanwhile()
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        try:
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = b"", b""
        return None, out, err
    finally:
        # Leaving for any other reason (KeyboardInterrupt, SystemExit from a SIGTERM handler,
        # see :func:`exit_on_sigterm`): the probe is in its own session, so no terminal signal
        # reaches it; without this it would run on with PPID 1.
        if proc.poll() is None:
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
    return proc.returncode, out, err


#: prctl(2) option (<linux/prctl.h> PR_SET_PDEATHSIG = 1): the signal a process gets when
#: its parent thread exits.
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a ``preexec_fn`` that gives the probe PR_SET_PDEATHSIG = SIGKILL (prctl(2)):
    a caller killed with SIGKILL runs no ``finally``, and the probe, in its own session, would
    otherwise run on with PPID 1 for as long as nvidia-smi hangs. The libc function is looked
    up here, in the parent; the child only calls it (and exits when the caller is already
    gone). None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # lazy, as subprocess

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the caller died before the prctl: nobody to answer
            os._exit(127)

    return child


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise ``SystemExit(128 + signal)`` (143, 130: the
    shell's figures, never 1, which means "unhealthy") in the main thread at once, also while
    a probe runs (a helper thread's join and a child's pipes are interrupted), so ``finally``
    clauses run: the one in :func:`run_bounded` kills a running probe's process group; an
    NVML read blocked in its helper thread is left behind (a daemon thread). The previous
    handlers are put back on leaving. Outside the main thread (no signal handlers there) it
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _bounded(read: Callable[[], FabricHealth], timeout: float) -> FabricHealth:
    """``read()`` in a daemon thread, given ``timeout`` seconds; a reading that does not come
    back in time (an NVML call blocked in the driver) is a finding, and the thread is left
    behind (it cannot be interrupted; it ends with the process)."""
    box: list[FabricHealth] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            box.append(read())
        except BaseException as err:  # noqa: BLE001 - handed back to the caller below
            failure.append(err)

    thread = threading.Thread(target=work, name="nvml-read", daemon=True)
    thread.start()
    thread.join(timeout)
    if failure:
        raise failure[0]
    if box:
        return box[0]
    return FabricHealth("nvml", (), findings=(Finding(
        "nvml_unavailable", "error", f"NVML did not answer within {seconds(timeout)} s",
        "a GPU or the driver is hung: check `dmesg` for Xid errors and whether `nvidia-smi` "
        "answers; a GPU reset or reboot is usually needed",
        {"reason": "timeout", "timeout_s": timeout},
    ),))


def _failed(message: str, reason: str = "nvidia_smi_failed") -> FabricHealth:
    return FabricHealth("nvidia-smi-xml", (), findings=(Finding(
        "nvml_unavailable", "error", message,
        "run the same command by hand; a driver that is not loaded makes nvidia-smi fail, a "
        "hung GPU makes it hang (check `dmesg` for Xid errors)",
        {"reason": reason},
    ),))

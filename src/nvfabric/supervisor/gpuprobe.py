"""The readiness probe of fabric manager (RUN.md R01, R04): every GPU's fabric state read and
summarised as a :class:`~nvfabric.model.gpucheck.GpuCheck`. Used by ``nvfabric run``'s
preflight (GPUs registered before the start) and by the supervisor (ready once all are
completed; R09's check after a GPU reset).

The supervisor asks in a short-lived child (:func:`in_child`, from
:func:`nvfabric.supervisor.lean.gpu_check_in_child`): the reading needs the
NVML binding or the node's ``nvidia-smi -q -x`` and its XML parser, a few MiB of modules that
the process which stays up for days would otherwise keep for the rest of its life (its idle
resident memory). The child is forked, reads, writes its answer as one JSON object
on a pipe and ends; it dies with the thread that forked it (PR_SET_PDEATHSIG) and is killed
when it does not answer within :data:`CHILD_BOUND_S`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from nvfabric.effects.process import RESET_SIGNALS, die_with_parent
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.strict import parse_json
from nvfabric.model.words import seconds

#: Seconds the supervisor waits for the probe child's answer before it kills it: the reading's
#: own bound (:data:`nvfabric.facts.gpu.SMI_TIMEOUT_S`, 15 s: a hung nvidia-smi is killed, a
#: hung NVML call abandoned, and either is answered) plus time for the child's imports.
CHILD_BOUND_S = 20.0
#: The most of the probe child's answer read (a GPU check of 8 GPUs is ~2 KB; the reading
#: itself is bounded as a capture, 16 MiB); a child writing more is killed, as at the bound.
ANSWER_MAX_BYTES = 16 << 20

#: Probe children killed at the bound whose exit could not be collected yet (a thread of
#: theirs stuck in the driver): collected, without waiting, at the next probe.
_unreaped: set[int] = set()


def in_child(probe: Callable[[], GpuCheck], bound_s: float = CHILD_BOUND_S) -> GpuCheck:
    """``probe()`` run in a forked child, its answer handed back through a pipe as JSON.

    The child resets the signal dispositions of :data:`nvfabric.effects.process.RESET_SIGNALS`
    and the wakeup fd it inherited (none of its signals reaches the supervisor's loop), gets
    PR_SET_PDEATHSIG = SIGKILL (it dies with the thread that forked it, also when the
    supervisor is killed with SIGKILL) and ends with ``os._exit``: nothing of the parent's
    runs again in it (no ``finally``, no atexit, no flush of the parent's buffered streams).
    Its exit is collected here, so a caller that reaps every child (PID 1) must not while
    this runs (:meth:`nvfabric.supervisor.loop.Loop._reap_others`).

    Never raises for the probe's own failure: an exception in the child is the answer
    ``unreadable`` with ``Type: message`` as the error (as a probe in-process); no answer
    within ``bound_s`` seconds (the child is killed with SIGKILL), a child that exits without
    one, or one that cannot be forked are ``unreadable`` with the reason."""
    _collect_leftovers()
    parent = os.getpid()
    r, w = os.pipe()  # both close-on-exec: no program the child runs inherits them
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
    except OSError as err:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(r)
        os.close(w)
        return _unreadable(f"the GPU probe could not be started: {err.strerror or err}")
    if pid == 0:
        _child(probe, r, w, parent)  # never returns
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    os.close(w)
    deadline = time.monotonic() + bound_s
    data, answered = bytearray(), False
    readable = select.poll()  # not select(): the pipe's number may be past FD_SETSIZE
    readable.register(r, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not readable.poll(-(-left * 1e3 // 1)):
                break
            chunk = os.read(r, 65536)
            if not chunk:
                answered = True
                break
            data += chunk
            if len(data) > ANSWER_MAX_BYTES:  # no answer of ours is that long: a bug
                break
    finally:
        os.close(r)
        if not answered:
            _kill(pid)
        _collect(pid, time.monotonic() + (1.0 if answered else 0.5))
    if not answered and len(data) > ANSWER_MAX_BYTES:
        return _unreadable(f"the GPU probe wrote more than {ANSWER_MAX_BYTES >> 20} MiB "
                           "(killed)")
    if not answered:
        return _unreadable(f"the GPU probe did not answer within {seconds(bound_s)} s (killed)")
    try:
        return check_from_json(parse_json(bytes(data)))
    except (ValueError, TypeError, KeyError):
        return _unreadable("the GPU probe ended without an answer")


def _child(probe: Callable[[], GpuCheck], r: int, w: int, parent: int) -> None:
    """The probe child (see :func:`in_child`): never returns."""
    try:
        os.close(r)
        signal.set_wakeup_fd(-1)
        for sig in RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        if not die_with_parent(signal.SIGKILL, parent):
            os._exit(127)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        try:
            answer = probe()
        except Exception as err:  # noqa: BLE001 - reported as the probe's error
            answer = _unreadable(f"{type(err).__name__}: {err}")
        try:
            text = json.dumps(check_to_json(answer))
        except (TypeError, ValueError) as err:
            text = json.dumps(check_to_json(_unreadable(f"{type(err).__name__}: {err}")))
        out = text.encode("utf-8", "surrogateescape")
        while out:
            out = out[os.write(w, out):]
    except BaseException:  # noqa: BLE001 - no answer: the parent says so
        pass
    finally:
        os._exit(0)


def _unreadable(why: str) -> GpuCheck:
    return GpuCheck(False, False, "unreadable", why)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _collect(pid: int, until: float) -> None:
    """Collect child ``pid``'s exit, polling until ``until`` (monotonic seconds); one not
    collected by then is left for :func:`_collect_leftovers`."""
    pause = 0.001
    while True:
        try:
            got, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # collected by someone else (PID 1's reaping outside a probe)
        if got == pid:
            return
        if time.monotonic() >= until:
            _unreaped.add(pid)
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _collect_leftovers() -> None:
    for pid in list(_unreaped):
        try:
            got, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            got = pid
        if got == pid:
            _unreaped.discard(pid)


def check_to_json(check: GpuCheck) -> dict[str, Any]:
    """``check`` as JSON values (what the probe child writes; :func:`check_from_json` reads
    it back equal)."""
    return {
        "ready": check.ready, "registered": check.registered, "summary": check.summary,
        "error": check.error, "supported": check.supported,
        "findings": [{"code": f.code, "severity": f.severity, "message": f.message,
                      "hint": f.hint, "fields": dict(f.fields)} for f in check.findings],
        "progress": list(check.progress) if check.progress is not None else None,
        "registered_gpus": list(check.registered_gpus),
    }


def check_from_json(raw: Any) -> GpuCheck:
    """The :class:`GpuCheck` of :func:`check_to_json`'s form. Raises ValueError (TypeError,
    KeyError) for anything else."""
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    flags = [raw[k] for k in ("ready", "registered", "supported")]
    summary, error, progress = raw["summary"], raw["error"], raw["progress"]
    gpus, findings = raw["registered_gpus"], raw["findings"]
    if not all(isinstance(x, bool) for x in flags) or not isinstance(summary, str) \
            or not (error is None or isinstance(error, str)) \
            or not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus) \
            or not isinstance(findings, list) or not all(isinstance(f, dict) for f in findings):
        raise ValueError("not a GPU check")
    if progress is not None:
        if not (isinstance(progress, list) and len(progress) == 2
                and all(type(n) is int for n in progress)):
            raise ValueError("progress: not two counts")
        progress = (progress[0], progress[1])
    return GpuCheck(flags[0], flags[1], summary, error, flags[2],
                    tuple(Finding(f["code"], f["severity"], f["message"], f["hint"],
                                  f["fields"]) for f in findings),
                    progress, tuple(gpus))

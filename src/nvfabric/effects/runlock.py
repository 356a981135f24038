"""The run lock and the readiness file of ``nvfabric run`` in its state directory.

One run per node: an exclusive flock(2) on ``<state_dir>/run.lock`` held by the run's process
for as long as it lives (kept across the ``execv`` into the lean supervisor, which clears the
descriptor's close-on-exec for that one exec); ``<state_dir>/ready`` says the fabric is up
and names the run's pid (RUN.md R10), believed only while that pid holds the lock;
``<state_dir>/publisher`` says that run publishes the node's state to Kubernetes (``run
--publish``), believed the same way, so that a one-shot ``status --publish`` does not write
the same Node beside it.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from dataclasses import dataclass

from nvfabric.effects.atomic import write_atomic
from nvfabric.effects.dirs import ensure_dir
from nvfabric.model.strict import BadValue, int_or_none, parse_json

#: The lock file of ``nvfabric run`` in its state directory: one run per node.
LOCK_FILE = "run.lock"

#: ``run --publish``'s mark in the state directory: ``{"pid": N, "node": NAME}``.
PUBLISHER_FILE = "publisher"


@dataclass(frozen=True)
class RunLock:
    """An exclusive flock(2) on ``path`` held through the open descriptor ``fd``
    (close-on-exec, so no daemon inherits it). The kernel drops it when the process ends,
    however it ends (SIGKILL included); nothing has to clean it up. The file holds the
    holder's pid for the refusal message."""

    path: str
    fd: int


def acquire_run_lock(state_dir: str) -> tuple[RunLock | None, int | None]:
    """Take the run lock in ``state_dir`` (created 0700 when missing, R06): (lock, None), or
    (None, holder pid; 0 when the holder has not written it yet) when another process holds
    it. Raises OSError when the directory or the lock file cannot be made or opened."""
    ensure_dir(state_dir)
    path = os.path.join(state_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_pid(fd)
        os.close(fd)
        return None, holder
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(path, fd), None


def run_lock_holder(state_dir: str) -> int | None:
    """Who holds the run lock in ``state_dir``: its pid (0 when unknown), None when nobody
    does. Creates nothing (``--dry-run``): no lock file means no run. Raises OSError when the
    lock file exists but cannot be opened."""
    path = os.path.join(state_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _lock_pid(fd)
    finally:
        os.close(fd)
    return None


#: The readiness file of ``nvfabric run`` in its state directory (JSON, RUN.md R10).
READY_FILE = "ready"


def clear_stale_ready(state_dir: str) -> int | None:
    """Remove ``<state_dir>/ready`` left by a run that is gone (``kill -9``, a crash): called
    by a run that holds the run lock, so no live run can own the file. Returns the pid the
    stale file named (0 when unreadable), None when there was none. Raises OSError when it
    exists and cannot be removed."""
    path = os.path.join(state_dir, READY_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
    except FileNotFoundError:
        return None
    except OSError:
        text = ""
    os.unlink(path)
    try:
        info = parse_json(text)
    except BadValue:  # damaged, nested past the bound, a number past the digit limit
        info = None
    pid = info.get("pid") if isinstance(info, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 0


def live_ready(state_dir: str) -> tuple[dict[str, object] | None, str]:
    """The readiness of the run in ``state_dir`` (RUN.md R10): (the ready file's object, "")
    when ``<state_dir>/ready`` exists and the pid inside is the live ``nvfabric run`` holding
    the run lock; else (None, why: no file, unreadable, or stale: its pid does not hold the
    lock). Reads only."""
    return _held_record(state_dir, READY_FILE, "no readiness file", "no run is ready")


def mark_publisher(state_dir: str, node: str) -> None:
    """Say that this process (the run holding the lock in ``state_dir``) publishes Node
    ``node`` (atomically; OSError when it cannot be written)."""
    write_atomic(os.path.join(state_dir, PUBLISHER_FILE),
                 json.dumps({"pid": os.getpid(), "node": node}) + "\n", backup=False)


def live_publisher(state_dir: str) -> tuple[int, str] | None:
    """(pid, Node name) of the live ``run --publish`` in ``state_dir``: its mark, believed only
    while that pid holds the run lock (as the ready file is); None when there is none, it
    cannot be read or it is stale. Reads only."""
    info, _ = _held_record(state_dir, PUBLISHER_FILE, "no publisher mark", "no run publishes")
    node = info.get("node") if info is not None else None
    pid = info.get("pid") if info is not None else None
    return (pid, node) if isinstance(pid, int) and isinstance(node, str) else None


def _held_record(state_dir: str, name: str, missing: str,
                 none: str) -> tuple[dict[str, object] | None, str]:
    """The JSON object of ``<state_dir>/NAME`` written by a run, (object, "") while the pid it
    names holds the run lock; else (None, why: ``MISSING PATH: NONE`` when there is no file,
    unreadable, damaged, or stale). Reads only, at most 64 KiB, never through a link."""
    path = os.path.join(state_dir, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, f"{missing} {path}: {none}"
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror or err}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"{path} is not a regular file"
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    try:
        info = parse_json(data.decode("utf-8", "replace"))
    except BadValue as err:
        return None, f"{path} is damaged ({err}): stale or not written by nvfabric run"
    pid = info.get("pid") if isinstance(info, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None, f"{path} names no run (no pid): stale or not written by nvfabric run"
    try:
        holder = run_lock_holder(state_dir)
    except OSError as err:
        return None, f"cannot read the run lock in {state_dir}: {err.strerror or err}"
    if holder != pid:
        who = "nobody holds the run lock" if holder is None else f"pid {holder} holds it"
        return None, (f"{path} is stale: it names run pid {pid}, but {who} (the run ended "
                      "without removing it, e.g. kill -9)")
    assert isinstance(info, dict)
    return info, ""


def _lock_pid(fd: int) -> int:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return 0
    return int_or_none(text, max_digits=10) or 0



def adopt_run_lock(state_dir: str, fd: int) -> RunLock:
    """The run lock this process already holds through the inherited descriptor ``fd`` (the
    lean supervisor after ``execv``: same pid, same open file): checked to be the lock file of
    ``state_dir`` (same inode) and locked by us (a second exclusive flock through the same
    open file description succeeds; another holder's would block), then made close-on-exec
    again so that no daemon inherits it. Raises OSError (EBADF, or EINVAL naming the path)
    when ``fd`` is not that lock."""
    path = os.path.join(state_dir, LOCK_FILE)
    mine, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        raise OSError(22, "descriptor is not the run lock", path)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.set_inheritable(fd, False)
    return RunLock(path, fd)

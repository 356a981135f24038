"""One run per node (RUN.md R10): the run lock of ``nvfabric run`` as the procedure takes it,
in the state directory under the root, before anything is written, reset or started
(``--dry-run``: only who holds it); a readiness file left by a run that is gone is removed.
The lock primitives are :mod:`nvfabric.effects.runlock`; this module turns them into the
run's findings (``already_running``) and one-line errors.
"""

from __future__ import annotations

import os

from nvfabric.effects.dirs import not_a_directory
from nvfabric.effects.log import Log
from nvfabric.effects.runlock import (
    LOCK_FILE,
    READY_FILE,
    RunLock,
    acquire_run_lock,
    clear_stale_ready,
    run_lock_holder,
)
from nvfabric.facts.fs import unwritable
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import NvfabricError, os_error, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import confined, under


def already_running(pid: int, lock: str, root: str = "/") -> Finding:
    """Another ``nvfabric run`` holds the lock (``pid``, 0 when unknown) on the node under
    ``root``."""
    return Finding(
        "already_running", "error",
        f"nvfabric run is already running on this node (pid {pid or 'unknown'}, lock {lock}); "
        "nothing was started or written",
        "one nvfabric run per node: stop the running one first (systemctl stop, or kill -TERM "
        f"its pid); `{command_line('status', root=root)}` shows the fabric it keeps up",
        {"pid": pid or None, "lock": lock})


def state_dir(root: str, state_dir: str) -> str:
    """The state directory under the root; exit 2 naming the path when something other than
    a directory is in the way."""
    state = under(root, state_dir)
    blocker = not_a_directory(state)
    if blocker is not None:
        raise usage_error(
            f"--state-dir: {blocker} exists and is not a directory (state directory {state})",
            f"remove {blocker} or pass --state-dir DIR")
    return state


def clear_stale_unlocked(root: str, state_dir: str) -> None:
    """R10 for a run refused before it takes the lock (plan blockers): a readiness file that
    no live run holds the lock for is removed, so it never outlives the run that wrote it.
    Best effort: a state directory that is not valid or readable is left to the checks that
    follow (they report it)."""
    try:
        state = confined(root, check_path(state_dir, "--state-dir"), "--state-dir")
        if run_lock_holder(state) is None and clear_stale_ready(state) is not None:
            Log().say(f"removed the stale readiness file {state}/{READY_FILE} (no run holds "
                      "the lock)")
    except (OSError, ValueError):
        return


def take_lock(state: str, dry_run: bool, root: str = "/"
              ) -> tuple[RunLock | None, Finding | None]:
    """``run``: the run lock, taken before anything is written or reset (the state directory
    is created for it); ``--dry-run``: only who holds it. A Finding when another run does."""
    lock_path = os.path.join(state, LOCK_FILE)
    existed = os.path.isdir(state)
    # the same check in a dry run as before the real lock: the state directory must be
    # writable (a read-only tree is refused by both, not only by the run)
    problem = unwritable(state)
    if problem is not None:
        finding, code = os_error(OSError(problem, os.strerror(problem), lock_path),
                                 "cannot take the run lock", lock_path)
        raise NvfabricError(finding, code)
    try:
        if dry_run:
            lock, holder = None, run_lock_holder(state)
        else:
            lock, holder = acquire_run_lock(state)
            if not existed:
                Log().say(f"created state directory {state} (mode 0700)")
    except OSError as err:
        finding, code = os_error(err, "cannot take the run lock", lock_path)
        raise NvfabricError(finding, code) from None
    return lock, None if holder is None else already_running(holder, lock_path, root)


def hold(root: str, state_path: str, dry_run: bool) -> tuple[RunLock | None, Finding | None]:
    """One run per node: the lock (``--dry-run``: who holds it), before anything is written,
    reset or started and after every pure check; the finding ``already_running`` when another
    run holds it. Its descriptor is never closed: the lock lasts as long as this process (or
    the lean supervisor it execs into), however it ends."""
    state = state_dir(root, state_path)
    lock, busy = take_lock(state, dry_run, root)
    if busy is not None:
        return None, busy
    if lock is not None:  # R10: ours now; a ready file left by a run that is gone goes
        try:
            stale = clear_stale_ready(state)
        except OSError as err:
            raise usage_error(f"cannot remove the stale readiness file in {state}: "
                              f"{err.strerror or err}", "check --state-dir") from None
        if stale is not None:
            Log().say(f"removed the stale readiness file {state}/{READY_FILE} (run pid "
                      f"{stale or 'unknown'} is gone)")
    return lock, None

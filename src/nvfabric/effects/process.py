"""Process primitives of the supervisor: spawn a daemon (argv only, own process group, parent
death signal), signal its process group, reap it, and say how it ended. Nothing here runs a
shell."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence

from nvfabric.model.strict import int_or_none

#: Signals whose disposition a child gets reset to the default (Python ignores SIGPIPE; a
#: parent started under nohup ignores SIGHUP).
RESET_SIGNALS = (
    signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
    signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD, signal.SIGALRM,
)

#: prctl(2) option: the signal a process gets when its parent thread exits
#: (<linux/prctl.h> PR_SET_PDEATHSIG = 1). Kept across execve except for set-user-ID programs.
_PR_SET_PDEATHSIG = 1
_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def die_with_parent(sig: int, parent: int) -> bool:
    """In a child just forked from ``parent`` (its pid): have the kernel send ``sig`` to this
    process when the parent thread that forked it exits (PR_SET_PDEATHSIG, prctl(2)). False
    when that failed or the parent is already gone (the signal would never come): the
    caller then ends at once. Linux only (True elsewhere: nothing is set)."""
    if not sys.platform.startswith("linux"):
        return True
    return _libc().prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0 and os.getppid() == parent


def die_with_parent_preexec(sig: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that gives the child
    :func:`die_with_parent` ``(sig)`` (it exits at once, 127, when the caller is already gone).
    libc is looked up here, in the parent: the child only calls it. None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = _libc().prctl
    parent = os.getpid()

    def child() -> None:
        if prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(127)

    return child


def spawn(argv: Sequence[str], env: dict[str, str]) -> tuple[int, int]:
    """Start ``argv`` (argv[0] an absolute path) in its own process group, stdin /dev/null,
    stdout and stderr into one pipe, the signals of :data:`RESET_SIGNALS` at their default
    and no signal blocked. Returns (pid, read end of the pipe, non-blocking). Raises OSError
    when it cannot be executed.

    On Linux the child also gets PR_SET_PDEATHSIG = SIGTERM (prctl(2)) before its exec, so
    that a supervisor killed with SIGKILL (no handler of ours runs) does not leave NVLSM,
    fabric manager or IMEX running as orphans: each gets the SIGTERM nvfabric would have sent.
    That needs code in the child between fork and exec, which ``posix_spawn`` cannot run; other
    systems use ``posix_spawn``.
    """
    r, w = os.pipe()
    try:
        if sys.platform.startswith("linux"):
            pid = _fork_exec(argv, env, w)
        else:
            pid = os.posix_spawn(
                argv[0], list(argv), env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, w, 1),
                    (os.POSIX_SPAWN_DUP2, w, 2),
                ],
                setpgroup=0,
                setsigdef=RESET_SIGNALS,
                setsigmask=(),
            )
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    os.set_blocking(r, False)
    return pid, r


def _fork_exec(argv: Sequence[str], env: dict[str, str], out: int) -> int:
    """fork, then in the child: default signal dispositions, PR_SET_PDEATHSIG (and exit if
    the parent is already gone: the signal would never come), own process group, stdin
    /dev/null, stdout and stderr to ``out``, no blocked signal, execve. Every signal is
    blocked around the fork so that none reaches the child's inherited Python handlers (whose
    wakeup fd is the supervisor's). An exec failure comes back as its errno through a
    close-on-exec pipe and is raised here as OSError, as ``posix_spawn`` does."""
    prctl = _libc().prctl
    parent = os.getpid()
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    err_r, err_w = os.pipe()  # both close-on-exec
    args = list(argv)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        with warnings.catch_warnings():  # 3.12+: fork with threads; the child only execs
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: nothing here may return into the supervisor's code
            try:
                signal.set_wakeup_fd(-1)
                for sig in RESET_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                if prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0 or \
                        os.getppid() != parent:
                    os._exit(127)
                os.setpgid(0, 0)
                os.dup2(devnull, 0)
                os.dup2(out, 1)
                os.dup2(out, 2)
                signal.pthread_sigmask(signal.SIG_SETMASK, ())
                os.execve(args[0], args, env)  # noqa: S606 - argv list, checked by ServiceSpec
            except BaseException as err:  # noqa: BLE001 - reported to the parent, then _exit
                code = err.errno if isinstance(err, OSError) and err.errno else errno.EINVAL
                with contextlib.suppress(OSError):
                    os.write(err_w, str(code).encode())
            finally:
                os._exit(127)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(err_w)
        os.close(devnull)
    try:
        with os.fdopen(err_r, "rb") as fh:  # end of file: the exec succeeded
            failed = fh.read()
    except BaseException:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    if failed:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        code = int_or_none(failed.decode("ascii", "replace"), high=4095) or errno.EIO
        raise OSError(code, os.strerror(code), args[0])
    return pid


def describe_status(status: int) -> tuple[str, int | None, int | None]:
    """A wait status as (text, exit code, signal number)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by {name}", None, sig
    code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else status
    return f"exited with code {code}", code, None



def kill_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (every daemon leads its own, see
    :func:`spawn`), or to ``pid`` alone when it has no group (any more) or the group cannot be
    signalled; a process already gone is no error."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    except PermissionError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def reap(pid: int) -> int | None:
    """The wait status of child ``pid`` if it has exited (collected), else None; a pid that is
    not (or no longer) our child reads as status 0."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 0
    return status if got == pid else None

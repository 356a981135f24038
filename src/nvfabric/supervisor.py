"""Runs the services of a unit (NVLSM then fabric manager, or any list of
:class:`~nvfabric.bringup.spec.ServiceSpec`) as one: the only place nvfabric spawns daemons.

Behaviour (../shared/cases/RUN.md):

- Start in order; each service starts once the one before it is ready. NVLSM's IPC socket is
  waited for with inotify on its directory (ctypes; a 10 ms stat loop where inotify is not
  available), bounded by ``socket_timeout_s`` (R01). Fabric manager is ready once every GPU's
  fabric state is completed, read by a probe in a worker thread so that a slow ``nvidia-smi``
  never delays the reaction to a dying daemon.
- One unit: when a service exits, the others are stopped in reverse start order (SIGTERM to
  its process group, SIGKILL after ``grace_s``) and the outcome names the service, its exit
  status, its last lines and their diagnosis (R02, R03). ``restart="on-failure"`` restarts the
  unit in-process after 1, 2, 4 ... s (capped), except when a service that needs a GPU reset
  (R04) would be restarted after GPUs registered: then the operator's reset command runs
  first, or, without one, the outcome is a ``restart_needs_gpu_reset`` finding.
- SIGTERM/SIGINT: orderly stop in reverse order, exit 0; a second signal kills at once (R05),
  except within ``REPEATED_STOP_WINDOW_S`` of the first: that is the same stop request
  delivered twice (a runtime's kill-all plus the one-file bootloader's forwarding).
  As PID 1 every exited child is reaped, orphans included.
- Child output (stdout and stderr, merged) is forwarded line by line with the service name as
  prefix and fed to a classifier, so that a known failure line yields its finding at once.
- Ready: ``READY=1`` on ``$NOTIFY_SOCKET`` (systemd Type=notify), a readiness file, a log line
  with the time it took. Directories are created 0700 and never widened (R06).
- systemd: ``STATUS=`` says what the unit waits for (NVLSM's socket, GPU registration n/m,
  ready, stopping, restart delay); with ``$WATCHDOG_USEC`` set for this process
  (sd_watchdog_enabled(3)) a timer of the loop sends ``WATCHDOG=1`` every half interval, so a
  loop that stops turning stops the pings and systemd's ``WatchdogSec=`` kills the unit.

Processes are started with ``os.posix_spawn`` (argv only, stdin /dev/null, own process group,
signal dispositions reset); nothing here runs a shell.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import json
import os
import queue
import re
import selectors
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from nvfabric.bringup.spec import PlannedFile, ServiceSpec
from nvfabric.effects.atomic import write_atomic
from nvfabric.facts.execinfo import INTERPRETER_HINT, exec_error, missing_interpreter
from nvfabric.model.findings import Finding
from nvfabric.strict import int_or_none

#: Signals whose disposition a child gets reset to the default (Python ignores SIGPIPE; a
#: parent started under nohup ignores SIGHUP).
_RESET_SIGNALS = (
    signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
    signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD, signal.SIGALRM,
)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds after the first stop signal within which another one is the same request, not an
#: operator's "kill now". One stop reaches nvfabric twice within milliseconds where it runs as
#: the child of the single-file binary's PyInstaller bootloader, which forwards every signal it
#: gets to its child, and the sender signals both: Talos stops an extension service with
#: SIGTERM to every process of the container (siderolabs/talos
#: internal/app/machined/pkg/system/runner/containerd/containerd.go, ``task.Kill(SIGTERM,
#: containerd.WithKillAll)``), and a terminal's Ctrl-C goes to the whole foreground group.
REPEATED_STOP_WINDOW_S = 1.0
#: The one line logged for a SIGHUP (ignored: nvfabric has no reload; a terminal closing or a
#: ``systemctl reload`` must not stop the fabric).
SIGHUP_IGNORED = "received SIGHUP: ignored (no reload; restart nvfabric run to apply changes)"
_POLL_FALLBACK_S = 0.01
#: The longest single wait of the loop: epoll_wait(2) takes its timeout in int milliseconds
#: (Python raises OverflowError past about 24.8 days), and a --grace, --ready-timeout or
#: $WATCHDOG_USEC may be longer; a timer further away is simply waited for again.
_MAX_WAIT_S = 3600.0
_NOTIFY_TIMEOUT_S = 0.5
#: The most bytes of STATUS= text sent. systemd reads a notify datagram into a buffer of
#: NOTIFY_BUFFER_MAX (PIPE_BUF, 4096) bytes and ignores a longer one whole (src/core/manager.c,
#: manager_dispatch_notify_fd: "exceeded maximum size"), READY=1 in it included; checked with
#: systemd 252: READY=1 and a STATUS= of 4100 bytes in one datagram is a start timeout.
STATUS_MAX_BYTES = 1024
#: What systemd hands the main process only (sd_notify(3), sd_listen_fds(3),
#: sd_watchdog_enabled(3)): not passed on to the daemons, which must not notify or ping.
_SYSTEMD_ENV = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC",
                "WATCHDOG_PID")
_MAX_LINE = 65536


@dataclass(frozen=True)
class GpuCheck:
    """One readiness probe of the GPUs' fabric state.

    ``ready``: every GPU's state is completed; ``registered``: at least one GPU is completed
    (what makes a fabric manager restart need a GPU reset, R04); ``summary``: one line for the
    log (``8 GPUs: completed x8``); ``error``: why the state could not be read, if so;
    ``supported``: False when no GPU has a fabric state (NVML "not supported", e.g. A100), so
    that the service's success line is the readiness signal; ``findings``: problems seen in
    the state (a GPU completed with an error status), logged when the unit becomes ready;
    ``progress``: (completed, total) GPUs for systemd's ``STATUS=`` line, when counted.
    ``registered_gpus``: labels of the GPUs registered (completed), for R09's refusal.
    """

    ready: bool
    registered: bool
    summary: str
    error: str | None = None
    supported: bool = True
    findings: tuple[Finding, ...] = ()
    progress: tuple[int, int] | None = None  # (GPUs completed, GPUs with a fabric state)
    registered_gpus: tuple[str, ...] = ()


class Classifier(Protocol):
    """What :class:`nvfabric.rules.diagnose.Classifier` offers: new findings per line, all
    so far."""

    def feed(self, line: str) -> list[Finding]: ...

    def findings(self) -> list[Finding]: ...


@dataclass(frozen=True)
class Policy:
    """How the unit is run. Times in seconds.

    ``restart``: ``never`` or ``on-failure``; backoff ``backoff_base_s * 2**n`` capped at
    ``backoff_cap_s`` (n resets once the unit stayed ready for ``backoff_cap_s``).
    ``gpu_reset_argv``: the operator's GPU reset command (argv), the opt-in of R04.
    ``registered_at_start``: GPUs were already registered before the first start (a fabric
    manager ran before), so the first start is a restart for R04. ``gpu_reset_timeout_s``:
    the reset command's bound (then its process group is killed and nothing starts).
    ``start_limit_burst`` starts of the unit within ``start_limit_interval_s`` end a crash
    loop (systemd's StartLimitBurst/StartLimitIntervalSec; 0, the default here, turns the
    limit off; ``nvfabric run`` sets 5 in 300 s).
    """

    restart: str = "never"
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    socket_timeout_s: float = 60.0
    ready_timeout_s: float = 300.0
    probe_interval_s: float = 0.1
    probe_max_interval_s: float = 2.0
    gpu_reset_argv: tuple[str, ...] | None = None
    gpu_reset_timeout_s: float = 300.0
    registered_at_start: bool = False
    start_limit_burst: int = 0
    start_limit_interval_s: float = 300.0
    last_lines: int = 20
    reap_orphans: bool | None = None  # None: when running as PID 1

    def __post_init__(self) -> None:
        if self.restart not in ("never", "on-failure"):
            raise ValueError(f"restart policy must be never or on-failure, not {self.restart!r}")


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``exit_code`` (0 orderly stop, 1 failure), ``reason`` (``stopped``,
    ``failed``), the findings (the failure first), seconds to ready of the last start (rounded
    to milliseconds; None if never ready), restarts done."""

    exit_code: int
    reason: str
    findings: tuple[Finding, ...] = ()
    ready_after_s: float | None = None
    restarts: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "result": self.reason,
            "exit_code": self.exit_code,
            "ready_after_s": self.ready_after_s,
            "restarts": self.restarts,
            "findings": [f.to_json() for f in self.findings],
        }


#: ``result`` of ``nvfabric run --json``: how the run ended, or (``--dry-run``) would begin.
RUN_RESULTS = ("stopped", "failed", "nothing_to_do", "not_started", "blocked", "refused",
               "would_start")


def run_result(result: str, exit_code: int, fabric: str, findings: Sequence[Finding], *,
               dry_run: bool = False, processes: Sequence[ServiceSpec] = (),
               files: Sequence[PlannedFile] = (), ready_after_s: float | None = None,
               restarts: int = 0, reasons: Sequence[str] = (),
               vendor_files: Sequence[Mapping[str, str]] = ()) -> dict[str, object]:
    """The one JSON shape of ``nvfabric run`` for every outcome, with and without
    ``--dry-run`` (README, ``run`` section): every key always present, lists empty and
    ``ready_after_s`` null where they do not apply. ``processes``/``files``: the unit's, in
    start order (what it starts and writes, or would), empty when no unit was built (blocked,
    nothing to do, another run holds the lock). ``reasons``: the plan's. ``vendor_files``:
    which vendor file run uses and where it came from (``{"file", "path", "source"}``,
    :mod:`nvfabric.bringup.vendor`). ValueError for a ``result`` not in :data:`RUN_RESULTS`."""
    if result not in RUN_RESULTS:
        raise ValueError(f"unknown run result {result!r}")
    return {
        "result": result,
        "exit_code": exit_code,
        "dry_run": dry_run,
        "fabric": fabric,
        "processes": [{"service": s.name, "argv": list(s.argv)} for s in processes],
        "files": [{"path": f.path, "content": f.content} for f in files],
        "ready_after_s": ready_after_s,
        "restarts": restarts,
        "findings": [f.to_json() for f in findings],
        "reasons": list(reasons),
        "vendor_files": [dict(v) for v in vendor_files],
    }


class Log:
    """nvfabric's log: one line per event on ``stream`` (stderr by default), flushed at once.
    nvfabric's own lines start with ``nvfabric: ``, a child's with its service name. Written
    through :mod:`logging` with a timestamp, as text or JSON (:mod:`nvfabric.observe.logs`)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        from nvfabric.observe.logs import logger_for

        self.stream = stream if stream is not None else sys.stderr
        self._logger = logger_for(self.stream)

    def line(self, text: str) -> None:
        """One line, control characters escaped (:func:`printable`): a daemon's output or a
        value read from the node never reaches the operator's terminal raw."""
        self._logger.info("%s", printable(text))

    def say(self, text: str) -> None:
        self.line("nvfabric: " + text)

    def finding(self, f: Finding) -> None:
        hint = f" (hint: {f.hint})" if f.hint else ""
        self.say(f"{f.severity} {f.code}: {f.message}{hint}")


def printable(text: str) -> str:
    """``text`` with C0 control characters (tab kept), DEL and C1 controls shown as ``\\xNN``:
    plain-text output (log lines, ``--dry-run`` listings) in which an escape sequence from a
    daemon or a config file would otherwise act on the terminal; a newline inside a value
    cannot split one log line into two. A byte that is not UTF-8 (a path given on the command
    line or read from a directory, which Python holds as a lone surrogate U+DC80-U+DCFF,
    PEP 383) is shown as ``\\xNN`` of that byte, so the result always encodes as UTF-8.
    Rich output uses :func:`nvfabric.cli.render.safe`."""
    if not any(_escaped(c) for c in text):
        return text
    return "".join(_escape(c) if _escaped(c) else c for c in text)


def _escaped(c: str) -> bool:
    """A character :func:`printable` shows as ``\\xNN`` (or ``\\uNNNN``)."""
    o = ord(c)
    return o < 32 and c != "\t" or 127 <= o < 160 or 0xD800 <= o < 0xE000


def _escape(c: str) -> str:
    """How :func:`printable` shows an escaped character: ``\\xNN`` of a control character or
    of the byte a surrogate escape stands for; ``\\uNNNN`` of another lone surrogate."""
    o = ord(c)
    if 0xDC80 <= o < 0xDD00:
        return f"\\x{o - 0xDC00:02x}"
    return f"\\u{o:04x}" if o >= 0xD800 else f"\\x{o:02x}"


# --------------------------------------------------------------------------- host helpers

#: The lock file of ``nvfabric run`` in its state directory: one run per node.
LOCK_FILE = "run.lock"


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
        pid = json.loads(text).get("pid")
    except (ValueError, AttributeError):
        pid = None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 0


def live_ready(state_dir: str) -> tuple[dict[str, object] | None, str]:
    """The readiness of the run in ``state_dir`` (RUN.md R10): (the ready file's object, "")
    when ``<state_dir>/ready`` exists and the pid inside is the live ``nvfabric run`` holding
    the run lock; else (None, why: no file, unreadable, or stale: its pid does not hold the
    lock). Reads only."""
    path = os.path.join(state_dir, READY_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, f"no readiness file {path}: no run is ready"
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror or err}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"{path} is not a regular file"
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    try:
        info = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        info = None
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


def not_a_directory(path: str) -> str | None:
    """The first of ``path`` and its ancestors that exists and is not a directory (a file
    where the state directory should be), else None. Symbolic links are followed."""
    probe = os.path.abspath(path)
    chain = []
    while True:
        chain.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for candidate in reversed(chain):  # from / down
        if not os.path.exists(candidate):
            return None
        if not os.path.isdir(candidate):
            return candidate
    return None



def wait_for_stop(message: str, log: Log | None = None) -> str:
    """Log ``message`` and block until SIGTERM or SIGINT (its name returned); a SIGHUP on the
    way is logged (:data:`SIGHUP_IGNORED`) and ignored."""
    log = log or Log()
    signals = {*_STOP_SIGNALS, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    log.say(message)
    while True:
        signum = signal.sigwait(signals)
        if signum != signal.SIGHUP:
            return signal.Signals(signum).name
        log.say(SIGHUP_IGNORED)


def ensure_dir(path: str, mode: int = 0o700) -> bool:
    """Create ``path`` (and missing parents, 0755) with ``mode`` when it does not exist; an
    existing directory is left exactly as it is (R06). Returns True when created."""
    if os.path.isdir(path):
        return False
    parent = os.path.dirname(path.rstrip("/"))
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, mode=0o755, exist_ok=True)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return False
    os.chmod(path, mode)  # mkdir's mode is cut by the umask; this is the mode we asked for
    return True


def sd_notify(message: str, environ: dict[str, str] | None = None) -> bool:
    """Send ``message`` (``READY=1``) to ``$NOTIFY_SOCKET`` (sd_notify(3) protocol: one
    datagram to a Unix socket, ``@`` for the abstract namespace). False when unset, not an
    absolute path or ``@name``, or the send failed (nobody listens, a full queue for 0.5 s)."""
    path = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET")
    if not path or path[0] not in "/@" or path == "@":
        # sd_notify(3): an absolute path or "@" and an abstract name; anything else (a
        # relative name would be looked up in our working directory) is not systemd's
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            # A receiver that does not read (its queue holds net.unix.max_dgram_qlen
            # datagrams, 10 by default) must not stall the supervisor's loop: bounded.
            sock.settimeout(_NOTIFY_TIMEOUT_S)
            # never raises for text that is not UTF-8 (printable() escapes it where it
            # matters; this is the belt for any other caller)
            sock.sendto(message.encode("utf-8", "backslashreplace"), address)
        return True
    except OSError:
        return False


def status_text(text: str) -> str:
    """``text`` as a ``STATUS=`` value: :func:`printable` (no newline can add an assignment,
    always UTF-8) and at most :data:`STATUS_MAX_BYTES` bytes (cut at a character, ``...``
    appended), so that the datagram it goes in stays within what systemd reads."""
    text = printable(text)
    data = text.encode()
    if len(data) <= STATUS_MAX_BYTES:
        return text
    return data[:STATUS_MAX_BYTES - 3].decode("utf-8", "ignore") + "..."


def notify_nothing_to_start(why: str) -> bool:
    """A run that ends with exit 0 starting nothing (fabric ``none``, IMEX owned by another
    starter): ``READY=1`` and ``STATUS=why`` first, so that a ``Type=notify`` unit counts it
    as a successful start (a main process exiting before READY=1 is a failed start, result
    ``protocol``). False when ``$NOTIFY_SOCKET`` is unset or unreachable."""
    return sd_notify(f"READY=1\nSTATUS={status_text(why) if why else 'nothing to start'}")


def watchdog_usec(environ: dict[str, str] | None = None, pid: int | None = None) -> int | None:
    """The watchdog interval systemd expects pings within, in microseconds, or None when no
    watchdog applies to this process, as sd_watchdog_enabled(3) decides: ``$WATCHDOG_USEC``
    unset, not a positive decimal integer, or ``$WATCHDOG_PID`` set to another pid than
    ``pid`` (default: this process; the variables are inherited by children, who must not
    ping). Pure; never raises."""
    env = environ if environ is not None else os.environ
    text = env.get("WATCHDOG_USEC", "")
    if not text.isascii() or not text.isdigit() or int(text) <= 0:
        return None
    owner = env.get("WATCHDOG_PID")
    if owner is not None:
        me = os.getpid() if pid is None else pid
        if not owner.isascii() or not owner.isdigit() or int(owner) != me:
            return None
    return int(text)


def socket_listening(path: str) -> bool:
    """True when a process accepts connections on the Unix socket at ``path`` (a path longer
    than sockaddr_un allows is reached through ``/proc/self/fd`` of its directory)."""
    fd = None
    try:
        name = path
        if len(os.fsencode(path)) >= 100:
            fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
            name = f"/proc/self/fd/{fd}/{os.path.basename(path)}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            sock.connect(name)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


#: prctl(2) option: the signal a process gets when its parent thread exits
#: (<linux/prctl.h> PR_SET_PDEATHSIG = 1). Kept across execve except for set-user-ID programs.
_PR_SET_PDEATHSIG = 1
_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def spawn(argv: Sequence[str], env: dict[str, str]) -> tuple[int, int]:
    """Start ``argv`` (argv[0] an absolute path) in its own process group, stdin /dev/null,
    stdout and stderr into one pipe, the signals of :data:`_RESET_SIGNALS` at their default
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
                setsigdef=_RESET_SIGNALS,
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
                for sig in _RESET_SIGNALS:
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


class _Inotify:
    """Directory watch with inotify(7) through libc (ctypes): readable when an entry is
    created, moved in or changed. Raises OSError when inotify is unavailable."""

    IN_ATTRIB = 0x00000004
    IN_MOVED_TO = 0x00000080
    IN_CREATE = 0x00000100
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000

    _libc: ctypes.CDLL | None = None

    def __init__(self, directory: str) -> None:
        if _Inotify._libc is None:
            _Inotify._libc = ctypes.CDLL(None, use_errno=True)
        libc = _Inotify._libc
        fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        mask = self.IN_CREATE | self.IN_MOVED_TO | self.IN_ATTRIB
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, os.strerror(err), directory)
        self.fd: int = fd

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.fd, 65536):
                pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


# --------------------------------------------------------------------------- the supervisor


@dataclass
class _Proc:
    spec: ServiceSpec
    pid: int
    fd: int | None
    started: float
    classifier: Classifier | None
    last: deque[str]
    buf: bytearray = field(default_factory=bytearray)
    ready: bool = False
    status: int | None = None
    watch: _Inotify | None = None
    line_seen: bool = False


class Supervisor:
    """Runs ``specs`` as one unit under ``policy``; :meth:`run` blocks until the unit ends
    and returns its :class:`Outcome`. Must be called from the main thread (signals).

    ``classifier(name)`` makes the live diagnosis of one service's lines; ``probe()`` reads
    the GPUs' fabric state (needed when a spec has ``ready_gpus``); ``ready_file`` is written
    when the unit is ready and removed when it stops; ``pid_dir`` gets ``<service>.pid`` for
    each running service (what ``nvfabric status`` looks for).
    """

    def __init__(
        self,
        specs: Sequence[ServiceSpec],
        policy: Policy | None = None,
        *,
        log: Log | None = None,
        classifier: Callable[[str], Classifier] | None = None,
        probe: Callable[[], GpuCheck] | None = None,
        ready_file: str | None = None,
        ready_info: dict[str, object] | None = None,
        pid_dir: str | None = None,
        preflight: Callable[[], Sequence[Finding]] | None = None,
    ) -> None:
        if not specs:
            raise ValueError("a unit needs at least one service")
        self.specs = tuple(specs)
        self.policy = policy or Policy()
        self.log = log or Log()
        self._make_classifier = classifier
        self._probe_fn = probe
        self.ready_file = ready_file
        self.ready_info = dict(ready_info or {})
        self.pid_dir = pid_dir
        self._preflight_fn = preflight
        self._starts: deque[float] = deque()  # monotonic times of the unit's starts
        reap = self.policy.reap_orphans
        self._reap_orphans = os.getpid() == 1 if reap is None else reap
        self._env = {k: v for k, v in os.environ.items()
                     if k not in _SYSTEMD_ENV}
        # run state
        self._procs: list[_Proc] = []
        self._timers: dict[str, tuple[float, Callable[[], None]]] = {}
        self._phase = "idle"  # starting | ready | stopping | waiting | done
        self._stop_reason = ""
        self._shutdown = False
        self._stop_signal_at: float | None = None  # monotonic time of the first stop signal
        self._failure: list[Finding] = []
        self._past_exits: list[Finding] = []  # service_exited of failures handled by a restart
        self._notes: list[Finding] = []
        self._registered = self.policy.registered_at_start
        self._restarts = 0
        self._backoff_n = 0
        self._unit_started = 0.0
        self._ready_at: float | None = None
        self._ready_after: float | None = None
        self._probe_interval = self.policy.probe_interval_s
        self._probe_busy = False
        self._gpus_unsupported = False
        self._stuck_reported = False
        self._probe_error_logged: str | None = None
        self._last_probe: str | None = None  # the waiting service's last probe answer
        self._reap_pending = False
        self._outcome: Outcome | None = None
        self._watchdog_s: float | None = None  # seconds between WATCHDOG=1 pings
        self._status = ""  # the last STATUS= sent
        # machinery (set up in run)
        self._sel: selectors.BaseSelector | None = None
        self._sig_r = self._sig_w = -1
        self._wake_r = self._wake_w = -1
        self._old_handlers: dict[int, object] = {}
        self._old_wakeup = -1
        self._probe_lock = threading.Lock()
        self._probe_requests: queue.Queue[bool] = queue.Queue()
        self._probe_results: queue.Queue[GpuCheck] = queue.Queue()
        self._probe_thread: threading.Thread | None = None

    # ----------------------------------------------------------------- public

    def run(self) -> Outcome:
        """Start the unit and supervise it until it stops; see the module docstring."""
        self._setup()
        try:
            if self._reset_gate():
                self._start_unit()
            while self._outcome is None:
                timeout = self._next_timeout()
                assert self._sel is not None
                for key, _ in self._sel.select(timeout):
                    callback: Callable[[], None] = key.data
                    callback()
                    if self._outcome is not None:
                        break
                self._fire_timers()
            return self._outcome
        finally:
            self._teardown()

    # ----------------------------------------------------------------- setup / teardown

    def _setup(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._sig_r, self._sig_w = os.pipe()
        os.set_blocking(self._sig_r, False)
        os.set_blocking(self._sig_w, False)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._sig_w, warn_on_full_buffer=False)
        for sig in (*_STOP_SIGNALS, signal.SIGCHLD, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _noop_handler)
        self._sel.register(self._sig_r, selectors.EVENT_READ, self._on_signal)
        self._sel.register(self._wake_r, selectors.EVENT_READ, self._on_wake)
        usec = watchdog_usec()
        if usec is not None:
            self._watchdog_s = usec / 2e6  # sd_watchdog_enabled(3): ping at half the interval
            self._on_watchdog()
        if self._probe_fn is not None:
            self._probe_thread = threading.Thread(
                target=self._probe_worker, name="nvfabric-gpu-probe", daemon=True)
            self._probe_thread.start()

    def _teardown(self) -> None:
        for proc in self._procs:
            if proc.status is None:
                self._kill(proc, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(proc.pid, 0)
                proc.status = -1
            self._close_proc(proc)
        if self._probe_thread is not None:
            self._probe_requests.put(False)
            self._probe_thread.join(timeout=0.5)  # a hung probe must not delay the exit
        signal.set_wakeup_fd(self._old_wakeup)
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if self._sel is not None:
            self._sel.close()
        for fd in (self._sig_r, self._sig_w, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ----------------------------------------------------------------- timers

    def _at(self, tag: str, delay: float, callback: Callable[[], None]) -> None:
        self._timers[tag] = (time.monotonic() + delay, callback)

    def _cancel(self, *tags: str) -> None:
        for tag in tags:
            self._timers.pop(tag, None)

    def _next_timeout(self) -> float | None:
        if not self._timers:
            return None
        return min(_MAX_WAIT_S,
                   max(0.0, min(d for d, _ in self._timers.values()) - time.monotonic()))

    def _on_watchdog(self) -> None:
        """Tell systemd the loop still turns, and ping again half an interval later."""
        sd_notify("WATCHDOG=1")
        assert self._watchdog_s is not None
        self._at("watchdog", self._watchdog_s, self._on_watchdog)

    def _ping_if_due(self) -> None:
        """The watchdog timer, from a loop of its own (the GPU reset command's)."""
        entry = self._timers.get("watchdog")
        if entry is not None and entry[0] <= time.monotonic():
            self._on_watchdog()

    def _until_ping(self) -> float:
        """Seconds until the next watchdog ping is due (inf without a watchdog)."""
        entry = self._timers.get("watchdog")
        return float("inf") if entry is None else max(0.0, entry[0] - time.monotonic())

    def _say_status(self, text: str) -> None:
        """systemd's ``STATUS=`` (what ``systemctl status`` shows), sent when it changes.
        Control characters are escaped and the length bounded (:func:`status_text`): a
        probe's answer with a newline would otherwise be a second assignment (``READY=1``) in
        the datagram, and a datagram over 4096 bytes is dropped by systemd."""
        text = status_text(text)
        if text != self._status:
            self._status = text
            sd_notify("STATUS=" + text)

    def _fire_timers(self) -> None:
        now = time.monotonic()
        due = sorted((d, tag) for tag, (d, _) in self._timers.items() if d <= now)
        for deadline, tag in due:
            if self._outcome is not None:
                return
            entry = self._timers.get(tag)
            if entry is not None and entry[0] == deadline:  # not cancelled or replaced since
                del self._timers[tag]
                entry[1]()

    # ----------------------------------------------------------------- start

    def _start_unit(self) -> None:
        self._starts.append(time.monotonic())
        self._phase = "starting"
        self._procs = []
        self._unit_started = time.monotonic()
        self._ready_at = None
        self._probe_interval = self.policy.probe_interval_s
        self._stuck_reported = False
        self._last_probe = None
        self._remove_ready_file()
        self._spawn_next()

    def _reset_gate(self) -> bool:
        """R04, before every start: once GPUs registered, a service that needs a GPU reset
        before it starts again gets one (the operator's command) or the unit is not started
        (outcome set, False)."""
        if self._registered and any(s.restart_needs_gpu_reset for s in self.specs):
            names = ", ".join(s.name for s in self.specs if s.restart_needs_gpu_reset)
            return self._gpu_reset(names)
        return True

    def _spawn_next(self) -> None:
        spec = self.specs[len(self._procs)]
        try:
            for directory in spec.runtime_dirs:
                if ensure_dir(directory):
                    self.log.say(f"created {directory} (mode 0700)")
            if spec.ready_socket and is_socket(spec.ready_socket):
                if socket_listening(spec.ready_socket):
                    self._fail(Finding(
                        "sm_already_running", "error",
                        f"something already listens on {spec.ready_socket}: another "
                        f"{spec.name} owns the management port",
                        "stop the other subnet manager (a hand-made nvlsm/opensm unit or the "
                        "vendor start script); one owner per management port"))
                    return
                os.unlink(spec.ready_socket)
                self.log.say(f"removed stale socket {spec.ready_socket}")
            env = dict(self._env)
            env.update(spec.env)
            # Before the spawn: the first classifier loads the diagnosis catalogue (tens of
            # ms), which must not delay noticing this service's readiness.
            classifier = self._make_classifier(spec.name) if self._make_classifier else None
            pid, fd = spawn(spec.argv, env)
        except OSError as err:
            self._fail(Finding(
                "binary_missing" if err.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC)
                else "service_exited", "error",
                f"cannot start {spec.name} ({spec.argv[0]}): {exec_error(spec.argv[0], err)}",
                INTERPRETER_HINT if missing_interpreter(spec.argv[0]) else
                f"check that {spec.argv[0]} is installed and executable",
                {"service": spec.name}))
            return
        proc = _Proc(spec, pid, fd, time.monotonic(), classifier,
                     deque(maxlen=self.policy.last_lines))
        self._procs.append(proc)
        assert self._sel is not None
        self._sel.register(fd, selectors.EVENT_READ, lambda: self._on_output(proc))
        self.log.say(f"started {spec.name} (pid {pid}): {' '.join(spec.argv)}")
        if self.pid_dir:
            try:
                write_atomic(os.path.join(self.pid_dir, f"{spec.name}.pid"), f"{pid}\n",
                             mode=0o644, backup=False, dir_mode=0o700)
            except OSError as err:
                self.log.say(f"cannot write the pid file of {spec.name}: {err}")
        if spec.ready_socket:
            self._watch_socket(proc)
        elif spec.ready_gpus:
            self._say_status(f"{spec.name} started; waiting for {spec.ready_probe.label}")
            self._at("ready-timeout", self.policy.ready_timeout_s, self._on_ready_timeout)
            self._at("probe", self._probe_interval, self._request_probe)
        elif not spec.ready_line:
            self._mark_ready(proc)

    def _watch_socket(self, proc: _Proc) -> None:
        path = proc.spec.ready_socket
        assert path is not None
        directory = os.path.dirname(path) or "/"
        try:
            proc.watch = _Inotify(directory)
            assert self._sel is not None
            self._sel.register(proc.watch.fd, selectors.EVENT_READ,
                               lambda: self._on_socket_event(proc))
        except OSError as err:
            self.log.say(f"inotify unavailable ({err.strerror or err}); polling {path} every "
                         f"{_POLL_FALLBACK_S * 1000:.0f} ms")
            self._at("socket-poll", _POLL_FALLBACK_S, lambda: self._on_socket_event(proc))
        self._at("socket-timeout", self.policy.socket_timeout_s,
                 lambda: self._on_socket_timeout(proc))
        self._say_status(f"waiting for {proc.spec.name} IPC socket {path}")
        self._on_socket_event(proc)  # it may exist already

    def _on_socket_event(self, proc: _Proc) -> None:
        if proc.watch is not None:
            proc.watch.drain()
        if proc.ready or proc.status is not None or self._phase != "starting":
            return
        path = proc.spec.ready_socket
        assert path is not None
        if is_socket(path):
            self._unwatch(proc)
            self.log.say(f"{proc.spec.name} IPC socket {path} is up after "
                         f"{time.monotonic() - proc.started:.3f} s")
            self._mark_ready(proc)
        elif proc.watch is None:
            self._at("socket-poll", _POLL_FALLBACK_S, lambda: self._on_socket_event(proc))

    def _unwatch(self, proc: _Proc) -> None:
        self._cancel("socket-timeout", "socket-poll")
        if proc.watch is not None:
            if self._sel is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(proc.watch.fd)
            proc.watch.close()
            proc.watch = None

    def _on_socket_timeout(self, proc: _Proc) -> None:
        self._unwatch(proc)
        path = proc.spec.ready_socket
        self._fail(Finding(
            "socket_timeout", "error",
            f"{proc.spec.name} did not create its IPC socket {path} within "
            f"{self.policy.socket_timeout_s:g} s; fabric manager was not started",
            "look at the service's last lines below (is ib_umad loaded? is the GUID the one of "
            "an LPF port with the SM enabled?), or raise --socket-timeout",
            {"service": proc.spec.name, "socket": path,
             "last_lines": list(proc.last)}), proc)

    def _mark_ready(self, proc: _Proc) -> None:
        proc.ready = True
        if len(self._procs) < len(self.specs):
            self._spawn_next()
            return
        self._cancel("probe", "ready-timeout")
        self._phase = "ready"
        self._ready_at = time.monotonic()
        self._ready_after = self._ready_at - self._unit_started
        if self.ready_file:
            info = dict(self.ready_info)
            info.update({"pid": os.getpid(), "ready_after_s": round(self._ready_after, 3),
                         "restarts": self._restarts,
                         "services": [{"service": p.spec.name, "pid": p.pid}
                                      for p in self._procs]})
            try:
                write_atomic(self.ready_file, json.dumps(info) + "\n", mode=0o644,
                             backup=False, dir_mode=0o700)
            except OSError as err:
                self.log.say(f"cannot write readiness file {self.ready_file}: {err}")
        self._status = f"fabric ready in {self._ready_after:.1f} s"
        notified = sd_notify(f"READY=1\nSTATUS={self._status}")
        pids = ", ".join(f"{p.spec.name} pid {p.pid}" for p in self._procs)
        self.log.say(f"fabric ready in {self._ready_after:.3f} s ({pids})"
                     + ("; READY=1 sent to $NOTIFY_SOCKET" if notified else ""))

    def _remove_ready_file(self) -> None:
        if self.ready_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.ready_file)

    # ----------------------------------------------------------------- GPU probe

    def _probe_worker(self) -> None:
        assert self._probe_fn is not None
        while self._probe_requests.get():
            with self._probe_lock:
                try:
                    result = self._probe_fn()
                except Exception as err:  # noqa: BLE001 - reported as a probe error
                    result = GpuCheck(False, False, "unreadable", f"{type(err).__name__}: {err}")
            self._probe_results.put(result)
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"p")

    def _request_probe(self) -> None:
        if self._probe_fn is None:
            self.log.say("no GPU probe available; taking the success line as readiness")
            proc = self._waiting_gpus()
            if proc is not None:
                self._mark_ready(proc)
            return
        if not self._probe_busy:
            self._probe_busy = True
            self._probe_requests.put(True)

    def _waiting_gpus(self) -> _Proc | None:
        if self._phase != "starting" or not self._procs:
            return None
        proc = self._procs[-1]
        if proc.spec.ready_gpus and not proc.ready and proc.status is None:
            return proc
        return None

    def _on_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_r, 4096)
        while True:
            try:
                result = self._probe_results.get_nowait()
            except queue.Empty:
                break
            self._probe_busy = False
            self._on_probe(result)
        if self._reap_pending:
            self._reap()

    def _on_probe(self, result: GpuCheck) -> None:
        if result.registered or result.ready:
            self._registered = True
        proc = self._waiting_gpus()
        if proc is None:
            return
        words = proc.spec.ready_probe
        self._last_probe = result.error or result.summary
        if not result.ready:
            if result.progress is not None:
                done, total = result.progress
                self._say_status(f"waiting for GPU fabric registration: {done}/{total} GPUs "
                                 "completed")
            else:
                self._say_status(f"waiting for {words.label}: {self._last_probe}")
        if result.error and result.error != self._probe_error_logged:
            self.log.say(f"{words.label} {words.waiting}: {result.error}")
            self._probe_error_logged = result.error
        if result.ready:
            self.log.say(f"{words.label}: {result.summary}")
            for f in result.findings:
                self._notes.append(f)
                self.log.finding(f)
            self._mark_ready(proc)
            return
        if not result.supported:
            self._gpus_unsupported = True
            if proc.line_seen:
                self.log.say(f"GPU fabric state: {result.summary}; taking {proc.spec.name}'s "
                             "success line as readiness")
                self._mark_ready(proc)
            return  # the success line decides from now on
        self._probe_interval = min(self._probe_interval * 1.5, self.policy.probe_max_interval_s)
        self._at("probe", self._probe_interval, self._request_probe)

    def _on_ready_timeout(self) -> None:
        proc = self._waiting_gpus()
        if proc is None or self._stuck_reported:
            return
        self._stuck_reported = True
        f = proc.spec.ready_probe.stuck(proc.spec.name, self.policy.ready_timeout_s,
                                        self._last_probe)
        self._notes.append(f)
        self.log.finding(f)

    def _gpu_reset(self, names: str) -> bool:
        """R04: run the operator's reset command before (re)starting ``names``; False (and the
        outcome set, see :meth:`_refuse`) when that is not allowed or fails."""
        argv = self.policy.gpu_reset_argv
        if not argv:
            self._refuse(Finding(
                "restart_needs_gpu_reset", "error",
                f"{names} would be restarted after GPUs registered with the NVLink fabric; on "
                "H100 and later that breaks NVLink SHARP (NCCL 'invalid argument') until the "
                "GPUs are reset, so nvfabric does not do it silently",
                "stop CUDA clients, then rerun with --gpu-reset-command 'nvidia-smi -r' (or your "
                "reset procedure), or reboot the node",
                {"services": names}))
            return False
        self.log.say(f"resetting GPUs before starting {names}: {' '.join(argv)}")
        self._say_status(f"resetting GPUs before starting {names}")
        try:
            returncode, output, stopped_by = self._run_reset(argv)
        except OSError as err:
            self._refuse(Finding(
                "restart_needs_gpu_reset", "error", f"the GPU reset command failed: {err}",
                "check --gpu-reset-command; the GPUs must be reset before fabric manager starts",
                {"services": names}))
            return False
        for raw in output.decode("utf-8", "replace").splitlines():
            self.log.line(f"gpu-reset: {raw}")
        if stopped_by is not None:  # an orderly stop: nothing starts after the reset
            self._shutdown = True
            self.log.say(f"received {stopped_by} during the GPU reset: the reset command was "
                         "stopped (SIGTERM to its process group); nothing is started")
            self._finish(0, "stopped", [])
            return False
        if returncode is None:
            timeout = self.policy.gpu_reset_timeout_s
            self._refuse(Finding(
                "restart_needs_gpu_reset", "error",
                f"the GPU reset command did not finish within {timeout:g} s and was killed; "
                f"{names} was not started",
                "find what holds the GPUs (CUDA clients, nvidia-persistenced), or raise "
                "--gpu-reset-timeout; the GPUs must be reset before fabric manager starts",
                {"services": names, "timeout_s": timeout}))
            return False
        if returncode != 0:
            self._refuse(Finding(
                "restart_needs_gpu_reset", "error",
                f"the GPU reset command exited with code {returncode}",
                "stop every CUDA client first (a GPU in use cannot be reset), or reboot",
                {"services": names}))
            return False
        return self._reset_verified(names, argv)

    def _reset_verified(self, names: str, argv: Sequence[str]) -> bool:
        """R09: after the reset command returned 0, the GPUs' fabric state is read again (the
        probe, in this thread: nothing runs yet); a GPU still registered (the command did
        nothing, or reset other GPUs), or a state that cannot be read, is not a reset: the
        outcome is ``restart_needs_gpu_reset`` naming the GPUs and False."""
        if self._probe_fn is None:  # nothing to read the state with (no GPU readiness)
            self._registered = False
            return True
        with self._probe_lock:
            try:
                check = self._probe_fn()
            except Exception as err:  # noqa: BLE001 - reported as an unverified reset
                check = GpuCheck(False, False, "unreadable", f"{type(err).__name__}: {err}")
        command = " ".join(argv)
        if check.registered:
            gpus = list(check.registered_gpus)
            shown = ", ".join(gpus) if gpus else check.summary
            self._refuse(Finding(
                "restart_needs_gpu_reset", "error",
                f"`{command}` returned 0 but GPUs are still registered with the NVLink fabric "
                f"({shown}; {check.summary}): {names} was not started",
                "the reset command did not reset these GPUs (wrong GPUs, or it does nothing): "
                "stop CUDA clients and reset them (nvidia-smi -r), or reboot the node",
                {"services": names, "gpus": gpus, "summary": check.summary}))
            return False
        if check.error is not None:
            self._refuse(Finding(
                "restart_needs_gpu_reset", "error",
                f"`{command}` returned 0 but the GPUs' fabric state cannot be read to check "
                f"it ({check.error}): {names} was not started",
                "check the driver and nvidia-smi, then run again; the reset must be seen "
                "before fabric manager starts", {"services": names, "gpus": [],
                                                 "summary": check.summary}))
            return False
        self.log.say(f"GPU reset checked: {check.summary}")
        self._registered = False
        return True

    def _run_reset(self, argv: Sequence[str]) -> tuple[int | None, bytes, str | None]:
        """Run the reset command in its own process group, bounded by the policy's timeout,
        while watching the stop signals: (exit code, output, None) when it ended; (None,
        output, None) when it timed out (its group SIGKILLed); (None, output, signal name)
        when SIGTERM/SIGINT came (its group SIGTERMed, then SIGKILLed after the grace).
        OSError when it cannot be started."""
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        assert child.stdout is not None
        out_fd = child.stdout.fileno()
        os.set_blocking(out_fd, False)
        output = bytearray()
        stopped_by: str | None = None
        deadline = time.monotonic() + self.policy.gpu_reset_timeout_s
        sel = selectors.DefaultSelector()
        sel.register(out_fd, selectors.EVENT_READ, "out")
        sel.register(self._sig_r, selectors.EVENT_READ, "sig")

        def drain() -> bool:
            """Read what is there; False at end of file."""
            while True:
                try:
                    chunk = os.read(out_fd, 65536)
                except BlockingIOError:
                    return True
                if not chunk:
                    return False
                output.extend(chunk[: max(0, (1 << 20) - len(output))])

        try:
            while child.poll() is None and stopped_by is None:
                self._ping_if_due()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in sel.select(min(left, 0.5, self._until_ping())):
                    if key.data == "out":
                        if not drain():
                            sel.unregister(out_fd)
                        continue
                    try:
                        data = os.read(self._sig_r, 512)
                    except BlockingIOError:
                        continue
                    for signum in data:
                        if signum in _STOP_SIGNALS:
                            stopped_by = signal.Signals(signum).name
                        elif signum == signal.SIGHUP:
                            self.log.say(SIGHUP_IGNORED)
        finally:
            sel.close()
        if child.poll() is None:
            sig = signal.SIGTERM if stopped_by else signal.SIGKILL
            with contextlib.suppress(OSError):
                os.killpg(child.pid, sig)
            try:
                child.wait(10.0 if stopped_by else 5.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            drain()
            child.stdout.close()
            return None, bytes(output), stopped_by
        drain()
        child.stdout.close()
        return child.returncode, bytes(output), stopped_by

    def _refuse(self, finding: Finding) -> None:
        """End the run because the unit may not be (re)started: the refusal is logged (with
        its hint) and comes after the failure that led to the restart, which is kept."""
        self.log.finding(finding)
        self._finish(1, "failed", [*self._failure, finding])

    # ----------------------------------------------------------------- output

    def _on_output(self, proc: _Proc) -> None:
        self._read(proc)

    def _read(self, proc: _Proc) -> bool:
        """Read one block of ``proc``'s output and log its complete lines. False when there
        is nothing more for now (would block) or ever (end of output: closed)."""
        if proc.fd is None:
            return False
        try:
            data = os.read(proc.fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close_output(proc)
            return False
        self._take(proc, data)
        return True

    def _take(self, proc: _Proc, data: bytes) -> None:
        proc.buf += data
        while True:
            cut = proc.buf.find(b"\n")
            if cut < 0:
                if len(proc.buf) > _MAX_LINE:
                    cut = _MAX_LINE
                else:
                    break
            raw = bytes(proc.buf[:cut])
            del proc.buf[: cut + 1]
            self._line(proc, raw.decode("utf-8", "replace").rstrip("\r"))

    def _line(self, proc: _Proc, text: str) -> None:
        self.log.line(f"{proc.spec.name}: {text}")
        proc.last.append(text)
        if proc.classifier is not None:
            try:
                new = proc.classifier.feed(text)
            except Exception as err:  # noqa: BLE001 - diagnosis must never stop supervision
                new = []
                self.log.say(f"diagnosis failed on a line: {type(err).__name__}: {err}")
            for f in new:
                self.log.finding(f)
        if (proc.spec.ready_line and not proc.ready and self._phase == "starting"
                and re.search(proc.spec.ready_line, text)):
            proc.line_seen = True
            if proc.spec.ready_gpus and self._gpus_unsupported:
                self.log.say("GPU fabric state is not supported on these GPUs; taking "
                             f"{proc.spec.name}'s success line as readiness")
                self._mark_ready(proc)
            elif proc.spec.ready_gpus:
                self._cancel("probe")
                self._request_probe()
            else:
                self._mark_ready(proc)

    def _drain(self, proc: _Proc) -> None:
        """Everything ``proc`` has written so far, its last unterminated line included."""
        while self._read(proc):
            pass
        if proc.buf:
            text = bytes(proc.buf).decode("utf-8", "replace").rstrip("\r")
            proc.buf.clear()
            self._line(proc, text)

    def _close_output(self, proc: _Proc) -> None:
        if proc.fd is None:
            return
        if self._sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(proc.fd)
        with contextlib.suppress(OSError):
            os.close(proc.fd)
        proc.fd = None

    def _close_proc(self, proc: _Proc) -> None:
        self._close_output(proc)
        if self.pid_dir and proc.status is not None:
            with contextlib.suppress(OSError):
                path = os.path.join(self.pid_dir, f"{proc.spec.name}.pid")
                with open(path, encoding="utf-8") as fh:
                    mine = fh.read(64).strip() == str(proc.pid)  # a pid file: one short line
                if mine:
                    os.unlink(path)
        if proc.watch is not None:
            proc.watch.close()
            proc.watch = None

    # ----------------------------------------------------------------- signals and exits

    def _on_signal(self) -> None:
        try:
            data = os.read(self._sig_r, 512)
        except BlockingIOError:
            return
        got_chld = False
        for signum in data:
            if signum == signal.SIGCHLD:
                got_chld = True
            elif signum in _STOP_SIGNALS:
                self._on_stop_signal(signal.Signals(signum).name)
            elif signum == signal.SIGHUP:
                self.log.say(SIGHUP_IGNORED)
        if got_chld:
            self._reap()

    def _reap(self) -> None:
        for proc in list(self._procs):
            if proc.status is not None:
                continue
            try:
                pid, status = os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = proc.pid, 0
            if pid == proc.pid:
                self._on_exit(proc, status)
                if self._outcome is not None:
                    return
        if self._reap_orphans:
            self._reap_others()

    def _reap_others(self) -> None:
        """As PID 1: reap every exited child (orphans re-parented to us). Skipped while the
        GPU probe runs, whose own child's status its subprocess call must collect."""
        if not self._probe_lock.acquire(blocking=False):
            self._reap_pending = True
            return
        try:
            self._reap_pending = False
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                for proc in self._procs:
                    if proc.pid == pid and proc.status is None:
                        self._on_exit(proc, status)
                        break
        finally:
            self._probe_lock.release()

    def _on_exit(self, proc: _Proc, status: int) -> None:
        proc.status = status
        self._drain(proc)
        self._close_proc(proc)
        text, code, sig = describe_status(status)
        if proc.spec.ready_socket:
            self._cancel("socket-timeout", "socket-poll")
        if self._phase == "stopping":
            self.log.say(f"{proc.spec.name} stopped ({text})")
            self._cancel(f"kill:{proc.spec.name}")
            self._stop_next()
            return
        phase = "during start" if self._phase == "starting" else "after the fabric was ready"
        diagnosis = proc.classifier.findings() if proc.classifier is not None else []
        fields: dict[str, object] = {
            "service": proc.spec.name, "exit_code": code, "signal": sig, "phase": phase,
            "last_lines": list(proc.last), "diagnosis": [f.code for f in diagnosis]}
        cause = f"; diagnosis: {diagnosis[0].code}: {diagnosis[0].message}" if diagnosis else ""
        hint = diagnosis[0].hint if diagnosis and diagnosis[0].hint else (
            "read the service's last lines above; `nvfabric doctor --log FILE` explains a "
            "saved log")
        self._fail(Finding("service_exited", "error",
                           f"{proc.spec.name} (pid {proc.pid}) {text} {phase}{cause}", hint,
                           fields), proc, diagnosis)

    def _on_stop_signal(self, name: str) -> None:
        now = time.monotonic()
        if self._phase == "stopping":
            if self._shutdown:
                first = self._stop_signal_at
                if first is not None and now - first < REPEATED_STOP_WINDOW_S:
                    self.log.say(f"received {name} again {now - first:.3f} s after the first: "
                                 "the same stop request, still stopping in order")
                    return
                self.log.say(f"received {name} again: killing what is left")
                for proc in self._procs:
                    if proc.status is None:
                        self._kill(proc, signal.SIGKILL)
                return
        self._shutdown = True
        if self._stop_signal_at is None:
            self._stop_signal_at = now
        if self.policy.restart == "on-failure":
            self._keep_exits("the run was stopped before its restart")
            self._failure = []  # failures are ours to handle; the operator asked for a stop
        self.log.say(f"received {name}: stopping in reverse start order")
        if self._phase == "waiting" or not any(p.status is None for p in self._procs):
            self._cancel("restart")
            self._finish(1 if self._failure else 0, "failed" if self._failure else "stopped",
                         self._failure)
            return
        if self._phase != "stopping":
            self._begin_stop("shutdown")

    # ----------------------------------------------------------------- failing and stopping

    def _fail(self, finding: Finding, proc: _Proc | None = None,
              diagnosis: list[Finding] | None = None) -> None:
        self.log.finding(finding)
        if proc is not None and finding.code == "service_exited":
            self.log.say(f"last lines of {proc.spec.name}:")
            for text in proc.last:
                self.log.line(f"  | {text}")
        for f in diagnosis or []:
            self.log.finding(f)
        self._failure = [finding, *[f for f in (diagnosis or []) if f.code != finding.code]]
        if self._phase == "stopping":
            return
        self._begin_stop("failure")

    def _begin_stop(self, reason: str) -> None:
        self._phase = "stopping"
        self._stop_reason = reason
        for tag in list(self._timers):
            if not tag.startswith("kill:") and tag != "watchdog":
                del self._timers[tag]
        for proc in self._procs:
            self._unwatch(proc)
        self._remove_ready_file()
        if reason == "shutdown":
            sd_notify("STOPPING=1")
        self._stop_next()

    def _stop_next(self) -> None:
        for proc in reversed(self._procs):
            if proc.status is None:
                if f"kill:{proc.spec.name}" in self._timers:
                    return  # already asked, waiting for it
                self.log.say(f"stopping {proc.spec.name} (pid {proc.pid}): SIGTERM, SIGKILL "
                             f"after {proc.spec.grace_s:g} s")
                self._say_status(f"stopping {proc.spec.name}")
                self._kill(proc, signal.SIGTERM)
                self._at(f"kill:{proc.spec.name}", proc.spec.grace_s,
                         functools.partial(self._on_grace_over, proc))
                return
        self._stopped_all()

    def _on_grace_over(self, proc: _Proc) -> None:
        if proc.status is None:
            self.log.say(f"{proc.spec.name} (pid {proc.pid}) ignored SIGTERM for "
                         f"{proc.spec.grace_s:g} s: SIGKILL")
            self._kill(proc, signal.SIGKILL)

    def _kill(self, proc: _Proc, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
        except PermissionError:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, sig)

    def _stopped_all(self) -> None:
        if self._stop_reason == "shutdown" or self._shutdown:
            if self._failure:
                self._finish(1, "failed", self._failure)
            else:
                self.log.say("all services stopped")
                self._finish(0, "stopped", [])
            return
        if self.policy.restart != "on-failure":
            self._finish(1, "failed", self._failure)
            return
        if self._start_limit_hit():
            return
        ran_ready = self._ready_at is not None and (
            time.monotonic() - self._ready_at >= self.policy.backoff_cap_s)
        if ran_ready:
            self._backoff_n = 0
        delay = min(self.policy.backoff_cap_s, self.policy.backoff_base_s * 2 ** self._backoff_n)
        self._backoff_n += 1
        self._phase = "waiting"
        self.log.say(f"restarting the unit in {delay:g} s (restart {self._restarts + 1})")
        self._say_status(f"restarting the unit in {delay:g} s")
        self._at("restart", delay, self._restart)

    def _start_limit_hit(self) -> bool:
        """A crash loop: ``start_limit_burst`` starts within ``start_limit_interval_s``
        (systemd's StartLimitBurst); the run ends with ``restart_limit`` (True)."""
        burst, interval = self.policy.start_limit_burst, self.policy.start_limit_interval_s
        now = time.monotonic()
        while self._starts and now - self._starts[0] > interval:
            self._starts.popleft()
        if burst <= 0 or len(self._starts) < burst:
            return False
        self._refuse(Finding(
            "restart_limit", "error",
            f"the unit was started {len(self._starts)} times within {interval:g} s and failed "
            f"each time: not restarted again (limit {burst} starts in {interval:g} s)",
            "read the failures above (the first one says why); fix the cause and start "
            "nvfabric run again, or change --restart-limit-burst/--restart-limit-interval",
            {"starts": len(self._starts), "burst": burst, "interval_s": interval}))
        return True

    def _restart_preflight(self) -> bool:
        """Before a restart, what would refuse a first start refuses it too (a binary removed
        or replaced while the unit ran: missing, not executable, another version): the run
        ends with that finding (False) instead of restarting forever."""
        problems: list[Finding] = []
        for spec in self.specs:
            binary = spec.argv[0]
            if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
                problems.append(Finding(
                    "binary_missing", "error",
                    f"{spec.name} is no longer installed at {binary} (or not executable): the "
                    "unit is not restarted", f"reinstall {spec.name}, then start nvfabric run "
                    "again", {"service": spec.name, "path": binary}))
        if not problems and self._preflight_fn is not None:
            problems += [f for f in self._preflight_fn() if f.severity == "error"]
        if not problems:
            return True
        for f in problems[1:]:
            self.log.finding(f)
        self._refuse(problems[0])
        return False

    def _restart(self) -> None:
        if not self._restart_preflight():  # not restarted: not counted, the failure is kept
            return
        if not self._reset_gate():  # not restarted: not counted, the failure is kept
            return
        self._restarts += 1
        self._keep_exits(f"the unit was restarted (restart {self._restarts})")
        self._failure = []
        self._start_unit()

    def _keep_exits(self, what: str) -> None:
        """Keep the ``service_exited`` finding of a failure that ``restart="on-failure"``
        handled, for the outcome: with the severity it was logged with (an error stays an
        error) and ``restarted`` (True: the unit went on)."""
        for f in self._failure:
            if f.code == "service_exited":
                self._past_exits.append(Finding(
                    f.code, f.severity, f"{f.message}; {what}", f.hint,
                    {**f.fields, "restarted": "restarted" in what}))

    def _finish(self, code: int, reason: str, findings: Sequence[Finding]) -> None:
        self._phase = "done"
        self._remove_ready_file()
        ready_after = None if self._ready_after is None else round(self._ready_after, 3)
        self._outcome = Outcome(code, reason, (*self._past_exits, *findings, *self._notes),
                                ready_after, self._restarts)


def _noop_handler(signum: int, frame: object) -> None:
    """Signals are handled through the wakeup fd; the Python-level handler does nothing."""

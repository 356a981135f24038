"""systemd's notify protocol (sd_notify(3)) and watchdog (sd_watchdog_enabled(3)).

One datagram per message to ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract
namespace); ``STATUS=`` text escaped and bounded so that systemd reads the datagram.
"""

from __future__ import annotations

import os

from nvfabric.effects.frozen import bootloader_pid
from nvfabric.effects.log import printable
from nvfabric.effects.sockets import SOCK_DGRAM, unix_socket
from nvfabric.model.strict import int_or_none

NOTIFY_TIMEOUT_S = 0.5
#: The most bytes of STATUS= text sent. systemd reads a notify datagram into a buffer of
#: NOTIFY_BUFFER_MAX (PIPE_BUF, 4096) bytes and ignores a longer one whole (src/core/manager.c,
#: manager_dispatch_notify_fd: "exceeded maximum size"), READY=1 in it included; checked with
#: systemd 252: READY=1 and a STATUS= of 4100 bytes in one datagram is a start timeout.
STATUS_MAX_BYTES = 1024
#: What systemd hands the main process only (sd_notify(3), sd_listen_fds(3),
#: sd_watchdog_enabled(3)): not passed on to the daemons, which must not notify or ping.
SYSTEMD_ENV = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC",
                "WATCHDOG_PID")


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
        with unix_socket(SOCK_DGRAM) as sock:
            # A receiver that does not read (its queue holds net.unix.max_dgram_qlen
            # datagrams, 10 by default) must not stall the supervisor's loop: bounded.
            sock.settimeout(NOTIFY_TIMEOUT_S)
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


def watchdog_pids() -> tuple[int, ...]:
    """The pids whose watchdog this process keeps: its own, and in the single-file binary the
    bootloader's (:func:`nvfabric.effects.frozen.bootloader_pid`): systemd names the main pid in
    ``$WATCHDOG_PID``, which is the bootloader there, and the Python child is what pings (the
    unit then needs ``NotifyAccess=all``, which the unit the binary's ``unit install`` writes
    sets; the Debian package's directory build is one process and keeps ``main``)."""
    boot = bootloader_pid()
    return (os.getpid(),) if boot is None else (os.getpid(), boot)


def watchdog_usec(environ: dict[str, str] | None = None,
                  pids: tuple[int, ...] | None = None) -> int | None:
    """The watchdog interval systemd expects pings within, in microseconds, or None when no
    watchdog applies to this process, as sd_watchdog_enabled(3) decides: ``$WATCHDOG_USEC``
    unset, not a positive decimal integer, or ``$WATCHDOG_PID`` set to a pid not in ``pids``
    (default :func:`watchdog_pids`; the variables are inherited by children, who must not
    ping). Never raises."""
    env = environ if environ is not None else os.environ
    usec = int_or_none(env.get("WATCHDOG_USEC", ""))
    if usec is None or usec <= 0:
        return None
    owner = env.get("WATCHDOG_PID")
    if owner is not None:
        mine = watchdog_pids() if pids is None else pids
        if int_or_none(owner) not in mine:
            return None
    return usec


"""The changes nvfabric makes for IMEX on a node, under a root directory (default ``/``):
channel nodes (``mknod``, mode 0666, atomic), config files (atomic writes through
:func:`nvfabric.effects.atomic.write_atomic`, a backup of different old content) and the host
unit's enablement (``systemctl``, argv only, ``--root`` for an image root). Every path goes
through :func:`nvfabric.model.hostpath.confined` first; what is read back is
:mod:`nvfabric.facts.imex.tray`.
"""

from __future__ import annotations

import errno
import os
import stat

from nvfabric.effects import program
from nvfabric.effects.atomic import staged, write_atomic
from nvfabric.model import hostpath
from nvfabric.model.commandline import IMEX_UNIT
from nvfabric.model.errors import os_hint
from nvfabric.model.hostpath import confined, under
from nvfabric.model.words import seconds
from nvfabric.rules.imex.channels import DevNode, channel_path
from nvfabric.rules.imex.tables import CHANNEL_DIR, CHANNEL_MODE

#: Bound for each systemctl call (it only edits links offline; a live manager answers fast).
SYSTEMCTL_TIMEOUT_S = 60.0
#: The most of a systemctl call's output kept (it prints a word or a few lines; a config file
#: or node list is read up to the same 1 MiB).
SYSTEMCTL_MAX_BYTES = 1 << 20


def channel_target(root: str, number: int) -> str:
    """Where ``channel<number>`` is made: its host path under ``root`` through
    :func:`confined` (a ``dev/nvidia-caps-imex-channels`` that is a link out of the root is
    :class:`~nvfabric.model.hostpath.PathEscape`, so no world-writable device is ever made
    outside it)."""
    return confined(root, channel_path(number), "IMEX channel")


def stat_node(root: str, host_path: str) -> DevNode | None:
    """The node at ``host_path`` (not following links), None when absent."""
    try:
        st = os.lstat(under(root, host_path))
    except OSError:
        return None
    mode = st.st_mode
    if stat.S_ISCHR(mode):
        kind = "char"
    elif stat.S_ISBLK(mode):
        kind = "block"
    elif stat.S_ISREG(mode):
        kind = "file"
    elif stat.S_ISDIR(mode):
        kind = "dir"
    else:
        kind = "other"
    dev = kind in ("char", "block")
    return DevNode(
        host_path, kind,
        os.major(st.st_rdev) if dev else None, os.minor(st.st_rdev) if dev else None,
        stat.S_IMODE(mode), st.st_uid, st.st_gid,
    )


def create_channel(root: str, number: int, major: int) -> DevNode:
    """Make ``channel<number>`` (c major:number, mode 0666, as NVIDIA documents) atomically:
    mknod a temporary node beside it, chmod (the umask applies to mknod), rename over whatever
    was there (:func:`nvfabric.effects.atomic.staged`). The directory is created mode 0755.
    Raises :class:`~nvfabric.model.hostpath.PathEscape` when the path leads out of ``root``
    (:func:`nvfabric.effects.imex.channel_target`, checked again just before mknod), OSError
    (EPERM without CAP_MKNOD)."""
    host_path = channel_path(number)
    target = channel_target(root, number)
    with staged(target, mode=CHANNEL_MODE, dir_mode=0o755) as tmp:
        channel_target(root, number)  # the directory may have been made just now: still inside
        os.mknod(tmp, stat.S_IFCHR | CHANNEL_MODE, os.makedev(major, number))
    node = stat_node(root, host_path)
    assert node is not None
    return node


def mknod_hint(err: OSError, euid: int | None = None) -> str:
    """What to do when a channel node cannot be made: "run as root" only to a process that is
    not root and was refused (EPERM/EACCES); as root, the container's limits (no CAP_MKNOD, a
    device cgroup); a read-only ``/dev`` named as one; else the errno's hint
    (:func:`nvfabric.model.errors.os_hint`)."""
    root = (os.geteuid() if euid is None else euid) == 0
    if err.errno in (errno.EPERM, errno.EACCES):
        return ("nvfabric runs as root already: its container lacks CAP_MKNOD or the host's "
                "/dev (run it privileged with /dev bind-mounted)" if root else
                "run as root (mknod needs CAP_MKNOD; in a container, a privileged one with the "
                "host's /dev)")
    return os_hint(err, os.path.dirname(CHANNEL_DIR))


def write_file(root: str, host_path: str, content: str, mode: int = 0o644) -> None:
    """Atomic replace of a config file under ``root`` (a backup of different old content is
    kept as ``.nvfabric.bak``). Raises OSError; PathEscape for a path that would leave the
    root (:func:`nvfabric.model.hostpath.confined`)."""
    write_atomic(confined(root, host_path), content, mode=mode)


def systemd_running(root: str) -> bool:
    """A live host whose systemd manager is running (sd_booted(3): ``/run/systemd/system``
    exists) and manages ``root``: the manager's root is ``/``, so ``root`` must be ``/``
    itself (an image root, a chroot or a container build, even with the live ``/proc``
    mounted, is edited with ``systemctl --root``, never through the running manager)."""
    return os.path.abspath(root) == "/" and os.path.isdir("/run/systemd/system")


def unit_argv(root: str, action: str, now: bool, live: bool) -> list[str]:
    """The systemctl argv that applies ``action`` (``enable`` | ``disable`` | ``mask``) to
    :data:`IMEX_UNIT`: ``systemctl --root ROOT ACTION UNIT`` for an image root (systemctl(1)
    ``--root``: edits the unit links of that tree, no manager involved), ``systemctl ACTION
    [--now] UNIT`` on a live host (``mask --now`` also stops it: systemctl(1), "mask").
    ValueError for another action or a root that is not a plain absolute path."""
    if action not in ("enable", "disable", "mask"):
        raise ValueError(f"unknown unit action {action!r}")
    if live:
        return ["systemctl", action, *(["--now"] if now else []), IMEX_UNIT]
    hostpath.check(os.path.abspath(root), "--root")
    return ["systemctl", "--root", os.path.abspath(root), action, IMEX_UNIT]


def run_systemctl(argv: list[str]) -> tuple[int, str]:
    """Run one systemctl argv (no shell) through the door of every child whose output is read
    (:func:`nvfabric.effects.program.run`), bounded by :data:`SYSTEMCTL_TIMEOUT_S` and, for
    what is kept of its output, :data:`SYSTEMCTL_MAX_BYTES` a stream: (exit status, its stdout
    and stderr together, stripped). OSError when systemctl cannot be run; a timeout is exit
    status 124."""
    ran = program.run(argv, SYSTEMCTL_TIMEOUT_S, SYSTEMCTL_MAX_BYTES, SYSTEMCTL_MAX_BYTES,
                      keep="tail")  # it changes the node: never killed for its output
    if ran.rc is None:
        return 124, f"timed out after {seconds(SYSTEMCTL_TIMEOUT_S)} s"
    return ran.rc, (ran.stdout + ran.stderr).decode("utf-8", "replace").strip()

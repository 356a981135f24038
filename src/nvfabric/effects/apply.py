"""The one applier of ``nvfabric run``: make a :class:`nvfabric.bringup.prepared.Prepared`
true on the host before its processes start, in this order: the device nodes (IMEX channel0,
``mknod`` through :func:`nvfabric.effects.imex.create_channel`: atomic, confined under the
root), the state directory (mode 0700, never widened: RUN.md R06), the files (atomic:
temporary, fsync, rename: :func:`nvfabric.effects.atomic.write_atomic`; the state
directory's files are nvfabric's own, so no backup is kept). Nothing is started here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nvfabric.effects import imex
from nvfabric.effects.atomic import write_atomic
from nvfabric.effects.dirs import ensure_dir
from nvfabric.effects.imex import mknod_hint
from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import PathEscape
from nvfabric.rules.imex import channels

if TYPE_CHECKING:
    from nvfabric.bringup.prepared import ChannelNode, Prepared


def apply(prepared: Prepared, root: str, say: Callable[[str], None]) -> list[Finding]:
    """Make the channels, the state directory and the files of ``prepared`` under ``root``,
    saying each change with ``say``. Returns the findings of what could not be made (a
    channel node: the operator's to fix; nothing after it is done); a file that cannot be
    written raises OSError (the command turns it into its one-line error)."""
    for node in prepared.channels:
        failed = _make_channel(node, root, say)
        if failed is not None:
            return [failed]

    if prepared.state_dir and ensure_dir(prepared.state_dir):
        say(f"created state directory {prepared.state_dir} (mode 0700)")
    for f in prepared.files:
        write_atomic(f.path, f.content, mode=f.mode, backup=False, dir_mode=0o700)
        say(f"wrote {f.path}")
    return []


def _make_channel(node: ChannelNode, root: str, say: Callable[[str], None]) -> Finding | None:
    try:
        made = imex.create_channel(root, node.minor, node.major)
        say(f"created IMEX channel {imex.channel_target(root, node.minor)} (c "
            f"{made.major},{made.minor}, mode 0{made.mode:03o})")
    except (OSError, PathEscape) as err:
        why = err.strerror or err if isinstance(err, OSError) else err
        first = mknod_hint(err) if isinstance(err, OSError) else (
            "make the channel directory a real directory under the root")
        return Finding(
            "imex_channel_missing", "error",
            f"cannot create {channels.channel_path(node.minor)}: {why}",
            first + "; or " + channels.fixes(node.minor, node.major, HintContext(root)),
            {"channel": node.minor, "major": node.major})
    return None

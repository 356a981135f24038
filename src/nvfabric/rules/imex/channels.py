"""IMEX channels: the ``nvidia-caps-imex-channels`` character device and its nodes. Pure.

The driver registers the device and prints its major in /proc/devices; nobody creates the
nodes ``/dev/nvidia-caps-imex-channels/channelN`` (minor N) by default, and CUDA's IMEX calls
fail with an insufficient permission error without them. The nodes do not survive a reboot
unless the driver creates channel0 itself (module parameter NVreg_CreateImexChannel0=1).
Sources: NVIDIA IMEX guide, "IMEX Channels"; CUDA Programming Guide, "IMEX channels";
captures tests/data/corpus/proc/proc-devices-imex-channels-excerpt-dra304.txt and
ls-dev-nvidia-caps-dra304.txt (a node wrongly made with the IMEX major under /dev/nvidia-caps).

:class:`DevNode` values are read by :mod:`nvfabric.facts.imex.tray`; :func:`check` turns them into
findings.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nvfabric.model.commandline import HintContext
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.strict import int_or_none
from nvfabric.rules.imex.tables import (
    CAPS_DIR,
    CHANNEL0_MODPROBE_FILE,
    CHANNEL0_OPTION,
    CHANNEL_DEVICE_NAME,
    CHANNEL_DIR,
    CHANNEL_MODE,
    PARAM_CHANNEL_COUNT,
    PARAM_CREATE_CHANNEL0,
)


@dataclass(frozen=True)
class DevNode:
    """A file under /dev as stat shows it. ``path`` is the host path; ``kind`` ``char``,
    ``block``, ``file``, ``dir`` or ``other``; ``major``/``minor`` for device nodes only;
    ``mode`` the permission bits (0o666)."""

    path: str
    kind: str
    major: int | None = None
    minor: int | None = None
    mode: int = 0
    uid: int = 0
    gid: int = 0

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "kind": self.kind, "major": self.major, "minor": self.minor,
            "mode": f"0{self.mode:03o}", "uid": self.uid, "gid": self.gid,
        }


@dataclass(frozen=True)
class ChannelFacts:
    """What the node shows about IMEX channels.

    ``major``: the ``nvidia-caps-imex-channels`` major from /proc/devices (None: absent);
    ``nodes``: entries of /dev/nvidia-caps-imex-channels; ``caps``: entries of
    /dev/nvidia-caps; ``params``: /proc/driver/nvidia/params as name -> value text;
    ``driver_loaded``: the nvidia module is loaded; ``root``: the root they were read under
    (the fixes printed name it).
    """

    major: int | None
    nodes: tuple[DevNode, ...] = ()
    caps: tuple[DevNode, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    driver_loaded: bool = True
    root: str = "/"

    @property
    def channel_count(self) -> int | None:
        """NVreg_ImexChannelCount (the highest usable minor + 1), None when not printed."""
        return _int(self.params.get(PARAM_CHANNEL_COUNT))

    @property
    def create_channel0(self) -> bool | None:
        """NVreg_CreateImexChannel0 (the driver makes channel0 itself), None when not printed."""
        value = _int(self.params.get(PARAM_CREATE_CHANNEL0))
        return None if value is None else value != 0

    def node(self, number: int) -> DevNode | None:
        for n in self.nodes:
            if n.name == f"channel{number}":
                return n
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "major": self.major,
            "channels": [n.to_json() for n in self.nodes],
            "imex_channel_count": self.channel_count,
            "create_imex_channel0": self.create_channel0,
        }


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    return int_or_none(text.strip().strip('"'), signed=True)


def parse_params(text: str) -> dict[str, str]:
    """/proc/driver/nvidia/params (``Name: value`` lines) as a dict; quotes kept as printed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def channel_path(number: int) -> str:
    """Host path of channel ``number`` (``/dev/nvidia-caps-imex-channels/channel0``)."""
    return f"{CHANNEL_DIR}/channel{number}"


def persistent_fix(hints: HintContext) -> str:
    """Channel0 made by the driver at every load: the module parameter in a modprobe.d file
    under the node's root, the initramfs rebuilt and the driver reloaded where the node runs
    (on the host whose root it is, for another root)."""
    write = (f"{shlex.join(['echo', CHANNEL0_OPTION])} > "
             f"{shlex.quote(hints.path(CHANNEL0_MODPROBE_FILE))}")
    return (f"`{write}`, then rebuild the initramfs (`update-initramfs -u` or `dracut "
            f"--force`) and reload the driver{hints.on_host()}")


def fixes(number: int, major: int | None, hints: HintContext) -> str:
    """Both fixes for a missing channel: now (mknod; the command names the hints' root) and
    persistent (module parameter: :func:`persistent_fix`)."""
    create = hints.nvfabric("imex", "channel", options=(("--create", str(number)),))
    now = (
        f"now: `{create}` (mknod {hints.path(channel_path(number))} c "
        f"{major if major is not None else '<major>'} {number}, mode 0666)"
    )
    if number == 0:
        return f"{now}; persistent: {persistent_fix(hints)}"
    return (f"{now}; persistent: run that command at every boot (the driver creates channel0 "
            "only)")


def check(facts: ChannelFacts, required: Iterable[int] = (0,),
          hints: HintContext | None = None) -> tuple[Finding, ...]:
    """Findings about the channels ``required`` (default channel0) and stray IMEX nodes.

    ``imex_channel_missing`` (error): no major, or a required node missing or unusable (not a
    character device, another major, another minor); ``imex_channel_permissions`` (warning):
    a node other users cannot open; ``imex_channel_stray`` (warning): a node with the IMEX major
    elsewhere under /dev/nvidia-caps. ``hints``: the node the hints type their commands and
    paths for (default: the facts' root, nothing else known).
    """
    hints = hints if hints is not None else HintContext(facts.root)
    out: list[Finding] = []
    if facts.major is None:
        why = ("the NVIDIA driver is not loaded" if not facts.driver_loaded
               else "this driver does not register it")
        out.append(Finding(
            "imex_channel_missing", "error",
            f"/proc/devices has no {CHANNEL_DEVICE_NAME} entry: {why}",
            "load the GB200/GB300 data center driver (it registers "
            f"{CHANNEL_DEVICE_NAME}); then create the channel",
            {"channel": None, "major": None},
        ))
        return tuple(out)
    for number in required:
        found = _channel_finding(facts, facts.major, number, hints)
        if found is not None:
            out.append(found)
    for cap in facts.caps:
        if cap.kind == "char" and cap.major == facts.major:
            out.append(Finding(
                "imex_channel_stray", "warning",
                f"{cap.path} is c {cap.major},{cap.minor}: the {CHANNEL_DEVICE_NAME} major under "
                f"{CAPS_DIR}, a wrongly created node (not a capability, not a channel)",
                f"remove it (`{shlex.join(['rm', hints.path(cap.path)])}`); channels live "
                f"under {hints.path(CHANNEL_DIR)}",
                {"path": cap.path, "major": cap.major, "minor": cap.minor},
            ))
    return tuple(out)


def _channel_finding(facts: ChannelFacts, major: int, number: int, hints: HintContext
                     ) -> Finding | None:
    """The finding about required channel ``number`` (device ``major``): beyond
    ImexChannelCount, missing or unusable (error), or not open to other users (warning)."""
    count = facts.channel_count
    fields: dict[str, Any] = {
        "channel": number, "major": major, "path": channel_path(number),
        "imex_channel_count": count, "create_imex_channel0": facts.create_channel0,
    }
    if count is not None and number >= count:
        return Finding(
            "imex_channel_missing", "error",
            f"channel{number} is beyond ImexChannelCount={count}: the driver has no such "
            "channel",
            f"use a channel below {count}, or raise NVreg_ImexChannelCount", fields,
        )
    node = facts.node(number)
    problem = _unusable(node, major, number)
    if problem:
        hint = fixes(number, major, hints)
        if number == 0 and facts.create_channel0:
            hint += ("; NVreg_CreateImexChannel0 is already 1, so the driver made the "
                     "device: is udev running, or /dev a container's own?")
        return Finding("imex_channel_missing", "error", problem, hint, fields)
    assert node is not None
    if node.mode & CHANNEL_MODE == CHANNEL_MODE:
        return None
    return Finding(
        "imex_channel_permissions", "warning",
        f"{node.path} has mode 0{node.mode:03o} (owner {node.uid}:{node.gid}): CUDA "
        "processes of other users fail with an insufficient permission error",
        f"`{shlex.join(['chmod', '0666', hints.path(node.path)])}` (NVIDIA documents "
        "crw-rw-rw-), unless channels are "
        "restricted to one user on purpose",
        {**fields, "mode": f"0{node.mode:03o}", "uid": node.uid, "gid": node.gid},
    )


def _unusable(node: DevNode | None, major: int, number: int) -> str | None:
    path = channel_path(number)
    if node is None:
        return f"{path} does not exist: CUDA's IMEX calls fail with insufficient permission"
    if node.kind != "char":
        return f"{node.path} is a {_kind_word(node.kind)}, not a character device"
    if node.major != major:
        return (f"{node.path} is c {node.major},{node.minor} but {CHANNEL_DEVICE_NAME} is major "
                f"{major}: it is not an IMEX channel")
    if node.minor != number:
        return f"{node.path} has minor {node.minor}, expected {number}"
    return None


def _kind_word(kind: str) -> str:
    return {"file": "regular file", "dir": "directory", "block": "block device"}.get(kind, kind)


def needs_create(facts: ChannelFacts, number: int) -> bool:
    """True when channel ``number`` is missing or unusable (and the device is registered)."""
    return facts.major is not None and _unusable(facts.node(number), facts.major,
                                                 number) is not None


def create_refusal(facts: ChannelFacts, number: int) -> NvfabricError | None:
    """Why channel ``number`` cannot be made on the node ``facts`` describes, as the error to
    raise: the device is not registered (``imex_channel_missing``, exit 1: nothing has a
    major to make the node with), or the channel is beyond ``ImexChannelCount``
    (``input_unreadable``, exit 2: the number asked for does not exist). None when it can."""
    if facts.major is None:
        return NvfabricError(check(facts)[0])
    count = facts.channel_count
    if count is not None and number >= count:
        return usage_error(f"channel {number} is beyond ImexChannelCount={count}",
                           f"use a channel below {count}")
    return None

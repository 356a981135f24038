"""InfiniBand devices and ports from ``sys/class/infiniband`` and ``sys/class/infiniband_mad``
(Linux sysfs ABI, Documentation/ABI/stable/sysfs-class-infiniband).

Per port: capability mask (``cap_mask``, ``0x...``) and port GUID (last 64 bits of ``gids/0``,
``fe80:0000:0000:0000:e09d:7303:00e4:00e8``), each None when missing or garbled; ``state``
(``4: ACTIVE``), ``phys_state`` (``5: LinkUp``), ``link_layer``; and which ``umadN`` node serves
the port (its ``ibdev`` and ``port`` files).
"""

from __future__ import annotations

import os
import re

from nvfabric.facts.fs import link_name, listdir, read_int, read_text
from nvfabric.model.hostpath import under
from nvfabric.model.inventory import IbDevice, IbPort
from nvfabric.model.strict import is_uint, to_int

SYSFS_IB = "/sys/class/infiniband"
SYSFS_MAD = "/sys/class/infiniband_mad"


#: A GID as the kernel prints it (``%pI6``): eight groups of four hex digits.
_GID = re.compile(r"[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}")
#: A capability mask as the kernel prints it (``0x%08x``): one 32-bit word.
_CAP_MASK = re.compile(r"0x[0-9a-fA-F]{1,8}")


def guid_from_gid(gid: str | None) -> str | None:
    """``fe80:0000:0000:0000:e09d:7303:00e4:00e8`` -> ``0xe09d730300e400e8`` (the port GUID is
    the interface ID, the last 64 bits of GID 0); None when the GID is missing or is not eight
    groups of four hex digits: an unreadable GUID is not a zero GUID."""
    if gid is None or not _GID.fullmatch(gid):
        return None
    return "0x" + gid[20:].replace(":", "").lower()


def parse_cap_mask(text: str | None) -> int | None:
    """``0xa751e84a`` -> 0xA751E84A; None when missing or not a ``0x``-prefixed 32-bit hex
    word, so that garbage is never read as an empty mask (which would pass for SM enabled)."""
    if text is None or not _CAP_MASK.fullmatch(text):
        return None
    return to_int(text, base=16)


def format_guid(text: str | None) -> str:
    """sysfs ``node_guid`` (``e09d:7303:00e4:00e8``) -> ``0xe09d730300e400e8``."""
    digits = (text or "").replace(":", "")
    if len(digits) > 16:
        return "0x0000000000000000"
    try:
        return f"0x{to_int(digits, base=16):016x}"
    except ValueError:
        return "0x0000000000000000"


def umad_ports(root: str) -> dict[tuple[str, int], str]:
    """``(ibdev, port) -> umadN`` from ``sys/class/infiniband_mad/umad*``."""
    out: dict[tuple[str, int], str] = {}
    base = under(root, SYSFS_MAD)
    for name in listdir(base):
        if not name.startswith("umad"):
            continue
        ibdev = read_text(f"{base}/{name}/ibdev")
        port = read_int(f"{base}/{name}/port", low=1, high=255)
        if ibdev and port is not None:
            out[(ibdev, port)] = name
    return out


def read_device(root: str, name: str, umads: dict[tuple[str, int], str]) -> IbDevice:
    """One IB device with its ports in number order."""
    base = under(root, f"{SYSFS_IB}/{name}")
    # ``device`` links to the PCI function (``../../../0000:05:00.0``); a dangling link (a
    # tree copied without its PCI side) is no function.
    pci = link_name(f"{base}/device")
    if pci is not None and not os.path.exists(f"{base}/device"):
        pci = None
    ports = []
    port_names = [p for p in listdir(f"{base}/ports") if is_uint(p)]
    for pname in sorted(port_names, key=int):
        pbase = f"{base}/ports/{pname}"
        ports.append(
            IbPort(
                port=to_int(pname),
                guid=guid_from_gid(read_text(f"{pbase}/gids/0")),
                cap_mask=parse_cap_mask(read_text(f"{pbase}/cap_mask")),
                state=read_text(f"{pbase}/state") or "",
                phys_state=read_text(f"{pbase}/phys_state") or "",
                link_layer=read_text(f"{pbase}/link_layer") or "",
                umad=umads.get((name, to_int(pname))),
            )
        )
    return IbDevice(name, pci, format_guid(read_text(f"{base}/node_guid")), tuple(ports))


def read_all(root: str) -> tuple[IbDevice, ...]:
    """Every IB device, in plain string order of names (the order of ``ibstat -l``)."""
    umads = umad_ports(root)
    return tuple(read_device(root, n, umads) for n in listdir(under(root, SYSFS_IB)))

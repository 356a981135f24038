"""PCI functions from ``sys/bus/pci/devices/*`` (Linux sysfs ABI, Documentation/ABI/testing/
sysfs-bus-pci): vendor, device, class, subsystem IDs, bound driver, NUMA node, and the VPD of
Mellanox functions (the only ones that can carry the NVLink 5 LPF marker), read once.

IDs come from the first 64 bytes of ``config`` (the type-0 header: vendor 0x00, device 0x02,
class 0x09-0x0b, subsystem vendor/device 0x2c/0x2e; PCI Local Bus Specification 3.0, 6.1),
readable without privileges: one open per function instead of five. When ``config`` is missing
or short, the ``vendor``/``device``/``class``/``subsystem_*`` attribute files are read instead.
Driver and NUMA node are read only for NVIDIA and Mellanox functions, the ones the plan uses.
"""

from __future__ import annotations

import os
import struct

from nvfabric.facts.fs import link_name, listdir, read_bytes, read_hex, read_int
from nvfabric.facts.vpd import decode
from nvfabric.model.hostpath import under
from nvfabric.model.inventory import MELLANOX, NVIDIA, PciFunction

SYSFS_PCI = "/sys/bus/pci/devices"


#: The type-0 header fields nvfabric reads, in one unpack: vendor (0x00), device (0x02), class
#: code bytes prog-if/subclass/base class (0x09-0x0b), subsystem vendor/device (0x2c/0x2e).
_HEADER = struct.Struct("<HH5xBBB32xHH")


def parse_config_header(data: bytes) -> tuple[int, int, int, int, int] | None:
    """(vendor, device, class_code, subsystem_vendor, subsystem_device) from config bytes,
    or None when shorter than the 48 bytes that hold them or the vendor reads 0xffff."""
    if len(data) < _HEADER.size:
        return None
    vendor, device, prog_if, subclass, base, sub_vendor, sub_device = _HEADER.unpack_from(data)
    if vendor in (0xFFFF, 0x0000):
        return None
    return vendor, device, prog_if | (subclass << 8) | (base << 16), sub_vendor, sub_device


def read_function(root: str, address: str) -> PciFunction | None:
    """One function by address (``0000:05:00.0``); None when its IDs are unreadable."""
    return _read_function(under(root, f"{SYSFS_PCI}/{address}"), address)


def _read_function(base: str, address: str) -> PciFunction | None:
    ids = parse_config_header(read_bytes(f"{base}/config", 64) or b"")
    if ids is None:
        vendor = read_hex(f"{base}/vendor")
        device = read_hex(f"{base}/device")
        if vendor is None or device is None:
            return None
        ids = (vendor, device, read_hex(f"{base}/class") or 0,
               read_hex(f"{base}/subsystem_vendor") or 0,
               read_hex(f"{base}/subsystem_device") or 0)
    vendor, device, class_code, sub_vendor, sub_device = ids
    if vendor not in (NVIDIA, MELLANOX):
        return PciFunction(address, vendor, device, class_code, sub_vendor, sub_device)
    numa = read_int(f"{base}/numa_node", signed=True, low=-1)
    if numa is not None and numa < 0:
        numa = None  # -1: no NUMA affinity (the kernel's NUMA_NO_NODE)
    vpd = None
    unreadable = False
    if vendor == MELLANOX:
        raw = read_bytes(f"{base}/vpd")
        if raw:
            vpd = decode(raw)
            # cut short before its vendor field: the marker may be in what was not read
            unreadable = bool(vpd.problems) and "SMDL" not in vpd.mellanox_fields()
        elif raw is None and os.path.lexists(f"{base}/vpd"):
            unreadable = True  # there, but not readable (mode 0600 for non-root, EIO)
    return PciFunction(
        address=address,
        vendor=vendor,
        device=device,
        class_code=class_code,
        subsystem_vendor=sub_vendor,
        subsystem_device=sub_device,
        driver=link_name(f"{base}/driver"),
        numa_node=numa,
        vpd=vpd,
        vpd_unreadable=unreadable,
    )


def read_all(root: str) -> tuple[PciFunction, ...]:
    """Every readable PCI function, in address order."""
    out = []
    devices = under(root, SYSFS_PCI)
    for address in listdir(devices):
        fn = _read_function(f"{devices}/{address}", address)
        if fn is not None:
            out.append(fn)
    return tuple(out)

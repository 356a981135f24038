"""PCI functions from ``sys/bus/pci/devices/*`` (Linux sysfs ABI, Documentation/ABI/testing/
sysfs-bus-pci): vendor, device, class, subsystem IDs, bound driver, NUMA node, and the VPD of
Mellanox functions (the only ones that can carry the NVLink 5 LPF marker), read once.
"""

from __future__ import annotations

from .fs import link_name, listdir, read_bytes, read_hex, read_text, under
from .model import MELLANOX, PciFunction
from .vpd import decode

SYSFS_PCI = "/sys/bus/pci/devices"


def read_function(root: str, address: str) -> PciFunction | None:
    """One function by address (``0000:05:00.0``); None when its vendor/device are unreadable."""
    base = under(root, f"{SYSFS_PCI}/{address}")
    vendor = read_hex(f"{base}/vendor")
    device = read_hex(f"{base}/device")
    if vendor is None or device is None:
        return None
    numa_text = read_text(f"{base}/numa_node")
    numa: int | None = None
    if numa_text and numa_text.lstrip("-").isdigit():
        numa = int(numa_text)
        if numa < 0:
            numa = None
    vpd = None
    if vendor == MELLANOX:
        raw = read_bytes(f"{base}/vpd")
        if raw:
            vpd = decode(raw)
    return PciFunction(
        address=address,
        vendor=vendor,
        device=device,
        class_code=read_hex(f"{base}/class") or 0,
        subsystem_vendor=read_hex(f"{base}/subsystem_vendor") or 0,
        subsystem_device=read_hex(f"{base}/subsystem_device") or 0,
        driver=link_name(f"{base}/driver"),
        numa_node=numa,
        vpd=vpd,
    )


def read_all(root: str) -> tuple[PciFunction, ...]:
    """Every readable PCI function, in address order."""
    out = []
    for address in listdir(under(root, SYSFS_PCI)):
        fn = read_function(root, address)
        if fn is not None:
            out.append(fn)
    return tuple(out)

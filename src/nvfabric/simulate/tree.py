"""Write a node spec out as a real-shaped root directory.

Formats follow what the kernel writes (Documentation/ABI/testing/sysfs-bus-pci,
sysfs-class-infiniband; captures in ../shared/corpus): ``vendor`` is ``0x15b3\\n``, ``class``
``0x020700\\n``, ``config`` a binary configuration header with a capability list holding the VPD
capability (ID 0x03) at 0x48 for ConnectX functions, ``vpd`` a real VPD image with a correct RV
checksum, IB ``node_guid`` ``e09d:7303:00e4:00e8``, ``gids/0`` an fe80:: GID, ``cap_mask``
``0xa751e84a``. PCI devices live under ``sys/devices/pci0000:00`` and are linked from
``sys/bus/pci/devices``; IB devices live under their PCI function and are linked from
``sys/class/infiniband``, as on a real node.
"""

from __future__ import annotations

import os
import stat
import struct

from ..inventory.vpd import encode
from .spec import MellanoxSpec, NodeSpec

VPD_CAP_OFFSET = 0x48


def _write(path: str, content: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    with open(path, "wb") as fh:
        fh.write(data)


def _imex_channel(path: str, major: int | None, minor: int) -> None:
    """An IMEX channel node as the driver makes it: a character device ``major:minor`` (the
    node spec's ``nvidia-caps-imex-channels`` major, the channel number), mode 0666 (NVIDIA
    IMEX guide, "IMEX Channels"). Only root may mknod; otherwise, where mknod is not permitted
    (a container without CAP_MKNOD) or the spec gives no major, an empty regular file stands
    in, which nvfabric's channel check reports as not a device."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    if major is not None and os.geteuid() == 0:
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        except PermissionError:
            pass
        else:
            os.chmod(path, 0o666)  # mknod applies the umask
            return
    _write(path, "")


def _symlink(target: str, link: str) -> None:
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def config_space(vendor: int, device: int, class_code: int, sub_vendor: int, sub_device: int,
                 vpd_capability: bool) -> bytes:
    """A 256-byte type-0 configuration header (PCI Local Bus Specification 3.0, 6.1)."""
    cfg = bytearray(256)
    struct.pack_into("<HH", cfg, 0x00, vendor, device)
    struct.pack_into("<H", cfg, 0x04, 0x0406)  # Mem+ BusMaster+ DisINTx+
    struct.pack_into("<H", cfg, 0x06, 0x0010 if vpd_capability else 0x0000)
    cfg[0x08] = 0x00  # revision
    cfg[0x09] = class_code & 0xFF
    cfg[0x0A] = (class_code >> 8) & 0xFF
    cfg[0x0B] = (class_code >> 16) & 0xFF
    cfg[0x0E] = 0x00
    cfg[0x3D] = 0x01  # interrupt pin A
    struct.pack_into("<HH", cfg, 0x2C, sub_vendor, sub_device)
    if vpd_capability:
        cfg[0x34] = VPD_CAP_OFFSET
        cfg[VPD_CAP_OFFSET] = 0x03  # VPD capability, next pointer 0
    return bytes(cfg)


def mellanox_vpd(m: MellanoxSpec, guid: str) -> bytes:
    """The VPD image of a ConnectX function: the field set of the real DGX B200 LPF
    (../shared/corpus/lspci/dgxb200-cx7-sw_mng-lspci-vvv.txt), with V3 derived from the GUID."""
    g = guid[2:] if guid.startswith("0x") else guid
    uuid = "96375e6109d7ef118000" + g[0:6] + g[10:16]
    return encode(
        m.vpd_id_string,
        [
            ("PN", "692-9X760-00SE-S00"),
            ("EC", "A4"),
            ("V2", "692-9X760-00SE-S00"),
            ("SN", "MT0000000000"),
            ("V3", uuid),
            ("VA", m.vpd_vendor_field),
            ("V0", "PCIeGen4 x2"),
            ("VU", "MT0000000000MLNXS0D0F0"),
        ],
        reserved=2,
    )


class _Bus:
    """Hands out PCI addresses: bus numbers in order, domain 0000 then up."""

    def __init__(self, first: int = 0x05) -> None:
        self.next = first
        self.domain = 0

    def take(self) -> str:
        if self.next > 0xFF:
            self.domain += 1
            self.next = 0x01
        addr = f"{self.domain:04x}:{self.next:02x}:00.0"
        self.next += 1
        return addr


def _pci_function(root: str, address: str, vendor: int, device: int, class_code: int,
                  sub: tuple[int, int], driver: str | None, numa: int,
                  vpd: bytes | None = None) -> str:
    """Write one PCI function; return its real directory."""
    domain = address.split(":", 1)[0]
    real = os.path.join(root, f"sys/devices/pci{domain}:00", address)
    _write(f"{real}/vendor", f"0x{vendor:04x}\n")
    _write(f"{real}/device", f"0x{device:04x}\n")
    _write(f"{real}/class", f"0x{class_code:06x}\n")
    _write(f"{real}/subsystem_vendor", f"0x{sub[0]:04x}\n")
    _write(f"{real}/subsystem_device", f"0x{sub[1]:04x}\n")
    _write(f"{real}/revision", "0x00\n")
    _write(f"{real}/numa_node", f"{numa}\n")
    _write(f"{real}/irq", "16\n")
    _write(f"{real}/resource", "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 13)
    _write(f"{real}/config", config_space(vendor, device, class_code, *sub, vpd is not None))
    if vpd is not None:
        _write(f"{real}/vpd", vpd)
    if driver:
        os.makedirs(os.path.join(root, "sys/bus/pci/drivers", driver), exist_ok=True)
        _symlink(f"../../../bus/pci/drivers/{driver}", f"{real}/driver")
    _symlink(f"../../../devices/pci{domain}:00/{address}",
             os.path.join(root, "sys/bus/pci/devices", address))
    return real


def _gid(guid: str) -> str:
    g = guid[2:]
    return "fe80:0000:0000:0000:" + ":".join(g[i : i + 4] for i in range(0, 16, 4))


def _colon_guid(guid: str) -> str:
    g = guid[2:]
    return ":".join(g[i : i + 4] for i in range(0, 16, 4))


def build(spec: NodeSpec, root: str) -> None:
    """Write the tree of ``spec`` under ``root`` (created if needed; existing files replaced)."""
    os.makedirs(root, exist_ok=True)
    _write(os.path.join(root, "proc/sys/kernel/arch"), spec.arch + "\n")
    _write(os.path.join(root, "etc/os-release"),
           'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nVERSION_CODENAME=noble\n')
    modules = set(spec.modules)
    for mod in sorted(modules):
        os.makedirs(os.path.join(root, "sys/module", mod), exist_ok=True)
    nvidia_loaded = spec.driver_version is not None and "nvidia" in modules
    if nvidia_loaded and spec.driver_version:
        _write(os.path.join(root, "sys/module/nvidia/version"), spec.driver_version + "\n")
        _write(
            os.path.join(root, "proc/driver/nvidia/version"),
            f"NVRM version: NVIDIA UNIX Open Kernel Module for {spec.arch}  "
            f"{spec.driver_version}  Release Build  (dvs-builder@simulated)\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
        )
    bus = _Bus()
    numa = 0
    ib_loaded = "mlx5_ib" in modules
    umad_loaded = "ib_umad" in modules
    umad_index = 0
    if umad_loaded:
        _write(os.path.join(root, "sys/class/infiniband_mad/abi_version"), "5\n")
    for m in spec.mellanox:
        addr = bus.take()
        first_guid = m.ports[0].guid if m.ports else "0x0a0b0c0300000000"
        real = _pci_function(
            root, addr, 0x15B3, int(m.device_id, 16), 0x020700, (0x15B3, 0x0087),
            "mlx5_core" if "mlx5_core" in modules else None, numa, mellanox_vpd(m, first_guid),
        )
        if not ib_loaded:
            continue
        ibreal = f"{real}/infiniband/{m.ib_device}"
        _write(f"{ibreal}/node_type", "1: CA\n")
        _write(f"{ibreal}/node_guid", _colon_guid(first_guid) + "\n")
        _write(f"{ibreal}/sys_image_guid", _colon_guid(first_guid) + "\n")
        _write(f"{ibreal}/fw_ver", "28.42.1274\n")
        _write(f"{ibreal}/hw_rev", "0\n")
        _write(f"{ibreal}/hca_type", "MT4129\n")
        _write(f"{ibreal}/board_id", "NVD0000000033\n")
        _symlink("../../../" + addr, f"{ibreal}/device")
        for p in m.ports:
            pb = f"{ibreal}/ports/{p.port}"
            _write(f"{pb}/cap_mask", f"0x{p.cap_mask:08x}\n")
            _write(f"{pb}/gids/0", _gid(p.guid) + "\n")
            _write(f"{pb}/pkeys/0", "0xffff\n")
            _write(f"{pb}/state", p.state + "\n")
            _write(f"{pb}/phys_state", p.phys_state + "\n")
            _write(f"{pb}/link_layer", p.link_layer + "\n")
            _write(f"{pb}/lid", "0x1\n")
            _write(f"{pb}/lid_mask_count", "0\n")
            _write(f"{pb}/sm_lid", "0x1\n")
            _write(f"{pb}/sm_sl", "0\n")
            _write(f"{pb}/rate", "100 Gb/sec (2X NDR)\n")
            if umad_loaded:
                ub = os.path.join(root, f"sys/class/infiniband_mad/umad{umad_index}")
                _write(f"{ub}/ibdev", m.ib_device + "\n")
                _write(f"{ub}/port", f"{p.port}\n")
                _write(f"{ub}/dev", f"231:{umad_index}\n")
                umad_index += 1
        _symlink(os.path.relpath(ibreal, os.path.join(root, "sys/class/infiniband")),
                 os.path.join(root, "sys/class/infiniband", m.ib_device))
    gpu_driver = "nvidia" if nvidia_loaded else None
    bus.next = max(bus.next, 0x18)
    total = sum(c for _, c in spec.gpus)
    seen = 0
    for device_id, count in spec.gpus:
        for _ in range(count):
            addr = bus.take()
            _pci_function(root, addr, 0x10DE, int(device_id, 16), 0x030200, (0x10DE, 0x1999),
                          gpu_driver, 0 if seen < max(total // 2, 1) else 1)
            seen += 1
    switch_addrs = []
    if spec.nvswitches:
        device_id, count = spec.nvswitches
        for _ in range(count):
            addr = bus.take()
            switch_addrs.append(addr)
            _pci_function(root, addr, 0x10DE, int(device_id, 16), 0x068000, (0x10DE, 0x1626),
                          gpu_driver, 0)
    proc_count = spec.nvswitch_proc_devices
    if proc_count is None:
        proc_count = len(switch_addrs) if nvidia_loaded else 0
    for addr in switch_addrs[:proc_count]:
        os.makedirs(os.path.join(root, "proc/driver/nvidia-nvswitch/devices", addr), exist_ok=True)
    for _ in range(spec.other_pci):
        addr = bus.take()
        _pci_function(root, addr, 0x8086, 0x0953, 0x010802, (0x8086, 0x3702), "nvme", 0)
    devices = ["Character devices:", "  1 mem", "  4 /dev/vc/0", "195 nvidia-frontend"]
    if spec.imex_major is not None:
        devices.append(f"{spec.imex_major} nvidia-caps-imex-channels")
    _write(os.path.join(root, "proc/devices"), "\n".join(devices) + "\n")
    for ch in spec.imex_channels:
        _imex_channel(os.path.join(root, f"dev/nvidia-caps-imex-channels/channel{ch}"),
                      spec.imex_major, ch)
    for path, content in spec.files:
        _write(os.path.join(root, path.lstrip("/")), content)

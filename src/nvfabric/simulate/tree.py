"""Write a node spec out as a real-shaped root directory.

Formats follow what the kernel writes (Documentation/ABI/testing/sysfs-bus-pci,
sysfs-class-infiniband; captures in tests/data/corpus): ``vendor`` is ``0x15b3\\n``, ``class``
``0x020700\\n``, ``config`` a binary configuration header with a capability list holding the VPD
capability (ID 0x03) at 0x48 for ConnectX functions, ``vpd`` a real VPD image with a correct RV
checksum, IB ``node_guid`` ``e09d:7303:00e4:00e8``, ``gids/0`` an fe80:: GID, ``cap_mask``
``0xa751e84a``. PCI devices live under ``sys/devices/pci0000:00`` and are linked from
``sys/bus/pci/devices``; IB devices live under their PCI function and are linked from
``sys/class/infiniband``, as on a real node.

Functional core, imperative shell: :func:`layout` turns a spec into the list of entries the
tree holds (directories, files, relative links, IMEX channel nodes), with the spec's ``files:``
checked against them, without touching the disk; :func:`nvfabric.simulate.write.build` then
writes them into a new or empty directory.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Literal

from nvfabric.facts.vpd import encode
from nvfabric.simulate.fakebin.state import STATE_DIR
from nvfabric.simulate.fakebin.state import STATE_DIR as state_dir
from nvfabric.simulate.fakes import FAKES_PACKAGE, VENDOR_PATHS, fakebin_sources
from nvfabric.simulate.spec import MellanoxSpec, NodeSpec, PortSpec, SpecError

VPD_CAP_OFFSET = 0x48


@dataclass(frozen=True)
class Entry:
    """One thing in a simulated tree, ``path`` relative to the root, with no ``..`` and no link
    on the way. ``kind``: ``dir``; ``file`` (``data``); ``link`` (relative ``target``);
    ``chardev`` (``major``:``minor``, mode 0666; an empty file where mknod is not permitted
    or ``major`` is None)."""
    kind: Literal["dir", "file", "link", "chardev"]
    path: str
    data: bytes = b""
    target: str = ""
    major: int | None = None
    minor: int = 0


class _Tree:
    """Collects entries by path; a later entry at a path replaces the earlier one."""
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def file(self, path: str, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else content
        self.entries[path] = Entry("file", path, data=data)

    def dir(self, path: str) -> None:
        self.entries[path] = Entry("dir", path)

    def link(self, target: str, path: str) -> None:
        self.entries[path] = Entry("link", path, target=target)

    def chardev(self, path: str, major: int | None, minor: int) -> None:
        self.entries[path] = Entry("chardev", path, major=major, minor=minor)


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
    (tests/data/corpus/lspci/dgxb200-cx7-sw_mng-lspci-vvv.txt), with V3 derived from the GUID."""
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


def _pci_function(tree: _Tree, address: str, vendor: int, device: int, class_code: int,
                  sub: tuple[int, int], driver: str | None, numa: int,
                  vpd: bytes | None = None) -> str:
    """One PCI function; returns its real directory (relative to the root)."""
    domain = address.split(":", 1)[0]
    real = f"sys/devices/pci{domain}:00/{address}"
    tree.file(f"{real}/vendor", f"0x{vendor:04x}\n")
    tree.file(f"{real}/device", f"0x{device:04x}\n")
    tree.file(f"{real}/class", f"0x{class_code:06x}\n")
    tree.file(f"{real}/subsystem_vendor", f"0x{sub[0]:04x}\n")
    tree.file(f"{real}/subsystem_device", f"0x{sub[1]:04x}\n")
    tree.file(f"{real}/revision", "0x00\n")
    tree.file(f"{real}/numa_node", f"{numa}\n")
    tree.file(f"{real}/irq", "16\n")
    tree.file(f"{real}/resource", "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 13)
    tree.file(f"{real}/config", config_space(vendor, device, class_code, *sub, vpd is not None))
    if vpd is not None:
        tree.file(f"{real}/vpd", vpd)
    if driver:
        tree.dir(f"sys/bus/pci/drivers/{driver}")
        tree.link(f"../../../bus/pci/drivers/{driver}", f"{real}/driver")
    tree.link(f"../../../devices/pci{domain}:00/{address}", f"sys/bus/pci/devices/{address}")
    return real


def _gid(guid: str) -> str:
    g = guid[2:]
    return "fe80:0000:0000:0000:" + ":".join(g[i : i + 4] for i in range(0, 16, 4))


def _colon_guid(guid: str) -> str:
    g = guid[2:]
    return ":".join(g[i : i + 4] for i in range(0, 16, 4))


def layout(spec: NodeSpec) -> tuple[Entry, ...]:
    """Every entry of the tree of ``spec``, in writing order, the spec's ``files:`` last. Pure.

    Raises SpecError when a ``files:`` path collides with the tree or with what
    :func:`nvfabric.simulate.fakes.install` adds (see :func:`_place_files`)."""
    tree = _Tree()
    tree.file("proc/sys/kernel/arch", spec.arch + "\n")
    tree.file("etc/os-release",
              'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nVERSION_CODENAME=noble\n')
    nvidia_loaded = _modules(tree, spec)
    bus = _Bus()
    _connectx(tree, bus, spec)
    _gpus_and_switches(tree, bus, spec, nvidia_loaded)
    for _ in range(spec.other_pci):
        addr = bus.take()
        _pci_function(tree, addr, 0x8086, 0x0953, 0x010802, (0x8086, 0x3702), "nvme", 0)
    devices = ["Character devices:", "  1 mem", "  4 /dev/vc/0", "195 nvidia-frontend"]
    if spec.imex_major is not None:
        devices.append(f"{spec.imex_major} nvidia-caps-imex-channels")
    tree.file("proc/devices", "\n".join(devices) + "\n")
    for ch in spec.imex_channels:
        tree.chardev(f"dev/nvidia-caps-imex-channels/channel{ch}", spec.imex_major, ch)
    _place_files(tree, spec.files)
    return tuple(tree.entries.values())


def _modules(tree: _Tree, spec: NodeSpec) -> bool:
    """The loaded modules (``sys/module``) and the driver's version files; whether the
    nvidia module is loaded with a version."""
    modules = set(spec.modules)
    for mod in sorted(modules):
        tree.dir(f"sys/module/{mod}")
    nvidia_loaded = spec.driver_version is not None and "nvidia" in modules
    if nvidia_loaded and spec.driver_version:
        tree.file("sys/module/nvidia/version", spec.driver_version + "\n")
        tree.file(
            "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX Open Kernel Module for {spec.arch}  "
            f"{spec.driver_version}  Release Build  (dvs-builder@simulated)\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
        )
    return nvidia_loaded


def _connectx(tree: _Tree, bus: _Bus, spec: NodeSpec) -> None:
    """The ConnectX functions on PCI (with their VPD) and, with mlx5_ib loaded, their
    InfiniBand devices and ports; with ib_umad, one ``umadN`` per port."""
    modules = set(spec.modules)
    numa = 0
    ib_loaded = "mlx5_ib" in modules
    umad_loaded = "ib_umad" in modules
    umad_index = 0
    if umad_loaded:
        tree.file("sys/class/infiniband_mad/abi_version", "5\n")
    for m in spec.mellanox:
        addr = bus.take()
        first_guid = m.ports[0].guid if m.ports else "0x0a0b0c0300000000"
        real = _pci_function(
            tree, addr, 0x15B3, int(m.device_id, 16), 0x020700, (0x15B3, 0x0087),
            "mlx5_core" if "mlx5_core" in modules else None, numa, mellanox_vpd(m, first_guid),
        )
        if not ib_loaded:
            continue
        ibreal = f"{real}/infiniband/{m.ib_device}"
        tree.file(f"{ibreal}/node_type", "1: CA\n")
        tree.file(f"{ibreal}/node_guid", _colon_guid(first_guid) + "\n")
        tree.file(f"{ibreal}/sys_image_guid", _colon_guid(first_guid) + "\n")
        tree.file(f"{ibreal}/fw_ver", "28.42.1274\n")
        tree.file(f"{ibreal}/hw_rev", "0\n")
        tree.file(f"{ibreal}/hca_type", "MT4129\n")
        tree.file(f"{ibreal}/board_id", "NVD0000000033\n")
        tree.link("../../../" + addr, f"{ibreal}/device")
        for p in m.ports:
            _ib_port(tree, f"{ibreal}/ports/{p.port}", p)
            if umad_loaded:
                ub = f"sys/class/infiniband_mad/umad{umad_index}"
                tree.file(f"{ub}/ibdev", m.ib_device + "\n")
                tree.file(f"{ub}/port", f"{p.port}\n")
                tree.file(f"{ub}/dev", f"231:{umad_index}\n")
                umad_index += 1
        tree.link(os.path.relpath(ibreal, "sys/class/infiniband"),
                  f"sys/class/infiniband/{m.ib_device}")


def _ib_port(tree: _Tree, pb: str, p: PortSpec) -> None:
    """The sysfs attributes of one InfiniBand port under ``pb`` (``.../ports/N``)."""
    tree.file(f"{pb}/cap_mask", f"0x{p.cap_mask:08x}\n")
    tree.file(f"{pb}/gids/0", _gid(p.guid) + "\n")
    tree.file(f"{pb}/pkeys/0", "0xffff\n")
    tree.file(f"{pb}/state", p.state + "\n")
    tree.file(f"{pb}/phys_state", p.phys_state + "\n")
    tree.file(f"{pb}/link_layer", p.link_layer + "\n")
    tree.file(f"{pb}/lid", "0x1\n")
    tree.file(f"{pb}/lid_mask_count", "0\n")
    tree.file(f"{pb}/sm_lid", "0x1\n")
    tree.file(f"{pb}/sm_sl", "0\n")
    tree.file(f"{pb}/rate", "100 Gb/sec (2X NDR)\n")


def _gpus_and_switches(tree: _Tree, bus: _Bus, spec: NodeSpec, nvidia_loaded: bool) -> None:
    """The GPUs (from bus 0x18, the first half on NUMA node 0) and NVSwitches on PCI, and the
    switches the driver lists in ``/proc/driver/nvidia-nvswitch/devices``."""
    gpu_driver = "nvidia" if nvidia_loaded else None
    bus.next = max(bus.next, 0x18)
    total = sum(c for _, c in spec.gpus)
    seen = 0
    for device_id, count in spec.gpus:
        for _ in range(count):
            addr = bus.take()
            _pci_function(tree, addr, 0x10DE, int(device_id, 16), 0x030200, (0x10DE, 0x1999),
                          gpu_driver, 0 if seen < max(total // 2, 1) else 1)
            seen += 1
    switch_addrs = []
    if spec.nvswitches:
        device_id, count = spec.nvswitches
        for _ in range(count):
            addr = bus.take()
            switch_addrs.append(addr)
            _pci_function(tree, addr, 0x10DE, int(device_id, 16), 0x068000, (0x10DE, 0x1626),
                          gpu_driver, 0)
    proc_count = spec.nvswitch_proc_devices
    if proc_count is None:
        proc_count = len(switch_addrs) if nvidia_loaded else 0
    for addr in switch_addrs[:proc_count]:
        tree.dir(f"proc/driver/nvidia-nvswitch/devices/{addr}")


def fakes_paths() -> tuple[frozenset[str], frozenset[str]]:
    """(directories, files) that :func:`nvfabric.simulate.fakes.install` writes into every
    simulated tree and that a spec's ``files:`` may therefore neither be nor replace: ``bin``
    with the fake programs (and their package's byte code), their vendor paths, the
    log/run/tmp directories, the shipped config directories and the fakes' state directory.
    (The shipped configs themselves and
    ``proc/net/fib_trie`` are only written when absent, so ``files:`` may give them.)"""
    files = {f"bin/{prog}" for prog in VENDOR_PATHS}
    files |= {f"bin/{FAKES_PACKAGE}/{name}" for name in fakebin_sources()}
    files |= {path.lstrip("/") for path in VENDOR_PATHS.values()}
    dirs = {"bin", "var/log", "var/run", "tmp", "proc/net", "etc/nvidia-imex",
            "usr/share/nvidia/nvswitch", "usr/share/nvidia/nvlsm", STATE_DIR}
    dirs |= {os.path.dirname(path) for path in files}
    dirs.add(f"bin/{FAKES_PACKAGE}/__pycache__")  # the copy's byte code (fakes.precompile)
    return frozenset(dirs), frozenset(files)


def ancestors(path: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b"]``."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _place_files(tree: _Tree, files: tuple[tuple[str, str | bytes], ...]) -> None:
    """Add the spec's ``files:`` to ``tree``, each at the path it names once the tree's links
    on the way are followed (``sys/bus/pci/devices/ADDR/x`` lands in the function's real
    directory), so that nothing is ever written through a link. A file may replace a file of
    the tree (that is what it is for: a garbled attribute, a shipped config); it may not be a
    directory or a link of the tree, lie inside one of its files, lead out of the tree through
    a link, or be something the fakes write (:func:`fakes_paths`). Raises SpecError naming
    the key."""
    fake_dirs, fake_files = fakes_paths()
    links = {e.path: e.target for e in tree.entries.values() if e.kind == "link"}
    plain = {e.path for e in tree.entries.values() if e.kind in ("file", "chardev")}
    dirs = {e.path for e in tree.entries.values() if e.kind == "dir"}
    for e in tree.entries.values():
        dirs.update(ancestors(e.path))
    for d in fake_dirs:
        dirs.add(d)
        dirs.update(ancestors(d))
    given: dict[str, str] = {}
    for key, content in files:
        where = f"files: {key!r}"
        path = _resolve(key, links, where)
        if path in given:
            raise SpecError(f"{where}: names the same file as {given[path]!r} (through a link "
                            "of the tree)")
        given[path] = key
        if path in links:
            raise SpecError(f"{where}: is a link the simulated tree writes (to {links[path]})")
        if path in dirs:
            raise SpecError(f"{where}: is a directory the simulated tree writes ({path})")
        if path in fake_files or path.startswith(state_dir + "/"):
            raise SpecError(f"{where}: is written by nvfabric's fake daemons ({path})")
        for above in ancestors(path):
            if above in plain or above in fake_files:
                raise SpecError(f"{where}: {above} is a file of the simulated tree, not a "
                                "directory")
        tree.file(path, content)
        plain.add(path)


def _resolve(path: str, links: dict[str, str], where: str) -> str:
    """``path`` with every link of the tree among its leading components replaced by the
    link's target (relative links, as the tree writes them); SpecError when that leaves the
    tree."""
    parts = path.split("/")
    i = 0
    hops = 0
    while i < len(parts) - 1:
        prefix = "/".join(parts[: i + 1])
        if prefix in links:
            hops += 1
            target = os.path.normpath(os.path.join(os.path.dirname(prefix), links[prefix]))
            if hops > 40 or target.startswith("/") or target.split("/")[0] == "..":
                raise SpecError(f"{where}: leads out of the simulated tree through {prefix}")
            parts = target.split("/") + parts[i + 1 :]
            i = 0
            continue
        i += 1
    return "/".join(parts)

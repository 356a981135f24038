"""``lspci -nnDvvvxxxx`` text -> PCI functions, the values :mod:`nvfabric.facts.pci` reads
from sysfs. Pure, fed line by line (a big node's section is megabytes).

What lspci prints (pciutils lspci.c, ls-caps.c, ls-vpd.c; capture
tests/data/corpus/lspci/dgxb200-cx7-sw_mng-lspci-vvv.txt):

- one entry per function, entries separated by an empty line; the first line is
  ``0000:05:00.0 Infiniband controller [0207]: Mellanox Technologies MT2910 Family [ConnectX-7]
  [15b3:1021]`` (``-D`` gives the domain, ``-nn`` the class and ``[vendor:device]`` numbers), then
  `` (rev XX)`` and `` (prog-if XX [name])`` when set; without ``-nn`` the numbers are absent;
- indented lines: ``Subsystem: ... [15b3:0087]``, ``NUMA node: 0``, ``Kernel driver in use:
  mlx5_core``, and under ``Capabilities: [48] Vital Product Data`` the decoded VPD: ``Product
  Name: ...``, ``[PN] Part number: ...`` ... ``[RV] Reserved: checksum good, ...``, ``End``
  (bytes below 0x20, 0x7f and ``\\`` printed as ``\\xNN`` / ``\\\\``); ``Not readable`` when
  lspci was not run as root;
- ``-xxxx``: the configuration space as hex rows ``00: b3 15 21 10 ...`` (16 bytes a row, 4096
  bytes as root, 64 otherwise). Where present, vendor, device, class (with prog-if) and
  subsystem IDs come from these bytes, as the inventory reads them from sysfs ``config``.

The script's fallback without lspci (``PCI devices configuration space dump using sysfs``:
``0000:05:00.0 020700: Vendor 15b3 Device 1021 (rev 00)`` and the same hex rows) is read too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nvfabric.facts.pci import parse_config_header
from nvfabric.model.inventory import MELLANOX, NVIDIA, PciFunction
from nvfabric.model.vpd import Vpd, VpdField

#: Most functions kept (a large node has a few hundred); more are counted, not kept.
MAX_FUNCTIONS = 8192
#: Configuration bytes kept per function: the standard header and capability list.
MAX_CONFIG = 256
#: Longest line read: lspci's lines are under 300 characters (a VPD value is at most 255
#: bytes, a hex row 55); longer ones are no lspci output and are skipped, which also keeps
#: every regular expression here linear.
MAX_LINE = 1024
#: Most VPD fields kept per function (a ConnectX image has about ten).
MAX_VPD_FIELDS = 64
#: Most VPD value bytes kept over all functions (a ConnectX image has about 300; 8192 functions
#: of 64 full fields would be 130 MB). Past it only a function's first Mellanox vendor field
#: (``MLX:...``, the one holding ``SMDL=SW_MNG``) is kept, at most 255 bytes each.
MAX_VPD_BYTES = 1 << 20
_NUMBER = re.compile(r"[0-9]{1,9}")

_ADDR = r"(?a)(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
ENTRY = re.compile(
    _ADDR + r" (?P<cls_name>[^[:]*?)(?: \[(?P<cls>[0-9a-fA-F]{4})\])?: (?P<name>.*?)"
    r"(?: \[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\])?"
    r"(?: \(rev (?P<rev>[0-9a-fA-F]{2})\))?"
    r"(?: \(prog-if (?P<progif>[0-9a-fA-F]{2})(?: \[[^]]*\])?\))?\s*$"
)
SYSFS_ENTRY = re.compile(
    _ADDR + r" (?P<cls6>[0-9a-fA-F]{6}): Vendor (?P<vendor>[0-9a-fA-F]{4}) Device "
    r"(?P<device>[0-9a-fA-F]{4})(?: \(rev [0-9a-fA-F]{2}\))?\s*$"
)
#: A row of ``-xxxx`` hex: the offset, then 1-16 bytes of two hex digits each, one blank
#: between them (a damaged report's ``00: d600`` is no row: four digits are no byte).
HEX_ROW = re.compile(
    r"^(?P<off>[0-9a-fA-F]{2,3}): (?P<bytes>[0-9a-fA-F]{2}(?: [0-9a-fA-F]{2}){0,15})[ \t]*$")
SUBSYSTEM = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]\s*$")
#: The SR-IOV capability's line naming its virtual functions' device ID (pciutils ls-ecaps.c
#: ``VF offset: 4, stride: 1, Device ID: 101e``).
SRIOV_VF_DEVICE = re.compile(
    r"\bVF offset: \d+, stride: \d+, Device ID: (?P<device>[0-9a-fA-F]{4})")
VPD_FIELD = re.compile(r"^\[(?P<kw>[0-9A-Z]{2})\] [^:]*: ?(?P<value>.*)$")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\\\")


def unescape(text: str) -> bytes:
    """A VPD value as lspci printed it back to bytes (``\\xNN`` and ``\\\\`` undone)."""
    def repl(m: re.Match[str]) -> str:
        return chr(int(m.group(1), 16)) if m.group(1) else "\\"
    return _ESCAPE.sub(repl, text).encode("latin-1", "replace")


@dataclass
class Entry:
    """One function as read: what lspci printed about it."""

    address: str
    class_name: str = ""
    name: str = ""
    vendor: int | None = None
    device: int | None = None
    class_code: int | None = None
    subsystem: tuple[int, int] | None = None
    driver: str | None = None
    numa_node: int | None = None
    vpd_id: str | None = None
    vpd_fields: list[VpdField] = field(default_factory=list)
    vpd_checksum: bool | None = None
    vpd_end: bool = False
    vpd_seen: bool = False
    vpd_unreadable: bool = False
    config: bytearray = field(default_factory=bytearray)
    #: the device ID this function's SR-IOV capability gives its virtual functions
    vf_device: int | None = None

    def function(self) -> PciFunction | None:
        """The inventory's value for this function; None when neither the text nor the hex
        rows give vendor and device IDs (plain ``lspci -vvv`` without ``-nn`` or ``-x``)."""
        ids = parse_config_header(bytes(self.config)) if len(self.config) >= 48 else None
        if ids is not None:
            vendor, device, class_code, sub_vendor, sub_device = ids
        else:
            if self.vendor is None or self.device is None:
                return None
            vendor, device = self.vendor, self.device
            class_code = self.class_code or 0
            sub_vendor, sub_device = self.subsystem or (0, 0)
        vpd = None
        if vendor == MELLANOX and self.vpd_seen and not self.vpd_unreadable:
            vpd = Vpd(self.vpd_id, tuple(self.vpd_fields), self.vpd_checksum, self.vpd_end)
        keep = vendor in (NVIDIA, MELLANOX)
        return PciFunction(
            address=self.address,
            vendor=vendor,
            device=device,
            class_code=class_code,
            subsystem_vendor=sub_vendor,
            subsystem_device=sub_device,
            driver=self.driver if keep else None,
            numa_node=self.numa_node if keep else None,
            vpd=vpd,
        )


def full_address(addr: str) -> str:
    """``05:00.0`` -> ``0000:05:00.0`` (lspci without ``-D`` omits domain 0); lower case."""
    addr = addr.lower()
    return addr if addr.count(":") == 2 else "0000:" + addr


class LspciParser:
    """Feed lspci lines (:meth:`line`), then :meth:`functions`. Bounded: at most
    :data:`MAX_FUNCTIONS` entries and :data:`MAX_CONFIG` bytes of each one's hex rows."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.dropped = 0
        #: entries whose address an earlier entry already had (a block written twice, or
        #: ``lspci -d 10de:* -v -xxx`` beside ``-nnDvvvxxxx``): the first one counts
        self.duplicates = 0
        self._addresses: set[str] = set()
        #: VPD value bytes kept, and fields dropped past :data:`MAX_VPD_BYTES`
        self.vpd_bytes = 0
        self.vpd_dropped = 0
        self.hex_rows = 0
        self._cur: Entry | None = None
        self._in_vpd = False
        self._vpd_indent = 0
        self._vpd_section = "R"  # lspci: "Read-only fields:" / "Read/write fields:"

    def line(self, raw: str) -> None:
        """One line of lspci output (trailing newline optional)."""
        line = raw.rstrip("\r\n")
        if len(line) > MAX_LINE:
            return
        stripped = line.strip()
        if not stripped:
            self._in_vpd = False
            return
        if not line[0].isspace():
            m = ENTRY.match(line)
            if m and not HEX_ROW.match(line):
                self._new_entry(m)
                return
            s = SYSFS_ENTRY.match(line)
            if s:
                self._new_sysfs_entry(s)
                return
            h = HEX_ROW.match(line)
            if h and self._cur is not None:
                self._hex(h)
            return
        cur = self._cur
        if cur is None:
            return
        indent = len(line) - len(line.lstrip())
        if self._in_vpd:
            if indent <= self._vpd_indent:
                self._in_vpd = False
            else:
                self._vpd_line(cur, stripped)
                return
        if stripped.startswith("Capabilities:") and "Vital Product Data" in stripped:
            cur.vpd_seen = True
            self._vpd_section = "R"
            self._in_vpd = True
            self._vpd_indent = indent
        elif stripped.startswith("Subsystem:"):
            sm = SUBSYSTEM.search(stripped)
            if sm:
                cur.subsystem = (int(sm.group("vendor"), 16), int(sm.group("device"), 16))
        elif stripped.startswith("NUMA node:"):
            value = stripped.split(":", 1)[1].strip()
            if _NUMBER.fullmatch(value):  # ASCII digits only ("-1": none; "²" is no number)
                cur.numa_node = int(value)
        elif stripped.startswith("VF offset:"):
            vm = SRIOV_VF_DEVICE.search(stripped)
            if vm:
                cur.vf_device = int(vm.group("device"), 16)
        elif stripped.startswith("Kernel driver in use:"):
            cur.driver = stripped.split(":", 1)[1].strip() or None

    def _new_entry(self, m: re.Match[str]) -> None:
        e = Entry(full_address(m.group("addr")), m.group("cls_name").strip(),
                  m.group("name").strip())
        if m.group("vendor"):
            e.vendor, e.device = int(m.group("vendor"), 16), int(m.group("device"), 16)
        if m.group("cls"):
            e.class_code = (int(m.group("cls"), 16) << 8) | int(m.group("progif") or "0", 16)
        self._push(e)

    def _new_sysfs_entry(self, m: re.Match[str]) -> None:
        e = Entry(full_address(m.group("addr")))
        e.vendor, e.device = int(m.group("vendor"), 16), int(m.group("device"), 16)
        e.class_code = int(m.group("cls6"), 16)
        self._push(e)

    def _push(self, e: Entry) -> None:
        self._in_vpd = False
        if e.address in self._addresses:
            # one PCI address is one function: a second entry for it (the lspci block
            # repeated, two lspci commands in one report) would count it twice
            self.duplicates += 1
            self._cur = None
            return
        if len(self.entries) >= MAX_FUNCTIONS:
            self.dropped += 1
            self._cur = None
            return
        self.entries.append(e)
        self._addresses.add(e.address)
        self._cur = e

    def _hex(self, m: re.Match[str]) -> None:
        assert self._cur is not None
        self.hex_rows += 1
        offset = int(m.group("off"), 16)
        if offset >= MAX_CONFIG or offset != len(self._cur.config):
            return
        self._cur.config += bytes(int(b, 16) for b in m.group("bytes").split())

    def _vpd_line(self, cur: Entry, text: str) -> None:
        if text.startswith("Product Name:"):
            cur.vpd_id = text.split(":", 1)[1].strip()
        elif text == "Read-only fields:":
            self._vpd_section = "R"
        elif text == "Read/write fields:":
            self._vpd_section = "W"
        elif text == "End":
            cur.vpd_end = True
            self._in_vpd = False
        elif text == "Not readable":
            cur.vpd_unreadable = True
            self._in_vpd = False
        else:
            f = VPD_FIELD.match(text)
            if f is None or cur.vpd_end:
                return
            kw = f.group("kw")
            value = f.group("value")
            if kw == "RV":
                cur.vpd_checksum = value.startswith("checksum good")
                return
            if len(cur.vpd_fields) >= MAX_VPD_FIELDS:
                return
            data = unescape(value)[:255]  # a VPD keyword's length is one byte
            if self.vpd_bytes + len(data) > MAX_VPD_BYTES and not (
                    data.startswith(b"MLX:") and not any(
                        f.value.startswith(b"MLX:") for f in cur.vpd_fields)):
                self.vpd_dropped += 1
                return
            self.vpd_bytes += len(data)
            cur.vpd_fields.append(VpdField(self._vpd_section, kw, data))

    def functions(self) -> tuple[PciFunction, ...]:
        """Every function with known IDs, in address order."""
        out = [f for f in (e.function() for e in self.entries) if f is not None]
        return tuple(sorted(out, key=lambda f: f.address))

    def virtual_functions(self) -> frozenset[str]:
        """Addresses of the SR-IOV virtual functions: entries pci.ids names ``Virtual
        Function`` (``ConnectX Family mlx5Gen Virtual Function [15b3:101e]``), or whose vendor
        and device are those a physical function's SR-IOV capability gives its VFs. The kernel
        creates a VF's RDMA device only when VFs are enabled, after every physical function
        was probed, so VFs take the highest ``mlx5_N`` numbers (see ibstat.attach)."""
        vf_ids = {(e.vendor, e.vf_device) for e in self.entries if e.vf_device is not None}
        out = set()
        for e in self.entries:
            fn = e.function()
            ids = (fn.vendor, fn.device) if fn is not None else (e.vendor, e.device)
            if "Virtual Function" in e.name or ids in vf_ids:
                out.add(e.address)
        return frozenset(out)

    def vpd_unreadable(self) -> frozenset[str]:
        """Addresses of the Mellanox functions whose VPD lspci printed as ``Not readable``
        (lspci, or the whole script, not run as root): whether they are LPFs is unknown."""
        out = set()
        for e in self.entries:
            fn = e.function()
            if fn is not None and fn.vendor == MELLANOX and e.vpd_unreadable:
                out.add(e.address)
        return frozenset(out)

    @property
    def without_ids(self) -> int:
        """Entries whose vendor/device IDs the text did not give (no ``-nn``, no hex)."""
        return sum(1 for e in self.entries if e.function() is None)


def parse(text: str) -> tuple[PciFunction, ...]:
    """Convenience: every function of a whole lspci text."""
    p = LspciParser()
    for line in text.splitlines():
        p.line(line)
    return p.functions()

"""``ibstat`` text -> InfiniBand devices and ports, the values
:mod:`nvfabric.facts.infiniband` reads from sysfs. Pure.

What ibstat prints (infiniband-diags ibstat.c; captures tests/data/corpus/ibstat/
dgxb200-ibstat-mlx5_0.txt, h100-ibstat-all-active-0.txt): per device ``CA 'mlx5_0'`` then
indented ``CA type``, ``Number of ports``, ``Firmware version``, ``Node GUID: 0x...``, and per
port ``Port 1:`` with ``State: Active``, ``Physical state: LinkUp``, ``Capability mask:
0xa751e84a``, ``Port GUID: 0xe09d730300e400e8``, ``Link layer: InfiniBand``.

States are given in sysfs form (``4: ACTIVE``, ``5: LinkUp``: the numbers of the IBA PortInfo
PortState and PortPhysicalState, as the kernel prints them), so a port reads the same from a
bug report as from the node. ibstat prints no PCI address: :func:`attach` pairs devices with
PCI functions (``mst status -v`` rows where the report has them, else kernel naming order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from nvfabric.facts.infiniband import parse_cap_mask
from nvfabric.model.inventory import MELLANOX, IbDevice, IbPort, PciFunction

MAX_DEVICES = 256
MAX_PORTS = 16

#: ibstat's port state words -> sysfs ``state`` (IBA PortInfo.PortState).
STATES = {"Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED",
          "Active": "4: ACTIVE", "ActiveDefer": "5: ACTIVE_DEFER"}
#: ibstat's physical state words -> sysfs ``phys_state`` (IBA PortInfo.PortPhysicalState).
PHYS_STATES = {"Sleep": "1: Sleep", "Polling": "2: Polling", "Disabled": "3: Disabled",
               "PortConfigurationTraining": "4: PortConfigurationTraining",
               "LinkUp": "5: LinkUp", "LinkErrorRecovery": "6: LinkErrorRecovery",
               "PhyTest": "7: Phy Test"}

#: The ibstat fields read (lower case): every other ``Key: value`` line is dropped, so what
#: is kept per device and port is bounded whatever the section holds.
KEYS = frozenset({"node guid", "state", "physical state", "capability mask", "port guid",
                  "link layer"})

_CA = re.compile(r"^CA '(?P<name>[^']{1,64})'\s*$")
_PORT = re.compile(r"^\s+Port (?P<port>[0-9]{1,3}):\s*$")
_KV = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")
_GUID = re.compile(r"0x[0-9a-fA-F]{1,16}")
_MST_ROW = re.compile(
    r"(?P<addr>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<dev>mlx5_\d+)\b"
)


def guid(text: str | None) -> str | None:
    """``0xe09d730300e400e8`` as 0x + 16 lower-case digits; None when it is not a GUID."""
    if text is None or not _GUID.fullmatch(text):
        return None
    return f"0x{int(text, 16):016x}"


@dataclass
class _Port:
    port: int
    values: dict[str, str]


@dataclass
class _Ca:
    name: str
    values: dict[str, str]
    ports: list[_Port]


class IbstatParser:
    """Feed ibstat lines, then :meth:`devices`."""

    def __init__(self) -> None:
        self._cas: list[_Ca] = []
        #: a CA printed again (the ibstat output twice in one report): the first one counts
        self.duplicates = 0
        self._names: set[str] = set()
        self._skip = False

    def line(self, raw: str) -> None:
        line = raw.rstrip("\r\n")
        if len(line) > 1024:  # no ibstat line is that long; keeps the expressions linear
            return
        m = _CA.match(line)
        if m:
            name = m.group("name")
            self._skip = name in self._names
            if self._skip:
                # one device name is one device: its lines again would add a second device
                # of the same name, paired with another PCI function
                self.duplicates += 1
            elif len(self._cas) < MAX_DEVICES:
                self._cas.append(_Ca(name, {}, []))
                self._names.add(name)
            else:
                self._skip = True
            return
        if not self._cas or self._skip:
            return
        ca = self._cas[-1]
        p = _PORT.match(line)
        if p:
            if len(ca.ports) < MAX_PORTS:
                ca.ports.append(_Port(int(p.group("port")), {}))
            return
        kv = _KV.match(line)
        if kv is None:
            return
        key = kv.group("key").lower()
        if key not in KEYS:
            return
        target = ca.ports[-1].values if ca.ports else ca.values
        target.setdefault(key, kv.group("value"))

    def devices(self) -> tuple[IbDevice, ...]:
        """Every device in plain string order of names (as ``ibstat -l`` lists them), ports
        in number order, PCI address unknown (see :func:`attach`)."""
        out = []
        for ca in self._cas:
            ports = []
            for p in sorted(ca.ports, key=lambda p: p.port):
                v = p.values
                state = v.get("state", "")
                phys = v.get("physical state", "")
                ports.append(IbPort(
                    port=p.port,
                    guid=guid(v.get("port guid")),
                    cap_mask=parse_cap_mask(v.get("capability mask")),
                    state=STATES.get(state, state),
                    phys_state=PHYS_STATES.get(phys, phys),
                    link_layer=v.get("link layer", ""),
                ))
            node_guid = guid(ca.values.get("node guid")) or "0x0000000000000000"
            out.append(IbDevice(ca.name, None, node_guid, tuple(ports)))
        return tuple(sorted(out, key=lambda d: d.name))


def parse(text: str) -> tuple[IbDevice, ...]:
    """Convenience: the devices of a whole ibstat text."""
    p = IbstatParser()
    for line in text.splitlines():
        p.line(line)
    return p.devices()


def mst_pairs(text: str) -> dict[str, str]:
    """``mst status -v`` rows (``ConnectX7(rev:0) /dev/mst/mt4129_pciconf0 05:00.0 mlx5_0
    net-ibp5s0 0``) -> ``{"mlx5_0": "0000:05:00.0"}``."""
    out: dict[str, str] = {}
    for m in _MST_ROW.finditer(text):
        addr = m.group("addr").lower()
        out.setdefault(m.group("dev"), addr if addr.count(":") == 2 else "0000:" + addr)
    return out


_MLX5 = re.compile(r"mlx5_([0-9]{1,6})")


def _index(name: str) -> tuple[int, str]:
    m = _MLX5.fullmatch(name)
    return (int(m.group(1)), name) if m else (1 << 30, name)


@dataclass(frozen=True)
class Attachment:
    """The devices with their PCI addresses, and how the pairing was made."""

    devices: tuple[IbDevice, ...]
    method: str
    reason: str


def attach(devices: tuple[IbDevice, ...], functions: tuple[PciFunction, ...],
           pairs: dict[str, str] | None = None,
           virtual: frozenset[str] = frozenset()) -> Attachment:
    """Give each device its PCI function. ``pairs`` (from ``mst status -v``) win; otherwise
    ``mlx5_N`` devices are paired with the ConnectX functions bound to mlx5_core in PCI
    address order: mlx5_core registers its RDMA devices in probe order, which is PCI order,
    and the kernel numbers them in that order (Linux drivers/infiniband/hw/mlx5 and
    ib_register_device's ``%d`` names). SR-IOV virtual functions (``virtual``, addresses)
    get their RDMA devices only when VFs are enabled, after every physical function was
    probed, so the physical functions take the first numbers and the VFs the next, each in
    PCI address order. Renamed devices (``ibp5s0``) stay unpaired."""
    pairs = pairs or {}
    known = {f.address for f in functions}
    if pairs:
        out = tuple(replace(d, pci=pairs[d.name]) if pairs.get(d.name) in known else d
                    for d in devices)
        paired = sum(1 for d in out if d.pci)
        return Attachment(out, "mst", f"{paired} of {len(devices)} InfiniBand devices paired "
                          "with their PCI functions by `mst status -v`")
    mlx = [f for f in functions if f.vendor == MELLANOX and (f.class_code >> 16) == 0x02
           and f.driver in (None, "mlx5_core")]
    mlx.sort(key=lambda f: (f.address in virtual, f.address))
    numbered = sorted((d for d in devices if _MLX5.fullmatch(d.name)),
                      key=lambda d: _index(d.name))
    mapping = {d.name: f.address for d, f in zip(numbered, mlx, strict=False)}
    out = tuple(replace(d, pci=mapping[d.name]) if d.name in mapping else d for d in devices)
    if not numbered:
        reason = "no mlx5_N InfiniBand device to pair with a PCI function"
    elif len(numbered) == len(mlx):
        reason = (f"{len(numbered)} InfiniBand devices paired with the {len(mlx)} ConnectX "
                  "functions in PCI address order (kernel naming order; ibstat prints no PCI "
                  "address)")
    else:
        reason = (f"{len(numbered)} mlx5 InfiniBand devices but {len(mlx)} ConnectX network "
                  f"functions: the first {len(mapping)} paired in PCI address order, a guess "
                  "(ibstat prints no PCI address)")
    return Attachment(out, "order", reason)

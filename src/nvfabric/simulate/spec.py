"""Node specs: the format of ../shared/cases/README.md ("Node spec"), parsed and validated.

A spec describes a machine the way its sysfs/procfs would show it; :mod:`.tree` writes it out.
Pure: dicts in, frozen values out; bad input raises :class:`SpecError` with one line that says
which key is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GUID = re.compile(r"0x[0-9a-fA-F]{16}")
HEX4 = re.compile(r"[0-9a-fA-F]{4}")
DRIVER = re.compile(r"\d{3}\.\d{1,3}(\.\d{1,3})?")
IBDEV = re.compile(r"[A-Za-z0-9_]{1,32}")

DEFAULT_LPF_ID = "Nvidia ConnectX-7 mezz internal for Nvidia Umbriel system"
DEFAULT_NIC_ID = "NVIDIA ConnectX-7 HHHL Adapter Card, NDR 400Gb/s, single-port OSFP, PCIe 5.0 x16"
DEFAULT_VENDOR_FIELD = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"


class SpecError(ValueError):
    """A node spec that does not follow the format; the message names the key."""


@dataclass(frozen=True)
class PortSpec:
    port: int
    guid: str
    cap_mask: int
    state: str = "4: ACTIVE"
    phys_state: str = "5: LinkUp"
    link_layer: str = "InfiniBand"


@dataclass(frozen=True)
class MellanoxSpec:
    ib_device: str
    device_id: str
    vpd_id_string: str
    vpd_vendor_field: str
    ports: tuple[PortSpec, ...]

    @property
    def sw_mng(self) -> bool:
        return ":SMDL=SW_MNG" in self.vpd_vendor_field + ":"


@dataclass(frozen=True)
class NodeSpec:
    """A validated node spec (see the module docstring for the source of the format)."""

    arch: str
    driver_version: str | None
    modules: tuple[str, ...]
    gpus: tuple[tuple[str, int], ...]
    nvswitches: tuple[str, int] | None
    nvswitch_proc_devices: int | None
    mellanox: tuple[MellanoxSpec, ...]
    imex_major: int | None
    imex_channels: tuple[int, ...]
    files: tuple[tuple[str, str], ...]
    other_pci: int = 0


def _want(cond: bool, message: str) -> None:
    if not cond:
        raise SpecError(message)


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(f"{key}: expected an integer, got {value!r}")
    try:
        return int(value, 0) if isinstance(value, str) else value
    except ValueError:
        raise SpecError(f"{key}: expected an integer, got {value!r}") from None


def _hex4(value: Any, key: str) -> str:
    text = str(value)
    _want(bool(HEX4.fullmatch(text)), f"{key}: expected 4 hex digits, got {value!r}")
    return text.lower()


def _port(raw: Any, key: str) -> PortSpec:
    _want(isinstance(raw, Mapping), f"{key}: expected a mapping")
    guid = str(raw.get("guid", ""))
    _want(bool(GUID.fullmatch(guid)), f"{key}.guid: expected 0x + 16 hex digits, got {guid!r}")
    return PortSpec(
        port=_int(raw.get("port", 1), f"{key}.port"),
        guid=guid.lower(),
        cap_mask=_int(raw.get("cap_mask", "0xa751e84a"), f"{key}.cap_mask"),
        state=str(raw.get("state", "4: ACTIVE")),
        phys_state=str(raw.get("phys_state", "5: LinkUp")),
        link_layer=str(raw.get("link_layer", "InfiniBand")),
    )


def parse(raw: Any) -> NodeSpec:
    """Validate a spec mapping (as loaded from YAML). Raises SpecError."""
    _want(isinstance(raw, Mapping), "node spec: expected a mapping at the top level")
    known = {
        "arch", "driver_version", "modules", "gpus", "nvswitches", "nvswitch_proc_devices",
        "mellanox", "imex_channels", "files", "other_pci",
    }
    unknown = sorted(set(raw) - known)
    _want(not unknown, f"node spec: unknown key(s) {', '.join(map(str, unknown))}")
    arch = str(raw.get("arch", "x86_64"))
    _want(arch in ("x86_64", "aarch64"), f"arch: expected x86_64 or aarch64, got {arch!r}")
    dv = raw.get("driver_version")
    if dv is not None:
        dv = str(dv)
        _want(bool(DRIVER.fullmatch(dv)), f"driver_version: not a driver version: {dv!r}")
    modules = raw.get("modules", [])
    _want(isinstance(modules, list), "modules: expected a list")
    for m in modules:
        _want(bool(IBDEV.fullmatch(str(m))), f"modules: bad module name {m!r}")
    gpus = []
    for i, g in enumerate(raw.get("gpus") or []):
        _want(isinstance(g, Mapping), f"gpus[{i}]: expected a mapping")
        gpus.append((_hex4(g.get("device_id"), f"gpus[{i}].device_id"),
                     _int(g.get("count", 1), f"gpus[{i}].count")))
    sw = raw.get("nvswitches")
    nvswitches = None
    if sw:
        _want(isinstance(sw, Mapping), "nvswitches: expected a mapping")
        nvswitches = (_hex4(sw.get("device_id"), "nvswitches.device_id"),
                      _int(sw.get("count", 1), "nvswitches.count"))
    mlx = []
    names = set()
    for i, m in enumerate(raw.get("mellanox") or []):
        key = f"mellanox[{i}]"
        _want(isinstance(m, Mapping), f"{key}: expected a mapping")
        name = str(m.get("ib_device", f"mlx5_{i}"))
        _want(bool(IBDEV.fullmatch(name)), f"{key}.ib_device: bad name {name!r}")
        _want(name not in names, f"{key}.ib_device: {name} appears twice")
        names.add(name)
        vendor_field = str(m.get("vpd_vendor_field", DEFAULT_VENDOR_FIELD))
        sw_mng = ":SMDL=SW_MNG" in vendor_field + ":"
        ports = tuple(_port(p, f"{key}.ports[{j}]") for j, p in enumerate(m.get("ports") or []))
        mlx.append(
            MellanoxSpec(
                ib_device=name,
                device_id=_hex4(m.get("device_id", "1021"), f"{key}.device_id"),
                vpd_id_string=str(
                    m.get("vpd_id_string", DEFAULT_LPF_ID if sw_mng else DEFAULT_NIC_ID)
                ),
                vpd_vendor_field=vendor_field,
                ports=ports,
            )
        )
    imex = raw.get("imex_channels") or {}
    _want(isinstance(imex, Mapping), "imex_channels: expected a mapping")
    files = raw.get("files") or {}
    _want(isinstance(files, Mapping), "files: expected a mapping of path -> content")
    for path in files:
        p = str(path)
        _want(".." not in p.split("/"), f"files: path {p!r} may not contain '..'")
    return NodeSpec(
        arch=arch,
        driver_version=dv,
        modules=tuple(str(m) for m in modules),
        gpus=tuple(gpus),
        nvswitches=nvswitches,
        nvswitch_proc_devices=(
            _int(raw["nvswitch_proc_devices"], "nvswitch_proc_devices")
            if raw.get("nvswitch_proc_devices") is not None
            else None
        ),
        mellanox=tuple(mlx),
        imex_major=_int(imex["major"], "imex_channels.major") if "major" in imex else None,
        imex_channels=tuple(
            _int(c, "imex_channels.channels") for c in imex.get("channels") or []
        ),
        files=tuple((str(k), str(v)) for k, v in files.items()),
        other_pci=_int(raw.get("other_pci", 0), "other_pci"),
    )

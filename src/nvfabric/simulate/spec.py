"""Node specs: the format of tests/data/cases/README.md ("Node spec"), parsed and validated.

A spec describes a machine the way its sysfs/procfs would show it; :mod:`.tree` writes it out.
Pure: dicts in, frozen values out; bad input raises :class:`SpecError` with one line that says
which key is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvfabric.model.errors import InputError
from nvfabric.model.strict import BadValue, to_int

GUID = re.compile(r"0x[0-9a-fA-F]{16}")
HEX4 = re.compile(r"[0-9a-fA-F]{4}")
DRIVER = re.compile(r"\d{3}\.\d{1,3}(\.\d{1,3})?")
IBDEV = re.compile(r"[A-Za-z0-9_]{1,32}")

DEFAULT_LPF_ID = "Nvidia ConnectX-7 mezz internal for Nvidia Umbriel system"
DEFAULT_NIC_ID = "NVIDIA ConnectX-7 HHHL Adapter Card, NDR 400Gb/s, single-port OSFP, PCIe 5.0 x16"
DEFAULT_VENDOR_FIELD = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"

#: Bounds of the counts in a spec (see :func:`parse`).
MAX_GPUS = 64
MAX_NVSWITCHES = 64
MAX_MELLANOX = 64
MAX_PORTS = 16
MAX_OTHER_PCI = 4096
MAX_IMEX_CHANNELS = 2048
#: Longest ``files:`` path, in bytes (under the root; well inside PATH_MAX).
MAX_PATH = 1024


class SpecError(InputError):
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
    files: tuple[tuple[str, str | bytes], ...]
    other_pci: int = 0


def _want(cond: bool, message: str) -> None:
    if not cond:
        raise SpecError(message)


def _int(value: Any, key: str, low: int | None = None, high: int | None = None) -> int:
    """An integer (or an integer literal such as ``"0xa751e84a"``) within ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(f"{key}: expected an integer, got {value!r}")
    try:
        number = to_int(value.strip(), base=0, signed=True) if isinstance(value, str) else value
    except BadValue:
        raise SpecError(f"{key}: expected an integer, got {str(value)[:40]!r}") from None
    if (low is not None and number < low) or (high is not None and number > high):
        raise SpecError(f"{key}: expected {low}..{high}, got {value!r}")
    return number


def _text(value: Any, key: str, encoding: str = "utf-8", limit: int = 255) -> str:
    """A short text field: at most ``limit`` bytes in ``encoding`` (VPD strings are latin-1 and
    at most 255 bytes, PCI Local Bus Specification 3.0, 6.4; a sysfs value is one short line)."""
    text = str(value)
    try:
        size = len(text.encode(encoding))
    except UnicodeEncodeError:
        raise SpecError(f"{key}: expected {encoding} text, got {value!r}") from None
    _want(size <= limit, f"{key}: longer than {limit} bytes")
    return text


def _list(raw: Mapping[str, Any], key: str, limit: int, where: str = "") -> list[Any]:
    """The list under ``key`` (absent or null: empty), at most ``limit`` entries; errors name
    the path (``where`` + ``key``, e.g. ``mellanox[0].ports``)."""
    value = raw.get(key)
    if value is None:
        return []
    path = where + key
    _want(isinstance(value, list), f"{path}: expected a list, got {str(value)[:40]!r}")
    _want(len(value) <= limit, f"{path}: at most {limit} entries, got {len(value)}")
    return list(value)


def _files(raw: Any) -> tuple[tuple[str, str | bytes], ...]:
    """``files:`` as (normalised relative path, content) pairs, in spec order.

    A path is taken under the root (a leading ``/`` is dropped, ``a//b`` and ``./`` collapse);
    it may not be empty, contain ``..`` or NUL, have a component over 255 bytes (NAME_MAX) or
    be over :data:`MAX_PATH` bytes, name the same file as another key, or lie inside another
    key's file. Content is text (UTF-8) or bytes (YAML ``!!binary``); null is refused, ``""``
    is the empty file. Collisions with what the tree itself writes are checked by
    :func:`nvfabric.simulate.tree.layout`."""
    if raw is None:
        return ()
    _want(isinstance(raw, Mapping), "files: expected a mapping of path -> content")
    out: dict[str, str | bytes] = {}
    for key, content in raw.items():
        _want(isinstance(key, (str, int)) and not isinstance(key, bool),
              f"files: key {key!r}: expected a path")
        text = str(key)
        where = f"files: {text!r}"
        _want("\0" not in text, f"{where}: path contains NUL")
        parts = [p for p in text.split("/") if p not in ("", ".")]
        _want(bool(parts), f"{where}: empty path (give a file under the root)")
        _want(".." not in parts, f"{where}: path may not contain '..'")
        for part in parts:
            _want(len(part.encode("utf-8", "surrogateescape")) <= 255,
                  f"{where}: a path component is longer than 255 bytes")
        path = "/".join(parts)
        _want(len(path.encode("utf-8", "surrogateescape")) <= MAX_PATH,
              f"{where}: longer than {MAX_PATH} bytes")
        _want(path not in out, f"{where}: names the same file as another key")
        _want(content is not None,
              f"{where}: no content (null); give text, \"\" for an empty file")
        _want(isinstance(content, (str, bytes)),
              f"{where}: expected text content (quote numbers), got {content!r}")
        out[path] = content
    for path in out:
        for other in out:
            _want(not other.startswith(path + "/"),
                  f"files: {path!r} is a file, so {other!r} cannot be inside it")
    return tuple(out.items())


def _hex4(value: Any, key: str) -> str:
    text = str(value)
    _want(bool(HEX4.fullmatch(text)), f"{key}: expected 4 hex digits, got {value!r}")
    return text.lower()


def _port(raw: Any, key: str) -> PortSpec:
    _want(isinstance(raw, Mapping), f"{key}: expected a mapping")
    guid = str(raw.get("guid", ""))
    _want(bool(GUID.fullmatch(guid)), f"{key}.guid: expected 0x + 16 hex digits, got {guid!r}")
    return PortSpec(
        port=_int(raw.get("port", 1), f"{key}.port", 1, 254),
        guid=guid.lower(),
        cap_mask=_int(raw.get("cap_mask", "0xa751e84a"), f"{key}.cap_mask", 0, 0xFFFFFFFF),
        state=_text(raw.get("state", "4: ACTIVE"), f"{key}.state"),
        phys_state=_text(raw.get("phys_state", "5: LinkUp"), f"{key}.phys_state"),
        link_layer=_text(raw.get("link_layer", "InfiniBand"), f"{key}.link_layer"),
    )


def _mellanox(i: int, m: Any) -> MellanoxSpec:
    key = f"mellanox[{i}]"
    _want(isinstance(m, Mapping), f"{key}: expected a mapping")
    name = str(m.get("ib_device", f"mlx5_{i}"))
    _want(bool(IBDEV.fullmatch(name)), f"{key}.ib_device: bad name {name!r}")
    vendor_field = _text(m.get("vpd_vendor_field", DEFAULT_VENDOR_FIELD),
                         f"{key}.vpd_vendor_field", "latin-1")
    sw_mng = ":SMDL=SW_MNG" in vendor_field + ":"
    ports = tuple(_port(p, f"{key}.ports[{j}]")
                  for j, p in enumerate(_list(m, "ports", MAX_PORTS, f"mellanox[{i}].")))
    numbers = [p.port for p in ports]
    _want(len(set(numbers)) == len(numbers), f"{key}.ports: a port number appears twice")
    return MellanoxSpec(
        ib_device=name,
        device_id=_hex4(m.get("device_id", "1021"), f"{key}.device_id"),
        vpd_id_string=_text(m.get("vpd_id_string", DEFAULT_LPF_ID if sw_mng else DEFAULT_NIC_ID),
                            f"{key}.vpd_id_string", "latin-1"),
        vpd_vendor_field=vendor_field,
        ports=ports,
    )


def _gpus(raw: Mapping[str, Any]) -> list[tuple[str, int]]:
    """``gpus:``: (device ID, count) per entry, at most :data:`MAX_GPUS` in all."""
    gpus = []
    for i, g in enumerate(_list(raw, "gpus", MAX_GPUS)):
        _want(isinstance(g, Mapping), f"gpus[{i}]: expected a mapping")
        gpus.append((_hex4(g.get("device_id"), f"gpus[{i}].device_id"),
                     _int(g.get("count", 1), f"gpus[{i}].count", 0, MAX_GPUS)))
    total = sum(c for _, c in gpus)
    _want(total <= MAX_GPUS, f"gpus: at most {MAX_GPUS} GPUs in all, got {total}")
    return gpus


def _nvswitches(raw: Mapping[str, Any]) -> tuple[str, int] | None:
    """``nvswitches:``: (device ID, count), None when absent or empty."""
    sw = raw.get("nvswitches")
    nvswitches = None
    if sw:
        _want(isinstance(sw, Mapping), "nvswitches: expected a mapping")
        nvswitches = (_hex4(sw.get("device_id"), "nvswitches.device_id"),
                      _int(sw.get("count", 1), "nvswitches.count", 0, MAX_NVSWITCHES))
    return nvswitches


def _mellanox_list(raw: Mapping[str, Any]) -> list[MellanoxSpec]:
    """``mellanox:``: the ConnectX functions, each InfiniBand device name once."""
    mlx = [_mellanox(i, m) for i, m in enumerate(_list(raw, "mellanox", MAX_MELLANOX))]
    names = [m.ib_device for m in mlx]
    for i, name in enumerate(names):
        _want(name not in names[:i], f"mellanox[{i}].ib_device: {name} appears twice")
    return mlx


def parse(raw: Any) -> NodeSpec:
    """Validate a spec mapping (as loaded from YAML). Raises SpecError naming the key.

    Counts are bounded (a spec is a machine, not a way to fill a disk): GPUs 0..64 per entry
    and in all, NVSwitches 0..64, at most 64 ConnectX functions of at most 16 ports each, other
    PCI functions 0..4096, at most 2048 IMEX channels numbered below 2**20 (MINORBITS).
    """
    _want(isinstance(raw, Mapping), "node spec: expected a mapping at the top level")
    known = {
        "arch", "driver_version", "modules", "gpus", "nvswitches", "nvswitch_proc_devices",
        "mellanox", "imex_channels", "files", "other_pci",
    }
    unknown = sorted(set(map(str, raw)) - known)
    _want(not unknown, f"node spec: unknown key(s) {', '.join(unknown)}")
    arch = str(raw.get("arch", "x86_64"))
    _want(arch in ("x86_64", "aarch64"), f"arch: expected x86_64 or aarch64, got {arch!r}")
    dv = raw.get("driver_version")
    if dv is not None:
        dv = str(dv)
        _want(bool(DRIVER.fullmatch(dv)), f"driver_version: not a driver version: {dv!r}")
    modules = _list(raw, "modules", 256)
    for m in modules:
        _want(bool(IBDEV.fullmatch(str(m))), f"modules: bad module name {m!r}")
    gpus = _gpus(raw)
    nvswitches = _nvswitches(raw)
    mlx = _mellanox_list(raw)
    imex = raw.get("imex_channels") or {}
    _want(isinstance(imex, Mapping), "imex_channels: expected a mapping")
    proc_devices = raw.get("nvswitch_proc_devices")
    return NodeSpec(
        arch=arch,
        driver_version=dv,
        modules=tuple(str(m) for m in modules),
        gpus=tuple(gpus),
        nvswitches=nvswitches,
        nvswitch_proc_devices=(
            None if proc_devices is None
            else _int(proc_devices, "nvswitch_proc_devices", 0, MAX_NVSWITCHES)
        ),
        mellanox=tuple(mlx),
        imex_major=(_int(imex["major"], "imex_channels.major", 1, 4095)
                    if "major" in imex else None),
        imex_channels=tuple(sorted({
            _int(c, "imex_channels.channels", 0, (1 << 20) - 1)
            for c in _list(imex, "channels", MAX_IMEX_CHANNELS, "imex_channels.")
        })),
        files=_files(raw.get("files")),
        other_pci=_int(raw.get("other_pci", 0), "other_pci", 0, MAX_OTHER_PCI),
    )

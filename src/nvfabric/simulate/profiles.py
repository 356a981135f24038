"""Built-in node profiles for ``nvfabric simulate PROFILE DIR`` and the demo.

Each is a node spec (tests/data/cases/README.md format). Device IDs and VPD fields follow the
captures in tests/data/corpus (DGX B200 LPF VPD, GB200 lspci) and the P cases.
:data:`PLATFORMS` names the product each profile is; :func:`describe` adds what it holds, by
the product table (``nvfabric simulate --list``).
"""

from __future__ import annotations

from typing import Any

from nvfabric.rules.products import PRODUCTS
from nvfabric.simulate.spec import NodeSpec

_LPF = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:SMDL=SW_MNG:MODL=C7010Z"
_NIC = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"
_FULL_IB = ["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"]


def _lpf(name: str, guid: str, cap: str = "0xa751e84a", vendor: str = _LPF) -> dict[str, Any]:
    return {"ib_device": name, "device_id": "1021", "vpd_vendor_field": vendor,
            "ports": [{"port": 1, "guid": guid, "cap_mask": cap}]}


PROFILES: dict[str, dict[str, Any]] = {
    "dgx-b200": {
        "arch": "x86_64", "driver_version": "570.148.08", "modules": _FULL_IB,
        "gpus": [{"device_id": "2901", "count": 8}],
        "mellanox": [
            {**_lpf("mlx5_0", "0xe09d730300e400e8"),
             "vpd_id_string": "Nvidia ConnectX-7 mezz internal for Nvidia Umbriel system"},
            _lpf("mlx5_1", "0xe09d730300e400e9"),
            _lpf("mlx5_2", "0xe09d730300e400ea"),
            _lpf("mlx5_3", "0xe09d730300e400eb"),
        ],
    },
    "hgx-b200-4lpf": {
        "arch": "x86_64", "driver_version": "570.172.08", "modules": _FULL_IB,
        "gpus": [{"device_id": "2901", "count": 8}],
        "mellanox": [
            _lpf("mlx5_8", "0x0a0b0c0300d00008", "0xa751ec4a"),
            _lpf("mlx5_9", "0x0a0b0c0300d00009"),
            _lpf("mlx5_10", "0x0a0b0c0300d0000a", "0xa751ec4a"),
            _lpf("mlx5_11", "0x0a0b0c0300d0000b", "0xa751ec4a"),
            _lpf("mlx5_0", "0x0a0b0c0300e00000", "0xa651e848", _NIC),
        ],
    },
    "hgx-h100": {
        "arch": "x86_64", "driver_version": "550.90.07",
        "modules": ["nvidia", "mlx5_core", "mlx5_ib"],
        "gpus": [{"device_id": "2330", "count": 8}],
        "nvswitches": {"device_id": "22a3", "count": 4},
        "mellanox": [_lpf(f"mlx5_{i}", f"0x0a0b0c0300e0000{i}", "0xa651e848", _NIC)
                     for i in range(8)],
    },
    "dgx-a100": {
        "arch": "x86_64", "driver_version": "535.183.01", "modules": ["nvidia"],
        "gpus": [{"device_id": "20b2", "count": 8}],
        "nvswitches": {"device_id": "1af1", "count": 6},
    },
    "hgx2-v100": {
        "arch": "x86_64", "driver_version": "535.230.02", "modules": ["nvidia"],
        "gpus": [{"device_id": "1db8", "count": 16}],
        "nvswitches": {"device_id": "1ac2", "count": 12},
    },
    "gb200-tray": {
        "arch": "aarch64", "driver_version": "580.126.20",
        "modules": ["nvidia", "mlx5_core", "mlx5_ib"],
        "gpus": [{"device_id": "2941", "count": 4}],
        "mellanox": [_lpf(f"mlx5_{i}", f"0x0a0b0c0300f0000{i}", "0xa651e848", _NIC)
                     for i in range(4)],
        "imex_channels": {"major": 234, "channels": [0]},
    },
    "gh200": {
        "arch": "aarch64", "driver_version": "570.133.20", "modules": ["nvidia"],
        "gpus": [{"device_id": "2342", "count": 1}],
    },
    "h100-pcie": {
        "arch": "x86_64", "driver_version": "535.183.01", "modules": ["nvidia"],
        "gpus": [{"device_id": "2331", "count": 2}],
    },
    "a40-bridge": {
        "arch": "x86_64", "driver_version": "515.105.01", "modules": ["nvidia"],
        "gpus": [{"device_id": "2235", "count": 2}],
    },
    "no-gpu": {"arch": "x86_64", "driver_version": None, "modules": []},
}

#: Profile -> the product it is (NVIDIA's names of the systems and boards).
PLATFORMS: dict[str, str] = {
    "dgx-b200": "DGX B200",
    "hgx-b200-4lpf": "HGX B200 8-GPU",
    "hgx-h100": "HGX H100 8-GPU",
    "dgx-a100": "DGX A100",
    "hgx2-v100": "HGX-2",
    "gb200-tray": "GB200 NVL72 compute tray",
    "gh200": "GH200 Grace Hopper superchip node",
    "h100-pcie": "PCIe server",
    "a40-bridge": "PCIe server, NVLink bridge pair",
    "no-gpu": "server without a GPU",
}

#: IsSMDisabled, bit 10 of an InfiniBand port's capability mask (IBTA PortInfo CapabilityMask).
_SM_DISABLED = 0x400


def describe(name: str, spec: NodeSpec) -> str:
    """One line for ``simulate --list``: the product and what the profile holds, e.g. ``DGX
    B200 (8x B200, 4 ConnectX-7 LPF)``: GPUs and NVSwitches by the product table's names,
    ConnectX functions as LPF (VPD ``SMDL=SW_MNG``) or NIC, LPF ports with the SM disabled,
    IMEX channels."""
    parts = [f"{count}x {_name('10de', dev)}" for dev, count in spec.gpus]
    if spec.nvswitches and spec.nvswitches[1]:
        dev, count = spec.nvswitches
        product = PRODUCTS.get(("10de", dev))
        parts.append(f"{count} NVSwitch gen {product.generation[-1]}" if product
                     else f"{count} NVSwitch {dev}")
    for lpf, label in ((True, "LPF"), (False, "NIC")):
        group = [m for m in spec.mellanox if m.sw_mng is lpf]
        for dev in sorted({m.device_id for m in group}):
            parts.append(f"{sum(m.device_id == dev for m in group)} {_name('15b3', dev)} {label}")
    off = sum(p.cap_mask & _SM_DISABLED != 0 for m in spec.mellanox if m.sw_mng for p in m.ports)
    if off:
        parts.append(f"{off} LPF port{'s' if off > 1 else ''} SM-disabled")
    if spec.imex_channels:
        parts.append("IMEX " + ", ".join(f"channel{c}" for c in spec.imex_channels))
    return f"{PLATFORMS.get(name, name)} ({', '.join(parts) or 'no NVIDIA device'})"


def _name(vendor: str, device: str) -> str:
    product = PRODUCTS.get((vendor, device))
    return product.name if product else f"device {vendor}:{device}"

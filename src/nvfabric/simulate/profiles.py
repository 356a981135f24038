"""Built-in node profiles for ``nvfabric simulate PROFILE DIR`` and the demo.

Each is a node spec (tests/data/cases/README.md format). Device IDs and VPD fields follow the
captures in tests/data/corpus (DGX B200 LPF VPD, GB200 lspci) and the P cases.
"""

from __future__ import annotations

from typing import Any

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

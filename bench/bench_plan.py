"""Benchmark of detect + plan (issue "Foundation and the fabric plan").

Figures: median whole-process wall time of `nvfabric plan --json` against `python3 -c pass`,
runs of the two interleaved (issue 11 target <= 4x); in-process collect+plan time (target
< 5 ms); files opened by one collect; and the vendor script's shell approach on the same tree
(`lspci -vvv` plus `ibstat` per IB device) side by side. Nodes: the simulated DGX B200 and a
large synthetic node (8 GPUs, 4 LPFs, 16 IB devices, 400 other PCI functions).
"""

from __future__ import annotations

import builtins
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import PY, interleaved_ms, line, median_ms, process_ms, startup_ratio  # noqa: E402

from nvfabric.facts.inventory import collect
from nvfabric.rules.plan import plan
from nvfabric.simulate import build, parse, profile_spec

#: The console script operators run (next to this interpreter), else ``python -m nvfabric``.
_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]
LPF = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:SMDL=SW_MNG:MODL=C7010Z"
NIC = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"


def large_spec() -> dict[str, object]:
    mellanox = []
    for i in range(16):
        cap = "0xa751e84a" if i % 4 == 3 else "0xa751ec4a"
        mellanox.append({
            "ib_device": f"mlx5_{i}", "device_id": "1021",
            "vpd_vendor_field": LPF if i < 4 else NIC,
            "ports": [{"port": 1, "guid": f"0x0a0b0c0300d{i:05x}", "cap_mask": cap}],
        })
    return {"arch": "x86_64", "driver_version": "570.172.08",
            "modules": ["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"],
            "gpus": [{"device_id": "2901", "count": 8}], "mellanox": mellanox, "other_pci": 400}


def count_opens(root: str) -> int:
    """Files opened by one collect (os.open and builtins.open calls), counted in-process."""
    real_os_open, real_open = os.open, builtins.open
    count = [0]

    def counting_os_open(*args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += 1
        return real_os_open(*args, **kwargs)

    def counting_open(*args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += 1
        return real_open(*args, **kwargs)

    os.open, builtins.open = counting_os_open, counting_open  # type: ignore[assignment]
    try:
        collect(root)
    finally:
        os.open, builtins.open = real_os_open, real_open  # type: ignore[assignment]
    return count[0]


def shell_approach_ms(root: str, devices: list[str]) -> float | None:
    """The vendor script's way: `lspci -vvv` then `ibstat <dev>` for each IB device."""
    lspci, ibstat = shutil.which("lspci"), shutil.which("ibstat")
    if not (lspci and ibstat and shutil.which("unshare")):
        return None
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    script = (
        'mount --bind "$1/sys" /sys; r=$1; shift; '
        f'{lspci} -vvv -A linux-sysfs -O sysfs.path=$r/sys/bus/pci >/dev/null 2>&1; '
        f'for d in "$@"; do {ibstat} "$d" >/dev/null; done'
    )
    baseline = process_ms([*unshare, "sh", "-c", "true"], runs=10)
    total = process_ms([*unshare, "sh", "-c", script, "sh", root, *devices], runs=10)
    return total - baseline


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="nvfabric-bench-plan-")
    try:
        nodes = {"DGX B200 (simulated)": profile_spec("dgx-b200"),
                 "large synthetic (8 GPU, 4 LPF, 16 IB, 400 PCI)": parse(large_spec())}
        with open("/proc/loadavg", encoding="utf-8") as fh:
            line("load average (1, 5, 15 min)", " ".join(fh.read().split()[:3]))
        for label, spec in nodes.items():
            root = os.path.join(tmp, str(abs(hash(label))))
            build(spec, root)
            print(f"-- {label}")
            base, whole = interleaved_ms([[PY, "-c", "pass"],
                                          [*NVFABRIC, "plan", "--root", root, "--json"]], 20)
            line("  python3 -c pass (interleaved with the next)",
                 f"{statistics.median(base):.1f} ms (min {min(base):.1f})")
            line("  nvfabric plan --json, whole process (median)", startup_ratio(whole, base))
            inproc = median_ms(lambda r=root: plan(collect(r)), runs=200)
            line("  collect+plan in-process (median)", f"{inproc:.2f} ms (target < 5 ms)")
            line("  files opened by one collect", str(count_opens(root)))
            devices = [d.name for d in collect(root).infiniband]
            shell = shell_approach_ms(root, devices)
            if shell is None:
                line("  shell approach (lspci -vvv + ibstat per device)", "lspci/ibstat missing")
            else:
                line(f"  shell approach (lspci -vvv + {len(devices)} x ibstat)",
                     f"{shell:.1f} ms (namespace setup subtracted)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Triage of reports as the field sends them damaged or odd: blocks written twice, a report
cut inside a block, SR-IOV virtual functions beside the LPFs. Each report is the composed DGX
B200 report (tests/data/bugreports/dgx-b200-healthy.log.gz, the layout of
nvidia-bug-report.sh) with one block repeated, cut or extended as the field does it."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

from nvfabric.triage import triage_stream
from tests.conftest import REPO, run_cli

B200 = REPO / "tests" / "data" / "bugreports" / "dgx-b200-healthy.log.gz"
SEPARATOR = "\n" + "_" * 44 + "\n"


def blocks() -> list[str]:
    """The blocks of the DGX B200 report, split at the script's separator lines."""
    return gzip.decompress(B200.read_bytes()).decode().split(SEPARATOR)


def block_index(bl: list[str], header: str) -> int:
    """Index of the block whose first non-empty line is ``header``."""
    for i, b in enumerate(bl):
        if b.strip().splitlines() and b.strip().splitlines()[0] == header:
            return i
    raise AssertionError(f"no block {header!r} in {B200}")


def judged(bl: list[str], label: str = "edited") -> Any:
    return triage_stream(io.BytesIO(SEPARATOR.join(bl).encode()), label)


def codes(t: Any) -> list[str]:
    return [f.code for f in t.findings]


# --- a block written twice: the first one counts -----------------------------------------

def test_lspci_block_written_twice_counts_each_function_once(tmp_path: Path) -> None:
    bl = blocks()
    i = block_index(bl, "/usr/bin/lspci -nnDvvvxxxx")
    bl.insert(i + 1, bl[i])
    path = tmp_path / "twice.log"
    path.write_text(SEPARATOR.join(bl))
    proc = run_cli("triage", str(path), "--json")
    out = json.loads(proc.stdout)
    assert len(out["node"]["gpus"]) == 8
    assert out["node"]["summary"].startswith("B200 x8; 4 LPF(s);")
    assert out["verdict"] == "healthy"
    assert "gpu_missing_from_driver" not in [f["code"] for f in out["findings"]]
    assert proc.returncode == 0, proc.stdout
    assert any("repeat a PCI address" in r for r in out["reasons"])


def test_ibstat_written_twice_counts_each_device_once() -> None:
    bl = blocks()
    i = block_index(bl, "/usr/sbin/ibstat")
    bl.insert(i + 1, bl[i])
    t = judged(bl)
    names = [d.name for d in t.inventory.infiniband]
    assert names == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    pci = {d.name: d.pci for d in t.inventory.infiniband}
    assert pci == {"mlx5_0": "0000:05:00.0", "mlx5_1": "0000:06:00.0",
                   "mlx5_2": "0000:07:00.0", "mlx5_3": "0000:08:00.0"}
    assert not any("a guess" in r for r in t.reasons), t.reasons
    assert any("printed again" in r for r in t.reasons)
    assert t.plan.management_port is not None
    assert t.plan.management_port.guid == "0xe09d730300e400e8"

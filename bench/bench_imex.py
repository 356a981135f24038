"""Benchmark of the fleet check (issue "IMEX on GB200/GB300 trays").

Figures: `nvfabric domain check` over 1,296 `nvfabric status --json` reports (72 NVL72 racks x
18 GB200 trays, 4 GPUs each, with five planted faults), whole-process wall time (median)
against `python3 -c pass`, and its peak RSS; for a directory of 1,296 files and for one JSON
Lines file; and the in-process check alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import PY, line, median_ms, peak_rss_mb, process_ms  # noqa: E402

from nvfabric.rules.imex import domain as fleet

_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]
RACKS, TRAYS = 72, 18


def reports() -> list[dict[str, Any]]:
    """1,296 tray reports; planted: a GPU not attached (rack 3), a tray of another domain
    (rack 10), a clique split (rack 20), a 19-entry list (rack 30), a missing tray (rack 40,
    replaced by a tray reporting an error so that the count stays 1,296)."""
    out = []
    for rack in range(RACKS):
        uuid = f"{rack + 1:08x}-0000-4000-8000-{rack + 1:012x}"
        names = [f"gb-r{rack:02d}n{t:02d}" for t in range(TRAYS)]
        entries = names + (["gb-r31n00"] if rack == 30 else [])
        for t, name in enumerate(names):
            gpus = [{"index": i, "uuid": f"GPU-{rack:04d}{t:04d}-0000-0000-0000-00000000000{i}",
                     "state": "completed", "status": "success", "clique_id": 32766,
                     "cluster_uuid": uuid, "health_summary": "healthy"} for i in range(4)]
            if rack == 3 and t == 5:
                gpus[2].update(state="in_progress", cluster_uuid=None)
            if rack == 10 and t == 7:
                for g in gpus:
                    g["cluster_uuid"] = f"{12:08x}-0000-4000-8000-{12:012x}"
            if rack == 20 and t == 0:
                for g in gpus:
                    g["clique_id"] = 7
            if rack == 40 and t == 17:
                gpus = []
            out.append({"verdict": "healthy" if gpus else "unhealthy", "hostname": name,
                        "fabric": "mnnvl", "imex": {"node_list": entries}, "gpus": gpus,
                        "findings": []})
    return out


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="nvfabric-bench-imex-")
    try:
        data = reports()
        directory = os.path.join(tmp, "reports")
        os.makedirs(directory)
        for r in data:
            with open(os.path.join(directory, r["hostname"] + ".json"), "w",
                      encoding="utf-8") as fh:
                json.dump(r, fh, indent=2)
        jsonl = os.path.join(tmp, "all.jsonl")
        with open(jsonl, "w", encoding="utf-8") as fh:
            for r in data:
                fh.write(json.dumps(r) + "\n")
        size = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))
        print(f"-- {len(data)} reports ({RACKS} racks x {TRAYS} trays, 4 GPUs each), "
              f"{size / 1e6:.1f} MB as files")
        check = subprocess.run([*NVFABRIC, "domain", "check", directory, "--json"],
                               capture_output=True, text=True, check=False)
        result = json.loads(check.stdout)
        bad = sum(1 for d in result["domains"] if not d["ok"])
        line("domains found / with errors (expected 72 / 5) / exit code",
             f"{len(result['domains'])} / {bad} / {check.returncode}")
        py_pass = process_ms([PY, "-c", "pass"], runs=20)
        line("python3 -c pass (median)", f"{py_pass:.1f} ms")
        for label, target in (("directory of 1,296 files", directory),
                              ("one JSON Lines file", jsonl)):
            argv = [*NVFABRIC, "domain", "check", target, "--json"]
            whole = process_ms(argv, runs=10)
            line(f"nvfabric domain check ({label}), whole process",
                 f"{whole:.1f} ms = {whole / py_pass:.1f}x python -c pass")
            line(f"  peak RSS ({label})", f"{peak_rss_mb(argv):.1f} MiB")
        nodes = [fleet.node_from_status(r, r["hostname"]) for r in data]
        inproc = median_ms(lambda: fleet.check(nodes), runs=20)
        line("fleet check in-process (parsed reports -> findings)", f"{inproc:.1f} ms")
        parse = median_ms(lambda: [fleet.node_from_status(r, "x") for r in data], runs=20)
        line("report objects -> NodeReports in-process", f"{parse:.1f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

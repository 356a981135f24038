"""`nvfabric status --json` carries what `nvfabric domain check` needs to place a node."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli, run_json


def simulated(tmp_path: Path, profile: str, name: str) -> Path:
    """A node as `nvfabric simulate` writes it (tree, fakes and shipped configs)."""
    root = tmp_path / name
    proc = run_cli("simulate", profile, str(root))
    assert proc.returncode == 0, proc.stderr
    (root / "etc/hostname").write_text(name + "\n")
    return root


def test_gb200_status_names_host_addresses_and_node_list(tmp_path: Path) -> None:
    root = simulated(tmp_path, "gb200-tray", "gb-01")
    data, _ = run_json("status", "--root", str(root))
    assert data["hostname"] == "gb-01"
    assert "192.0.2.10" in data["addresses"]
    assert data["imex"]["node_list"] == ["192.0.2.10"]
    assert data["imex"]["node_list_id"].startswith("sha256:")


def test_hgx_status_names_the_host_but_carries_no_imex_section(tmp_path: Path) -> None:
    root = simulated(tmp_path, "dgx-b200", "b200-07")
    data, _ = run_json("status", "--root", str(root))
    assert data["hostname"] == "b200-07"
    assert "imex" not in data and "addresses" not in data


def test_domain_check_groups_status_reports_by_their_node_list(tmp_path: Path) -> None:
    reports = []
    for name in ("gb-01", "gb-02"):
        root = simulated(tmp_path, "gb200-tray", name)
        (root / "etc/nvidia-imex/nodes_config.cfg").write_text("gb-01\ngb-02\n")
        data, _ = run_json("status", "--root", str(root))
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        reports.append(str(path))
    proc = run_cli("domain", "check", "--domain-size", "2", *reports, "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, out
    (domain,) = out["domains"]
    assert sorted(domain["nodes"]) == ["gb-01", "gb-02"]

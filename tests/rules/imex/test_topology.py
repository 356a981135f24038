"""`nvfabric domain topology --format slurm`: Slurm's topology.conf (topology/block) from
status reports of GB200 trays in several NVLink domains: one block per ClusterUUID + CliqueId,
the nodes as a hostlist, a BlockSizes line; unregistered trays left out with a warning. The
written file is read back the way Slurm reads it (python-hostlist expands each Nodes= list)."""

from __future__ import annotations

import json
from pathlib import Path

import hostlist  # type: ignore[import-untyped]
import pytest

from nvfabric.rules.imex import topology
from tests.cli.test_domain_check import cluster_uuid, report, tray_name
from tests.conftest import run_cli, run_json


def fleet(tmp_path: Path, racks: int = 3, trays: int = 18) -> Path:
    """Reports of ``racks`` x ``trays`` trays as JSON Lines, tray 5 of rack 1 still
    registering and the last tray of rack 2 in another clique of its rack (a partition)."""
    lines = []
    for rack in range(racks):
        for tray in range(trays):
            r = report(rack, tray, [])
            if rack == 1 and tray == 5:
                r["gpus"][0].update(state="in_progress", status=None,
                                    cluster_uuid="00000000-0000-0000-0000-000000000000")
            if rack == 2 and tray == trays - 1:
                for g in r["gpus"]:
                    g["clique_id"] = 32767
            lines.append(json.dumps(r))
    path = tmp_path / "fleet.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def blocks_of(text: str) -> dict[str, list[str]]:
    out = {}
    for line in text.splitlines():
        if line.startswith("BlockName="):
            name, nodes = line.split()
            out[name.split("=", 1)[1]] = hostlist.expand_hostlist(nodes.split("=", 1)[1])
    return out


def test_one_block_per_nvlink_domain_with_the_unregistered_tray_left_out(
        tmp_path: Path) -> None:
    proc = run_cli("domain", "topology", "--format", "slurm", str(fleet(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    blocks = blocks_of(proc.stdout)
    assert blocks["block1"] == [tray_name(0, t) for t in range(18)]
    assert blocks["block2"] == [tray_name(1, t) for t in range(18) if t != 5]
    assert blocks["block3"] == [tray_name(2, t) for t in range(17)]
    assert blocks["block4"] == [tray_name(2, 17)]
    assert "BlockName=block1 Nodes=gb-r00n[00-17]" in proc.stdout
    assert f"# ClusterUUID {cluster_uuid(1)} CliqueId 32766" in proc.stdout
    # four blocks, the smallest of one node: BlockSizes 1,2,4 (Topograph's inference)
    assert proc.stdout.rstrip().endswith("BlockSizes=1,2,4")
    assert "domain_node_left_out" in proc.stderr and "gb-r01n05" in proc.stderr


def test_json_and_given_block_sizes_and_the_file_written(tmp_path: Path) -> None:
    out, rc = run_json("domain", "topology", str(fleet(tmp_path, racks=2)),
                       "--block-sizes", "16,32", "--output", str(tmp_path / "topology.conf"))
    assert rc == 0
    assert out["block_sizes"] == [16, 32]
    assert [b["hostlist"] for b in out["blocks"]] == ["gb-r00n[00-17]",
                                                      "gb-r01n[00-04,06-17]"]
    left = [f for f in out["findings"] if f["code"] == "domain_node_left_out"]
    assert left[0]["severity"] == "warning" and list(left[0]["nodes"]) == ["gb-r01n05"]
    assert (tmp_path / "topology.conf").read_text() == out["text"]


@pytest.mark.parametrize("sizes", ["16,24", "0", "x", "32,16"])
def test_block_sizes_slurm_refuses_are_refused(tmp_path: Path, sizes: str) -> None:
    out, rc = run_json("domain", "topology", str(fleet(tmp_path, racks=1)),
                       "--block-sizes", sizes)
    assert rc == 2 and out["error"]["code"] == "input_unreadable"


def test_no_registered_node_is_exit_1_and_no_file(tmp_path: Path) -> None:
    r = report(0, 0, [])
    for g in r["gpus"]:
        g.update(state="not_started", cluster_uuid=None)
    path = tmp_path / "one.json"
    path.write_text(json.dumps(r))
    out, rc = run_json("domain", "topology", str(path), "--output", str(tmp_path / "t.conf"))
    assert rc == 1 and out["blocks"] == [] and not (tmp_path / "t.conf").exists()
    assert [f["severity"] for f in out["findings"]] == ["warning", "error"]
    assert out["output"] is None  # nothing was written there
    proc = run_cli("domain", "topology", str(path), "--output", str(tmp_path / "t.conf"))
    assert proc.returncode == 1
    assert "nothing written to" in proc.stdout and "wrote" not in proc.stdout


def test_an_output_in_a_missing_directory_is_refused_and_nothing_made(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "topology.conf"
    out, rc = run_json("domain", "topology", str(fleet(tmp_path, racks=1)),
                       "--output", str(target))
    assert rc == 2 and "does not exist" in out["error"]["message"]
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(("counts", "sizes"), [
    ([18], (18,)), ([18, 18], (18, 36)), ([18, 17, 18], (17, 34)),
    ([8, 8, 8, 8], (8, 16, 32)), ([], ()),
])
def test_inferred_block_sizes(counts: list[int], sizes: tuple[int, ...]) -> None:
    assert topology.inferred_sizes(counts) == sizes
    assert not sizes or topology.check_sizes(sizes) is None

"""Issue 10: singular and plural in every count ("1 GPU", "1 node"), the one helper
(nvfabric.model.words) and the messages a one-GPU node and a one-node domain print."""

from __future__ import annotations

from pathlib import Path

from nvfabric.model.words import plural, plural_noun, verb
from tests.conftest import run_cli, run_json


def test_plural_rules() -> None:
    assert [plural(n, "GPU") for n in (0, 1, 2)] == ["0 GPUs", "1 GPU", "2 GPUs"]
    assert plural(1, "node list entry") == "1 node list entry"
    assert plural(3, "node list entry") == "3 node list entries"
    assert plural_noun("NVSwitch") == "NVSwitches" and plural_noun("process") == "processes"
    assert plural_noun("day") == "days" and plural(2, "ConnectX LPF") == "2 ConnectX LPFs"
    assert (verb(1, "is", "are"), verb(2, "is", "are")) == ("is", "are")


def test_a_one_gpu_node_says_1_gpu(tmp_path: Path) -> None:
    from tests.runkit import sim

    root = sim(tmp_path, {"arch": "x86_64", "driver_version": "550.90.07", "modules": ["nvidia"],
                 "gpus": [{"device_id": "2330", "count": 1}],
                 "nvswitches": {"device_id": "22a3", "count": 4}})
    out, rc = run_json("status", "--root", str(root))
    text = " ".join([f["message"] for f in out["findings"]] + out["reasons"])
    assert rc == 1 and "1 GPU cannot finish fabric registration" in text, text
    assert "1 of 1 GPU reports a fabric state" in text
    assert "1 GPUs" not in text and "GPU(s)" not in text
    human = run_cli("status", "--root", str(root))
    assert "1 GPUs" not in human.stdout and "(s)" not in human.stdout


def test_a_one_node_domain_says_1_node(tmp_path: Path) -> None:
    saved = tmp_path / "n.json"
    saved.write_text('{"nodes": {"0": {"status": "READY", "host": "192.0.2.10", '
                     '"connections": {}, "version": "580.30", "hostName": ""}}, '
                     '"timestamp": "5/22/2025 19:46:40.891", "status": "UP"}')
    proc = run_cli("imex", "domain", "--from-file", str(saved))
    assert proc.returncode == 0 and "(1 node, " in proc.stdout

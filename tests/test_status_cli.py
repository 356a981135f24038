"""`nvfabric status` and `nvfabric wait` through the real CLI: exit codes, JSON shape, bad
input, the live path on a simulated node with its own nvidia-smi."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.cases import CORPUS
from tests.conftest import run_cli, run_json

SMI = CORPUS / "nvidia-smi"


def test_xml_capture_of_an_8_gpu_b200_is_healthy() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-b200.xml"))
    assert (out["verdict"], rc, out["fabric"], out["fabric_source"]) == (
        "healthy", 0, "nvlink5", "inferred")
    assert len(out["gpus"]) == 8 and out["services"] is None
    assert out["driver_version"] == "580.105.08"


def test_fabric_option_overrides_the_inference() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-b200.xml"),
                       "--fabric", "mnnvl")
    assert (out["verdict"], rc) == ("unhealthy", 1)  # zero ClusterUUID on a tray
    assert "fabric_unhealthy" in {f["code"] for f in out["findings"]}


def test_capture_from_stdin() -> None:
    text = (SMI / "fabric-in-progress-580-wide-columns-gpuop2511.txt").read_text()
    out, rc = run_json("status", "--from-nvidia-smi", "-", stdin=text)
    assert (out["verdict"], rc) == ("pending", 1)


def test_human_output_names_the_verdict_and_the_gpus() -> None:
    proc = run_cli("status", "--from-nvidia-smi",
                   str(SMI / "fabric-insufficient-resources-azhpc506.txt"))
    assert proc.returncode == 1
    assert proc.stdout.startswith("unhealthy")
    assert "NVML_ERROR_INSUFFICIENT_RESOURCES" in proc.stdout
    assert "registration_error" in proc.stdout


def test_missing_file_is_exit_2_with_one_line(tmp_path: Path) -> None:
    proc = run_cli("status", "--from-nvidia-smi", str(tmp_path / "nope.txt"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "input_unreadable" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_non_fabric_capture_is_exit_2_naming_it() -> None:
    out, rc = run_json("status", "--from-nvidia-smi",
                       str(SMI / "h100-passthrough-vm-nvidia-smi-topo-matrix.txt"))
    assert rc == 2 and "topo --matrix" in out["error"]["message"]


def _fake_smi(root: Path, capture: Path) -> None:
    smi = root / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f"#!/bin/sh\ncat '{capture}'\n")
    smi.chmod(0o755)


def test_live_status_on_a_simulated_b200_without_services(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    _fake_smi(root, SMI / "k8s-test-infra-hw-qx-b200.xml")
    out, rc = run_json("status", "--root", str(root))
    assert (out["fabric"], out["fabric_source"]) == ("nvlink5", "plan")
    assert {s["name"] for s in out["services"]} == {"nvlsm", "fabricmanager"}
    assert (out["verdict"], rc) == ("degraded", 1)  # GPUs fine, FM and NVLSM not running
    assert {f["code"] for f in out["findings"]} == {"fm_inactive", "nvlsm_missing"}


def test_live_status_with_services_running(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    _fake_smi(root, SMI / "k8s-test-infra-hw-qx-b200.xml")
    run = root / "run" / "nvfabric"
    run.mkdir(parents=True)
    for name in ("nvlsm", "fabricmanager"):
        (run / f"{name}.pid").write_text(f"{os.getpid()}\n")
    out, rc = run_json("status", "--root", str(root))
    assert (out["verdict"], rc, out["findings"]) == ("healthy", 0, [])


def test_wait_times_out_with_the_findings(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    _fake_smi(root, SMI / "fabric-in-progress-580-wide-columns-gpuop2511.txt")
    out, rc = run_json("wait", "--root", str(root), "--timeout", "0.3", "--interval", "0.1")
    assert (rc, out["timed_out"]) == (1, True)
    assert "registration_stuck" in {f["code"] for f in out["findings"]}


def test_wait_returns_at_once_when_not_applicable(node: Callable[..., Path]) -> None:
    root = node("h100-pcie")
    _fake_smi(root, SMI / "rtx4090-8gpu-535.154.05-nvidia-smi-q.txt")
    out, rc = run_json("wait", "--root", str(root), "--timeout", "30")
    assert (rc, out["verdict"], out["timed_out"]) == (0, "not_applicable", False)

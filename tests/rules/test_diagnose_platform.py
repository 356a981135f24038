"""Severity follows the platform (D17): every signature whose meaning depends on the fabric kind
takes its severity from it, and every other signature says why it does not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.rules.catalogue import catalogue
from nvfabric.rules.diagnose import classify_lines
from tests.conftest import run_json

#: Signatures without ``by_fabric`` -> why their meaning is the same on every fabric kind.
PLATFORM_FREE = {
    "config-invalid-value": "the line names no daemon, so nothing says which platform needs it",
    "nvswitch-fatal": "fabric manager prints it only where it manages NVSwitches",
    "nvswitch-nonfatal": "fabric manager prints it only where it manages NVSwitches",
    "sxid-fatal": "the nvidia-nvswitch driver prints SXids only where NVSwitches are",
    "sxid-nonfatal": "the nvidia-nvswitch driver prints SXids only where NVSwitches are",
    "sxid-catalogue": "the nvidia-nvswitch driver prints SXids only where NVSwitches are",
    "fm-topology-mismatch": "fabric manager counts NVSwitches only where some are visible "
                            "(none visible is NV_WARN_NOTHING_TO_DO, which has by_fabric)",
    "fm-multicast-handle": "multicast teams exist only where fabric manager runs the NVSwitches",
    "fm-multicast-response-status": "multicast teams exist only where fabric manager runs "
                                    "the NVSwitches",
    "nccl-nvls-bind-fallback": "NCCL tries NVLS only where the GPUs report multicast support",
    "nccl-nvls-bind": "NCCL tries NVLS only where the GPUs report multicast support",
    "nccl-nvls-cuda-failure": "NCCL tries NVLS only where the GPUs report multicast support",
    "cuda-220-text": "an uncorrectable NVLink error is a fault on any NVLink, bridges included",
    "cuda-220-name": "an uncorrectable NVLink error is a fault on any NVLink, bridges included",
    "cuda-220-runtime-name": "an uncorrectable NVLink error is a fault on any NVLink",
    "cuda-220-number": "an uncorrectable NVLink error is a fault on any NVLink",
    "cuda-226-text": "a contained error stopped the program whatever the platform",
    "cuda-226-name": "a contained error stopped the program whatever the platform",
    "cuda-226-runtime-name": "a contained error stopped the program whatever the platform",
    "cuda-226-number": "a contained error stopped the program whatever the platform",
    "nccl-mnnvl-imex-channel": "NCCL runs its MNNVL self-test only on multi-node NVLink GPUs",
    "nccl-mnnvl-imex-domain": "NCCL runs its MNNVL self-test only on multi-node NVLink GPUs",
    "imex-memory-export": "a failed export is a failure of the job that asked for it",
    "imex-export-import": "a failed import is a failure of the job that asked for it",
    "imex-import-failure-status": "a failed import is a failure of the job that asked for it",
    "nvidia-smi-no-driver": "no driver is a fault on every platform",
    "xid-nvlink5-decoded": "a GPU's NVLink fault is a fault on every platform",
    "xid-nvlink-nonfatal": "a GPU's NVLink fault is a fault on every platform",
    "xid-nvlink": "a GPU's NVLink fault is a fault on every platform",
    "xid-45-after-nvlink": "a GPU's NVLink fault is a fault on every platform",
    "driver-nvlink-rxdetect": "link training fails the same on every platform",
}


def test_every_signature_follows_the_platform_or_says_why_not() -> None:
    blind = sorted(s.id for s in catalogue() if not s.by_fabric)
    assert blind == sorted(PLATFORM_FREE), "give the new signature by_fabric, or a reason here"
    assert all(reason.strip() for reason in PLATFORM_FREE.values())


FM_EXIT = ("systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, "
           "status=1/FAILURE")
FM_SCRIPT = ('nvidia-fabricmanager-start.sh[2101]: "/usr/bin/nv-fabricmanager -c '
             '/usr/share/nvidia/nvswitch/fabricmanager.cfg" failed! Exit code: 1')
NVLSM_EXIT = "systemd[1]: nvidia-nvlsm.service: Main process exited, code=exited, status=1/FAILURE"
IMEX_EXIT = "systemd[1]: nvidia-imex.service: Main process exited, code=exited, status=1/FAILURE"
FM_VERSION = ("fabric manager NVIDIA GPU driver interface version 580.126.09 don't match with "
              "driver version 580.126.20. Please update with matching NVIDIA driver package.")
FM_MODULE = 'Kernel module "ib_umad" has not been loaded, fabric manager cannot be started'
FM_OPTION = "Unknown option: /usr/share/nvidia/nvswitch/fabricmanager.cfg"
FM_CONFIG = "fabric manager config file item: FABRIC_NODE_CONFIG_FILE has an invalid value"
FM_TOPOLOGY = "[Jul 22 2026 10:00:00] [ERROR] [tid 12] failed to open fabric topology file"
NVSWITCH_CHECK = "nvidia-nvswitch: Version mismatch, kernel version 580.126.20 user version 580.95"
UMAD = ("nvlsm: ibwarn: [15] umad_init: can't read ABI version from "
        "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad module "
        "loaded?")
OPENSM = "OpenSM[3120]: Perhaps another instance of OpenSM is already running"
IMEX_IFACE = ("[Mar 21 2025 20:45:38] [ERROR] [tid 39] No matching network interface found for "
              "any IP addresses in the node configuration file")
IMEX_SESSION = "NV_ERR_IN_USE Failed to allocate Imex session"

ERR, INFO = "error", "info"
#: line -> severity on (none, nvswitch, nvlink5, mnnvl, unknown).
BY_PLATFORM = {
    FM_EXIT: (INFO, ERR, ERR, INFO, ERR),
    FM_SCRIPT: (INFO, ERR, ERR, INFO, ERR),
    NVLSM_EXIT: (INFO, INFO, ERR, INFO, ERR),
    IMEX_EXIT: (INFO, INFO, INFO, ERR, ERR),
    FM_VERSION: (INFO, ERR, ERR, INFO, ERR),
    FM_MODULE: (INFO, ERR, ERR, INFO, ERR),
    FM_OPTION: (INFO, ERR, ERR, INFO, ERR),
    FM_CONFIG: (INFO, ERR, ERR, INFO, ERR),
    FM_TOPOLOGY: (INFO, ERR, ERR, INFO, ERR),
    NVSWITCH_CHECK: (INFO, ERR, ERR, INFO, ERR),
    UMAD: (INFO, INFO, ERR, INFO, ERR),
    OPENSM: (INFO, INFO, ERR, INFO, ERR),
    IMEX_IFACE: (INFO, INFO, INFO, ERR, ERR),
    IMEX_SESSION: (INFO, INFO, INFO, ERR, ERR),
}
KINDS = ("none", "nvswitch", "nvlink5", "mnnvl", None)


@pytest.mark.parametrize(("line", "fabric", "severity"),
                         [(line, kind, sev) for line, sevs in BY_PLATFORM.items()
                          for kind, sev in zip(KINDS, sevs, strict=True)],
                         ids=lambda v: str(v)[:40])
def test_severity_follows_the_fabric_kind(line: str, fabric: str | None, severity: str) -> None:
    (f,) = classify_lines([line], fabric)  # type: ignore[arg-type]
    assert f.severity == severity
    assert f.hint
    if severity == INFO:
        assert "disable" in f.hint or "nvfabric does not manage" in f.hint


def test_the_imex_unit_exit_is_an_error_on_a_tray_and_info_elsewhere() -> None:
    (tray,) = classify_lines([IMEX_EXIT], "mnnvl")
    (hgx,) = classify_lines([IMEX_EXIT], "nvswitch")
    assert (tray.fields["unit"], tray.severity, hgx.severity) == ("nvidia-imex", ERR, INFO)


GB200_TRAY = {"arch": "aarch64", "driver_version": "580.126.20",
              "modules": ["nvidia", "mlx5_core", "mlx5_ib"],
              "gpus": [{"device_id": "2941", "count": 4}],
              "imex_channels": {"major": 234, "channels": [0]}}


def test_a_failing_fabric_manager_unit_on_a_gb200_tray_is_exit_0(
        tmp_path: Path, node: Callable[..., Path]) -> None:
    log = tmp_path / "journal.txt"
    log.write_text("\n".join([
        "May 20 10:02:11 t1 nvidia-fabricmanager-start.sh[2101]: Detected Pre-NVL5 system",
        "May 20 10:02:11 t1 nvidia-fabricmanager-start.sh[2104]: request to query NVSwitch "
        "device information from NVSwitch driver failed with error:WARNING Nothing to do "
        "[NV_WARN_NOTHING_TO_DO]",
        f"May 20 10:02:11 t1 {FM_SCRIPT}", f"May 20 10:02:11 t1 {FM_EXIT}"]) + "\n",
        encoding="utf-8")
    out, rc = run_json("doctor", "--root", str(node(GB200_TRAY)), "--log", str(log))
    assert (out["fabric"], rc) == ("mnnvl", 0)
    assert [(f["code"], f["severity"]) for f in out["findings"]] == [
        ("fm_not_applicable", INFO), ("service_exited", INFO), ("service_exited", INFO)]
    assert all("compute tray" in f["message"] for f in out["findings"])

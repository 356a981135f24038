"""The DaemonSet's own ``run`` arguments on a node its overlays select where no fabric service
applies. A DaemonSet pod restarts whatever its container's exit (restartPolicy Always, the only
one a DaemonSet allows), so a ``run`` that exits 0 with "nothing to start" is a pod in
CrashLoopBackOff. Such nodes are real: the nvswitch overlay selects by GPU product
(``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-H100-80GB-HBM3``), and the HGX 4-GPU baseboards of those
GPUs link them directly, without NVSwitch (plan ``none``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .runkit import Run, sim

REPO = Path(__file__).resolve().parents[1]
#: HGX A100 4-GPU: four SXM4 A100 80GB (PCI ID 10de:20b2), no NVSwitch.
HGX_A100_4GPU: dict[str, Any] = {
    "arch": "x86_64", "driver_version": "550.127.08", "modules": ["nvidia"],
    "gpus": [{"device_id": "20b2", "count": 4}],
}


def _daemonset_args() -> list[str]:
    ds = yaml.safe_load((REPO / "deploy/kubernetes/base/daemonset.yaml").read_text())
    (ctr,) = ds["spec"]["template"]["spec"]["containers"]
    args: list[str] = ctr["args"]
    assert args[:3] == ["run", "--root", "/"]
    return args[3:]


def test_daemonset_pod_stays_on_a_selected_node_with_nothing_to_start(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, HGX_A100_4GPU)
    run = start(root, *_daemonset_args())
    run.wait_line(r"fabric none: nothing to start")
    time.sleep(1.0)
    assert run.proc.poll() is None, "run exited: the DaemonSet pod would crash-loop\n" + run.log
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_daemonset_has_no_liveness_probe_that_could_restart_a_usable_fabric() -> None:
    # `nvfabric status` exits 1 on a degraded (still usable) fabric: as a livenessProbe it would
    # restart the container, so fabric manager, which on H100 and later needs a GPU reset
    # first (RUN.md R04). nvfabric run is PID 1: its own death already ends the container.
    ds = yaml.safe_load((REPO / "deploy/kubernetes/base/daemonset.yaml").read_text())
    (ctr,) = ds["spec"]["template"]["spec"]["containers"]
    assert "livenessProbe" not in ctr
    assert ctr["readinessProbe"]["exec"]["command"][-1] == "status"
    for overlay in (REPO / "deploy/kubernetes/overlays").iterdir():
        for part in overlay.glob("*.yaml"):
            assert "livenessProbe" not in part.read_text(), part

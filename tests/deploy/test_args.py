"""The DaemonSet's own ``run`` arguments on a node its overlays select where no fabric service
applies. A DaemonSet pod restarts whatever its container's exit (restartPolicy Always, the only
one a DaemonSet allows), so a ``run`` that exits 0 with "nothing to start" is a pod in
CrashLoopBackOff. Such nodes are real: the nvswitch overlay selects by GPU product
(``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-H100-80GB-HBM3``), and the HGX 4-GPU baseboards of those
GPUs link them directly, without NVSwitch (plan ``none``).

The args also serve the pod's probes (``--listen``): run here with the address swapped for a
free port on 127.0.0.1, the probe's path answers as the kubelet would be answered."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.cli.test_status_prometheus import series
from tests.httpkit import free_port, wait_status
from tests.runkit import Run, sim

REPO = Path(__file__).resolve().parents[2]
#: HGX A100 4-GPU: four SXM4 A100 80GB (PCI ID 10de:20b2), no NVSwitch.
HGX_A100_4GPU: dict[str, Any] = {
    "arch": "x86_64", "driver_version": "550.127.08", "modules": ["nvidia"],
    "gpus": [{"device_id": "20b2", "count": 4}],
}


def _container() -> dict[str, Any]:
    ds = yaml.safe_load((REPO / "deploy/kubernetes/base/daemonset.yaml").read_text())
    (ctr,) = ds["spec"]["template"]["spec"]["containers"]
    assert isinstance(ctr, dict)
    return ctr


def _daemonset_args(port: int) -> list[str]:
    """The DaemonSet's run arguments after ``--root /``, its ``--listen`` moved to
    127.0.0.1:``port`` (a test binds nothing else)."""
    args: list[str] = list(_container()["args"])
    assert args[:3] == ["run", "--root", "/"]
    at = args.index("--listen")
    assert args[at + 1] == "0.0.0.0:9464"
    args[at + 1] = f"127.0.0.1:{port}"
    return args[3:]


def _probe_path(probe: str) -> str:
    get = _container()[probe]["httpGet"]
    assert get["port"] == "metrics"
    path: str = get["path"]
    return path


def test_daemonset_pod_stays_on_a_selected_node_with_nothing_to_start(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, HGX_A100_4GPU)
    port = free_port()
    run = start(root, *_daemonset_args(port))
    run.wait_line(r"fabric none: nothing to start")
    time.sleep(1.0)
    assert run.proc.poll() is None, "run exited: the DaemonSet pod would crash-loop\n" + run.log
    # and it is Ready, not stuck before its startup probe (which would kill it after 600 s)
    for probe in ("startupProbe", "readinessProbe"):
        assert wait_status(port, _probe_path(probe), 200) == "ready\n"
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_daemonset_args_serve_its_probes_and_metrics_once_the_fabric_is_ready(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    """A DGX B200 (nvlink5) with the base args: the probe path is 200 once the unit is ready
    (NVLSM, fabric manager, GPUs registered), and the scrape annotations' path serves it."""
    root = sim(tmp_path, "dgx-b200")
    port = free_port()
    run = start(root, *_daemonset_args(port))
    run.wait_line(r"fabric ready in")
    assert wait_status(port, _probe_path("readinessProbe"), 200) == "ready\n"
    notes = yaml.safe_load((REPO / "deploy/kubernetes/base/daemonset.yaml").read_text())[
        "spec"]["template"]["metadata"]["annotations"]
    text = wait_status(port, notes["prometheus.io/path"], 200)
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 1.0}
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_daemonset_has_no_liveness_probe_that_could_restart_a_usable_fabric() -> None:
    # `nvfabric status` exits 1 on a degraded (still usable) fabric: as a livenessProbe it would
    # restart the container, so fabric manager, which on H100 and later needs a GPU reset
    # first (RUN.md R04). nvfabric run is PID 1: its own death already ends the container.
    ctr = _container()
    assert "livenessProbe" not in ctr
    assert _probe_path("readinessProbe") == "/readyz"
    for overlay in (REPO / "deploy/kubernetes/overlays").iterdir():
        for part in overlay.glob("*.yaml"):
            assert "livenessProbe" not in part.read_text(), part

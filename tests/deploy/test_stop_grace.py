"""The stop deadlines of the deploy targets against nvfabric's own stop: fabric manager, then
NVLSM, each given ``run --grace`` seconds before SIGKILL (supervisor, RUN.md R05), so a stop
takes up to two graces on NVLink 5 nodes. The platform's SIGKILL must not come first, or the
ordered stop is cut and fabric manager is killed mid-shutdown.

- Talos: an extension service is stopped by the containerd runner with SIGTERM, then SIGKILL
  after ``GracefulShutdownTimeout``, 10 s (siderolabs/talos
  internal/app/machined/pkg/system/runner/runner.go ``DefaultOptions``; services/extension.go
  sets no other value for extension services).
- Kubernetes: SIGKILL after the pod's ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nvfabric.cli.run import run_cmd

REPO = Path(__file__).resolve().parents[2]
TALOS_GRACEFUL_SHUTDOWN_S = 10.0  # runner.go DefaultOptions, see above
#: services stopped one after the other on the largest unit (nvlink5: fabric manager, NVLSM)
SERVICES_STOPPED_IN_TURN = 2


def _grace(args: list[str]) -> float:
    """The ``--grace`` of a ``run`` argument list, or run's own default."""
    for i, arg in enumerate(args):
        if arg == "--grace":
            return float(args[i + 1])
        if arg.startswith("--grace="):
            return float(arg.split("=", 1)[1])
    (param,) = [p for p in run_cmd.params if p.name == "grace"]
    assert isinstance(param.default, float)
    return param.default


def test_run_grace_default_is_what_this_test_reads() -> None:
    assert _grace(["run"]) == 10.0
    assert _grace(["run", "--grace", "3"]) == 3.0 and _grace(["run", "--grace=2.5"]) == 2.5


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_talos_service_stops_within_talos_graceful_shutdown_timeout(arch: str) -> None:
    spec = yaml.safe_load((REPO / f"deploy/talos/nvfabric-{arch}.yaml").read_text())
    args = spec["container"]["args"]
    assert args[0] == "run"
    bound = SERVICES_STOPPED_IN_TURN * _grace(args)
    assert bound < TALOS_GRACEFUL_SHUTDOWN_S - 1, (
        f"fabric manager then NVLSM may take {bound:g} s to stop; Talos SIGKILLs after "
        f"{TALOS_GRACEFUL_SHUTDOWN_S:g} s")


def test_kubernetes_grace_period_covers_the_ordered_stop() -> None:
    ds = yaml.safe_load((REPO / "deploy/kubernetes/base/daemonset.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    bound = SERVICES_STOPPED_IN_TURN * _grace(container["args"])
    assert pod["terminationGracePeriodSeconds"] > bound + 5

"""The cluster doors without an API server: ``status --npd`` on simulated nodes (the plugin
protocol of node-problem-detector), the options of publishing refused where they make no
sense (one line, exit 2), ``run --publish`` outside a cluster still bringing the fabric up,
the status object's view, and lightkube imported only when publishing. The writes themselves
are tested against a real API server: tests/integration/test_kube_publish.py."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.publish.view import view_of
from nvfabric.rules.cluster import labels
from tests import runkit
from tests.conftest import run_cli
from tests.runkit import Run, sim


def test_npd_on_a_b200_whose_services_never_ran_is_a_problem(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    out = run_cli("status", "--root", str(root), "--npd")
    assert out.returncode == 1, out.stderr
    (line,) = out.stdout.splitlines()
    assert line.startswith("RegistrationStuck: 8 GPUs cannot finish fabric registration")
    assert len(line) <= 80
    # the degraded condition is not the problem here: unhealthy is the other condition
    other = run_cli("status", "--root", str(root), "--npd", "--npd-condition",
                    "NVLinkFabricDegraded")
    assert other.returncode == 0 and other.stdout.startswith("FabricUnhealthy: ")


def test_npd_on_a_registered_gb200_tray_is_ok(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    out = run_cli("status", "--root", str(root), "--npd")
    assert (out.returncode, out.stdout) == (0, "FabricHealthy: the NVLink fabric is healthy "
                                            "(fabric mnnvl)\n")


def test_npd_unknown_while_gpus_register(tmp_path: Path) -> None:
    """A capture of GPUs still In Progress (no services known): Unknown, exit 3."""
    root = sim(tmp_path, "dgx-b200")
    gpus = json.loads((root / "var/lib/nvfabric-sim/gpus.json").read_text())
    for g in gpus["gpus"]:
        g["state"], g["status"] = "in_progress", None
    (root / "var/lib/nvfabric-sim/gpus.json").write_text(json.dumps(gpus))
    smi = run_cli("status", "--root", str(root), "--json")
    capture = tmp_path / "smi.csv"
    capture.write_text("index, uuid, pci.bus_id, fabric.state, fabric.status\n" + "".join(
        f"{g['index']}, {g['uuid']}, {g['pci']}, In Progress, N/A\n"
        for g in json.loads(smi.stdout)["gpus"]))
    out = run_cli("status", "--from-nvidia-smi", str(capture), "--fabric", "nvlink5", "--npd")
    assert out.returncode == 3, out.stdout + out.stderr
    assert out.stdout.startswith("FabricPending: ")


@pytest.mark.parametrize(("args", "says"), [
    (("--taint-unhealthy",), "--taint-unhealthy only apply with --publish"),
    (("--kubeconfig", "/x", "--node-name", "n"), "--kubeconfig, --node-name only apply"),
    (("--publish", "--node-name", "Node_1"), "--node-name 'Node_1': not a Kubernetes node"),
    (("--npd-condition", "NVLinkFabricDegraded"), "--npd-condition needs --npd"),
    (("--publish", "--node-name", "n1"), "--publish: not in a cluster"),
    (("--publish", "--node-name", "n1", "--kubeconfig", "/nonexistent/kc"),
     "--publish: cannot read /nonexistent/kc"),
])
def test_publishing_options_refused_with_one_line(tmp_path: Path, args: tuple[str, ...],
                                                  says: str) -> None:
    root = sim(tmp_path, "dgx-b200")
    env = {"KUBERNETES_SERVICE_HOST": "", "NODE_NAME": ""}
    out = run_cli("status", "--root", str(root), *args, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert says in line and "Traceback" not in out.stderr


def test_a_kubeconfig_that_is_no_kubeconfig_is_exit_2(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    bad = tmp_path / "kc"
    bad.write_text("- just\n- a list\n")
    out = run_cli("run", "--root", str(root), "--publish", "--node-name", "n1",
                  "--kubeconfig", str(bad))
    assert out.returncode == 2 and "not a kubeconfig" in out.stderr
    assert not (root / "var/lib/nvfabric-sim/nvlsm.json").exists()  # nothing was started


def test_run_publish_outside_a_cluster_brings_the_fabric_up_and_says_why_once(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    """Publishing never stops the fabric: no in-cluster configuration is one line, then
    back-off, while the unit comes up and is ready."""
    root = sim(tmp_path, "dgx-b200")
    run = start(root, "--publish", "--node-name", "n1",
                env={"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""})
    run.wait_line(r"fabric ready in")
    run.wait_line(r"kube publish: not in a cluster .* retrying with back-off")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert len([x for x in run.log.splitlines() if "kube publish:" in x]) == 1


def test_the_view_of_a_tray_status_object(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    status = json.loads(run_cli("status", "--root", str(root), "--json").stdout)
    view = view_of(status)
    assert (view.verdict, view.fabric, view.imex_owner) == ("healthy", "mnnvl", "none")
    assert labels(view)["nvfabric.io/clique"] == "1fa25eba-abfb-58b7-bfcd-4ac6101528a8.32766"
    # a damaged object is no reading, never a crash
    assert view_of({"verdict": "great", "findings": [{"code": "nope"}, 3]}).verdict is None


def test_lightkube_and_publishing_are_imported_only_when_publishing() -> None:
    code = ("import nvfabric.cli.run, nvfabric.cli.status, sys, json; "
            "print(json.dumps(sorted(sys.modules)))")
    loaded = set(json.loads(runkit.run([sys.executable, "-c", code], check=True)
                            .stdout.splitlines()[-1]))
    assert "nvfabric.cli.kube" in loaded
    assert not {m for m in loaded if m.startswith(("lightkube", "nvfabric.publish"))}

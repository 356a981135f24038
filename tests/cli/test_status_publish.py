"""``status --npd`` on simulated nodes (the plugin protocol of node-problem-detector) and the
options of publishing refused where they make no sense (one line, exit 2), without an API
server. The writes themselves are tested against a real API server:
tests/integration/test_kube_publish.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nvfabric.effects.runlock import acquire_run_lock, mark_publisher
from tests.conftest import run_cli
from tests.runkit import sim


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


@pytest.mark.parametrize(("forms", "says"), [
    (("--npd", "--json"), "--json and --npd both choose the output: give one"),
    (("--npd", "--prometheus"), "--prometheus and --npd both choose the output: give one"),
    (("--prometheus", "--json"), "--json and --prometheus both choose the output: give one"),
    (("--npd", "--npd-condition", "NVLinkFabricDegraded", "--prometheus", "--json"),
     "--json, --prometheus and --npd all choose the output: give one"),
])
def test_two_output_forms_are_refused_naming_both(tmp_path: Path, forms: tuple[str, ...],
                                                   says: str) -> None:
    """--npd answered its plain line and dropped --json (or --prometheus) without a word: a
    plugin wrapper that parses JSON got text. Two output forms are exit 2, one line naming
    them (under --json the error object), before a --textfile is written."""
    root = sim(tmp_path, "gb200-tray")
    prom = root / "var/lib/node_exporter/nvfabric.prom"
    prom.parent.mkdir(parents=True)
    out = run_cli("status", "--root", str(root), *forms, "--textfile",
                  "/var/lib/node_exporter/nvfabric.prom")
    assert out.returncode == 2, out.stdout + out.stderr
    if "--json" in forms:
        assert json.loads(out.stdout)["error"]["message"] == says
    else:
        (line,) = out.stderr.splitlines()
        assert out.stdout == "" and says in line
    assert not prom.exists()


def test_npd_with_a_textfile_answers_its_line_and_writes_the_metrics(tmp_path: Path) -> None:
    """--textfile is no output form: the plugin's one line and exit code stay, the metrics
    file is written beside them."""
    root = sim(tmp_path, "gb200-tray")
    prom = root / "var/lib/node_exporter/nvfabric.prom"
    prom.parent.mkdir(parents=True)
    out = run_cli("status", "--root", str(root), "--npd", "--textfile",
                  "/var/lib/node_exporter/nvfabric.prom")
    assert (out.returncode, out.stdout) == (0, "FabricHealthy: the NVLink fabric is healthy "
                                            "(fabric mnnvl)\n")
    assert "nvfabric_verdict" in prom.read_text()


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
    (("--taint-unhealthy",), "--taint-unhealthy only applies with --publish"),
    (("--kubeconfig", "/x", "--node-name", "n"), "--kubeconfig, --node-name only apply"),
    (("--publish", "--node-name", "Node_1"), "--node-name 'Node_1': not a Kubernetes node"),
    (("--publish", "--node-name", ""), "--node-name '': not a Kubernetes node"),
    # a node without a host name (a simulated one: no etc/hostname) says so, not ''
    (("--publish", "--kubeconfig", "/nonexistent/kc"), "no Node name: no host name under"),
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


def test_status_publish_beside_a_live_run_publish_writes_nothing(tmp_path: Path) -> None:
    """One writer per Node: while a live `run --publish` holds the run lock and its mark, a
    one-shot `status --publish` (cron, a prolog) would overwrite what the run saw and a reading
    cannot (a fatal SXid in the kernel log): it says so and writes nothing; once the run is
    gone it publishes again (here: a kubeconfig that cannot be used, exit 2)."""
    root = sim(tmp_path, "gb200-tray")
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig\n")
    args = ("status", "--root", str(root), "--publish", "--node-name", "gb-r01n05",
            "--kubeconfig", str(bad))
    state = str(root / "run/nvfabric")
    lock, holder = acquire_run_lock(state)
    assert lock is not None and holder is None
    try:
        mark_publisher(state, "gb-r01n05")
        out = run_cli(*args)
        assert out.returncode == 0, out.stderr  # the report's own exit: healthy tray
        assert (f"kube publish: not published: the live `nvfabric run --publish` (pid "
                f"{os.getpid()}) publishes Node gb-r01n05") in out.stderr
    finally:
        os.close(lock.fd)
    out = run_cli(*args)  # the run is gone: its mark is stale, status publishes itself
    assert out.returncode == 2 and "not published" not in out.stderr

"""``run --publish`` without an API server: a kubeconfig that cannot be used is exit 2 before
anything starts, and outside a cluster the fabric still comes up, the reason said once. The
writes themselves are tested against a real API server: tests/integration/test_kube_publish.py."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from tests.conftest import run_cli
from tests.runkit import Run, sim


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

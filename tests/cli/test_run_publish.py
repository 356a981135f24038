"""``run --publish`` without an API server: a kubeconfig that cannot be used is exit 2 before
anything is written or started (as a busy --listen port is), and outside a cluster the fabric
still comes up, the reason said once. The
writes themselves are tested against a real API server: tests/integration/test_kube_publish.py."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli, run_json
from tests.runkit import Run, codes, events, sim


def test_a_kubeconfig_that_is_no_kubeconfig_is_exit_2(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    bad = tmp_path / "kc"
    bad.write_text("- just\n- a list\n")
    out = run_cli("run", "--root", str(root), "--publish", "--node-name", "n1",
                  "--kubeconfig", str(bad))
    assert out.returncode == 2 and "not a kubeconfig" in out.stderr
    assert not (root / "var/lib/nvfabric-sim/nvlsm.json").exists()  # nothing was started


@pytest.mark.parametrize(("profile", "args"), [
    ("gb200-tray", ("--node-name", "n1")),
    ("dgx-b200", ("--node-name", "n1")),
    # no Node name (a simulated node has no etc/hostname): the typed file is checked all the same
    ("gb200-tray", ()),
    ("dgx-b200", ("--node-name", "n1", "--dry-run")),
])
def test_a_kubeconfig_that_cannot_be_read_is_exit_2_before_anything_is_written(
        tmp_path: Path, profile: str, args: tuple[str, ...]) -> None:
    """The kubeconfig was read after the run lock: exit 2, but <root>/run/nvfabric (mode 0700,
    run.lock) was made first. A usage error leaves the host as it was."""
    root = sim(tmp_path, profile)
    out = run_cli("run", "--root", str(root), "--publish", "--kubeconfig", "/nonexistent",
                  *args, env={"NODE_NAME": ""})
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.splitlines()
    assert "--publish: cannot read /nonexistent" in line
    assert not (root / "run").exists()
    assert not events(root, event="exec")


def test_a_busy_listen_port_is_exit_2_before_anything_is_written(tmp_path: Path) -> None:
    """--listen's port is bound before the state directory and the lock are made."""
    root = sim(tmp_path, "gb200-tray")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        out = run_cli("run", "--root", str(root), "--listen",
                      f"127.0.0.1:{busy.getsockname()[1]}")
    assert out.returncode == 2 and "cannot listen: Address already in use" in out.stderr
    assert not (root / "run").exists()
    assert not events(root, event="exec")


def test_a_second_run_on_the_port_of_the_first_is_already_running(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    """The port is bound after the lock is asked (read only): a second run with the same
    --listen is refused as already_running (exit 1), not as a busy port."""
    root = sim(tmp_path, "gb200-tray")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = start(root, "--listen", f"127.0.0.1:{port}")
    first.wait_line(r"nvfabric: fabric ready in")
    out, rc = run_json("run", "--root", str(root), "--listen", f"127.0.0.1:{port}")
    assert (rc, out["result"], codes(out)) == (1, "refused", ["already_running"])
    first.signal(signal.SIGTERM)
    assert first.wait() == 0


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

"""Issue 10: ``--restart on-failure`` does not retry forever. A restart that would fail its
preflight (the binary removed mid-run, fabric manager replaced by another version) ends the
run with that finding; a crash loop ends at the restart limit (like systemd's
StartLimitBurst). Real ``nvfabric run`` processes against simulated DGX A100 nodes (no GPU
reset needed before a restart)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from nvfabric.simulate.fakes import set_faults
from tests.runkit import Run, codes, crash, events, finding, sim


def test_binary_removed_mid_run_stops_the_restart_loop(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-a100", {"fabricmanager": {"crash_on_sigusr1": True}})
    run = start(root, "--json", "--restart", "on-failure", "--restart-delay", "0.05")
    run.wait_line(r"fabric ready in")
    os.unlink(root / "bin/nv-fabricmanager")  # the package was removed under the run
    crash(root, "fabricmanager")  # then it crashed
    assert run.wait() == 1
    result = run.result()
    assert codes(result)[:2] == ["service_exited", "binary_missing"]
    assert "no longer installed" in finding(result, "binary_missing")["message"]
    assert result["restarts"] == 0 and len(events(root, "fabricmanager", "exec")) == 1


def test_fabric_manager_replaced_by_another_version_stops_the_restart_loop(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-a100", {"fabricmanager": {"crash_on_sigusr1": True}})
    run = start(root, "--json", "--restart", "on-failure", "--restart-delay", "0.05")
    run.wait_line(r"fabric ready in")
    set_faults(str(root), {"fabricmanager": {"version": "570.133.20"}})  # an upgrade
    crash(root, "fabricmanager")  # then the running one crashed
    assert run.wait() == 1
    result = run.result()
    f = finding(result, "version_mismatch")
    assert f["fm_version"] == "570.133.20"
    assert result["restarts"] == 0 and len(events(root, "fabricmanager", "exec")) == 1


def test_a_crash_loop_ends_at_the_restart_limit(tmp_path: Path,
                                                start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-a100", {"fabricmanager": {"crash_after_s": 0.1, "exit_code": 3}})
    run = start(root, "--json", "--restart", "on-failure", "--restart-delay", "0.05",
                "--restart-max-delay", "0.05", "--restart-limit-burst", "3",
                "--restart-limit-interval", "120")
    assert run.wait() == 1
    result = run.result()
    assert codes(result)[-2:] == ["service_exited", "restart_limit"]
    limit = finding(result, "restart_limit")
    assert (limit["starts"], limit["burst"], limit["interval_s"]) == (3, 3, 120.0)
    assert result["restarts"] == 2 and len(events(root, "fabricmanager", "exec")) == 3
    assert "restart_limit: the unit was started 3 times within 120 s" in run.log


def test_the_restart_limit_has_documented_defaults() -> None:
    from tests.conftest import run_cli

    help_text = " ".join(run_cli("run", "--help").stdout.split())
    assert "--restart-limit-burst INTEGER RANGE" in help_text
    assert "StartLimitBurst; 0: no limit). [default: 5; x>=0]" in help_text
    assert "restart limit's window. [default: 300.0; x>=0.0]" in help_text

"""Options of a part of the bring-up that the node's fabric does not run (fabric manager or NVLSM
options on a GB200 tray, IMEX options on a DGX B200, any of them on a PCIe node): one unit file
serves a mixed fleet, so they are not refused, but each run says they are ignored
(``option_not_for_fabric``, warning) in its human output and in ``--json``. Only options the
operator typed count, never defaults."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.app.run import OPTIONS_BY_PART, options_not_for
from nvfabric.cli.run import run_cmd
from tests.conftest import run_cli, run_json
from tests.runkit import Run, codes, finding, sim


@pytest.mark.parametrize(("fabric", "typed", "said"), [
    ("mnnvl", {"fm_sets", "fabric_mode"}, [["--fm-set", "--fabric-mode"]]),
    ("mnnvl", {"nvlsm_bin", "fm_sm_socket", "imex_owner"}, [["--nvlsm-bin", "--fm-sm-socket"]]),
    ("nvswitch", {"fm_sets", "socket_timeout", "imex_peers"}, [["--socket-timeout"],
                                                               ["--imex-peers"]]),
    ("nvlink5", {"fm_sets", "nvlsm_bin", "imex_ctl_timeout"}, [["--imex-ctl-timeout"]]),
    ("none", {"gpu_reset_command", "imex_owner"}, [["--gpu-reset-command"], ["--imex-owner"]]),
    ("mnnvl", {"state_dir", "grace", "ready_timeout", "imex_bin"}, []),
])
def test_the_options_said_are_those_of_a_part_the_fabric_does_not_run(
        fabric: str, typed: set[str], said: list[list[str]]) -> None:
    got = options_not_for(frozenset(typed), fabric)
    assert [f.fields["options"] for f in got] == said
    assert {(f.code, f.severity, f.fields["fabric"]) for f in got} <= {
        ("option_not_for_fabric", "warning", fabric)}


def test_every_option_of_a_part_is_an_option_of_run() -> None:
    """The table names run's options by click's parameter names and spells them as --help."""
    params = {p.name: p.opts for p in run_cmd.params}
    for _, _, options in OPTIONS_BY_PART:
        for name, option in options.items():
            assert option in params[name]


def test_fm_set_on_a_gb200_tray_dry_run_is_said_and_ignored(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    out, rc = run_json("run", "--root", str(root), "--dry-run", "--fm-set", "FABRIC_MODE=1")
    assert (rc, out["result"]) == (0, "would_start")
    f = finding(out, "option_not_for_fabric")
    assert (f["severity"], f["options"], f["fabric"]) == ("warning", ["--fm-set"], "mnnvl")
    assert "does not apply to fabric mnnvl" in f["message"] and "ignored" in f["message"]
    assert [p["service"] for p in out["processes"]] == ["imex"]  # the bring-up is unchanged
    text = run_cli("run", "--root", str(root), "--dry-run", "--fm-set", "FABRIC_MODE=1")
    assert text.returncode == 0
    assert "option_not_for_fabric: --fm-set does not apply to fabric mnnvl" in text.stderr


@pytest.mark.parametrize("profile", ["gb200-tray", "a40-bridge", "hgx-h100", "dgx-b200"])
def test_a_malformed_fm_set_is_exit_2_on_every_fabric(tmp_path: Path, profile: str) -> None:
    # a unit shared by a mixed fleet fails on every node it is wrong for: it was exit 2 on
    # fabric manager's nodes and a warning only on a tray or a node with nothing to run
    root = sim(tmp_path, profile)
    out, rc = run_json("run", "--root", str(root), "--dry-run", "--fm-set", "FOO")
    assert rc == 2 and out["error"]["code"] == "config_invalid_value", out
    assert "--fm-set expects KEY=VALUE, got 'FOO'" in out["error"]["message"]


def test_imex_options_on_a_dgx_b200_dry_run_are_said(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    out, rc = run_json("run", "--root", str(root), "--dry-run", "--imex-owner", "host",
                       "--imex-ctl-timeout", "3", "--fm-set", "FABRIC_MODE=0")
    assert (rc, out["result"]) == (0, "would_start")
    f = finding(out, "option_not_for_fabric")
    assert f["options"] == ["--imex-owner", "--imex-ctl-timeout"] and f["part"] == "IMEX"
    assert codes(out).count("option_not_for_fabric") == 1  # --fm-set applies here


def test_defaults_are_not_said(tmp_path: Path) -> None:
    """A unit without fabric options, and one naming only options of its own fabric, say
    nothing: the defaults of the other parts are not the operator's."""
    tray = sim(tmp_path, "gb200-tray")
    out, _ = run_json("run", "--root", str(tray), "--dry-run", "--imex-ctl-timeout", "3")
    assert "option_not_for_fabric" not in codes(out)
    b200 = sim(tmp_path, "dgx-b200", name="b200")
    out, _ = run_json("run", "--root", str(b200), "--dry-run", "--nvlsm-pid-file",
                      "/var/run/nvlsm.pid")
    assert "option_not_for_fabric" not in codes(out)


def test_a_node_with_nothing_to_run_says_every_fabric_option(tmp_path: Path) -> None:
    root = sim(tmp_path, "h100-pcie")
    out, rc = run_json("run", "--root", str(root), "--fm-set", "FABRIC_MODE=1",
                       "--imex-owner", "none")
    assert (rc, out["result"]) == (0, "nothing_to_do")
    assert [f["part"] for f in out["findings"] if f["code"] == "option_not_for_fabric"] == [
        "fabric manager", "IMEX"]
    text = run_cli("run", "--root", str(root), "--fm-set", "FABRIC_MODE=1")
    assert text.returncode == 0
    assert "warning option_not_for_fabric: --fm-set does not apply to fabric none" in text.stderr


def test_imex_owned_elsewhere_says_it_too(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    out, rc = run_json("run", "--root", str(root), "--imex-owner", "none", "--fabric-mode", "1")
    assert (rc, out["result"]) == (0, "not_started")
    assert finding(out, "option_not_for_fabric")["options"] == ["--fabric-mode"]


def test_a_tray_run_logs_it_and_its_end_object_lists_it(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "gb200-tray")
    run = start(root, "--json", "--fm-set", "FABRIC_MODE=1")
    run.wait_line(r"warning option_not_for_fabric: --fm-set does not apply to fabric mnnvl")
    run.wait_line(r"nvfabric: fabric ready in")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    out = run.result()
    assert out["result"] == "stopped"
    assert finding(out, "option_not_for_fabric")["options"] == ["--fm-set"]

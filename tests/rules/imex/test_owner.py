"""IMEX ownership: detection on simulated GB200 trays (DRA plugin state, host unit wants/
links and masks, Slurm prolog and switch plugin) and the conflict rule with its exact fix."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.facts.imex import tray as host
from nvfabric.rules.imex.owner import DraMode, OwnerEvidence, RunFacts, decide
from nvfabric.rules.imex.script import Actions
from nvfabric.rules.imex.slurm import Script, SlurmFacts
from nvfabric.rules.imex.tables import DRA_HOST_UNIT_FIX
from tests.conftest import run_cli, run_json

DRA_DIR = "var/lib/kubelet/plugins/compute-domain.nvidia.com"
UNIT_PROLOG = SlurmFacts(scripts=(Script("Prolog", ("p",), Actions(unit_verbs=("restart",))),))
OWN_PROLOG = SlurmFacts(scripts=(Script("Prolog", ("p",), Actions(daemon=True)),))
DRA_HOST = DraMode("hostManaged", "/etc/nvidia-imex/imex_ctrl.sock", "plugin")
DRA_DRIVER = DraMode("driverManaged", "/etc/nvidia-imex/imex_ctrl.sock", "plugin")
RUN = RunFacts(4242, "/run/nvfabric", 11, True, "host")
SLURM_RUN = RunFacts(4243, "/run/nvfabric-slurm", 12, True, "host", slurm=True)
WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-imex.service"


def add_dra(root: Path, domains: int = 1) -> None:
    base = root / DRA_DIR
    base.mkdir(parents=True)
    (base / "checkpoint.json").write_text('{"checksum": 0}\n')
    for i in range(domains):
        (base / "domains" / f"uid-{i}").mkdir(parents=True)


def enable_unit(root: Path) -> None:
    link = root / WANTS
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("/usr/lib/systemd/system/nvidia-imex.service", link)


def mask_unit(root: Path) -> None:
    link = root / "etc/systemd/system/nvidia-imex.service"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/null", link)


def add_slurm_prolog(root: Path, body: str) -> None:
    conf = root / "etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("ClusterName=gb\n# Prolog=/nowhere\nProlog=/etc/slurm/prolog.d/*\n")
    script = root / "etc/slurm/prolog.d/90-imex.sh"
    script.parent.mkdir(parents=True)
    script.write_text(body)


@pytest.fixture
def tray(node: Callable[..., Path]) -> Path:
    return node("gb200-tray")


def test_bare_tray_has_no_owner(tray: Path) -> None:
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], rc, out["conflict"]) == ("none", 0, None)


def test_enabled_host_unit_makes_the_host_the_owner(tray: Path) -> None:
    enable_unit(tray)
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], out["runner"], rc) == ("host", "unit", 0)
    assert any(WANTS.split("etc", 1)[1] in e for e in out["evidence"])


def test_masked_unit_is_not_an_owner(tray: Path) -> None:
    enable_unit(tray)
    mask_unit(tray)
    ev = host.gather_evidence(str(tray))
    assert ev.unit_enabled
    assert ev.unit_masked == "/etc/systemd/system/nvidia-imex.service -> /dev/null"
    assert decide(ev).owner == "none"


def test_dra_plugin_state_makes_dra_the_owner(tray: Path) -> None:
    add_dra(tray, domains=2)
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], rc) == ("dra", 0)
    assert "2 ComputeDomains" in out["evidence"][0]


def test_dra_with_enabled_host_unit_is_a_conflict_with_the_exact_fix(tray: Path) -> None:
    add_dra(tray)
    enable_unit(tray)
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert rc == 1
    assert out["owner"] == "dra"
    codes = [f["code"] for f in out["findings"]]
    assert codes == ["imex_owner_conflict"]
    assert DRA_HOST_UNIT_FIX in out["findings"][0]["hint"]
    assert "NV_ERR_IN_USE" in out["findings"][0]["message"]


def test_dra_with_masked_host_unit_is_fine(tray: Path) -> None:
    add_dra(tray)
    enable_unit(tray)
    mask_unit(tray)
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], rc, out["conflict"]) == ("dra", 0, None)


def test_slurm_prolog_that_restarts_imex_makes_slurm_the_owner(tray: Path) -> None:
    add_slurm_prolog(tray, "#!/bin/bash\nnvfabric imex config --peers-slurm "
                           '"$SLURM_JOB_NODELIST"\nsystemctl restart nvidia-imex\n')
    enable_unit(tray)  # the AWS ParallelCluster way: the prolog drives the host unit
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], rc) == ("slurm", 0)
    assert any("90-imex.sh" in e for e in out["evidence"])


def test_slurm_prolog_without_imex_is_not_evidence(tray: Path) -> None:
    add_slurm_prolog(tray, "#!/bin/bash\necho hello\n")
    slurm = host.gather_evidence(str(tray)).slurm
    assert (slurm.conf, slurm.scripts) == ("/etc/slurm/slurm.conf", ())


def test_slurm_switch_plugin_owns_the_channels_not_the_daemon(tray: Path) -> None:
    conf = tray / "etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("switchtype=switch/nvidia_imex\n")
    assert host.gather_evidence(str(tray)).slurm.switch == (
        "/etc/slurm/slurm.conf:1: switchtype=switch/nvidia_imex")
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], out["channel_owner"], rc) == ("none", "slurm", 0)


def test_requested_host_on_a_dra_node_is_a_conflict(tray: Path) -> None:
    add_dra(tray)
    out, rc = run_json("imex", "owner", "--root", str(tray), "--imex-owner", "host")
    assert rc == 1
    assert out["findings"][0]["code"] == "imex_owner_conflict"
    assert "--imex-owner dra" in out["findings"][0]["hint"]


@pytest.mark.parametrize(
    ("evidence", "requested", "for_run", "owner", "runner", "conflict"),
    [
        (OwnerEvidence(), None, True, "host", "nvfabric", False),
        (OwnerEvidence(), None, False, "none", None, False),
        (OwnerEvidence(unit_enabled=("w",)), None, True, "host", "unit", False),
        (OwnerEvidence(unit_enabled=("w",)), "host", True, "host", "nvfabric", True),
        (OwnerEvidence(dra=("d",)), None, True, "dra", None, False),
        (OwnerEvidence(dra=("d",), unit_enabled=("w",)), None, True, "dra", None, True),
        (OwnerEvidence(dra=("d",), unit_enabled=("w",)), "slurm", True, "slurm", None, True),
        (OwnerEvidence(slurm=UNIT_PROLOG, unit_enabled=("w",)), None, True, "slurm", "unit",
         False),
        (OwnerEvidence(slurm=OWN_PROLOG, unit_enabled=("w",)), None, False, "slurm", "prolog",
         True),
        (OwnerEvidence(slurm=OWN_PROLOG, unit_enabled=("w",), unit_masked="m"), None, False,
         "slurm", "prolog", False),
        (OwnerEvidence(dra=("d",), dra_mode=DRA_HOST), None, True, "dra-host", "nvfabric",
         False),
        (OwnerEvidence(dra=("d",), dra_mode=DRA_HOST, unit_enabled=("w",)), None, True,
         "dra-host", "unit", False),
        (OwnerEvidence(dra=("d",), dra_mode=DRA_DRIVER), "dra-host", True, "dra-host",
         "nvfabric", True),
        (OwnerEvidence(dra=("d",)), "dra-host", True, "dra-host", "nvfabric", False),
        (OwnerEvidence(run=RUN), None, False, "nvfabric", "nvfabric", False),
        (OwnerEvidence(run=RUN), None, True, "nvfabric", "nvfabric", True),
        (OwnerEvidence(run=RUN, dra=("d",)), None, False, "nvfabric", "nvfabric", True),
        (OwnerEvidence(run=RUN, slurm=UNIT_PROLOG), None, False, "nvfabric", "nvfabric", True),
        (OwnerEvidence(run=RUN, daemons=(11, 12)), None, False, "nvfabric", "nvfabric", True),
        (OwnerEvidence(run=RUN, daemons=(11,)), None, False, "nvfabric", "nvfabric", False),
        (OwnerEvidence(run=SLURM_RUN, slurm=OWN_PROLOG), None, False, "slurm", "prolog",
         False),
        (OwnerEvidence(dra=("d",)), "none", True, "none", None, False),
        (OwnerEvidence(unit_enabled=("w",), unit_masked="m"), "host", True, "host", "nvfabric",
         False),
    ],
)
def test_owner_decision_table(evidence: OwnerEvidence, requested: str | None, for_run: bool,
                              owner: str, runner: str | None, conflict: bool) -> None:
    d = decide(evidence, requested, for_run)
    assert (d.owner, d.runner, d.conflict is not None) == (owner, runner, conflict)
    assert d.nvfabric_starts_imex == (runner == "nvfabric" and not conflict
                                      and owner != "nvfabric")


# A live run started as `--imex-owner dra-host` (before it is ready, too): status and `imex
# owner` answer what run decided: channels per claim (no host channel0 needed), its socket.
@pytest.mark.parametrize(("run", "channels", "required", "socket"), [
    (RUN, "nvfabric", (0,), None),
    (RunFacts(4242, "/run/nvfabric", 11, True, "dra-host", socket="/var/run/imex.sock"),
     "dra", (), "/var/run/imex.sock"),
    (RunFacts(4242, "/run/nvfabric", 11, False, "dra-host", socket="/var/run/imex.sock"),
     "dra", (), "/var/run/imex.sock"),
    (RunFacts(4242, "/run/nvfabric", 11, True, "dra-host"), "dra", (),
     "/etc/nvidia-imex/imex_ctrl.sock"),
])
def test_a_live_run_answers_for_the_owner_it_serves(run: RunFacts, channels: str,
                                                     required: tuple[int, ...],
                                                     socket: str | None) -> None:
    d = decide(OwnerEvidence(run=run, daemons=(11,)))
    assert (d.owner, d.runner, d.conflict) == ("nvfabric", "nvfabric", None)
    assert (d.channels, d.required_channels, d.socket) == (channels, required, socket)
    # the DRA plugin seen beside a run serving its host-managed mode is not a second owner
    beside = decide(OwnerEvidence(run=run, daemons=(11,), dra_mode=DRA_HOST))
    assert (beside.conflict is None) == (run.serves == "dra-host")


def test_unknown_owner_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown IMEX owner"):
        decide(OwnerEvidence(), "kubelet")


def test_owner_evidence_is_printed_literally(tray: Path) -> None:
    # Tester report 1/14: values read from the node reach the terminal through safe():
    # markup shown as written, escape sequences as \x1b.
    link = tray / "etc/systemd/system/[bold]x\x1b[2J.target.wants/nvidia-imex.service"
    link.parent.mkdir(parents=True)
    os.symlink("/usr/lib/systemd/system/nvidia-imex.service", link)
    proc = run_cli("imex", "owner", "--root", str(tray))
    assert proc.returncode == 0, proc.stderr
    assert "/etc/systemd/system/[bold]x\\x1b[2J.target.wants" in proc.stdout
    assert "\x1b" not in proc.stdout


# `imex owner|channel|domain|config --root /nonexistent` reported on an empty node (exit 0/1)
# where detect/plan/status refuse the root (exit 2).
@pytest.mark.parametrize("sub", [["owner"], ["channel"], ["domain"],
                                 ["config", "--peer", "198.51.100.1"]])
def test_imex_subcommands_refuse_a_missing_root_with_exit_2(sub: list[str],
                                                            tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    out, rc = run_json("imex", *sub, "--root", missing)
    assert rc == 2
    assert out["error"]["code"] == "input_unreadable"
    assert "is not a readable directory" in out["error"]["message"]
    proc = run_cli("imex", *sub, "--root", missing)
    assert proc.returncode == 2 and "is not a readable directory" in proc.stderr

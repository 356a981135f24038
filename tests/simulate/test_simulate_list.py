"""`nvfabric simulate --list` says which product each built-in profile is, and what it holds by
the product table's names (GPUs, NVSwitches, ConnectX LPFs and NICs, SM-disabled LPF ports)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvfabric.simulate import PROFILES, profile_spec
from nvfabric.simulate.profiles import PLATFORMS, describe
from tests.conftest import run_cli, run_json


def test_every_profile_names_its_product() -> None:
    assert set(PLATFORMS) == set(PROFILES)


def test_list_prints_each_profile_with_its_product() -> None:
    proc = run_cli("simulate", "--list")
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines())
    assert sorted(lines) == sorted(PROFILES)
    assert lines["dgx-b200"] == "DGX B200 (8x B200, 4 ConnectX-7 LPF)"
    assert lines["dgx-a100"] == "DGX A100 (8x A100-SXM4-80GB, 6 NVSwitch gen 2)"
    assert lines["gb200-tray"] == (
        "GB200 NVL72 compute tray (4x GB200, 4 ConnectX-7 NIC, IMEX channel0)")
    assert lines["no-gpu"] == "server without a GPU (no NVIDIA device)"
    # the names line up in one column
    assert len({line.index(lines[name]) for name, line in
                zip(sorted(PROFILES), proc.stdout.splitlines(), strict=True)}) == 1


def test_b200_with_sm_disabled_lpf_ports_says_how_many() -> None:
    text = describe("hgx-b200-4lpf", profile_spec("hgx-b200-4lpf"))
    assert text == ("HGX B200 8-GPU (8x B200, 4 ConnectX-7 LPF, 1 ConnectX-7 NIC, "
                    "3 LPF ports SM-disabled)")


def test_list_json_keeps_the_profiles_and_adds_the_products() -> None:
    out, rc = run_json("simulate", "--list")
    assert rc == 0
    assert out["profiles"] == sorted(PROFILES)
    assert out["products"]["hgx-h100"] == (
        "HGX H100 8-GPU (8x H100 80GB HBM3, 4 NVSwitch gen 3, 8 ConnectX-7 NIC)")


@pytest.mark.parametrize(("extra", "named"), [
    (("extra", "junk"), "'extra', 'junk'"),
    (("gb200-tray",), "'gb200-tray'"),
    (("--driver-only",), "--driver-only"),
    (("--spec", "node.yaml", "dir"), "'dir', --spec"),
    (("--from-bug-report", "nvidia-bug-report.log.gz"), "--from-bug-report"),
])
def test_list_refuses_what_it_does_not_take_in_one_line(
        tmp_path: Path, extra: tuple[str, ...], named: str) -> None:
    """`--list` builds nothing, so a PROFILE, DIR or an option of building beside it was
    dropped without a word (exit 0): it is a usage error naming them, and nothing is made."""
    proc = run_cli("simulate", "--list", *extra, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert f"--list takes no argument and no option but --json: got {named}" in line
    assert list(tmp_path.iterdir()) == []
    out, rc = run_json("simulate", "--list", *extra, cwd=tmp_path)
    assert rc == 2 and named in out["error"]["message"]

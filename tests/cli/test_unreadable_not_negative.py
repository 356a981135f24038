"""Unreadable is not negative: a VPD that cannot be read is "unreadable", never "no
SMDL=SW_MNG, ordinary NIC"; the management port is never chosen around an unreadable candidate
without a finding; a driver version file that cannot be read is not "driver not loaded".
Simulated DGX B200 trees (four LPFs, mlx5_0..3) with one part made unreadable as a node
shows it: a VPD image cut short (a device that answers EIO part-way), a vpd attribute that is
not a readable file, a version file that is not readable."""

from __future__ import annotations

import os
from pathlib import Path

from nvfabric.facts.inventory import collect
from nvfabric.facts.vpd import decode, encode
from nvfabric.model.inventory import IbDevice, IbPort
from nvfabric.rules.plan import plan
from tests.conftest import run_cli, run_json
from tests.rules.test_plan import cx7, gpu, inventory, port
from tests.runkit import sim

LPF0 = "sys/bus/pci/devices/0000:05:00.0/vpd"


def _unreadable_attribute(path: Path) -> None:
    """An attribute there that cannot be read as a file (a directory in its place: read_bytes
    refuses what is not a regular file, as for a FIFO or an unreadable one)."""
    path.unlink()
    path.mkdir()


def test_an_unreadable_vpd_is_unreadable_in_detect_and_plan_and_the_port_choice_says_so(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    _unreadable_attribute(root / LPF0)
    detect, rc = run_json("detect", "--root", str(root))
    assert rc == 0, detect
    [fn] = [d for d in detect["infiniband"] if d["pci"] == "0000:05:00.0"]
    assert (fn["sw_mng"], fn["vpd_unreadable"]) == (None, True)
    out, rc = run_json("plan", "--root", str(root))
    assert rc == 0, out
    # the port moved past mlx5_0, whose VPD could not be read: said, with a finding
    assert out["management_port"]["device"] == "mlx5_1"
    assert not any("ordinary NICs" in r and "mlx5_0" in r for r in out["reasons"])
    assert any(r.startswith("not candidates, VPD unreadable") and "mlx5_0 (0000:05:00.0)" in r
               for r in out["reasons"])
    [f] = out["findings"]
    assert (f["code"], f["severity"]) == ("management_port_unverified", "warning")
    assert f["unreadable_vpd"] == ["mlx5_0 (0000:05:00.0)"]
    text = run_cli("detect", "--root", str(root))
    [row] = [line for line in text.stdout.splitlines() if "0000:05:00.0" in line]
    assert "│ unreadable │" in row
    # run carries the plan's warning with the preflight's (dry run and run alike)
    dry, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 0 and "management_port_unverified" in [x["code"] for x in dry["findings"]]


def test_a_vpd_image_cut_short_before_its_vendor_field_is_unreadable(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    vpd = root / LPF0
    vpd.write_bytes(vpd.read_bytes()[:20])  # the identifier string, then EIO
    inv = collect(str(root))
    [fn] = [f for f in inv.pci if f.address == "0000:05:00.0"]
    assert fn.vpd_unreadable and fn.lpf_unknown and not fn.sw_mng
    assert plan(inv).findings[0].code == "management_port_unverified"


def test_an_ordinary_nic_with_a_whole_vpd_stays_an_ordinary_nic() -> None:
    nic = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"
    inv = inventory(gpu(0x2901, 8) + [cx7("0000:05:00.0"), cx7("0000:09:00.0", nic)],
                    [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (port(1, "0x0a0b0c0300d00001"),)),
                     IbDevice("mlx5_9", "0000:09:00.0", "0x9", (port(1, "0x0a0b0c0300d00009"),))])
    p = plan(inv)
    assert p.findings == () and p.management_port is not None
    assert "not candidates (no SMDL=SW_MNG in VPD, ordinary NICs): mlx5_9" in p.reasons


def test_an_unreadable_vpd_after_the_chosen_port_changes_nothing() -> None:
    # mlx5_9 sorts after mlx5_0: were it an LPF, mlx5_0 port 1 would still be the first
    unknown = cx7("0000:09:00.0")
    unknown = type(unknown)(unknown.address, unknown.vendor, unknown.device, unknown.class_code,
                            vpd=decode(encode("ConnectX-7", [])[:8]), vpd_unreadable=True)
    inv = inventory(gpu(0x2901, 8) + [cx7("0000:05:00.0"), unknown],
                    [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (port(1, "0x0a0b0c0300d00001"),)),
                     IbDevice("mlx5_9", "0000:09:00.0", "0x9", (port(1, "0x0a0b0c0300d00009"),))])
    p = plan(inv)
    assert p.findings == ()
    assert any(r.startswith("not candidates, VPD unreadable") for r in p.reasons)


def test_a_port_chosen_after_a_port_with_unreadable_values_has_a_finding() -> None:
    inv = inventory(
        gpu(0x2901, 8) + [cx7("0000:05:00.0"), cx7("0000:06:00.0")],
        [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (IbPort(1, None, 0xA751E84A),)),
         IbDevice("mlx5_1", "0000:06:00.0", "0x2", (port(1, "0x0a0b0c0300d00002"),))])
    p = plan(inv)
    assert p.management_port is not None and p.management_port.device == "mlx5_1"
    [f] = p.findings
    assert f.code == "management_port_unverified" and f.fields["skipped_ports"] == [
        "mlx5_0 port 1"]


def test_an_unreadable_driver_version_is_not_driver_not_loaded(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    for host in ("sys/module/nvidia/version", "proc/driver/nvidia/version"):
        if (root / host).exists():
            _unreadable_attribute(root / host)
    out, rc = run_json("plan", "--root", str(root))
    assert rc == 1
    [b] = out["blockers"]
    assert b["code"] == "driver_version_unreadable", b
    assert "cannot be read" in b["message"] and "not loaded" not in b["message"]
    fetch, rc = run_json("fetch", "--root", str(root), "--dry-run")
    assert rc == 1 and fetch["error"]["code"] == "driver_version_unreadable", fetch


def test_no_driver_files_at_all_is_still_driver_not_loaded(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    for host in ("sys/module/nvidia/version", "proc/driver/nvidia/version"):
        if (root / host).exists():
            os.unlink(root / host)
    out, rc = run_json("plan", "--root", str(root))
    assert rc == 1 and [b["code"] for b in out["blockers"]] == ["driver_not_loaded"]

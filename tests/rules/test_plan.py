"""The pure plan on in-memory inventories: tables of variants around the P cases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvfabric.facts.vpd import decode, encode
from nvfabric.model.inventory import IbDevice, IbPort, Inventory, PciFunction
from nvfabric.rules.plan import plan
from tests.conftest import run_json

LPF_FIELD = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:SMDL=SW_MNG:MODL=C7010Z"
NIC_FIELD = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"
FULL_IB = frozenset({"nvidia", "mlx5_core", "mlx5_ib", "ib_umad"})


def gpu(device: int, n: int, start: int = 0x18) -> list[PciFunction]:
    return [PciFunction(f"0000:{start + i:02x}:00.0", 0x10DE, device, 0x030200) for i in range(n)]


def cx7(address: str, field: str = LPF_FIELD) -> PciFunction:
    return PciFunction(address, 0x15B3, 0x1021, 0x020700,
                       vpd=decode(encode("ConnectX-7", [("VA", field)])))


def port(n: int, guid: str, cap: int = 0xA751E84A) -> IbPort:
    return IbPort(n, guid, cap, "4: ACTIVE", "5: LinkUp", "InfiniBand", f"umad{n}")


def inventory(pci: list[PciFunction], ib: list[IbDevice] = (),  # type: ignore[assignment]
              modules: frozenset[str] = FULL_IB, driver: str | None = "570.148.08") -> Inventory:
    return Inventory("/", "x86_64", driver, modules, tuple(pci), tuple(ib))


def test_devices_are_walked_in_plain_string_order_like_ibstat_l() -> None:
    # mlx5_10 sorts before mlx5_8 as a string; both eligible -> mlx5_10 wins.
    inv = inventory(
        gpu(0x2901, 8) + [cx7("0000:05:00.0"), cx7("0000:06:00.0")],
        [IbDevice("mlx5_8", "0000:05:00.0", "0x1", (port(1, "0x0a0b0c0300d00008"),)),
         IbDevice("mlx5_10", "0000:06:00.0", "0x2", (port(1, "0x0a0b0c0300d0000a"),))],
    )
    p = plan(inv)
    assert p.management_port is not None
    assert (p.management_port.device, p.management_port.guid) == ("mlx5_10", "0x0a0b0c0300d0000a")


def test_sm_disabled_first_port_falls_to_second_port_of_same_device() -> None:
    inv = inventory(
        gpu(0x2901, 8) + [cx7("0000:05:00.0")],
        [IbDevice("mlx5_0", "0000:05:00.0", "0x1",
                  (port(1, "0x0a0b0c0300d00001", 0xA751EC4A), port(2, "0x0a0b0c0300d00002")))],
    )
    p = plan(inv)
    assert p.management_port is not None and p.management_port.port == 2
    assert any("SM disabled" in r and "port 1" in r for r in p.reasons)


def test_zero_guid_port_is_skipped() -> None:
    inv = inventory(
        gpu(0x2901, 8) + [cx7("0000:05:00.0"), cx7("0000:06:00.0")],
        [IbDevice("mlx5_0", "0000:05:00.0", "0x0", (port(1, "0x0000000000000000"),)),
         IbDevice("mlx5_1", "0000:06:00.0", "0x1", (port(1, "0x0a0b0c0300d00011"),))],
    )
    p = plan(inv)
    assert p.management_port is not None and p.management_port.device == "mlx5_1"
    assert any("zero port GUID" in r for r in p.reasons)


def test_all_candidates_listed_in_management_port_not_found() -> None:
    inv = inventory(
        gpu(0x2901, 8) + [cx7("0000:05:00.0"), cx7("0000:06:00.0")],
        [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (port(1, "0x0a0b0c0300d00010", 0xA751EC4A),)),
         IbDevice("mlx5_1", "0000:06:00.0", "0x2", (port(1, "0x0a0b0c0300d00011", 0xA751EC4A),))],
    )
    p = plan(inv)
    (blocker,) = p.blockers
    assert blocker.code == "management_port_not_found"
    assert "0x0a0b0c0300d00010" in blocker.message and "0x0a0b0c0300d00011" in blocker.message
    assert "0xa751ec4a" in blocker.message
    assert [c["device"] for c in blocker.fields["candidates"]] == ["mlx5_0", "mlx5_1"]


def test_ordinary_nic_never_makes_a_node_nvlink5() -> None:
    inv = inventory(
        gpu(0x2330, 8) + [cx7("0000:05:00.0", NIC_FIELD)]
        + [PciFunction(f"0000:{0xc0 + i:02x}:00.0", 0x10DE, 0x22A3, 0x068000) for i in range(4)],
        [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (port(1, "0x0a0b0c0300e00001", 0xA651E848),))],
    )
    p = plan(inv)
    assert (p.fabric, p.services, p.management_port) == ("nvswitch", ("fabricmanager",), None)


@pytest.mark.parametrize(
    ("modules", "codes"),
    [
        (frozenset({"nvidia", "mlx5_core"}), ["ib_stack_missing"]),
        (frozenset({"nvidia", "mlx5_core", "ib_umad"}), ["ib_stack_missing"]),
        (frozenset({"nvidia", "mlx5_core", "mlx5_ib"}), ["missing_kernel_module"]),
        (frozenset({"mlx5_core", "mlx5_ib", "ib_umad"}), ["driver_not_loaded"]),
        (FULL_IB, []),
    ],
)
def test_b200_module_variants_block_but_never_downgrade(modules: frozenset[str],
                                                        codes: list[str]) -> None:
    has_ib = "mlx5_ib" in modules
    ib = [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (port(1, "0x0a0b0c0300d00001"),))]
    driver = "570.148.08" if "nvidia" in modules else None
    p = plan(inventory(gpu(0x2901, 8) + [cx7("0000:05:00.0")], ib if has_ib else [], modules,
                       driver))
    assert p.fabric == "nvlink5"
    assert p.services == ("nvlsm", "fabricmanager")
    assert [b.code for b in p.blockers] == codes


def test_lpf_without_ib_device_while_mlx5_ib_loaded_is_ib_stack_missing() -> None:
    p = plan(inventory(gpu(0x2901, 8) + [cx7("0000:05:00.0")], []))
    assert [b.code for b in p.blockers] == ["ib_stack_missing"]


@pytest.mark.parametrize(
    ("device", "count", "fabric"),
    [
        (0x2342, 1, "none"),   # GH200 is not H200
        (0x2348, 1, "none"),
        (0x2335, 8, "nvswitch"),  # H200 SXM on an NVSwitch baseboard (switches added below)
        (0x2941, 4, "mnnvl"),
        (0x31C2, 4, "mnnvl"),
        (0x2684, 2, "none"),
        (0x2235, 2, "none"),
    ],
)
def test_products_by_exact_device_id(device: int, count: int, fabric: str) -> None:
    pci = gpu(device, count)
    if fabric == "nvswitch":
        pci += [PciFunction(f"0000:{0xc0 + i:02x}:00.0", 0x10DE, 0x22A3, 0x068000)
                for i in range(4)]
    p = plan(inventory(pci, modules=frozenset({"nvidia"})))
    assert p.fabric == fabric
    assert "fabricmanager" not in p.services or fabric == "nvswitch"


def test_gb200_tray_never_runs_fabric_manager_even_with_a_stray_nvswitch() -> None:
    pci = gpu(0x2941, 4) + [PciFunction("0000:c0:00.0", 0x10DE, 0x22A3, 0x068000)]
    p = plan(inventory(pci, modules=frozenset({"nvidia"})))
    assert (p.fabric, p.services) == ("mnnvl", ("imex",))


def test_no_gpu_no_driver_needs_nothing_and_is_not_blocked() -> None:
    p = plan(inventory([], modules=frozenset(), driver=None))
    assert (p.fabric, p.services, p.blockers) == ("none", (), ())


def test_nvswitch_node_without_driver_is_blocked() -> None:
    pci = gpu(0x20B2, 8) + [PciFunction(f"0000:{0xc0 + i:02x}:00.0", 0x10DE, 0x1AF1, 0x068000)
                            for i in range(6)]
    p = plan(inventory(pci, modules=frozenset(), driver=None))
    assert p.fabric == "nvswitch"
    assert [b.code for b in p.blockers] == ["driver_not_loaded"]


NO_LPF = "no LPF (ConnectX function whose VPD has SMDL=SW_MNG) visible on PCI"


@pytest.mark.parametrize(
    "modules",
    [FULL_IB, frozenset({"nvidia", "mlx5_core"}), frozenset({"nvidia"})],
)
def test_b200_without_any_connectx_says_no_lpf_whatever_the_ib_stack(
        modules: frozenset[str]) -> None:
    # Tester report item 10(d): this was ib_stack_missing "the LPFs have no InfiniBand device"
    # without the IB modules and "the LPF IB devices have no ports" with them.
    p = plan(inventory(gpu(0x2901, 8), [], modules))
    assert (p.fabric, p.management_port) == ("nvlink5", None)
    (blocker,) = p.blockers
    assert blocker.code == "management_port_not_found"
    assert blocker.message.startswith(NO_LPF)
    assert "no ConnectX function on PCI at all" in blocker.message
    assert "ib_stack" not in blocker.message and "have no ports" not in blocker.message


def test_b200_with_only_ordinary_nics_and_one_unreadable_vpd_names_them() -> None:
    unreadable = PciFunction("0000:06:00.0", 0x15B3, 0x1021, 0x020700)  # VPD not read
    p = plan(inventory(gpu(0x2901, 8) + [cx7("0000:05:00.0", NIC_FIELD), unreadable],
                       [IbDevice("mlx5_0", "0000:05:00.0", "0x1",
                                 (port(1, "0x0a0b0c0300e00001", 0xA651E848),))]))
    (blocker,) = p.blockers
    assert blocker.code == "management_port_not_found" and blocker.message.startswith(NO_LPF)
    assert "2 ConnectX functions on PCI, none with SMDL=SW_MNG" in blocker.message
    assert "no readable VPD on 0000:06:00.0" in blocker.message
    assert blocker.fields["without_vpd"] == ["0000:06:00.0"]
    assert "root" in blocker.hint


def test_unreadable_cap_mask_or_guid_is_never_taken() -> None:
    # Tester report item 10(e): an unknown mask is not an empty mask, an unknown GUID not zero.
    inv = inventory(
        gpu(0x2901, 8) + [cx7("0000:05:00.0"), cx7("0000:06:00.0"), cx7("0000:07:00.0")],
        [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (IbPort(1, "0x0a0b0c0300d00001", None),)),
         IbDevice("mlx5_1", "0000:06:00.0", "0x2", (IbPort(1, None, 0xA751E84A),)),
         IbDevice("mlx5_2", "0000:07:00.0", "0x3", (port(1, "0x0a0b0c0300d00003"),))],
    )
    p = plan(inv)
    assert p.management_port is not None and p.management_port.device == "mlx5_2"
    assert any("mlx5_0 port 1" in r and "skipped: unreadable capability mask" in r
               for r in p.reasons)
    assert any("mlx5_1 port 1 (GUID unreadable" in r and "skipped: unreadable port GUID" in r
               for r in p.reasons)


def test_all_ports_unreadable_blocks_saying_so() -> None:
    inv = inventory(gpu(0x2901, 8) + [cx7("0000:05:00.0")],
                    [IbDevice("mlx5_0", "0000:05:00.0", "0x1", (IbPort(1, None, None),))])
    (blocker,) = plan(inv).blockers
    assert blocker.code == "management_port_not_found"
    assert "skipped: unreadable capability mask and unreadable port GUID" in blocker.message
    assert blocker.fields["candidates"][0]["cap_mask"] == "unreadable"
    assert "cannot be read is never taken" in blocker.hint


# SXM GPUs without a visible NVSwitch (P13, P14): a VM or Kata guest given the GPUs of an
# NVSwitch baseboard but not its switches. The kind: every SXM part of A100, A800, H100, H800,
# H200, H20 (rules/products.py), more of them than an HGX 4-GPU board links directly.
SXM_PARTS = {0x20B0: "A100-SXM4-40GB", 0x20B2: "A100-SXM4-80GB", 0x20B3: "A100-SXM-64GB",
             0x20BD: "A800-SXM4-40GB", 0x20F3: "A800-SXM4-80GB", 0x2330: "H100 80GB HBM3",
             0x2339: "H100", 0x2324: "H800", 0x2335: "H200", 0x2329: "H20", 0x232C: "H20-3e"}


@pytest.mark.parametrize("device", sorted(SXM_PARTS), ids=lambda d: f"{d:04x}")
def test_eight_sxm_gpus_without_nvswitch_plan_none_with_the_warning(device: int) -> None:
    p = plan(inventory(gpu(device, 8), modules=frozenset({"nvidia"})))
    assert (p.fabric, p.services, p.blockers) == ("none", (), ())
    (f,) = p.findings
    name = f"{SXM_PARTS[device]} x8"
    assert (f.code, f.severity, f.fields["products"], f.fields["gpus"]) == (
        "sxm_gpus_without_nvswitch", "warning", [name], 8)
    assert name in f.message and "NVSwitch" in f.hint and "Virtualization Models" in f.hint
    assert not any("PCIe, NVLink bridge" in r for r in p.reasons)
    assert p.to_json()["findings"][0]["code"] == "sxm_gpus_without_nvswitch"


@pytest.mark.parametrize(("device", "count"), [
    (0x20B2, 4),   # HGX A100 4-GPU: direct NVLink, no NVSwitch on the board
    (0x2330, 4),   # HGX H100 4-GPU
    (0x20F3, 1),   # one GPU: no NVLink between GPUs to lose
    (0x1DB1, 8),   # DGX-1: eight V100 SXM2 in a hybrid cube-mesh, no NVSwitch
])
def test_sxm_gpus_a_board_links_without_nvswitch_are_no_warning(device: int, count: int) -> None:
    p = plan(inventory(gpu(device, count), modules=frozenset({"nvidia"})))
    assert (p.fabric, p.findings, p.blockers) == ("none", (), ())
    assert any("SXM GPUs of an NVSwitch baseboard" in r and "HGX 4-GPU" in r
               for r in p.reasons)


def test_v100_sxm3_needs_its_hgx2_switches_from_two_gpus() -> None:
    p = plan(inventory(gpu(0x1DB8, 2), modules=frozenset({"nvidia"})))
    assert [f.code for f in p.findings] == ["sxm_gpus_without_nvswitch"]


def test_sxm_gpus_with_their_nvswitches_plan_fabric_manager_and_no_warning() -> None:
    pci = gpu(0x20F3, 8) + [PciFunction(f"0000:{0xc0 + i:02x}:00.0", 0x10DE, 0x1AF1,
                                        0x068000) for i in range(6)]
    p = plan(inventory(pci, modules=frozenset({"nvidia"})))
    assert (p.fabric, p.services, p.findings) == ("nvswitch", ("fabricmanager",), ())
    assert p.products == ("A800-SXM4-80GB x8",)


def test_pcie_a800_cards_are_nothing_to_manage_and_named() -> None:
    p = plan(inventory(gpu(0x20F5, 2) + gpu(0x20F6, 2, start=0x40),
                       modules=frozenset({"nvidia"})))
    assert (p.fabric, p.findings) == ("none", ())
    assert p.products == ("A800 80GB PCIe x2", "A800 40GB Active x2")
    assert any("PCIe, NVLink bridge" in r for r in p.reasons)


# What no shipped baseboard is, and what a guest or a failed part hides (rules/baseboard.py).

def switches(device: int, n: int) -> list[PciFunction]:
    return [PciFunction(f"0000:{0xc0 + i:02x}:00.0", 0x10DE, device, 0x068000) for i in range(n)]


def test_one_v100_sxm3_without_nvswitch_is_a_guest_of_an_hgx2_not_a_board() -> None:
    p = plan(inventory(gpu(0x1DB8, 1), modules=frozenset({"nvidia"})))
    assert (p.fabric, p.services, p.blockers) == ("none", (), ())
    (f,) = p.findings
    assert (f.code, f.severity, f.fields["gpus"]) == ("sxm_gpus_without_nvswitch", "warning", 1)
    assert "partition given one GPU" in f.message and "NVreg_NvLinkDisable=1" in f.message
    assert not any("HGX 4-GPU" in r for r in p.reasons)
    assert any("partition" in r for r in p.reasons)


@pytest.mark.parametrize(("pci", "fabric", "named"), [
    (gpu(0x2330, 4) + gpu(0x2335, 4, start=0x40) + switches(0x22A3, 4), "nvswitch",
     ["H100 80GB HBM3 x4", "H200 x4"]),
    (gpu(0x2330, 4) + gpu(0x2339, 4, start=0x40) + switches(0x22A3, 4), "nvswitch",
     ["H100 80GB HBM3 x4", "H100 x4"]),                   # two H100 SKUs on one board
    (gpu(0x20B2, 4) + gpu(0x2330, 4, start=0x40) + switches(0x1AF1, 6), "nvswitch",
     ["A100-SXM4-80GB x4", "H100 80GB HBM3 x4"]),
    (gpu(0x2901, 4) + gpu(0x2330, 4, start=0x40), "nvlink5", ["B200 x4", "H100 80GB HBM3 x4"]),
    (gpu(0x20B2, 8) + switches(0x22A3, 6), "nvswitch", ["A100-SXM4-80GB x8"]),  # gen 3 switches
])
def test_gpus_and_switches_of_no_shipped_baseboard_block_naming_them(
        pci: list[PciFunction], fabric: str, named: list[str]) -> None:
    p = plan(inventory(pci, modules=frozenset({"nvidia"})))
    assert p.fabric == fabric
    mixed = [b for b in p.blockers if b.code == "baseboard_mixed"]
    assert len(mixed) == 1 and mixed[0].severity == "error"
    assert mixed[0].fields["products"] == named
    assert all(n in mixed[0].message for n in named)
    assert any(r.startswith("no baseboard NVIDIA ships") for r in p.reasons)


def test_mixed_sxm_gpus_with_nothing_to_start_are_a_warning() -> None:
    p = plan(inventory(gpu(0x2330, 4) + gpu(0x2335, 4, start=0x40),
                       modules=frozenset({"nvidia"})))
    assert (p.fabric, p.blockers) == ("none", ())
    assert [(f.code, f.severity) for f in p.findings] == [("baseboard_mixed", "warning")]


@pytest.mark.parametrize(("pci", "listed", "severity", "counts"), [
    # 8 H100 and 2 of the board's 4 NVSwitches on PCI
    (gpu(0x2330, 8) + switches(0x22A3, 2), 2, "error", (4, 2, 2, 0)),
    # all 4 on PCI, the driver lists 3: a switch it did not take
    (gpu(0x2330, 8) + switches(0x22A3, 4), 3, "error", (4, 3, 0, 1)),
    # HGX-2: 16 V100 SXM3 need 12 NVSwitches; one baseboard's 6 seen
    (gpu(0x1DB8, 16) + switches(0x1AC2, 6), 6, "error", (12, 6, 6, 0)),
    # DGX A100 with 5 of its 6
    (gpu(0x20B2, 8) + switches(0x1AF1, 5), 5, "error", (6, 5, 1, 0)),
    # a 4-GPU guest with 2 NVSwitches: a partition, or a missing switch: said, not blocked
    (gpu(0x2330, 4) + switches(0x22A3, 2), 2, "warning", (4, 2, 2, 0)),
])
def test_fewer_nvswitches_than_the_baseboards_carry_are_said(
        pci: list[PciFunction], listed: int, severity: str,
        counts: tuple[int, int, int, int]) -> None:
    inv = Inventory("/", "x86_64", "570.148.08", frozenset({"nvidia"}), tuple(pci), (),
                    nvswitch_proc_devices=tuple(str(i) for i in range(listed)))
    p = plan(inv)
    assert (p.fabric, p.services) == ("nvswitch", ("fabricmanager",))
    (f,) = [f for f in p.blockers + p.findings if f.code == "nvswitch_topology_mismatch"]
    assert f.severity == severity and p.blocked == (severity == "error")
    assert (f.fields["nvswitches_expected"], f.fields["nvswitches_listed"],
            f.fields["missing_from_pci"], f.fields["not_listed_by_driver"]) == counts
    assert "Full Passthrough Virtualization Model" in f.hint and "dmesg" in f.hint


@pytest.mark.parametrize(("pci", "listed"), [
    (gpu(0x2330, 8) + switches(0x22A3, 4), 4),   # HGX H100
    (gpu(0x20B2, 8) + switches(0x1AF1, 6), 6),   # DGX A100
    (gpu(0x1DB8, 16) + switches(0x1AC2, 12), 12),  # HGX-2
    (gpu(0x2330, 8) + switches(0x22A3, 4), 0),   # no driver listing read: PCI counts
])
def test_whole_baseboards_plan_fabric_manager_without_a_finding(
        pci: list[PciFunction], listed: int) -> None:
    inv = Inventory("/", "x86_64", "570.148.08", frozenset({"nvidia"}), tuple(pci), (),
                    nvswitch_proc_devices=tuple(str(i) for i in range(listed)))
    p = plan(inv)
    assert (p.fabric, p.blockers, p.findings) == ("nvswitch", (), ())


@pytest.mark.parametrize(("spec", "rc", "code"), [
    ({"gpus": [{"device_id": "1db8", "count": 1}]}, 0, "sxm_gpus_without_nvswitch"),
    ({"gpus": [{"device_id": "2330", "count": 4}, {"device_id": "2335", "count": 4}],
      "nvswitches": {"device_id": "22a3", "count": 4}}, 1, "baseboard_mixed"),
    ({"gpus": [{"device_id": "2330", "count": 8}],
      "nvswitches": {"device_id": "22a3", "count": 2}}, 1, "nvswitch_topology_mismatch"),
    ({"gpus": [{"device_id": "2330", "count": 8}],
      "nvswitches": {"device_id": "22a3", "count": 4}, "nvswitch_proc_devices": 3},
     1, "nvswitch_topology_mismatch"),
])
def test_plan_of_a_simulated_node_says_what_its_baseboard_is_not(
        node: Callable[..., Path], spec: dict[str, Any], rc: int, code: str) -> None:
    root = node({"arch": "x86_64", "driver_version": "570.148.08", "modules": ["nvidia"],
                 **spec})
    out, status = run_json("plan", "--root", str(root))
    found = out["blockers"] if rc else out["findings"]
    assert status == rc and code in [f["code"] for f in found]

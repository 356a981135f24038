"""Triage of reports as the field sends them damaged or odd: blocks written twice, a report
cut inside a block, SR-IOV virtual functions beside the LPFs. Each report is the composed DGX
B200 report (tests/data/bugreports/dgx-b200-healthy.log.gz, the layout of
nvidia-bug-report.sh) with one block repeated, cut or extended as the field does it."""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from nvfabric.model.errors import NvfabricError
from nvfabric.triage import triage_stream
from tests import runkit
from tests.conftest import REPO, run_cli, run_json

B200 = REPO / "tests" / "data" / "bugreports" / "dgx-b200-healthy.log.gz"
SEPARATOR = "\n" + "_" * 44 + "\n"


def blocks() -> list[str]:
    """The blocks of the DGX B200 report, split at the script's separator lines."""
    return gzip.decompress(B200.read_bytes()).decode().split(SEPARATOR)


def block_index(bl: list[str], header: str) -> int:
    """Index of the block whose first non-empty line is ``header``."""
    for i, b in enumerate(bl):
        if b.strip().splitlines() and b.strip().splitlines()[0] == header:
            return i
    raise AssertionError(f"no block {header!r} in {B200}")


def judged(bl: list[str], label: str = "edited") -> Any:
    return triage_stream(io.BytesIO(SEPARATOR.join(bl).encode()), label)


def codes(t: Any) -> list[str]:
    return [f.code for f in t.findings]


# --- a block written twice: the first one counts -----------------------------------------

def test_lspci_block_written_twice_counts_each_function_once(tmp_path: Path) -> None:
    bl = blocks()
    i = block_index(bl, "/usr/bin/lspci -nnDvvvxxxx")
    bl.insert(i + 1, bl[i])
    path = tmp_path / "twice.log"
    path.write_text(SEPARATOR.join(bl))
    proc = run_cli("triage", str(path), "--json")
    out = json.loads(proc.stdout)
    assert len(out["node"]["gpus"]) == 8
    assert out["node"]["summary"].startswith("B200 x8; 4 LPF(s);")
    assert out["verdict"] == "healthy"
    assert "gpu_missing_from_driver" not in [f["code"] for f in out["findings"]]
    assert proc.returncode == 0, proc.stdout
    assert any("repeat a PCI address" in r for r in out["reasons"])


def test_ibstat_written_twice_counts_each_device_once() -> None:
    bl = blocks()
    i = block_index(bl, "/usr/sbin/ibstat")
    bl.insert(i + 1, bl[i])
    t = judged(bl)
    names = [d.name for d in t.inventory.infiniband]
    assert names == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    pci = {d.name: d.pci for d in t.inventory.infiniband}
    assert pci == {"mlx5_0": "0000:05:00.0", "mlx5_1": "0000:06:00.0",
                   "mlx5_2": "0000:07:00.0", "mlx5_3": "0000:08:00.0"}
    assert not any("a guess" in r for r in t.reasons), t.reasons
    assert any("printed again" in r for r in t.reasons)
    assert t.plan.management_port is not None
    assert t.plan.management_port.guid == "0xe09d730300e400e8"


# --- SR-IOV virtual functions beside the LPFs ----------------------------------------------

#: A ConnectX VF as lspci -nnDvvvxxxx prints it (name from pci.ids; a VF has no VPD; its
#: config space reads vendor/device 0xffff, lspci takes the IDs from sysfs).
VF_ENTRY = """0000:05:00.{fn} Infiniband controller [0207]: Mellanox Technologies ConnectX Family \
mlx5Gen Virtual Function [15b3:101e]
\tSubsystem: Mellanox Technologies Device [15b3:0087]
\tControl: I/O- Mem- BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B-
\tNUMA node: 0
\tIOMMU group: 20{fn}
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\tCapabilities: [9c] MSI-X: Enable+ Count=12 Masked-
\tKernel driver in use: mlx5_core
\tKernel modules: mlx5_core
{hex}

"""


def _vf_hex(first: str) -> str:
    rows = [first] + [f"{off:02x}: " + " ".join(["00"] * 16) for off in range(16, 256, 16)]
    return "\n".join(rows)


def _with_vfs(bl: list[str], first_row: str) -> list[str]:
    """Two VFs of the first LPF (05:00.4, 05:00.5: the SR-IOV capability's offset 4, stride
    1) in lspci, and their RDMA devices mlx5_4, mlx5_5 in ibstat; mlx5_0's port has the
    IsSMDisabled bit set, so the management port is the next LPF's."""
    bl = list(bl)
    i = block_index(bl, "/usr/bin/lspci -nnDvvvxxxx")
    vfs = "".join(VF_ENTRY.format(fn=fn, hex=_vf_hex(first_row)) for fn in (4, 5))
    cut = bl[i].index("0000:06:00.0")
    bl[i] = bl[i][:cut] + vfs + bl[i][cut:]
    j = block_index(bl, "/usr/sbin/ibstat")
    ib = bl[j]
    ca0 = ib[ib.index("CA 'mlx5_0'"):ib.index("CA 'mlx5_1'")]
    extra = "".join(ca0.replace("mlx5_0", f"mlx5_{n}")
                    .replace("0xe09d730300e400e8", f"0xe09d7303ffff00{n:02x}") for n in (4, 5))
    ib = ib.replace(ca0, ca0.replace("Capability mask: 0xa751e84a", "Capability mask: 0xa751ec4a"))
    cut = ib.index("Running InfiniBand commands for device")
    bl[j] = ib[:cut].rstrip("\n") + "\n" + extra + "\n" + ib[cut:]
    return bl


def test_virtual_functions_take_the_rdma_numbers_after_every_physical_function() -> None:
    for first_row in ("00: ff ff ff ff 06 04 10 00 00 00 07 02 00 00 00 00",
                      "00: b3 15 1e 10 06 04 10 00 00 00 07 02 00 00 00 00"):
        t = judged(_with_vfs(blocks(), first_row))
        pci = {d.name: d.pci for d in t.inventory.infiniband}
        assert pci == {"mlx5_0": "0000:05:00.0", "mlx5_1": "0000:06:00.0",
                       "mlx5_2": "0000:07:00.0", "mlx5_3": "0000:08:00.0",
                       "mlx5_4": "0000:05:00.4", "mlx5_5": "0000:05:00.5"}, first_row
        mp = t.plan.management_port
        assert mp is not None
        assert (mp.device, mp.guid) == ("mlx5_1", "0xe09d730300e400e9")
        assert t.exit_code == 0, codes(t)


# --- a report cut inside a section ------------------------------------------------------------

def _cut_after(marker: str, occurrence: int) -> bytes:
    text = SEPARATOR.join(blocks())
    pos = -1
    for _ in range(occurrence):
        pos = text.index(marker, pos + 1)
    return text[:pos].encode()


def test_the_section_a_cut_report_ends_in_is_named_kept_in_part() -> None:
    # cut inside lspci after two of the eight GPUs (the LPFs come first in address order)
    t = triage_stream(io.BytesIO(_cut_after("3D controller [0302]", 3)), "cut")
    cut = [m for m in t.missing if m.status == "truncated"]
    assert [m.name for m in cut] == ["lspci -nnDvvvxxxx"]
    assert "lspci cut short" in t.node_line()
    assert len(t.inventory.gpus) == 2
    assert "report_truncated" in codes(t)
    # cut inside the nvidia-smi --query section: its GPUs are only a part
    t = triage_stream(io.BytesIO(_cut_after("GPU 00000000:96:00.0", 1)), "cut")
    assert [m.name for m in t.missing if m.status == "truncated"] == ["nvidia-smi --query"]
    assert "lspci cut short" not in t.node_line()


def test_a_whole_report_has_no_section_kept_in_part() -> None:
    t = judged(blocks())
    assert [m for m in t.missing if m.status == "truncated"] == []
    assert "cut short" not in t.node_line()


# --- a driver whose version the report lacks is not "not loaded" -----------------------------

def test_nvidia_in_proc_modules_without_a_version_section_is_not_driver_not_loaded() -> None:
    bl = blocks()
    for header in ("*** /proc/driver/nvidia/version", "/usr/bin/nvidia-smi --query"):
        del bl[block_index(bl, header)]
    t = judged(bl)
    assert "nvidia" in t.inventory.modules
    assert "driver_not_loaded" not in codes(t)
    missing = [f for f in t.findings if f.code == "report_section_missing"]
    assert [f.fields["plan_blocker"] for f in missing] == ["driver_not_loaded"]
    assert "driver version unknown" in t.node_line()
    assert "not loaded" not in t.node_line()
    assert t.exit_code == 0


def test_a_report_cut_before_proc_modules_says_the_driver_version_is_unknown() -> None:
    t = triage_stream(io.BytesIO(_cut_after("*** /proc/modules", 1)), "cut")
    assert "driver version unknown" in t.node_line()


def test_proc_modules_without_nvidia_still_says_driver_not_loaded() -> None:
    bl = blocks()
    i = block_index(bl, "*** /proc/modules")
    bl[i] = "\n".join(line for line in bl[i].splitlines() if not line.startswith("nvidia "))
    for header in ("*** /proc/driver/nvidia/version", "/usr/bin/nvidia-smi --query"):
        del bl[block_index(bl, header)]
    t = judged(bl)
    assert "driver_not_loaded" in codes(t)
    assert "driver not loaded" in t.node_line()
    assert t.exit_code == 1


# --- gzip damage before the first block, and bytes after the last ---------------------------

def test_text_appended_after_a_whole_gzip_report_is_ignored_not_truncation(
        tmp_path: Path) -> None:
    path = tmp_path / "appended.log.gz"
    path.write_bytes(B200.read_bytes() + b"node-01 notes: fabric down since Monday\n")
    proc = run_cli("triage", str(path), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["report"]["complete"] is True
    assert "report_truncated" not in [f["code"] for f in out["findings"]]
    assert [m for m in out["missing"] if m["status"] == "truncated"] == []
    assert any("after the report's last block" in r for r in out["reasons"])


def test_a_damaged_member_before_the_epilogue_is_still_truncation(tmp_path: Path) -> None:
    data = B200.read_bytes()
    t = triage_stream(io.BytesIO(data[: len(data) // 2] + b"\x1f\x8bgarbage"), "half")
    assert t.report["complete"] is False
    assert "report_truncated" in codes(t)


def test_a_gzip_cut_before_its_first_block_is_named_damaged(tmp_path: Path) -> None:
    path = tmp_path / "cut.log.gz"
    path.write_bytes(B200.read_bytes()[:20])
    proc = run_cli("triage", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "gzip stream ends in the middle of a member" in err
    assert "not an nvidia-bug-report log" not in err


def _plan_key(p: dict[str, Any]) -> tuple[Any, ...]:
    mp = p.get("management_port") or {}
    return (p["fabric"], p["services"], mp.get("device"), mp.get("guid"),
            sorted(b["code"] for b in p["blockers"]))


def test_simulate_a_report_whose_vfs_ibstat_does_not_list_plans_as_triage(
        tmp_path: Path) -> None:
    """VFs without an RDMA device in ibstat (mlx5_4/5 taken out): the tree gives them names
    no reported device has, instead of refusing the spec ('mlx5_1 appears twice')."""
    bl = _with_vfs(blocks(), "00: b3 15 1e 10 06 04 10 00 00 00 07 02 00 00 00 00")
    j = block_index(bl, "/usr/sbin/ibstat")
    bl[j] = bl[j][:bl[j].index("CA 'mlx5_4'")] + "\n" + bl[j][bl[j].index("Running InfiniBand"):]
    path = tmp_path / "vfs.log"
    path.write_text(SEPARATOR.join(bl))
    tree = tmp_path / "node"
    proc = run_cli("simulate", "--from-bug-report", str(path), str(tree))
    assert proc.returncode == 0, proc.stderr
    triaged, _ = run_json("triage", str(path))
    planned, _ = run_json("plan", "--root", str(tree))
    assert _plan_key(planned) == _plan_key(triaged["plan"])
    assert _plan_key(planned)[2:4] == ("mlx5_1", "0xe09d730300e400e9")


# --- lspci not run as root: the VPD says "Not readable" ------------------------------------

def test_connectx_vpd_not_readable_is_not_judged_as_no_lpf() -> None:
    """lspci prints ``Not readable`` under the VPD capability when it is not root (pciutils
    ls-vpd.c): which ConnectX function is an LPF is then unknown, so neither
    management_port_not_found nor fabric manager's -g being 'no LPF port' is an error."""
    bl = blocks()
    i = block_index(bl, "/usr/bin/lspci -nnDvvvxxxx")
    lines = bl[i].split("\n")
    out: list[str] = []
    in_vpd = False
    for line in lines:
        if line == "\tCapabilities: [48] Vital Product Data":
            out += [line, "\t\tNot readable"]
            in_vpd = True
        elif in_vpd:
            in_vpd = line != "\t\tEnd"
        else:
            out.append(line)
    bl[i] = "\n".join(out)
    assert bl[i].count("Not readable") == 4
    t = judged(bl)
    assert "management_port_not_found" not in codes(t)
    assert "management_port_mismatch" not in codes(t)
    info = [f for f in t.findings if f.code == "report_section_missing"]
    assert [f.fields["plan_blocker"] for f in info] == ["management_port_not_found"]
    assert "Not readable" in info[0].message
    assert ("ConnectX VPD in lspci", "unreadable") in [(m.name, m.status) for m in t.missing]
    assert t.exit_code == 0


# --- what a parser keeps is bounded by what it reads, not by the section ---------------------

def test_ibstat_keeps_only_the_fields_it_reads() -> None:
    """An ibstat section with 20,000 distinct ``Key: value`` lines (a hostile or garbled
    report) keeps the six fields the inventory reads per device and port, no more."""
    from nvfabric.triage.ibstat import IbstatParser

    text = gzip.decompress(B200.read_bytes()).decode()
    start = text.index("CA 'mlx5_0'")
    section = text[start:text.index("Running InfiniBand commands for device")]
    p = IbstatParser()
    for n, line in enumerate(section.splitlines()):
        p.line(line)
        if n == 3:
            for k in range(20_000):
                word = "".join(chr(ord("a") + int(d)) for d in str(k))
                p.line(f"        Extra {word}: {k}")
    kept = [set(ca.values) for ca in p._cas] + [set(pt.values) for ca in p._cas
                                                 for pt in ca.ports]
    # ibstat prints 7 fields per device and 9 per port
    assert max(len(keys) for keys in kept) <= 9, [len(keys) for keys in kept]
    devices = p.devices()
    assert [d.ports[0].guid for d in devices] == [
        "0xe09d730300e400e8", "0xe09d730300e400e9", "0xe09d730300e400ea", "0xe09d730300e400eb"]


def test_lspci_vpd_kept_is_bounded_and_the_lpfs_after_it_still_read() -> None:
    """1,000 ConnectX functions with 64 full VPD fields each (16 MB of VPD) before the DGX
    B200's real entries: the VPD kept stays near its bound, and the four LPFs after it still
    show SMDL=SW_MNG (their Mellanox vendor field is always kept)."""
    from nvfabric.triage.lspci import LspciParser

    vpd = ["\tCapabilities: [48] Vital Product Data", "\t\tProduct Name: X",
           "\t\tRead-only fields:"]
    vpd += [f"\t\t[V{chr(65 + i % 26)}] Vendor specific: {i:03d}" + "y" * 248
            for i in range(64)]
    vpd += ["\t\tEnd", "\tKernel driver in use: mlx5_core", ""]
    p = LspciParser()
    for n in range(1000):
        p.line(f"0000:{0xa0 + n // 32:02x}:{n % 32:02x}.1 Ethernet controller [0200]: "
               "Mellanox Technologies MT2910 Family [ConnectX-7] [15b3:1021]")
        for line in vpd:
            p.line(line)
    text = gzip.decompress(B200.read_bytes()).decode()
    section = text[text.index("/usr/bin/lspci -nnDvvvxxxx\n") + 27:]
    for line in section[:section.index(SEPARATOR)].splitlines():
        p.line(line)
    kept = sum(len(f.value) for e in p.entries for f in e.vpd_fields)
    assert kept <= 2 << 20, kept  # its 1 MiB bound plus one vendor field per function
    lpfs = [f.address for f in p.functions() if f.sw_mng]
    assert lpfs == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]


def test_simulate_a_node_with_more_connectx_functions_than_a_spec_holds(
        tmp_path: Path) -> None:
    """70 SR-IOV VFs on the first LPF (74 ConnectX functions; a spec holds 64): the tree keeps
    the LPFs and says what it left out, and plans as triage does."""
    bl = blocks()
    i = block_index(bl, "/usr/bin/lspci -nnDvvvxxxx")
    vfs = ""
    for k in range(4, 74):  # ARI: function number k is device k >> 3, function k & 7
        vfs += VF_ENTRY.format(fn=k, hex=_vf_hex("00: ff ff ff ff 06 04 10 00 00 00 07 02"
                                                 " 00 00 00 00")).replace(
            f"0000:05:00.{k} ", f"0000:05:{k >> 3:02x}.{k & 7} ", 1)
    cut = bl[i].index("0000:06:00.0")
    bl[i] = bl[i][:cut] + vfs + bl[i][cut:]
    path = tmp_path / "vfs.log"
    path.write_text(SEPARATOR.join(bl))
    tree = tmp_path / "node"
    proc = run_cli("simulate", "--from-bug-report", str(path), str(tree))
    assert proc.returncode == 0, proc.stderr
    assert "74 ConnectX functions: 64 simulated" in proc.stdout
    triaged, _ = run_json("triage", str(path))
    planned, _ = run_json("plan", "--root", str(tree))
    assert _plan_key(planned) == _plan_key(triaged["plan"])
    assert _plan_key(planned)[2:4] == ("mlx5_0", "0xe09d730300e400e8")


def test_simulate_says_when_the_tree_lacks_what_triage_did_not_judge(tmp_path: Path) -> None:
    """The old plain report has no ibstat: triage does not judge the management port
    (report_section_missing), the tree has LPFs without ports, so plan there blocks with
    management_port_not_found; simulate says so instead of leaving the two to disagree."""
    report = REPO / "tests" / "data" / "bugreports" / "dgx-b200-old-plain-cut.log"
    tree = tmp_path / "node"
    out, rc = run_json("simulate", "--from-bug-report", str(report), str(tree))
    assert rc == 0
    triaged, _ = run_json("triage", str(report))
    planned, _ = run_json("plan", "--root", str(tree))
    assert "management_port_not_found" in [b["code"] for b in planned["blockers"]]
    assert [b["code"] for b in triaged["plan"]["blockers"]] == ["ib_stack_missing"]
    assert any(n.startswith("the report lacks ibstat: triage did not judge the plan's "
                            "ib_stack_missing") for n in out["notes"]), out["notes"]


# --- an endless stream ends: no separator in the first 64 MiB, or 16 GiB in all -------------

def test_triage_of_an_endless_stream_on_stdin_stops_with_one_line() -> None:
    """``triage - < /dev/zero`` read forever (no cap on a pipe); the 64 MiB without a block
    separator ends it with exit 2 (the subprocess timeout only guards the old hang)."""
    env = dict(os.environ)
    env.pop("NVFABRIC_DEBUG", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    with open("/dev/zero", "rb") as zero:
        proc = runkit.run([sys.executable, "-m", "nvfabric", "triage", "-"], stdin=zero,
                          timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("nvfabric: input_unreadable: stdin: no block of nvidia-bug-report.sh "
                          "in the first 64 MiB"), err


def test_a_gzip_bomb_of_nul_bytes_is_refused_before_it_is_read_whole() -> None:
    bomb = gzip.compress(b"\0" * (65 << 20) + b"\n" + SEPARATOR.encode() + b"lspci\n",
                         compresslevel=9)
    with pytest.raises(NvfabricError) as err:
        triage_stream(io.BytesIO(bomb), "bomb.log.gz")
    assert "bomb.log.gz: no block of nvidia-bug-report.sh in the first 64 MiB" in str(err.value)
    assert err.value.exit_code == 2


def test_a_report_past_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real B200 report with the limit set below its size (the limit itself, 16 GiB, is
    too large to feed in a test): the same check that ends a stream of repeated blocks."""
    from nvfabric.triage import report
    text = gzip.decompress(B200.read_bytes())
    monkeypatch.setattr(report, "MAX_REPORT_BYTES", len(text) // 2)
    with pytest.raises(NvfabricError) as err:
        triage_stream(io.BytesIO(text), "big.log")
    assert "big.log: more than" in str(err.value)
    monkeypatch.setattr(report, "MAX_REPORT_BYTES", len(text) + 1)
    assert triage_stream(io.BytesIO(text), "big.log").findings is not None

"""``nvfabric triage`` on bug reports in nvidia-bug-report.sh's layout (tests/data/bugreports:
composed from the real captures of ../shared/corpus, one per platform and failure kind of
../shared/cases, and an excerpt of a real public report)."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nvfabric.facts.inventory import collect
from nvfabric.rules.plan import plan
from nvfabric.triage import triage, triage_stream
from nvfabric.triage.collect import read
from nvfabric.triage.report import IGNORE, identify, split
from tests import runkit
from tests.cases import CASES
from tests.conftest import REPO, run_cli, run_json
from tests.oracles import ibstat as run_ibstat
from tests.oracles import need

DATA = REPO / "tests" / "data" / "bugreports"


def report(name: str) -> Path:
    path = DATA / name
    assert path.is_file(), f"missing test report {path}"
    return path


def codes(t: Any) -> list[str]:
    return [f.code for f in t.findings]


# --- the layout: sections -----------------------------------------------------------------

@pytest.mark.parametrize(("header", "kind", "name", "status"), [
    ("*** /proc/modules", "file", "/proc/modules", "ok"),
    ("/proc/modules", "file", "/proc/modules", "ok"),  # older scripts: the bare path
    ("/usr/sbin/ibstat", "command", "ibstat", "ok"),
    ("*** /var/log/nvidia-installer.log does not exist", "file",
     "/var/log/nvidia-installer.log", "absent"),
    ("*** /var/log/fabricmanager.log is not readable", "file", "/var/log/fabricmanager.log",
     "unreadable"),
    ("/usr/bin/lspci -nnDvvvxxxx", "command", "lspci -nnDvvvxxxx", "ok"),
    ("/sbin/systemctl status nvidia-fabricmanager.service", "command",
     "systemctl status nvidia-fabricmanager.service", "ok"),
    ("journalctl -b -0 _COMM=Xorg", "command", "journalctl -b -0 _COMM=Xorg", "ok"),
    ("timeout 60 /usr/bin/mst status -v", "command", "mst status -v", "ok"),
    ("Skipping: ibstat output", "skipped", "ibstat output", "skipped"),
    ("dmesg:", "title", "dmesg:", "ok"),
    ("Start of NVIDIA bug report log file.  Please include this file, along", "prologue",
     "prologue", "ok"),
    ("End of NVIDIA bug report log file.", "epilogue", "epilogue", "ok"),
])
def test_block_headers_are_named_as_the_script_writes_them(
        header: str, kind: str, name: str, status: str) -> None:
    s = identify(header)
    assert (s.kind, s.name, s.status) == (kind, name, status)


def _headers(data: bytes, block: int) -> list[str]:
    sections, _ = split(io.BufferedReader(io.BytesIO(data)), lambda s, p: IGNORE,
                        block=block)
    return [s.header.strip() for s in sections]


@pytest.mark.parametrize("block", [1, 7, 4096, 1 << 20])
def test_sections_do_not_depend_on_where_the_stream_is_cut(block: int) -> None:
    """The same headers whatever the read size: separators and headers split across reads
    are joined (the gzip is read in blocks, never whole)."""
    data = report("dgx-b200-healthy.log.gz").read_bytes()
    want = _headers(data, 1 << 20)
    assert "/usr/bin/nvidia-smi --query" in want
    assert "/usr/bin/nvidia-smi nvlink --status" in want  # a sub-command of the smi block
    assert "Running InfiniBand commands for device: mlx5_3" in want
    assert _headers(data, block) == want


def test_a_report_is_a_sequence_of_gzip_members_one_per_block() -> None:
    data = report("dgx-b200-healthy.log.gz").read_bytes()
    assert data.count(b"\x1f\x8b\x08") > 10
    plain = gzip.decompress(data)
    assert triage_stream(io.BytesIO(plain), "plain").plan.to_json() == \
        triage(str(report("dgx-b200-healthy.log.gz"))).plan.to_json()


# --- the node: lspci and ibstat against the real tools -----------------------------------

def _lspci_entries(path: Path) -> list[str]:
    text = gzip.decompress(path.read_bytes()).decode()
    section = text.split("/usr/bin/lspci -nnDvvvxxxx\n", 1)[1].split("_" * 44, 1)[0]
    return [e for e in section.strip("\n").split("\n\n") if e[:1].isdigit()]


@pytest.mark.parametrize("name", ["dgx-b200-healthy.log.gz", "hgx-h100-healthy.log.gz",
                                  "gb200-tray-unhealthy.log.gz",
                                  "gb300-tray-insufficient-resources.log.gz",
                                  "dgx-a100-fm-running.log.gz",
                                  "a40-nvlink-bridge-fm-nothing-to-do.log.gz"])
def test_lspci_ids_match_lspci_reading_the_config_dump(name: str, tmp_path: Path) -> None:
    """Oracle: `lspci -F DUMP -nnD` (pciutils) reads each function's hex rows; its vendor,
    device, class and subsystem equal what the triage parser took from the same section."""
    lspci = need("lspci")
    t = triage(str(report(name)))
    mine = {f.address: f for f in t.inventory.pci}
    entries = _lspci_entries(report(name))
    assert len(entries) == len(mine) > 0
    dump = tmp_path / "dump"
    dump.write_text("\n\n".join(
        "\n".join([e.splitlines()[0]] + [ln for ln in e.splitlines()
                                          if ln[:3].rstrip(":").isalnum() and ": " in ln[:5]])
        for e in entries) + "\n")
    out = runkit.run([lspci, "-F", str(dump), "-nnDvmm"], check=True).stdout
    seen = 0
    for rec in out.strip().split("\n\n"):
        fields = dict(line.split(":\t", 1) for line in rec.splitlines() if ":\t" in line)
        fn = mine[fields["Slot"]]
        assert fields["Vendor"].endswith(f"[{fn.vendor:04x}]")
        assert fields["Device"].endswith(f"[{fn.device:04x}]")
        assert fields["Class"].endswith(f"[{fn.class_code >> 8:04x}]")
        assert fields["SVendor"].endswith(f"[{fn.subsystem_vendor:04x}]")
        seen += 1
    assert seen == len(mine)


def test_b200_lpf_vpd_is_read_from_the_real_capture() -> None:
    t = triage(str(report("dgx-b200-healthy.log.gz")))
    lpf = next(f for f in t.inventory.pci if f.address == "0000:05:00.0")
    assert lpf.sw_mng and lpf.driver == "mlx5_core" and lpf.numa_node == 0
    assert lpf.vpd is not None and lpf.vpd.checksum_ok is True
    assert lpf.vpd.id_string == "Nvidia ConnectX-7 mezz internal for Nvidia Umbriel system"
    assert lpf.vpd.get("PN") == "692-9X760-00SE-S00"


def test_ibstat_parser_agrees_with_the_inventory_on_a_node_read_by_real_ibstat(
        node: Any) -> None:
    """Oracle: real `ibstat` run on the P11 node tree prints the ports; parsed, they equal
    what the inventory reads from the same tree's sysfs (GUID, capability mask, states)."""
    from nvfabric.triage.ibstat import parse

    p11 = yaml.safe_load((CASES / "P11-dgx-b200-real.yaml").read_text())["node"]
    root = node(p11)
    proc = run_ibstat(str(root))
    assert proc.returncode == 0, proc.stderr
    parsed = {d.name: d for d in parse(proc.stdout)}
    inv = collect(str(root))
    assert sorted(parsed) == [d.name for d in inv.infiniband]
    for dev in inv.infiniband:
        for mine, theirs in zip(parsed[dev.name].ports, dev.ports, strict=True):
            assert (mine.port, mine.guid, mine.cap_mask, mine.state, mine.phys_state,
                    mine.link_layer) == (theirs.port, theirs.guid, theirs.cap_mask,
                                         theirs.state, theirs.phys_state, theirs.link_layer)


def test_ibstat_of_the_h100_corpus_capture() -> None:
    from nvfabric.triage.ibstat import parse

    devs = parse((CASES.parent / "corpus/ibstat/h100-ibstat-all-active-0.txt").read_text())
    first = devs[0]
    assert first.name == "mlx5_0" and first.node_guid == "0xa088c20300000001"
    port = first.ports[0]
    assert (port.guid, port.cap_mask, port.state, port.phys_state, port.link_layer) == (
        "0xa288c2fffe000001", 0x00010000, "4: ACTIVE", "5: LinkUp", "Ethernet")


# --- the plan: the DGX B200 capture plans as case P11 -------------------------------------

def test_dgx_b200_report_plans_exactly_as_case_p11(node: Any) -> None:
    p11 = yaml.safe_load((CASES / "P11-dgx-b200-real.yaml").read_text())
    t = triage(str(report("dgx-b200-healthy.log.gz")))
    assert t.plan.to_json() == plan(collect(str(node(p11["node"])))).to_json()
    assert t.plan.fabric == p11["expect"]["fabric"]
    assert list(t.plan.services) == p11["expect"]["services"]
    assert t.plan.management_port is not None
    assert t.plan.management_port.to_json() == p11["expect"]["management_port"]


# --- one triage per platform and failure kind ---------------------------------------------

EXPECT: list[tuple[str, dict[str, Any]]] = [
    ("dgx-b200-healthy.log.gz", {"fabric": "nvlink5", "verdict": "healthy", "exit": 0,
                                 "no_codes": ["nvlsm_missing", "ib_stack_missing"]}),
    ("dgx-b200-ib-stack-missing.log.gz", {
        "fabric": "nvlink5", "verdict": "unhealthy", "exit": 1,
        "codes": ["ib_stack_missing", "nvlsm_missing", "registration_stuck"],
        "missing": {"ibstat": "skipped"}}),
    ("hgx-h100-healthy.log.gz", {"fabric": "nvswitch", "verdict": "healthy", "exit": 0,
                                 "codes": ["nvswitch_nonfatal_error"]}),
    ("hgx-h100-version-mismatch.log.gz", {
        "fabric": "nvswitch", "verdict": None, "exit": 1,
        "codes": ["version_mismatch", "nvswitch_fatal_error", "nvswitch_nonfatal_error"],
        "missing": {"nvidia-smi --query": "missing"}}),
    ("gb200-tray-unhealthy.log.gz", {"fabric": "mnnvl", "verdict": "unhealthy", "exit": 1,
                                     "codes": ["fabric_unhealthy"]}),
    ("gb300-tray-insufficient-resources.log.gz", {
        "fabric": "mnnvl", "verdict": "unhealthy", "exit": 1,
        "codes": ["registration_error", "imex_no_local_interface"]}),
    ("dgx-b200-old-plain-cut.log", {
        "fabric": "nvlink5", "verdict": "healthy", "exit": 0,
        "codes": ["report_truncated", "report_section_missing"],
        "no_codes": ["ib_stack_missing"], "missing": {"ibstat": "missing"}}),
    ("dgx-b200-truncated.log.gz", {
        "fabric": "nvlink5", "verdict": None, "exit": 0,
        "codes": ["report_truncated", "report_section_missing"],
        "no_codes": ["driver_not_loaded", "ib_stack_missing"]}),
    ("a40-nvlink-bridge-fm-nothing-to-do.log.gz", {
        "fabric": "none", "verdict": "not_applicable", "exit": 0,
        "codes": ["fm_not_applicable"], "no_codes": ["nvlsm_missing", "nvswitch_not_visible"]}),
    ("dgx-a100-fm-running.log.gz", {"fabric": "nvswitch", "verdict": "healthy", "exit": 0,
                                    "no_codes": ["fm_inactive", "registration_stuck"]}),
    ("hgx-h100-old-script.log", {
        "fabric": "nvswitch", "verdict": "healthy", "exit": 0,
        "missing": {"ibstat": "missing", "nvidia-smi --query": None}}),
    ("public-rtx3060-laptop-31831145-excerpt.log", {
        "verdict": None, "exit": 0, "codes": ["report_truncated"],
        "missing": {"lspci -nnDvvvxxxx": "missing"}}),
]


@pytest.mark.parametrize(("name", "want"), EXPECT, ids=[n for n, _ in EXPECT])
def test_triage_of_each_report(name: str, want: dict[str, Any]) -> None:
    t = triage(str(report(name)))
    if "fabric" in want:
        assert t.plan.fabric == want["fabric"]
    assert (t.verdict.verdict if t.verdict else None) == want["verdict"]
    assert t.exit_code == want["exit"]
    for code in want.get("codes", []):
        assert code in codes(t), (code, codes(t))
    for code in want.get("no_codes", []):
        assert code not in codes(t), (code, codes(t))
    missing = {m.name: m.status for m in t.missing}
    for section, status in want.get("missing", {}).items():
        assert missing.get(section) == status
    assert all("section" in f.fields for f in t.findings)
    ranks = [{"error": 0, "warning": 1, "info": 2}[f.severity] for f in t.findings]
    assert ranks == sorted(ranks)


def test_findings_name_the_section_they_came_from() -> None:
    t = triage(str(report("dgx-b200-ib-stack-missing.log.gz")))
    by_section = {(f.code, f.fields["section"]) for f in t.findings}
    assert ("nvlsm_missing", "/var/log/fabricmanager.log") in by_section
    assert ("nvlsm_missing", "systemctl status nvidia-fabricmanager.service") in by_section
    assert ("registration_stuck", "nvidia-smi --query") in by_section


def test_log_lines_are_judged_by_the_plan_of_the_node() -> None:
    """NV_WARN_NOTHING_TO_DO is nvlsm_missing on an NVLink 5 baseboard (D03), whatever order
    the sections come in: the logs are classified for every fabric kind in one scan."""
    t = triage(str(report("dgx-b200-ib-stack-missing.log.gz")))
    fm_log = [f for f in t.findings if f.fields["section"] == "/var/log/fabricmanager.log"]
    assert "fm_not_applicable" not in [f.code for f in fm_log]
    assert "nvlsm_missing" in [f.code for f in fm_log]


def test_imex_domain_from_the_ctl_section() -> None:
    t = triage(str(report("gb200-tray-unhealthy.log.gz")))
    assert t.services["imex"] == {"installed": False, "enabled": None, "active": None,
                                  "sub": None, "age_s": None, "processes": []}
    assert "imex_domain_degraded" not in codes(t)  # the 18-node capture is all READY


def test_damaged_gzip_member_keeps_what_was_read(tmp_path: Path) -> None:
    data = bytearray(report("dgx-b200-healthy.log.gz").read_bytes())
    members = [i for i in range(len(data)) if data[i:i + 3] == b"\x1f\x8b\x08"]
    at = members[len(members) // 2] + 40
    data[at:at + 8] = b"\xff" * 8
    bad = tmp_path / "bad.log.gz"
    bad.write_bytes(bytes(data))
    t = triage(str(bad))
    assert "report_truncated" in codes(t)
    assert t.report["complete"] is False
    assert t.inventory.pci  # the lspci block before the damage was read


# --- the command ----------------------------------------------------------------------------

def test_cli_json_is_one_object_with_the_contract_keys() -> None:
    out, rc = run_json("triage", str(report("dgx-b200-healthy.log.gz")))
    assert rc == 0
    assert set(out) >= {"report", "node", "plan", "verdict", "gpus", "services", "findings",
                        "missing", "reasons"}
    assert out["plan"]["management_port"]["guid"] == "0xe09d730300e400e8"
    assert out["node"]["infiniband"][0]["sw_mng"] is True
    assert len(out["gpus"]) == 8


def test_cli_text_and_exit_code_on_a_failing_node() -> None:
    proc = run_cli("triage", str(report("dgx-b200-ib-stack-missing.log.gz")))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("node     B200 x8; 4 LPF(s); x86_64; driver 590.48.01")
    assert "ib_stack_missing [plan: lspci, ibstat, /proc/modules]" in proc.stdout
    assert "not in the report" in proc.stdout


def test_cli_reads_stdin() -> None:
    proc = runkit.run([sys.executable, "-m", "nvfabric", "triage", "-", "--json"],
                      input=report("gb200-tray-unhealthy.log.gz").read_bytes(), text=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["plan"]["fabric"] == "mnnvl"


@pytest.mark.parametrize("content", [b"", b"hello\nworld\n", b"\x1f\x8b\x08garbage"])
def test_cli_refuses_what_is_no_bug_report(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(content)
    out, rc = run_json("triage", str(path))
    assert rc == 2
    assert out["error"]["code"] == "input_unreadable"


def test_cli_refuses_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "nope.gz"):
        proc = run_cli("triage", str(path))
        assert proc.returncode == 2
        assert proc.stderr.startswith("nvfabric: input_unreadable:")
        assert "Traceback" not in proc.stderr


# --- simulate --from-bug-report -------------------------------------------------------------

def test_simulate_from_the_b200_report_plans_as_p11(tmp_path: Path, node: Any) -> None:
    root = tmp_path / "sim"
    out, rc = run_json("simulate", "--from-bug-report",
                       str(report("dgx-b200-healthy.log.gz")), str(root))
    assert rc == 0, out
    assert out["notes"]
    plan_out, rc = run_json("plan", "--root", str(root))
    assert rc == 0
    p11 = yaml.safe_load((CASES / "P11-dgx-b200-real.yaml").read_text())
    assert plan_out == plan(collect(str(node(p11["node"])))).to_json()


@pytest.mark.parametrize(("name", "fabric", "plan_rc"), [
    ("gb200-tray-unhealthy.log.gz", "mnnvl", 0),
    ("hgx-h100-healthy.log.gz", "nvswitch", 0),
    ("dgx-b200-ib-stack-missing.log.gz", "nvlink5", 1),
])
def test_simulate_from_each_report_gives_a_node_with_its_plan(
        name: str, fabric: str, plan_rc: int, tmp_path: Path) -> None:
    root = tmp_path / "sim"
    proc = run_cli("simulate", "--from-bug-report", str(report(name)), str(root))
    assert proc.returncode == 0, proc.stderr
    out, rc = run_json("plan", "--root", str(root))
    assert (out["fabric"], rc) == (fabric, plan_rc)
    # addresses are the simulator's own; hints are typed for the root asked about (the
    # report's for the node itself: tests/rules/test_plan_hints.py)
    assert _unhinted(out) == _unhinted(triage(str(report(name))).plan.to_json() | {
        "reasons": out["reasons"]})
    assert all(str(root) in f["hint"] for f in out["blockers"] if "/etc/" in f["hint"])


def _unhinted(plan_json: dict[str, Any]) -> dict[str, Any]:
    return plan_json | {k: [{**f, "hint": None} for f in plan_json[k]]
                        for k in ("blockers", "findings")}


def test_simulate_refuses_spec_and_report_together(tmp_path: Path) -> None:
    proc = run_cli("simulate", "--spec", "x.yaml", "--from-bug-report",
                   str(report("dgx-b200-healthy.log.gz")), str(tmp_path / "d"))
    assert proc.returncode == 2
    assert not (tmp_path / "d").exists()


def test_collect_keeps_each_kernel_log_source_apart() -> None:
    with open(report("dgx-b200-healthy.log.gz"), "rb") as fh:
        c = read(io.BufferedReader(fh))  # type: ignore[arg-type]
    names = [log.name for log in c.logs]
    assert "kernel messages (journalctl -b -0)" in names
    assert "dmesg" in names


# --- hostile input (../shared/fuzz kinds): exit 0/1/2, never 3, bounded ----------------------

def _edited(replace: dict[str, str]) -> bytes:
    text = gzip.decompress(report("dgx-b200-healthy.log.gz").read_bytes()).decode()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


FUZZ = CASES.parent / "fuzz"


@pytest.mark.parametrize("edit", [
    {"\tNUMA node: 0\n": "\tNUMA node: \u00b2\n"},            # isdigit() but not int()
    {"\tNUMA node: 1\n": "\tNUMA node: --1\n"},
    {"CA 'mlx5_3'": "CA 'mlx5_\u00b2'"},
    {"13min ago": "1" * 5000 + "min ago"},                    # past int()'s digit limit
    {"dmesg:\n\n": "dmesg:\n\n" + (FUZZ / "doctor-4303-digit-rc.log").read_text()},
    {"Component                           | Details": "Component " + " " * 200_000 + "x"},
    {"\tSubsystem: Mellanox": "0000:05:00.0 " + " " * 100_000 + "x\n\tSubsystem: Mellanox"},
    {"State: Active\n": "State: " + "\x00\xff" * 1000 + "\n"},
])
def test_hostile_edits_of_a_report_are_judged_not_crashed(edit: dict[str, str],
                                                          tmp_path: Path) -> None:
    path = tmp_path / "edited.log"
    path.write_bytes(_edited(edit))
    proc = run_cli("triage", str(path), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["plan"]["fabric"] == "nvlink5"


def test_cuts_of_a_report_anywhere_are_judged_not_crashed() -> None:
    """A report cut at any byte (a section, a header, a separator, a hex row cut in two) is
    triaged: incomplete, with what came before judged."""
    text = gzip.decompress(report("hgx-h100-healthy.log.gz").read_bytes())
    end = text.index(b"End of NVIDIA bug report log file.")
    start = text.index(b"Start of NVIDIA bug report log file.") + 40  # before: no block yet
    for cut in range(start, end, (end - start) // 29):
        t = triage_stream(io.BytesIO(text[:cut]), f"cut at {cut}")
        assert t.report["complete"] is False
        assert "report_truncated" in codes(t)


def test_simulated_node_reports_the_fabric_states_of_the_report(tmp_path: Path) -> None:
    """status --root on the tree built from a report reads the report's GPU fabric states
    (the fake nvidia-smi prints them), so the reporter's verdict can be reproduced."""
    root = tmp_path / "sim"
    proc = run_cli("simulate", "--from-bug-report",
                   str(report("gb300-tray-insufficient-resources.log.gz")), str(root))
    assert proc.returncode == 0, proc.stderr
    out, rc = run_json("status", "--root", str(root))
    assert (out["verdict"], rc) == ("unhealthy", 1)
    assert {g["status"] for g in out["gpus"]} == {"NVML_ERROR_INSUFFICIENT_RESOURCES"}
    assert "registration_error" in [f["code"] for f in out["findings"]]


def test_the_scripts_sysfs_hexdump_fallback_gives_ids_and_class(node: Any) -> None:
    """Without lspci the script dumps each function's sysfs config with
    `hexdump -v -e '16/1 "%02x " "\\n"' | awk '{printf "%02x: %s\\n",NR*16-16, $0}'` under a
    `BDF CLASS: Vendor V Device D (rev R)` line; run here with the real hexdump and awk on
    the P11 tree, the functions read back equal the inventory's (no VPD: not in the dump)."""
    hexdump, awk = need("hexdump"), need("awk")
    p11 = yaml.safe_load((CASES / "P11-dgx-b200-real.yaml").read_text())["node"]
    root = node(p11)
    inv = collect(str(root))
    sep = "_" * 44
    parts = [f"{sep}\nPCI devices configuration space dump using sysfs\n"]
    for fn in inv.pci:
        base = root / "sys/bus/pci/devices" / fn.address
        rev = (base / "revision").read_text().strip()[2:]
        head = (f"\n{fn.address} {fn.class_code:06x}: Vendor {fn.vendor:04x} Device "
                f"{fn.device:04x} (rev {rev})\n")
        dump = runkit.run([hexdump, "-v", "-e", '16/1 "%02x " "\\n"', str(base / "config")],
                          check=True).stdout
        rows = runkit.run([awk, '{printf "%02x: %s\\n",NR*16-16, $0}'], input=dump,
                          check=True).stdout
        parts.append(head + rows)
    text = "".join(parts) + sep + "\n\nEnd of NVIDIA bug report log file.\n"
    t = triage_stream(io.BytesIO(text.encode()), "fallback")
    assert [(f.address, f.vendor, f.device, f.class_code, f.subsystem_vendor)
            for f in t.inventory.pci] == [
        (f.address, f.vendor, f.device, f.class_code, f.subsystem_vendor) for f in inv.pci]
    assert t.plan.fabric == "nvlink5" and not t.inventory.lpfs  # VPD is not in a config dump


def test_the_docs_example_is_what_triage_prints() -> None:
    readme = (REPO / "docs" / "commands" / "triage.md").read_text()
    block = readme.split("$ nvfabric triage dgx-b200-ib-stack-missing.log.gz\n", 1)[1]
    block = block.split("```", 1)[0]
    proc = run_cli("triage", "dgx-b200-ib-stack-missing.log.gz", cwd=DATA)
    assert proc.returncode == 1
    assert proc.stdout == block


def test_state_is_bounded_by_the_catalogue_not_by_the_report() -> None:
    """A hostile report of 20,000 blocks, each a /proc/modules file and a fabric manager
    version line: headers kept are bounded, the last kept; the text of a repeated block is
    kept once; distinct versions are bounded."""
    from nvfabric.triage.collect import MAX_VERSIONS
    from nvfabric.triage.report import MAX_SECTIONS

    sep = "_" * 44
    blocks = [f"{sep}\n\n*** /proc/modules\n*** ls: x\nnvidia 1 0, Live 0x0\n\n"
              f"{sep}\n\n*** /var/log/fabricmanager.log\n*** ls: x\n[Jan 01 2026 00:00:00] "
              f"[INFO] [tid 1] Fabric Manager version 570.{i % 999}.01 is running with\n\n"
              for i in range(10_000)]
    data = "".join(blocks) + f"{sep}\n\nEnd of NVIDIA bug report log file.\n"
    c = read(io.BufferedReader(io.BytesIO(data.encode())))  # type: ignore[arg-type]
    assert c.outcome.sections == 20_001
    assert len(c.sections) == MAX_SECTIONS and c.sections[-1].kind == "epilogue"
    assert c.texts["modules"] == "nvidia 1 0, Live 0x0\n\n"
    assert len(c.versions["fabricmanager"]) == MAX_VERSIONS


@pytest.mark.parametrize(("data", "want"), [
    (b"a\n" + b"_" * 44 + b"\nb\n", (2, 47)),
    (b"_" * 44 + b"\n", (0, 45)),
    (b"_" * 44 + b" \r\n", (0, 47)),                 # trailing blanks and CR allowed
    (b"a\n" + b"_" * 39 + b"\n", None),              # too short
    (b"a\n" + b"_" * 44 + b"x\n", None),             # not a line of underscores only
    (b"a " + b"_" * 44 + b"\n", None),               # not at a line start
    (b"x" + b"_" * 100_000 + b"\n" + b"_" * 44 + b"\n", (100_002, 100_047)),
])
def test_separator_lines(data: bytes, want: tuple[int, int] | None) -> None:
    from nvfabric.triage.report import find_separator

    assert find_separator(data, 0) == want


def test_simulate_refuses_a_report_without_pci_functions(tmp_path: Path) -> None:
    out, rc = run_json("simulate", "--from-bug-report",
                       str(report("public-rtx3060-laptop-31831145-excerpt.log")),
                       str(tmp_path / "d"))
    assert rc == 2
    assert "no lspci section" in out["error"]["message"]
    assert not (tmp_path / "d").exists()

LINES = st.lists(st.one_of(
    st.text(max_size=80),
    st.sampled_from(["0000:05:00.0 Infiniband controller [0207]: X [15b3:1021]",
                     "\tCapabilities: [48] Vital Product Data", "\t\tRead-only fields:",
                     "\t\t\t[VA] Vendor specific: MLX:SMDL=SW_MNG", "00: b3 15 21 10",
                     "CA 'mlx5_0'", "\tPort 1:", "\t\tCapability mask: 0x", "   Active: ",
                     "     CGroup: /x", "             └─12 /usr/bin/nv-fabricmanager -g 0x1",
                     "_" * 44, "*** /proc/modules", "Skipping: ibstat output"])),
    max_size=60)


@settings(max_examples=150, deadline=None)
@given(LINES)
def test_readers_never_raise_on_any_text(lines: list[str]) -> None:
    from nvfabric.triage.ibstat import IbstatParser
    from nvfabric.triage.lspci import LspciParser
    from nvfabric.triage.units import parse as parse_unit

    lp, ip = LspciParser(), IbstatParser()
    for ln in lines:
        lp.line(ln)
        ip.line(ln)
        identify(ln)
    lp.functions()
    ip.devices()
    parse_unit("\n".join(lines))
    text = "\n".join(lines).encode("utf-8", "surrogatepass")
    try:
        triage_stream(io.BytesIO(text), "random")
    except Exception as err:  # noqa: BLE001 - only the documented refusal may escape
        from nvfabric.model.errors import NvfabricError

        assert isinstance(err, NvfabricError) and err.exit_code == 2, repr(err)


def test_lspci_parser_on_the_real_hgx_h100_capture() -> None:
    """The corpus's whole `lspci -vvv` of an HGX H100 (16,873 lines): every entry found, no
    IDs without -nn or hex (none invented), the ConnectX-7 VPD read (no SMDL=SW_MNG there)."""
    from nvfabric.model.vpd import parse_mellanox_field
    from nvfabric.triage.lspci import LspciParser

    text = (CASES.parent / "corpus/lspci/hgx-h100-8gpu-4nvswitch-lspci-vvv.txt").read_text()
    p = LspciParser()
    for line in text.splitlines():
        p.line(line)
    heads = [ln for ln in text.splitlines() if ln[:1].isalnum() and ln[2:3] == ":"]
    assert len(p.entries) == len(heads) > 500
    assert p.functions() == () and p.without_ids == len(heads)
    cx7 = [e for e in p.entries if "ConnectX-7" in e.name and e.vpd_fields]
    assert len(cx7) == 8
    for e in cx7:
        assert e.vpd_end and e.vpd_checksum is True and e.driver == "mlx5_core"
        va = next(f.text for f in e.vpd_fields if f.keyword == "VA")
        assert "SMDL" not in parse_mellanox_field(va)


def test_the_committed_reports_are_what_compose_writes_from_the_corpus(tmp_path: Path) -> None:
    """tests/data/bugreports/compose.py, run on tests/data/corpus with the real lspci, writes
    exactly the committed composed reports (the public excerpt is not composed)."""
    need("lspci")
    runkit.run([sys.executable, str(DATA / "compose.py"), str(tmp_path)], check=True, timeout=300,
               text=False)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in DATA.glob("*.log*")
                             if not p.name.startswith("public-"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_nvidia_smi_failing_in_the_report_is_diagnosed() -> None:
    """The nvidia-smi block holding nvidia-smi's failure instead of the -q text: the
    catalogue's driver_not_loaded, named after that section; no GPU listed by the driver."""
    text = gzip.decompress(report("dgx-b200-healthy.log.gz").read_bytes()).decode()
    head, rest = text.split("/usr/bin/nvidia-smi --query\n\n", 1)
    rest = rest.split("/usr/bin/nvidia-smi --query --unit", 1)[1]
    failed = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.\n\n")
    data = head + "/usr/bin/nvidia-smi --query\n\n" + failed + \
        "/usr/bin/nvidia-smi --query --unit" + rest
    t = triage_stream(io.BytesIO(data.encode()), "smi failed")
    sections = {(f.code, f.fields["section"]) for f in t.findings}
    assert ("driver_not_loaded", "nvidia-smi --query") in sections
    assert t.verdict is not None and t.verdict.verdict == "unhealthy"
    assert t.exit_code == 1


def test_a_tree_simulated_from_a_version_mismatch_report_keeps_the_reported_version(
        tmp_path: Path) -> None:
    # the report's fabric manager is 530.30.02 on driver 535.x: a tree whose fake fabric
    # manager printed the driver's version would start where the reporter's node refused
    root = tmp_path / "sim"
    out, rc = run_json("simulate", "--from-bug-report",
                       str(report("hgx-h100-version-mismatch.log.gz")), str(root))
    assert rc == 0, out
    assert ("fabric manager version 530.30.02 from the report (the tree's nv-fabricmanager "
            "--version prints it)") in out["notes"]
    dry, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 1 and dry["result"] == "refused", dry
    [f] = [f for f in dry["findings"] if f["code"] == "version_mismatch"]
    assert f["fm_version"] == "530.30.02"


def test_fake_versions_carry_one_reported_version_and_say_so_otherwise() -> None:
    from nvfabric.triage.spec import fake_versions

    assert fake_versions({"fabricmanager": ("550.90.07",)}, "550.90.07")[0] == {
        "fm_version": "550.90.07"}
    keys, notes = fake_versions({"fabricmanager": ("550.54.15", "550.90.07"),
                                 "imex": ("580.1.2",)}, "550.90.07")
    assert keys == {"imex_version": "580.1.2"}
    assert any("versions 550.54.15, 550.90.07; not carried over" in n for n in notes)
    keys, notes = fake_versions({}, "550.90.07")
    assert keys == {} and notes == [
        "fabric manager: the report shows no version; the tree's is the driver's (550.90.07)"]

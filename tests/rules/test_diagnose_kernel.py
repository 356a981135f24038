"""Kernel fabric lines in every shape (D10-D12): SXids with and without a severity word and
the SXid catalogue as data, GPU NVLink Xids (74, 144-150, Xid 45 after one), the
nvidia-nvswitch version check, driver lines that repeat by the thousand, each public source
pattern (gpud, NVIDIA's catalogues) with the code it maps to, and UTF-16/UTF-32 logs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml

from nvfabric.model.findings import Finding
from nvfabric.rules.catalogue import lookup_table
from nvfabric.rules.diagnose import Classifier, LogValueError, classify_lines, classify_stream
from nvfabric.rules.logtext import LogEncodingError, detect_encoding
from tests.cases import CORPUS
from tests.conftest import REPO, run_cli, run_json

DATA = REPO / "src/nvfabric/data"
SXIDS = lookup_table("sxid")
XIDS = lookup_table("xid")
LOGS = CORPUS / "logs"
#: The SXid line of tests/data/corpus/logs/nvswitch-sxid-22013-dmesg-590.48.01.txt
SXID_NONFATAL = (LOGS / "nvswitch-sxid-22013-dmesg-590.48.01.txt").read_text().splitlines()[0]

SXID_CODE = {"fatal": ("nvswitch_fatal_error", "error"),
             "always_fatal": ("nvswitch_fatal_error", "error"),
             "nonfatal": ("nvswitch_nonfatal_error", "warning"),
             "other": ("nvswitch_nonfatal_error", "warning")}


def _only(lines: list[str], fabric: str | None = None) -> Finding:
    found = classify_lines(lines, fabric)
    assert len(found) == 1, [f.to_json() for f in found]
    return found[0]


def test_catalogue_files_carry_their_source() -> None:
    for name in ("sxid.yaml", "xid.yaml"):
        data = yaml.safe_load((DATA / name).read_text(encoding="utf-8"))
        assert "NVIDIA" in data["source"]
    assert {e["class"] for e in SXIDS.values()} == set(SXID_CODE)
    assert sorted(XIDS) == [74, 144, 145, 146, 147, 148, 149, 150]


@pytest.mark.parametrize("sxid", sorted(SXIDS))
def test_every_catalogued_sxid_without_severity_word_gets_its_class(sxid: int) -> None:
    line = (f"[Mon Mar  2 04:11:20 2026] nvidia-nvswitch0: SXid (PCI:0000:07:00.0): {sxid}, "
            "Data {0x00000000, 0x00000001}")
    f = _only([line])
    assert (f.code, f.severity) == SXID_CODE[SXIDS[sxid]["class"]]
    assert (f.fields["error"], f.fields["pci"]) == (sxid, "0000:07:00.0")
    assert f.fields["catalogue_name"] == SXIDS[sxid]["name"]
    assert str(sxid) in f.message


def test_unknown_sxid_is_a_warning_that_says_so() -> None:
    f = _only(["nvidia-nvswitch2: SXid (PCI:0000:0a:00.0): 99999, Data {0x1}"])
    assert (f.code, f.severity, f.fields["catalogue_class"]) == (
        "nvswitch_nonfatal_error", "warning", "unknown")
    assert "not in NVIDIA's SXid catalogue" in f.message


@pytest.mark.parametrize("prefix", [
    "", "[  117.984502] ", "[Tue Mar  3 07:00:01 2026] ",
    "Mar  3 07:00:01 gpu-node-07 kernel: ", "kern  :err   : 2026-03-03T07:00:01,118204+00:00 ",
    "2026-03-03T07:00:01.118204+00:00 gpu-node-07 kernel: ", "<3>",
])
@pytest.mark.parametrize(("tail", "code"), [
    (", Fatal, Link 17 LTSSM Fault Up", "nvswitch_fatal_error"),
    (", Non-fatal, Link 17 LTSSM Fault Up", "nvswitch_nonfatal_error"),
    (", Data {0x00000000, 0x00000010}", "nvswitch_fatal_error"),  # 20034 is fatal
])
def test_every_sxid_shape_is_an_nvswitch_error_with_number_and_pci(
        prefix: str, tail: str, code: str) -> None:
    f = _only([f"{prefix}nvidia-nvswitch5: SXid (PCI:0000:c5:00.0): 20034{tail}"])
    assert (f.code, f.fields["error"], f.fields["pci"]) == (code, 20034, "0000:c5:00.0")


def test_the_lines_severity_word_wins_over_the_catalogue() -> None:
    # 12028 is non-fatal in the catalogue; a line that says Fatal is fatal.
    f = _only(["nvidia-nvswitch3: SXid (PCI:0000:a7:00.0): 12028, Fatal, Link 3"])
    assert (f.code, f.severity) == ("nvswitch_fatal_error", "error")


@pytest.mark.parametrize("xid", sorted(XIDS))
@pytest.mark.parametrize(("word", "severity"), [("Fatal", "error"), ("Nonfatal", "warning"),
                                                ("", "error")])
def test_nvlink_xids_with_the_severity_the_line_prints(xid: int, word: str, severity: str
                                                       ) -> None:
    line = (f"Feb 09 21:40:06 node7 kernel: NVRM: Xid (PCI:0000:1b:00): {xid}, "
            f"LINK_EVT {word} XC0 i0 Link 10 (0x00000000 0x00000000)")
    f = _only([line])
    assert (f.code, f.severity, f.fields["xid"], f.fields["pci"]) == (
        "nvlink_xid_error", severity, xid, "0000:1b:00")
    assert f.fields["catalogue_name"] == XIDS[xid]["name"]
    assert "RMA" in f.hint and "reset" in f.hint


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 13, pid=88, name=python, Graphics Exception: ESR 0x50",
    "NVRM: Xid (PCI:0000:3b:00): 45, pid=88120, name=torchrun, Ch 00000004",
    "NVRM: Xid (PCI:0000:3b:00): 45, pid=88120, name=torchrun, Ch 00000004 caused by "
    "previous Xid 13",
    "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 74, Data {0x0}",
])
def test_other_xids_are_not_nvlink_xids(line: str) -> None:
    assert "nvlink_xid_error" not in {f.code for f in classify_lines([line])}


def test_xid_45_names_the_nvlink_xid_behind_it() -> None:
    f = _only(["NVRM: Xid (PCI:0000:43:00): 45, pid=88121, name=torchrun, Ch 00000009 caused "
               "by previous Xid 144"])
    assert (f.code, f.fields["xid"], f.fields["caused_by"]) == ("nvlink_xid_error", 45, 144)
    assert "NVLINK_SAW_ERROR" in f.message


KERNEL_MISMATCH = ("Mar 17 06:20:11 gpu-a kernel: nvidia-nvswitch: Version mismatch, kernel "
                   "version 535.183.01 user version 535.161.08")


@pytest.mark.parametrize(("fabric", "severity"), [
    ("nvswitch", "error"), ("nvlink5", "error"), (None, "error"), ("none", "info")])
def test_kernel_version_check_is_version_mismatch(fabric: str | None, severity: str) -> None:
    f = _only([KERNEL_MISMATCH], fabric)
    assert (f.code, f.severity) == ("version_mismatch", severity)
    assert (f.fields["kernel_version"], f.fields["user_version"]) == (
        "535.183.01", "535.161.08")


def test_lines_that_repeat_by_the_thousand_are_one_counted_finding_each() -> None:
    notify = b"[ 1062.%06d] NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi\n"
    rx = b"[ 12.%06d] NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx " \
         b"Detect Link mask!\n"
    data = b"".join(notify % i + (rx % i if i % 100 == 0 else b"") for i in range(12000))
    c = Classifier("mnnvl")
    classify_stream(c, io.BytesIO(data))
    by_code = {f.code: f for f in c.findings()}
    assert set(by_code) == {"imex_not_ready", "nvlink_training_warning"}
    assert by_code["imex_not_ready"].fields["count"] == 12000
    assert by_code["nvlink_training_warning"].fields["count"] == 120
    assert by_code["nvlink_training_warning"].severity == "warning"
    assert "link-training" in by_code["nvlink_training_warning"].hint


#: Each pattern a public tool or catalogue recognises, an example line of it, and the code
#: nvfabric maps it to. gpud: leptonai/gpud components/accelerator/nvidia/{fabric-manager/
#: log_matcher.go, sxid/kmsg.go, nvlink/kmsg.go, xid/kmsg.go} (the regexes as published);
#: FMUG: NVIDIA Fabric Manager User Guide; XIDCAT: NVIDIA Xid catalogue; DRA: IMEX daemon
#: lines of kubernetes-sigs/dra-driver-nvidia-gpu reports.
SOURCE_PATTERNS: list[tuple[str, str, str, str]] = [
    ("gpud fabricmanager_nvswitch_fatal_error", r".+detected NVSwitch fatal error (\d+)",
     "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on "
     "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33", "nvswitch_fatal_error"),
    ("gpud fabricmanager_nvswitch_non_fatal_error",
     r".+detected NVSwitch non-fatal error (\d+)",
     "[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid "
     "0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61",
     "nvswitch_nonfatal_error"),
    ("gpud fabricmanager_nvswitch_nvlink_failure",
     r".+failed to find the GPU handle \d+ in the multicast team .*",
     "[Sep 17 2024 06:01:46] [ERROR] [tid 1230079] failed to find the GPU handle "
     "5410063385821516767 in the multicast team request setup 6130285411925746235.",
     "multicast_team_failure"),
    ("gpud fabricmanager_nvswitch_topology_mismatch",
     r".*detected number of NVSwitches don't match with any supported system topology.*",
     "detected number of NVSwitches don't match with any supported system topology, aborting "
     "fabric manager", "nvswitch_topology_mismatch"),
    ("gpud fabricmanager_nvswitch_nothing_to_do", r".*NV_WARN_NOTHING_TO_DO.*",
     "request to query NVSwitch device information from NVSwitch driver failed with error:"
     "WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]", "fm_not_applicable"),
    ("gpud sxid kmsg (Fatal)", r"SXid.*?: (\d+),",
     "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 24007, Fatal, Link 60", "nvswitch_fatal_error"),
    ("gpud sxid kmsg (Non-fatal)", r"SXid.*?: (\d+),",
     "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 22013, Non-fatal, Link 60 Minion Link DLREQ "
     "interrupt", "nvswitch_nonfatal_error"),
    ("gpud sxid kmsg (data words; FMUG class)", r"SXid.*?: (\d+),",
     "nvidia-nvswitch3: SXid (PCI:0000:a7:00.0): 12028, Data {0x000002a0, 0x00bb2222}",
     "nvswitch_nonfatal_error"),
    ("gpud nvlink_post_rx_detect_failure (update)",
     r"NVRM: (?:knvlinkUpdatePostRxDetectLinkMask_[A-Za-z0-9_]+: Failed to update Rx Detect "
     r"Link mask!|knvlinkDiscoverPostRxDetLinks_[A-Za-z0-9_]+: Getting peer[0-9]+(?:'s)? "
     r"postRxDetLinkMask failed!)",
     "NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!",
     "nvlink_training_warning"),
    ("gpud nvlink_post_rx_detect_failure (peer)",
     r"NVRM: (?:knvlinkUpdatePostRxDetectLinkMask_[A-Za-z0-9_]+: Failed to update Rx Detect "
     r"Link mask!|knvlinkDiscoverPostRxDetLinks_[A-Za-z0-9_]+: Getting peer[0-9]+(?:'s)? "
     r"postRxDetLinkMask failed!)",
     "NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!",
     "nvlink_training_warning"),
    ("gpud xid kmsg + XIDCAT 74 NVLINK_ERROR", r"NVRM: Xid.*?: (\d+),",
     "NVRM: Xid (PCI:0000:1b:00): 74, pid=88120, name=torchrun, NVLink: fatal error detected "
     "on link 6(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "nvlink_xid_error"),
    *[(f"gpud xid kmsg + XIDCAT {x} {XIDS[x]['name']}", r"NVRM: Xid.*?: (\d+),",
       f"NVRM: Xid (PCI:0018:01:00): {x}, LINK_EVT Fatal XC0 i0 Link 04 (0x0 0x0)",
       "nvlink_xid_error") for x in range(144, 151)],
    ("XIDCAT 45 'follow other Xid'", r"NVRM: Xid.*?: (\d+),",
     "NVRM: Xid (PCI:0000:1b:00): 45, pid=88120, name=torchrun, Ch 00000004 caused by "
     "previous Xid 149", "nvlink_xid_error"),
    ("FMUG fabric manager version check",
     r"driver interface version \S+ don't match with driver version",
     "fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with driver "
     "version 530.41.03. Please update with matching NVIDIA driver package.",
     "version_mismatch"),
    ("nvidia-nvswitch kernel version check", r"Version mismatch, kernel version",
     "nvidia-nvswitch: Version mismatch, kernel version 535.183.01 user version 535.161.08",
     "version_mismatch"),
    ("DRA IMEX no local interface", r"No matching network interface found",
     "[Mar 21 2025 20:45:38] [ERROR] [tid 39] No matching network interface found for any IP "
     "addresses in the node configuration file", "imex_no_local_interface"),
    ("DRA IMEX session owned by another daemon", r"NV_ERR_IN_USE Failed to allocate Imex session",
     "NV_ERR_IN_USE Failed to allocate Imex session", "imex_session_in_use"),
    ("DRA IMEX memory export", r"Failed to get new memory reference",
     "[ERROR] Failed to get new memory reference with rc: 87", "imex_memory_export_failed"),
    ("driver IMEX notify (open-gpu-kernel-modules fabric.c)", r"Unable to notify ImexSessionApi",
     "NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi", "imex_not_ready"),
]


@pytest.mark.parametrize(("source", "regex", "line", "code"), SOURCE_PATTERNS,
                         ids=[s[0] for s in SOURCE_PATTERNS])
def test_each_public_source_pattern_maps_to_a_code(source: str, regex: str, line: str,
                                                   code: str) -> None:
    assert re.search(regex, line), f"{source}: the example is not of the source's pattern"
    assert code in {f.code for f in classify_lines([line])}, source


TEXT = ("Feb 09 21:40:06 node7 kernel: NVRM: Xid (PCI:0000:1b:00): 74, pid=1, NVLink: fatal "
        "error detected on link 6\r\nnvidia-nvswitch: Version mismatch, kernel version "
        "535.183.01 user version 535.161.08\r\n")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32",
                                      "utf-32-le", "utf-8-sig"])
def test_utf16_and_utf32_logs_are_decoded(encoding: str) -> None:
    raw = TEXT.encode(encoding) * 3
    c = Classifier("nvswitch")
    classify_stream(c, io.BytesIO(raw))
    found = {f.code: f for f in c.findings()}
    assert set(found) == {"nvlink_xid_error", "version_mismatch"}
    assert found["nvlink_xid_error"].fields["count"] == 3


def test_a_utf16_block_boundary_in_the_middle_of_a_character_is_harmless() -> None:
    raw = ("x" * (1 << 20) + "\n" + TEXT).encode("utf-16-le")
    c = Classifier("nvswitch")
    classify_stream(c, io.BytesIO(raw))
    assert {f.code for f in c.findings()} == {"nvlink_xid_error", "version_mismatch"}


@pytest.mark.parametrize("head", [b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00", b"\x00" * 64,
                                  b"PK\x03\x04\x14\x00\x00\x00\x08\x00"])
def test_binary_data_is_refused_not_read_as_no_findings(head: bytes) -> None:
    with pytest.raises(LogEncodingError):
        detect_encoding(head + b"\x00\x13\x88" * 100)
    if head.strip(b"\x00"):  # a run of NULs before text is padding (test below)
        with pytest.raises(LogEncodingError):
            classify_stream(Classifier(), io.BytesIO(head + TEXT.encode()))


@pytest.mark.parametrize("shape", ["copytruncate prefix", "prefix past the first block",
                                   "crash block mid-file", "crash block at the end"])
def test_nul_padding_in_a_utf8_log_is_dropped_not_a_refusal(shape: str) -> None:
    """logrotate's copytruncate leaves a log starting with NULs up to the writer's offset; a
    crash leaves NUL-filled blocks in a syslog. The text around them is read as it is (before:
    'holds NUL bytes ...: not a log file', exit 2, every finding lost)."""
    text = TEXT.encode()
    raw = {"copytruncate prefix": b"\x00" * 4000 + text,
           "prefix past the first block": b"\x00" * (3 << 20) + text,
           "crash block mid-file": text + b"\x00" * 4096 + text,
           "crash block at the end": text * 2 + b"\x00" * 4096}[shape]
    c = Classifier("nvswitch")
    classify_stream(c, io.BytesIO(raw))
    found = {f.code: f for f in c.findings()}
    assert set(found) == {"nvlink_xid_error", "version_mismatch"}
    assert found["nvlink_xid_error"].fields["count"] == (1 if "prefix" in shape else 2)
    assert "\x00" not in found["version_mismatch"].fields["line"]


def test_a_file_of_nul_bytes_only_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "zeros.log"
    log.write_bytes(b"\x00" * (1 << 20))
    output, rc = run_json("doctor", "--log", str(log))
    assert rc == 2 and "only NUL bytes" in output["error"]["message"]


def test_doctor_reads_a_utf16_log_and_refuses_a_binary_one(tmp_path: Path) -> None:
    log = tmp_path / "windows-copy.log"
    log.write_bytes(TEXT.encode("utf-16"))
    output, rc = run_json("doctor", "--log", str(log), "--fabric", "nvswitch")
    assert rc == 1
    assert {f["code"] for f in output["findings"]} == {"nvlink_xid_error", "version_mismatch"}
    core = tmp_path / "core"
    core.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    output, rc = run_json("doctor", "--log", str(core))
    assert rc == 2
    assert output["error"]["code"] == "input_unreadable"
    assert "not a log" in output["error"]["message"] and str(core) in output["error"]["message"]


@pytest.mark.parametrize("line", [
    "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): {n}, Data {{0x0}}",
    "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): {n}, Fatal, Link 1",
    "NVRM: Xid (PCI:0000:07:00): {n}, pid=1, NVLink: fatal error detected on link 1",
    "NVRM: Xid (PCI:0000:07:00): 45, pid=1, Ch 00000001 caused by previous Xid {n}",
    "[ERROR] Failed to get new memory reference with rc: {n}",
])
@pytest.mark.parametrize("digits", [21, 4303, 5000])
def test_a_line_with_a_number_no_log_prints_is_dropped_and_counted(line: str,
                                                                  digits: int) -> None:
    c = Classifier("nvswitch")
    c.feed(line.format(n="9" * digits))
    c.feed(SXID_NONFATAL)  # the log is read on
    assert c.dropped == {"bad_number": 1}
    assert [f.code for f in c.findings()] == ["nvswitch_nonfatal_error"]
    with pytest.raises(LogValueError, match=f"a number of {digits} digits"):
        c.match(line.format(n="9" * digits))  # the live watch counts its own drops


def test_twenty_digit_numbers_are_still_numbers() -> None:
    f = _only([f"nvidia-nvswitch0: SXid (PCI:0000:07:00.0): {'1' * 20}, Data {{0x0}}"])
    assert f.fields["error"] == int("1" * 20)


def test_doctor_drops_the_fuzzed_4303_digit_line_and_reads_the_rest(tmp_path: Path) -> None:
    fuzzed = (REPO / "tests/data/fuzz/doctor-4303-digit-rc.log").read_bytes()
    log = tmp_path / "fm.log"
    log.write_bytes(fuzzed + b"\n" + (LOGS / "fm-version-mismatch-530-gpuop544.txt").read_bytes())
    output, rc = run_json("doctor", "--log", str(log))
    assert rc == 1, output
    assert output["dropped"] == {"bad_number": 1}
    assert [f["code"] for f in output["findings"]] == ["version_mismatch"]
    text = run_cli("doctor", "--log", str(log)).stdout
    assert "1 line dropped unclassified: a number field no fabric log prints" in text

def test_one_xid_event_spelt_with_short_and_padded_hex_is_one_finding() -> None:
    """Case D16's 149.37 line, its words written 0x25001c6/0x0 by one tool and
    0x025001c6/0x00000000 by the driver: one finding counted twice, keyed by the values."""
    padded = ("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 "
              "(0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
    short = padded.replace("0x025001c6 0x00000000", "0x25001C6 0x0")
    (f,) = classify_lines([padded, short], "nvlink5")
    assert (f.fields["count"], f.fields["subcode"], f.fields["error_status"]) == (2, 37,
                                                                                "0x00000000")
    assert f.fields["intr_infos"] == ["0x025001c6"]

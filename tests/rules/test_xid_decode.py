"""NVLink 5 Xids (144-150) decoded per sub-code (D16): every row of NVIDIA's "XID 144-150
Decode" sheet (data/xid.yaml nvlink5_decode) through the classifier on a real-shaped kernel
line, one finding per decoded row with its count, unknown sub-codes, and the row parser."""

from __future__ import annotations

import pytest
import yaml

from nvfabric.rules import xid_decode
from nvfabric.rules.catalogue import decode_rows
from nvfabric.rules.diagnose import classify_lines
from nvfabric.rules.xid_decode import DecodeRow, parse_rows, subcode
from tests.conftest import REPO

ROWS = decode_rows()
LINE = ("Mar 02 04:11:20 gb200-t07 kernel: NVRM: Xid (PCI:0018:01:00): {xid}, {unit} {word} "
        "XC0 i0 Link {link} (0x{intr:08x} 0x{status:08x} 0x00000000 0x00000000 0x00000000 "
        "0x00000000)")


def _sample(pattern: str) -> int:
    """An intrInfo word that fits ``pattern`` ('-' bits set to 0)."""
    return int(pattern.replace("-", "0"), 2)


def _line(row: DecodeRow, pattern: str, link: int = 4, word: str | None = None) -> str:
    word = word or ("Nonfatal" if row.severity.startswith("Non") else "Fatal")
    return LINE.format(xid=row.xid, unit=row.unit.split("/")[0], word=word, link=link,
                       intr=_sample(pattern), status=row.error_status)


def test_the_decode_sheet_is_data_with_its_source() -> None:
    data = yaml.safe_load((REPO / "src/nvfabric/data/xid.yaml").read_text(encoding="utf-8"))
    assert "XID 144-150 Decode" in data["nvlink5_decode_source"]
    assert len(ROWS) == len(data["nvlink5_decode"]) == 94
    assert {r.xid for r in ROWS} == set(range(144, 151))


@pytest.mark.parametrize(("intr", "code"), [(0x025001C6, 37), (0x026001C6, 38),
                                            (0x004505C6, 4), (0x00000001, 0)])
def test_subcode_is_bits_25_to_20_of_intr_info(intr: int, code: int) -> None:
    assert subcode(intr) == code


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.xid}-{r.unit}-{subcode(_sample(r.patterns[0]))}"
                                           f"-{r.error_status:#x}" for r in ROWS])
@pytest.mark.parametrize("layout", [0, 1], ids=["older-layout", "newer-layout"])
def test_every_decode_row_gives_its_severity_and_actions(row: DecodeRow, layout: int) -> None:
    (f,) = classify_lines([_line(row, row.patterns[layout])], "nvlink5")
    # Rows of the older layout that differ only in the newer one (TLW_RX pipe 0 and 1) give
    # the same actions; compare what the sheet says, not which of them matched.
    assert (f.code, f.severity) == ("nvlink_xid_error", row.finding_severity)
    assert (f.fields["xid"], f.fields["subcode"], f.fields["subcode_known"]) == (
        row.xid, subcode(_sample(row.patterns[layout])), True)
    assert (f.fields["immediate_action"], f.fields["investigatory_action"],
            f.fields["catalogue_severity"]) == (row.immediate, row.investigatory, row.severity)
    assert f.fields["immediate_action"] in f.message and f.fields["investigatory_action"] in f.hint
    assert f.fields["links"] == [4] and f.fields["count"] == 1


@pytest.mark.parametrize(("immediate", "investigatory", "severity", "expected"), [
    ("RESET_GPU", "INVESTIGATE_PEER_DEVICE", "Link Fatal", "error"),
    ("RESET_GPU", "CONTACT_SUPPORT", "Fatal", "error"),
    ("IGNORE", "INVESTIGATE_HOST", "Fatal", "error"),
    ("IGNORE", "INVESTIGATE_SW/USER", "Link Fatal", "warning"),
    ("IGNORE", "CONTACT_SUPPORT", "Non-fatal", "warning"),
    ("XID_154_EVAL", "CHECK_NVLINK_FAILURE_FLOW", "Non-fatal", "warning"),
    ("IGNORE", "IGNORE", "Non-fatal", "info"),
])
def test_finding_severity_of_a_row(immediate: str, investigatory: str, severity: str,
                                   expected: str) -> None:
    row = DecodeRow(149, "X", ("-" * 32,), 0, immediate, investigatory, None, severity, "",
                    "", "")
    assert row.finding_severity == expected


CASE_D16 = [
    "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 "
    "0x00000000 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 "
    "0x00000000 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 "
    "0x00000000 0x00000000 0x00000000 0x00000000)",
]


def test_lines_that_decode_differently_are_never_merged() -> None:
    found = classify_lines(CASE_D16, "nvlink5")
    got = [(f.fields["xid"], f.fields["subcode"], f.severity, f.fields["immediate_action"],
            f.fields["investigatory_action"], f.fields["count"]) for f in found]
    assert got == [(144, 0, "warning", "IGNORE", "CONTACT_SUPPORT", 1),
                   (149, 38, "warning", "IGNORE", "INVESTIGATE_SW/USER", 1),
                   (149, 37, "error", "RESET_GPU", "INVESTIGATE_PEER_DEVICE", 1)]
    peer = found[2]
    assert "other end of the link" in peer.hint and "reset" in peer.hint
    assert "RMA" not in found[1].hint.replace("no RMA", "")


def test_one_row_on_several_links_is_one_counted_finding() -> None:
    lines = [CASE_D16[2].replace("Link 00", f"Link {n:02d}").replace("0x025001c6", intr)
             for n, intr in ((0, "0x025001c6"), (4, "0x025005c6"), (4, "0x025001c6"))]
    (f,) = classify_lines(lines, "nvlink5")
    assert (f.fields["subcode"], f.fields["count"], f.fields["links"]) == (37, 3, [0, 4])
    assert f.fields["intr_infos"] == ["0x025001c6", "0x025005c6"]


@pytest.mark.parametrize(("word", "severity"), [("Fatal", "error"), ("Nonfatal", "warning")])
def test_a_subcode_the_sheet_lacks_keeps_the_lines_severity_and_says_so(word: str,
                                                                         severity: str) -> None:
    line = CASE_D16[2].replace("0x025001c6", "0x007001c6").replace("Fatal", word)  # sub-code 7
    (f,) = classify_lines([line], "nvlink5")
    assert (f.code, f.severity, f.fields["subcode"], f.fields["subcode_known"]) == (
        "nvlink_xid_error", severity, 7, False)
    assert "not in NVIDIA's decode table" in f.message
    assert f.fields["catalogue_name"] == "NVLINK_NETIR_ERROR" and "RMA" in f.hint
    assert "immediate_action" not in f.fields


def test_a_unit_the_hex_words_do_not_name_is_not_decoded() -> None:
    line = CASE_D16[2].replace("NETIR_LINK_EVT", "SAW_MVB")
    (f,) = classify_lines([line], "nvlink5")
    assert (f.fields["subcode_known"], f.severity) == (False, "error")


def test_the_line_with_the_process_that_hit_it_is_decoded() -> None:
    line = CASE_D16[2].replace("149, ", "149, pid=88120, name=torchrun, ")
    (f,) = classify_lines([line], "nvlink5")
    assert (f.fields["subcode"], f.fields["immediate_action"]) == (37, "RESET_GPU")


def test_lines_without_the_hex_words_keep_todays_reading() -> None:
    line = "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 04"
    (f,) = classify_lines([line], "nvlink5")
    assert (f.severity, f.fields["signature"]) == ("error", "xid-nvlink")
    assert "subcode" not in f.fields


@pytest.mark.parametrize(("change", "match"), [
    ({"intr_info": ["0101"]}, "32 characters"),
    ({"intr_info": ["x" * 32]}, "32 characters"),
    ({"immediate": "PRAY"}, "glossary"),
])
def test_malformed_rows_are_refused(change: dict[str, object], match: str) -> None:
    data = yaml.safe_load((REPO / "src/nvfabric/data/xid.yaml").read_text(encoding="utf-8"))
    data["nvlink5_decode"] = [{**data["nvlink5_decode"][0], **change}]
    with pytest.raises(ValueError, match=match):
        parse_rows(data)


def test_decode_is_pure_over_the_table_it_is_given() -> None:
    row = DecodeRow(150, "MSE_WATCHDOG", ("0" * 32,), 0, "RESET_GPU", "CONTACT_SUPPORT", None,
                    "Fatal", "Local: Fatal", "reset", "ask")
    cls, fields = xid_decode.decode((row,), 150, "MSE_WATCHDOG", 0, 0, "Fatal")
    assert (cls, fields["immediate_hint"], fields["catalogue_effect"]) == (
        "error", "reset", "Local: Fatal")
    assert xid_decode.decode((), 150, "MSE_WATCHDOG", 0, 0, "Nonfatal")[0] == "unknown_nonfatal"


def _bit_rows(xid: int, unit: str, intr: int) -> dict[int, DecodeRow]:
    """Single-bit errorStatus rows of one (Xid, unit, intrInfo), by bit."""
    return {r.error_status: r for r in ROWS
            if r.matches(xid, unit, intr, r.error_status) and bin(r.error_status).count("1") == 1}


# (Xid, unit, intrInfo): events whose errorStatus bits each have a row of the sheet.
MULTI = [(144, "SAW_MVB", 0x00000021)]


@pytest.mark.parametrize(("xid", "unit", "intr"), MULTI)
def test_an_error_status_of_several_bits_is_decoded_bit_by_bit(xid: int, unit: str,
                                                               intr: int) -> None:
    """errorStatus is a bit mask: 0x12 is the events 0x10 and 0x02 at once; the heaviest
    bit's row decides, every bit is named, and a bit no row names is said."""
    rows = _bit_rows(xid, unit, intr)
    bits = sorted(rows)[:2]
    assert len(bits) == 2, "the sheet holds two single-bit rows for this event"
    status = bits[0] | bits[1]
    assert not any(r.matches(xid, unit, intr, status) for r in ROWS)  # no row of the whole word
    line = LINE.format(xid=xid, unit=unit, word="Nonfatal", link=0, intr=intr, status=status)
    (f,) = classify_lines([line], "nvlink5")
    heaviest = max((rows[b] for b in bits), key=lambda r: ("info", "warning", "error").index(
        r.finding_severity))
    assert (f.severity, f.fields["subcode_known"], f.fields["immediate_action"]) == (
        heaviest.finding_severity, True, heaviest.immediate)
    assert [b.split(":")[0] for b in f.fields["error_bits"]] == [f"0x{b:08x}" for b in bits]
    assert "unknown_error_bits" not in f.fields
    stray = 1 << 30  # a bit the sheet gives no row for this event
    assert stray not in rows
    line = LINE.format(xid=xid, unit=unit, word="Nonfatal", link=0, intr=intr,
                       status=status | stray)
    (f,) = classify_lines([line], "nvlink5")
    assert f.fields["unknown_error_bits"] == f"0x{stray:08x}"
    assert f.severity == heaviest.finding_severity


def test_a_row_of_a_combined_error_status_wins_over_its_bits() -> None:
    """The sheet lists some combinations (errorStatus 0x3, 0x5, 0x7): their own row decodes."""
    combined = [r for r in ROWS if bin(r.error_status).count("1") > 1]
    assert combined
    for row in combined:
        pattern = row.patterns[0]
        decoded, fields = xid_decode.decode(ROWS, row.xid, row.unit.split("/")[0],
                                            _sample(pattern), row.error_status, "Fatal")
        assert (decoded, fields["immediate_action"]) == (row.finding_severity, row.immediate)
        assert "error_bits" not in fields

"""NVLink 5 Xids (144-150) decoded per sub-code: the kernel line's unit, intrInfo and
errorStatus words -> the row of NVIDIA's "XID 144-150 Decode" sheet that gives that event its
severity and its two resolution buckets (immediate and investigatory action).

Line shape (tests/data/cases D11, D16; open-gpu-kernel-modules prints it for Blackwell GPUs)::

    NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 ...)

The first hex word is intrInfo: its low bits name the unit, bits 25..20 are the sub-code
(0x025001c6 -> 37); the second is errorStatus. A row matches when the line's unit is one of the
row's names, errorStatus is the row's and intrInfo fits one of the row's two bit patterns (the
older and the newer driver's layout). The rows are data (data/xid.yaml ``nvlink5_decode``, with
their source); this module parses and matches them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nvfabric.model.vocab import SEVERITIES, Severity

#: The bits of intrInfo that hold the sub-code (NVIDIA Xid catalogue, "XID 144-150 Decode").
SUBCODE_SHIFT = 20
SUBCODE_MASK = 0x3F

#: Immediate actions that leave the GPU in service (the catalogue's IGNORE, and XID_154_EVAL:
#: watch whether the driver follows with Xid 154 "GPU recovery action changed").
_KEEP_RUNNING = frozenset({"IGNORE", "XID_154_EVAL"})


@dataclass(frozen=True)
class DecodeRow:
    """One row of the decode sheet: the Xid, its unit names, the two intrInfo bit patterns
    (32 characters, bit 31 first, ``-`` any bit), errorStatus, the two resolution buckets, a
    second immediate action where the sheet gives one (``then``), the sheet's severity word,
    its local/remote effect, and the two buckets in plain words (data/xid.yaml ``buckets``)."""

    xid: int
    unit: str
    patterns: tuple[str, ...]
    error_status: int
    immediate: str
    investigatory: str
    then: str | None
    severity: str
    effect: str
    immediate_words: str
    investigatory_words: str

    @property
    def units(self) -> frozenset[str]:
        return frozenset(self.unit.split("/"))

    def matches(self, xid: int, unit: str, intr_info: int, error_status: int) -> bool:
        return (xid == self.xid and error_status == self.error_status
                and bool(self.units & set(unit.split("/")))
                and any(_fits(p, intr_info) for p in self.patterns))

    @property
    def finding_severity(self) -> Severity:
        """The finding's severity for this row: ``error`` when the catalogue's immediate action
        takes the GPU out of service (RESET_GPU) or its severity is Fatal; ``info`` when both
        buckets say IGNORE; ``warning`` otherwise (the event is survivable but something is to
        be looked at: a peer, the host, the software, a link's signal integrity)."""
        if self.immediate not in _KEEP_RUNNING or self.severity.startswith("Fatal"):
            return "error"
        if self.immediate == "IGNORE" and self.investigatory == "IGNORE":
            return "info"
        return "warning"


def _fits(pattern: str, value: int) -> bool:
    for index, bit in enumerate(pattern):
        have = (value >> (31 - index)) & 1
        if (bit == "1" and not have) or (bit == "0" and have):
            return False
    return True


def subcode(intr_info: int) -> int:
    """Bits 25..20 of intrInfo (0x025001c6 -> 37)."""
    return (intr_info >> SUBCODE_SHIFT) & SUBCODE_MASK


def parse_rows(data: Mapping[str, Any]) -> tuple[DecodeRow, ...]:
    """The ``nvlink5_decode`` rows of data/xid.yaml as :class:`DecodeRow` values. ValueError
    for a row that is not well formed (a pattern of the wrong length, a bad hex word, a bucket
    the ``buckets`` glossary lacks)."""
    rows = []
    words = {str(k): str(v) for k, v in data["buckets"].items()}
    for raw in data["nvlink5_decode"]:
        patterns = tuple(str(p) for p in raw["intr_info"])
        if not patterns or any(len(p) != 32 or set(p) - set("01-") for p in patterns):
            raise ValueError(f"xid {raw['xid']} {raw['unit']}: intr_info patterns must be 32 "
                             "characters of 0, 1 and -")
        if raw["immediate"] not in words or raw["investigatory"] not in words:
            raise ValueError(f"xid {raw['xid']} {raw['unit']}: a bucket the glossary lacks")
        rows.append(DecodeRow(
            xid=int(raw["xid"]), unit=str(raw["unit"]), patterns=patterns,
            error_status=int(str(raw["error_status"]), 16),
            immediate=str(raw["immediate"]), investigatory=str(raw["investigatory"]),
            then=str(raw["then"]) if raw.get("then") else None,
            severity=str(raw["severity"]), effect=str(raw["effect"]),
            immediate_words=words[raw["immediate"]],
            investigatory_words=words[raw["investigatory"]]))
    return tuple(rows)


Decoded = Literal["error", "warning", "info", "unknown_fatal", "unknown_nonfatal"]


#: Every field :func:`decode` may add to a finding (what a catalogue hint may name).
DECODED_FIELDS = frozenset({
    "subcode", "error_status", "subcode_known", "immediate_action", "investigatory_action",
    "then_action", "immediate_hint", "investigatory_hint", "catalogue_severity",
    "catalogue_unit", "catalogue_effect", "error_bits", "unknown_error_bits"})


def decode(table: tuple[DecodeRow, ...], xid: int, unit: str, intr_info: int, error_status: int,
           severity_word: str | None) -> tuple[Decoded, dict[str, Any]]:
    """The class of an NVLink 5 Xid event by the decode rows ``table`` (the shipped ones:
    :func:`nvfabric.rules.catalogue.decode_rows`) and the fields its finding carries.

    The class is the row's finding severity (``error``, ``warning``, ``info``); for an event no
    row decodes it is ``unknown_fatal`` or ``unknown_nonfatal`` after the line's own severity
    word, so that such a line keeps the severity it prints. Fields: ``subcode``,
    ``error_status`` (``0x%08x``), ``subcode_known``, and for a decoded row
    ``immediate_action``, ``investigatory_action`` (``then_action`` where the sheet gives one),
    the two in plain words (``immediate_hint``, ``investigatory_hint``), ``catalogue_severity``,
    ``catalogue_unit``, ``catalogue_effect``; for an errorStatus decoded bit by bit
    (:func:`_rows`) the heaviest bit's row, ``error_bits`` (each bit's row in words) and
    ``unknown_error_bits`` (the bits no row names, when some)."""
    fields: dict[str, Any] = {"subcode": subcode(intr_info),
                              "error_status": f"0x{error_status:08x}"}
    rows = _rows(table, xid, unit, intr_info, error_status)
    if rows:
        row = max(rows, key=lambda r: SEVERITIES.index(r.finding_severity))  # heaviest bit
        fields.update(subcode_known=True, immediate_action=row.immediate,
                      investigatory_action=row.investigatory,
                      immediate_hint=row.immediate_words,
                      investigatory_hint=row.investigatory_words,
                      catalogue_severity=row.severity, catalogue_unit=row.unit,
                      catalogue_effect=row.effect)
        if row.then:
            fields["then_action"] = row.then
        if len(rows) > 1 or rows[0].error_status != error_status:
            fields["error_bits"] = tuple(
                f"0x{r.error_status:08x}: {r.severity}, immediate action {r.immediate}, "
                f"investigate {r.investigatory}" for r in rows)
            unknown = error_status & ~_bits_of(rows)
            if unknown:
                fields["unknown_error_bits"] = f"0x{unknown:08x}"
        return row.finding_severity, fields
    fields["subcode_known"] = False
    fatal = (severity_word or "").lower() == "fatal"
    return ("unknown_fatal" if fatal else "unknown_nonfatal"), fields


def _rows(table: tuple[DecodeRow, ...], xid: int, unit: str, intr_info: int,
          error_status: int) -> list[DecodeRow]:
    """The rows that decode an event: the row of its whole errorStatus word when the sheet has
    one (it lists some combinations, e.g. 0x3), else the row of each set bit that has one
    (errorStatus is a bit mask: 0x12 is the events 0x10 and 0x2 at once). Empty: none."""
    for row in table:
        if row.matches(xid, unit, intr_info, error_status):
            return [row]
    found = []
    for bit in (1 << i for i in range(32)):
        if error_status & bit and error_status != bit:
            found += [r for r in table if r.matches(xid, unit, intr_info, bit)][:1]
    return found


def _bits_of(rows: list[DecodeRow]) -> int:
    out = 0
    for row in rows:
        out |= row.error_status
    return out

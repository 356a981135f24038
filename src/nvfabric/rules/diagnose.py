"""Diagnosis: fabric manager, start script, NVLSM/OpenSM, IMEX, NCCL and kernel log lines ->
Findings of the shared catalogue, each with a concrete hint.

:class:`Classifier` keeps state bounded by the catalogue, not by the input: repeated lines are
one finding with a ``count`` and ``first_seen``/``last_seen``; at most :data:`MAX_KEYS`
distinct findings per signature, at most :data:`MAX_COLLECT` values per collected field.
:func:`classify_stream` reads a binary stream in blocks and hands the classifier only the lines
that contain a needle, so memory stays constant and throughput stays high on large logs.

The catalogue and its lookups are :mod:`nvfabric.rules.catalogue`; decoding log bytes
(encodings, NUL padding, needle scanning) is :mod:`nvfabric.rules.logtext`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from nvfabric.model.commandline import HINT_PLACEHOLDERS, HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.strict import int_or_none
from nvfabric.model.vocab import FABRIC_KINDS, FabricKind
from nvfabric.rules.catalogue import (
    Outcome,
    Signature,
    catalogue,
    look_up,
)
from nvfabric.rules.logtext import (
    LogInputError,
    needle_lines,
    utf8_blocks,
)

MAX_KEYS = 64
#: Catalogue lookups a classifier keeps (by signature and the values a line carries).
MAX_LOOKUPS = 4096
MAX_COLLECT = 32
MAX_EXAMPLE = 300
BLOCK = 1 << 20
MAX_LINE = 1 << 20
#: Characters of a line the signatures' patterns are searched in: no fabric component writes
#: longer lines (printk's are under 1,024 bytes, fabric manager's, NVLSM's and IMEX's under
#: 512), and a number too long for a log (:data:`MAX_DIGITS`) is still seen whole up to
#: thousands of digits. A pattern such as ``A .* B`` costs the square of the text it searches
#: when ``A`` repeats without ``B`` (a 200 KB line: 0.5 s): bounded here, the time stays
#: linear in the log whatever its lines.
MAX_MATCH = 8192


#: The longest number a fabric log field holds (64-bit handles print 20 digits); longer ones
#: are not a log's (and past 4,300 digits ``int()`` itself refuses them).
MAX_DIGITS = 20


class LogValueError(LogInputError):
    """A value in a log line that no fabric log prints (a number of thousands of digits)."""


#: Why :meth:`Classifier.feed` dropped a line (the ``dropped`` key -> the words for it).
DROP_REASONS = {
    "bad_number": "a number field no fabric log prints (more than 20 digits, or not ASCII "
                  "digits)",
}


def _hex(value: str, sig: str, name: str) -> str:
    """A hex field written one way: ``0x`` and at least 8 lower-case digits (``0x0`` and
    ``0x00000000`` are one value); :class:`LogValueError` past 16 digits (64 bits) or for a
    character that is no ASCII hex digit."""
    digits = value[2:] if value[:2] in ("0x", "0X") else value
    if not 0 < len(digits) <= 16 or not digits.isascii() or \
            digits.strip("0123456789abcdefABCDEF"):
        raise LogValueError(f"{value[:40]!r} in a line of the {sig} kind (field {name}) is not "
                            "a hex number of at most 64 bits")
    return f"0x{int(digits, 16):08x}"


def _typed(sig: Signature, name: str, value: str) -> Any:
    """An extracted field as the finding carries it: an int field a number, a hex field in
    its one spelling (:func:`_hex`), another the text."""
    if name in sig.int_fields:
        return _number(value, sig.id, name)
    if name in sig.hex_fields:
        return _hex(value, sig.id, name)
    return value


def _number(value: str, sig: str, name: str) -> int:
    """An extracted integer field; :class:`LogValueError` past :data:`MAX_DIGITS` digits."""
    if len(value) > MAX_DIGITS:
        raise LogValueError(
            f"a number of {len(value)} digits in a line of the {sig} kind (field {name}); "
            f"fabric logs print at most {MAX_DIGITS}: not a real log line")
    number = int_or_none(value, signed=True)  # ASCII digits only (nvfabric.model.strict)
    if number is None:
        raise LogValueError(f"{value!r} in a line of the {sig} kind (field {name}) is not "
                            "a number (ASCII digits)")
    return number


#: Timestamp forms, most precise first (fabric manager/IMEX, ISO, talos, syslog/journal, dmesg).
TIMESTAMPS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\[([A-Z][a-z]{2} \d{1,2} \d{4} \d\d:\d\d:\d\d)\]"),
    re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"),
    re.compile(r"(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)"),
    re.compile(r"^(\S{1,5} {1,2}\d{1,2} \d\d:\d\d:\d\d)\b"),
    re.compile(r"^\[\s*(\d+\.\d+)\]"),
)


def timestamp(line: str) -> str | None:
    """The line's timestamp as printed, or None (``journalctl -o cat`` lines have none)."""
    for pattern in TIMESTAMPS:
        m = pattern.search(line)
        if m:
            return m.group(1)
    return None


class _Format(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


class _Placeholder:
    """A hint placeholder (:data:`HINT_PLACEHOLDERS`) as ``str.format_map`` sees it: what
    follows its colon comes to :meth:`__format__` (its fields already filled in)."""

    __slots__ = ("ctx", "name")

    def __init__(self, ctx: HintContext, name: str) -> None:
        self.ctx, self.name = ctx, name

    def __format__(self, spec: str) -> str:
        return self.ctx.placeholder(self.name, spec)


def render_hint(hint: str, values: Mapping[str, Any], ctx: HintContext) -> str:
    """A catalogue hint with its fields (``values``; ``?`` for one the line did not give)
    and its placeholders (:data:`HINT_PLACEHOLDERS`, rendered for the node ``ctx``) filled
    in: typed as printed, its commands and paths act on that node."""
    return hint.format_map(_Format(values, **{n: _Placeholder(ctx, n)
                                              for n in HINT_PLACEHOLDERS}))


@dataclass
class _Entry:
    outcome: Outcome
    signature: str
    fields: dict[str, Any]
    collected: dict[str, list[Any]]
    count: int = 0
    first_seen: str | None = None
    last_seen: str | None = None
    line: str = ""

    def finding(self, ctx: HintContext) -> Finding:
        values = {**self.fields, **{k: v[0] for k, v in self.collected.items() if v}}
        extra: dict[str, Any] = dict(self.fields)
        for key, vals in self.collected.items():
            extra[key + "s"] = sorted(vals)
        extra.update(count=self.count, signature=self.signature, line=self.line)
        if self.first_seen is not None:
            extra.update(first_seen=self.first_seen, last_seen=self.last_seen)
        o = self.outcome
        assert o.code is not None
        return Finding(o.code, o.severity, o.message.format_map(_Format(values)),
                       render_hint(o.hint, values, ctx), extra)


class Classifier:
    """Feed lines, get findings. ``fabric``: the node's fabric kind (none, nvswitch, nvlink5,
    mnnvl) or None when unknown; ``signatures`` defaults to the shipped catalogue; ``hints``:
    the node the findings' hints type commands and paths for (:func:`render_hint`; default
    the node itself, nothing known of who runs its daemons).

    :meth:`feed` returns the findings a line causes for the first time (a repeat only updates
    the count); :meth:`findings` returns everything so far, aggregated, in order of first
    appearance.
    """

    def __init__(
        self, fabric: FabricKind | None = None,
        signatures: tuple[Signature, ...] | None = None,
        hints: HintContext | None = None,
    ) -> None:
        if fabric is not None and fabric not in FABRIC_KINDS:
            raise ValueError(f"unknown fabric kind {fabric!r}")
        self.fabric = fabric
        self.hints = hints if hints is not None else HintContext()
        self.signatures = catalogue() if signatures is None else signatures
        self.needles = tuple({s.needle for s in self.signatures})
        #: What the block scanner looks for: a signature's ``scan`` regex where it has one,
        #: else its needle (bytes); a needle shared with a signature without ``scan`` stays.
        plain = {s.needle for s in self.signatures if s.scan is None}
        self.scanners: tuple[bytes | re.Pattern[bytes], ...] = (
            *sorted(n.encode() for n in plain),
            *{s.scan.pattern: s.scan for s in self.signatures
              if s.scan is not None and s.needle not in plain}.values(),
        )
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self._per_signature: dict[str, int] = {}
        self._lookups: dict[tuple[Any, ...], tuple[Outcome, dict[str, Any]]] = {}
        self.lines = 0
        #: Lines dropped unclassified, by reason (:data:`DROP_REASONS`).
        self.dropped: dict[str, int] = {}

    def feed(self, line: str) -> list[Finding]:
        """Classify one line (trailing newline optional; its first :data:`MAX_MATCH`
        characters). A line with a value no fabric log prints (:class:`LogValueError`) is
        dropped, counted in :attr:`dropped`; the rest of the log is read."""
        self.lines += 1
        try:
            matches = self._matches(line)
            for sig, _, m, extra in matches:  # every value read before any is recorded
                self._fields(sig, m, extra)
        except LogValueError:
            self.dropped["bad_number"] = self.dropped.get("bad_number", 0) + 1
            return []
        new = [entry for sig, outcome, m, extra in matches
               if (entry := self._record(sig, outcome, m, line, extra)) is not None]
        return [e.finding(self.hints) for e in new]

    def match(self, line: str) -> list[Finding]:
        """The findings of ``line`` alone, each time it is given (``count`` 1), remembering
        nothing: what :meth:`feed` would report for it in a log of that one line. The live
        kernel watch counts repeats, and drops, itself (:mod:`nvfabric.supervisor.kernelwatch`):
        :class:`LogValueError` for a line :meth:`feed` would drop."""
        out = []
        for sig, outcome, m, extra in self._matches(line):
            fields, collected = self._fields(sig, m, extra)
            entry = _Entry(outcome, sig.id, fields, {k: [v] for k, v in collected.items()},
                           count=1, line=line.rstrip("\r\n")[:MAX_EXAMPLE])
            entry.first_seen = entry.last_seen = timestamp(line)
            out.append(entry.finding(self.hints))
        return out

    def _matches(self, line: str
                 ) -> list[tuple[Signature, Outcome, re.Match[str], dict[str, Any]]]:
        """Every signature ``line`` matches with the outcome it has on this fabric kind, one
        per finding code (the first signature of a code wins)."""
        found = []
        codes: set[str] = set()
        text = line if len(line) <= MAX_MATCH else line[:MAX_MATCH]
        for sig in self.signatures:
            if sig.needle not in text:
                continue
            m = sig.pattern.search(text)
            if m is None:
                continue
            outcome = sig.outcome(self.fabric)
            extra: dict[str, Any] = {}
            if sig.lookup is not None:
                outcome, extra = self._look_up(sig, outcome, m)
            if outcome.code is None or outcome.code in codes:
                continue
            codes.add(outcome.code)
            found.append((sig, outcome, m, extra))
        return found

    def _look_up(self, sig: Signature, outcome: Outcome, m: re.Match[str]
                 ) -> tuple[Outcome, dict[str, Any]]:
        """The outcome and the catalogue fields for what the line carries (a number, a CUDA
        result's text, an NVLink 5 Xid's hex words). Kept for the next line that carries the
        same (a flood repeats one line; an NVLink 5 decode walks the whole sheet): at most
        :data:`MAX_LOOKUPS` answers."""
        assert sig.lookup is not None
        values = {name: _typed(sig, name, value)
                  for name, value in m.groupdict().items() if value is not None}
        key = (sig.id, tuple(sorted(values.items())))
        known = self._lookups.get(key)
        if known is None:
            cls, extra = look_up(sig.lookup, values)
            if len(self._lookups) >= MAX_LOOKUPS:
                self._lookups.clear()
            known = self._lookups[key] = (sig.lookup.by_class.get(cls, outcome), extra)
        return known[0], dict(known[1])

    def _record(
        self, sig: Signature, outcome: Outcome, m: re.Match[str], line: str,
        extra: Mapping[str, Any] | None = None,
    ) -> _Entry | None:
        fields, collected = self._fields(sig, m, extra)
        key: tuple[Any, ...] = (outcome.code, tuple(sorted(fields.items())))
        entry = self._entries.get(key)
        created = entry is None
        if entry is None:
            if self._per_signature.get(sig.id, 0) >= MAX_KEYS:
                key = (outcome.code, sig.id, "overflow")
                entry = self._entries.get(key)
                fields = {"overflow": True}
                created = entry is None
            if entry is None:
                self._per_signature[sig.id] = self._per_signature.get(sig.id, 0) + 1
                entry = _Entry(outcome, sig.id, fields, {c: [] for c in sig.collect},
                               line=line.rstrip("\r\n")[:MAX_EXAMPLE])
                self._entries[key] = entry
        entry.count += 1
        for name, value in collected.items():
            vals = entry.collected.setdefault(name, [])
            if value not in vals and len(vals) < MAX_COLLECT:
                vals.append(value)
        ts = timestamp(line)
        if ts is not None:
            if entry.first_seen is None:
                entry.first_seen = ts
            entry.last_seen = ts
        return entry if created else None

    @staticmethod
    def _fields(sig: Signature, m: re.Match[str], extra: Mapping[str, Any] | None
                ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The finding's fields of a match (the signature's constants, the lookup's, the
        extracted values) and its collected values (:attr:`Signature.collect`)."""
        fields: dict[str, Any] = {**sig.set_fields, **(extra or {})}
        collected: dict[str, Any] = {}
        for name, value in m.groupdict().items():
            if value is None:
                continue
            typed = _typed(sig, name, value)
            if name in sig.collect:
                collected[name] = typed
            else:
                fields[name] = typed
        return fields, collected

    def findings(self) -> list[Finding]:
        """Every finding so far, one per distinct (code, fields), in order of appearance."""
        return [e.finding(self.hints) for e in self._entries.values()]


def classify_stream(classifier: Classifier, stream: IO[bytes]) -> int:
    """Feed a binary stream to ``classifier`` in blocks of :data:`BLOCK` bytes; only lines that
    contain a needle are decoded and fed (the result is the same as feeding every line). Memory
    is bounded by the block size and :data:`MAX_LINE` (longer lines are cut). UTF-16/UTF-32
    logs are transcoded first (:func:`detect_encoding`; raises :class:`LogEncodingError` for a
    stream that is not text). Returns the bytes scanned (as UTF-8).
    """
    needles = classifier.scanners
    carry = b""
    total = 0
    blocks = utf8_blocks(stream, BLOCK)
    while True:
        block = next(blocks, b"")
        total += len(block)
        if not block:
            if carry:
                _scan(classifier, carry + b"\n", needles)
            return total
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data if len(data) < MAX_LINE else data[:MAX_LINE]
            continue
        _scan(classifier, data[: cut + 1], needles)
        carry = data[cut + 1:]
        if len(carry) > MAX_LINE:
            carry = carry[:MAX_LINE]


def _scan(
    classifier: Classifier, data: bytes, needles: Iterable[bytes | re.Pattern[bytes]]
) -> None:
    """Feed the lines of ``data`` (ending in a newline) that contain a needle (or match a
    scan regex), in order."""
    lines_before = classifier.lines
    for line in needle_lines(data, needles):
        classifier.feed(line)
    classifier.lines = lines_before + data.count(b"\n")


def classify_lines(lines: Iterable[str], fabric: FabricKind | None = None) -> list[Finding]:
    """Convenience: classify an iterable of lines, return the aggregated findings."""
    c = Classifier(fabric)
    for line in lines:
        c.feed(line)
    return c.findings()

"""Diagnosis: fabric manager, start script, NVLSM/OpenSM, IMEX, NCCL and kernel log lines ->
Findings of the shared catalogue, each with a concrete hint.

The signatures are data (``nvfabric/data/signatures.yaml``: code, severity, needle, pattern,
extracted fields, hint, source, examples; format in that file's header). A signature matches a
line when its literal ``needle`` is in the line and its ``pattern`` is found in it; every
wording variant of one message is one signature. Line prefixes (journal ``Mon DD HH:MM:SS host
ident[pid]:``, ``journalctl -o cat`` bare lines, fabric manager's ``[Mon DD YYYY HH:MM:SS]
[LEVEL] [tid N]``, talosctl ``<ip>:``, dmesg ``[ secs]``) need no parsing: patterns are searched
anywhere in the line; prefixes only give the timestamps.

:class:`Classifier` keeps state bounded by the catalogue, not by the input: repeated lines are
one finding with a ``count`` and ``first_seen``/``last_seen``; at most :data:`MAX_KEYS`
distinct findings per signature, at most :data:`MAX_COLLECT` values per collected field.
:func:`classify_stream` reads a binary stream in blocks and hands the classifier only the lines
that contain a needle, so memory stays constant and throughput stays high on large logs.

Platform awareness: the same line can mean different things on different fabric kinds
(NV_WARN_NOTHING_TO_DO is information on a node without NVSwitch, NVLSM missing on an NVLink 5
baseboard); signatures carry ``by_fabric`` overrides, chosen by the kind given to the
classifier (``None``: unknown).

Catalogue lookups: a signature with ``lookup`` takes an extracted number (an SXid, an Xid) to a
table shipped as data (``data/sxid.yaml``: NVIDIA Fabric Manager User Guide, NVSwitch SXid
Errors; ``data/xid.yaml``: NVIDIA Xid catalogue, NVLink Xids). The entry's class picks the
outcome (``by_class``; ``unknown`` for a number the table lacks, where a null code means "no
finding") and its name rides along as ``catalogue_name``/``catalogue_class`` fields.

Encodings: a log is UTF-8 (bytes that are not become U+FFFD). A UTF-16 or UTF-32 log (a BOM, or
NUL bytes between ASCII characters, as Windows tools write it) is decoded as such. NUL bytes
in runs within UTF-8 text are padding, dropped: logrotate's ``copytruncate`` leaves the file
starting with NULs up to the writer's old offset, and a crash leaves NUL-filled blocks in a
syslog. A stream with other NUL bytes (a binary file), or nothing but NULs, is refused
(:class:`LogEncodingError`), never read as a log without findings.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import IO, Any

from nvfabric.model.errors import InputError
from nvfabric.model.findings import Finding, is_code
from nvfabric.model.vocab import FABRIC_KINDS as FABRIC_KINDS  # re-exported: its old home
from nvfabric.model.vocab import FabricKind, FindingCode, Severity, is_severity
from nvfabric.strict import int_or_none

MAX_KEYS = 64
MAX_COLLECT = 32
MAX_EXAMPLE = 300
BLOCK = 1 << 20
MAX_LINE = 1 << 20



@dataclass(frozen=True)
class Outcome:
    """What a matching line means on one fabric kind; ``code`` None means "no finding"."""

    code: FindingCode | None
    severity: Severity
    message: str
    hint: str


@dataclass(frozen=True)
class Lookup:
    """A signature's catalogue lookup: ``table`` (``sxid``, ``xid``), the extracted integer
    field ``key`` it looks up, and the outcome per entry class (``unknown``: not listed)."""

    table: str
    key: str
    by_class: Mapping[str, Outcome]


@dataclass(frozen=True)
class Signature:
    """One row of the catalogue (see the data file's header for the keys)."""

    id: str
    needle: str
    pattern: re.Pattern[str]
    default: Outcome
    by_fabric: Mapping[str, Outcome]
    source: str
    int_fields: frozenset[str] = frozenset()
    collect: tuple[str, ...] = ()
    set_fields: Mapping[str, Any] = field(default_factory=dict)
    examples: tuple[str, ...] = ()
    scan: re.Pattern[bytes] | None = None
    lookup: Lookup | None = None

    def outcome(self, fabric: FabricKind | None) -> Outcome:
        return self.by_fabric.get(fabric or "unknown", self.default)


#: The longest number a fabric log field holds (64-bit handles print 20 digits); longer ones
#: are not a log's (and past 4,300 digits ``int()`` itself refuses them).
MAX_DIGITS = 20


class LogInputError(InputError):
    """A log that nvfabric refuses to read (doctor: exit 2, ``input_unreadable``)."""


class LogValueError(LogInputError):
    """A value in a log line that no fabric log prints (a number of thousands of digits)."""


def _number(value: str, sig: str, name: str) -> int:
    """An extracted integer field; :class:`LogValueError` past :data:`MAX_DIGITS` digits."""
    if len(value) > MAX_DIGITS:
        raise LogValueError(
            f"a number of {len(value)} digits in a line of the {sig} kind (field {name}); "
            f"fabric logs print at most {MAX_DIGITS}: not a real log line")
    number = int_or_none(value, signed=True)  # ASCII digits only (nvfabric.strict)
    if number is None:
        raise LogValueError(f"{value!r} in a line of the {sig} kind (field {name}) is not "
                            "a number (ASCII digits)")
    return number


class CatalogueError(InputError):
    """A catalogue row that is not well formed; the message names the row and the key. The
    catalogue nvfabric ships is its own data: a malformed row there is a bug (exit 3)."""

    code = "internal_error"
    exit_status = 3


def _outcome(row: Mapping[str, Any], base: Outcome | None, where: str) -> Outcome:
    code = row.get("code", base.code if base else None)
    severity = row.get("severity", base.severity if base else None)
    if code is not None and not is_code(code):
        raise CatalogueError(f"{where}: unknown finding code {code!r}")
    if not is_severity(severity):
        raise CatalogueError(f"{where}: bad severity {severity!r}")
    return Outcome(
        code=code,
        severity=severity,
        message=str(row.get("message", base.message if base else "")),
        hint=str(row.get("hint", base.hint if base else "")),
    )


def parse_catalogue(rows: Any) -> tuple[Signature, ...]:
    """Validate rows (as loaded from YAML) into Signatures. Raises CatalogueError."""
    if not isinstance(rows, list):
        raise CatalogueError("the catalogue is a list of rows")
    out: list[Signature] = []
    seen: set[str] = set()
    for n, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise CatalogueError(f"row {n}: expected a mapping")
        sid = str(row.get("id") or f"row {n}")
        if sid in seen:
            raise CatalogueError(f"{sid}: id appears twice")
        seen.add(sid)
        needle = row.get("needle")
        if not isinstance(needle, str) or not needle:
            raise CatalogueError(f"{sid}: needle must be a non-empty string")
        try:
            pattern = re.compile(str(row.get("pattern")))
        except re.error as err:
            raise CatalogueError(f"{sid}: bad pattern: {err}") from None
        default = _outcome(row, None, sid)
        overrides = row.get("by_fabric") or {}
        if not isinstance(overrides, Mapping):
            raise CatalogueError(f"{sid}: by_fabric must be a mapping")
        by_fabric = {}
        for kind, over in overrides.items():
            if kind not in (*FABRIC_KINDS, "unknown") or not isinstance(over, Mapping):
                raise CatalogueError(f"{sid}: by_fabric.{kind}: unknown fabric kind or not a map")
            by_fabric[str(kind)] = _outcome(over, default, f"{sid}.by_fabric.{kind}")
        groups = set(pattern.groupindex)
        ints = frozenset(row.get("int") or ())
        collect = tuple(row.get("collect") or ())
        if not ints <= groups or not set(collect) <= groups:
            raise CatalogueError(f"{sid}: int/collect name fields the pattern does not capture")
        lookup = _lookup(row.get("lookup"), default, sid, ints)
        scan = None
        if row.get("scan"):
            try:
                scan = re.compile(str(row["scan"]).encode())
            except re.error as err:
                raise CatalogueError(f"{sid}: bad scan pattern: {err}") from None
        out.append(Signature(
            id=sid, needle=needle, pattern=pattern, default=default, by_fabric=by_fabric, scan=scan,
            source=str(row.get("source") or ""), int_fields=ints, collect=collect,
            set_fields=dict(row.get("set") or {}),
            examples=tuple(str(e) for e in row.get("examples") or ()), lookup=lookup,
        ))
    return tuple(out)


def _lookup(spec: Any, default: Outcome, sid: str, ints: frozenset[str]) -> Lookup | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or spec.get("table") not in TABLES:
        raise CatalogueError(f"{sid}: lookup needs a table of {sorted(TABLES)}")
    key = spec.get("key")
    if key not in ints:
        raise CatalogueError(f"{sid}: lookup key {key!r} is not an int field")
    by_class: dict[str, Outcome] = {}
    for cls, over in (spec.get("by_class") or {}).items():
        if not isinstance(over, Mapping):
            raise CatalogueError(f"{sid}: lookup.by_class.{cls}: not a mapping")
        by_class[str(cls)] = _outcome(over, default, f"{sid}.lookup.by_class.{cls}")
    return Lookup(str(spec["table"]), str(key), by_class)


#: Catalogue tables shipped as data: name -> file under nvfabric/data.
TABLES = {"sxid": "data/sxid.yaml", "xid": "data/xid.yaml"}


@cache
def lookup_table(name: str) -> Mapping[int, Mapping[str, str]]:
    """A shipped catalogue table as ``{number: {"class": ..., "name": ..., ...}}``.

    ``sxid`` (data/sxid.yaml, NVIDIA Fabric Manager User Guide "NVSwitch SXid Errors"):
    classes ``nonfatal``, ``fatal``, ``always_fatal``, ``other``. ``xid`` (data/xid.yaml, NVIDIA
    Xid catalogue): class ``nvlink``, name the mnemonic, plus ``description`` and
    ``resolution``. KeyError for another name."""
    import yaml

    text = resources.files("nvfabric").joinpath(TABLES[name]).read_text("utf-8")
    data = yaml.safe_load(text)
    out: dict[int, dict[str, str]] = {}
    if name == "sxid":
        for cls, rows in data["classes"].items():
            for number, label in rows.items():
                out[int(number)] = {"class": str(cls), "name": str(label)}
    else:
        for number, entry in data["xids"].items():
            out[int(number)] = {"class": "nvlink", "name": str(entry["mnemonic"]),
                                "description": str(entry["description"]),
                                "resolution": str(entry["resolution"])}
    return out


@lru_cache(maxsize=1)
def catalogue() -> tuple[Signature, ...]:
    """The shipped catalogue (nvfabric/data/signatures.yaml), parsed once."""
    import yaml

    text = resources.files("nvfabric").joinpath("data/signatures.yaml").read_text("utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_catalogue(yaml.load(text, Loader=loader))  # noqa: S506 - safe loader


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

    def finding(self) -> Finding:
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
                       o.hint.format_map(_Format(values)), extra)


class Classifier:
    """Feed lines, get findings. ``fabric``: the node's fabric kind (none, nvswitch, nvlink5,
    mnnvl) or None when unknown; ``signatures`` defaults to the shipped catalogue.

    :meth:`feed` returns the findings a line causes for the first time (a repeat only updates
    the count); :meth:`findings` returns everything so far, aggregated, in order of first
    appearance.
    """

    def __init__(
        self, fabric: FabricKind | None = None,
        signatures: tuple[Signature, ...] | None = None
    ) -> None:
        if fabric is not None and fabric not in FABRIC_KINDS:
            raise ValueError(f"unknown fabric kind {fabric!r}")
        self.fabric = fabric
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
        self.lines = 0

    def feed(self, line: str) -> list[Finding]:
        """Classify one line (trailing newline optional)."""
        self.lines += 1
        new: list[_Entry] = []
        codes: set[str] = set()
        for sig in self.signatures:
            if sig.needle not in line:
                continue
            m = sig.pattern.search(line)
            if m is None:
                continue
            outcome = sig.outcome(self.fabric)
            extra: dict[str, Any] = {}
            if sig.lookup is not None:
                outcome, extra = self._look_up(sig.lookup, outcome, m)
            if outcome.code is None or outcome.code in codes:
                continue
            codes.add(outcome.code)
            entry = self._record(sig, outcome, m, line, extra)
            if entry is not None:
                new.append(entry)
        return [e.finding() for e in new]

    @staticmethod
    def _look_up(lookup: Lookup, outcome: Outcome, m: re.Match[str]
                 ) -> tuple[Outcome, dict[str, Any]]:
        """The outcome and the catalogue fields for the number the line carries."""
        raw = m.group(lookup.key)
        entry = (lookup_table(lookup.table).get(_number(raw, lookup.table, lookup.key))
                 if raw is not None else None)
        cls = entry["class"] if entry else "unknown"
        extra: dict[str, Any] = {"catalogue_class": cls}
        if entry:
            extra.update({f"catalogue_{k}": v for k, v in entry.items() if k != "class"})
        return lookup.by_class.get(cls, outcome), extra

    def _record(
        self, sig: Signature, outcome: Outcome, m: re.Match[str], line: str,
        extra: Mapping[str, Any] | None = None,
    ) -> _Entry | None:
        fields: dict[str, Any] = {**sig.set_fields, **(extra or {})}
        collected: dict[str, Any] = {}
        for name, value in m.groupdict().items():
            if value is None:
                continue
            typed: Any = _number(value, sig.id, name) if name in sig.int_fields else value
            if name in sig.collect:
                collected[name] = typed
            else:
                fields[name] = typed
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

    def findings(self) -> list[Finding]:
        """Every finding so far, one per distinct (code, fields), in order of appearance."""
        return [e.finding() for e in self._entries.values()]


class LogEncodingError(LogInputError):
    """A log stream that is not text in an encoding nvfabric reads (UTF-8, UTF-16, UTF-32)."""


#: Byte order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def detect_encoding(head: bytes) -> tuple[str, int]:
    """``(encoding, BOM length)`` of a log from its first bytes: a BOM decides; without one,
    NUL bytes in every other (every fourth) position of ASCII text mean UTF-16 (UTF-32) without
    a BOM. Raises :class:`LogEncodingError` for other data holding NUL bytes (a binary file, a
    core dump): such a stream is not a log."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, len(bom)
    sample = head[:4096]
    if b"\0" not in sample:
        return "utf-8", 0
    even, odd = sample[0::2], sample[1::2]
    for name, step in (("utf-32-le", 4), ("utf-32-be", 4)):
        zeros = [sample[i::step] for i in range(step)]
        text = zeros[0] if name.endswith("le") else zeros[3]
        rest = zeros[1:] if name.endswith("le") else zeros[:3]
        if len(sample) >= 8 and all(set(z) == {0} for z in rest) and 0 not in text:
            return name, 0
    if len(sample) >= 4 and set(odd) == {0} and 0 not in even:
        return "utf-16-le", 0
    if len(sample) >= 4 and set(even) == {0} and 0 not in odd:
        return "utf-16-be", 0
    if _nul_padded_text(sample):
        return "utf-8", 0
    raise LogEncodingError(
        "holds NUL bytes and is neither UTF-8, UTF-16 nor UTF-32 text: not a log file")


#: NUL padding: a run of at least this many NUL bytes (an ASCII character in UTF-16 has one).
_NUL_RUN = re.compile(rb"\0{8,}")
#: Control bytes that text does not hold (tab, newline, CR, form feed and ESC excepted).
_BINARY_BYTES = re.compile(rb"[\x01-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


def _nul_padded_text(sample: bytes) -> bool:
    """Whether ``sample`` is UTF-8 text whose NUL bytes all stand in runs of padding (or is
    padding only, the start of a copytruncated log), with hardly any other control byte."""
    rest = _NUL_RUN.sub(b"", sample)
    if b"\0" in rest:
        return False
    return len(_BINARY_BYTES.findall(rest)) <= len(rest) // 100


def _utf8_blocks(stream: IO[bytes]) -> Iterator[bytes]:
    """The stream's bytes as UTF-8, block by block, whatever its detected encoding; NUL bytes
    of a UTF-8 stream (padding, :func:`_nul_padded_text`) are dropped. Raises
    :class:`LogEncodingError` for a stream of NUL bytes only."""
    first = stream.read(BLOCK)
    name, skip = detect_encoding(first)
    if name == "utf-8":
        seen = False
        block = first[skip:]
        while block:
            if b"\0" in block:
                # a block of padding only (a copytruncated log's hole, /dev/zero on stdin) is
                # dropped at memchr speed; replace() on it ran at ~100 MB/s, so reading to the
                # 16 GiB cap of `doctor - < /dev/zero` took minutes
                nuls = block.count(0)
                block = b"" if nuls == len(block) else block.replace(b"\0", b"")
            if block:
                seen = True
                yield block
            block = stream.read(BLOCK)
        if not seen and first:
            raise LogEncodingError("holds only NUL bytes: not a log file")
        return
    decoder = codecs.getincrementaldecoder(name)(errors="replace")
    block = first[skip:]
    while block:
        text = decoder.decode(block)
        if text:
            yield text.encode("utf-8")
        block = stream.read(BLOCK)
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8")


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
    blocks = _utf8_blocks(stream)
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


def needle_lines(data: bytes, needles: Iterable[bytes | re.Pattern[bytes]]) -> list[str]:
    """The lines of ``data`` (complete lines, ending in a newline) that contain one of
    ``needles`` (a :attr:`Classifier.scanners` tuple), decoded, in order: what a classifier
    must be fed of ``data``. Several classifiers (one per fabric kind) can share one scan."""
    starts: dict[int, int] = {}
    for needle in needles:
        if isinstance(needle, re.Pattern):
            for m in needle.finditer(data):
                start = data.rfind(b"\n", 0, m.start()) + 1
                starts[start] = data.find(b"\n", m.start())
            continue
        pos = data.find(needle)
        while pos >= 0:
            start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos)
            starts[start] = end
            pos = data.find(needle, end)
    return [data[start: starts[start]].decode("utf-8", "replace") for start in sorted(starts)]


def classify_lines(lines: Iterable[str], fabric: FabricKind | None = None) -> list[Finding]:
    """Convenience: classify an iterable of lines, return the aggregated findings."""
    c = Classifier(fabric)
    for line in lines:
        c.feed(line)
    return c.findings()

"""The diagnosis catalogue (:mod:`nvfabric.rules.diagnose`): its rows parsed and checked, and
the lookup tables it refers to. Pure: data in, :class:`Signature` values out.

The signatures are data (``nvfabric/data/signatures.yaml``: code, severity, needle, pattern,
extracted fields, hint, source, examples; format in that file's header). A signature matches a
line when its literal ``needle`` is in the line and its ``pattern`` is found in it; every
wording variant of one message is one signature. Line prefixes (journal ``Mon DD HH:MM:SS host
ident[pid]:``, ``journalctl -o cat`` bare lines, fabric manager's ``[Mon DD YYYY HH:MM:SS]
[LEVEL] [tid N]``, talosctl ``<ip>:``, dmesg ``[ secs]``) need no parsing: patterns are searched
anywhere in the line; prefixes only give the timestamps.

Platform awareness: the same line can mean different things on different fabric kinds
(NV_WARN_NOTHING_TO_DO is information on a node without NVSwitch, NVLSM missing on an NVLink 5
baseboard); signatures carry ``by_fabric`` overrides, chosen by the kind given to the
classifier (``None``: unknown).

Catalogue lookups: a signature with ``lookup`` takes an extracted number (an SXid, an Xid, a
CUDA result) to a table shipped as data (``data/sxid.yaml``: NVIDIA Fabric Manager User Guide,
NVSwitch SXid Errors; ``data/xid.yaml``: NVIDIA Xid catalogue, NVLink Xids; ``data/cuda.yaml``:
CUDA driver API, CUresult, whose entry can also be named by its text when a line prints no
number), or decodes an NVLink 5 Xid line's hex words by the catalogue's decode sheet (table
``xid_decode``: :mod:`nvfabric.rules.xid_decode`). The entry's class picks the outcome
(``by_class``; ``unknown`` for a number the table lacks, where a null code means "no finding")
and its name rides along as ``catalogue_name``/``catalogue_class`` fields.
"""

from __future__ import annotations

import json
import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from nvfabric.model.commandline import HINT_PLACEHOLDERS
from nvfabric.model.errors import InputError
from nvfabric.model.findings import is_code
from nvfabric.model.vocab import FABRIC_KINDS, FindingCode, Severity, is_severity
from nvfabric.rules import xid_decode


@dataclass(frozen=True)
class Outcome:
    """What a matching line means on one fabric kind; ``code`` None means "no finding"."""

    code: FindingCode | None
    severity: Severity
    message: str
    hint: str


@dataclass(frozen=True)
class Lookup:
    """A signature's catalogue lookup: ``table`` (``sxid``, ``xid``, ``cuda``: the extracted
    integer field ``key`` looked up by number; ``xid_decode``: the decode of the fields xid, unit,
    intr_info and error_status, ``key`` intr_info), ``text`` (``cuda`` only: a field whose text
    names the result where the line prints no number), and the outcome per entry class
    (``unknown``: not listed)."""

    table: str
    key: str
    by_class: Mapping[str, Outcome]
    text: str | None = None


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
    hex_fields: frozenset[str] = frozenset()
    collect: tuple[str, ...] = ()
    set_fields: Mapping[str, Any] = field(default_factory=dict)
    examples: tuple[str, ...] = ()
    scan: re.Pattern[bytes] | None = None
    lookup: Lookup | None = None

    def outcome(self, fabric: str | None) -> Outcome:
        return self.by_fabric.get(fabric or "unknown", self.default)


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
        hexes = frozenset(row.get("hex") or ())
        collect = tuple(row.get("collect") or ())
        if not ints | hexes <= groups or not set(collect) <= groups or ints & hexes:
            raise CatalogueError(f"{sid}: int/hex/collect name fields the pattern does not "
                                 "capture (or a field both int and hex)")
        lookup = _lookup(row.get("lookup"), default, sid, ints, frozenset(groups))
        if reserved := sorted((groups | set(row.get("set") or {})) & set(HINT_PLACEHOLDERS)):
            raise CatalogueError(f"{sid}: the fields {reserved} are names of hint placeholders")
        known = groups | set(row.get("set") or {}) | (
            LOOKUP_FIELDS[lookup.table] if lookup is not None else set())
        for where, outcome in _outcomes(sid, default, by_fabric, lookup):
            _check_text(outcome.message, f"{where}.message", known, hint=False)
            _check_text(outcome.hint, f"{where}.hint", known, hint=True)
        scan = None
        if row.get("scan"):
            try:
                scan = re.compile(str(row["scan"]).encode())
            except re.error as err:
                raise CatalogueError(f"{sid}: bad scan pattern: {err}") from None
        out.append(Signature(
            id=sid, needle=needle, pattern=pattern, default=default, by_fabric=by_fabric, scan=scan,
            source=str(row.get("source") or ""), int_fields=ints, hex_fields=hexes,
            collect=collect,
            set_fields=dict(row.get("set") or {}),
            examples=tuple(str(e) for e in row.get("examples") or ()), lookup=lookup,
        ))
    return tuple(out)


#: The fields a lookup adds to a finding, by table (:func:`look_up`): ``catalogue_class``
#: and the entry's keys (data/sxid.yaml, data/xid.yaml, data/cuda.yaml) as ``catalogue_KEY``;
#: an NVLink 5 decode adds the Xid's entry and :data:`xid_decode.DECODED_FIELDS`.
_XID_ENTRY = {"catalogue_name", "catalogue_description", "catalogue_resolution"}
LOOKUP_FIELDS: Mapping[str, frozenset[str]] = {
    "sxid": frozenset({"catalogue_class", "catalogue_name"}),
    "xid": frozenset({"catalogue_class", *_XID_ENTRY}),
    "cuda": frozenset({"catalogue_class", "catalogue_name", "catalogue_text",
                       "catalogue_runtime"}),
    "xid_decode": frozenset({*_XID_ENTRY, *xid_decode.DECODED_FIELDS}),
}


def _outcomes(sid: str, default: Outcome, by_fabric: Mapping[str, Outcome],
              lookup: Lookup | None) -> list[tuple[str, Outcome]]:
    """Every outcome of a row, each with where it is written."""
    return [(sid, default), *((f"{sid}.by_fabric.{k}", o) for k, o in by_fabric.items()),
            *((f"{sid}.lookup.by_class.{k}", o)
              for k, o in (lookup.by_class.items() if lookup is not None else ()))]


def _check_text(text: str, where: str, known: set[str] | frozenset[str], *, hint: bool) -> None:
    """Refuse (CatalogueError) a message or hint whose ``{...}`` names neither a field the row
    gives (``known``: its pattern's groups, ``set`` and lookup fields) nor, in a hint, a
    placeholder of :data:`nvfabric.model.commandline.HINT_PLACEHOLDERS` written as it takes
    (``{nvfabric:WORDS}``, ``{path:/ABSOLUTE}``, ``{on_host}``, ...); format specs and
    conversions (``{x!r}``, ``{x:>8}``) are refused. Fields may sit inside a placeholder's
    words (``{nvfabric:fetch --driver-version {kernel_version}}``)."""
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as err:
        raise CatalogueError(f"{where}: {err} in {text!r}") from None
    for _, name, given, conversion in parts:
        if name is None:
            continue
        spec = given or ""
        shown = "{" + name + (f":{spec}" if spec else "") + "}"
        if conversion is not None:
            raise CatalogueError(f"{where}: {shown} takes no conversion (!{conversion})")
        if name in HINT_PLACEHOLDERS:
            takes = HINT_PLACEHOLDERS[name]
            if not hint:
                raise CatalogueError(f"{where}: the placeholder {shown} is for hints only")
            if takes is None and spec:
                raise CatalogueError(f"{where}: {{{name}}} takes nothing after a colon")
            if takes == "words" and (not spec.strip() or "--root" in spec.split()):
                raise CatalogueError(f"{where}: {shown} needs the command's words (without "
                                     "--root: the node's root is added)")
            if takes == "path" and not spec.startswith("/"):
                raise CatalogueError(f"{where}: {shown} needs an absolute host path")
            _check_text(spec, where, known, hint=False)  # fields inside the words
        elif name not in known:
            raise CatalogueError(f"{where}: unknown placeholder {shown}: neither a field of "
                                 f"the row nor one of {sorted(HINT_PLACEHOLDERS)}")
        elif spec:
            raise CatalogueError(f"{where}: {shown} takes no format spec")


#: The fields a decode table reads from the line (``xid_decode``: :func:`look_up`).
DECODE_FIELDS = {"xid_decode": frozenset({"xid", "unit", "intr_info", "error_status"})}


def _lookup(spec: Any, default: Outcome, sid: str, ints: frozenset[str],
            groups: frozenset[str]) -> Lookup | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or spec.get("table") not in TABLES:
        raise CatalogueError(f"{sid}: lookup needs a table of {sorted(TABLES)}")
    key, text, table = spec.get("key"), spec.get("text"), str(spec["table"])
    if table in DECODE_FIELDS:
        if not DECODE_FIELDS[table] <= groups or "xid" not in ints or key != "intr_info":
            raise CatalogueError(f"{sid}: a {table} decode needs the fields "
                                 f"{sorted(DECODE_FIELDS[table])} (xid an int field), key "
                                 "intr_info")
    elif key not in ints:
        raise CatalogueError(f"{sid}: lookup key {key!r} is not an int field")
    if text is not None and (table != "cuda" or text not in groups):
        raise CatalogueError(f"{sid}: lookup text {text!r} needs table cuda and a field")
    by_class: dict[str, Outcome] = {}
    for cls, over in (spec.get("by_class") or {}).items():
        if not isinstance(over, Mapping):
            raise CatalogueError(f"{sid}: lookup.by_class.{cls}: not a mapping")
        by_class[str(cls)] = _outcome(over, default, f"{sid}.lookup.by_class.{cls}")
    return Lookup(table, str(key), by_class, None if text is None else str(text))


#: Catalogue tables shipped as data: name -> file under nvfabric/data.
TABLES = {"sxid": "data/sxid.yaml", "xid": "data/xid.yaml", "cuda": "data/cuda.yaml",
          "xid_decode": "data/xid.yaml"}

#: The package directory (nvfabric/), where data/ is, in a checkout, a wheel and the binary.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shipped_data(yaml_name: str) -> Any:
    """The content of a shipped data file ``data/X.yaml`` (``yaml_name``: ``data/X.yaml``),
    read from its JSON twin ``data/X.json``: the YAML is the source people edit (with its
    comments and sources), the JSON is generated from it (``make catalogues``;
    tests/rules/test_catalogue.py fails while they differ), so that no command parses YAML or
    imports PyYAML at start-up (no catalogue parsing before the first spawn).
    OSError when the file is missing."""
    with open(os.path.join(_PACKAGE, yaml_name.removesuffix(".yaml") + ".json"),
              encoding="utf-8") as fh:
        return json.load(fh)


@cache
def lookup_table(name: str) -> Mapping[int, Mapping[str, str]]:
    """A shipped catalogue table as ``{number: {"class": ..., "name": ..., ...}}``.

    ``sxid`` (data/sxid.yaml, NVIDIA Fabric Manager User Guide "NVSwitch SXid Errors"):
    classes ``nonfatal``, ``fatal``, ``always_fatal``, ``other``. ``xid`` (data/xid.yaml, NVIDIA
    Xid catalogue): class ``nvlink``, name the mnemonic, plus ``description`` and
    ``resolution``. ``cuda`` (data/cuda.yaml, CUDA driver API CUresult): class and name the
    result's name (``CUDA_ERROR_ILLEGAL_STATE``), plus ``text`` and ``runtime`` where known.
    KeyError for another name."""
    data = shipped_data(TABLES[name])
    out: dict[int, dict[str, str]] = {}
    if name == "sxid":
        for cls, rows in data["classes"].items():
            for number, label in rows.items():
                out[int(number)] = {"class": str(cls), "name": str(label)}
    elif name == "cuda":
        for number, entry in data["results"].items():
            out[int(number)] = {"class": str(entry["name"]),
                                **{str(k): str(v) for k, v in entry.items()}}
    else:
        for number, entry in data["xids"].items():
            out[int(number)] = {"class": "nvlink", "name": str(entry["mnemonic"]),
                                "description": str(entry["description"]),
                                "resolution": str(entry["resolution"])}
    return out


@lru_cache(maxsize=1)
def catalogue() -> tuple[Signature, ...]:
    """The shipped catalogue (nvfabric/data/signatures.yaml, read from its JSON twin:
    :func:`shipped_data`), parsed once."""
    return parse_catalogue(shipped_data("data/signatures.yaml"))


@cache
def _cuda_by_text() -> Mapping[str, int]:
    """CUDA result text -> number, for the texts only one result has."""
    seen: dict[str, list[int]] = {}
    for number, entry in lookup_table("cuda").items():
        if "text" in entry:
            seen.setdefault(entry["text"], []).append(number)
    return {text: numbers[0] for text, numbers in seen.items() if len(numbers) == 1}


@cache
def decode_rows() -> tuple[xid_decode.DecodeRow, ...]:
    """The shipped NVLink 5 decode rows (data/xid.yaml ``nvlink5_decode``)."""
    return xid_decode.parse_rows(shipped_data(TABLES["xid_decode"]))


def look_up(lookup: Lookup, values: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The class of the entry that a matched line's ``values`` (its fields, int fields already
    numbers) name in ``lookup``'s table, and the fields the entry adds to the finding:
    ``catalogue_class`` and the entry's others as ``catalogue_<key>``; for ``cuda`` also the
    number found by ``text``; for ``xid_decode`` those of :func:`xid_decode.decode`."""
    if lookup.table == "xid_decode":
        decoded, fields = xid_decode.decode(
            decode_rows(), values["xid"], values["unit"], int(values["intr_info"], 16),
            int(values["error_status"], 16), values.get("severity_word"))
        xid = lookup_table("xid").get(values["xid"], {})
        return decoded, {**{f"catalogue_{k}": v for k, v in xid.items() if k != "class"}, **fields}
    extra: dict[str, Any] = {}
    number = values.get(lookup.key)
    if number is None and lookup.text is not None and values.get(lookup.text) is not None:
        number = _cuda_by_text().get(values[lookup.text])
        if number is not None:
            extra[lookup.key] = number
    entry = lookup_table(lookup.table).get(number) if number is not None else None
    cls = entry["class"] if entry else "unknown"
    extra["catalogue_class"] = cls
    if entry:
        extra.update({f"catalogue_{k}": v for k, v in entry.items() if k != "class"})
    return cls, extra

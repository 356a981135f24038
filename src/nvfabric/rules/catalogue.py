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

Catalogue lookups: a signature with ``lookup`` takes an extracted number (an SXid, an Xid) to a
table shipped as data (``data/sxid.yaml``: NVIDIA Fabric Manager User Guide, NVSwitch SXid
Errors; ``data/xid.yaml``: NVIDIA Xid catalogue, NVLink Xids). The entry's class picks the
outcome (``by_class``; ``unknown`` for a number the table lacks, where a null code means "no
finding") and its name rides along as ``catalogue_name``/``catalogue_class`` fields.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from nvfabric.model.errors import InputError
from nvfabric.model.findings import is_code
from nvfabric.model.vocab import FABRIC_KINDS as FABRIC_KINDS  # re-exported: its old home
from nvfabric.model.vocab import FindingCode, Severity, is_severity


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

#: The package directory (nvfabric/), where data/ is, in a checkout, a wheel and the binary.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shipped_data(yaml_name: str) -> Any:
    """The content of a shipped data file ``data/X.yaml`` (``yaml_name``: ``data/X.yaml``),
    read from its JSON twin ``data/X.json``: the YAML is the source people edit (with its
    comments and sources), the JSON is generated from it (``make catalogues``;
    tests/test_catalogue_json.py fails while they differ), so that no command parses YAML or
    imports PyYAML at start-up (issue 15: no catalogue parsing before the first spawn).
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
    ``resolution``. KeyError for another name."""
    data = shipped_data(TABLES[name])
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
    """The shipped catalogue (nvfabric/data/signatures.yaml, read from its JSON twin:
    :func:`shipped_data`), parsed once."""
    return parse_catalogue(shipped_data("data/signatures.yaml"))

"""Strict readers of numbers, JSON documents and input files: the one place where text from a
node, a capture, an index or a report becomes an ``int``, a JSON value or bytes in memory.

Why one module: ``str.isdigit()`` accepts ``²`` and ``٣`` that ``int()`` refuses, ``int()``
accepts ``1_000``, `` 7 `` and Arabic-Indic digits that no kernel, nvidia-smi or index prints,
``lstrip("-")`` lets ``--1`` through, and Python refuses to convert numbers of more than 4,300
digits (``int()``, ``json.loads``, ``str()``, ``json.dumps``: CVE-2020-10735). Every reader goes
through :func:`to_int` (or :func:`int_or_none`) and :func:`load_json` instead, so one rule holds
everywhere:

- a number is ASCII digits only (``0-9``; ``a-f``/``A-F`` too in base 16), no blanks, no
  underscores, at most :data:`MAX_DIGITS` digits; a sign only where the field is signed (one
  leading ``-``, never ``+``); base 16 takes an optional ``0x``; base 0 is decimal, or hex with
  ``0x`` (nvidia-smi prints both);
- a JSON document is at most the caller's byte cap, its numbers at most :data:`MAX_DIGITS`
  digits (floats :data:`MAX_FLOAT_CHARS` characters), no ``NaN``/``Infinity``, nesting at most
  :data:`MAX_JSON_DEPTH` deep; :func:`obj`, :func:`arr`, :func:`text` and :func:`integer` check
  the type of a value where the structure is read and name the path to it (``nodes.0.
  connections``) when it is wrong;
- an input file is read up to a cap by :func:`nvfabric.facts.textfile.read_capped` (the
  reader of the files named on the command line): ``/dev/zero``, a 500 MB file or a FIFO
  never fill memory or hang.

Errors: :class:`BadValue` (a ``ValueError``) from the pure helpers; :func:`load_json` raises
``NvfabricError`` ``input_unreadable`` (exit 2) naming the input.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nvfabric.model.errors import InputError, NvfabricError, usage_error

#: Digits a number field may have: a 128-bit value has 39 decimal or 32 hex digits; nothing
#: nvfabric reads is longer (PCI IDs, GUIDs, pids, sizes, CliqueIds, exit codes, ports).
MAX_DIGITS = 40
#: Characters of a JSON float literal (``-1.2345e-300`` fits easily).
MAX_FLOAT_CHARS = 64
#: Nesting of a JSON document: nvfabric's documents are 4-5 levels deep.
MAX_JSON_DEPTH = 64

_DEC = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_OCT = frozenset("01234567")


class BadValue(InputError):
    """A value of the wrong shape (not a number by the rules above, the wrong JSON type); the
    message names the value and, for JSON, the path to it."""


class NotJson(BadValue):
    """Text that is not JSON at all (a syntax error), as opposed to JSON with a value past the
    bounds: a reader that accepts other formats too may try them on this one."""


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def to_int(value: str, *, base: int = 10, signed: bool = False, what: str = "value",
           low: int | None = None, high: int | None = None,
           max_digits: int = MAX_DIGITS) -> int:
    """``value`` (already stripped by the caller where the format allows blanks) as an int.

    ``base`` 10, 8 (file modes, ``0644``), 16 (optional ``0x``/``0X``) or 0 (``0x`` means
    hex, else decimal; a leading zero is decimal, as nvidia-smi prints ``00000000``).
    ``signed`` allows one leading ``-``; ``low``/``high`` bound the result (inclusive).
    Raises :class:`BadValue` naming ``what``.
    """
    digits = value
    negative = False
    if signed and digits.startswith("-"):
        negative, digits = True, digits[1:]
    radix = base
    if base in (0, 16) and digits[:2] in ("0x", "0X"):
        digits, radix = digits[2:], 16
    elif base == 0:
        radix = 10
    allowed = _HEX if radix == 16 else (_OCT if radix == 8 else _DEC)
    if not digits or not all(c in allowed for c in digits):
        kind = "a hex number" if radix == 16 else "an octal number" if radix == 8 else (
            "an integer" if signed else "a non-negative integer")
        raise BadValue(f"{what} {_shown(value)} is not {kind} (ASCII digits only)")
    if len(digits) > max_digits:
        raise BadValue(f"{what} has {len(digits)} digits, more than the {max_digits} allowed")
    number = int(digits, radix)
    number = -number if negative else number
    if (low is not None and number < low) or (high is not None and number > high):
        lo = "" if low is None else f"{low}"
        hi = "" if high is None else f"{high}"
        raise BadValue(f"{what} {number} is out of range ({lo}..{hi})")
    return number


def int_or_none(value: str | None, **kw: Any) -> int | None:
    """:func:`to_int` for forgiving readers (a sysfs attribute a driver did not write): None
    when ``value`` is None or not a number by the rules; same keywords."""
    if value is None:
        return None
    try:
        return to_int(value, **kw)
    except BadValue:
        return None


def is_uint(value: str) -> bool:
    """``value`` is a plain decimal number (ASCII digits, bounded): what ``isdigit()`` should
    have meant (``/proc`` entries, port numbers, channel numbers)."""
    return 0 < len(value) <= MAX_DIGITS and all(c in _DEC for c in value)


def to_float(value: str, *, what: str = "value") -> float:
    """A decimal number with an optional fraction (``12345.67``, ``-0.5``), as ``/proc/uptime``
    and logs print it: ASCII only, no exponent, no ``nan``/``inf``, bounded. BadValue else."""
    body = value[1:] if value.startswith("-") else value
    whole, _, frac = body.partition(".")
    if (not whole or not all(c in _DEC for c in whole) or not all(c in _DEC for c in frac)
            or ("." in body and not frac) or len(body) > MAX_FLOAT_CHARS):
        raise BadValue(f"{what} {_shown(value)} is not a decimal number")
    return float(value)


#: What ``str.splitlines()`` splits on besides ``\n`` and ``\r``: every one would start a new
#: line (a new key) in a config file that is read back with it.
LINE_BREAKS = "\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def one_line(value: str) -> bool:
    """``value`` stays one line when read back: ``str.splitlines()`` does not split it (no
    ``\n``, ``\r``, nor any other line boundary of :data:`LINE_BREAKS`)."""
    return value == "" or value.splitlines() == [value]


def control_free(value: str) -> bool:
    """No C0 control character, DEL, C1 control or Unicode line/paragraph separator: what a
    path, a host name or a config value read from a file may never hold."""
    return _CONTROL.search(value) is None


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# --- JSON -----------------------------------------------------------------------------------

def _json_int(literal: str) -> int:
    digits = literal.lstrip("-")
    if len(digits) > MAX_DIGITS:
        raise BadValue(f"a number of {len(digits)} digits (more than {MAX_DIGITS})")
    return int(literal)


def _json_float(literal: str) -> float:
    if len(literal) > MAX_FLOAT_CHARS:
        raise BadValue(f"a number of {len(literal)} characters (more than {MAX_FLOAT_CHARS})")
    return float(literal)


def _json_constant(name: str) -> Any:
    raise BadValue(f"{name} is not a JSON number")


def parse_json(text: str | bytes) -> Any:
    """A JSON document under the rules of this module; :class:`BadValue` when it is not JSON,
    has an oversized number, ``NaN``/``Infinity`` or nests deeper than :data:`MAX_JSON_DEPTH`
    (the check runs before the standard decoder could hit the interpreter's recursion limit)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise BadValue(f"not UTF-8 text (byte {err.start})") from None
    level = 0
    if "[" in text or "{" in text:
        # Cheap bound before decoding: nesting can never exceed the count of openers, and a
        # document with few openers needs no scan.
        if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
            level = _scan_depth(text)
    if level > MAX_JSON_DEPTH:
        raise BadValue(f"nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        doc = json.loads(text, parse_int=_json_int, parse_float=_json_float,
                         parse_constant=_json_constant)
    except json.JSONDecodeError as err:
        raise NotJson(f"not JSON: {err.msg} (line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise BadValue("nested too deeply") from None
    return doc


_DECODER = json.JSONDecoder(parse_int=_json_int, parse_float=_json_float,
                            parse_constant=_json_constant)


def raw_decode(text: str, pos: int) -> tuple[Any, int]:
    """One JSON value of ``text`` starting at ``pos`` (a stream of concatenated objects), under
    the rules of :func:`parse_json`: (value, end). NotJson for a syntax error (its message has
    ``msg``), BadValue for a number past the bounds or nesting past the recursion limit."""
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as err:
        raise NotJson(err.msg) from None
    except RecursionError:
        raise BadValue("nested too deeply") from None


def _scan_depth(text: str) -> int:
    """Deepest bracket nesting outside strings: linear, one pass."""
    deepest = level = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif c in "]}":
            level -= 1
    return deepest


def load_json(text: str | bytes, where: str, hint: str = "") -> Any:
    """:func:`parse_json`, raising ``input_unreadable`` (exit 2) ``WHERE: why`` instead."""
    try:
        return parse_json(text)
    except BadValue as err:
        raise usage_error(f"{where}: {err}", hint) from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def obj(value: Any, path: str) -> dict[str, Any]:
    """``value`` when it is a JSON object; :class:`BadValue` ``PATH: expected an object, got a
    string`` otherwise."""
    if not isinstance(value, dict):
        raise BadValue(f"{path}: expected an object, got {_kind(value)}")
    return value


def arr(value: Any, path: str) -> list[Any]:
    """``value`` when it is a JSON array; :class:`BadValue` naming ``path`` otherwise."""
    if not isinstance(value, list):
        raise BadValue(f"{path}: expected an array, got {_kind(value)}")
    return value


def text(value: Any, path: str, *, optional: bool = False) -> str:
    """``value`` when it is a string (``""`` for null when ``optional``); BadValue otherwise."""
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise BadValue(f"{path}: expected a string, got {_kind(value)}")
    return value


def integer(value: Any, path: str, *, optional: bool = False) -> int | None:
    """``value`` when it is a JSON integer (not a boolean); None for null when ``optional``;
    BadValue otherwise."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue(f"{path}: expected an integer, got {_kind(value)}")
    return value


# --- text -----------------------------------------------------------------------------------

MiB = 1 << 20


def decode_text(data: bytes, where: str, hint: str = "") -> str:
    """UTF-8 text of ``data``; ``input_unreadable`` naming ``where`` and the byte when it is
    not UTF-8 (nvfabric's inputs are ASCII in practice; a wrong encoding is a wrong file)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise usage_error(f"{where}: not UTF-8 text (byte {err.start})", hint) from None


def unreadable(where: str, err: BaseException, hint: str = "") -> NvfabricError:
    """``input_unreadable`` for a parsing library's own failure at a reader's boundary
    (expat, csv, PyYAML, hostlist, ``RecursionError``): ``WHERE: <what the library said>``."""
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, RecursionError):
        reason = "nested too deeply"
    return usage_error(f"{where}: {reason[:200]}", hint)


# --- YAML -----------------------------------------------------------------------------------

#: Nodes a YAML document may expand to, aliases counted each time they are used (a "billion
#: laughs" document of nested aliases is refused long before it fills memory).
MAX_YAML_NODES = 100_000
#: Nesting of a YAML document (node specs are 4-5 levels deep).
MAX_YAML_DEPTH = 64


def load_yaml(text: str, where: str, hint: str = "") -> Any:
    """A YAML document with PyYAML's safe loader, bounded: at most :data:`MAX_YAML_NODES`
    nodes with aliases expanded and :data:`MAX_YAML_DEPTH` levels, checked on the composed
    node graph before any Python value is built. Every failure is ``input_unreadable`` (exit
    2) ``WHERE: why``: PyYAML's ``YAMLError`` and the errors that are not (``!!timestamp``
    without a value raises ``AttributeError``, ``!!int x`` a ``ValueError``, deep nesting a
    ``RecursionError``); a stream of more than one document too."""
    docs = _load_yaml(text, where, hint, MAX_YAML_NODES, single=True)
    return docs[0] if docs else None


def load_yaml_all(text: str, where: str, hint: str = "",
                  max_nodes: int = MAX_YAML_NODES) -> list[Any]:
    """Every document of a YAML stream (``---`` between documents, ``...`` ending one: dnf's
    ``modules.yaml``), bounded as :func:`load_yaml` is, with ``max_nodes`` counting the nodes
    of all documents together (aliases expanded). Errors as :func:`load_yaml`'s."""
    return _load_yaml(text, where, hint, max_nodes, single=False)


def _load_yaml(text: str, where: str, hint: str, max_nodes: int, single: bool) -> list[Any]:
    """The documents of ``text``, each composed and checked (:func:`_check_yaml`) before it
    is built; ``single``: one document at most (PyYAML's ``get_single_node``)."""
    import yaml

    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    out: list[Any] = []
    budget = max_nodes
    try:
        while True:
            try:
                if single:
                    node = loader.get_single_node()
                else:
                    node = loader.get_node() if loader.check_node() else None
            except yaml.YAMLError as err:
                raise usage_error(f"{where}: not YAML: {' '.join(str(err).split())[:300]}",
                                  hint) from None
            except RecursionError:
                raise usage_error(f"{where}: nested too deeply", hint) from None
            if node is None:
                return out
            budget -= _check_yaml(node, where, hint, budget, max_nodes)
            try:
                out.append(loader.construct_document(node))
            except RecursionError:
                raise usage_error(f"{where}: nested too deeply", hint) from None
            except Exception as err:  # noqa: BLE001 - PyYAML's constructors raise anything
                why = " ".join(str(err).split())[:200] or type(err).__name__
                raise usage_error(f"{where}: a YAML value cannot be read ({why})",
                                  hint) from None
            if single:
                return out
    finally:
        loader.dispose()


def _check_yaml(root: Any, where: str, hint: str, budget: int, limit: int) -> int:
    """Count the nodes of a composed document, aliases expanded, iteratively; refuse past
    ``budget`` nodes (what is left of the stream's ``limit``) or :data:`MAX_YAML_DEPTH`
    levels (stops counting at the first excess: bounded time, whatever the aliases). Returns
    the count."""
    import yaml

    count = 0
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, level = stack.pop()
        count += 1
        if count > budget:
            raise usage_error(f"{where}: more than {limit} YAML nodes (aliases expanded)",
                              hint)
        if level > MAX_YAML_DEPTH:
            raise usage_error(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep", hint)
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, level + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((key, level + 1))
                stack.append((value, level + 1))
    return count

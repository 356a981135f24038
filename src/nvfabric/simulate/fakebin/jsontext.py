"""JSON text of the fakes' state files and ``calls.jsonl`` records, byte for byte what
:func:`json.loads` / :func:`json.dumps` read and write, without importing :mod:`json`.

Why: the :mod:`json` package imports :mod:`re` (json.decoder, json.scanner, json.encoder),
about 5-9 ms per start of a fake on a slow machine, more than the interpreter's own start.
Its C accelerator :mod:`_json` holds the parser and the encoder json itself uses; this module
drives them as json does (the decoder's context, the one-shot encoder's arguments) and spells
the ``indent`` form json builds in Python (``json.encoder._make_iterencode``) for the few types
state files hold. Without :mod:`_json` (another interpreter) it is :mod:`json` itself.
Standard library only (copied into simulated trees).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

try:
    import _json

    HAVE_C = True
except ImportError:  # CPython builds _json; without it json does the work
    HAVE_C = False

#: Whitespace json skips around a value (json.decoder.WHITESPACE: ``[ \t\n\r]*``).
_SPACE = " \t\n\r"


class _DecoderContext:
    """What ``_json.make_scanner`` reads of a ``json.JSONDecoder()`` with no arguments."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    #: json.decoder._CONSTANTS.__getitem__: NaN, Infinity, -Infinity as floats.
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__


_scan = _json.make_scanner(_DecoderContext()) if HAVE_C else None  # type: ignore[arg-type]


def loads(text: str) -> Any:
    """``json.loads(text)`` for a str: the value, or ValueError (json's JSONDecodeError is
    one) for anything json refuses: a byte order mark, no value, extra data, bad syntax."""
    if _scan is None:
        import json

        return json.loads(text)
    if text.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as err:
        raise ValueError(f"Expecting value: char {err.value}") from None
    if text[end:].strip(_SPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def _not_serializable(o: object) -> Any:
    """json.JSONEncoder.default: nothing beyond the JSON types."""
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def dumps(obj: Any, indent: int | None = None,
          separators: tuple[str, str] | None = None) -> str:
    """``json.dumps(obj, indent=indent, separators=separators)`` (ASCII, keys in order, NaN
    allowed): the C one-shot encoder json uses without indent; the indent form as json spells
    it. TypeError for a value JSON has no type for (json's own message). The fakes write no
    circular structure: the indent form does not look for one (json's ValueError)."""
    if separators is not None:
        item_sep, key_sep = separators
    else:
        item_sep, key_sep = (", " if indent is None else ","), ": "
    if not HAVE_C:
        import json

        return json.dumps(obj, indent=indent, separators=(item_sep, key_sep))
    if indent is None:
        if isinstance(obj, str):
            return _json.encode_basestring_ascii(obj)
        encode = _json.make_encoder({}, _not_serializable, _json.encode_basestring_ascii, None,
                                    key_sep, item_sep, False, False, True)
        return "".join(encode(obj, 0))
    out: list[str] = []
    _indented(obj, " " * indent, 0, item_sep, key_sep, out)
    return "".join(out)


def _scalar(o: Any) -> str | None:
    """The text of a JSON scalar (json.encoder: str, None, True, False, int, float in that
    order, int.__repr__ and float.__repr__ for subclasses too), None for a container."""
    if isinstance(o, str):
        return _json.encode_basestring_ascii(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    return None


def _float(o: float) -> str:
    """json.encoder's floatstr with allow_nan: NaN, Infinity, -Infinity, else the repr."""
    if o != o:
        return "NaN"
    if o == float("inf"):
        return "Infinity"
    if o == float("-inf"):
        return "-Infinity"
    return float.__repr__(o)


def _key(k: Any) -> str:
    """A dict key as json writes it (str as is; float, bool, None, int spelled); json's
    TypeError for any other."""
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _float(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return int.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def _indented(o: Any, unit: str, level: int, item_sep: str, key_sep: str,
              out: list[str]) -> None:
    """Append the indent form of ``o`` at nesting ``level`` to ``out``
    (json.encoder._make_iterencode with an indent: each item on its own line)."""
    text = _scalar(o)
    if text is not None:
        out.append(text)
        return
    if isinstance(o, (list, tuple)):
        if not o:
            out.append("[]")
            return
        inner = "\n" + unit * (level + 1)
        out.append("[" + inner)
        for i, value in enumerate(o):
            if i:
                out.append(item_sep + inner)
            _indented(value, unit, level + 1, item_sep, key_sep, out)
        out.append("\n" + unit * level + "]")
        return
    if isinstance(o, dict):
        if not o:
            out.append("{}")
            return
        inner = "\n" + unit * (level + 1)
        out.append("{" + inner)
        for i, (k, value) in enumerate(o.items()):
            if i:
                out.append(item_sep + inner)
            out.append(_json.encode_basestring_ascii(_key(k)) + key_sep)
            _indented(value, unit, level + 1, item_sep, key_sep, out)
        out.append("\n" + unit * level + "}")
        return
    _not_serializable(o)

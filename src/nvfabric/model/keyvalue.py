"""``KEY=VALUE`` config files as fabric manager and IMEX ship them (comments with ``#``,
blank lines, one key per line; examples: tests/data/corpus/configs/fabricmanager-535.216.01.cfg,
tests/data/corpus/imex/k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg).

:func:`parse` keeps every line, so :func:`render` of an unpatched file gives the same text;
:func:`patch` changes values in place (first occurrence of a key; a commented-out
``#KEY=...`` is left as documentation) and appends keys the file lacks at the end.
Values are validated so that what is written reads back identically: no line boundary of
``str.splitlines()`` (``\n``, ``\r``, ``\v``, ``\f``, ``\x1c``-``\x1e``, ``\x85``, U+2028,
U+2029: a value with one would inject a second key), no NUL, no blanks around the value
(:func:`parse` strips them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nvfabric.model.errors import InputError
from nvfabric.model.strict import one_line

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class ConfigValueError(InputError):
    """A key or value that may not be written to a config file; names the key (``key``, and
    the finding's ``key`` field: a ``config_invalid_value``)."""

    code = "config_invalid_value"

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}", fields={"key": key})
        self.key = key


@dataclass(frozen=True)
class Line:
    """One line: ``key`` None for comments and blank lines (``text`` is the raw line)."""

    text: str
    key: str | None = None
    value: str = ""


@dataclass(frozen=True)
class KeyValueFile:
    lines: tuple[Line, ...]

    def get(self, key: str) -> str | None:
        for line in self.lines:
            if line.key == key:
                return line.value
        return None

    def items(self) -> dict[str, str]:
        """Effective values: the first occurrence of each key wins (as fabric manager reads)."""
        out: dict[str, str] = {}
        for line in self.lines:
            if line.key is not None and line.key not in out:
                out[line.key] = line.value
        return out


def parse(text: str) -> KeyValueFile:
    """Parse config text; never raises (a line that is not KEY=VALUE is kept as text)."""
    lines = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or "=" not in stripped:
            lines.append(Line(raw))
            continue
        key, _, value = stripped.partition("=")
        key = key.strip()
        if not KEY.fullmatch(key):
            lines.append(Line(raw))
            continue
        lines.append(Line(raw, key, value.strip()))
    return KeyValueFile(tuple(lines))


#: ``KEY=`` at the start of a line (its blanks and one ``#`` already cut): the keys a shipped
#: file documents. Matched line by line: a ``(?m)^\s*#?\s*KEY\s*=`` over the whole text lets
#: ``\s`` run across newlines, cubic in a run of blank lines (4,000 of them: minutes).
_DOCUMENTED_KEY = re.compile(r"([A-Z][A-Z0-9_]*)[ \t]*=")


def documented_keys(shipped: str) -> frozenset[str]:
    """Every ``KEY`` of a ``KEY=`` or ``# KEY=`` line of a shipped config (set, or commented
    out as documentation); linear in its size."""
    keys: set[str] = set()
    for line in shipped.split("\n"):
        text = line.strip()
        if text.startswith("#"):
            text = text[1:].lstrip()
        m = _DOCUMENTED_KEY.match(text)
        if m:
            keys.add(m.group(1))
    return frozenset(keys)


def validate(key: str, value: str) -> None:
    """Raise ConfigValueError unless ``key`` is an identifier and ``value`` reads back as
    written: one line by ``str.splitlines()`` (every Unicode line boundary), no NUL, no
    leading or trailing blanks."""
    if not KEY.fullmatch(key):
        raise ConfigValueError(key, "not a valid config key")
    if not one_line(value) or "\x00" in value:
        raise ConfigValueError(key, "value may not contain a newline, NUL or other line "
                               "separator (U+2028, U+0085, ...)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8 from argv or the environment
        raise ConfigValueError(key, "value is not UTF-8 text") from None
    if value != value.strip():
        raise ConfigValueError(key, "value may not start or end with blanks (they would be "
                               "lost when the file is read back)")


def patch(cfg: KeyValueFile, changes: Mapping[str, str]) -> KeyValueFile:
    """Set keys. Existing keys keep their line position; new keys are appended in the order
    given, after a comment saying nvfabric added them. Raises ConfigValueError."""
    for key, value in changes.items():
        validate(key, value)
    done: set[str] = set()
    out: list[Line] = []
    for line in cfg.lines:
        if line.key is not None and line.key in changes and line.key not in done:
            value = changes[line.key]
            out.append(Line(f"{line.key}={value}", line.key, value))
            done.add(line.key)
        else:
            out.append(line)
    missing = [k for k in changes if k not in done]
    if missing:
        out.append(Line("# Added by nvfabric"))
        for key in missing:
            out.append(Line(f"{key}={changes[key]}", key, changes[key]))
    return KeyValueFile(tuple(out))


def render(cfg: KeyValueFile) -> str:
    """Text of the file, newline-terminated."""
    return "\n".join(line.text for line in cfg.lines) + "\n"

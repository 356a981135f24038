"""Findings: the one shape in which nvfabric reports a problem or a fact to the operator.

A finding has a stable ``code`` from the catalogue below (codes are extended, never renamed:
the list is a public contract), a ``severity``, a one-line ``message`` and a
``hint`` saying what to do. Extra fields (``fm_version``, ``driver_version``, ``count`` ...)
ride along in ``fields`` and are flattened into the JSON object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard, get_args

from nvfabric.model.vocab import SEVERITIES, FindingCode, Severity

#: Every finding code nvfabric may emit (the words of :data:`nvfabric.model.vocab.FindingCode`,
#: the one list). Adding is fine; renaming breaks operators' alerting.
CODES: frozenset[str] = frozenset(get_args(FindingCode))


def is_code(word: object) -> TypeGuard[FindingCode]:
    """True when ``word`` is a finding code of :data:`CODES` (a code read from data, such as a
    row of the log signature catalogue)."""
    return word in CODES


@dataclass(frozen=True)
class Finding:
    """One diagnosed fact.

    ``code`` is a :data:`~nvfabric.model.vocab.FindingCode` (a misspelt literal is a mypy
    error; a code that comes from data is still checked at construction: ValueError);
    ``fields`` holds extra JSON-serialisable values (strings, numbers, lists) specific to the
    code, e.g. ``{"fm_version": "550.54.15", "driver_version": "550.90.07"}``.
    """

    code: FindingCode
    severity: Severity
    message: str
    hint: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown finding code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the public contract: code, severity, message, hint + fields."""
        out: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
        }
        for key, value in self.fields.items():
            out.setdefault(key, value)
        return out

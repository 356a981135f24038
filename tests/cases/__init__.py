"""Load the field cases of tests/data/cases (the copy of ../shared/cases, tests/datasync.py)
and check a command's JSON against their `expect`.

The `expect` semantics are those of tests/data/cases/README.md (:func:`check_expect`): the
special keys `exit_code`, `codes`, `codes_any` and `no_code`; at any depth `<field>_endswith`,
`<field>_in` and `<field>_match_in_order`; every other key a field of the output compared as a
JSON value (a mapping field by field, a list of objects element by element). A key that names
no field of the output is a mismatch, so a key this loader does not know fails loudly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

#: The repository's copy of ../shared (``make sync-shared`` refreshes it).
DATA = Path(__file__).resolve().parents[1] / "data"
CASES = DATA / "cases"
CORPUS = DATA / "corpus"
FUZZ = DATA / "fuzz"


#: The case letters and the loader test that runs each (every file of tests/data/cases has one:
#: tests/cases/test_cases_loader.py checks it).
LETTERS = {"P": "test_cases_p", "S": "test_cases_sd", "D": "test_cases_sd", "F": "test_cases_f",
           "I": "test_cases_im", "M": "test_cases_im"}


def load_cases(prefix: str) -> list[dict[str, Any]]:
    """Every case whose file name starts with ``prefix`` (``P``, ``S``, ``D``, ``F``, ``I``,
    ``M``)."""
    out = []
    for path in sorted(CASES.glob(f"{prefix}*.yaml")):
        with open(path, encoding="utf-8") as fh:
            case = yaml.safe_load(fh)
        case["_file"] = path.name
        out.append(case)
    assert out, f"no {prefix} cases under {CASES}"
    return out


def load_run_cases() -> dict[str, str]:
    """The cases of tests/data/cases/RUN.md: ``{"R01": "<title and text>", ...}`` in file order.

    RUN.md lists them as markdown items ``- **R08: title.** text`` (continuation lines indented);
    a case that is added there (R09, R10, ...) appears here with no change to this loader."""
    text = (CASES / "RUN.md").read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for found in re.finditer(r"^- \*\*(R\d+):\s*(.*?)(?=^- \*\*R\d+:|\Z)", text, re.M | re.S):
        out[found.group(1)] = " ".join(found.group(2).replace("**", "").split())
    assert out, f"no R cases in {CASES / 'RUN.md'}"
    return out


def _codes(output: dict[str, Any]) -> set[str]:
    """The codes ``codes``/``codes_any`` look at: ``blockers`` (plan), ``findings`` (status,
    doctor, plan warnings, imex, domain check) and the ``error`` finding (fetch, refusals)."""
    found: set[str] = set()
    for key in ("blockers", "findings"):
        for item in output.get(key) or []:
            found.add(item["code"])
    if isinstance(output.get("error"), dict):
        found.add(output["error"]["code"])
    return found


def _all_codes(value: Any) -> set[str]:
    """Every finding code anywhere in ``value`` (``no_code``: a code nested in a domain's or a
    service's findings counts too)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("code"), str) and "severity" in item:
                found.add(item["code"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


#: Suffixes of an ``expect`` key that name a field and a way to compare it (README of
#: tests/data/cases): a key that is itself a field of the output is compared as a value.
SUFFIXES = ("_endswith", "_match_in_order", "_in")


def _suffixed(key: str, have: dict[str, Any]) -> tuple[str, str] | None:
    """(field, suffix) for a suffixed key that is not a field of ``have`` itself."""
    if key in have:
        return None
    for suffix in SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], suffix
    return None


def _compare_fields(want: dict[str, Any], have: dict[str, Any], path: str) -> list[str]:
    """Each key of ``want`` against the object ``have``: a suffixed key by its rule, any other
    as a value; a key naming a field ``have`` does not have is a problem (an unknown or
    misspelt expect key fails loudly, never passes by comparing None with None)."""
    problems: list[str] = []
    for key, value in want.items():
        where = f"{path}{key}"
        rule = _suffixed(key, have)
        field = rule[0] if rule else key
        if field not in have:
            problems.append(f"{where}: the output has no field {field!r} "
                            f"(it has {sorted(have)})")
            continue
        got = have[field]
        if rule is None:
            problems += _compare(value, got, where)
        elif rule[1] == "_endswith":
            if not str(got).endswith(str(value)):
                problems.append(f"{where}: {field}={got!r} does not end with {value!r}")
        elif rule[1] == "_in":
            if not isinstance(value, list):
                problems.append(f"{where}: expects a list of acceptable values, got {value!r}")
            elif got not in value:
                problems.append(f"{where}: {field}={got!r} not in {value!r}")
        else:
            problems += _match_in_order(value, got, where)
    return problems


def _match_in_order(patterns: Any, lines: Any, where: str) -> list[str]:
    """Each pattern must ``re.search`` a line at or after the line the one before matched."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        return [f"{where}: expects a list of regular expressions, got {patterns!r}"]
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        return [f"{where}: the output's field is not a list of lines: {lines!r}"]
    at = 0
    for pattern in patterns:
        hit = next((i for i in range(at, len(lines)) if re.search(pattern, lines[i])), None)
        if hit is None:
            return [f"{where}: no line from line {at} on matches {pattern!r}; lines: {lines!r}"]
        at = hit
    return []


def _compare(want: Any, have: Any, where: str) -> list[str]:
    """A mapping field by field, a list of objects element by element (each must match some
    element of ``have``), anything else exactly (JSON values: ``[]``, ``null``, numbers)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [f"{where}: expected an object, got {have!r}"]
        return _compare_fields(want, have, where + ".")
    if isinstance(want, list) and want and all(isinstance(w, dict) for w in want):
        if not isinstance(have, list):
            return [f"{where}: expected a list, got {have!r}"]
        problems = []
        for n, item in enumerate(want):
            if not any(not _compare(item, h, "") for h in have):
                problems.append(f"{where}[{n}]: {item!r} matches no element of {have!r}")
        return problems
    same = want == have
    if isinstance(want, bool) or isinstance(have, bool):  # True == 1 in Python, not in JSON
        same = same and type(want) is type(have)
    return [] if same else [f"{where}: expected {want!r}, got {have!r}"]


def matches(want: Any, have: Any) -> bool:
    """``expect`` semantics at any depth (:func:`check_expect` on one value)."""
    return not _compare(want, have, "")


#: The ``expect`` keys that are not fields of the output.
SPECIAL = ("exit_code", "codes", "codes_any", "no_code")


def check_expect(expect: dict[str, Any], output: dict[str, Any], exit_code: int) -> list[str]:
    """Return the list of mismatches (empty when the output satisfies ``expect``): the rules
    of tests/data/cases/README.md. ``exit_code`` is the exit status; ``codes`` must all be
    present and ``codes_any`` one of them (:func:`_codes`); ``no_code`` appear nowhere in
    the output; every other key names a field of the output: ``<field>_endswith``,
    ``<field>_in`` (acceptable values), ``<field>_match_in_order`` (regular expressions over a
    list of lines, in order), or a value compared as JSON (a mapping field by field, a list
    of objects element by element, anything else exactly), inside objects too."""
    problems = []
    for key, want in expect.items():
        if key == "exit_code":
            if exit_code != want:
                problems.append(f"exit code {exit_code}, expected {want}")
        elif key == "codes":
            missing = set(want) - _codes(output)
            if missing:
                problems.append(f"missing codes {sorted(missing)}; have {sorted(_codes(output))}")
        elif key == "codes_any":
            if not set(want) & _codes(output):
                problems.append(f"none of the codes {sorted(want)}; have {sorted(_codes(output))}")
        elif key == "no_code":
            present = set(want) & _all_codes(output)
            if present:
                problems.append(f"codes that must not appear: {sorted(present)}")
    problems += _compare_fields({k: v for k, v in expect.items() if k not in SPECIAL},
                                output, "")
    return problems

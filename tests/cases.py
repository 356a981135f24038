"""Load the field cases of tests/data/cases (the copy of ../shared/cases, tests/datasync.py)
and check a command's JSON against their `expect`.

The `expect` semantics are those of tests/data/cases/README.md: plain keys must be equal,
`<key>_endswith` matches the end of a field, `verdict_in` lists acceptable verdicts, `codes`
lists finding codes that must all be present (in `blockers` for plan, `findings` for status and
doctor, the error finding for fetch), `codes_any` codes of which at least one must be,
`exit_code` is the exit status, and a list of objects must each match some element of the
output list by the fields given. Any other key is compared as a plain value, so a key this
loader does not know fails loudly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

#: The repository's copy of ../shared (``make sync-shared`` refreshes it).
DATA = Path(__file__).resolve().parent / "data"
CASES = DATA / "cases"
CORPUS = DATA / "corpus"
FUZZ = DATA / "fuzz"


def load_cases(prefix: str) -> list[dict[str, Any]]:
    """Every case whose file name starts with ``prefix`` (``P``, ``S``, ``D``, ``F``)."""
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
    found: set[str] = set()
    for key in ("blockers", "findings"):
        for item in output.get(key) or []:
            found.add(item["code"])
    if isinstance(output.get("error"), dict):
        found.add(output["error"]["code"])
    return found


def matches(want: Any, have: Any) -> bool:
    """``expect`` semantics at any depth: ``<key>_endswith`` matches the end of ``<key>``; a
    list of objects matches when each of its objects matches some element of ``have``."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        for key, value in want.items():
            if key.endswith("_endswith"):
                if not str(have.get(key[: -len("_endswith")], "")).endswith(str(value)):
                    return False
            elif not matches(value, have.get(key)):
                return False
        return True
    if isinstance(want, list) and want and isinstance(want[0], dict):
        return isinstance(have, list) and all(any(matches(w, h) for h in have) for w in want)
    return bool(want == have)


def check_expect(expect: dict[str, Any], output: dict[str, Any], exit_code: int) -> list[str]:
    """Return the list of mismatches (empty when the output satisfies ``expect``)."""
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
        elif key == "verdict_in":
            if output.get("verdict") not in want:
                problems.append(f"verdict {output.get('verdict')!r} not in {want}")
        elif key.endswith("_endswith"):
            field = key[: -len("_endswith")]
            value = str(output.get(field, ""))
            if not value.endswith(str(want)):
                problems.append(f"{field}={value!r} does not end with {want!r}")
        elif not matches(want, output.get(key)):
            problems.append(f"{key}: expected {want!r}, got {output.get(key)!r}")
    return problems

"""The case loader itself: every file of tests/data/cases is run by a loader test, and the
``expect`` rules of tests/data/cases/README.md (tests/cases/__init__.py) hold, unknown keys failing
loudly."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.cases import CASES, LETTERS, check_expect, load_cases


def test_every_case_file_is_run_by_its_letters_loader() -> None:
    files = sorted(p.name for p in CASES.glob("*.yaml"))
    assert files, "no cases"
    assert {name[0] for name in files} <= set(LETTERS), "a case letter without a loader"
    run: set[str] = set()
    for module_name in sorted(set(LETTERS.values())):
        module = importlib.import_module(f"tests.cases.{module_name}")
        for attr in dir(module):
            if attr.endswith("_CASES"):
                run |= {c["_file"] for c in getattr(module, attr)}
    assert sorted(run) == files
    for letter in LETTERS:
        for case in load_cases(letter) if any(f[0] == letter for f in files) else []:
            assert case["_file"].startswith(case["id"] + "-"), case["_file"]


OUT = {
    "verdict": "degraded", "fabric": "mnnvl", "services": [], "ok": True, "count": 2,
    "findings": [
        {"code": "registration_stuck", "severity": "warning", "gpus": [0, 1]},
        {"code": "fabric_value_missing", "severity": "warning", "pci": "00000000:18:00.0"},
    ],
    "domains": [{"id": "x", "count": 2, "nodes": ["a", "b"],
                 "findings": [{"code": "domain_size_mismatch", "severity": "warning"}]}],
    "pins": ["dnf module enable -y nvidia-driver:570-dkms", "dnf install -y p",
             "dnf versionlock add p"],
}


@pytest.mark.parametrize(("expect", "problems"), [
    ({"verdict": "degraded", "services": [], "ok": True, "count": 2}, 0),
    ({"verdict_in": ["pending", "degraded"]}, 0),
    ({"verdict_in": ["healthy"]}, 1),
    ({"findings": [{"code": "fabric_value_missing", "pci_endswith": "18:00.0"}]}, 0),
    ({"findings": [{"code": "registration_stuck", "severity_in": ["info", "warning"]}]}, 0),
    ({"findings": [{"code": "registration_stuck", "severity_in": ["error"]}]}, 1),
    ({"findings": [{"code": "registration_stuck", "gpus": [0]}]}, 1),  # lists exactly
    ({"domains": [{"count": 2, "nodes": ["a", "b"]}]}, 0),
    ({"domains": [{"count": 3}]}, 1),
    ({"ok": 1}, 1),  # true is not 1
    ({"count": True}, 1),
    ({"no_code": ["imex_not_ready"]}, 0),
    ({"no_code": ["domain_size_mismatch"]}, 1),  # nested in a domain counts too
    ({"codes": ["registration_stuck"], "codes_any": ["nope", "fabric_value_missing"]}, 0),
    ({"pins_match_in_order": [r"module enable .*:570\b", "install", "versionlock add"]}, 0),
    ({"pins_match_in_order": ["versionlock add", "module enable"]}, 1),  # order counts
    ({"pins_match_in_order": ["dnf", "dnf", "dnf", "dnf"]}, 0),  # at or after the last match
    ({"verdcit": "degraded"}, 1),  # a misspelt key names no field: loud
    ({"findings": [{"code": "registration_stuck", "gpu": None}]}, 1),  # no None == None pass
    ({"bogus_in": ["x"]}, 1),
    ({"pins_endswith": "x"}, 1),
], ids=lambda v: str(v)[:40] if isinstance(v, dict) else str(v))
def test_expect_rules(expect: dict[str, Any], problems: int) -> None:
    assert len(check_expect(expect, OUT, 0)) == problems


def test_exit_code_is_compared() -> None:
    assert check_expect({"exit_code": 1}, {}, 1) == []
    assert check_expect({"exit_code": 1}, {}, 0) == ["exit code 0, expected 1"]

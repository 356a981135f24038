"""Every P (plan) case of tests/data/cases, through the real CLI on a simulated node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cases import check_expect, load_cases
from tests.conftest import run_json

P_CASES = load_cases("P")


@pytest.mark.parametrize("case", P_CASES, ids=[c["id"] for c in P_CASES])
def test_plan_case(case: dict[str, Any], node: Callable[..., Path]) -> None:
    assert case["command"] == "plan"
    root = node(case["node"])
    output, rc = run_json("plan", "--root", str(root))
    expect = dict(case["expect"])
    expect.setdefault("exit_code", 1 if expect.get("codes") else 0)
    assert check_expect(expect, output, rc) == []
    for blocker in output["blockers"]:
        assert blocker["hint"], "every blocker carries a hint"
        assert blocker["severity"] == "error"

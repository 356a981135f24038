"""Every S (status) and D (doctor) case of tests/data/cases, through the real CLI.

Options of a case name the word ``input`` where the case's input text goes: written to a file
and passed as ``--from-nvidia-smi FILE`` (status) or ``--log FILE`` (doctor). A case with a
``node:`` spec runs with ``--root`` on that node, built by nvfabric.simulate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cases import check_expect, load_cases
from tests.conftest import run_json

S_CASES = load_cases("S")
D_CASES = load_cases("D")


def _run_case(case: dict[str, Any], tmp_path: Path, node: Callable[..., Path]
              ) -> tuple[dict[str, Any], int]:
    args: list[str] = [case["command"]]
    if case.get("node"):
        args += ["--root", str(node(case["node"]))]
    for option, value in (case.get("options") or {}).items():
        if value == "input":
            path = tmp_path / f"{case['id']}-input.txt"
            path.write_text(case["input"], encoding="utf-8")
            value = str(path)
        args += ["--" + option.replace("_", "-"), str(value)]
    return run_json(*args)


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["_file"].removesuffix(".yaml") for c in cases]


@pytest.mark.parametrize("case", S_CASES, ids=_ids(S_CASES))
def test_status_case(case: dict[str, Any], tmp_path: Path, node: Callable[..., Path]) -> None:
    assert case["command"] == "status"
    output, rc = _run_case(case, tmp_path, node)
    expect = dict(case["expect"])
    ok = expect.get("verdict") in ("healthy", "not_applicable")
    expect.setdefault("exit_code", 0 if ok else 1)
    assert check_expect(expect, output, rc) == []
    if rc == 2:  # refused input: one error object that names what is wrong and how to fix it
        assert set(output) == {"error"} and output["error"]["hint"]
        return
    assert {"verdict", "gpus", "findings"} <= set(output)
    for gpu in output["gpus"]:
        assert {"index", "uuid", "state", "status", "clique_id", "cluster_uuid",
                "health_summary"} <= set(gpu)
    for finding in output["findings"]:
        assert finding["hint"], f"{finding['code']} carries a hint"


@pytest.mark.parametrize("case", D_CASES, ids=_ids(D_CASES))
def test_doctor_case(case: dict[str, Any], tmp_path: Path, node: Callable[..., Path]) -> None:
    assert case["command"] == "doctor"
    output, rc = _run_case(case, tmp_path, node)
    assert check_expect(case["expect"], output, rc) == []
    errors = [f for f in output["findings"] if f["severity"] == "error"]
    assert rc == (1 if errors else 0)
    for finding in output["findings"]:
        assert finding["hint"], f"{finding['code']} carries a hint"


def test_s06_names_the_gpus_left_out(tmp_path: Path, node: Callable[..., Path]) -> None:
    output, _ = _run_case(_case(S_CASES, "S06"), tmp_path, node)
    (f,) = [f for f in output["findings"] if f["code"] == "partial_registration"]
    assert (f["severity"], f["gpus"], f["completed_gpus"]) == ("error", [2, 5], 6)
    assert f["pcis"] == ["00000000:52:00.0", "00000000:C3:00.0"]
    assert "registration_stuck" not in {x["code"] for x in output["findings"]}


def test_s07_names_the_values_not_read(tmp_path: Path, node: Callable[..., Path]) -> None:
    output, rc = _run_case(_case(S_CASES, "S07"), tmp_path, node)
    assert (output["verdict"], rc) == ("degraded", 1)
    missing = {f["value"]: f["gpus"] for f in output["findings"]
               if f["code"] == "fabric_value_missing"}
    assert missing == {"ClusterUUID": [0, 1, 2, 3], "CliqueId": [0, 1, 2, 3]}


def test_s08_names_the_missing_columns(tmp_path: Path, node: Callable[..., Path]) -> None:
    output, rc = _run_case(_case(S_CASES, "S08"), tmp_path, node)
    assert rc == 2
    message = output["error"]["message"]
    assert "fabric.status, fabric.cliqueId, fabric.clusterUuid (" in message


def _case(cases: list[dict[str, Any]], cid: str) -> dict[str, Any]:
    return next(c for c in cases if c["id"] == cid)


def test_s02_capture_in_progress_is_pending_with_802_and_the_likely_cause(
    tmp_path: Path, node: Callable[..., Path]
) -> None:
    output, rc = _run_case(_case(S_CASES, "S02"), tmp_path, node)
    assert (output["verdict"], rc) == ("pending", 1)
    stuck = next(f for f in output["findings"] if f["code"] == "registration_stuck")
    assert "802" in stuck["hint"]
    assert "NVLSM" in stuck["hint"] and "fabric manager" in stuck["hint"]
    assert stuck["gpus"] == list(range(8))


def test_s02_same_state_on_a_live_node_past_the_grace_period_is_unhealthy() -> None:
    from nvfabric.facts.smi import parse
    from nvfabric.model.services import ServiceState
    from nvfabric.rules.verdict import Inputs, verdict

    gpus = parse(_case(S_CASES, "S02")["input"]).gpus
    services = (ServiceState("nvlsm", True, age_s=900.0), ServiceState("fabricmanager", True,
                                                                       age_s=900.0))
    v = verdict(Inputs(gpus, "nvlink5", services, pci_gpu_count=8, grace_s=300))
    assert v.verdict == "unhealthy"
    assert [f.severity for f in v.findings if f.code == "registration_stuck"] == ["error"]


def test_s03_registration_error_names_the_gpu(tmp_path: Path, node: Callable[..., Path]) -> None:
    output, _ = _run_case(_case(S_CASES, "S03"), tmp_path, node)
    errors = [f for f in output["findings"] if f["code"] == "registration_error"]
    assert len(errors) == 1
    assert errors[0]["gpu"] == 1 and errors[0]["pci"] == "00000018:01:00.0"
    assert errors[0]["status"] == "NVML_ERROR_INSUFFICIENT_RESOURCES"
    assert "00000018:01:00.0" in errors[0]["message"]


def test_s04_only_the_unhealthy_gpu_is_flagged(tmp_path: Path, node: Callable[..., Path]) -> None:
    output, _ = _run_case(_case(S_CASES, "S04"), tmp_path, node)
    bad = [f for f in output["findings"] if f["code"] == "fabric_unhealthy"]
    assert [f["gpu"] for f in bad] == [0]
    assert "route_unhealthy=true" in bad[0]["problems"]


def test_d01_version_mismatch_keeps_both_versions_as_printed(
    tmp_path: Path, node: Callable[..., Path]
) -> None:
    output, rc = _run_case(_case(D_CASES, "D01"), tmp_path, node)
    f = next(f for f in output["findings"] if f["code"] == "version_mismatch")
    assert "530.41.03" in f["hint"] and f["severity"] == "error" and rc == 1


def test_d02_nothing_to_do_without_nvswitch_is_information(
    tmp_path: Path, node: Callable[..., Path]
) -> None:
    output, rc = _run_case(_case(D_CASES, "D02"), tmp_path, node)
    assert output["fabric"] == "none"
    f = next(f for f in output["findings"] if f["code"] == "fm_not_applicable")
    assert f["severity"] == "info" and "disable" in f["hint"]
    assert rc == 0 and all(f["severity"] == "info" for f in output["findings"])


def test_d03_nothing_to_do_on_b200_is_nvlsm_missing(
    tmp_path: Path, node: Callable[..., Path]
) -> None:
    output, rc = _run_case(_case(D_CASES, "D03"), tmp_path, node)
    assert output["fabric"] == "nvlink5"
    f = next(f for f in output["findings"] if f["code"] == "nvlsm_missing")
    assert f["severity"] == "error" and "NVLSM" in f["hint"] and rc == 1
    assert "fm_not_applicable" not in {x["code"] for x in output["findings"]}


def test_d06_repeated_lines_are_one_finding_with_count_and_times(
    tmp_path: Path, node: Callable[..., Path]
) -> None:
    output, _ = _run_case(_case(D_CASES, "D06"), tmp_path, node)
    found = [f for f in output["findings"] if f["code"] == "config_invalid_value"]
    assert len(found) == 1
    assert found[0]["count"] == 2
    assert (found[0]["first_seen"], found[0]["last_seen"]) == (
        "Nov 03 2024 18:40:12", "Nov 03 2024 18:40:17")


def test_d09_fatal_error_keeps_its_numbers(tmp_path: Path, node: Callable[..., Path]) -> None:
    output, _ = _run_case(_case(D_CASES, "D09"), tmp_path, node)
    f = next(f for f in output["findings"] if f["code"] == "nvswitch_fatal_error")
    assert (f["error"], f["pci"], f["physical_id"], f["ports"]) == (
        20034, "00000000:86:00.0", 3, [33])

"""The shipped alert rules (deploy/prometheus/) checked by Prometheus' own tool: ``promtool check
rules`` (syntax, templates), ``promtool test rules`` (each alert fires on the series that should
fire it and stays silent otherwise), and a mutation check that the unit tests bite: an alert
whose expression can never fire makes ``promtool test rules`` fail. The metric names the rules
use are names the metrics module emits."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvfabric.model.findings import Finding
from nvfabric.model.health import GpuFabric
from nvfabric.model.mask import decode_mask
from nvfabric.observe.metrics import Reading, render
from nvfabric.observe.unitstate import ServiceSnapshot, UnitSnapshot
from tests import runkit

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/nvfabric-alerts.yml"
TESTS = REPO / "deploy/prometheus/nvfabric-alerts.test.yml"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:  # never a skip: the tool is part of the test environment
        pytest.fail("promtool not found: install Debian's `prometheus` package")
    return path


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules_accepts_the_shipped_rules() -> None:
    out = runkit.run([_promtool(), "check", "rules", str(RULES)])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in out.stdout


def test_promtool_unit_tests_of_every_alert_pass() -> None:
    out = runkit.run([_promtool(), "test", "rules", str(TESTS)], cwd=TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    doc = yaml.safe_load(TESTS.read_text())
    firing: set[str] = set()
    silent: set[str] = set()
    for case in doc["tests"]:
        for t in case.get("alert_rule_test", []):
            (firing if t["exp_alerts"] else silent).add(t["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names == firing, names ^ firing
    assert names == silent, names ^ silent


def test_every_alert_has_a_summary_and_a_runbook_naming_nvfabric_doctor() -> None:
    for alert in _alerts():
        notes = alert["annotations"]
        assert notes["summary"].strip(), alert["alert"]
        assert "nvfabric doctor" in notes["runbook"], alert["alert"]
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]


@pytest.mark.parametrize("name", [a["alert"] for a in _alerts()])
def test_the_unit_tests_fail_when_an_alert_can_never_fire(tmp_path: Path, name: str) -> None:
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                rule["expr"] = "vector(1) == 0"
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    out = runkit.run([_promtool(), "test", "rules", TESTS.name], cwd=tmp_path)
    assert out.returncode != 0, f"{name}: its unit tests pass although it never fires"
    assert name in out.stdout + out.stderr


def _full_reading_metrics() -> set[str]:
    """Every metric family name the module renders for a reading with everything in it."""
    gpu = GpuFabric(0, "GPU-a", "00000000:18:00.0", "completed", "success", 3,
                    "6d8e4b5a-0000-4000-8000-000000000001", "healthy", decode_mask(0x1156), 0x1156)
    reading = Reading("healthy", "mnnvl", "570.148.08", (gpu,),
                      (Finding("imex_domain_degraded", "error", "m"),), imex_domain="UP")
    unit = UnitSnapshot((ServiceSnapshot("imex", "ready", 7, 0, ()),), True, 1.5, 0, "ready")
    text = render(reading, unit).decode()
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M)) | {
        n + "_total" for n in re.findall(r"^# TYPE (\S+) counter", text, re.M)}


#: The alerts on nvfabric's own presence, and the series of others they read: Prometheus' own
#: ``up`` of the scrape, node_exporter's textfile collector's file mtime.
PRESENCE = {"NvfabricDown": {"up"}, "NvfabricAbsent": set(),
            "NvfabricTextfileStale": {"node_textfile_mtime_seconds"}}


def test_the_rules_use_only_metrics_nvfabric_emits() -> None:
    emitted = _full_reading_metrics()
    for alert in _alerts():
        used = set(re.findall(r"\b(nvfabric_[a-z_]+)", alert["expr"]))
        assert used <= emitted, (alert["alert"], used - emitted)
        others = set(re.findall(r"\b(up|node_[a-z_]+)\b", alert["expr"]))
        assert others == PRESENCE.get(alert["alert"], set()), alert["alert"]
        assert used or others, alert["alert"]


def test_a_dead_agent_is_alerted_by_the_presence_rules() -> None:
    # every other rule stays silent while nvfabric's target is down or its series are gone
    names = {a["alert"] for a in _alerts()}
    assert set(PRESENCE) <= names
    by = {a["alert"]: a for a in _alerts()}
    assert by["NvfabricDown"]["expr"].startswith("up{")
    assert by["NvfabricAbsent"]["expr"] == "absent(nvfabric_build_info)"
    # the stale-file rule matches the file the shipped textfile timer writes
    service = (REPO / "packaging/systemd/nvfabric-textfile.service").read_text()
    (path,) = re.findall(r"--textfile (\S+)", service)
    regex = re.search(r'file=~"([^"]+)"', by["NvfabricTextfileStale"]["expr"]).group(1)  # type: ignore[union-attr]
    assert re.fullmatch(regex.replace("\\\\", "\\"), path), (regex, path)

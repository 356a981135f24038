"""deploy/grafana/nvfabric.json, the dashboard of nvfabric's metrics: loaded by the models of
Grafana's own dashboard schema (grafana-foundation-sdk, generated from Grafana's schema) with
nothing of it lost (a key the schema does not know, a misspelt one, would be), every panel of a
known panel plugin, and every query accepted by promtool (each as a recording rule of
``promtool check rules``) and reading only metrics nvfabric emits, or ``up`` of its scrape."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.models import dashboard

from tests.deploy.test_prometheus import _full_reading_metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy/grafana/nvfabric.json"
PANEL_TYPES = {"table", "stat", "timeseries"}


def _load() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def _lost(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Every key of ``ours`` that the schema model's JSON no longer has."""
    out: list[str] = []
    if isinstance(ours, dict):
        for key, value in ours.items():
            if not isinstance(theirs, dict) or key not in theirs:
                out.append(f"{path}/{key}")
            else:
                out += _lost(value, theirs[key], f"{path}/{key}")
    elif isinstance(ours, list) and isinstance(theirs, list):
        for n, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            out += _lost(a, b, f"{path}[{n}]")
    return out


def _through_schema(data: dict[str, Any]) -> Any:
    model = dashboard.Dashboard.from_json(copy.deepcopy(data))
    return json.loads(json.dumps(model.to_json(), default=lambda o: o.to_json()))


def test_the_dashboard_loads_into_grafanas_schema_without_losing_a_key() -> None:
    data = _load()
    assert _lost(data, _through_schema(data)) == []
    assert data["uid"] == "nvfabric-fabric" and data["schemaVersion"] >= 36


def test_the_check_catches_a_key_the_schema_does_not_know() -> None:
    data = _load()
    data["panels"][0]["gridPoss"] = data["panels"][0].pop("gridPos")
    assert "/panels[0]/gridPoss" in _lost(data, _through_schema(data))


def test_panels_cover_the_fabric_and_sit_on_the_grid() -> None:
    panels = _load()["panels"]
    assert {p["type"] for p in panels} <= PANEL_TYPES
    assert len({p["id"] for p in panels}) == len(panels)
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for metric in ("nvfabric_verdict", "nvfabric_gpu_fabric_state",
                   "nvfabric_service_restarts_total", "nvfabric_fabric_time_to_ready_seconds",
                   'up{job=~".*nvfabric.*"}'):
        assert metric in exprs, metric
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        assert p["description"].strip(), p["title"]


def _queries() -> list[str]:
    data = _load()
    out = [t["expr"] for p in data["panels"] for t in p["targets"]]
    out += [re.sub(r"^label_values\((\w+), \w+\)$", r"\1", v["query"]["query"])
            for v in data["templating"]["list"] if v["type"] == "query"]
    # the dashboard's variables, as Grafana substitutes them (all nodes)
    return [q.replace("$instance", ".*") for q in out]


def test_every_query_is_valid_promql_by_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:  # never a skip: the tool is part of the test environment
        pytest.fail("promtool not found: install Debian's `prometheus` package")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"nvfabric_dashboard:q{n}", "expr": q} for n, q in enumerate(_queries())]}]}
    (tmp_path / "q.yml").write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(tmp_path / "q.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    # and the check bites
    (tmp_path / "bad.yml").write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "sum by (state) (nvfabric_verdict"}]}]}))
    assert subprocess.run([promtool, "check", "rules", str(tmp_path / "bad.yml")],
                          capture_output=True, timeout=60).returncode != 0


def test_every_query_reads_only_metrics_nvfabric_emits() -> None:
    emitted = _full_reading_metrics() | {"up"}
    for q in _queries():
        names = set(re.findall(r"\b(nvfabric_[a-z_]+|up)\b(?=\s*[{\[(]|\s*$|\s*[=<>)])", q))
        assert names, q
        assert names <= emitted, (q, names - emitted)


def test_the_provisioning_file_is_grafanas_format() -> None:
    doc = yaml.safe_load((REPO / "deploy/grafana/provisioning.yaml").read_text())
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")

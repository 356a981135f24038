"""A real Prometheus (Debian's ``prometheus``) scraping ``nvfabric run --listen`` on a simulated
DGX B200, with the shipped alert rules loaded: ``nvfabric_fabric_ready`` becomes 1, a killed
NVLSM is restarted (``--restart on-failure``) and the restart counter rises, and
``NvfabricServiceDown`` reaches pending while NVLSM is down. Prometheus runs on 127.0.0.1 on
a free port with its own config and storage in the test's directory, and is stopped by pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.httpkit import free_port, wait_status
from tests.integration.debroot import require
from tests.runkit import Run, events, sim

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/nvfabric-alerts.yml"
#: Prometheus' first scrape and rule evaluation can take ~10 s after its start.
BOUND_S = 60.0


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int], int]]:
    """``prometheus(target_port)`` starts Prometheus scraping 127.0.0.1:target_port every
    second and evaluating the rules every second; returns its own port."""
    require("prometheus")
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: int) -> int:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "nvfabric",
                                "static_configs": [{"targets": [f"127.0.0.1:{target}"]}]}],
        }))
        log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=tmp_path))
        log.close()
        wait_status(port, "/-/ready", 200, bound=BOUND_S)
        return port

    yield start
    for proc in procs:  # by pid: SIGTERM, then SIGKILL after a bound
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - our own 127.0.0.1
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def _value(port: int, query: str) -> float | None:
    result = _api(port, "query", query=query)["result"]
    return float(result[0]["value"][1]) if result else None


def _until(what: str, check: Callable[[], bool], bound: float = BOUND_S,
           step: float = 0.2) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(step)
    raise AssertionError(f"Prometheus never saw {what} within {bound:g} s")


def _alert_state(port: int, name: str, service: str) -> str | None:
    for alert in _api(port, "alerts")["alerts"]:
        if alert["labels"].get("alertname") == name and \
                alert["labels"].get("service") == service:
            return str(alert["state"])
    return None


def test_prometheus_scrapes_readiness_restarts_and_the_service_down_alert(
        tmp_path: Path, start: Callable[..., Run],
        prometheus: Callable[[int], int]) -> None:
    root = sim(tmp_path, "dgx-b200")
    target = free_port()
    run = start(root, "--listen", f"127.0.0.1:{target}", "--health-interval", "1",
                "--restart", "on-failure", "--restart-delay", "8",
                "--gpu-reset-command", f"{root}/bin/nvidia-smi -r")
    run.wait_line(r"fabric ready in")
    prom = prometheus(target)
    _until("nvfabric_fabric_ready 1", lambda: _value(prom, "nvfabric_fabric_ready") == 1.0)
    assert _value(prom, 'up{job="nvfabric"}') == 1.0
    assert _value(prom, 'nvfabric_service_restarts_total{service="nvlsm"}') == 0.0
    assert _alert_state(prom, "NvfabricServiceDown", "nvlsm") is None

    (first,) = events(root, "nvlsm", "exec")
    os.kill(int(first["pid"]), signal.SIGKILL)
    run.wait_line(r"restarting the unit in 8 s")
    _until("NvfabricServiceDown pending for nvlsm",
           lambda: _alert_state(prom, "NvfabricServiceDown", "nvlsm") == "pending")
    assert _value(prom, "nvfabric_fabric_ready") == 0.0
    _until("the nvlsm restart counted", lambda: (_value(
        prom, 'nvfabric_service_restarts_total{service="nvlsm"}') or 0.0) >= 1.0)
    _until("nvfabric_fabric_ready 1 again",
           lambda: _value(prom, "nvfabric_fabric_ready") == 1.0)
    assert len(events(root, "nvlsm", "exec")) == 2
    run.signal(signal.SIGTERM)
    assert run.wait() == 0

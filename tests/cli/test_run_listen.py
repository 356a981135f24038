"""``nvfabric run --listen`` as a real process on simulated nodes: the probes follow the
unit's readiness, /metrics passes ``promtool check metrics`` and counts a restart, /status is
the JSON of ``nvfabric status``; bad addresses and busy ports are one line, exit 2; and
``--log-format json`` writes one object per line."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_status_prometheus import promtool_check, series
from tests.conftest import run_cli
from tests.httpkit import free_port, get, wait_status
from tests.runkit import TIMESTAMP, Run, events, poll, sim


def test_b200_probes_follow_readiness_and_metrics_lint_clean(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    port = free_port()
    run = start(root, "--listen", f"127.0.0.1:{port}", "--health-interval", "1")
    run.wait_line(r"serving /metrics, /healthz, /readyz, /status on http://127\.0\.0\.1:")
    assert wait_status(port, "/healthz", 200) == "ok\n"
    run.wait_line(r"fabric ready in")
    assert wait_status(port, "/readyz", 200) == "ready\n"
    status, ctype, text = get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    promtool_check(text)
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 1.0}
    assert series(text, "nvfabric_service_up") == {
        'nvfabric_service_up{service="nvlsm"}': 1.0,
        'nvfabric_service_up{service="fabricmanager"}': 1.0}
    ready_after = series(text, "nvfabric_fabric_time_to_ready_seconds")[
        "nvfabric_fabric_time_to_ready_seconds"]
    assert 0 < ready_after < 30
    # the reading is re-read on the interval: the GPUs registered once the services started
    wait_status(port, "/status", 200)
    report = poll(lambda: json.loads(get(port, "/status")[2]),
                  lambda r: r["verdict"] == "healthy", "a healthy /status", every=0.2)
    assert {s["name"]: s["running"] for s in report["services"]} == {
        "nvlsm": True, "fabricmanager": True}
    assert sum(v for k, v in series(get(port, "/metrics")[2], "nvfabric_gpu_fabric_state").items()
               if 'state="completed"' in k) == 8
    assert get(port, "/nope")[0] == 404
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    with pytest.raises(OSError):
        get(port, "/healthz", timeout=1)


def test_killed_nvlsm_is_down_then_restarted_and_counted(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    port = free_port()
    # a 5 s restart delay: the not-ready window this test reads must outlast its polls on a
    # loaded machine
    run = start(root, "--listen", f"127.0.0.1:{port}", "--restart", "on-failure",
                "--restart-delay", "5", "--gpu-reset-command", f"{root}/bin/nvidia-smi -r")
    run.wait_line(r"fabric ready in")
    wait_status(port, "/readyz", 200)
    (first,) = events(root, "nvlsm", "exec")
    os.kill(int(first["pid"]), signal.SIGKILL)
    run.wait_line(r"restarting the unit in")
    assert wait_status(port, "/readyz", 503).startswith("not ready: ")
    text = get(port, "/metrics")[2]
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 0.0}
    assert series(text, "nvfabric_service_up")['nvfabric_service_up{service="nvlsm"}'] == 0.0
    assert series(text, "nvfabric_service_exits_total")[
        'nvfabric_service_exits_total{reason="signal",service="nvlsm"}'] == 1.0
    run.wait_count(r"fabric ready in", 2)
    wait_status(port, "/readyz", 200)
    text = promtool_check(get(port, "/metrics")[2])
    assert series(text, "nvfabric_service_restarts_total") == {
        'nvfabric_service_restarts_total{service="nvlsm"}': 1.0,
        'nvfabric_service_restarts_total{service="fabricmanager"}': 1.0}
    assert series(text, "nvfabric_service_up")['nvfabric_service_up{service="nvlsm"}'] == 1.0
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_gb200_tray_serves_lint_clean_metrics_with_the_imex_service(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "gb200-tray")
    port = free_port()
    run = start(root, "--listen", f"127.0.0.1:{port}", "--health-interval", "1")
    run.wait_line(r"fabric ready in")
    wait_status(port, "/readyz", 200)
    # the domain is read on the interval: UP once the daemon formed it
    text = poll(lambda: get(port, "/metrics")[2],
                lambda t: series(t, "nvfabric_imex_domain_state").get(
                    'nvfabric_imex_domain_state{state="UP"}') == 1.0,
                "an UP IMEX domain in /metrics", every=0.2)
    assert series(text, "nvfabric_imex_domain_state") == {
        'nvfabric_imex_domain_state{state="UP"}': 1.0,
        'nvfabric_imex_domain_state{state="DEGRADED"}': 0.0,
        'nvfabric_imex_domain_state{state="DOWN"}': 0.0}, text
    promtool_check(text)
    assert series(text, "nvfabric_service_up") == {'nvfabric_service_up{service="imex"}': 1.0}
    assert 'fabric="mnnvl"' in text
    # status --prometheus (a textfile timer) asks the running daemon for the domain too
    once = run_cli("status", "--root", str(root), "--prometheus")
    assert series(promtool_check(once.stdout), "nvfabric_imex_domain_state")[
        'nvfabric_imex_domain_state{state="UP"}'] == 1.0
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_nothing_to_start_with_stay_is_ready(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "h100-pcie")
    port = free_port()
    run = start(root, "--stay", "--listen", f"127.0.0.1:{port}")
    run.wait_line(r"fabric none: nothing to start")
    assert wait_status(port, "/readyz", 200) == "ready\n"
    assert json.loads(wait_status(port, "/status", 200))["verdict"] == "not_applicable"
    text = promtool_check(get(port, "/metrics")[2])
    assert 'fabric="none"' in text
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 1.0}
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


@pytest.mark.parametrize(("value", "why"), [
    ("9464", "give HOST:PORT"),
    ("127.0.0.1:0", "from 1 to 65535"),
    ("127.0.0.1:http", "from 1 to 65535"),
    ("node-a:9464", "not an IPv4 address"),
    ("[::zz]:9464", "not an IPv6 address"),
    ("::1:9464", "not an IPv4 address"),
])
def test_bad_listen_address_is_one_line_exit_2_and_nothing_started(
        tmp_path: Path, value: str, why: str) -> None:
    root = sim(tmp_path, "dgx-b200")
    proc = run_cli("run", "--root", str(root), "--listen", value)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and why in proc.stderr, proc.stderr
    assert not events(root, event="exec")


def test_busy_port_is_exit_2_before_any_service_starts(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("run", "--root", str(root), "--listen", f"127.0.0.1:{port}")
    assert proc.returncode == 2
    assert "cannot listen: Address already in use" in proc.stderr.splitlines()[-1]
    assert not events(root, event="exec")


def test_dry_run_with_listen_binds_nothing(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    with socket.socket() as busy:  # a bind would fail: a dry run does not bind
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = run_cli("run", "--root", str(root), "--dry-run", "--json",
                       "--listen", f"127.0.0.1:{busy.getsockname()[1]}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == "would_start"


def test_log_lines_have_timestamps_and_json_lines_parse(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-a100", {"fabricmanager": {"crash_after_s": 0.5, "exit_code": 3}})
    text_run = start(root)
    text_run.wait_line(r"run failed")
    assert text_run.wait() == 1
    assert text_run.raw_lines and all(TIMESTAMP.match(x) for x in text_run.raw_lines), (
        text_run.raw_lines)
    run = start(root, "--log-format", "json")
    run.wait_line(r'"run failed')
    assert run.wait() == 1
    objs = [json.loads(x) for x in run.raw_lines]
    assert all(set(o) == {"time", "level", "source", "message", "code"} for o in objs)
    assert all(TIMESTAMP.match(o["time"] + " ") for o in objs)
    assert {o["source"] for o in objs} >= {"nvfabric", "fabricmanager"}
    (exited,) = [o for o in objs if o["code"] == "service_exited"]
    assert exited["level"] == "error" and exited["source"] == "nvfabric"
    assert exited["message"].startswith("fabricmanager (pid ")  # level and code are fields
    daemon = [o for o in objs if o["source"] == "fabricmanager"]
    assert daemon and all(o["code"] is None and o["level"] == "info" for o in daemon)


def test_a_preflight_refusal_under_log_format_json_is_json_lines_too(tmp_path: Path) -> None:
    # field report: with --log-format json the refusal came as the human block on stderr
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"version": "570.133.20"}})
    done = run_cli("run", "--root", str(root), "--log-format", "json")
    assert done.returncode == 1
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [r["code"] for r in records if r["code"]] == ["version_mismatch"]
    assert all(r["time"].endswith("Z") for r in records)

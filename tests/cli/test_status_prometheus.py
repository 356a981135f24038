"""`nvfabric status --prometheus` and `--textfile` through the real CLI, checked by
Prometheus' own linter (`promtool check metrics`: format, HELP, naming, counters), on simulated
nodes (DGX B200, GB200 tray) and saved nvidia-smi captures from the field."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import runkit
from tests.cases import CORPUS
from tests.conftest import run_cli
from tests.runkit import Run, sim

SMI = CORPUS / "nvidia-smi"


def promtool_check(text: str) -> str:
    """``promtool check metrics`` on ``text``: fails the test on any error or lint warning."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not found: install Debian's `prometheus` package")
    out = runkit.run([tool, "check", "metrics"], input=text)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), (
        out.stdout + out.stderr)
    return text


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample line."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def series(text: str, name: str) -> dict[str, float]:
    return {k: v for k, v in samples(text).items() if re.match(rf"{name}(\{{|$)", k)}


def test_dgx_b200_before_bring_up_lints_clean_and_shows_8_gpus_not_started(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    proc = run_cli("status", "--root", str(root), "--prometheus")
    assert proc.returncode == 1, proc.stderr  # unhealthy: nothing runs yet
    text = promtool_check(proc.stdout)
    states = series(text, "nvfabric_gpu_fabric_state")
    assert len(states) == 8 * 4  # one series per GPU and state
    assert sum(v for k, v in states.items() if 'state="not_started"' in k) == 8
    assert sum(states.values()) == 8  # exactly one state is 1 per GPU
    assert series(text, "nvfabric_verdict") == {
        f'nvfabric_verdict{{verdict="{w}"}}': float(w == "unhealthy")
        for w in ("healthy", "degraded", "unhealthy", "pending", "not_applicable")}
    assert series(text, "nvfabric_service_up") == {
        'nvfabric_service_up{service="nvlsm"}': 0.0,
        'nvfabric_service_up{service="fabricmanager"}': 0.0}
    build = series(text, "nvfabric_build_info")
    assert list(build) == ['nvfabric_build_info{driver_version="570.148.08",fabric="nvlink5",'
                           'version="0.1.0"}']
    assert 'gpu="0"' in next(iter(states)) and 'pci_bus_id="00000000:18:00.0"' in next(
        iter(states)) and 'UUID="GPU-' in next(iter(states))
    # run-only series are absent: status does not supervise
    assert not series(text, "nvfabric_fabric_ready")
    assert not series(text, "nvfabric_service_restarts_total")


def test_gb200_tray_lints_clean_and_counts_its_findings(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    proc = run_cli("status", "--root", str(root), "--prometheus")
    text = promtool_check(proc.stdout)
    assert 'fabric="mnnvl"' in text
    assert series(text, "nvfabric_service_up") == {'nvfabric_service_up{service="imex"}': 0.0}
    # no IMEX daemon runs: its domain is not asked (DOWN between jobs is no fault)
    assert not series(text, "nvfabric_imex_domain_state")
    findings = series(text, "nvfabric_findings")
    json_proc = run_cli("status", "--root", str(root), "--json")
    codes = [(f["code"], f["severity"]) for f in json.loads(json_proc.stdout)["findings"]]
    assert findings == {
        f'nvfabric_findings{{code="{c}",severity="{s}"}}': float(codes.count((c, s)))
        for c, s in set(codes)}
    assert proc.returncode == json_proc.returncode


def test_gb200_capture_carries_clique_cluster_uuid_and_every_health_field() -> None:
    proc = run_cli("status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-gb200.xml"),
                   "--prometheus")
    assert proc.returncode == 0, proc.stderr
    text = promtool_check(proc.stdout)
    cliques = series(text, "nvfabric_gpu_fabric_clique_id")
    assert len(cliques) == 4 and set(cliques.values()) == {2.0}
    info = series(text, "nvfabric_gpu_fabric_info")
    assert len(info) == 4 and all(
        'cluster_uuid="00000001-0000-0000-0000-000000000001"' in k
        and 'status="success"' in k and 'health_summary="healthy"' in k for k in info)
    health = series(text, "nvfabric_gpu_fabric_health")
    fields = {re.search(r'field="([a-z_]+)"', k).group(1) for k in health}  # type: ignore[union-attr]
    # one series per field the capture gives a value (N/A fields have none)
    assert fields == {"degraded_bandwidth", "route_recovery", "route_unhealthy",
                      "access_timeout_recovery"}
    assert len(health) == 4 * 4 and set(health.values()) == {0.0}  # a healthy tray


def test_unhealthy_health_field_and_error_status_are_visible_to_the_alerts() -> None:
    proc = run_cli("status", "--from-nvidia-smi",
                   str(SMI / "fabric-insufficient-resources-azhpc506.txt"), "--prometheus")
    assert proc.returncode == 1
    text = promtool_check(proc.stdout)
    (key,) = series(text, "nvfabric_gpu_fabric_info")
    assert 'status="NVML_ERROR_INSUFFICIENT_RESOURCES"' in key
    # the excerpt names no GPU product: the fabric kind is not told (capture_column_missing)
    assert series(text, "nvfabric_findings") == {
        'nvfabric_findings{code="registration_error",severity="error"}': 1.0,
        'nvfabric_findings{code="capture_column_missing",severity="info"}': 1.0}
    unhealthy = run_cli("status", "--from-nvidia-smi",
                        str(SMI / "gb200-fabric-unhealthy-grep-C3-dra626.txt"), "--prometheus")
    info = series(promtool_check(unhealthy.stdout), "nvfabric_gpu_fabric_info")
    assert any('health_summary="unhealthy"' in k for k in info)


def test_textfile_is_written_atomically_with_the_printed_metrics(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / "var/lib/node_exporter").mkdir(parents=True)
    target = root / "var/lib/node_exporter/nvfabric.prom"
    target.write_text("old\n")
    proc = run_cli("status", "--root", str(root), "--prometheus",
                   "--textfile", "/var/lib/node_exporter/nvfabric.prom")
    assert proc.returncode == 1, proc.stderr
    assert target.read_text() == proc.stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(os.listdir(target.parent)) == ["nvfabric.prom"]  # no temp file, no backup
    # without --prometheus the human report is printed and the file still written
    target.unlink()
    human = run_cli("status", "--root", str(root), "--textfile",
                    "/var/lib/node_exporter/nvfabric.prom")
    assert human.stdout.startswith("unhealthy")
    promtool_check(target.read_text())


@pytest.mark.parametrize(("path", "why"), [
    ("/var/lib/node_exporter/nvfabric.txt", "must end in .prom"),
    ("/no/such/dir/nvfabric.prom", "no directory {root}/no/such/dir (/no/such/dir under "
                                   "--root {root})"),
    ("/../escape.prom", "'..'"),
    ("relative.prom", "absolute"),
])
def test_bad_textfile_is_one_line_exit_2_and_nothing_written(
        tmp_path: Path, path: str, why: str) -> None:
    root = sim(tmp_path, "dgx-b200")
    before = sorted(p for p in root.rglob("*.prom"))
    proc = run_cli("status", "--root", str(root), "--textfile", path)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert why.format(root=root) in proc.stderr
    assert sorted(p for p in root.rglob("*.prom")) == before


def test_a_textfile_directory_of_this_host_is_looked_for_under_the_root(tmp_path: Path) -> None:
    """``--root R --textfile /existing/dir/a.prom``: the directory exists here, not under R;
    the message names where it was looked for, so it does not read as a false "no such"."""
    root = sim(tmp_path, "dgx-b200")
    here = tmp_path / "collector"
    here.mkdir()
    proc = run_cli("status", "--root", str(root), "--textfile", f"{here}/a.prom")
    assert proc.returncode == 2 and not (here / "a.prom").exists()
    assert (f"--textfile '{here}/a.prom': no directory {root}{here} ({here} under --root "
            f"{root})") in proc.stderr
    assert "host path under --root" in proc.stderr


def test_prometheus_and_json_together_is_a_usage_error() -> None:
    proc = run_cli("status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-b200.xml"),
                   "--prometheus", "--json")
    assert proc.returncode == 2 and "give one" in proc.stdout


def test_json_plan_and_run_without_listen_load_no_prometheus_client_nor_http(
        tmp_path: Path) -> None:
    code = ("import sys, runpy; sys.argv = ['nvfabric'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('nvfabric', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "loaded = {'prometheus_client', 'http.server'} & set(sys.modules)\n"
            "print(f'LOADED {loaded}' if loaded else 'CLEAN', file=sys.stderr)")
    root = str(sim(tmp_path, "dgx-b200"))
    for args in (["status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-b200.xml"),
                  "--json"], ["plan", "--root", root, "--json"],
                 ["run", "--root", root, "--dry-run", "--json"]):
        out = runkit.run([sys.executable, "-c", code, *args])
        assert out.stderr.strip().endswith("CLEAN"), (args, out.stderr)


def test_textfile_of_a_node_with_a_live_run_carries_its_readiness(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    run = start(root)
    run.wait_line(r"fabric ready in")
    text = promtool_check(run_cli("status", "--root", str(root), "--prometheus").stdout)
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 1.0}
    ready = json.loads((root / "run/nvfabric/ready").read_text())
    assert series(text, "nvfabric_fabric_time_to_ready_seconds") == {
        "nvfabric_fabric_time_to_ready_seconds": ready["ready_after_s"]}
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    after = run_cli("status", "--root", str(root), "--prometheus").stdout
    assert not series(after, "nvfabric_fabric_ready")  # no run holds the lock: unknown


def test_a_live_run_not_ready_yet_is_fabric_ready_0(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"register_delay_s": 30}})
    run = start(root)
    run.wait_line(r"started fabricmanager")
    text = promtool_check(run_cli("status", "--root", str(root), "--prometheus").stdout)
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 0.0}
    assert not series(text, "nvfabric_fabric_time_to_ready_seconds")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0

"""`nvfabric status` and `nvfabric wait` through the real CLI: exit codes, JSON shape, bad
input, the live path on a simulated node with its own nvidia-smi."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import runkit
from tests.cases import CORPUS
from tests.conftest import run_cli, run_json
from tests.runkit import sim, until

SMI = CORPUS / "nvidia-smi"


def test_xml_capture_of_an_8_gpu_b200_is_healthy() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-b200.xml"))
    assert (out["verdict"], rc, out["fabric"], out["fabric_source"]) == (
        "healthy", 0, "nvlink5", "inferred")
    assert len(out["gpus"]) == 8 and out["services"] is None
    assert out["driver_version"] == "580.105.08"


def test_fabric_option_overrides_the_inference() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", str(SMI / "k8s-test-infra-hw-qx-b200.xml"),
                       "--fabric", "mnnvl")
    assert (out["verdict"], rc) == ("unhealthy", 1)  # zero ClusterUUID on a tray
    assert "fabric_unhealthy" in {f["code"] for f in out["findings"]}


def test_capture_from_stdin() -> None:
    text = (SMI / "fabric-in-progress-580-wide-columns-gpuop2511.txt").read_text()
    out, rc = run_json("status", "--from-nvidia-smi", "-", stdin=text)
    assert (out["verdict"], rc) == ("pending", 1)


def test_human_output_names_the_verdict_and_the_gpus() -> None:
    proc = run_cli("status", "--from-nvidia-smi",
                   str(SMI / "fabric-insufficient-resources-azhpc506.txt"))
    assert proc.returncode == 1
    assert proc.stdout.startswith("unhealthy")
    assert "NVML_ERROR_INSUFFICIENT_RESOURCES" in proc.stdout
    assert "registration_error" in proc.stdout


def test_missing_file_is_exit_2_with_one_line(tmp_path: Path) -> None:
    proc = run_cli("status", "--from-nvidia-smi", str(tmp_path / "nope.txt"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "input_unreadable" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_non_fabric_capture_is_exit_2_naming_it() -> None:
    out, rc = run_json("status", "--from-nvidia-smi",
                       str(SMI / "h100-passthrough-vm-nvidia-smi-topo-matrix.txt"))
    assert rc == 2 and "topo --matrix" in out["error"]["message"]


def _fake_smi(root: Path, capture: Path) -> None:
    smi = root / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f"#!/bin/sh\ncat '{capture}'\n")
    smi.chmod(0o755)


def test_live_status_on_a_simulated_b200_without_services(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    _fake_smi(root, SMI / "k8s-test-infra-hw-qx-b200.xml")
    out, rc = run_json("status", "--root", str(root))
    assert (out["fabric"], out["fabric_source"]) == ("nvlink5", "plan")
    assert {s["name"] for s in out["services"]} == {"nvlsm", "fabricmanager"}
    assert (out["verdict"], rc) == ("degraded", 1)  # GPUs fine, FM and NVLSM not running
    assert {f["code"] for f in out["findings"]} == {"fm_inactive", "nvlsm_missing"}


def test_live_status_with_services_running(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    _fake_smi(root, SMI / "k8s-test-infra-hw-qx-b200.xml")
    run = root / "run" / "nvfabric"
    run.mkdir(parents=True)
    for name in ("nvlsm", "fabricmanager"):
        (run / f"{name}.pid").write_text(f"{os.getpid()}\n")
    out, rc = run_json("status", "--root", str(root))
    assert (out["verdict"], rc, out["findings"]) == ("healthy", 0, [])


def test_wait_times_out_with_the_findings(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    _fake_smi(root, SMI / "fabric-in-progress-580-wide-columns-gpuop2511.txt")
    out, rc = run_json("wait", "--root", str(root), "--timeout", "0.3", "--interval", "0.1")
    assert (rc, out["timed_out"]) == (1, True)
    assert "registration_stuck" in {f["code"] for f in out["findings"]}


def test_wait_returns_at_once_when_not_applicable(node: Callable[..., Path]) -> None:
    root = node("h100-pcie")
    _fake_smi(root, SMI / "rtx4090-8gpu-535.154.05-nvidia-smi-q.txt")
    out, rc = run_json("wait", "--root", str(root), "--timeout", "30")
    assert (rc, out["verdict"], out["timed_out"]) == (0, "not_applicable", False)


CSV_HEADER = "index, uuid, fabric.state, fabric.status, fabric.cliqueId, fabric.clusterUuid\n"


def test_csv_row_with_unrecognised_state_is_exit_2_naming_row_and_value() -> None:
    # Tester report 9(a): `1, GPU-bbbb, Bogus, Whatever, x, y` was judged healthy, exit 0.
    out, rc = run_json("status", "--from-nvidia-smi", "-",
                       stdin=CSV_HEADER + "1, GPU-bbbb, Bogus, Whatever, x, y\n")
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert "CSV row 1" in out["error"]["message"] and "'Bogus'" in out["error"]["message"]


@pytest.mark.parametrize("index", ["x", "-1", "1.5", "99999999999999999999999"])
def test_csv_row_with_an_index_nvidia_smi_never_prints_is_exit_2(index: str) -> None:
    # `x, GPU-aaaa, Completed, Success, 0, <uuid>` was judged healthy as GPU 0 (the row
    # number stood in for the index), exit 0.
    out, rc = run_json("status", "--from-nvidia-smi", "-",
                       stdin=CSV_HEADER + f"{index}, GPU-aaaa, Completed, Success, 0, "
                       "00000000-0000-0000-0000-000000000000\n")
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert f"CSV row 1: unrecognised GPU index {index!r}" in out["error"]["message"]


def test_csv_row_with_a_plain_index_is_read() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", "-",
                       stdin=CSV_HEADER + "3, GPU-aaaa, Completed, Success, 0, "
                       "00000000-0000-0000-0000-000000000000\n")
    assert (rc, [g["index"] for g in out["gpus"]]) == (0, [3])


def test_markup_and_control_characters_from_a_capture_are_printed_literally() -> None:
    # Tester report 1/14: `[/]` in a capture crashed the human output (exit 3); escape
    # sequences reached the terminal raw.
    text = ("index, pci.bus_id, driver_version, fabric.state, fabric.status, fabric.cliqueId, "
            "fabric.clusterUuid\n0, 0000[/]:18:00.0, 580.1[bold]\x1b[31m, Completed, Success, "
            "0, 00000000-0000-0000-0000-000000000000\n")
    proc = run_cli("status", "--from-nvidia-smi", "-", stdin=text)
    assert proc.returncode == 0, proc.stderr
    assert "0000[/]:18:00.0" in proc.stdout
    assert "580.1[bold]\\x1b[31m" in proc.stdout and "\x1b" not in proc.stdout


def test_gb200_tray_lists_only_imex_and_judges_it_by_owner(tmp_path: Path) -> None:
    # Tester report 9(c): nvlsm and fabric manager were listed (as not running) on a tray that
    # never runs them, and IMEX not running left the verdict healthy with no word about it.
    root = sim(tmp_path, "gb200-tray")
    out, rc = run_json("status", "--root", str(root))
    assert [s["name"] for s in out["services"]] == ["imex"]
    assert (out["verdict"], rc) == ("healthy", 0)  # nothing owns IMEX here: information
    (f,) = [f for f in out["findings"] if f["code"] == "imex_not_ready"]
    assert (f["severity"], f["imex_owner"]) == ("info", "none")
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "nvidia-imex.service").symlink_to("/usr/lib/systemd/system/nvidia-imex.service")
    out, rc = run_json("status", "--root", str(root))
    assert (out["verdict"], rc) == ("degraded", 1)  # the host's own IMEX is down
    assert [(f["code"], f["severity"]) for f in out["findings"]] == [
        ("imex_not_ready", "warning")]


def test_node_without_fabric_lists_no_service_and_no_error(tmp_path: Path) -> None:
    # Tester report 9(e): not_applicable, exit 0, yet an ERROR nvml_unavailable finding.
    root = sim(tmp_path, "no-gpu")
    out, rc = run_json("status", "--root", str(root))
    assert (out["verdict"], rc, out["services"]) == ("not_applicable", 0, [])
    assert {f["severity"] for f in out["findings"]} <= {"info"}


def test_wait_bounds_a_hanging_nvidia_smi_by_its_timeout(node: Callable[..., Path]) -> None:
    # Tester report 8: `wait --timeout 2` took 15 s per check when nvidia-smi hung (and the
    # hung child's own children kept the pipe open longer still). The run_cli limit is the
    # bound: far below one unbounded probe.
    root = node("dgx-b200")
    smi = root / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text("#!/bin/sh\nsleep 60\n")
    smi.chmod(0o755)
    out, rc = run_json("wait", "--root", str(root), "--timeout", "1", "--interval", "0.1",
                       timeout=12)
    assert (rc, out["timed_out"]) == (1, True)
    (f,) = [f for f in out["findings"] if f["code"] == "nvml_unavailable"]
    assert f["reason"] == "timeout" and "did not answer within" in f["message"]


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (no such process, or a zombie left to its new parent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


# `status`/`wait` killed while the nvidia-smi probe ran left the probe running with PPID 1.
@pytest.mark.parametrize(("command", "sig"), [("status", signal.SIGTERM),
                                               ("status", signal.SIGINT),
                                               ("wait", signal.SIGTERM)])
def test_killed_status_or_wait_takes_its_nvidia_smi_probe_along(
        node: Callable[..., Path], tmp_path: Path, command: str, sig: signal.Signals) -> None:
    root = node("dgx-b200")
    pidfile = tmp_path / "probe.pid"
    smi = root / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f"#!/bin/sh\necho $$ > '{pidfile}.tmp'\nmv '{pidfile}.tmp' '{pidfile}'\n"
                   "exec sleep 300\n")
    smi.chmod(0o755)
    child = runkit.Child([sys.executable, "-m", "nvfabric", command, "--root", str(root)])
    try:
        until(lambda: pidfile.exists() or child.proc.poll() is not None, "the probe's start")
        assert pidfile.exists(), f"the probe never started; stderr:\n{child.log}"
        probe = int(pidfile.read_text())
        child.signal(sig)
        assert child.wait() != 0
        until(lambda: _gone(probe), f"probe {probe} gone with `nvfabric {command}`")
    finally:
        child.close()
        if pidfile.exists() and not _gone(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("capture", ["k8s-test-infra-hw-qx-b200.xml",
                                     "fabric-in-progress-580-wide-columns-gpuop2511.txt",
                                     "csv"])
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-8-sig",
                                      "utf-32"])
def test_a_capture_saved_as_utf16_or_with_a_bom_is_read_as_utf8_is(
        tmp_path: Path, capture: str, encoding: str) -> None:
    """PowerShell's `nvidia-smi -q > FILE` writes UTF-16 LE with a BOM: the same verdict as the
    UTF-8 capture (before: 'not an nvidia-smi ... capture', exit 2)."""
    if capture == "csv":
        text = ("index, uuid, pci.bus_id, fabric.state, fabric.status, fabric.cliqueId, "
                "fabric.clusterUuid\r\n0, GPU-a, 00000000:18:00.0, Completed, Success, 0, "
                "00000000-0000-0000-0000-000000000000\r\n")
    else:
        text = (SMI / capture).read_text(encoding="utf-8")
    plain, saved = tmp_path / "plain", tmp_path / "saved"
    plain.write_bytes(text.encode("utf-8"))
    saved.write_bytes(text.encode(encoding))
    want, want_rc = run_json("status", "--from-nvidia-smi", str(plain), "--fabric", "nvswitch")
    got, rc = run_json("status", "--from-nvidia-smi", str(saved), "--fabric", "nvswitch")
    assert "error" not in got and (got, rc) == (want, want_rc)


def test_a_binary_file_with_nul_bytes_is_refused_as_no_capture(tmp_path: Path) -> None:
    blob = tmp_path / "core"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    out, rc = run_json("status", "--from-nvidia-smi", str(blob))
    assert rc == 2 and "not an nvidia-smi capture" in out["error"]["message"]


_CSV_HEAD = ("index, uuid, pci.bus_id, fabric.state, fabric.status, fabric.cliqueId, "
             "fabric.clusterUuid\n0, GPU-a, 00000000:18:00.0, Completed, Success, 0, "
             "00000000-0000-0000-0000-000000000000\n")


@pytest.mark.parametrize(("printed", "nvml_error"), [
    ("[GPU requires reset]", "NVML_ERROR_RESET_REQUIRED"),
    ("[GPU is lost]", "NVML_ERROR_GPU_IS_LOST"),
    ("[Unknown Error]", "NVML_ERROR_UNKNOWN"),
    ("[Insufficient Permissions]", "NVML_ERROR_NO_PERMISSION"),
])
def test_an_error_nvidia_smi_prints_for_the_fabric_state_is_a_gpu_fault_not_bad_input(
        tmp_path: Path, printed: str, nvml_error: str) -> None:
    """nvidia-smi prints nvmlErrorString in place of a value it could not read; that GPU is
    not read (unhealthy, exit 1, as NVML's failed fabric query), never exit 2."""
    capture = tmp_path / "fabric.csv"
    capture.write_text(_CSV_HEAD + f"1, GPU-b, 00000000:19:00.0, {printed}, {printed}, "
                       f"{printed}, {printed}\n", encoding="utf-8")
    out, rc = run_json("status", "--from-nvidia-smi", str(capture), "--fabric", "nvswitch")
    assert (rc, out.get("verdict")) == (1, "unhealthy"), out
    (err,) = [f for f in out["findings"] if f["code"] == "nvml_unavailable"]
    assert err["severity"] == "error" and err["gpu"] == 1 and err["nvml_error"] == nvml_error
    assert err["pci"] == "00000000:19:00.0" and printed.strip("[]") in err["message"]


def test_the_same_error_in_q_text_and_xml_is_the_same_finding(tmp_path: Path) -> None:
    text = (SMI / "fabric-in-progress-580-wide-columns-gpuop2511.txt").read_text(encoding="utf-8")
    xml = (SMI / "k8s-test-infra-hw-qx-b200.xml").read_text(encoding="utf-8")
    assert ": In Progress" in text and "<state>Completed</state>" in xml
    for name, body in (
            ("q.txt", text.replace(": In Progress", ": GPU requires reset", 1)),
            ("q.xml", xml.replace("<state>Completed</state>", "<state>Unknown Error</state>", 1))):
        path = tmp_path / name
        path.write_text(body, encoding="utf-8")
        out, rc = run_json("status", "--from-nvidia-smi", str(path))
        assert rc == 1 and out["verdict"] == "unhealthy", out
        assert [f["gpu"] for f in out["findings"] if f["code"] == "nvml_unavailable"] == [0]


@pytest.mark.parametrize("body", [
    "index, uuid, pci.bus_id, fabric.state, fabric.status, fabric.cliqueId, fabric.clusterUuid\n",
    '<?xml version="1.0" ?>\n<nvidia_smi_log><driver_version>570.148.08</driver_version>'
    "<attached_gpus>8</attached_gpus></nvidia_smi_log>\n",
    "==============NVSMI LOG==============\n\nDriver Version : 570.148.08\n"
    "Attached GPUs : 8\n",
])
@pytest.mark.parametrize("fabric", [None, "none", "nvswitch"])
def test_a_capture_of_no_gpu_is_refused_never_not_applicable(
        tmp_path: Path, body: str, fabric: str | None) -> None:
    capture = tmp_path / "capture"
    capture.write_text(body, encoding="utf-8")
    out, rc = run_json("status", "--from-nvidia-smi", str(capture),
                       *(["--fabric", fabric] if fabric else []))
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert "lists no GPU" in out["error"]["message"]


def test_the_readme_capture_line_with_noheader_is_read(tmp_path: Path) -> None:
    """`--format=csv,noheader` of README's one capture line (7 columns, pci.bus_id third):
    before, only the 6-column layout without pci.bus_id was known and this was 'not an
    nvidia-smi ... capture'."""
    capture = tmp_path / "noheader.csv"
    capture.write_text(
        "0, GPU-a, 00000000:18:00.0, Completed, Success, 0, "
        "00000000-0000-0000-0000-000000000000\n"
        "1, GPU-b, 00000000:2A:00.0, Not Started, N/A, N/A, N/A\n", encoding="utf-8")
    out, rc = run_json("status", "--from-nvidia-smi", str(capture), "--fabric", "nvswitch")
    assert (rc, out["verdict"], out["source"]) == (1, "unhealthy", "nvidia-smi-csv"), out
    assert [g["pci"] for g in out["gpus"]] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert "partial_registration" in {f["code"] for f in out["findings"]}


@pytest.mark.parametrize("header", ["fabric.state", "gpu_bus_id"])
def test_a_csv_naming_a_column_twice_is_refused(tmp_path: Path, header: str) -> None:
    """Two fabric.state columns (Completed and Not Started) were read as the last one."""
    capture = tmp_path / "twice.csv"
    capture.write_text(
        f"index, uuid, pci.bus_id, fabric.state, fabric.status, fabric.cliqueId, "
        f"fabric.clusterUuid, {header}\n0, GPU-a, 00000000:18:00.0, Completed, Success, 0, "
        "00000000-0000-0000-0000-000000000000, Not Started\n", encoding="utf-8")
    out, rc = run_json("status", "--from-nvidia-smi", str(capture), "--fabric", "nvswitch")
    assert rc == 2 and "names a column more than once" in out["error"]["message"]


@pytest.mark.parametrize("name", ["k8s-test-infra-hw-qx-b200.xml", "q.txt"])
def test_a_capture_cut_short_of_its_attached_gpus_is_never_healthy(tmp_path: Path,
                                                                   name: str) -> None:
    """'Attached GPUs : 8' and two GPU sections: the six GPUs not in the capture (S06's
    left-out ones could be among them) were not read, so the verdict is at best degraded
    (before: healthy, exit 0)."""
    if name.endswith(".xml"):
        xml = (SMI / name).read_text(encoding="utf-8")
        head, *gpus = xml.split("<gpu id=")
        body = head + "<gpu id=" + "<gpu id=".join(gpus[:2])
        body = body[:body.rfind("</gpu>") + len("</gpu>")] + "\n</nvidia_smi_log>\n"
    else:
        from tests.cases import load_cases

        (s06,) = [c for c in load_cases("S") if c["id"] == "S06"]
        body = s06["input"][:s06["input"].index("GPU 00000000:52:00.0")]
    capture = tmp_path / name
    capture.write_text(body, encoding="utf-8")
    out, rc = run_json("status", "--from-nvidia-smi", str(capture))
    assert (rc, out["verdict"], len(out["gpus"])) == (1, "degraded", 2), out
    (cut,) = [f for f in out["findings"] if f["code"] == "fabric_value_missing"]
    assert (cut["attached_gpus"], cut["listed_gpus"]) == (8, 2)


# A capture that lacks a column is judged on what it has: refused (exit 2) only where the
# verdict of its rows reads the missing value (S08), otherwise judged with the columns named.
GB300_IN_PROGRESS = ("index, name, fabric.state, fabric.status\n"
                     + "".join(f"{i}, NVIDIA GB300, In Progress, N/A\n" for i in range(4)))


def test_gb300_csv_in_progress_without_clique_columns_is_judged_pending() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", "-", stdin=GB300_IN_PROGRESS)
    assert (rc, out["verdict"], out["fabric"]) == (1, "pending", "mnnvl")
    codes = {f["code"]: f for f in out["findings"]}
    assert codes["registration_stuck"]["gpus"] == [0, 1, 2, 3]
    missing = codes["capture_column_missing"]
    assert (missing["severity"], missing["columns"]) == (
        "info", ["fabric.cliqueId", "fabric.clusterUuid"])


@pytest.mark.parametrize(("text", "fabric", "needs"), [
    ("index, name, fabric.state, fabric.status\n0, NVIDIA GB300, Completed, Success\n", None,
     "the verdict needs fabric.cliqueId, fabric.clusterUuid (Completed GPU 0 on a "
     "GB200/GB300 tray)"),
    ("index, fabric.state, fabric.cliqueId, fabric.clusterUuid\n0, Completed, 0, [N/A]\n"
     "1, In Progress, [N/A], [N/A]\n", "nvswitch", "the verdict needs fabric.status "
     "(Completed GPU 0)"),
    ("index, fabric.state, fabric.status\n0, Completed, Success\n", None,
     "fabric.cliqueId, fabric.clusterUuid (Completed GPU 0 of an unknown fabric kind)"),
], ids=["tray-completed", "nvswitch-completed-no-status", "no-names-completed"])
def test_a_column_the_rows_verdict_needs_is_refused_naming_rows_and_columns(
        text: str, fabric: str | None, needs: str) -> None:
    args = ("--fabric", fabric) if fabric else ()
    out, rc = run_json("status", "--from-nvidia-smi", "-", *args, stdin=text)
    assert rc == 2 and set(out) == {"error"}
    assert out["error"]["code"] == "input_unreadable" and out["error"]["hint"]
    assert needs in out["error"]["message"]
    assert "--query-gpu=index,uuid,pci.bus_id,fabric.state" in out["error"]["message"]


def test_nvswitch_completed_without_clique_columns_is_healthy_and_says_what_was_not_checked(
) -> None:
    text = ("index, name, fabric.state, fabric.status\n"
            + "".join(f"{i}, NVIDIA H100 80GB HBM3, Completed, Success\n" for i in range(8)))
    out, rc = run_json("status", "--from-nvidia-smi", "-", stdin=text)
    assert (rc, out["verdict"], out["fabric"]) == (0, "healthy", "nvswitch")
    (f,) = [f for f in out["findings"] if f["code"] == "capture_column_missing"]
    assert f["severity"] == "info" and "was not checked" in f["message"]

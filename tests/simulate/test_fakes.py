"""The fake daemons and tools of simulated nodes behave and print like the real ones: their
output is checked against the captures in tests/data/corpus and read back by nvfabric's own
parsers (health readers, diagnosis catalogue), as it would be on a real node."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nvfabric.facts import gpu as live
from nvfabric.facts.imex import ctl
from nvfabric.facts.smi import parse, parse_csv, parse_text, parse_xml
from nvfabric.rules.diagnose import classify_lines
from nvfabric.simulate import fakebin
from nvfabric.simulate.fakebin import imexctl as fakectl
from nvfabric.simulate.fakes import gpus, set_faults
from tests import runkit
from tests.cases import CORPUS
from tests.runkit import events, sim, until


def fake(root: Path, prog: str, *args: str, timeout: float = 60) -> runkit.Done:
    return runkit.run([root / "bin" / prog, *args], timeout=timeout)


def corpus_line(name: str, needle: str) -> str:
    for line in (CORPUS / name).read_text(encoding="utf-8").splitlines():
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} not in {name}")


@pytest.mark.parametrize("profile,states", [
    ("dgx-b200", {"not_started"}),
    ("hgx-h100", {"not_started"}),
    ("dgx-a100", {"not_supported"}),   # NVML has no fabric state on A100 (State N/A)
    ("h100-pcie", {"not_supported"}),
    ("gb200-tray", {"completed"}),     # registered by the switch trays' fabric manager
])
def test_initial_fabric_state_per_platform(tmp_path: Path, profile: str, states: set[str]) -> None:
    root = sim(tmp_path, profile)
    assert {g["state"] for g in gpus(str(root))} == states
    health = live.read(str(root))  # through the fake nvidia-smi -q -x
    assert {str(g.state) for g in health} == states
    assert len(health) == len(gpus(str(root)))


def test_nvidia_smi_xml_has_the_real_fabric_element(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    out = fake(root, "nvidia-smi", "-q", "-x")
    assert out.returncode == 0
    ours = ET.fromstring(out.stdout)
    real = ET.parse(CORPUS / "nvidia-smi/k8s-test-infra-hw-qx-gb200.xml").getroot()
    fabrics = [r.find("gpu/fabric") for r in (ours, real)]
    assert fabrics[0] is not None and fabrics[1] is not None
    assert [c.tag for c in fabrics[0].iter()] == [c.tag for c in fabrics[1].iter()]
    assert ours.findtext("driver_version") == "570.148.08"
    assert [g.get("id") for g in ours.findall("gpu")][:2] == ["00000000:18:00.0",
                                                               "00000000:19:00.0"]
    assert len(parse_xml(out.stdout).gpus) == 8


def test_nvidia_smi_text_uses_the_real_layout(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    out = fake(root, "nvidia-smi", "-q").stdout
    real = (CORPUS / "nvidia-smi/hgx-h100-560.35.03-nvidia-smi-a-1gpu-slurm.txt").read_text(
        encoding="utf-8")
    for key in ("Driver Version", "Attached GPUs", "    Product Name", "    GPU UUID",
                "        State", "        Status", "        CliqueId", "        ClusterUUID"):
        ours = next(line for line in out.splitlines() if line.startswith(key + " "))
        theirs = next(line for line in real.splitlines() if line.startswith(key + " "))
        assert ours.index(": ") == theirs.index(": "), key
    assert out.startswith("\n==============NVSMI LOG==============\n")
    health = parse_text(out)
    assert [g.pci for g in health.gpus][:1] == ["00000000:18:00.0"]
    assert {str(g.state) for g in health.gpus} == {"not_started"}


def test_nvidia_smi_csv_query_and_a_bad_field(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    out = fake(root, "nvidia-smi", "--query-gpu=index,uuid,fabric.state,fabric.status",
               "--format=csv")
    assert out.stdout.splitlines()[0] == "index, uuid, fabric.state, fabric.status"
    assert out.stdout.splitlines()[1].endswith(", Not Started, N/A")
    full = fake(root, "nvidia-smi", "--query-gpu=index,uuid,fabric.state,fabric.status,"
                "fabric.cliqueId,fabric.clusterUuid", "--format=csv")
    assert len(parse_csv(full.stdout).gpus) == 8
    noheader = fake(root, "nvidia-smi", "--query-gpu", "fabric.state", "--format=csv,noheader")
    assert noheader.stdout.splitlines() == ["Not Started"] * 8
    bad = fake(root, "nvidia-smi", "--query-gpu=fabric.bogus", "--format=csv")
    assert bad.returncode == 2 and 'Field "fabric.bogus" is not a valid field' in bad.stdout


def test_nvidia_smi_without_a_driver_fails_like_the_real_one(tmp_path: Path) -> None:
    root = sim(tmp_path, "no-gpu")
    out = fake(root, "nvidia-smi", "-q")
    assert out.returncode == 9
    assert "driver_not_loaded" in [f.code for f in classify_lines(out.stdout.splitlines())]


def test_nvidia_smi_reset_puts_gpus_back_to_not_started(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    out = fake(root, "nvidia-smi", "-r")
    assert out.stdout.splitlines()[0] == "GPU 00000000:18:00.0 was successfully reset."
    assert out.stdout.splitlines()[-1] == "All done."
    assert {g["state"] for g in gpus(str(root))} == {"not_started"}
    assert {str(g.state) for g in parse(fake(root, "nvidia-smi", "-q").stdout).gpus} == {
        "not_started"}


def test_fabric_manager_version_line(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    assert fake(root, "nv-fabricmanager", "--version").stdout == (
        "Fabric Manager version is : 550.90.07\n")
    set_faults(str(root), {"fabricmanager": {"version": "550.54.15"}})
    assert "550.54.15" in fake(root, "nv-fabricmanager", "-v").stdout


def test_d03_fabric_manager_without_g_on_b200_prints_nothing_to_do(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    (tmp_path / "fm.cfg").write_text("DAEMONIZE=0\nLOG_FILE_NAME=\n", encoding="utf-8")
    out = fake(root, "nv-fabricmanager", "-c", str(tmp_path / "fm.cfg"))
    assert out.returncode == 1
    real = corpus_line("logs/a40-nvlink-bridge-fm-520-nothing-to-do-journal-gpuop610.txt",
                       "NV_WARN_NOTHING_TO_DO")
    assert real.endswith(out.stdout.strip().splitlines()[-1])
    codes = [f.code for f in classify_lines(out.stdout.splitlines(), fabric="nvlink5")]
    assert "nvlsm_missing" in codes


def test_d01_fabric_manager_refuses_another_driver_version(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "550.54.15"}})
    cfg = tmp_path / "fm.cfg"
    cfg.write_text("DAEMONIZE=0\nLOG_FILE_NAME=\n", encoding="utf-8")
    out = fake(root, "nv-fabricmanager", "-c", str(cfg))
    assert out.returncode == 1
    real = corpus_line("logs/fm-version-mismatch-550-systemctl-akash632.txt", "don't match")
    shape = re.sub(r"\d+\.\d+(\.\d+)?", "V", out.stdout.strip().splitlines()[-1])
    assert re.sub(r"\d+\.\d+(\.\d+)?", "V", real).endswith(shape)
    (f,) = [f for f in classify_lines(out.stdout.splitlines()) if f.code == "version_mismatch"]
    assert (f.fields["fm_version"], f.fields["driver_version"]) == ("550.54.15", "550.90.07")


def test_daemonize_1_makes_the_launcher_exit_0_at_once(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100", {"fabricmanager": {"daemon_lifetime_s": 1}})
    shipped = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    assert "DAEMONIZE=1" in shipped.read_text(encoding="utf-8")
    started = time.monotonic()
    out = fake(root, "nv-fabricmanager", "-c", str(shipped))
    assert out.returncode == 0 and time.monotonic() - started < 30


def test_nvlsm_without_ib_umad_prints_the_real_ibwarn_line(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / "sys/class/infiniband_mad/abi_version").unlink()
    out = fake(root, "nvlsm", "-F", str(root / "usr/share/nvidia/nvlsm/nvlsm.conf"),
               "-g", "0xe09d730300e400e8", "-f", "stdout")
    assert out.returncode == 1
    real = corpus_line("logs/talos-nvlsm-umad-init-abi-version-docs581.txt", "umad_init")
    ours = out.stdout.strip().splitlines()[-1]
    assert re.sub(r"\[\d+\]", "[N]", real).endswith(re.sub(r"\[\d+\]", "[N]", ours))
    banner = (CORPUS / "logs/talos-hgx-b200-wrapper-nvlsm-start-excerpt-ext893.txt").read_text(
        encoding="utf-8")
    assert f"nvlsm: {out.stdout.splitlines()[1]}" in banner  # OpenSM <version>


def test_nvlsm_refuses_a_guid_that_is_no_local_port(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    out = fake(root, "nvlsm", "-F", str(root / "usr/share/nvidia/nvlsm/nvlsm.conf"),
               "-g", "0x0000000000000001")
    assert out.returncode == 1
    assert not events(root, "nvlsm", "socket")


def _imex(root: Path, tmp_path: Path, nodes: list[str]) -> tuple[runkit.Child, Path]:
    (tmp_path / "nodes.cfg").write_text("\n".join(nodes) + "\n", encoding="utf-8")
    cfg = tmp_path / "imex.cfg"
    cfg.write_text(f"DAEMONIZE=0\nLOG_FILE_NAME=\nIMEX_NODE_CONFIG_FILE={tmp_path}/nodes.cfg\n",
                   encoding="utf-8")
    return runkit.Child([root / "bin/nvidia-imex", "-c", cfg], merge_output=True), cfg


def _stop(proc: runkit.Child) -> str:
    """SIGTERM the fake daemon and wait for it (its output, returned); a fake that does not
    stop is killed (never left behind to disturb other tests) and fails the test."""
    proc.signal(signal.SIGTERM)
    proc.wait()
    return proc.log


def test_d07_imex_with_no_local_address_exits_with_the_real_error(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    proc, _ = _imex(root, tmp_path, ["198.51.100.1", "198.51.100.2"])
    assert proc.wait() == 1, proc.log
    out = proc.log
    assert "imex_no_local_interface" in [f.code for f in classify_lines(out.splitlines())]
    assert fake(root, "nvidia-imex-ctl", "-q").stdout.strip() != "READY"


def test_imex_ready_then_ctl_reports_status_json_until_stopped(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    proc, _ = _imex(root, tmp_path, ["192.0.2.10", "198.51.100.2"])
    try:
        until(lambda: fake(root, "nvidia-imex-ctl", "-q").stdout.strip() == "READY",
              "nvidia-imex-ctl -q says READY")
        status = json.loads(fake(root, "nvidia-imex-ctl", "-N", "-j").stdout)
        real = json.loads((CORPUS / "imex/dcgm-test-imex-ctl-N-j-degraded-580.30.json").read_text(
            encoding="utf-8"))
        assert set(status) == set(real) and status["status"] == "UP"
        assert {n["status"] for n in status["nodes"].values()} == {"READY"}
        table = fake(root, "nvidia-imex-ctl", "-N").stdout.splitlines()
        real_table = (CORPUS / "imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt"
                      ).read_text(encoding="utf-8").splitlines()
        real_row = next(line for line in real_table if line.startswith("Node #0 "))
        row = next(line for line in table if line.startswith("Node #0 "))
        assert row.startswith("Node #0   - 192.0.2.10      - READY ")
        assert [m.start() for m in re.finditer(" - ", row)] == [
            m.start() for m in re.finditer(" - ", real_row)]
        assert table[:10] == real_table[:10]  # the legend and the blank line after it
        assert table[-1] == "Domain State: UP" and table[-2] == ""
    finally:
        _stop(proc)
    assert proc.proc.returncode == 0, proc.log
    assert fake(root, "nvidia-imex-ctl", "-q").returncode == 1


def test_imex_takes_the_trees_etc_hostname_as_its_own_host_name(tmp_path: Path) -> None:
    # nvfabric's local check reads etc/hostname of a simulated root; the fake daemon must
    # agree, or a host-name node list that nvfabric accepts would fail in the fake.
    root = sim(tmp_path, "gb200-tray")
    (root / "etc/hostname").write_text("gb-07\n", encoding="utf-8")
    proc, _ = _imex(root, tmp_path, ["gb-07"])
    try:
        until(lambda: fake(root, "nvidia-imex-ctl", "-q").stdout.strip() == "READY",
              "nvidia-imex-ctl -q says READY")
    except AssertionError:
        _stop(proc)
        raise
    out = _stop(proc)
    assert "Treating node config entry 'gb-07' as a host name." in out
    other, _ = _imex(root, tmp_path, ["node-01"])  # the built-in name is no longer this host
    assert other.wait() == 1 and "No matching network interface" in other.log, other.log


def test_imex_ctl_text_table_renders_the_18_node_capture_exactly() -> None:
    real = (CORPUS / "imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt").read_text(
        encoding="utf-8")
    parsed = ctl.parse_text(real)
    state = {"nodes": {str(n.node_id): {"status": n.status, "host": n.host,
                                        "version": n.version} for n in parsed.nodes}}
    assert parsed.timestamp is not None
    assert fakectl.imex_domain_text(state, parsed.state, parsed.timestamp) + "\n" == real


@pytest.mark.parametrize("peers", ["up", "down"])
def test_imex_ctl_text_table_reads_the_same_as_its_json(tmp_path: Path, peers: str) -> None:
    root = sim(tmp_path, "gb200-tray", {"imex": {"peers": peers}})
    proc, _ = _imex(root, tmp_path, ["192.0.2.10", "198.51.100.2", "198.51.100.3"])
    try:
        until(lambda: '"status":"DOWN"' not in fake(root, "nvidia-imex-ctl", "-N", "-j").stdout,
              "the fake daemon publishes its domain")
        text = ctl.parse_domain(fake(root, "nvidia-imex-ctl", "-N").stdout)
        js = ctl.parse_domain(fake(root, "nvidia-imex-ctl", "-N", "-j").stdout)
    finally:
        _stop(proc)
    assert (text.source, js.source) == ("text", "json")
    assert (text.state, text.nodes, text.unreachable) == (js.state, js.nodes, js.unreachable)
    assert text.timestamp and js.timestamp

    def pairs(links: tuple[str, ...]) -> list[str]:  # the words differ: legend vs JSON status
        return [link.split(":")[0] for link in links]

    assert pairs(text.bad_links) == pairs(js.bad_links)
    if peers == "up":
        assert (text.state, text.unreachable, text.bad_links) == ("UP", (), ())
    else:
        assert text.state == "DEGRADED"
        assert text.unreachable == ("198.51.100.2 (node 1)", "198.51.100.3 (node 2)")
        assert "node 0 -> node 1: invalid (not reachable)" in text.bad_links


def test_imex_ctl_hang_fault_never_answers(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray", {"imex-ctl": {"hang": True}})
    with pytest.raises(AssertionError, match="still running after 0.5 s"):
        fake(root, "nvidia-imex-ctl", "-q", timeout=0.5)


#: A fake daemon whose SIGTERM arrives while its wait loop holds a lock (the moment a
#: ``threading.Event`` handler deadlocks on): a profile hook sends the signal right after the
#: first lock is taken inside ``Daemon.wait``; when the loop takes no lock at all, the test
#: sends SIGTERM itself once the loop is waiting.
_SIGTERM_IN_WAIT = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from _nvfabric_fakes.daemon import Daemon
d = Daemon(sys.argv[2], "imex")
sent = []
def hook(frame, event, arg):
    if (event == "c_return" and not sent
            and getattr(arg, "__name__", "") in ("acquire", "__enter__")):
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
print("waiting", flush=True)
sys.setprofile(hook)
stopped = not d.wait(3600)
sys.setprofile(None)
print("stopped" if stopped else "timed out", flush=True)
"""


def test_fake_daemon_stops_on_sigterm_arriving_inside_its_wait_loop(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    with runkit.Child([sys.executable, "-c", _SIGTERM_IN_WAIT, root / "bin", root],
                      merge_output=True) as proc:
        proc.wait_line("^waiting$")
        time.sleep(0.3)  # the loop is most likely in its wait; earlier, it must end it too
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0, "the fake daemon deadlocked in its SIGTERM handler"
    assert proc.lines == ["waiting", "stopped"]


def test_a_tree_holds_the_whole_fakes_package_and_it_imports_only_the_standard_library(
        tmp_path: Path) -> None:
    """The fakes run in a tree without nvfabric: ``bin/_nvfabric_fakes/`` is a copy of every
    module of :mod:`nvfabric.simulate.fakebin`, which import the standard library and each
    other (relatively) only."""
    import ast

    root = sim(tmp_path, "gb200-tray")
    package = Path(fakebin.__file__).parent
    modules = {p.name: p.read_text(encoding="utf-8") for p in package.glob("*.py")}
    copied = {p.name: p.read_text(encoding="utf-8")
              for p in (root / "bin/_nvfabric_fakes").glob("*.py")}
    assert copied == modules and {"__init__.py", "state.py", "nvlsm.py"} <= set(copied)
    for name, source in modules.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [str(node.module).split(".")[0]]
            else:
                continue
            assert all(t in sys.stdlib_module_names or t == "__future__" for t in tops), \
                f"{name} imports {tops}"

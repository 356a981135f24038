"""Services' liveness read from a node tree: pid files, a /proc scan, fabric manager's command
port in proc/net/tcp, NVLSM's IPC socket; and the live fabric reader on simulated roots."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from nvfabric.facts import gpu as live
from nvfabric.facts import services
from tests import runkit
from tests.cases import CORPUS
from tests.runkit import until

# /proc/net/tcp: a socket listening (state 0A) on 127.0.0.1:6666 (0x1A0A), one established.
TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout"
    " inode\n"
    "   0: 0100007F:1A0A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0"
    " 1 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:C350 0100007F:1A0A 01 00000000:00000000 00:00000000 00000000     0        0"
    " 2 1 0000000000000000 20 4 30 10 -1\n"
)


def _proc(root: Path, pid: int, comm: str, start_ticks: int, uptime: float) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 10
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
    (root / "proc" / "uptime").write_text(f"{uptime:.2f} 1000.00\n")


def test_fabric_manager_found_by_proc_scan_with_age_and_port(tmp_path: Path) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    _proc(tmp_path, 5183, "nv-fabricmanage", start_ticks=100 * hz, uptime=700.0)
    (tmp_path / "proc" / "net").mkdir()
    (tmp_path / "proc" / "net" / "tcp").write_text(TCP)
    (fm,) = services.read(str(tmp_path), ("fabricmanager",))
    assert (fm.running, fm.pid, fm.port) == (True, 5183, True)
    assert fm.age_s is not None and abs(fm.age_s - 600.0) < 0.01


def test_port_elsewhere_and_no_process_is_not_running(tmp_path: Path) -> None:
    _proc(tmp_path, 42, "bash", start_ticks=1, uptime=10.0)
    (tmp_path / "proc" / "net").mkdir()
    (tmp_path / "proc" / "net" / "tcp").write_text(TCP.replace(":1A0A 00000000", ":1A0B 00000000"))
    (fm,) = services.read(str(tmp_path), ("fabricmanager",))
    assert (fm.running, fm.port) == (False, False)


def test_command_port_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text((CORPUS / "configs/fabricmanager-535.216.01.cfg").read_text()
                   .replace("FM_CMD_PORT_NUMBER=6666", "FM_CMD_PORT_NUMBER=6667"))
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "net" / "tcp").write_text(TCP)
    (fm,) = services.read(str(tmp_path), ("fabricmanager",))
    assert fm.port is False  # 6666 listens, the config says 6667
    assert services.fabric_mode(str(tmp_path)) == 0


def test_pid_file_in_a_tree_with_a_process_table(tmp_path: Path) -> None:
    _proc(tmp_path, 77, "nvlsm", start_ticks=0, uptime=5.0)
    (tmp_path / "var/run").mkdir(parents=True)
    (tmp_path / "var/run/nvlsm.pid").write_text("77\n")
    (sm,) = services.read(str(tmp_path), ("nvlsm",))
    assert (sm.running, sm.pid, sm.detail) == (True, 77, "pid file /var/run/nvlsm.pid")
    (tmp_path / "var/run/nvlsm.pid").write_text("78\n")  # stale: no proc/78
    (sm,) = services.read(str(tmp_path), ("nvlsm",))
    assert sm.pid != 78


def test_simulated_root_pid_file_of_a_host_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "run/nvfabric/fabricmanager.pid"
    pidfile.parent.mkdir(parents=True)
    pidfile.write_text(f"{os.getpid()}\n")
    (fm,) = services.read(str(tmp_path), ("fabricmanager",))
    assert (fm.running, fm.pid) == (True, os.getpid())
    assert fm.age_s is not None and fm.age_s < 60


def test_simulated_root_stale_pid_file(tmp_path: Path) -> None:
    pidfile = tmp_path / "run/nvfabric/imex.pid"
    pidfile.parent.mkdir(parents=True)
    pidfile.write_text("4194304\n")  # above pid_max's ceiling: no such process
    (imex,) = services.read(str(tmp_path), ("imex",))
    assert imex.running is False


def test_nvlsm_ipc_socket_is_seen() -> None:
    root = tempfile.mkdtemp(prefix="nvf", dir="/tmp")  # AF_UNIX paths are short
    try:
        path = os.path.join(root, "var/run/nvidia-fabricmanager/fm_sm_ipc.socket")
        os.makedirs(os.path.dirname(path))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path)
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            (sm,) = services.read(root, ("nvlsm",))
            assert (sm.socket, sm.running) == (True, True)
    finally:
        shutil.rmtree(root)


# Tester report 9(d): after NVLSM was SIGKILLed its socket file stayed, and status said
# "nvlsm running: true, pid: null". A socket nobody is bound to is stale.
def test_stale_nvlsm_socket_without_a_process_is_not_running() -> None:
    root = tempfile.mkdtemp(prefix="nvf", dir="/tmp")  # AF_UNIX paths are short
    try:
        path = os.path.join(root, "var/run/nvidia-fabricmanager/fm_sm_ipc.socket")
        os.makedirs(os.path.dirname(path))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path)
        assert stat.S_ISSOCK(os.stat(path).st_mode)  # the file outlives its socket
        (sm,) = services.read(root, ("nvlsm",))
        assert (sm.running, sm.pid, sm.socket) == (False, None, False)
        assert sm.detail.startswith("stale socket /var/run/nvidia-fabricmanager/")
    finally:
        shutil.rmtree(root)


UNIX = ("Num       RefCount Protocol Flags    Type St Inode Path\n"
        "0000000000000000: 00000002 00000000 00010000 0001 01 21611 {path}\n"
        "0000000000000000: 00000003 00000000 00000000 0001 03 21612\n")


def test_socket_listed_in_the_roots_proc_net_unix_is_live(tmp_path: Path) -> None:
    sock = "/var/run/nvidia-fabricmanager/fm_sm_ipc.socket"
    _proc(tmp_path, 4242, "bash", 100, 500.0)  # a process table without NVLSM in it
    (tmp_path / "proc/net").mkdir()
    (tmp_path / "proc/net/unix").write_text(UNIX.format(path=sock))
    (sm,) = services.read(str(tmp_path), ("nvlsm",))
    assert (sm.running, sm.socket, sm.pid) == (True, True, None)
    (tmp_path / "proc/net/unix").write_text(UNIX.format(path="/run/other.socket"))
    (sm,) = services.read(str(tmp_path), ("nvlsm",))
    assert (sm.running, sm.socket) == (False, False)


SMI_SCRIPT = "#!/bin/sh\n[ \"$1 $2\" = '-q -x' ] || exit 9\ncat '{capture}'\n"


def test_live_read_on_a_simulated_root_runs_its_nvidia_smi(
    node: Callable[..., Path]
) -> None:
    root = node("dgx-b200")
    smi = root / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(SMI_SCRIPT.format(capture=CORPUS / "nvidia-smi/k8s-test-infra-hw-qx-b200.xml"))
    smi.chmod(0o755)
    gpus = live.read(str(root))
    assert len(gpus) == 8
    assert {(g.state, g.status) for g in gpus} == {("completed", "success")}
    assert gpus[0].pci == "00000000:8F:00.0" and gpus[0].uuid


def test_live_read_when_nvidia_smi_fails(tmp_path: Path) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn''t communicate' >&2"
                   "\nexit 9\n")
    smi.chmod(0o755)
    h = live.read_health(str(tmp_path))
    assert h.gpus == () and h.findings[0].fields["reason"] == "nvidia_smi_failed"
    assert "exited 9" in h.findings[0].message


def test_live_read_on_a_root_without_nvidia_smi(tmp_path: Path) -> None:
    assert live.read(str(tmp_path)) == []
    assert live.read_health(str(tmp_path)).findings[0].fields["reason"] == "no_nvidia_smi"


# One door for both: the running system (its proc is the live procfs) is read through NVML,
# a tree through its own bin/nvidia-smi, and a caller may inject a source of its own.
def test_the_fabric_source_is_chosen_by_the_door_and_can_be_injected(tmp_path: Path) -> None:
    from nvfabric.model.health import FabricHealth

    assert live.source_for("/") is live.nvml_source
    assert live.source_for(str(tmp_path)) is not live.nvml_source
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/self").symlink_to(str(os.getpid()))  # relative: no live procfs here
    assert live.source_for(str(tmp_path)) is not live.nvml_source
    bounds: list[float] = []

    def fake(timeout: float) -> FabricHealth:
        bounds.append(timeout)
        return FabricHealth("nvml", ())

    assert live.read_health(str(tmp_path), 2.5, source=fake).source == "nvml"
    assert bounds == [2.5]


def test_simulated_root_daemon_found_among_host_processes(tmp_path: Path) -> None:
    import shutil as sh

    binary = tmp_path / "opt/nvidia/nvlsm/sbin/nvlsm"
    binary.parent.mkdir(parents=True)
    sleep = sh.which("sleep")
    assert sleep
    binary.symlink_to(sleep)  # comm is the name it was executed by: "nvlsm"
    proc = runkit.Child([binary, "30"])
    try:
        # Popen returns once exec has begun; the new program's command line is set a moment
        # later (a loaded machine shows the gap): wait for it rather than race it.
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        until(lambda: str(binary).encode() in cmdline.read_bytes(), "the exec of the binary")
        (sm,) = services.read(str(tmp_path), ("nvlsm",))
        assert (sm.running, sm.pid) == (True, proc.pid)
        (other,) = services.read(str(tmp_path / "elsewhere"), ("nvlsm",))
        assert other.running is False  # a daemon of another root is not this node's
    finally:
        proc.close()


# The one root-join refuses '..': a config or pid-file path that would step out of the root is
# as absent, never a socket or a pid file outside the tree, never a traceback.
def test_paths_that_leave_the_root_are_as_absent(tmp_path: Path) -> None:
    root = tmp_path / "node"
    outside = tmp_path / "outside.pid"
    outside.write_text(f"{os.getpid()}\n")  # a live pid, one level above the root
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("FM_SM_IPC_INTERFACE=/../../x.socket\nFM_CMD_UNIX_SOCKET_PATH=/../y\n")
    sm, fm = services.read(str(root), ("nvlsm", "fabricmanager"),
                           {"fabricmanager": "/../outside.pid"})
    assert (sm.running, sm.socket, fm.running, fm.pid, fm.port) == (False, False, False, None,
                                                                     False)

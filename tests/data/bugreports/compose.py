"""Compose the bug reports of this directory from the real captures of tests/data/corpus (the
repository's copy of ../shared/corpus), in
the exact layout nvidia-bug-report.sh writes (see nvfabric/triage/report.py): one gzip member
per block, as the script's ``| gzip -c >> nvidia-bug-report.log.gz`` does.

Run from the repository root with lspci installed (Debian pciutils), optionally with an output
directory (tests/test_triage.py checks the committed files are what it writes):
``.venv/bin/python tests/data/bugreports/compose.py``. The PCI functions the corpus has no
``lspci -nnDvvvxxxx`` capture of are printed by the real lspci from a node tree built by
``nvfabric simulate`` from the case's node spec; README.md says which part of each report
comes from where.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
#: Where the reports are written: this directory, or the first argument (the test that checks
#: the committed files are what this script writes uses a temporary one).
OUT = Path(sys.argv[1]).resolve() if __name__ == "__main__" and len(sys.argv) > 1 else HERE
CORPUS = REPO / "tests" / "data" / "corpus"  # the repository's copy of ../shared/corpus
CASES = REPO / "tests" / "data" / "cases"
sys.path.insert(0, str(REPO / "src"))

from nvfabric.simulate import build, parse  # noqa: E402

SEP = "_" * 44
LS = "*** ls: -r--r--r-- 1 root root 0 2026-05-16 15:23:40.000000000 +0000 "
MTIME = 0


def corpus(path: str) -> str:
    return (CORPUS / path).read_text(encoding="utf-8")


class Report:
    """Blocks in the script's order; :meth:`write` gzips each block as its own member."""

    def __init__(self) -> None:
        self.blocks: list[str] = []

    def raw(self, text: str) -> None:
        self.blocks.append(text)

    def block(self, text: str) -> None:
        self.blocks.append(f"{SEP}\n\n{text}")

    def file(self, path: str, content: str) -> None:
        if not content.endswith("\n"):
            content += "\n"
        self.block(f"*** {path}\n{LS}{path}\n{content}\n")

    def absent(self, path: str) -> None:
        self.block(f"*** {path} does not exist\n\n")

    def command(self, cmd: str, output: str) -> None:
        self.block(f"{cmd}\n{output.rstrip(chr(10))}\n\n")

    def skip(self, what: str, why: str) -> None:
        self.block(f"\nSkipping: {what}\n{why}\n\n")

    def text(self) -> str:
        return "".join(self.blocks)

    def write(self, name: str, gz: bool = True) -> Path:
        out = OUT / name
        if gz:
            out.write_bytes(b"".join(gzip.compress(b.encode(), mtime=MTIME)
                                     for b in self.blocks))
        else:
            out.write_text(self.text(), encoding="utf-8")
        return out


def prologue(r: Report, uname: str, fm_version: str | None, driver: str) -> None:
    r.block(
        "Start of NVIDIA bug report log file.  Please include this file, along\n"
        "with a detailed description of your problem, when reporting a graphics\n"
        "driver bug via the NVIDIA Linux forum (see forums.developer.nvidia.com)\n"
        "or by sending email to 'linux-bugs@nvidia.com'.\n\n"
        "nvidia-bug-report.sh Version: 37062940\n\n"
        "Date: Fri May 16 15:23:40 UTC 2026\n"
        f"uname: {uname}\n"
        "command line flags: \n\n")
    rows = [("Vulkan Info", "None"), ("NVIDIA SMI", f"NVIDIA-SMI version  : {driver}"),
            ("NVIDIA Fabric Manager",
             f"Fabric Manager version is : {fm_version}" if fm_version else "None"),
            ("OS Details", "Kernel       : 6.8.0-60-generic")]
    table = "Component                           | Details\n" + "=" * 80 + "\n"
    for comp, details in rows:
        table += f"{comp:<35} | {details}\n" + "-" * 80 + "\n"
    r.raw(table)
    r.block("NVIDIA Driver Type Detection:\n\nDetected driver type: Running RM Driver on "
            "GPUs\nStandard RM driver detected.\n\n")


def proc_version(driver: str, arch: str) -> str:
    return (f"NVRM version: NVIDIA UNIX Open Kernel Module for {arch}  {driver}  Release Build "
            " (dvs-builder@U22-I3-AF03-09-1)  Wed Apr  2 21:00:00 UTC 2026\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


def proc_modules(names: list[str]) -> str:
    sizes = {"nvidia": "14376960 28 nvidia_uvm,nvidia_modeset", "mlx5_ib": "495616 0",
             "ib_umad": "45056 8", "mlx5_core": "2441216 1 mlx5_ib",
             "ib_uverbs": "200704 2 rdma_ucm,mlx5_ib", "nvidia_nvswitch": "0 0"}
    lines = [f"{n} {sizes.get(n, '16384 0')}, Live 0x0000000000000000 (OE)" for n in names]
    lines.append("nvme 61440 3, Live 0x0000000000000000")
    return "\n".join(lines) + "\n"


def lspci_of(spec_node: dict[str, object]) -> str:
    """``lspci -nnDvvvxxxx`` as the real tool prints it for the simulated node."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "node"
        build(parse(spec_node), str(root))
        proc = subprocess.run(
            ["lspci", "-nnDvvvxxxx", "-A", "linux-sysfs", "-O",
             f"sysfs.path={root}/sys/bus/pci"],
            capture_output=True, text=True, check=True)
        return proc.stdout


def real_b200_lpf(simulated: str) -> str:
    """The corpus's real ``lspci -vvv`` of the DGX B200 LPF 05:00.0 in ``-nnDvvvxxxx`` form:
    domain and class/ID numbers added to its first line and Subsystem, the capture's
    8-space indentation back to lspci's tabs, ``Kernel modules:`` kept out, and the hex rows
    of the simulated function's configuration space appended (the capture has none)."""
    real = corpus("lspci/dgxb200-cx7-sw_mng-lspci-vvv.txt").rstrip("\n").splitlines()
    out = []
    for line in real:
        n = len(line) - len(line.lstrip(" "))
        line = "\t" * (n // 8) + line.lstrip(" ")
        out.append(line)
    out[0] = ("0000:05:00.0 Infiniband controller [0207]: Mellanox Technologies MT2910 Family "
              "[ConnectX-7] [15b3:1021]")
    out[1] = "\tSubsystem: Mellanox Technologies Device [15b3:0087]"
    entry = next(e for e in simulated.split("\n\n") if e.startswith("0000:05:00.0"))
    hexrows = [ln for ln in entry.splitlines() if re.match(r"^[0-9a-f]{2,3}: ", ln)]
    return "\n".join(out + hexrows)


def with_real_lpf(simulated: str) -> str:
    entries = simulated.rstrip("\n").split("\n\n")
    entries = [real_b200_lpf(simulated) if e.startswith("0000:05:00.0") else e
               for e in entries]
    return "\n\n".join(entries) + "\n\n"


def ibstat_b200(count: int = 4) -> str:
    """The corpus's real ``ibstat mlx5_0`` of the DGX B200, then mlx5_1.. with the GUIDs of
    case P11 (…e9, …ea, …eb), as ``ibstat`` (all devices) prints them one after another."""
    real = corpus("ibstat/dgxb200-ibstat-mlx5_0.txt").rstrip("\n")
    blocks = [real]
    for i in range(1, count):
        guid = f"0xe09d730300e400{0xe8 + i:02x}"
        blocks.append(real.replace("mlx5_0", f"mlx5_{i}").replace("0xe09d730300e400e8", guid)
                      .replace("Base lid: 1", f"Base lid: {1 + i}"))
    return "\n".join(blocks) + "\n"


def smi_text(driver: str, cuda: str, gpus: list[dict[str, object]]) -> str:
    """``nvidia-smi --query`` text (the layout of the corpus's hgx-h100 -q capture) for the
    GPUs given: pci, name, uuid and the Fabric block's values."""
    out = ["", "==============NVSMI LOG==============", "",
           f"{'Timestamp':<42}: Fri May 16 15:23:41 2026",
           f"{'Driver Version':<42}: {driver}", f"{'CUDA Version':<42}: {cuda}", "",
           f"{'Attached GPUs':<42}: {len(gpus)}"]
    for g in gpus:
        out.append(f"GPU {g['pci']}")
        out.append(f"    {'Product Name':<38}: {g['name']}")
        out.append(f"    {'Product Brand':<38}: NVIDIA")
        out.append(f"    {'GPU UUID':<38}: {g['uuid']}")
        out.append("    Fabric")
        fab = g["fabric"]
        assert isinstance(fab, dict)
        for key in ("State", "Status", "CliqueId", "ClusterUUID"):
            if key in fab:
                out.append(f"        {key:<34}: {fab[key]}")
        health = fab.get("Health")
        if isinstance(health, dict):
            out.append("        Health")
            for key, value in health.items():
                out.append(f"            {key:<30}: {value}")
        out.append(f"    {'Processes':<38}: None")
        out.append("")
    return "\n".join(out) + "\n"


HEALTH_TAGS = {"summary": "Summary", "bandwidth": "Bandwidth",
               "route_recovery_in_progress": "Route Recovery in progress",
               "route_unhealthy": "Route Unhealthy",
               "access_timeout_recovery": "Access Timeout Recovery",
               "incorrect_configuration": "Incorrect Configuration",
               "partition_assigned": "Partition Assigned"}


def gpus_from_xml(path: str) -> list[dict[str, object]]:
    """The GPUs of a corpus ``nvidia-smi -q -x`` capture: bus id, name, UUID, Fabric block."""
    root = ET.fromstring(corpus(path))
    out: list[dict[str, object]] = []
    for gpu in root.findall("gpu"):
        fab = gpu.find("fabric")
        assert fab is not None
        values: dict[str, object] = {
            "State": fab.findtext("state"), "Status": fab.findtext("status"),
            "CliqueId": fab.findtext("cliqueId"), "ClusterUUID": fab.findtext("clusterUuid")}
        hl = fab.find("health")
        if hl is not None:
            values["Health"] = {HEALTH_TAGS.get(c.tag, c.tag): (c.text or "").strip()
                                for c in hl}
        out.append({"pci": gpu.get("id"), "name": gpu.findtext("product_name"),
                    "uuid": gpu.findtext("uuid"), "fabric": values})
    return out


def fabric_block(text: str) -> dict[str, object]:
    """A corpus ``Fabric`` excerpt (``Key : Value`` rows, Health nested) as values."""
    values: dict[str, object] = {}
    health: dict[str, str] = {}
    in_health = False
    for line in text.splitlines():
        s = line.strip()
        if s == "Health":
            in_health = True
            continue
        if ":" not in s or s.startswith("#"):
            continue
        key, _, value = s.partition(":")
        (health if in_health else values)[key.strip()] = value.strip()
    if health:
        values["Health"] = health
    return values


def case_node(case_id: str) -> dict[str, object]:
    path = next(CASES.glob(f"{case_id}-*.yaml"))
    node = yaml.safe_load(path.read_text(encoding="utf-8"))["node"]
    assert isinstance(node, dict)
    return node


def case_input(case_id: str) -> str:
    path = next(CASES.glob(f"{case_id}-*.yaml"))
    text = yaml.safe_load(path.read_text(encoding="utf-8"))["input"]
    assert isinstance(text, str)
    return text


UNAME_X86 = ("Linux node-01 6.8.0-60-generic #63-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 15 "
             "19:04:15 UTC 2026 x86_64 x86_64 x86_64 GNU/Linux")
UNAME_ARM = ("Linux node-01 6.8.0-1025-nvidia-64k #28-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 15 "
             "19:04:15 UTC 2026 aarch64 aarch64 aarch64 GNU/Linux")


def common_tail(r: Report, nvlsm: str | None = None) -> None:
    r.block("\n")  # the mst block around its own Skipping block (report_skip writes first)
    r.skip("mst output", "mst not found")
    if nvlsm is None:
        r.skip("nvlsm-bug-report.sh output", "nvlsm-bug-report.sh not found")
        r.block("\n")
    else:
        r.block("Collecting NVLink Subnet Manager (NVLSM) information...\n"
                f"/opt/nvidia/nvlsm/sbin/nvlsm-bug-report.sh --stdout\n\n{nvlsm}\n\n")
    r.raw("\nSummary of Skipped Sections:\n\nSkipped Component                   | Details\n"
          + "=" * 80 + "\nmst output                          | mst not found\n"
          + "-" * 80 + "\n\nSummary of Errors:\n\n")
    r.block("End of NVIDIA bug report log file.\n")


def smi_block(r: Report, query: str, nvlink: str = "") -> None:
    r.block(f"/usr/bin/nvidia-smi --query\n\n{query}\n\n"
            "/usr/bin/nvidia-smi --query --unit\n\n\n==============NVSMI LOG==============\n\n"
            f"{'Timestamp':<42}: Fri May 16 15:23:42 2026\n{'Attached Units':<42}: 0\n\n\n"
            f"/usr/bin/nvidia-smi nvlink --status\n\n{nvlink}\n\n")


def ib_block(r: Report, ibstat: str, devices: list[str]) -> None:
    text = f"/usr/sbin/ibstat\n\n{ibstat}\n"
    for dev in devices:
        text += (f"Running InfiniBand commands for device: {dev}\n\n"
                 f"/usr/sbin/ibnetdiscover -C {dev}\n\n#\n# Topology file: generated on Fri "
                 "May 16 15:23:43 2026\n#\n\n\n")
    r.block(text)


def b200(name: str, modules: list[str], fm_status: str, smi: str, ib: bool = True,
         driver: str = "570.148.08", fm_log: str | None = None) -> Path:
    node = case_node("P11")
    node["modules"] = modules
    lspci = with_real_lpf(lspci_of(node))
    r = Report()
    prologue(r, UNAME_X86, driver, driver)
    r.file("/etc/os-release", 'PRETTY_NAME="Ubuntu 24.04.2 LTS"\nNAME="Ubuntu"\n'
           'VERSION_ID="24.04"\nID=ubuntu\n')
    r.command("/usr/bin/lspci -nntv", "-[0000:00]-+-00.0  Intel Corporation Device [8086:09a2]")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci)
    r.block("Scanning kernel log files for NVIDIA kernel messages:\n\n  journalctl -b -0:\n"
            f"May 16 15:09:58 node-01 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for "
            f"x86_64  {driver}  Release Build\n\n")
    r.block("dmesg:\n\n[    0.000000] Linux version 6.8.0-60-generic\n"
            "[   11.204356] mlx5_core 0000:05:00.0: firmware version: 28.42.1274\n")
    r.file("/proc/modules", proc_modules(modules))
    r.file("/proc/driver/nvidia/version", proc_version(driver, "x86_64"))
    r.file("/proc/driver/nvidia/params", "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n")
    smi_block(r, smi)
    if ib:
        ib_block(r, ibstat_b200(), [f"mlx5_{i}" for i in range(4)])
    else:
        r.skip("ibstat output", "ibstat not found")
        r.block("\n")
    if fm_log is not None:
        r.file("/var/log/fabricmanager.log", fm_log)
    r.command("/usr/bin/systemctl status nvidia-fabricmanager.service", fm_status)
    common_tail(r)
    return r.write(name)


def b200_gpus(fabric: dict[str, object]) -> list[dict[str, object]]:
    return [{"pci": f"00000000:{0x18 + i:02X}:00.0", "name": "NVIDIA B200",
             "uuid": f"GPU-0000000{i}-0000-0000-0000-00000000000{i}", "fabric": fabric}
            for i in range(8)]


def compose_all() -> None:
    # 1. DGX B200 as captured (case P11), healthy: real LPF lspci + ibstat, the B200 XML's
    #    fabric states, fabric manager started with -g (bottlerocket B200 systemctl status).
    fm_ok = corpus("logs/bottlerocket-b200-fm-nvlsm-guid-systemctl-status-kk142.txt")
    fm_ok = fm_ok.split("\n", 1)[1]  # drop the shell prompt line
    # the capture's -g GUID is another node's (anonymised): this node's first LPF port
    fm_ok = fm_ok.replace("-g 0xe09d730300000001", "-g 0xe09d730300e400e8")
    modules = ["nvidia", "mlx5_core", "mlx5_ib", "ib_umad", "ib_uverbs"]
    b200("dgx-b200-healthy.log.gz", modules, fm_ok,
         smi_text("570.148.08", "12.8", gpus_from_xml("nvidia-smi/k8s-test-infra-hw-qx-b200.xml")))
    # 2. DGX B200 without the IB stack (cases P05, D03): mlx5_ib and ib_umad not loaded, no
    #    ibstat, the start script took it for pre-NVL5; GPUs stuck in progress (S02).
    pre = corpus("logs/fm-590.48.01-systemctl-status-pre-nvl5-node-01.txt")
    in_progress = fabric_block(corpus("nvidia-smi/fabric-in-progress-580-wide-columns-"
                                      "gpuop2511.txt"))
    b200("dgx-b200-ib-stack-missing.log.gz", ["nvidia", "mlx5_core"], pre,
         smi_text("590.48.01", "13.1", b200_gpus(in_progress)), ib=False, driver="590.48.01",
         fm_log=case_input("D03"))
    # 3. HGX H100 (case P10): the real 535.161.08 nvidia-smi -q and fabricmanager.log.
    h100_node = case_node("P10")
    r = Report()
    prologue(r, UNAME_X86, "535.161.08", "535.161.08")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci_of(h100_node))
    r.block("Scanning kernel log files for NVIDIA kernel messages:\n\n"
            "No NVIDIA kernel messages found in recent systemd journal entries.\n\n")
    r.block("dmesg:\n\n" + corpus("logs/gpud-hgx-h100-550.90.07-dmesg-nvswitch-probe-excerpt"
                                  ".log"))
    r.file("/proc/modules", proc_modules(["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"]))
    r.file("/proc/driver/nvidia/version", proc_version("535.161.08", "x86_64"))
    smi_block(r, corpus("nvidia-smi/hgx-h100-535.161.08-nvidia-smi-q.txt"),
              corpus("nvidia-smi/a100-sxm4-nvidia-smi-nvlink-status.txt"))
    r.skip("ibstat output", "ibstat not found")
    r.block("\n")
    r.file("/var/log/fabricmanager.log", corpus("logs/gpud-hgx-h100-535.161.08-"
                                                "fabricmanager.log"))
    common_tail(r)
    r.write("hgx-h100-healthy.log.gz")
    # 4. HGX H100 with fabric manager 530.30.02 on driver 530.41.03 (case D01) and NVSwitch
    #    SXids (D09's fatal line, the corpus's non-fatal dmesg lines).
    r = Report()
    prologue(r, UNAME_X86, "530.30.02", "530.41.03")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci_of(h100_node))
    r.block("dmesg:\n\n" + corpus("logs/nvswitch-sxid-22013-dmesg-590.48.01.txt"))
    r.file("/proc/modules", proc_modules(["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"]))
    r.file("/proc/driver/nvidia/version", proc_version("530.41.03", "x86_64"))
    r.file("/var/log/fabricmanager.log", case_input("D01") + case_input("D09"))
    common_tail(r)
    r.write("hgx-h100-version-mismatch.log.gz")
    # 5. GB200 compute tray (case P04) with one GPU's fabric health unhealthy (S04), IMEX run
    #    by the DRA driver (no host unit), the 18-node domain of nvidia-imex-ctl -N.
    gb_node = case_node("P04")
    gpus = gpus_from_xml("nvidia-smi/k8s-test-infra-hw-qx-gb200.xml")
    unhealthy = fabric_block(corpus("nvidia-smi/gb200-fabric-unhealthy-grep-C3-dra626.txt"))
    fabric1 = dict(gpus[1]["fabric"])  # type: ignore[call-overload]
    fabric1["Health"] = unhealthy["Health"]  # the capture's Health block, this GPU's domain
    gpus[1] = {**gpus[1], "fabric": fabric1}
    r = Report()
    prologue(r, UNAME_ARM, None, "580.159.04")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci_of(gb_node))
    r.file("/proc/modules", proc_modules(["nvidia", "mlx5_core", "mlx5_ib"]))
    r.file("/proc/driver/nvidia/version", proc_version("580.159.04", "aarch64"))
    r.file("/proc/driver/nvidia/params", "ImexChannelCount: 2048\nCreateImexChannel0: 0\n")
    smi_block(r, smi_text("580.159.04", "13.0", gpus))
    r.file("/var/log/nvidia-imex.log", corpus("imex/imex-580.159.04-daemon-startup-hostnames-"
                                              "dra1465.log"))
    r.command("/usr/bin/systemctl status nvidia-imex.service",
              "Unit nvidia-imex.service could not be found.")
    r.command("/usr/bin/nvidia-imex-ctl -N",
              corpus("imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt"))
    common_tail(r)
    r.write("gb200-tray-unhealthy.log.gz")
    # 6. GB300 tray: Completed with Insufficient Resources (S03) and an IMEX daemon that finds
    #    no local interface in its node list (D07).
    gb300 = {**gb_node, "gpus": [{"device_id": "31c2", "count": 4}]}
    block = fabric_block(corpus("nvidia-smi/fabric-insufficient-resources-azhpc506.txt"))
    gpus = [{"pci": f"0000000{8 * i + 8:X}:01:00.0", "name": "NVIDIA GB300",
             "uuid": f"GPU-1000000{i}-0000-0000-0000-00000000000{i}", "fabric": block}
            for i in range(4)]
    r = Report()
    prologue(r, UNAME_ARM, None, "570.00")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci_of(gb300))
    r.file("/proc/modules", proc_modules(["nvidia", "mlx5_core", "mlx5_ib"]))
    r.file("/proc/driver/nvidia/version", proc_version("570.00", "aarch64"))
    smi_block(r, smi_text("570.00", "12.8", gpus))
    r.file("/var/log/nvidia-imex.log", case_input("D07"))
    common_tail(r)
    r.write("gb300-tray-insufficient-resources.log.gz")
    # 10. Two A40s joined by an NVLink bridge (P01) whose enabled fabric manager unit failed
    #     with NV_WARN_NOTHING_TO_DO (D02): nothing to manage, nothing broken.
    a40 = case_node("P01")
    journal = corpus("logs/a40-nvlink-bridge-fm-520-nothing-to-do-journal-gpuop610.txt")
    status = ("\u00d7 nvidia-fabricmanager.service - NVIDIA fabric manager service\n"
              "     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled; "
              "vendor preset: enabled)\n"
              "     Active: failed (Result: exit-code) since Wed 2023-11-15 14:15:47 CST; 2min "
              "3s ago\n    Process: 4177 ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/"
              "nvidia/nvswitch/fabricmanager.cfg (code=exited, status=1/FAILURE)\n\n" + journal)
    a40_gpus = [{"pci": f"00000000:{0x18 + i:02X}:00.0", "name": "NVIDIA A40",
                 "uuid": f"GPU-2000000{i}-0000-0000-0000-00000000000{i}",
                 "fabric": {"State": "N/A", "Status": "N/A"}} for i in range(2)]
    r = Report()
    prologue(r, UNAME_X86, "515.105.01", "515.105.01")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci_of(a40))
    r.file("/proc/modules", proc_modules(["nvidia"]))
    r.file("/proc/driver/nvidia/version", proc_version("515.105.01", "x86_64"))
    smi_block(r, smi_text("515.105.01", "11.7", a40_gpus))
    r.command("/usr/bin/systemctl status nvidia-fabricmanager.service", status)
    common_tail(r)
    r.write("a40-nvlink-bridge-fm-nothing-to-do.log.gz")
    # 11. DGX A100 (P08): 8 A100s and 6 NVSwitches, fabric manager running (the p4d A100
    #     systemctl status); A100s report no fabric state (N/A, as the A100 XML's Fabric block).
    a100 = case_node("P08")
    block_a100 = gpus_from_xml("nvidia-smi/k8s-test-infra-hw-qx-a100.xml")[0]["fabric"]
    a100_gpus = [{"pci": f"00000000:{0x18 + i:02X}:00.0", "name": "NVIDIA A100-SXM4-80GB",
                  "uuid": f"GPU-3000000{i}-0000-0000-0000-00000000000{i}",
                  "fabric": block_a100} for i in range(8)]
    r = Report()
    prologue(r, UNAME_X86, "535.183.01", "535.183.01")
    r.command("/usr/bin/lspci -nnDvvvxxxx", lspci_of(a100))
    r.file("/proc/modules", proc_modules(["nvidia", "nvidia_nvswitch"]))
    r.file("/proc/driver/nvidia/version", proc_version("535.183.01", "x86_64"))
    smi_block(r, smi_text("535.183.01", "12.2", a100_gpus))
    r.command("/usr/bin/systemctl status nvidia-fabricmanager.service",
              corpus("logs/bottlerocket-p4d-a100-fm-systemctl-status-br3873.txt"))
    common_tail(r)
    r.write("dgx-a100-fm-running.log.gz")
    # 7. An older script's plain-text report (no ibstat, no IMEX, no NVLSM block) that was cut
    #    short: the DGX B200 report's blocks up to nvidia-smi, no epilogue, no gzip.
    src = gzip.decompress((OUT / "dgx-b200-healthy.log.gz").read_bytes()).decode()
    cut = src.index("/usr/sbin/ibstat")
    cut = src.rindex(SEP, 0, cut)
    (OUT / "dgx-b200-old-plain-cut.log").write_text(src[:cut], encoding="utf-8")
    # 9. An old script's layout (R2xx-R3xx era: files announced by their bare path, lspci of
    #    NVIDIA functions only with `-d "10de:*" -v -xxx`, no ibstat/IMEX/NVLSM blocks), plain
    #    text, for the HGX H100 node of case P10.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "node"
        build(parse(h100_node), str(root))
        old_lspci = subprocess.run(
            ["lspci", "-d", "10de:*", "-v", "-xxx", "-A", "linux-sysfs", "-O",
             f"sysfs.path={root}/sys/bus/pci"], capture_output=True, text=True,
            check=True).stdout
    old = Report()
    old.block("Start of NVIDIA bug report log file.  Please include this file, along\n"
              "with a detailed description of your problem, when reporting a graphics\n"
              "driver bug via the NVIDIA Linux forum (see devtalk.nvidia.com)\n"
              "or by sending email to 'linux-bugs@nvidia.com'.\n\n"
              "nvidia-bug-report.sh Version: 23445213\n\n"
              "Date: Tue Jul 30 11:20:00 UTC 2024\n"
              f"uname: {UNAME_X86}\n\n")
    old.block("/proc/modules\n" + proc_modules(["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"])
              + "\n")
    old.block("/proc/driver/nvidia/version\n" + proc_version("535.161.08", "x86_64") + "\n")
    old.block('/usr/bin/lspci -d "10de:*" -v -xxx\n\n' + old_lspci + "\n")
    old.block("/usr/bin/nvidia-smi -q\n\n"
              + corpus("nvidia-smi/hgx-h100-535.161.08-nvidia-smi-q.txt") + "\n")
    old.block("End of NVIDIA bug report log file.\n")
    old.write("hgx-h100-old-script.log", gz=False)
    # 8. A gzip stream cut in the middle of a member (a copy that stopped early).
    data = (OUT / "dgx-b200-healthy.log.gz").read_bytes()
    (OUT / "dgx-b200-truncated.log.gz").write_bytes(data[: int(len(data) * 0.6)])


if __name__ == "__main__":
    compose_all()
    for p in sorted(OUT.glob("*.log*")):
        print(p.name, p.stat().st_size)

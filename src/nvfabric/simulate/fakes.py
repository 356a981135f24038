"""Install the fake daemons of :mod:`.fakebin` into a simulated node tree, with the shipped
config files and the simulated GPU fabric state they share.

``install(root)`` writes, under ``root``:

- ``bin/_nvfabric_fakes/`` (a copy of the :mod:`.fakebin` package, byte-compiled in its
  ``__pycache__``: :func:`precompile`) and one launcher per
  program in ``bin/`` (``nvlsm``, ``nv-fabricmanager``, ``nvidia-smi``, ``nvidia-imex``,
  ``nvidia-imex-ctl``), each a Python script whose shebang is this interpreter; from the
  single-file binary (``make dist``, :mod:`nvfabric.effects.frozen`) each launcher is instead a
  two-line script whose shebang is that binary with ``--nvfabric-sim-fake`` (the kernel
  runs ``nvfabric --nvfabric-sim-fake DIR/bin/PROG ARGS``), and no ``.py`` copy is written:
  the fakes then run where no Python is installed;
- links at the vendor paths (``opt/nvidia/nvlsm/sbin/nvlsm``, ``usr/bin/nv-fabricmanager``,
  ``usr/bin/nvidia-smi``, ``usr/bin/nvidia-imex``, ``usr/bin/nvidia-imex-ctl``), so that
  ``nvfabric run --root DIR`` finds them where it looks on a real node;
- the node's addresses in ``proc/net/fib_trie`` (when the tree has none);
- the shipped configs when the tree has none: ``usr/share/nvidia/nvswitch/fabricmanager.cfg``,
  ``usr/share/nvidia/nvlsm/nvlsm.conf``, ``etc/nvidia-imex/config.cfg`` and
  ``nodes_config.cfg``;
- ``var/lib/nvfabric-sim/node.json`` and ``gpus.json`` (see :mod:`.fakebin`).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from nvfabric.effects.frozen import FAKE_FLAG, is_frozen
from nvfabric.facts.inventory import collect
from nvfabric.model.errors import usage_error
from nvfabric.rules.imex import config as imex_config
from nvfabric.rules.plan import plan
from nvfabric.rules.products import lookup
from nvfabric.simulate import fakebin
from nvfabric.simulate.fakebin import nvlsm as fakensm
from nvfabric.simulate.fakebin import state as fakestate

#: program name -> vendor path of the real binary (service modules' defaults; IMEX guide,
#: "Installation": /usr/bin/nvidia-imex, /usr/bin/nvidia-imex-ctl).
VENDOR_PATHS: dict[str, str] = {
    "nvlsm": "/opt/nvidia/nvlsm/sbin/nvlsm",
    "nv-fabricmanager": "/usr/bin/nv-fabricmanager",
    "nvidia-smi": "/usr/bin/nvidia-smi",
    "nvidia-imex": "/usr/bin/nvidia-imex",
    "nvidia-imex-ctl": "/usr/bin/nvidia-imex-ctl",
}

#: CUDA version printed by nvidia-smi per driver branch (captures in
#: tests/data/corpus/nvidia-smi: 535 -> 12.2, 560 -> 12.6, 570 -> 12.8, 580 -> 13.0).
CUDA_BY_BRANCH: dict[str, str] = {
    "515": "11.7", "520": "11.8", "525": "12.0", "530": "12.1", "535": "12.2", "545": "12.3",
    "550": "12.4", "555": "12.5", "560": "12.6", "565": "12.7", "570": "12.8", "575": "12.9",
    "580": "13.0", "590": "13.1",
}

#: The fakes of the fabric packages (fabric manager, NVLSM, IMEX): what a driver-only node
#: lacks (``nvfabric simulate --driver-only``), and an image or ``nvfabric install`` brings.
FABRIC_PROGRAMS = frozenset({"nvlsm", "nv-fabricmanager", "nvidia-imex", "nvidia-imex-ctl"})

#: GPU generations whose NVML fabric state is "not supported" even with fabric manager running
#: (A100 capture: State N/A with FM up, bottlerocket PR 3873; V100 predates the API).
NO_FABRIC_STATE = frozenset({"volta", "ampere", "ada"})

#: The shipped fabricmanager.cfg of the simulated node: the keys and defaults of the 535/570
#: packages (tests/data/corpus/configs/fabricmanager-535.216.01.cfg), comments shortened.
SHIPPED_FM_CFG = """\
# NVIDIA Fabric Manager configuration file (simulated node; keys and defaults as shipped).
# Read at fabric manager start-up; restart fabric manager for changes to take effect.

# Logging level: 0 off, 1 critical, 2 error, 3 warning, 4 info
LOG_LEVEL=4

# Log file; empty (or not openable) means the console (stderr)
LOG_FILE_NAME=/var/log/fabricmanager.log

# Append to the log (1) or overwrite it (0)
LOG_APPEND_TO_LOG=1

# Log size limit (MB) and rotations kept
LOG_FILE_MAX_SIZE=1024
LOG_MAX_ROTATE_COUNT=3

# Log to syslog instead of the file
LOG_USE_SYSLOG=0

# Run as a Unix daemon (1) or as a normal process (0)
DAEMONIZE=1

# Global/local fabric manager communication
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
UNIX_SOCKET_PATH=

# 0 bare metal or full passthrough, 1 shared NVSwitch, 2 vGPU multitenancy
FABRIC_MODE=0
FABRIC_MODE_RESTART=0

# State file (shared NVSwitch and vGPU modes only)
STATE_FILE_NAME=/tmp/fabricmanager.state

# SDK/API command interface
FM_CMD_BIND_INTERFACE=127.0.0.1
FM_CMD_PORT_NUMBER=6666
FM_CMD_UNIX_SOCKET_PATH=

# Stay resident on NVSwitch/GPU configuration failures
FM_STAY_RESIDENT_ON_FAILURES=0

# Degraded modes
ACCESS_LINK_FAILURE_MODE=0
TRUNK_LINK_FAILURE_MODE=0
NVSWITCH_FAILURE_MODE=0

# Abort CUDA jobs when fabric manager exits
ABORT_CUDA_JOBS_ON_FM_EXIT=1

# Topology and database files
TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch
DATABASE_PATH=/usr/share/nvidia/nvswitch
"""

SHIPPED_NVLSM_CONF = """\
# NVLSM configuration (simulated node)
log_file /var/log/nvlsm.log
"""

#: IMEX config of the simulated tray: the shipped keys and defaults (one table,
#: :data:`nvfabric.rules.imex.config.SHIPPED_DEFAULTS`).
SHIPPED_IMEX_CFG = imex_config.defaults_text(
    "# NVIDIA IMEX configuration (simulated node; keys and defaults as shipped)."
)

SIM_LOCAL_IP = "192.0.2.10"

#: One routing table of the simulated node as /proc/net/fib_trie prints it: a ``|-- A.B.C.D``
#: leaf followed by ``/32 host LOCAL`` for each local address (Linux net/ipv4/fib_trie.c).
_FIB_TABLE = f"""\
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
     +-- 192.0.2.0/24 2 0 2
        |-- {SIM_LOCAL_IP}
           /32 host LOCAL
"""

#: The simulated node's IPv4 addresses in /proc/net/fib_trie: the kernel prints the Main and
#: the Local table, here both holding the same leaves. Read by nvfabric's IMEX checks and by
#: the fake nvidia-imex, so both see the same interfaces.
FIB_TRIE = "".join(f"{table}:\n{_FIB_TABLE}" for table in ("Main", "Local"))

LAUNCHER = """\
#!{python} -IS
# nvfabric simulated node: fake {prog} (see _nvfabric_fakes/)
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import _nvfabric_fakes  # noqa: E402

sys.exit(_nvfabric_fakes.main({prog!r}, sys.argv[1:]))
"""


#: Longest ``#!`` line the kernel reads whole (Linux BINPRM_BUF_SIZE is 256 bytes with the NUL).
SHEBANG_MAX = 255

#: The launcher of a fake in a tree written by the single-file binary: the kernel runs the
#: shebang's program with its one argument, then this script's path, then the fake's argv.
FROZEN_LAUNCHER = """\
#!{binary} {flag}
# nvfabric simulated node: fake {prog}, run by the single-file nvfabric binary named above
"""


def _launcher(prog: str) -> str:
    """The launcher script of fake ``prog`` for the running nvfabric (interpreter or the
    single-file binary, :func:`nvfabric.effects.frozen.is_frozen`)."""
    if is_frozen():
        line = f"#!{sys.executable} {FAKE_FLAG}"
        if any(c.isspace() for c in sys.executable) or len(line) > SHEBANG_MAX:
            raise usage_error(
                f"cannot write the fake {prog}: the nvfabric binary's path {sys.executable!r} "
                "does not fit a #! line (no white space, at most "
                f"{SHEBANG_MAX - len(FAKE_FLAG) - 3} characters)",
                "run the binary from a shorter path without spaces")
        return FROZEN_LAUNCHER.format(binary=sys.executable, flag=FAKE_FLAG, prog=prog)
    return LAUNCHER.format(python=sys.executable, prog=prog)


#: The package the Python launchers import, a copy of :mod:`.fakebin` in ``DIR/bin``.
FAKES_PACKAGE = "_nvfabric_fakes"


def fakebin_sources() -> dict[str, str]:
    """The modules of :mod:`.fakebin` (file name -> source), as copied into
    ``DIR/bin/_nvfabric_fakes/``: every ``.py`` file of the package, nothing compiled."""
    package = Path(fakebin.__file__).parent
    return {path.name: path.read_text(encoding="utf-8")
            for path in sorted(package.glob("*.py"))}


def precompile(package: str) -> None:
    """Byte-compile the copied fakes in ``package`` (``DIR/bin/_nvfabric_fakes``) into its
    ``__pycache__`` for this interpreter, the one their launchers name: no fake then compiles
    its modules at its first start (several ms a module on a slow machine, inside the starters'
    start -> first daemon figures; the launchers' ``-I`` would write the same files then).
    Timestamp-checked, as Python writes them itself: a changed copy is compiled again. A file
    that cannot be written is skipped (the fake compiles that module at its start, as before);
    the cache is written atomically by :mod:`py_compile`."""
    import py_compile

    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            try:
                py_compile.compile(os.path.join(package, name), doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            except (py_compile.PyCompileError, OSError):
                continue


def _write(path: str, content: str, mode: int = 0o644, keep: bool = False) -> None:
    if keep and os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(content)
    os.chmod(path, mode)


def _link(root: str, vendor_path: str, target: str) -> None:
    link = os.path.join(root, vendor_path.lstrip("/"))
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)


def gpu_state(root: str) -> list[dict[str, Any]]:
    """Initial simulated fabric state of the tree's GPUs: not_started where fabric manager
    registers them, not_supported where NVML has no fabric state, completed on a multi-node
    NVLink tray (its switch trays' fabric manager did it). GPU UUIDs are derived from the
    tree's absolute path and the GPU's bus id: stable for one tree, distinct across trees (two
    simulated nodes are never taken for copies of one report by ``domain check``)."""
    inv = collect(root)
    node = os.path.abspath(root)
    out = []
    for minor, gpu in enumerate(inv.gpus):
        product = lookup(gpu.vendor, gpu.device)
        name = product.name if product else f"Device {gpu.device:04x}"
        if not name.startswith(("NVIDIA", "Tesla")):
            name = "NVIDIA " + name
        generation = product.generation if product else "unknown"
        role = product.role if product else "standalone"
        domain, rest = gpu.address.split(":", 1)
        pci = f"0000{domain}:{rest}".upper()
        entry: dict[str, Any] = {
            "pci": pci, "device_id": f"{gpu.device:04x}", "minor": minor, "name": name,
            "architecture": generation.capitalize() if product else "N/A",
            "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'nvfabric-sim:{node}:{pci}')}",
            "state": "not_started", "status": "N/A", "clique_id": None, "cluster_uuid": None,
            "health": "N/A",
        }
        if role == "standalone" or generation in NO_FABRIC_STATE:
            entry["state"] = "not_supported"
        elif role == "mnnvl_gpu":
            entry.update(state="completed", status="Success", clique_id=32766, health="Healthy",
                         cluster_uuid=str(uuid.uuid5(uuid.NAMESPACE_OID, "nvfabric-sim-cluster")))
        out.append(entry)
    return out


def install(root: str, driver_only: bool = False) -> list[str]:
    """Install the fakes, shipped configs and simulated state under ``root`` (a tree written
    by :func:`nvfabric.simulate.write.build`). Returns the fake programs' paths in ``bin/``.

    ``driver_only``: a node with the driver (its nvidia-smi) and none of the fabric packages:
    no fake of :data:`FABRIC_PROGRAMS` and none of their shipped configs, so what runs is what
    an image carries or ``nvfabric install`` installed (a stand-in archive's launcher finds
    this node's state from wherever it is laid out: :func:`nvfabric.effects.frozen.fake_target`)."""
    bindir = os.path.join(root, "bin")
    os.makedirs(bindir, exist_ok=True)

    if not is_frozen():
        for name, source in fakebin_sources().items():
            _write(os.path.join(bindir, FAKES_PACKAGE, name), source)
        precompile(os.path.join(bindir, FAKES_PACKAGE))
    installed = _launchers(root, bindir, driver_only)
    if not driver_only:
        _write(os.path.join(root, "usr/share/nvidia/nvswitch/fabricmanager.cfg"),
               SHIPPED_FM_CFG, keep=True)
        _write(os.path.join(root, "usr/share/nvidia/nvlsm/nvlsm.conf"), SHIPPED_NVLSM_CONF,
               keep=True)
    os.makedirs(os.path.join(root, "var/log"), exist_ok=True)
    os.makedirs(os.path.join(root, "var/run"), exist_ok=True)
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    p = plan(collect(root))
    _write(os.path.join(root, "proc/net/fib_trie"), FIB_TRIE, keep=True)
    if p.fabric == "mnnvl":
        if not driver_only:
            _write(os.path.join(root, "etc/nvidia-imex/config.cfg"), SHIPPED_IMEX_CFG,
                   keep=True)
        _write(os.path.join(root, "etc/nvidia-imex/nodes_config.cfg"), SIM_LOCAL_IP + "\n",
               keep=True)
    driver = p.driver_version or ""
    state = os.path.join(root, fakestate.STATE_DIR)
    os.makedirs(state, exist_ok=True)
    node = {
        "fabric": p.fabric,
        "driver_version": driver or None,
        "fm_version": driver or None,
        "imex_version": driver or None,
        "nvlsm_version": fakensm.NVLSM_VERSION,
        "cuda_version": CUDA_BY_BRANCH.get(driver.split(".")[0], "12.8"),
        "hostname": "node-01",
        "local_ips": [SIM_LOCAL_IP],
    }
    fakestate.save(root, "node.json", node)
    fakestate.save(root, "gpus.json", {"gpus": gpu_state(root)})
    for stale in ("calls.jsonl", "nvlsm.json", "imex.json", "faults.json"):
        path = os.path.join(state, stale)
        if os.path.exists(path):
            os.unlink(path)
    return installed


def _launchers(root: str, bindir: str, driver_only: bool) -> list[str]:
    """Write each fake's launcher in ``bindir`` with its link at the vendor path (none of
    :data:`FABRIC_PROGRAMS` on a ``driver_only`` node); their paths."""
    installed = []
    for prog, vendor in VENDOR_PATHS.items():
        if driver_only and prog in FABRIC_PROGRAMS:
            continue
        path = os.path.join(bindir, prog)
        _write(path, _launcher(prog), mode=0o755)
        _link(root, vendor, path)
        installed.append(path)
    return installed


def set_faults(root: str, spec: dict[str, dict[str, Any]]) -> None:
    """Inject faults: ``{"nvlsm": {"crash_after_s": 1}, "fabricmanager": {...}}`` (keys in
    :mod:`.fakebin`)."""
    fakestate.save(root, "faults.json", spec)


def gpus(root: str) -> list[dict[str, Any]]:
    """The simulated GPUs' fabric state (``gpus.json``)."""
    data: dict[str, Any] = fakestate.load(root, "gpus.json", {"gpus": []})
    return list(data.get("gpus", []))


def calls(root: str) -> list[dict[str, Any]]:
    """Events recorded by the fakes (``calls.jsonl``), in order."""
    path = fakestate.state_path(root, "calls.jsonl")
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except OSError:
        return []

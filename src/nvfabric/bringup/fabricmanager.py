"""The fabric manager bring-up of ``nvfabric run`` (fabric kinds ``nvswitch`` and ``nvlink5``):
``nv-fabricmanager``, the daemon that configures NVSwitch routing and registers GPUs with the
NVLink fabric, alone on NVSwitch gen 1-3 nodes and after NVLSM on NVLink 5 baseboards, and
:func:`prepare`, from the plan to the unit ``run`` starts: service specs in order and the
files written first. Pure: the shipped config text and the environment come in as values.

- ``nvswitch``: fabric manager alone, ``-c <effective cfg>``, no ``-g``.
- ``nvlink5``: NVLSM on the management port GUID, then fabric manager with ``-g`` and
  ``FM_SM_MGMT_PORT_GUID`` set to the same GUID (RUN.md R01).
- ``none``: nothing; ``mnnvl``: the IMEX bring-up (:mod:`nvfabric.bringup.mnnvl`), never
  fabric manager.

Every path is a host path resolved under ``root`` (unchanged on ``/``).

Vendor layout (NVIDIA Fabric Manager User Guide, "Fabric Manager Service File" and "Startup
Options"; tests/data/corpus/configs/nvidia-fabricmanager-535.service):
``/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg``; on NVLink 5
``-g <management port GUID>`` is added (capture:
tests/data/corpus/logs/bottlerocket-b200-fm-nvlsm-guid-systemctl-status-kk142.txt).

Facts used here:

- ``nv-fabricmanager --version`` prints ``Fabric Manager version is : 570.148.08``; fabric
  manager refuses to run unless that equals the loaded driver's version (captures
  tests/data/corpus/logs/fm-version-mismatch-*.txt).
- Its success line, once the switches are routed: ``Successfully configured all the available
  NVSwitches to route GPU NVLink traffic.`` (tests/data/corpus/logs/fm-590.48.01-*.txt); the GPUs
  then register and their fabric state goes to completed.
- On Hopper and later, restarting fabric manager while GPUs are registered breaks NVLink SHARP
  until the GPUs are reset (User Guide, "GPU reset"; RUN.md R04;
  tests/data/corpus/logs/nccl-nvls-invalid-argument-h100-550.124.06-nccl1705.txt).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.bringup import nvlsm
from nvfabric.bringup.prepared import Prepared
from nvfabric.bringup.spec import (
    GPU_REGISTRATION,
    PlannedFile,
    ReadyProbe,
    ServiceSpec,
    check_guid,
)
from nvfabric.model.commandline import HintContext
from nvfabric.model.fmkeys import ENV_PREFIX
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import confined, under
from nvfabric.model.inventory import Inventory
from nvfabric.rules.plan import Plan
from nvfabric.rules.products import lookup

BINARY = "/usr/bin/nv-fabricmanager"
CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"

#: ``nv-fabricmanager --version`` output (User Guide, "Startup Options": -v/--version).
_VERSION = re.compile(r"Fabric Manager version is\s*:\s*(\S+)")
#: The success line (captures named in the module docstring).
SUCCESS_LINE = r"Successfully configured all the available NVSwitches"

#: GPU generations on which a fabric manager restart after GPU registration needs a GPU reset
#: first. Source: Fabric Manager User Guide, "GPU Reset" / NVLink SHARP notes for H100 and
#: later; field case RUN.md R04 (NCCL NVLS "invalid argument" until reboot, H100 550.124.06).
RESTART_NEEDS_RESET: dict[str, str] = {
    "hopper": "FM User Guide (H100 and later); RUN.md R04",
    "blackwell": "FM User Guide (H100 and later); RUN.md R04",
}


@dataclass(frozen=True)
class FabricManagerPaths:
    """Where fabric manager lives, host view. ``shipped_config`` is the vendor's file, read
    and never edited; the effective config nvfabric writes lives in its state directory."""

    binary: str = BINARY
    shipped_config: str = CONFIG


def argv(binary: str, config: str, guid: str | None) -> tuple[str, ...]:
    """``nv-fabricmanager -c <config> [-g <GUID>]``; ValueError on a bad path or GUID."""
    out = [check_path(binary, "fabric manager binary"), "-c", check_path(config, "FM config")]
    if guid is not None:
        out += ["-g", check_guid(guid)]
    return tuple(out)


def gpu_registration(root: str, fm_log: str) -> ReadyProbe:
    """:data:`~nvfabric.bringup.spec.GPU_REGISTRATION` with a hint whose commands work on
    the node ``run`` was asked about: ``status`` with its ``--root``, ``doctor`` of fabric
    manager's log ``fm_log`` (the path the effective config gives it, as this machine
    reaches it; ``""``: on stderr, the lines above only)."""
    ctx = HintContext(root)
    doctor = (f" (`{ctx.nvfabric('doctor', options=(('--log', fm_log),))}` explains its log)"
              if fm_log else "")
    return replace(GPU_REGISTRATION, stuck_hint=(
        f"look for fabric manager errors above{doctor} and run `{ctx.nvfabric('status')}`; a "
        "state stuck in progress usually means fabric manager or NVLSM cannot reach the "
        "NVSwitches"))


def spec(binary: str, config: str, guid: str | None, *, needs_reset: bool,
         grace_s: float = 10.0, probe: ReadyProbe = GPU_REGISTRATION) -> ServiceSpec:
    """Fabric manager as a service: ready when every GPU's fabric state is completed (its
    success line prompts an immediate check); ``probe`` how that readiness is spoken of
    (:func:`gpu_registration`: its hint names the node's root)."""
    return ServiceSpec(
        name="fabricmanager",
        argv=argv(binary, config, guid),
        ready_gpus=True,
        ready_line=SUCCESS_LINE,
        grace_s=grace_s,
        restart_needs_gpu_reset=needs_reset,
        ready_probe=probe,
    )


def parse_version(text: str) -> str | None:
    """The version from ``nv-fabricmanager --version`` output, or None."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def needs_gpu_reset(generations: set[str]) -> bool:
    """True when any of these GPU generations is in :data:`RESTART_NEEDS_RESET`."""
    return bool(generations & RESTART_NEEDS_RESET.keys())


# -- the unit of an nvswitch or nvlink5 plan --------------------------------------------------


STATE_DIR = "/run/nvfabric"
EFFECTIVE_CFG = "fabricmanager.cfg"
READY_FILE = "ready"


@dataclass(frozen=True)
class RunConfig:
    """Operator choices for a run, host paths (defaults: the vendor layout).

    ``fm_sets``: ``--fm-set`` overrides; ``environ``: the environment (for
    ``NVFM_CONFIG_<KEY>``); ``fabric_mode``: FABRIC_MODE when asked; ``socket``: NVLSM's IPC
    socket when given explicitly (else ``FM_SM_IPC_INTERFACE``, else the default).
    """

    root: str = "/"
    state_dir: str = STATE_DIR
    fm: FabricManagerPaths = field(default_factory=FabricManagerPaths)
    nvlsm: nvlsm.NvlsmPaths = field(default_factory=nvlsm.NvlsmPaths)
    socket: str | None = None
    fm_sets: tuple[tuple[str, str], ...] = ()
    environ: tuple[tuple[str, str], ...] = ()
    fabric_mode: str | None = None
    grace_s: float = 10.0

    def resolve(self, path: str) -> str:
        """A host path under the root."""
        return under(self.root, path)

    @property
    def effective_cfg_path(self) -> str:
        return os.path.join(self.resolve(self.state_dir), EFFECTIVE_CFG)

    @property
    def ready_file(self) -> str:
        return os.path.join(self.resolve(self.state_dir), READY_FILE)


def needs_reset(inventory: Inventory) -> bool:
    """A fabric manager restart after GPU registration needs a GPU reset on this node: one
    of its GPUs is of a generation in :data:`RESTART_NEEDS_RESET`
    (R04)."""
    return needs_gpu_reset({product.generation for gpu in inventory.gpus
                               if (product := lookup(gpu.vendor, gpu.device))})


def prepare(inventory: Inventory, p: Plan, cfg: RunConfig, shipped_fm_cfg: str) -> Prepared:
    """The bring-up of an nvswitch or nvlink5 plan (:func:`build`), with the R04 flag from
    the node's GPU generations. Raises what :func:`build` raises."""
    return build(p, cfg, shipped_fm_cfg, needs_reset=needs_reset(inventory))


def build(p: Plan, cfg: RunConfig, shipped_fm_cfg: str, *, needs_reset: bool) -> Prepared:
    """The unit for plan ``p``. Raises ValueError for a bad path or GUID and
    :class:`nvfabric.model.fmkeys.ConfigError` for a bad config override.
    ``needs_reset``: a fabric manager restart needs a GPU reset on this node (R04)."""
    for path, what in ((cfg.state_dir, "--state-dir"), (cfg.fm.binary, "--fm-bin"),
                       (cfg.fm.shipped_config, "--fm-config"), (cfg.nvlsm.binary, "--nvlsm-bin"),
                       (cfg.nvlsm.config, "--nvlsm-config"),
                       (cfg.nvlsm.pid_file, "--nvlsm-pid-file")):
        check_path(path, what)
    if cfg.socket is not None:
        check_path(cfg.socket, "--fm-sm-socket")
    # what run creates or writes (state dir: lock, effective config, ready file; NVLSM's pid
    # file; the socket's runtime directory) may not leave the root through a symbolic link
    for path, what in ((cfg.state_dir, "--state-dir"), (cfg.nvlsm.pid_file, "--nvlsm-pid-file")):
        confined(cfg.root, path, what)
    if p.fabric in ("none", "mnnvl"):
        return Prepared(p.fabric, needs_reset=needs_reset)
    guid = p.management_port.guid if (p.fabric == "nvlink5" and p.management_port) else None
    if p.fabric == "nvlink5" and guid is None:
        raise ValueError("an NVLink 5 plan without a management port cannot be run")
    eff = fmcfg.effective(shipped_fm_cfg, root=cfg.root, guid=guid, fabric_mode=cfg.fabric_mode,
                          environ=dict(cfg.environ), sets=dict(cfg.fm_sets))
    files = (PlannedFile(cfg.effective_cfg_path, eff.text),)
    fm_spec = spec(cfg.resolve(cfg.fm.binary), cfg.effective_cfg_path, guid,
                   needs_reset=needs_reset, grace_s=cfg.grace_s,
                   probe=gpu_registration(cfg.root, "" if eff.get("LOG_USE_SYSLOG") == "1"
                                          else eff.get("LOG_FILE_NAME") or ""))
    notes = [f"effective fabric manager config: {cfg.effective_cfg_path} (from "
             f"{cfg.resolve(cfg.fm.shipped_config)}, which is not edited)"]
    if p.fabric == "nvswitch":
        return Prepared(p.fabric, (fm_spec,), files, notes=tuple(notes),
                        state_dir=cfg.resolve(cfg.state_dir), needs_reset=needs_reset)
    assert guid is not None
    # its directory is created: confined (FM_SM_IPC_INTERFACE was, by fmcfg.effective)
    socket = confined(cfg.root, cfg.socket, "--fm-sm-socket") if cfg.socket else (
        eff.get("FM_SM_IPC_INTERFACE")
        or confined(cfg.root, cfg.nvlsm.socket, "--fm-sm-socket (default)"))
    sm_paths = nvlsm.NvlsmPaths(
        binary=cfg.resolve(cfg.nvlsm.binary), config=cfg.resolve(cfg.nvlsm.config),
        pid_file=cfg.resolve(cfg.nvlsm.pid_file), socket=socket)
    port = p.management_port
    assert port is not None
    notes.append(f"management port {port.device} port {port.port} GUID {guid}: passed to NVLSM "
                 "and fabric manager")
    return Prepared(p.fabric, (nvlsm.spec(sm_paths, guid, cfg.grace_s), fm_spec), files,
                    notes=tuple(notes), state_dir=cfg.resolve(cfg.state_dir),
                    needs_reset=needs_reset)


def environ_items(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``NVFM_CONFIG_*`` part of an environment, as a hashable value for :class:`RunConfig`."""
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIX)))

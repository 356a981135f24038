"""From a fabric plan to the unit ``nvfabric run`` starts: service specs in order and the files
written first. Pure: the shipped config text and the environment come in as values.

- ``nvswitch``: fabric manager alone, ``-c <effective cfg>``, no ``-g``.
- ``nvlink5``: NVLSM on the management port GUID, then fabric manager with ``-g`` and
  ``FM_SM_MGMT_PORT_GUID`` set to the same GUID (RUN.md R01).
- ``none``: nothing; ``mnnvl``: handled by the IMEX path (never fabric manager), not here.

Every path is a host path resolved under ``root`` (unchanged on ``/``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.bringup import nvlsm
from nvfabric.bringup.prepared import Prepared
from nvfabric.bringup.spec import PlannedFile
from nvfabric.model import fmkeys
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import confined, under
from nvfabric.model.inventory import Inventory
from nvfabric.rules.plan import Plan

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
    fm: fm.FabricManagerPaths = field(default_factory=fm.FabricManagerPaths)
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
    of its GPUs is of a generation in :data:`nvfabric.bringup.fabricmanager.RESTART_NEEDS_RESET`
    (R04)."""
    from nvfabric.rules.products import lookup

    return fm.needs_gpu_reset({product.generation for gpu in inventory.gpus
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
    fm_spec = fm.spec(cfg.resolve(cfg.fm.binary), cfg.effective_cfg_path, guid,
                      needs_reset=needs_reset, grace_s=cfg.grace_s)
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
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(fmkeys.ENV_PREFIX)))

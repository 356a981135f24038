"""``nv-fabricmanager``: the daemon that configures NVSwitch routing and registers GPUs with the
NVLink fabric (NVSwitch gen 1-3 nodes alone; NVLink 5 baseboards after NVLSM).

Vendor layout (NVIDIA Fabric Manager User Guide, "Fabric Manager Service File" and "Startup
Options"; ../shared/corpus/configs/nvidia-fabricmanager-535.service):
``/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg``; on NVLink 5
``-g <management port GUID>`` is added (capture:
../shared/corpus/logs/bottlerocket-b200-fm-nvlsm-guid-systemctl-status-kk142.txt).

Facts used here:

- ``nv-fabricmanager --version`` prints ``Fabric Manager version is : 570.148.08``; fabric
  manager refuses to run unless that equals the loaded driver's version (captures
  ../shared/corpus/logs/fm-version-mismatch-*.txt).
- Its success line, once the switches are routed: ``Successfully configured all the available
  NVSwitches to route GPU NVLink traffic.`` (../shared/corpus/logs/fm-590.48.01-*.txt); the GPUs
  then register and their fabric state goes to completed.
- On Hopper and later, restarting fabric manager while GPUs are registered breaks NVLink SHARP
  until the GPUs are reset (User Guide, "GPU reset"; RUN.md R04;
  ../shared/corpus/logs/nccl-nvls-invalid-argument-h100-550.124.06-nccl1705.txt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvfabric.bringup.spec import ServiceSpec, check_guid
from nvfabric.model.hostpath import check as check_path

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


def spec(binary: str, config: str, guid: str | None, *, needs_reset: bool,
         grace_s: float = 10.0) -> ServiceSpec:
    """Fabric manager as a service: ready when every GPU's fabric state is completed (its
    success line prompts an immediate check)."""
    return ServiceSpec(
        name="fabricmanager",
        argv=argv(binary, config, guid),
        ready_gpus=True,
        ready_line=SUCCESS_LINE,
        grace_s=grace_s,
        restart_needs_gpu_reset=needs_reset,
    )


def parse_version(text: str) -> str | None:
    """The version from ``nv-fabricmanager --version`` output, or None."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def needs_gpu_reset(generations: set[str]) -> bool:
    """True when any of these GPU generations is in :data:`RESTART_NEEDS_RESET`."""
    return bool(generations & RESTART_NEEDS_RESET.keys())

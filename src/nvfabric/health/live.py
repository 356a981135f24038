"""Read every GPU's fabric state from a node: NVML on the real host (root ``/``), or the node's
own ``bin/nvidia-smi -q -x`` on a simulated root (the fake written by ``nvfabric simulate``).

This is the contract the supervisor relies on: :func:`read` returns one GpuFabric per GPU.
"""

from __future__ import annotations

import os
import subprocess

from ..findings import Finding
from .model import FabricHealth, GpuFabric

SMI_TIMEOUT_S = 15.0


def read(root: str) -> list[GpuFabric]:
    """The GPUs' fabric state (empty when it cannot be read; :func:`read_health` says why)."""
    return list(read_health(root).gpus)


def read_health(root: str, timeout: float = SMI_TIMEOUT_S) -> FabricHealth:
    """The full reading with the reader's findings. Never raises for a missing library or a
    failing nvidia-smi: those become findings (``nvml_unavailable``, ``driver_not_loaded``)."""
    if os.path.realpath(root) == "/":
        from . import nvml

        return nvml.read()
    smi = os.path.join(root, "bin", "nvidia-smi")
    if not os.access(smi, os.X_OK):
        return FabricHealth("nvml", (), findings=(Finding(
            "nvml_unavailable", "error",
            f"the simulated root {root} has no bin/nvidia-smi to read fabric state from",
            "write one with `nvfabric simulate PROFILE DIR`, or read a capture with "
            "--from-nvidia-smi FILE",
            {"reason": "no_nvidia_smi"},
        ),))
    try:
        proc = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [smi, "-q", "-x"], capture_output=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return _failed(f"{smi} -q -x did not run: {err}")
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        return _failed(f"{smi} -q -x exited {proc.returncode}: {first[0] if first else ''}")
    from .smi import SmiFormatError, parse

    try:
        return parse(proc.stdout.decode("utf-8", "replace"))
    except SmiFormatError as err:
        return _failed(f"{smi} -q -x printed no readable capture: {err}")


def _failed(message: str) -> FabricHealth:
    return FabricHealth("nvidia-smi-xml", (), findings=(Finding(
        "nvml_unavailable", "error", message,
        "run the same command by hand; a driver that is not loaded makes nvidia-smi fail",
        {"reason": "nvidia_smi_failed"},
    ),))

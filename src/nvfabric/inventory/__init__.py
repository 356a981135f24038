"""The only reader of the host: builds an :class:`Inventory` from a root directory.

Every path is resolved under ``root`` (default ``/``), so a test node is a directory tree.
"""

from __future__ import annotations

import os

from ..errors import usage_error
from . import infiniband, nvidia, pci
from .model import IbDevice, IbPort, Inventory, PciFunction

__all__ = ["IbDevice", "IbPort", "Inventory", "PciFunction", "collect"]


def collect(root: str = "/", arch: str | None = None) -> Inventory:
    """Read a node. ``arch`` overrides ``proc/sys/kernel/arch``.

    Raises NvfabricError (exit 2) when ``root`` is not a readable directory.
    """
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        raise usage_error(f"root {root!r} is not a readable directory")
    return Inventory(
        root=root,
        arch=normalise_arch(arch or nvidia.arch(root)),
        driver_version=nvidia.driver_version(root),
        modules=nvidia.loaded_modules(root),
        pci=pci.read_all(root),
        infiniband=infiniband.read_all(root),
        nvswitch_proc_devices=nvidia.nvswitch_proc_devices(root),
        imex_major=nvidia.imex_major(root),
        imex_channels=nvidia.imex_channels(root),
        os_release=nvidia.os_release(root),
    )


def normalise_arch(name: str) -> str:
    """Any spelling of the two architectures to ``uname -m`` form (amd64 -> x86_64,
    arm64/sbsa -> aarch64); other names are returned lower-cased."""
    low = name.strip().lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "sbsa": "aarch64"}.get(low, low)

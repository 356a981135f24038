"""The only reader of the host: builds an :class:`Inventory` from a root directory.

Every path is resolved under ``root`` (default ``/``), so a test node is a directory tree.
"""

from __future__ import annotations

import os

from nvfabric.facts import infiniband, nvidia, pci
from nvfabric.model.errors import usage_error
from nvfabric.model.inventory import Inventory

#: The architectures NVIDIA ships fabric manager, NVLSM and IMEX for (NVIDIA driver downloads:
#: Linux x86_64 and Linux aarch64/SBSA), as ``uname -m`` names them.
ARCHES = ("x86_64", "aarch64")

#: Other spellings of :data:`ARCHES` (Debian amd64/arm64, NVIDIA's CUDA repository "sbsa").
ARCH_SPELLINGS = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "sbsa": "aarch64"}


def require_root(root: str) -> None:
    """Raise NvfabricError (exit 2, ``input_unreadable``) unless ``root`` is a readable
    directory: every command that reads a node refuses ``--root /nonexistent`` with this line
    instead of reporting on an empty node."""
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        raise usage_error(f"root {root!r} is not a readable directory",
                          "give the root of the node or image tree (/ for this host)")


def collect(root: str = "/", arch: str | None = None) -> Inventory:
    """Read a node. ``arch`` (an operator's ``--arch``) overrides ``proc/sys/kernel/arch``; it
    must name one of :data:`ARCHES` in any spelling of :data:`ARCH_SPELLINGS`.

    Raises NvfabricError (exit 2) when ``root`` is not a readable directory or ``arch`` is
    empty or not a supported architecture.
    """
    if arch is not None:
        arch = checked_arch(arch)
    require_root(root)
    version = nvidia.driver_version(root)
    return Inventory(
        root=root,
        arch=arch or normalise_arch(nvidia.arch(root)),
        driver_version=version,
        modules=nvidia.loaded_modules(root),
        pci=pci.read_all(root),
        infiniband=infiniband.read_all(root),
        nvswitch_proc_devices=nvidia.nvswitch_proc_devices(root),
        imex_major=nvidia.imex_major(root),
        imex_channels=nvidia.imex_channels(root),
        os_release=nvidia.os_release(root),
        driver_unreadable=None if version else nvidia.driver_unreadable(root),
    )


def normalise_arch(name: str) -> str:
    """Any spelling of the two architectures to ``uname -m`` form (amd64 -> x86_64,
    arm64/sbsa -> aarch64); other names are returned lower-cased."""
    low = name.strip().lower()
    return ARCH_SPELLINGS.get(low, low)


def checked_arch(name: str) -> str:
    """An operator-given architecture in ``uname -m`` form; NvfabricError (exit 2) naming the
    supported ones when it is empty or another architecture (``ppc64le``, ``riscv64``)."""
    arch = normalise_arch(name)
    if arch not in ARCHES:
        spellings = ", ".join(f"{k} = {v}" for k, v in ARCH_SPELLINGS.items())
        raise usage_error(
            f"--arch {name!r} is not supported; supported: {', '.join(ARCHES)} ({spellings})",
            "leave --arch out to use the node's own architecture",
        )
    return arch

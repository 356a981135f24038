"""NVIDIA driver facts: loaded modules, driver version, NVSwitch proc entries, IMEX channels,
architecture and os-release.

Sources: ``sys/module/nvidia/version`` (the loaded module's version), else the ``NVRM
version:`` line of ``proc/driver/nvidia/version`` (capture:
tests/data/corpus/proc/driver-nvidia-version-590.48.01-open-x86_64.txt); the
``nvidia-caps-imex-channels`` line of ``proc/devices`` (capture:
tests/data/corpus/proc/proc-devices-imex-channels-excerpt-dra304.txt); channel nodes
``dev/nvidia-caps-imex-channels/channelN`` (NVIDIA IMEX guide, "IMEX channels").
"""

from __future__ import annotations

import os
import re

from nvfabric.facts.fs import listdir, read_text
from nvfabric.model.hostpath import under
from nvfabric.model.strict import int_or_none

#: Modules the plan cares about (names as under /sys/module).
MODULES = ("nvidia", "nvidia_nvswitch", "mlx5_core", "mlx5_ib", "ib_umad", "ib_uverbs")

#: ASCII digits only (``\d`` alone would take Arabic-Indic or fullwidth digits).
_VERSION = re.compile(r"\b(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\b", re.ASCII)


def loaded_modules(root: str) -> frozenset[str]:
    """Names of the modules of :data:`MODULES` present under ``sys/module``."""
    present = set(listdir(under(root, "/sys/module")))
    return frozenset(m for m in MODULES if m in present)


def parse_proc_version(text: str) -> str | None:
    """The driver version from ``/proc/driver/nvidia/version`` text, as printed."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _VERSION.search(line.split("Kernel Module", 1)[-1])
            if match:
                return match.group(1)
    return None


def driver_unreadable(root: str) -> str | None:
    """Why the loaded driver's version cannot be read, when :func:`driver_version` found none
    although a version file is there: one line naming the file (it cannot be read, or holds no
    version); None when neither file exists (the module is not loaded)."""
    for host in ("/sys/module/nvidia/version", "/proc/driver/nvidia/version"):
        path = under(root, host)
        if not os.path.lexists(path):
            continue
        text = read_text(path)
        return f"{host} cannot be read" if text is None else f"{host} holds no driver version"
    return None


def driver_version(root: str) -> str | None:
    """The loaded NVIDIA driver version, or None when the module is not loaded or its version
    cannot be read (:func:`driver_unreadable` tells the two apart)."""
    text = read_text(under(root, "/sys/module/nvidia/version"))
    if text and _VERSION.fullmatch(text):
        return text
    proc = read_text(under(root, "/proc/driver/nvidia/version"))
    return parse_proc_version(proc) if proc else None


def nvswitch_proc_devices(root: str) -> tuple[str, ...]:
    """Entries of ``proc/driver/nvidia-nvswitch/devices`` (PCI addresses)."""
    return tuple(listdir(under(root, "/proc/driver/nvidia-nvswitch/devices")))


def parse_proc_devices(text: str, name: str) -> int | None:
    """The major number of a character device ``name`` in ``/proc/devices`` text."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] == name:
            # a major number has 12 bits (MAJORBITS, include/linux/kdev_t.h)
            major = int_or_none(parts[0], high=4095)
            if major is not None:
                return major
    return None


def imex_major(root: str) -> int | None:
    text = read_text(under(root, "/proc/devices"))
    return parse_proc_devices(text, "nvidia-caps-imex-channels") if text else None


def imex_channels(root: str) -> tuple[int, ...]:
    """Channel numbers under ``dev/nvidia-caps-imex-channels`` (``channel0`` -> 0)."""
    out = []
    for name in listdir(under(root, "/dev/nvidia-caps-imex-channels")):
        number = int_or_none(name[7:], high=(1 << 20) - 1) if name.startswith("channel") else None
        if number is not None:  # a minor number has 20 bits (MINORBITS)
            out.append(number)
    return tuple(sorted(out))


def arch(root: str) -> str:
    """``proc/sys/kernel/arch`` (uname -m), falling back to this interpreter's machine."""
    text = read_text(under(root, "/proc/sys/kernel/arch"))
    if text:
        return text
    import platform

    return platform.machine() or "unknown"


def os_release(root: str) -> tuple[tuple[str, str], ...]:
    """``etc/os-release`` as key/value pairs (quotes removed), () when missing."""
    text = read_text(under(root, "/etc/os-release")) or read_text(
        under(root, "/usr/lib/os-release")
    )
    out = []
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            out.append((key.strip(), value.strip().strip("'\"")))
    return tuple(out)

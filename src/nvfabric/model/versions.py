"""Driver and component version strings: kept as published, compared numerically per field.

NVIDIA publishes ``570.158.01`` (zero-padded third field) and nvlsm ``2025.06.6`` (calendar);
Debian and RPM packages add a revision (``580.126.09-1``, ``510.85.02-0ubuntu0.22.04.1``,
``535.230.02-1.el9``). A version is never rewritten (``570.158.01`` stays so in every output);
equality is field by field on integers, so ``570.158.01`` equals ``570.158.1`` and differs from
``570.158.10``. Source: the manifests in tests/data/corpus/redist and cases F02, F04, F05.
"""

from __future__ import annotations

import re

#: At most 12 digits a field (\Z, not $: a trailing newline is not part of a version).
_VERSION_RE = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,12}){1,3}\Z")
#: An NVIDIA driver version as the kernel module prints it: a three-digit branch and one or
#: two more fields (``580.95.05``, ``570.36``), the shape nvfabric reads from
#: sys/module/nvidia/version (nvfabric.facts.nvidia).
_DRIVER_RE = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?\Z")


def is_version(text: str) -> bool:
    """True for 2 to 4 dot-separated decimal fields (``580.95.05``, ``2025.06.6``, ``570.00``)."""
    return bool(_VERSION_RE.match(text))


def is_driver_version(text: str) -> bool:
    """True for a driver version (:data:`_DRIVER_RE`): ``1.2`` or ``2025.06.6`` is a version,
    but no driver's, and fetching it would only ask the network for a manifest that cannot
    exist."""
    return bool(_DRIVER_RE.match(text))


def fields(text: str) -> tuple[int, ...] | None:
    """``"570.158.01"`` -> ``(570, 158, 1)``; None when ``text`` is not a plain version."""
    if not is_version(text):
        return None
    return tuple(int(part) for part in text.split("."))


def same(a: str, b: str) -> bool:
    """Numeric per-field equality of two plain versions; False when either is not one."""
    fa, fb = fields(a), fields(b)
    return fa is not None and fa == fb


def branch(driver_version: str) -> int:
    """The driver branch, its first field (``580.95.05`` -> 580). ValueError when not a
    version."""
    parsed = fields(driver_version)
    if parsed is None:
        raise ValueError(f"not a driver version: {driver_version!r}")
    return parsed[0]


def at_least(version: tuple[int, ...], since: tuple[int, ...]) -> bool:
    """``version >= since``, comparing field by field (missing fields count as 0)."""
    width = max(len(version), len(since))
    pad_v = version + (0,) * (width - len(version))
    pad_s = since + (0,) * (width - len(since))
    return pad_v >= pad_s

"""Lookups in the fact tables (:mod:`.tables`): architecture names per artifact kind, package
names per driver branch, CUDA repository distro directory. Pure functions.
"""

from __future__ import annotations

from nvfabric.artifacts.tables import (
    ARCH_ALIASES,
    ARCH_NAMES,
    DISTROS,
    KINDS,
    NEVER_FOR_FABRIC,
    PACKAGE_NAMES,
)
from nvfabric.model.strict import is_uint
from nvfabric.model.versions import at_least, fields


def canonical_arch(name: str) -> str | None:
    """Any spelling (x86_64, amd64, aarch64, arm64, sbsa ...) -> ``x86_64`` | ``aarch64``;
    None for an architecture nvfabric does not fetch for."""
    return ARCH_ALIASES.get(name.strip().lower())


def arch_name(kind: str, arch: str) -> str:
    """The name ``kind`` (one of :data:`.tables.KINDS`) uses for ``arch`` (any spelling):
    ``arch_name("redist", "aarch64") == "sbsa"``, ``arch_name("deb", "x86_64") == "amd64"``.

    Raises ValueError for an unknown kind or architecture.
    """
    canon = canonical_arch(arch)
    if kind not in KINDS or canon is None:
        raise ValueError(f"no {kind} name for architecture {arch!r}")
    return ARCH_NAMES[(kind, canon)][0]


def package_name(kind: str, component: str, driver_version: str) -> str | None:
    """The package that carries ``component`` for ``driver_version`` in a ``deb`` or ``rpm``
    repository, e.g. ``("deb", "fabricmanager", "535.230.02") -> "nvidia-fabricmanager-535"``,
    ``("deb", "fabricmanager", "580.95.05") -> "nvidia-fabricmanager"``,
    ``("rpm", "fabricmanager", "570.1.2") -> "nvidia-fabric-manager"``; None when that branch
    has no such package (libnvsdm before R570). ValueError on a bad version."""
    version = fields(driver_version)
    if version is None:
        raise ValueError(f"not a driver version: {driver_version!r}")
    chosen = None
    for rule in PACKAGE_NAMES:
        if rule.kind == kind and rule.component == component and at_least(version, rule.since):
            if chosen is None or at_least(rule.since, chosen.since):
                chosen = rule
    if chosen is None or chosen.pattern is None:
        return None
    return chosen.pattern.format(branch=version[0])


def distro_dir(os_release: dict[str, str]) -> str | None:
    """The CUDA repository directory for a node's ``etc/os-release`` (``ID``, ``VERSION_ID``):
    ubuntu 24.04 -> ``ubuntu2404``, rhel 9.4 -> ``rhel9``; None when unknown."""
    ident = os_release.get("ID", "").strip().lower()
    version = os_release.get("VERSION_ID", "").strip()
    rule = DISTROS.get(ident)
    if rule is None or not version:
        return None
    prefix, how = rule
    parts = version.split(".")
    if not all(is_uint(p) for p in parts):
        return None
    return prefix + ("".join(parts) if how == "nodot" else parts[0])


def split_for_fabric(
    components: tuple[str, ...], fabric: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(kept, refused): the components a node of ``fabric`` may have, and those it never gets
    (:data:`.tables.NEVER_FOR_FABRIC`: fabric manager, NVLSM and their libraries on
    ``mnnvl``), each in request order."""
    never = NEVER_FOR_FABRIC.get(fabric or "", frozenset())
    return (tuple(c for c in components if c not in never),
            tuple(c for c in components if c in never))

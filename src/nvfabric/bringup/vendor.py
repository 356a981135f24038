"""The vendor files ``nvfabric run`` needs before it can start anything, and where each comes
from: the path the operator typed, the vendor layout, or what ``nvfabric install`` installed.

Files (NVIDIA Fabric Manager User Guide, package layout; :mod:`.fabricmanager`,
:mod:`.nvlsm`): fabric manager's binary ``nv-fabricmanager``, its shipped
``fabricmanager.cfg``, its topology directory (``TOPOLOGY_FILE_PATH``, files ``*_topology``);
on NVLink 5 baseboards also NVLSM's binary and ``nvlsm.conf``.

For each, in order (RUN.md R08):

1. a path the operator typed (``--fm-bin`` ...) is used as typed; if it does not exist that is
   the operator's mistake: :class:`TypedPathMissing` (exit 2);
2. the vendor path, when it exists under the root;
3. the file of that name in the install record of ``nvfabric install``
   (:mod:`nvfabric.artifacts.installed`: fabric manager of exactly the driver's version, NVLSM
   of its newest install);
4. otherwise a missing vendor package is a fault of the node: one finding per missing file
   (``binary_missing``, ``package_file_missing``, ``topology_file_missing``, ``nvlsm_missing``)
   with the ``nvfabric install`` line that fixes it; ``run`` refuses with exit 1.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nvfabric.artifacts.installed import InstalledTree, installed
from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import nvlsm
from nvfabric.facts.paths import confined, under
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import problem as path_problem

#: fabric manager's default topology directory (shipped fabricmanager.cfg TOPOLOGY_FILE_PATH).
TOPOLOGY_DIR = "/usr/share/nvidia/nvswitch"


class TypedPathMissing(ValueError):
    """A path the operator typed does not exist; the message names the option and the path."""


@dataclass(frozen=True)
class VendorFile:
    """One file run needs: ``key`` (the option, or ``topology``), ``what`` it is, the
    ``component`` that ships it, its ``basename`` in an install, ``kind`` exec|file|dir."""

    key: str
    what: str
    component: str
    basename: str
    kind: str
    vendor_path: str


FM_FILES = (
    VendorFile("--fm-bin", "fabric manager binary", "fabricmanager", "nv-fabricmanager", "exec",
               fm.BINARY),
    VendorFile("--fm-config", "fabric manager's shipped fabricmanager.cfg", "fabricmanager",
               "fabricmanager.cfg", "file", fm.CONFIG),
    VendorFile("topology", "fabric manager topology directory", "fabricmanager", "_topology",
               "dir", TOPOLOGY_DIR),
)
NVLSM_FILES = (
    VendorFile("--nvlsm-bin", "NVLSM binary", "nvlsm", "nvlsm", "exec", nvlsm.BINARY),
    VendorFile("--nvlsm-config", "NVLSM's nvlsm.conf", "nvlsm", "nvlsm.conf", "file",
               nvlsm.CONFIG),
)

_CODES = {"--fm-bin": "binary_missing", "--fm-config": "package_file_missing",
          "topology": "topology_file_missing", "--nvlsm-bin": "nvlsm_missing",
          "--nvlsm-config": "package_file_missing"}


@dataclass(frozen=True)
class Resolved:
    """``paths``: key -> host path to use; ``sources``: key -> ``typed``, ``vendor`` or
    ``install record <host path>``; ``findings`` one per missing file (all errors)."""

    paths: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        """``[{"file", "path", "source"}]`` for ``run --json``."""
        return [{"file": k, "path": v, "source": self.sources[k]} for k, v in self.paths.items()]

    def notes(self) -> list[str]:
        """One line per file not taken from the vendor layout (``run --dry-run`` prints them)."""
        return [f"{k}: {v} (from the {self.sources[k]})" for k, v in self.paths.items()
                if self.sources[k].startswith("install record")]


def _outside(root: str, path: str) -> str | None:
    """Where ``path`` really leads, links followed, when that is outside ``root`` (a copied
    image's absolute link such as ``/usr/bin/nv-fabricmanager -> /usr/local/bin/...`` points
    at the host's file, not the node's); None when it stays inside."""
    if path_problem(path) is not None:  # relative or with '..': not a question of links
        return None
    try:
        confined(root, path)
    except ValueError:
        return os.path.realpath(under(root, path))
    return None


def _exists(root: str, path: str, kind: str) -> bool:
    if _outside(root, path) is not None:
        return False
    full = under(root, path)
    if kind == "dir":
        return os.path.isdir(full)
    if kind == "exec":
        return os.path.isfile(full) and os.access(full, os.X_OK)
    return os.path.isfile(full)


def install_line(component: str, driver_version: str | None, root: str = "/") -> str:
    """The ``nvfabric install`` command that installs ``component`` for this driver into the
    node under ``root`` (``--root`` named, shell-quoted, unless it is ``/``: without it the
    line would install into the host running it, not the node that was checked)."""
    version = f" --driver-version {driver_version}" if driver_version else ""
    where = "" if os.path.abspath(root) == "/" else f" --root {shlex.quote(os.path.abspath(root))}"
    return f"nvfabric install{where} --components {component}{version}"


def resolve(root: str, fabric: str, typed: Mapping[str, str | None],
            driver_version: str | None, topology: str | None = None) -> Resolved:
    """Where each vendor file of ``fabric`` (nvswitch, nvlink5; others need none) comes from.

    ``typed``: option -> the path the operator typed (None: the default); ``topology``: the
    shipped config's TOPOLOGY_FILE_PATH when known (None: the vendor default; the caller
    passes nothing here when the operator set the key). Raises :class:`TypedPathMissing`."""
    wanted = FM_FILES + (NVLSM_FILES if fabric == "nvlink5" else ()) \
        if fabric in ("nvswitch", "nvlink5") else ()
    paths: dict[str, str] = {}
    sources: dict[str, str] = {}
    findings: list[Finding] = []
    trees: dict[str, InstalledTree | None] = {}
    for vf in wanted:
        given = typed.get(vf.key)
        if given is not None:
            if not _exists(root, given, vf.kind):
                problem = {"exec": "not an executable file", "file": "no such file",
                           "dir": "no such directory"}[vf.kind]
                away = _outside(root, given)
                if away is not None:
                    problem = f"leads out of the root (to {away})"
                where = f" under --root {root}" if os.path.abspath(root) != "/" else ""
                raise TypedPathMissing(f"{vf.key} {given}: {problem}{where}")
            paths[vf.key], sources[vf.key] = given, "typed"
            continue
        vendor = topology if (vf.key == "topology" and topology) else vf.vendor_path
        if vf.key == "topology" and path_problem(vendor) is not None:
            # The shipped config's TOPOLOGY_FILE_PATH is relative or has '..': the effective
            # config's check names the key (config_invalid_value); nothing to look up here.
            continue
        if _exists(root, vendor, vf.kind):
            paths[vf.key], sources[vf.key] = vendor, "vendor"
            continue
        if vf.component not in trees:
            trees[vf.component] = installed(
                root, vf.component, driver_version if vf.component == "fabricmanager" else None)
        tree = trees[vf.component]
        hit = None
        if tree is not None:
            hit = tree.find_dir(vf.basename) if vf.kind == "dir" else \
                tree.find(vf.basename, executable=vf.kind == "exec")
        if hit is not None and tree is not None:
            paths[vf.key], sources[vf.key] = hit, f"install record {tree.record}"
            continue
        findings.append(_missing(vf, vendor, driver_version, tree, _outside(root, vendor),
                                 root))
    return Resolved(paths, sources, tuple(findings))


def _missing(vf: VendorFile, vendor: str, driver_version: str | None,
             tree: InstalledTree | None = None, away: str | None = None,
             root: str = "/") -> Finding:
    line = install_line(vf.component, driver_version, root)
    why = tree.problem(vf.basename) if tree is not None else None
    absent = f"{vendor} is a link leading out of the root (to {away}), not the node's file," \
        if away is not None else f"{vendor} does not exist"
    if tree is not None and why is not None:
        return Finding(
            _CODES[vf.key], "error",
            f"{vf.what} is missing: {absent} and the `nvfabric install` at "
            f"{tree.host_dir} cannot be used: {why}",
            f"reinstall it: `{line}` (a damaged install is replaced whole), or the "
            "distribution's package" + ("" if vf.key == "topology" else f", or pass {vf.key} PATH"),
            {"file": vf.key, "path": vendor, "component": vf.component, "install": line,
             "install_record": tree.record},
        )
    package = (f"the fabric manager package of driver {driver_version}" if driver_version
               else "the fabric manager package of the loaded driver") \
        if vf.component == "fabricmanager" else "the nvlsm package of the driver's CUDA release"
    option = "" if vf.key == "topology" else f", or pass {vf.key} PATH"
    return Finding(
        _CODES[vf.key], "error",
        f"{vf.what} is missing: {absent} and no `nvfabric install` put one under "
        "/opt/nvfabric: the node lacks " + package,
        f"install it: `{line}` (run then finds it through the install record), or the "
        f"distribution's package{option}",
        {"file": vf.key, "path": vendor, "component": vf.component, "install": line},
    )

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import nvlsm
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import InputError
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import problem as path_problem
from nvfabric.model.vocab import FM_FABRICS, FabricKind, FindingCode
from nvfabric.rules.nodefacts import InstallSeen, PathSeen, VendorFacts

#: fabric manager's default topology directory (shipped fabricmanager.cfg TOPOLOGY_FILE_PATH).
TOPOLOGY_DIR = "/usr/share/nvidia/nvswitch"


class TypedPathMissing(InputError):
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

_CODES: dict[str, FindingCode] = {
          "--fm-bin": "binary_missing", "--fm-config": "package_file_missing",
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


def install_line(component: str, driver_version: str | None, root: str = "/") -> str:
    """The ``nvfabric install`` command that installs ``component`` for this driver into the
    node under ``root`` (``--root`` named, shell-quoted, unless it is ``/``: without it the
    line would install into the host running it, not the node that was checked)."""
    return command_line("install", root=root, options=(("--components", component),
                                                        ("--driver-version", driver_version)))


def wanted(fabric: FabricKind) -> tuple[VendorFile, ...]:
    """The vendor files ``fabric`` needs: fabric manager's on nvswitch and nvlink5, NVLSM's
    too on nvlink5; none on the others."""
    if fabric not in FM_FABRICS:
        return ()
    return FM_FILES + (NVLSM_FILES if fabric == "nvlink5" else ())


def vendor_path(vf: VendorFile, topology: str | None) -> str | None:
    """Where the vendor layout has ``vf`` (the shipped config's TOPOLOGY_FILE_PATH for the
    topology directory when known); None when that key is relative or has '..' (the
    effective config's check names it: config_invalid_value; nothing to look up)."""
    path = topology if (vf.key == "topology" and topology) else vf.vendor_path
    return None if vf.key == "topology" and path_problem(path) is not None else path


def resolve(seen: VendorFacts, root: str, fabric: FabricKind, typed: Mapping[str, str | None],
            driver_version: str | None, topology: str | None = None) -> Resolved:
    """Where each vendor file of ``fabric`` comes from, as :func:`wanted` lists them, from
    what was found (``seen``: :func:`nvfabric.app.collect.vendor_seen`, read with the same
    ``typed`` and ``topology``). Pure.

    ``typed``: option -> the path the operator typed (None: the default); ``topology``: the
    shipped config's TOPOLOGY_FILE_PATH when known (None: the vendor default; the caller
    passes nothing here when the operator set the key). Raises :class:`TypedPathMissing`."""
    paths: dict[str, str] = {}
    sources: dict[str, str] = {}
    findings: list[Finding] = []
    for vf in wanted(fabric):
        found = resolve_file(vf, seen, root, typed, driver_version, topology)
        if isinstance(found, Finding):
            findings.append(found)
        elif found is not None:
            paths[vf.key], sources[vf.key] = found
    return Resolved(paths, sources, tuple(findings))


def resolve_file(vf: VendorFile, seen: VendorFacts, root: str, typed: Mapping[str, str | None],
                 driver_version: str | None, topology: str | None = None
                 ) -> tuple[str, str] | Finding | None:
    """Where the vendor file ``vf`` comes from (:func:`resolve`, one file): (host path, source
    ``typed``, ``vendor`` or ``install record <host path>``), the finding of its absence, or
    None when there is nothing to look up (a topology key that is not a plain absolute path).
    Raises :class:`TypedPathMissing`. Pure."""
    given = typed.get(vf.key)
    if given is not None:
        found = seen.paths.get((given, vf.kind), PathSeen(False))
        if not found.present:
            raise TypedPathMissing(_typed_missing(vf, given, found, root))
        return given, "typed"
    vendor = vendor_path(vf, topology)
    if vendor is None:
        return None
    found = seen.paths.get((vendor, vf.kind), PathSeen(False))
    install = seen.installs.get(vf.key)
    if found.present:
        return vendor, "vendor"
    if install is not None and install.hit is not None:
        return install.hit, f"install record {install.record}"
    return _missing(vf, vendor, driver_version, install, found.outside, root)


def _typed_missing(vf: VendorFile, given: str, found: PathSeen, root: str) -> str:
    problem = {"exec": "not an executable file", "file": "no such file",
               "dir": "no such directory"}[vf.kind]
    if found.outside is not None:
        problem = f"leads out of the root (to {found.outside})"
    where = f" under --root {root}" if os.path.abspath(root) != "/" else ""
    return f"{vf.key} {given}: {problem}{where}"


def install_topology_keys(resolved: Resolved, sets: Mapping[str, str],
                          shipped_keys: Mapping[str, str]) -> dict[str, str]:
    """The ``--fm-set`` keys to add when the topology directory comes from an install record
    (the node lacks the vendor's): TOPOLOGY_FILE_PATH and DATABASE_PATH point at the
    installed directory, unless the operator set them (``sets``) or the shipped config
    (``shipped_keys``: its values of those keys) names a directory other than the missing
    one. Pure; an empty dict when the topology is the vendor's or typed."""
    if not resolved.sources.get("topology", "").startswith("install record"):
        return {}
    missing = shipped_keys.get("TOPOLOGY_FILE_PATH") or TOPOLOGY_DIR
    return {key: resolved.paths["topology"] for key in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH")
            if key not in sets and shipped_keys.get(key, missing) == missing}


def _missing(vf: VendorFile, vendor: str, driver_version: str | None,
             tree: InstallSeen | None = None, away: str | None = None,
             root: str = "/") -> Finding:
    line = install_line(vf.component, driver_version, root)
    why = tree.problem if tree is not None else None
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

"""Where the node's driver came from: the runfile (``NVIDIA-Linux-<arch>-<version>.run``, files
on disk that no package owns) or packages (files the dpkg database lists). Pure: decides from
what :mod:`.dpkgdb` read under ``--root``; never guessed from the distribution.

The rule: the driver's NVML library ``libnvidia-ml.so.<version>``
(:data:`.tables.DRIVER_VERSION_LIB`, in one of :data:`.tables.RUNFILE_LIB_DIRS`) names the
driver version. Owned by a package -> ``package``; owned by none -> ``runfile``; absent ->
``unknown``. Only a runfile driver satisfies dependencies outside dpkg: each package of
:data:`.tables.RUNFILE_PROVIDES` whose file is on disk and owned by no package is provided by
the runfile, at the runfile's driver version.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from nvfabric.artifacts.tables import DRIVER_VERSION_LIB

_LIB_RE = re.compile(r"^" + re.escape(DRIVER_VERSION_LIB) + r"([0-9]+(?:\.[0-9]+){1,3})$")


@dataclass(frozen=True)
class DiskFile:
    """A file found under the root: ``path`` (host view), ``owner`` the package whose dpkg file
    list names it (None: owned by no package)."""

    path: str
    owner: str | None


@dataclass(frozen=True)
class OnDisk:
    """A package the node has outside dpkg: ``name`` (Debian package name), ``version`` (the
    runfile driver version, None when unknown), ``path`` the file that stands for it."""

    name: str
    version: str | None
    path: str

    def evidence(self) -> str:
        ver = f"runfile driver {self.version}" if self.version else "version unknown"
        return f"{self.path} on disk, owned by no package ({ver})"


@dataclass(frozen=True)
class DriverOrigin:
    """``kind``: ``runfile`` | ``package`` | ``unknown``; ``version`` the driver version the
    library names; ``package`` the owning package of a packaged driver; ``provides`` what the
    runfile satisfies outside dpkg (empty unless ``runfile``); ``evidence`` one line per fact."""

    kind: str
    version: str | None
    package: str | None
    provides: tuple[OnDisk, ...]
    evidence: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"kind", "version", "package", "provides": [{"package", "version", "path"}],
        "evidence"}``."""
        return {
            "kind": self.kind, "version": self.version, "package": self.package,
            "provides": [{"package": p.name, "version": p.version, "path": p.path}
                         for p in self.provides],
            "evidence": list(self.evidence),
        }


def library_version(path: str) -> str | None:
    """The driver version in an NVML library file name (``…/libnvidia-ml.so.580.95.05`` ->
    ``580.95.05``); None for ``libnvidia-ml.so.1`` or any other name."""
    match = _LIB_RE.match(path.rsplit("/", 1)[-1])
    return match.group(1) if match else None


def classify(
    libraries: Sequence[DiskFile], binaries: Sequence[tuple[str, DiskFile]],
    current: Collection[str] = (),
) -> DriverOrigin:
    """Decide the driver's origin from the NVML library files found (``libraries``, any order)
    and the candidate runfile files found (``binaries``: (package name, file) pairs of
    :data:`.tables.RUNFILE_PROVIDES` entries that exist). A packaged library wins over an
    unowned one (a package install over an old runfile leaves the package in charge).
    Unowned libraries of several versions (an older runfile's left behind) are told apart by
    ``current``, the paths the ``libnvidia-ml.so.1`` links resolve to (what the loader uses,
    as the installer's ldconfig set them); when those name no single version, the version is
    unknown (None) and the evidence lists them all."""
    versioned = [(f, library_version(f.path)) for f in libraries]
    versioned = [(f, v) for f, v in versioned if v is not None]
    owned = [(f, v) for f, v in versioned if f.owner is not None]
    if owned:
        f, v = owned[0]
        return DriverOrigin(
            "package", v, f.owner, (),
            (f"{f.path} is owned by package {f.owner}: the driver came from packages",),
        )
    if not versioned:
        return DriverOrigin(
            "unknown", None, None, (),
            (f"no {DRIVER_VERSION_LIB}<version> in the driver library directories",),
        )
    versions = sorted({v for _, v in versioned if v is not None})
    live = sorted({v for f, v in versioned if v is not None and f.path in current})
    f, v = sorted(versioned, key=lambda fv: fv[0].path)[0]
    evidence = [f"{f.path} is owned by no package: the driver came from the runfile ({v})"]
    chosen: str | None = v
    if len(versions) > 1:
        chosen = live[0] if len(live) == 1 else None
        paths = ", ".join(sorted(f.path for f, _ in versioned))
        evidence = [f"NVML libraries of {len(versions)} driver versions, owned by no package: "
                    f"{paths}; " + (f"libnvidia-ml.so.1 leads to {chosen}: the runfile driver "
                                    f"is {chosen}" if chosen else
                                    "libnvidia-ml.so.1 names none of them alone: the runfile "
                                    "driver's version is unknown")]
    provides = []
    for name, file in binaries:
        if file.owner is None:
            provides.append(OnDisk(name, chosen, file.path))
            evidence.append(f"{name}: {file.path} on disk, owned by no package")
        else:
            evidence.append(f"{name}: {file.path} is owned by package {file.owner}")
    return DriverOrigin("runfile", chosen, None, tuple(provides), tuple(evidence))

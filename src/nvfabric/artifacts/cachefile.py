"""The record ``nvfabric fetch`` leaves in its download directory, so that ``nvfabric install
--from DIR`` at node boot knows, with no network, what each cached file is and its published
SHA-256.

``<dir>/nvfabric-artifacts.json``: ``{"format": 1, "artifacts": [{"component", "version",
"arch", "url", "sha256", "size", "source", "package", "file", "driver_version"}]}``; ``file``
is the bare file name in ``<dir>``. A fetch replaces the entries of the same (component, arch,
source) and keeps the others; the file is replaced atomically.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvfabric.artifacts.model import SOURCES, Artifact, normal_sha256
from nvfabric.artifacts.naming import canonical_arch
from nvfabric.artifacts.tables import COMPONENTS
from nvfabric.effects.atomic import write_atomic
from nvfabric.facts.textfile import read_capped
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.strict import BadValue, parse_json

RECORD = "nvfabric-artifacts.json"
FORMAT = 1
#: A record lists a few artifacts (a few KiB); 16 MiB is far past any.
MAX_RECORD = 16 << 20
_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~%=-]*$")


@dataclass(frozen=True)
class Cached:
    """One cached artifact: the resolved :class:`Artifact`, its file name in the directory and
    the driver version it was fetched for."""
    artifact: Artifact
    file: str
    driver_version: str

    def to_json(self) -> dict[str, Any]:
        """The record entry (see module doc)."""
        out = self.artifact.to_json(None)
        out.pop("path", None)
        out["file"] = self.file
        out["driver_version"] = self.driver_version
        return out


def write(directory: str, fetched: Sequence[Cached]) -> str:
    """Merge ``fetched`` into the record of ``directory`` (see module doc); returns its path.
    A damaged existing record is replaced (its entries would be unusable anyway)."""
    path = os.path.join(directory, RECORD)
    try:
        old = read(directory)
    except NvfabricError:
        old = []
    key = {(c.artifact.component, c.artifact.arch, c.artifact.source) for c in fetched}
    kept = [c for c in old if (c.artifact.component, c.artifact.arch, c.artifact.source) not in key]
    entries = [c.to_json() for c in [*kept, *fetched]]
    write_atomic(path, json.dumps({"format": FORMAT, "artifacts": entries}, indent=2) + "\n",
                 backup=False)
    return path


def _bad(path: str, why: str) -> NvfabricError:
    return NvfabricError(
        Finding("input_unreadable", "error", f"{path}: {why}",
                "run `nvfabric fetch --dest DIR` (at image build time) to fill the directory "
                "that `install --from DIR` reads"),
        exit_code=2,
    )


def read(directory: str) -> list[Cached]:
    """The entries of ``directory``'s record, each checked (known component and source, plain
    file name, 64-hex SHA-256). Raises ``input_unreadable`` (exit 2) when the record is
    missing, not JSON or has a bad entry."""
    path = os.path.join(directory, RECORD)
    if not os.path.lexists(path):
        raise _bad(path, "no fetch record here")
    try:
        data = parse_json(read_capped(path, MAX_RECORD, "a fetch record"))
    except BadValue as err:  # not JSON, nested past the bound, a number past the digit limit
        raise _bad(path, f"unreadable fetch record ({err})") from None
    except NvfabricError as err:  # cannot be read, or larger than the cap
        raise _bad(path, f"unreadable fetch record ({err.finding.message})") from None
    rows = data.get("artifacts") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise _bad(path, "no artifacts list")
    if data.get("format") != FORMAT:
        # Another layout (a later nvfabric's) is not read as this one.
        raise _bad(path, f"record format {data.get('format')!r}, this nvfabric reads format "
                   f"{FORMAT}")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise _bad(path, f"entry {i} is not an object")
        sha = normal_sha256(row.get("sha256"))
        fields = ("component", "version", "arch", "url", "source", "file", "driver_version")
        if sha is None or not all(isinstance(row.get(k), str) for k in fields) \
                or row["component"] not in COMPONENTS or row["source"] not in SOURCES \
                or not _FILE_RE.match(row["file"]):
            raise _bad(path, f"entry {i} is damaged (component, source, file or sha256)")
        size = row.get("size")
        package = row.get("package")
        out.append(Cached(
            Artifact(row["component"], row["version"], row["arch"], row["url"], sha,
                     size if isinstance(size, int) else None, row["source"],
                     package if isinstance(package, str) else None),
            row["file"], row["driver_version"],
        ))
    return out


def components_for(record: Sequence[Cached], arch: str | None) -> tuple[str, ...]:
    """The components the record holds for ``arch`` (canonical; None: any), in record order:
    what ``install --from`` installs when ``--components`` is not given."""
    return tuple(dict.fromkeys(
        c.artifact.component for c in record
        if arch is None or canonical_arch(c.artifact.arch) == arch))


def driver_for(
    record: Sequence[Cached], given: str | None, loaded: str | None, root: str,
    on_disk: str | None = None,
) -> tuple[str, tuple[str, ...]]:
    """(driver version to match, reasons): ``given`` (``--driver-version``), else ``loaded``
    (the module under the root), else ``on_disk`` (the version of the driver's NVML library
    under the root, :func:`.dpkgdb.driver_origin`: an image root has the driver installed but
    not loaded), else the one version the record was fetched for (an image root before its
    driver). Raises usage_error (exit 2) when none of these names exactly one version."""
    if given or loaded:
        return str(given or loaded), ()
    if on_disk:
        return on_disk, (f"no driver loaded under {root}: matching the driver installed there "
                         f"({on_disk}, its NVML library)",)
    fetched = sorted({c.driver_version for c in record})
    if len(fetched) != 1:
        raise usage_error(
            f"no driver is loaded under {root} and the fetch record holds {len(fetched)} "
            f"driver versions ({', '.join(fetched) or 'none'})", "pass --driver-version")
    return fetched[0], (f"no driver loaded under {root}: installing what was fetched for "
                        f"driver {fetched[0]}",)


def pick(record: Sequence[Cached], components: Sequence[str], arch: str) -> list[Cached]:
    """The one entry of each of ``components`` for ``arch`` (canonical), in record order.
    Raises usage_error (exit 2) naming the components the record lacks for that arch, or the
    entries of a component it holds more than once for it."""
    chosen = [c for c in record if c.artifact.component in components
              and canonical_arch(c.artifact.arch) == arch]
    have = {c.artifact.component for c in chosen}
    missing = [comp for comp in components if comp not in have]
    if missing:
        raise usage_error(f"the fetch record holds no {', '.join(missing)} for {arch}",
                          "fetch them at image build time: nvfabric fetch --components ... "
                          "--arch ... --dest DIR")
    for comp in components:
        same = [c for c in chosen if c.artifact.component == comp]
        if len(same) > 1:
            # Two versions of one component (a .deb and a redist archive fetched into one
            # directory, or an edited record): installing both leaves two IMEX binaries, and
            # two versions of one package in one dpkg run configure only the last.
            listed = "; ".join(f"{c.artifact.source} {c.artifact.package or c.artifact.component} "
                               f"{c.artifact.version} ({c.file})" for c in same)
            raise usage_error(f"the fetch record holds {len(same)} {comp} entries for {arch}: "
                              f"{listed}",
                              "fetch each source into its own directory (nvfabric fetch --dest "
                              "DIR) and install from the one the node needs")
    return chosen

"""CUDA APT repositories: find the exact package of a component in a ``Packages`` index.

A CUDA repository is flat: ``<base>/<distro>/<x86_64|sbsa>/Packages[.gz|.xz]`` and the
``Filename`` of each stanza is relative to that directory (``./nvidia-fabricmanager_…deb``).
Rules (cases F04, F05; tests/data/corpus/apt):

- The package name comes from the naming table by driver branch (:mod:`.tables`): R580 and
  later unversioned (``nvidia-fabricmanager``), before R580 ``nvidia-fabricmanager-535``.
- Only a stanza whose ``Package`` is that name counts; ``Provides`` never does (from R580
  ``nvidia-fabricmanager-580`` is only a virtual package, and pinning it fails), and a
  transitional package never does (``cuda-drivers-fabricmanager-460`` at 510.85.02).
- Its upstream version must equal the driver version field by field; the Debian revision
  (``-1``, ``-0ubuntu1``, ``-1ubuntu1``) and epoch are kept as published. Among several
  revisions of the exact version the highest by Debian ordering wins (python-debian).

Parsing: python-debian's deb822 parses the stanzas; a byte-level scan for
``Package: <name>`` first picks the few stanzas worth parsing, so a 5 MB index resolves in
milliseconds. Pure: bytes in, values out.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cmp_to_key
from typing import Any

from nvfabric.artifacts.indexed import not_in_index, package_names, wanted_version
from nvfabric.artifacts.model import (
    Artifact,
    Request,
    join_url,
    normal_sha256,
    not_available,
    safe_relative_path,
)
from nvfabric.artifacts.naming import arch_name
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding
from nvfabric.model.strict import MAX_DIGITS, BadValue, to_int
from nvfabric.model.versions import same

#: A digit run longer than any version field (nvfabric.model.strict.MAX_DIGITS).
_LONG_NUMBER = re.compile(f"[0-9]{{{MAX_DIGITS + 1}}}")


@dataclass(frozen=True)
class DebStanza:
    """The fields of one ``Packages`` stanza that resolution reads (strings as published;
    ``size`` in bytes or None)."""

    package: str
    version: str
    architecture: str
    filename: str
    sha256: str
    size: int | None
    description: str
    provides: str = ""


def find_stanzas(index: bytes | mmap.mmap, names: Iterable[str],
                 where: str = "Packages index") -> list[DebStanza]:
    """Every stanza of ``index`` (bytes, or an mmap of an index file) whose ``Package`` field
    is one of ``names``, parsed with python-debian, in index order. Other stanzas are not
    parsed: a search for the literal ``\\nPackage:`` line of the wanted names picks them, and
    each stanza is parsed once however many such lines it has (linear in the index).
    Raises ``input_unreadable`` naming ``where`` when a picked stanza's ``Size`` is not a
    plain number."""
    wanted = sorted({n for n in names if n})
    if not wanted:
        return []
    from debian.deb822 import Packages

    alternatives = b"|".join(re.escape(n.encode()) for n in wanted)
    line = rb"Package:[ \t]*(?:" + alternatives + rb")[ \t]*(?:\n|\Z)"
    starts: list[int] = []
    if re.match(line, index):
        starts.append(0)
    starts += [m.start() + 1 for m in re.finditer(rb"\n" + line, index)]
    out: list[DebStanza] = []
    end = -1
    for at in starts:
        if at < end:
            # a second Package field in one stanza (Debian Policy 5.1: a field appears once);
            # refused, and never a re-parse of the stanza per line (that was quadratic)
            raise NvfabricError(Finding(
                "input_unreadable", "error",
                f"{where}: a stanza has more than one Package field (offset {at})",
                "the package index is damaged or not NVIDIA's: check --mirror and the "
                "repository, then run again"), exit_code=2)
        start = index.rfind(b"\n\n", 0, at)
        start = 0 if start < 0 else start + 2
        end = index.find(b"\n\n", at)
        end = len(index) if end < 0 else end
        out.append(_stanza(Packages(index[start:end].decode("utf-8", "replace")), where))
    return out


def _stanza(para: Any, where: str) -> DebStanza:
    """One picked stanza (a python-debian ``Packages`` paragraph) as a :class:`DebStanza`.
    Raises ``input_unreadable`` naming ``where`` when its ``Size`` is not a plain number or
    its ``Version`` holds a number longer than :data:`MAX_DIGITS` digits."""
    size_text = para.get("Size", "").strip()
    try:
        size = to_int(size_text, what="Size") if size_text else None
    except BadValue as err:
        raise NvfabricError(Finding(
            "input_unreadable", "error",
            f"{where}: stanza of {para.get('Package', '')!r}: {err}",
            "the package index is damaged or not NVIDIA's: check --mirror and the "
            "repository, then run again"), exit_code=2) from None
    version = para.get("Version", "")
    if _LONG_NUMBER.search(version):
        # python-debian compares each digit run with int(): past 4,300 digits it raises
        raise NvfabricError(Finding(
            "input_unreadable", "error",
            f"{where}: stanza of {para.get('Package', '')!r}: Version {version[:40]!r}... "
            f"has a number of more than {MAX_DIGITS} digits",
            "the package index is damaged or not NVIDIA's: check --mirror and the "
            "repository, then run again"), exit_code=2)
    return DebStanza(
        package=para.get("Package", ""),
        version=version,
        architecture=para.get("Architecture", ""),
        filename=para.get("Filename", ""),
        sha256=para.get("SHA256", ""),
        size=size,
        description=para.get("Description", ""),
        provides=para.get("Provides", ""),
    )


def upstream(version: str) -> str:
    """The upstream part of a Debian version (epoch and revision removed), via python-debian:
    ``1:580.126.09-1`` -> ``580.126.09``."""
    from debian.debian_support import Version

    try:
        return str(Version(version).upstream_version or "")
    except ValueError:
        return ""


def is_transitional(stanza: DebStanza) -> bool:
    """A transitional or dummy package (its description says so): it carries no files of its
    own and its version says nothing about what it pulls in."""
    first = stanza.description.splitlines()[0].lower() if stanza.description else ""
    return "transitional" in first or "dummy package" in first


def pick(stanzas: Iterable[DebStanza], name: str, deb_arch: str, version: str) -> DebStanza | None:
    """The stanza of package ``name`` for ``deb_arch`` (or ``all``) whose upstream version
    equals ``version`` (numeric per field), highest Debian revision first; None if none."""
    from debian.debian_support import version_compare

    hits = [
        s for s in stanzas
        if s.package == name
        and s.architecture in (deb_arch, "all")
        and not is_transitional(s)
        and same(upstream(s.version), version)
    ]
    if not hits:
        return None
    hits.sort(key=cmp_to_key(lambda a, b: version_compare(a.version, b.version)))
    return hits[-1]


def resolve(
    index: bytes, searched: Sequence[str], base: str, request: Request
) -> list[Artifact]:
    """The ``.deb`` of each requested component for the exact driver version (nvlsm: its own
    ``request.nvlsm_version``). Raises ``artifact_not_available`` naming the package, the
    versions the index does have, the platform and ``searched`` (every URL read)."""
    deb_arch = arch_name("deb", request.arch)
    names = package_names("deb", deb_arch, request, searched)
    stanzas = find_stanzas(index, names.values(), searched[-1] if searched else "Packages")
    out: list[Artifact] = []
    for comp in request.components:
        name = names[comp]
        want = wanted_version(comp, request, deb_arch, searched)
        chosen = pick(stanzas, name, deb_arch, want)
        if chosen is None:
            have = (s.version for s in stanzas if s.package == name and not is_transitional(s))
            raise not_in_index(comp, name, want, deb_arch, searched, have, "the index")
        filename = chosen.filename[2:] if chosen.filename.startswith("./") else chosen.filename
        sha = normal_sha256(chosen.sha256)
        if not safe_relative_path(filename) or sha is None:
            raise not_available(
                comp, want, deb_arch, searched,
                f"the stanza of {name} {chosen.version} has an unsafe Filename or no SHA256",
            )
        out.append(
            Artifact(
                component=comp,
                version=chosen.version,
                arch=deb_arch,
                url=join_url(base, filename),
                sha256=sha,
                size=chosen.size,
                source="apt",
                package=name,
            )
        )
    return out


def pin_lines(artifacts: Iterable[Artifact]) -> list[str]:
    """What an operator runs to install exactly these versions and keep them:
    ``apt-get install -y --no-install-recommends name=version …`` then ``apt-mark hold …``."""
    arts = [a for a in artifacts if a.package]
    if not arts:
        return []
    return [" ".join(argv) for argv in commands(arts)]


def commands(artifacts: Iterable[Artifact]) -> list[list[str]]:
    """The argv lists behind :func:`pin_lines`; every name and version passes
    :func:`validate_pin` first."""
    arts = [a for a in artifacts if a.package]
    if not arts:
        return []
    specs = [validate_pin(a.package or "", a.version) for a in arts]
    return [
        ["apt-get", "install", "-y", "--no-install-recommends", *(f"{n}={v}" for n, v in specs)],
        ["apt-mark", "hold", *(n for n, _ in specs)],
    ]


_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION_RE = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")


def valid_name(name: str) -> bool:
    """A plain Debian package name (Debian Policy 5.6.1: lower case, digits, ``+ - .``)."""
    return bool(_NAME_RE.match(name))


def validate_pin(name: str, version: str) -> tuple[str, str]:
    """Check a Debian package name and version before they reach a command line (Debian
    Policy 5.6.1 and 5.6.12 character sets). Raises NvfabricError ``input_unreadable`` (exit
    2) when either is not plain."""
    if not _NAME_RE.match(name) or not _VERSION_RE.match(version):
        raise NvfabricError(
            Finding(
                "input_unreadable", "error",
                f"refusing package spec {name!r}={version!r}: not a plain name/version",
                "the package index is damaged or not NVIDIA's: check --mirror and the "
                "repository, then run again",
            ),
            exit_code=2,
        )
    return name, version

"""CUDA RPM repositories: ``repodata/repomd.xml`` -> primary metadata -> the exact package.

``repomd.xml`` names the primary metadata (``<data type="primary">`` with ``location href``
and a ``checksum``); primary lists ``<package type="rpm">`` with ``name``, ``arch``,
``version epoch= ver= rel=``, ``checksum type="sha256"`` and ``location href`` relative to the
repository root (createrepo_c's schema, namespace ``http://linux.duke.edu/metadata/common``).
Package names by branch come from :mod:`.tables` (``nvidia-fabric-manager`` for R470..R575,
``nvidia-fabricmanager`` from R580). The ``ver`` must equal the driver version field by field;
``rel`` (``1``, ``1.el9``) is kept as published. Pure: bytes in, values out.
"""

from __future__ import annotations

import io
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nvfabric.artifacts import modulemd
from nvfabric.artifacts.indexed import not_in_index, package_names, wanted_version
from nvfabric.artifacts.model import (
    Artifact,
    Request,
    bad_source,
    join_url,
    normal_sha256,
    not_available,
    safe_relative_path,
)
from nvfabric.artifacts.naming import arch_name
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding
from nvfabric.model.strict import BadValue, to_int
from nvfabric.model.versions import same

REPO_NS = "{http://linux.duke.edu/metadata/repo}"
COMMON_NS = "{http://linux.duke.edu/metadata/common}"


@dataclass(frozen=True)
class RpmPackage:
    """One ``<package>`` of primary metadata (strings as published; ``size`` in bytes)."""

    name: str
    arch: str
    epoch: str
    ver: str
    rel: str
    checksum_type: str
    checksum: str
    href: str
    size: int | None

    @property
    def evr(self) -> str:
        """``ver-rel``, with ``epoch:`` in front when the epoch is not 0."""
        head = f"{self.epoch}:" if self.epoch not in ("", "0") else ""
        return f"{head}{self.ver}-{self.rel}"


@dataclass(frozen=True)
class PrimaryRef:
    """Where ``repomd.xml`` says one metadata file is (the primary, the modules), and its
    checksum."""

    href: str
    checksum_type: str
    checksum: str


def parse_repomd(data: bytes, url: str) -> PrimaryRef:
    """The primary metadata reference of ``repomd.xml``. Raises ``input_unreadable`` when the
    document is not repomd or has no safe primary location."""
    ref = repomd_refs(data, url).get("primary")
    if ref is None:
        raise bad_source(url, "no primary metadata in repomd.xml")
    return ref


#: The ``<data>`` types of repomd.xml nvfabric reads.
REPOMD_TYPES = ("primary", "modules")


def repomd_refs(data: bytes, url: str) -> dict[str, PrimaryRef]:
    """The ``<data type="...">`` entries of ``repomd.xml`` of :data:`REPOMD_TYPES` by type
    (the first of each; the others are not looked at). Raises ``input_unreadable`` when the
    document is not XML or such a location is not a plain relative path."""
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, LookupError, ValueError, RecursionError) as err:
        raise bad_source(url, f"not XML ({err})") from None
    refs: dict[str, PrimaryRef] = {}
    for node in root.iter(f"{REPO_NS}data"):
        kind = node.get("type", "")
        if kind in refs or kind not in REPOMD_TYPES:
            continue
        loc = node.find(f"{REPO_NS}location")
        chk = node.find(f"{REPO_NS}checksum")
        href = loc.get("href", "") if loc is not None else ""
        if not safe_relative_path(href):
            raise bad_source(url, f"unsafe {kind} location {href!r}")
        refs[kind] = PrimaryRef(
            href=href,
            checksum_type=(chk.get("type", "") if chk is not None else ""),
            checksum=((chk.text or "").strip().lower() if chk is not None else ""),
        )
    return refs


def find_packages(primary: bytes, names: Iterable[str],
                  where: str = "primary metadata") -> list[RpmPackage]:
    """Every ``<package>`` of primary metadata whose name is one of ``names``, in order.
    Streams the document (iterparse) and drops each element once read. Raises
    ``input_unreadable`` naming ``where`` for what expat refuses (an empty document, an
    ``encoding=`` Python does not know, bad XML) and for a ``size`` that is not a plain
    number in a wanted package."""
    try:
        return _find_packages(primary, set(names), where)
    except (ET.ParseError, LookupError, ValueError, RecursionError) as err:
        if isinstance(err, BadValue):
            raise bad_source(where, str(err)) from None
        raise bad_source(where, f"not XML ({err})") from None


def _find_packages(primary: bytes, wanted: set[str], where: str) -> list[RpmPackage]:
    out: list[RpmPackage] = []
    for _event, elem in ET.iterparse(io.BytesIO(primary), events=("end",)):
        if elem.tag != f"{COMMON_NS}package":
            continue
        name = (elem.findtext(f"{COMMON_NS}name") or "").strip()
        if name in wanted:
            ver = elem.find(f"{COMMON_NS}version")
            chk = elem.find(f"{COMMON_NS}checksum")
            loc = elem.find(f"{COMMON_NS}location")
            size = elem.find(f"{COMMON_NS}size")
            size_text = size.get("package", "") if size is not None else ""
            out.append(
                RpmPackage(
                    name=name,
                    arch=(elem.findtext(f"{COMMON_NS}arch") or "").strip(),
                    epoch=ver.get("epoch", "0") if ver is not None else "0",
                    ver=ver.get("ver", "") if ver is not None else "",
                    rel=ver.get("rel", "") if ver is not None else "",
                    checksum_type=chk.get("type", "") if chk is not None else "",
                    checksum=(chk.text or "").strip() if chk is not None else "",
                    href=loc.get("href", "") if loc is not None else "",
                    size=to_int(size_text, what=f"{name} size") if size_text else None,
                )
            )
        elem.clear()
    return out


_DIGITS = frozenset("0123456789")


def rpmvercmp(a: str, b: str) -> int:
    """RPM's version segment comparison (rpmio/rpmvercmp.c semantics: alternating digit and
    letter runs, digits beat letters, numeric runs compared as integers, ``~`` sorts before
    anything). Returns -1, 0 or 1."""
    if a == b:
        return 0
    seg = re.compile(r"~|[0-9]+|[A-Za-z]+")
    sa, sb = seg.findall(a), seg.findall(b)
    for x, y in zip(sa, sb, strict=False):
        if x == y:
            continue
        if x == "~" or y == "~":
            return -1 if x == "~" else 1
        x_num, y_num = x[0] in _DIGITS, y[0] in _DIGITS
        if x_num != y_num:
            return 1 if x_num else -1
        if x_num:
            # as rpmvercmp.c: leading zeros dropped, the longer run is larger, else the
            # string order; no int() (a run may be thousands of digits long)
            xs, ys = x.lstrip("0"), y.lstrip("0")
            if (len(xs), xs) != (len(ys), ys):
                return 1 if (len(xs), xs) > (len(ys), ys) else -1
        elif x != y:
            return 1 if x > y else -1
    if len(sa) == len(sb):
        return 0
    longer, sign = (sa, 1) if len(sa) > len(sb) else (sb, -1)
    return -sign if longer[min(len(sa), len(sb))] == "~" else sign


def resolve(
    primary: bytes, searched: Sequence[str], base: str, request: Request,
    streams: Sequence[modulemd.ModuleStream] = (),
) -> list[Artifact]:
    """The ``.rpm`` of each requested component whose ``ver`` equals the driver version
    (nvlsm: ``request.nvlsm_version``), highest ``rel`` first, with the module stream that
    holds it (``module_stream``, :func:`.modulemd.stream_for` among ``streams``: the
    repository's dnf module metadata). Raises ``artifact_not_available`` naming package,
    versions present, platform and ``searched``."""
    rpm_arch = arch_name("rpm", request.arch)
    names = package_names("rpm", rpm_arch, request, searched)
    packages = find_packages(primary, names.values(),
                             searched[-1] if searched else "primary metadata")
    out: list[Artifact] = []
    for comp in request.components:
        name = names[comp]
        want = wanted_version(comp, request, rpm_arch, searched)
        hits = [
            p for p in packages
            if p.name == name and p.arch in (rpm_arch, "noarch") and same(p.ver, want)
        ]
        if not hits:
            have = (p.evr for p in packages if p.name == name)
            raise not_in_index(comp, name, want, rpm_arch, searched, have, "the repository")
        best = hits[0]
        for p in hits[1:]:
            if rpmvercmp(p.rel, best.rel) > 0:
                best = p
        sha = normal_sha256(best.checksum) if best.checksum_type == "sha256" else None
        if sha is None or not safe_relative_path(best.href):
            raise not_available(
                comp, want, rpm_arch, searched,
                f"{name} {best.evr} has no sha256 checksum or an unsafe location",
            )
        stream = modulemd.stream_for(streams, name, best.evr, best.arch,
                                     request.driver_version.split(".", 1)[0])
        out.append(
            Artifact(
                component=comp, version=best.evr, arch=rpm_arch, url=join_url(base, best.href),
                sha256=sha, size=best.size, source="rpm", package=name,
                module_stream=stream.spec if stream else None,
            )
        )
    return out


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_EVR_RE = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9._+~]*-[A-Za-z0-9._+~]+$")


#: CUDA repository distros whose package manager is yum, not dnf: RHEL/CentOS 7 (and older)
#: and Amazon Linux 2 (dnf replaced yum in RHEL 8 and Amazon Linux 2023; NVIDIA Driver
#: Installation Guide, RHEL 7 and Amazon Linux 2 sections use yum and yum-plugin-versionlock).
_YUM_DISTRO = re.compile(r"^(?:rhel[1-7]|amzn2)$")
#: The release tag of an EL package (``580.95.05-1.el7``), when the distro is not known.
_EL_RELEASE = re.compile(r"\.el([0-9]{1,4})(?:[._]|$)")


#: CUDA repository distros of the SUSE family, whose package manager is zypper
#: (NVIDIA/yum-packaging-fabric-manager README: "openSUSE15 or SLES15: zypper install
#: cuda-drivers-fabricmanager-XXX").
_ZYPPER_DISTRO = re.compile(r"^(?:sles|opensuse)[0-9]+$")


def package_manager(distro: str | None, artifacts: Iterable[Artifact] = ()) -> str:
    """``yum``, ``dnf`` or ``zypper`` for a CUDA repository distro (``rhel7`` -> yum,
    ``rhel8``, ``rhel9``, ``amzn2023`` -> dnf, ``sles15``, ``opensuse15`` -> zypper). Without
    a distro (a ``--mirror`` and no ``--distro``) the packages' EL release tag decides
    (``.el7`` -> yum); dnf when nothing tells."""
    if distro:
        if _ZYPPER_DISTRO.match(distro):
            return "zypper"
        return "yum" if _YUM_DISTRO.match(distro) else "dnf"
    for art in artifacts:
        found = _EL_RELEASE.search(art.version)
        if found:
            return "yum" if int(found.group(1)) <= 7 else "dnf"
    return "dnf"


#: The package that gives each package manager its ``versionlock`` command: dnf's plugin by
#: the capability NVIDIA's install scripts ask for (NVIDIA/gpu-driver-container rhel8/rhel9
#: install.sh: ``dnf install -y 'dnf-command(versionlock)'``), yum's by its package (NVIDIA
#: Driver Installation Guide, RHEL 7: yum-plugin-versionlock). zypper locks without a plugin.
VERSIONLOCK_PLUGIN = {"dnf": "dnf-command(versionlock)", "yum": "yum-plugin-versionlock"}


def commands(artifacts: Iterable[Artifact], distro: str | None = None) -> list[list[str]]:
    """In this order (NVIDIA's rhel8/rhel9 install.sh): ``dnf module enable -y STREAM`` for
    each module stream that holds a package (:func:`.modulemd.stream_for`: dnf's modular
    filtering hides it otherwise), the versionlock plugin (:data:`VERSIONLOCK_PLUGIN`), ``dnf
    install -y name-ver-rel …``, then ``dnf versionlock add name-ver-rel …`` (NVIDIA Driver
    Installation Guide, "Version locking"); ``yum`` in place of ``dnf`` on RHEL/CentOS 7 and
    Amazon Linux 2 (no modules there); on SLES/openSUSE ``zypper --non-interactive install
    name-ver-rel …`` then ``zypper addlock name …`` (:func:`package_manager`)."""
    arts = list(artifacts)
    specs = [_spec(a) for a in arts if a.package]
    if not specs:
        return []
    tool = package_manager(distro, arts)
    if tool == "zypper":
        # zypper locks by package name (`zypper addlock NAME`: the installed version stays).
        names = list(dict.fromkeys(a.package or "" for a in arts if a.package))
        return [["zypper", "--non-interactive", "install", *specs], ["zypper", "addlock", *names]]
    streams = list(dict.fromkeys(a.module_stream for a in arts if a.package and a.module_stream))
    enable = [[tool, "module", "enable", "-y", *streams]] if streams and tool == "dnf" else []
    return [*enable, [tool, "install", "-y", VERSIONLOCK_PLUGIN[tool]],
            [tool, "install", "-y", *specs], [tool, "versionlock", "add", *specs]]


def pin_lines(artifacts: Iterable[Artifact], distro: str | None = None) -> list[str]:
    """The shell lines of :func:`commands`, for an operator to read or paste (quoted where
    the shell needs it: ``'dnf-command(versionlock)'``)."""
    return [shlex.join(argv) for argv in commands(artifacts, distro)]


def _spec(art: Artifact) -> str:
    name = art.package or ""
    if not _NAME_RE.match(name) or not _EVR_RE.match(art.version):
        raise NvfabricError(
            Finding(
                "input_unreadable", "error",
                f"refusing package spec {name!r} {art.version!r}: not a plain name/version",
                "the repository metadata is damaged or not NVIDIA's: check --mirror and the "
                "repository, then run again",
            ),
            exit_code=2,
        )
    evr = art.version.split(":", 1)[-1]
    return f"{name}-{evr}"

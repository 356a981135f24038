"""Resolution and download, the imperative shell around the pure resolvers: read the manifest
or index through a :class:`~.transport.Transport`, resolve, download into a cache.

Where each source looks (``base`` is ``--mirror`` when given, else NVIDIA's default):

- redist: ``<base>/redistrib_<driver version>.json``; archives at ``<base>/<relative_path>``.
- apt: ``<base>/Packages.xz``, ``Packages.gz``, ``Packages`` (first found); debs at
  ``<base>/<Filename>``; default base ``…/cuda/repos/<distro>/<x86_64|sbsa>``.
- rpm: ``<base>/repodata/repomd.xml`` -> primary, and the dnf module metadata when repomd
  lists it (``modules``: which stream to enable, :mod:`.modulemd`); rpms at
  ``<base>/<location href>``.
- nvlsm for apt/rpm: its calendar version is read from the redist manifest of the same driver
  release (``<mirror or redist base>/redistrib_<driver>.json``) unless given.
"""

from __future__ import annotations

import bz2
import dataclasses
import hashlib
import lzma
import os
import zlib

from nvfabric.artifacts import apt, modulemd, redist, rpm
from nvfabric.artifacts.model import (
    Artifact,
    Request,
    Resolution,
    bad_source,
    checksum_mismatch,
    join_url,
    not_available,
)
from nvfabric.artifacts.naming import arch_name
from nvfabric.artifacts.tables import CUDA_REPO_BASE, OWN_VERSION, REDIST_BASE
from nvfabric.artifacts.transport import NotPublished, Transport

#: Largest decompressed index accepted (bytes): Debian's full main index is ~100 MB.
MAX_INDEX = 1 << 30


def repo_base(source: str, arch: str, mirror: str | None, distro: str | None) -> str:
    """The base URL of a source (see module doc). ValueError when an apt/rpm base needs a
    distro that is not known."""
    if mirror:
        return mirror.rstrip("/")
    if source == "redist":
        return REDIST_BASE.rstrip("/")
    if not distro:
        raise ValueError("the CUDA repository distro is unknown")
    return f"{CUDA_REPO_BASE}{distro}/{arch_name('cuda_repo', arch)}"


def resolve(
    request: Request, transport: Transport, mirror: str | None = None, distro: str | None = None
) -> Resolution:
    """Resolve ``request`` against its source. Raises ``artifact_not_available``,
    ``checksum_mismatch`` (RPM primary metadata), ``download_failed`` or ``input_unreadable``;
    ValueError when the distro is needed and unknown."""
    base = repo_base(request.source, request.arch, mirror, distro)
    searched: list[str] = []
    if request.source == "redist":
        url = join_url(base, redist.manifest_name(request.driver_version))
        searched.append(url)
        data = transport.get(url)
        if data is None:
            raise not_available(
                ",".join(request.components), request.driver_version,
                f"linux-{arch_name('redist', request.arch)}", searched,
                f"no manifest {redist.manifest_name(request.driver_version)}",
            )
        arts = redist.resolve(redist.parse_manifest(data, url), url, base, request)
        return Resolution(request, tuple(arts), tuple(searched))

    if any(c in OWN_VERSION for c in request.components) and request.nvlsm_version is None:
        request = dataclasses.replace(
            request, nvlsm_version=_nvlsm_version(request, transport, mirror, searched)
        )
    if request.source == "apt":
        index = _first_index(transport, base, searched, request)
        arts = apt.resolve(index, tuple(searched), base, request)
    else:
        primary, modules = _repodata(transport, base, searched, request)
        arts = rpm.resolve(primary, tuple(searched), base, request, modules)
    return Resolution(request, tuple(arts), tuple(searched))


def _nvlsm_version(
    request: Request, transport: Transport, mirror: str | None, searched: list[str]
) -> str:
    """nvlsm's calendar version from the redist manifest of the driver release."""
    base = mirror.rstrip("/") if mirror else REDIST_BASE.rstrip("/")
    url = join_url(base, redist.manifest_name(request.driver_version))
    searched.append(url)
    data = transport.get(url)
    platform = arch_name("deb" if request.source == "apt" else "rpm", request.arch)
    if data is None:
        raise not_available(
            "nvlsm", request.driver_version, platform, searched,
            "its calendar version comes from the driver's redist manifest, which is not there",
            "pass --nvlsm-version (as in the driver release's redistrib manifest) or put "
            "the manifest on the mirror",
        )
    manifest = redist.parse_manifest(data, url)
    entry = manifest.components.get("nvlsm")
    if entry is None or not redist.belongs_to(manifest, request.driver_version):
        raise not_available(
            "nvlsm", request.driver_version, platform, searched,
            "the driver's redist manifest names no nvlsm release",
        )
    return entry.version


def _first_index(
    transport: Transport, base: str, searched: list[str], request: Request
) -> bytes:
    for name in ("Packages.xz", "Packages.gz", "Packages"):
        url = join_url(base, name)
        searched.append(url)
        data = transport.get(url)
        if data is not None:
            return decompress(data, url)
    raise not_available(
        request.components[0], request.driver_version, arch_name("deb", request.arch),
        searched, "no Packages index",
    )


def _repodata(
    transport: Transport, base: str, searched: list[str], request: Request
) -> tuple[bytes, tuple[modulemd.ModuleStream, ...]]:
    """The primary metadata (decompressed) and the module streams (none when repomd.xml lists
    no ``modules``) of an RPM repository, each checked against the sha256 repomd.xml gives."""
    url = join_url(base, "repodata/repomd.xml")
    searched.append(url)
    data = transport.get(url)
    if data is None:
        raise not_available(
            request.components[0], request.driver_version, arch_name("rpm", request.arch),
            searched, "no repodata/repomd.xml",
        )
    refs = rpm.repomd_refs(data, url)
    if "primary" not in refs:
        raise bad_source(url, "no primary metadata in repomd.xml")
    primary = _metadata(transport, base, searched, request, refs["primary"], MAX_INDEX)
    streams: tuple[modulemd.ModuleStream, ...] = ()
    if "modules" in refs:
        where = join_url(base, refs["modules"].href)
        raw = _metadata(transport, base, searched, request, refs["modules"], modulemd.MAX_BYTES)
        streams = modulemd.parse(raw, where)
    return primary, streams


def _metadata(transport: Transport, base: str, searched: list[str], request: Request,
              ref: rpm.PrimaryRef, limit: int) -> bytes:
    """One metadata file repomd.xml names: fetched, its sha256 checked, decompressed (at most
    ``limit`` bytes)."""
    url = join_url(base, ref.href)
    searched.append(url)
    raw = transport.get(url)
    if raw is None:
        raise not_available(
            request.components[0], request.driver_version, arch_name("rpm", request.arch),
            searched, f"repomd.xml names {ref.href}, which is missing",
        )
    if ref.checksum_type == "sha256":
        actual = hashlib.sha256(raw).hexdigest()
        if actual != ref.checksum:
            raise checksum_mismatch(url, ref.checksum, actual)
    return decompress(raw, url, limit)


def decompress(data: bytes, url: str, limit: int = MAX_INDEX) -> bytes:
    """Undo the compression named by the URL's suffix (.gz, .xz, .bz2; anything else is
    returned as is), refusing output over ``limit`` bytes. Raises ``input_unreadable``."""
    try:
        if url.endswith(".gz"):
            dec: zlib._Decompress | lzma.LZMADecompressor | bz2.BZ2Decompressor = (
                zlib.decompressobj(16 + zlib.MAX_WBITS))
        elif url.endswith(".xz"):
            dec = lzma.LZMADecompressor()
        elif url.endswith(".bz2"):
            dec = bz2.BZ2Decompressor()
        elif url.endswith(".zst"):
            raise bad_source(url, "zstd-compressed metadata is not supported")
        else:
            return data
        out = dec.decompress(data, limit + 1)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as err:
        raise bad_source(url, f"cannot decompress ({err})") from None
    if len(out) > limit:
        raise bad_source(url, f"decompresses to more than {limit} bytes")
    return out


def cache_path(dest: str, artifact: Artifact) -> str:
    """Where an artifact lives in the download cache: ``<dest>/<file name from the URL>``."""
    return os.path.join(dest, artifact.filename)


def fetch(artifact: Artifact, transport: Transport, dest: str) -> tuple[str, bool]:
    """Download ``artifact`` into ``dest`` (verified; see :meth:`Transport.download`).
    Returns (path, downloaded). Raises ``artifact_not_available`` when the file the manifest
    or index names is not there."""
    path = cache_path(dest, artifact)
    try:
        downloaded = transport.download(artifact.url, path, artifact.sha256, artifact.size)
    except NotPublished:
        raise not_available(
            artifact.component, artifact.version, artifact.arch, [artifact.url],
            "the manifest/index names this file but the source answers 404",
        ) from None
    return path, downloaded

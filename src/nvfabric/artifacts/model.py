"""Values of artifact resolution: the request, a resolved artifact, and the errors every
source raises (``artifact_not_available``, ``checksum_mismatch``, ``download_failed``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding

SOURCES: tuple[str, ...] = ("redist", "apt", "rpm")

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9._+~@%=-]+(/[A-Za-z0-9._+~@%=-]+)*$")


@dataclass(frozen=True)
class Request:
    """What to resolve.

    ``driver_version`` as published (``570.158.01``); ``arch`` canonical (``x86_64`` |
    ``aarch64``); ``components`` redist keys in order; ``source`` one of :data:`SOURCES`;
    ``nvlsm_version`` the calendar version of nvlsm when already known (apt/rpm only).
    """

    driver_version: str
    arch: str
    components: tuple[str, ...]
    source: str = "redist"
    nvlsm_version: str | None = None


@dataclass(frozen=True)
class Artifact:
    """One resolved file.

    ``version`` as published by the source (``580.95.05`` in a manifest, ``580.126.09-1`` in a
    Debian index, ``580.95.05-1.el9`` in an RPM repository); ``arch`` the source's own name
    (``sbsa``, ``amd64``, ``aarch64``); ``url`` absolute (https, http for an explicit mirror,
    file for a mirror directory); ``sha256`` lower-case hex from the manifest or index;
    ``size`` in bytes when published; ``package`` the deb/rpm package name (None for redist);
    ``module_stream`` the dnf module stream that holds an rpm (``nvidia-driver:570-dkms``),
    None outside any module.
    """

    component: str
    version: str
    arch: str
    url: str
    sha256: str
    size: int | None
    source: str
    package: str | None = None
    module_stream: str | None = None

    @property
    def filename(self) -> str:
        """The last path segment of the URL: the name in the download cache."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    def to_json(self, path: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "component": self.component,
            "version": self.version,
            "arch": self.arch,
            "url": self.url,
            "sha256": self.sha256,
            "path": path,
            "size": self.size,
            "source": self.source,
        }
        if self.package:
            out["package"] = self.package
        if self.module_stream:
            out["module_stream"] = self.module_stream
        return out


@dataclass(frozen=True)
class Resolution:
    """The artifacts of a request, in request order, and the URLs read to find them."""

    request: Request
    artifacts: tuple[Artifact, ...]
    searched: tuple[str, ...] = field(default=())


def safe_relative_path(path: str) -> bool:
    """True for a plain relative path: no leading ``/``, no ``..`` or ``.`` segment, no
    scheme, no backslash, only ordinary file-name characters. Manifest ``relative_path``,
    Debian ``Filename`` (after a leading ``./``) and RPM ``location href`` must pass."""
    if not _SAFE_PATH_RE.match(path):
        return False
    return all(seg not in (".", "..") for seg in path.split("/"))


def normal_sha256(value: object) -> str | None:
    """A 64-hex-digit SHA-256 in lower case, or None when ``value`` is not one."""
    if not isinstance(value, str):
        return None
    low = value.strip().lower()
    return low if _SHA256_RE.match(low) else None


def join_url(base: str, relative: str) -> str:
    """``base`` + ``/`` + ``relative`` (one slash), for a relative path that passed
    :func:`safe_relative_path`."""
    return base.rstrip("/") + "/" + relative


def not_available(
    component: str,
    version: str,
    platform: str,
    searched: Sequence[str],
    detail: str,
    hint: str = "",
) -> NvfabricError:
    """``artifact_not_available`` (exit 1): names the component, the version, the platform
    and every source searched."""
    where = ", ".join(searched) if searched else "no source"
    return NvfabricError(
        Finding(
            "artifact_not_available",
            "error",
            f"{component} {version} for {platform} is not available: {detail} "
            f"(searched: {where})",
            hint
            or "use the exact driver version that is loaded; never fall back to another "
            "version or platform. For an air-gapped site, point --mirror at a copy that has it",
            {
                "component": component,
                "version": version,
                "platform": platform,
                "sources_searched": list(searched),
            },
        ),
        exit_code=1,
    )


def checksum_mismatch(url: str, expected: str, actual: str) -> NvfabricError:
    """``checksum_mismatch`` (exit 1): the bytes received are not the published ones."""
    return NvfabricError(
        Finding(
            "checksum_mismatch",
            "error",
            f"{url}: sha256 {actual} does not match the published {expected}; nothing was kept",
            "retry; if it persists, the mirror or a proxy serves a different file than the "
            "manifest/index describes: refresh the mirror",
            {"url": url, "expected_sha256": expected, "actual_sha256": actual},
        ),
        exit_code=1,
    )


def download_failed(url: str, reason: str, attempts: int) -> NvfabricError:
    """``download_failed`` (exit 1): the source did not deliver after every retry."""
    return NvfabricError(
        Finding(
            "download_failed",
            "error",
            f"{url}: {reason} (after {attempts} attempt{'' if attempts == 1 else 's'}); "
            "nothing was kept",
            "check the network path to the source or use --mirror; rerun to retry",
            {"url": url, "attempts": attempts},
        ),
        exit_code=1,
    )


def bad_source(url: str, reason: str) -> NvfabricError:
    """``input_unreadable`` (exit 2, as everywhere): a manifest or index that cannot be
    parsed."""
    return NvfabricError(
        Finding(
            "input_unreadable",
            "error",
            f"{url}: {reason}",
            "the manifest or index is damaged or not what it claims to be; refresh the mirror",
            {"url": url},
        ),
        exit_code=2,
    )


def not_for_fabric(refused: Sequence[str], fabric: str, kept: Sequence[str]) -> Finding:
    """``component_not_for_fabric``: components a node of ``fabric`` never gets (fabric manager,
    NVLSM and their libraries on ``mnnvl``); an error when nothing else is left, else a
    warning."""
    names = ", ".join(refused)
    return Finding(
        "component_not_for_fabric", "warning" if kept else "error",
        f"not fetched or installed: {names}: a {fabric} node (GB200/GB300 compute tray) never "
        "runs fabric manager or NVLSM; its NVLink switches are managed by the switch trays",
        "a compute tray needs IMEX only: --components imex (or omit --components)",
        {"components": list(refused), "fabric": fabric},
    )

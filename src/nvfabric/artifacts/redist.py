"""NVIDIA driver redist manifests (``redistrib_<driver version>.json``): model and resolution.

Schema (the real manifests in tests/data/corpus/redist): a header (``release_date``,
``release_label``, ``release_product``) and one object per component key
(``fabricmanager``, ``libnvidia_nscq``, ``libnvsdm``, ``nvlsm``, ``imex``, ...) with ``name``,
``license``, ``version`` and one object per platform (``linux-x86_64``, ``linux-sbsa``) holding
``relative_path``, ``sha256``, ``md5`` and ``size`` (a decimal string). File names are taken
from ``relative_path`` as published, never built: the IMEX archive was
``nvidia-imex-linux-<arch>-…`` up to R580 and ``imex-linux-<arch>-…`` from R590 (13.1.1).
Pure: bytes in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
from nvfabric.artifacts.tables import OWN_VERSION, X86_ONLY
from nvfabric.model.strict import BadValue, int_or_none, parse_json
from nvfabric.model.versions import same

#: Manifest keys that carry the driver's own version: evidence that a manifest belongs to a
#: driver release (REDIST: every one equals the release's driver version).
DRIVER_VERSIONED = ("fabricmanager", "libnvidia_nscq", "imex", "nvidia_driver", "libnvsdm")


@dataclass(frozen=True)
class RedistFile:
    """One platform's archive: ``relative_path`` to the manifest base, ``sha256`` (hex),
    ``size`` in bytes (None when absent or not a number)."""

    relative_path: str
    sha256: str
    size: int | None
    md5: str | None = None


@dataclass(frozen=True)
class RedistComponent:
    """One manifest entry: ``key`` (``fabricmanager``), display ``name``, ``version`` as
    published, and its archives by platform key (``linux-sbsa``)."""

    key: str
    name: str
    version: str
    platforms: Mapping[str, RedistFile]


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest. ``components`` by key; ``problems`` lists entries that were skipped
    as malformed (unsafe path, bad checksum), one line each."""

    release_label: str
    release_date: str
    components: Mapping[str, RedistComponent]
    problems: tuple[str, ...] = ()


def manifest_name(driver_version: str) -> str:
    """``redistrib_<driver version>.json``, the version as published."""
    return f"redistrib_{driver_version}.json"


def parse_manifest(data: bytes, url: str) -> Manifest:
    """Parse manifest bytes. Raises NvfabricError ``input_unreadable`` when the bytes are not a
    JSON object. Platform entries with an unsafe ``relative_path`` or a missing/invalid
    ``sha256`` are dropped and reported in ``problems`` (they can then not be resolved)."""
    try:
        doc = parse_json(data)
    except BadValue as err:
        raise bad_source(url, f"not a JSON manifest ({err})") from None
    if not isinstance(doc, dict):
        raise bad_source(url, "not a JSON object")
    components: dict[str, RedistComponent] = {}
    problems: list[str] = []
    for key, entry in doc.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
            continue
        platforms: dict[str, RedistFile] = {}
        for pkey, pval in entry.items():
            if not pkey.startswith("linux-") or not isinstance(pval, dict):
                continue
            parsed = _file(pval)
            if isinstance(parsed, str):
                problems.append(f"{key} {pkey}: {parsed}")
            else:
                platforms[pkey] = parsed
        components[key] = RedistComponent(
            key=key, name=str(entry.get("name", key)), version=entry["version"],
            platforms=platforms,
        )
    return Manifest(
        release_label=str(doc.get("release_label", "")),
        release_date=str(doc.get("release_date", "")),
        components=components,
        problems=tuple(problems),
    )


def _file(entry: Mapping[str, Any]) -> RedistFile | str:
    path = entry.get("relative_path")
    if not isinstance(path, str) or not safe_relative_path(path):
        return f"unsafe or missing relative_path {path!r}"
    sha = normal_sha256(entry.get("sha256"))
    if sha is None:
        return "missing or invalid sha256"
    size_text = entry.get("size")
    size = int_or_none(size_text) if isinstance(size_text, str) else None
    if isinstance(size_text, int) and not isinstance(size_text, bool) and size_text >= 0:
        size = size_text
    md5 = entry.get("md5")
    return RedistFile(path, sha, size, md5 if isinstance(md5, str) else None)


def resolve(manifest: Manifest, manifest_url: str, base: str, request: Request) -> list[Artifact]:
    """The archives of ``request.components`` for ``request.arch`` from ``manifest``.

    Every component except nvlsm must carry exactly the driver version (numeric per field);
    nvlsm keeps its calendar version but only from a manifest whose driver-versioned entries
    match the driver. Raises ``artifact_not_available`` naming component, version, platform and
    ``manifest_url`` for a missing component, version or platform: never another version or
    platform instead.
    """
    searched = [manifest_url]
    redist_arch = arch_name("redist", request.arch)
    platform = f"linux-{redist_arch}"
    driver = request.driver_version
    out: list[Artifact] = []
    for key in request.components:
        entry = manifest.components.get(key)
        if entry is None:
            raise not_available(key, driver, platform, searched, "the manifest has no entry")
        if key in OWN_VERSION:
            if not belongs_to(manifest, driver):
                raise not_available(
                    key, driver, platform, searched,
                    f"the manifest is not the one of driver {driver}, so its {key} "
                    f"{entry.version} is not the one released with it",
                )
        elif not same(entry.version, driver):
            raise not_available(
                key, driver, platform, searched,
                f"the manifest carries {key} {entry.version}, not {driver}",
            )
        archive = entry.platforms.get(platform)
        if archive is None:
            published = ", ".join(sorted(entry.platforms)) or "none"
            why = f"{key} is not published for {platform} (platforms: {published})"
            if key in X86_ONLY:
                why += f"; {key} exists for x86_64 only"
            bad = [p for p in manifest.problems if p.startswith(f"{key} {platform}:")]
            if bad:
                why = f"the {platform} entry is malformed: {bad[0]}"
            raise not_available(key, entry.version, platform, searched, why)
        out.append(
            Artifact(
                component=key,
                version=entry.version,
                arch=redist_arch,
                url=join_url(base, archive.relative_path),
                sha256=archive.sha256,
                size=archive.size,
                source="redist",
            )
        )
    return out


def belongs_to(manifest: Manifest, driver: str) -> bool:
    """True when some driver-versioned entry of the manifest equals ``driver``."""
    return any(
        key in manifest.components and same(manifest.components[key].version, driver)
        for key in DRIVER_VERSIONED
    )

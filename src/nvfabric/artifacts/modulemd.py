"""dnf module metadata: which module stream of an RPM repository holds a package.

NVIDIA's RHEL 8/9 (and Amazon Linux 2023, Fedora) repositories publish the driver as the dnf
module ``nvidia-driver``: ``repodata/repomd.xml`` lists ``<data type="modules">``, a
``modules.yaml.gz`` of YAML documents. Each ``document: modulemd`` (``version: 2``, the
libmodulemd spec.v2.yaml) has ``data.name``, ``data.stream`` and ``data.artifacts.rpms``, the
NEVRAs (``name-epoch:version-release.arch``) of the stream's packages; ``modulemd-defaults`` and
other documents carry no packages and are skipped. dnf's modular filtering hides a package of a
module whose stream is not enabled, so the install of a packaged fabric component is preceded
by ``dnf module enable -y nvidia-driver:<stream>`` (NVIDIA/gpu-driver-container rhel8 and rhel9
install.sh: ``nvidia-driver:${DRIVER_BRANCH}-dkms``).

NVIDIA's stream names (NVIDIA/yum-packaging-nvidia-driver and -dkms-nvidia READMEs, genmodules.py
of NVIDIA/yum-packaging-precompiled-kmod): ``<branch>`` and ``<branch>-dkms`` hold one driver
branch (``570``, ``570-dkms``; ``<branch>-open`` for the open kernel modules), ``latest``,
``latest-dkms`` and ``open-dkms`` follow the newest branch. The stream chosen for a package is
the one of its branch that NVIDIA's install scripts enable (``<branch>-dkms``), else another of
its branch, else one that follows the newest: a branch stream pins the driver, a ``latest`` one
would move it at the next update. Pure: bytes in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nvfabric.artifacts.model import bad_source
from nvfabric.model.strict import load_yaml_all

#: Nodes a modules.yaml may have (all documents, aliases expanded): NVIDIA's repositories keep
#: one document per stream and driver release (~60 nodes each, a few thousand documents).
MAX_NODES = 2_000_000
#: Largest decompressed modules.yaml read (bytes).
MAX_BYTES = 64 << 20

_NEVRA = re.compile(r"^(?P<name>.+)-(?:(?P<epoch>[0-9]+):)?(?P<ver>[^-:]+)-(?P<rel>[^-:]+)"
                    r"\.(?P<arch>[^.]+)$")
_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class ModuleStream:
    """One module stream: ``name`` (``nvidia-driver``), ``stream`` (``570-dkms``) and the
    NEVRAs of its packages, normalised (``nvidia-imex-570-0:570.124.06-1.el8.aarch64``)."""

    name: str
    stream: str
    rpms: frozenset[str]

    @property
    def spec(self) -> str:
        """``name:stream``, as ``dnf module enable`` takes it."""
        return f"{self.name}:{self.stream}"


def nevra(name: str, evr: str, arch: str) -> str:
    """The normalised NEVRA of a package: ``evr`` as published (``570.124.06-1.el8``, or with
    ``epoch:`` in front), the epoch 0 written out."""
    return f"{name}-{evr if ':' in evr else '0:' + evr}.{arch}"


def _normal(text: str) -> str | None:
    """A modulemd artifact NEVRA with the epoch written out, or None when it is not one (or
    longer than any package name: the pattern is then not tried)."""
    found = _NEVRA.match(text) if len(text) <= 512 else None
    if found is None:
        return None
    epoch = found.group("epoch") or "0"
    return (f"{found.group('name')}-{epoch}:{found.group('ver')}-{found.group('rel')}"
            f".{found.group('arch')}")


def parse(data: bytes, where: str) -> tuple[ModuleStream, ...]:
    """The module streams of a ``modules.yaml`` (every ``document: modulemd`` of version 2 or
    later with a name, a stream and its artifacts' rpms). Raises ``input_unreadable`` (exit
    2) naming ``where`` for a document that is not UTF-8 YAML, larger than :data:`MAX_BYTES`
    or :data:`MAX_NODES`, or whose name, stream or rpms are not what modulemd allows."""
    if len(data) > MAX_BYTES:
        raise bad_source(where, f"larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise bad_source(where, f"not UTF-8 (byte {err.start})") from None
    docs = load_yaml_all(text, where, "the module metadata is damaged or not dnf's: refresh "
                         "the mirror", MAX_NODES)
    out: list[ModuleStream] = []
    for number, doc in enumerate(docs, 1):
        stream = _stream(doc, f"{where} document {number}")
        if stream is not None:
            out.append(stream)
    return tuple(out)


def _stream(doc: Any, where: str) -> ModuleStream | None:
    """The stream of one document, None for a document of another kind (defaults,
    translations, obsoletes)."""
    if not isinstance(doc, dict) or doc.get("document") != "modulemd":
        return None
    data = doc.get("data")
    if not isinstance(data, dict):
        raise bad_source(where, "a modulemd document without a data mapping")
    name, stream = data.get("name"), data.get("stream")
    if not isinstance(stream, (str, int)) or isinstance(stream, bool):
        raise bad_source(where, "a modulemd document without a stream")
    stream = str(stream)  # an unquoted `stream: 570` is an integer in YAML
    if not isinstance(name, str) or not _WORD.match(name) or not _WORD.match(stream):
        raise bad_source(where, f"module name {name!r} or stream {stream!r} is not a plain word")
    artifacts = data.get("artifacts") or {}
    rpms = artifacts.get("rpms") if isinstance(artifacts, dict) else None
    if rpms is None:
        rpms = []
    if not isinstance(rpms, list) or not all(isinstance(r, str) for r in rpms):
        raise bad_source(where, f"{name}:{stream}: artifacts.rpms is not a list of NEVRAs")
    normal = {n for r in rpms if (n := _normal(r.strip())) is not None}
    return ModuleStream(name, stream, frozenset(normal))


def stream_for(streams: Iterable[ModuleStream], name: str, evr: str, arch: str,
               branch: str) -> ModuleStream | None:
    """The stream to enable for the package ``name`` ``evr`` ``arch`` of driver ``branch``
    (``570``), None when no stream holds it (a package outside every module needs none).
    Preference (module docstring): ``<branch>-dkms``, another stream of the branch
    (``<branch>``, ``<branch>-open``, in name order), then any other (``latest-dkms``, ...)."""
    want = nevra(name, evr, arch)
    holding = [s for s in streams if want in s.rpms]

    def rank(s: ModuleStream) -> tuple[int, str, str]:
        if s.stream == f"{branch}-dkms":
            return (0, s.name, s.stream)
        if s.stream == branch or s.stream.startswith(f"{branch}-"):
            return (1, s.name, s.stream)
        return (2, s.name, s.stream)

    return min(holding, key=rank) if holding else None

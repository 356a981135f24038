"""Values of GPU fabric health: one :class:`GpuFabric` per GPU, one :class:`FabricHealth` per
reading (NVML or an nvidia-smi capture).

Vocabulary: fabric ``state`` is ``not_supported``, ``not_started``,
``in_progress`` or ``completed`` (nvml.h ``NVML_GPU_FABRIC_STATE_*``); ``status`` is
``"success"`` or the NVML error name (``NVML_ERROR_INSUFFICIENT_RESOURCES``), None when the
source printed N/A; ``health_summary`` is ``healthy``, ``unhealthy``, ``limited_capacity``,
``not_supported`` or None (N/A, or a driver without the v3 struct).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.mask import HealthField
from nvfabric.model.vocab import FabricState
from nvfabric.model.words import plural

#: Per-GPU fabric state (the vocabulary's :data:`~nvfabric.model.vocab.FabricState`).
State = FabricState

#: nvml.h NVML_GPU_FABRIC_STATE_* values.
STATES: dict[int, State] = {
    0: "not_supported",
    1: "not_started",
    2: "in_progress",
    3: "completed",
}

#: nvml.h ``nvmlReturn_t`` (NVML_SUCCESS and NVML_ERROR_*), value -> name.
NVML_RETURN: dict[int, str] = {
    0: "NVML_SUCCESS",
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION",
    5: "NVML_ERROR_ALREADY_INITIALIZED",
    6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE",
    20: "NVML_ERROR_MEMORY",
    21: "NVML_ERROR_NO_DATA",
    22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
    23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
    24: "NVML_ERROR_FREQ_NOT_SUPPORTED",
    25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    26: "NVML_ERROR_DEPRECATED",
    27: "NVML_ERROR_NOT_READY",
    28: "NVML_ERROR_GPU_NOT_FOUND",
    29: "NVML_ERROR_INVALID_STATE",
    999: "NVML_ERROR_UNKNOWN",
}

#: nvmlErrorString() words that do not spell their NVML name (nvidia-smi prints these).
_ERROR_WORDS: dict[str, str] = {
    "insufficient permissions": "NVML_ERROR_NO_PERMISSION",
    "insufficient external power": "NVML_ERROR_INSUFFICIENT_POWER",
    "interrupt request issue": "NVML_ERROR_IRQ_ISSUE",
    "nvml shared library not found": "NVML_ERROR_LIBRARY_NOT_FOUND",
    "gpu requires restart": "NVML_ERROR_RESET_REQUIRED",
    "gpu requires reset": "NVML_ERROR_RESET_REQUIRED",  # nvidia-smi's own wording
    "unknown error": "NVML_ERROR_UNKNOWN",
    "insufficient memory": "NVML_ERROR_MEMORY",
}

_KNOWN_NAMES = frozenset(NVML_RETURN.values())

_SMI_STATES: dict[str, State] = {
    "completed": "completed",
    "in progress": "in_progress",
    "not started": "not_started",
    "not supported": "not_supported",
}


def status_name(code: int) -> str:
    """An NVML return code as nvfabric's status: ``"success"`` or the NVML error name."""
    if code == 0:
        return "success"
    return NVML_RETURN.get(code, f"NVML_ERROR_{code}")


def status_from_smi(printed: str) -> str | None:
    """nvidia-smi's fabric Status word -> ``"success"``, an NVML error name, or None for N/A.

    nvidia-smi prints ``nvmlErrorString(status)`` (``Success``, ``Insufficient Resources``:
    tests/data/corpus/nvidia-smi/fabric-insufficient-resources-azhpc506.txt); the name is the
    words in upper snake case unless listed in ``_ERROR_WORDS``. Raises ValueError for a word
    that names no NVML return code of nvml.h (:data:`NVML_RETURN`): a capture with such a
    status is not judged as if it were an error the driver could report.
    """
    word = printed.strip().strip("[]").strip()
    low = word.lower()
    if low in ("n/a", "", "not supported", "unknown"):
        return None
    if low == "success":
        return "success"
    if low in _ERROR_WORDS:
        return _ERROR_WORDS[low]
    name = word if word.startswith("NVML_") else (
        "NVML_ERROR_" + re.sub(r"[^A-Za-z0-9]+", "_", word).strip("_").upper())
    if name == "NVML_SUCCESS":
        return "success"
    if name not in _KNOWN_NAMES:
        raise ValueError(f"unrecognised fabric status {printed.strip()!r}")
    return name


def state_from_smi(printed: str) -> State:
    """nvidia-smi's fabric State (``Completed``, ``In Progress``, ``Not Started``, ``Not
    Supported``, ``N/A``). N/A is ``not_supported``: the GPU reports no fabric. Raises
    ValueError for any other word (a damaged or hand-edited capture)."""
    word = printed.strip().strip("[]").strip().lower()
    if word in ("n/a", ""):
        return "not_supported"
    if word not in _SMI_STATES:
        raise ValueError(f"unrecognised fabric state {printed.strip()!r}")
    return _SMI_STATES[word]


ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def uuid_from_bytes(raw: bytes) -> str:
    """16 raw bytes (``nvmlGpuFabricInfo*.clusterUuid``) -> canonical 8-4-4-4-12 lower-case
    hex, the way nvidia-smi prints ClusterUUID. ValueError unless exactly 16 bytes."""
    if len(raw) != 16:
        raise ValueError(f"a cluster UUID is 16 bytes, got {len(raw)}")
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(frozen=True)
class GpuFabric:
    """One GPU's fabric registration.

    ``index``: NVML/nvidia-smi enumeration index; ``uuid``: ``GPU-...``; ``pci``: bus id as
    NVML prints it (``00000000:18:00.0``); ``clique_id`` None when N/A; ``cluster_uuid``
    canonical lower-case (all-zero means "not in a multi-node NVLink domain") or None when N/A;
    ``health``: decoded mask fields; ``health_mask`` the raw word when read from NVML v2+.
    """

    index: int
    uuid: str | None
    pci: str | None
    state: State
    status: str | None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_summary: str | None = None
    health: tuple[HealthField, ...] = ()
    health_mask: int | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        """How findings name this GPU: ``GPU 1 (00000018:01:00.0, GPU-...)``."""
        extra = ", ".join(x for x in (self.pci, self.uuid) if x)
        return f"GPU {self.index}" + (f" ({extra})" if extra else "")

    def field(self, name: str) -> HealthField | None:
        for f in self.health:
            if f.name == name:
                return f
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "pci": self.pci,
            "name": self.name,
            "state": self.state,
            "status": self.status,
            "clique_id": self.clique_id,
            "cluster_uuid": self.cluster_uuid,
            "health_summary": self.health_summary,
            "health_mask": None if self.health_mask is None else f"0x{self.health_mask:08x}",
            "health": {f.name: f.value for f in self.health},
        }


Source = Literal["nvml", "nvidia-smi-text", "nvidia-smi-xml", "nvidia-smi-csv"]


@dataclass(frozen=True)
class FabricHealth:
    """One reading of every GPU's fabric state.

    ``findings`` are the reader's own (NVML missing, driver not loaded, function not found,
    not supported); an empty ``gpus`` with such a finding means "could not read", not
    "no GPU". ``unread``: the capture columns it does not have (a CSV query that did not ask
    for ``fabric.status``, ``fabric.cliqueId`` or ``fabric.clusterUuid``), whose values are
    None on every GPU because they were not read, not because nvidia-smi printed N/A.
    """

    source: Source
    gpus: tuple[GpuFabric, ...]
    driver_version: str | None = None
    findings: tuple[Finding, ...] = field(default=())
    unread: tuple[str, ...] = ()


def summarise_gpus(gpus: Sequence[GpuFabric]) -> GpuCheck:
    """The readiness of ``gpus`` (one reading, :func:`nvfabric.facts.gpu.read`) as one
    :class:`GpuCheck` with the summary ``8 GPUs: completed x8``: ready when every GPU with a
    fabric state is completed, registered when one is; a GPU completed with an error status
    is ``registration_error``. The rule of ``nvfabric run``'s preflight and of the
    supervisor's readiness probe (:mod:`nvfabric.supervisor.gpuprobe`) alike."""
    if not gpus:
        return GpuCheck(False, False, "no GPU fabric state", "no GPU fabric state could be read")
    counts = Counter(str(g.state) for g in gpus)
    summary = f"{plural(len(gpus), 'GPU')}: " + ", ".join(
        f"{k} x{v}" for k, v in sorted(counts.items()))
    supported = [g for g in gpus if g.state != "not_supported"]
    if not supported:
        return GpuCheck(False, False, summary, supported=False)
    done = [g for g in supported if g.state == "completed"]
    bad = [g for g in done if (g.status or "").lower() not in ("success", "")]
    findings: tuple[Finding, ...] = ()
    if bad:
        findings = (Finding(
            "registration_error", "warning",
            f"{plural(len(bad), 'GPU')} completed fabric registration with an error status: "
            + "; ".join(f"{g.label}: {g.status}" for g in bad),
            "run `nvfabric status` for the per-GPU verdict", {"count": len(bad)}),)
    return GpuCheck(len(done) == len(supported), bool(done), summary, findings=findings,
                    progress=(len(done), len(supported)),
                    registered_gpus=tuple(g.label for g in done))

"""The GPU fabric health mask, decoded field by field.

Source of every row: nvml.h, ``NVML_GPU_FABRIC_HEALTH_MASK_*`` (``_SHIFT_``, ``_WIDTH_`` and value
definitions, driver 570+; the v3 ``nvmlGpuFabricInfo_v3_t.healthMask`` word) and
``NVML_GPU_FABRIC_HEALTH_SUMMARY_*``. ``nvidia-smi -q`` prints the same fields under
``Fabric / Health`` (``Bandwidth``, ``Route Recovery in progress``, ``Route Unhealthy``,
``Access Timeout Recovery``, ``Incorrect Configuration``, ``Partition Assigned``), XML under
``<fabric><health>`` (tests/data/corpus/nvidia-smi/k8s-test-infra-hw-qx-gb200.xml,
fabric-in-progress-580-wide-columns-gpuop2511.txt). Older drivers print fewer rows.

Pure: integers and strings in, :class:`HealthField` values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nvfabric.model.vocab import HealthSummary

Impact = Literal["unhealthy", "degraded"]


@dataclass(frozen=True)
class MaskField:
    """One field of the health mask.

    ``name``: nvfabric's name; ``smi_key``: the nvidia-smi text key / XML tag, normalised
    (lower case, spaces to ``_``); ``shift``/``width``: bit position and mask in the word;
    ``values``: raw value -> decoded word; ``bad``: decoded words that are a problem, with the
    verdict impact; ``smi_values``: nvidia-smi's printed word (lower case) -> decoded word.
    """

    name: str
    smi_key: str
    shift: int
    width: int
    values: dict[int, str]
    bad: dict[str, Impact]
    smi_values: dict[str, str]


_TRUE_FALSE = {0: "not_supported", 1: "true", 2: "false"}
_SMI_BOOL = {"true": "true", "false": "false", "yes": "true", "no": "false"}

#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_* (one row per field, in bit order).
FIELDS: tuple[MaskField, ...] = (
    # _DEGRADED_BW_{NOT_SUPPORTED=0,TRUE=1,FALSE=2}, _SHIFT_DEGRADED_BW 0, _WIDTH_ 0x3;
    # nvidia-smi "Bandwidth : Full | Degraded".
    MaskField("degraded_bandwidth", "bandwidth", 0, 0x3, _TRUE_FALSE,
              {"true": "degraded"}, {"full": "false", "degraded": "true"}),
    # _ROUTE_RECOVERY_*, shift 2: a route is being recovered (transient).
    MaskField("route_recovery", "route_recovery_in_progress", 2, 0x3, _TRUE_FALSE,
              {"true": "degraded"}, _SMI_BOOL),
    # _ROUTE_UNHEALTHY_*, shift 4: a route is unhealthy.
    MaskField("route_unhealthy", "route_unhealthy", 4, 0x3, _TRUE_FALSE,
              {"true": "unhealthy"}, _SMI_BOOL),
    # _ACCESS_TIMEOUT_RECOVERY_*, shift 6: recovering from an access timeout (transient).
    MaskField("access_timeout_recovery", "access_timeout_recovery", 6, 0x3, _TRUE_FALSE,
              {"true": "degraded"}, _SMI_BOOL),
    # _INCORRECT_CONFIGURATION_*, shift 8, width 0xf.
    MaskField(
        "incorrect_configuration", "incorrect_configuration", 8, 0xF,
        {
            0: "not_supported",
            1: "none",
            2: "incorrect_sysguid",
            3: "incorrect_chassis_sn",
            4: "no_partition",
            5: "insufficient_nvlinks",
            6: "incompatible_gpu_fw",
            7: "invalid_location",
            8: "gpu_state_invalid",
        },
        {
            v: "unhealthy"
            for v in (
                "incorrect_sysguid", "incorrect_chassis_sn", "no_partition",
                "insufficient_nvlinks", "incompatible_gpu_fw", "invalid_location",
                "gpu_state_invalid", "other",
            )
        },
        {"none": "none", "false": "none"},
    ),
    # _PARTITION_ASSIGNED_*, shift 12: FABRIC_MODE=1 partitions (information only).
    MaskField("partition_assigned", "partition_assigned", 12, 0x3, _TRUE_FALSE, {}, _SMI_BOOL),
    # _GFM_STATE_{NOT_SUPPORTED=0,CONNECTED=1,DISCONNECTED=2}, shift 14 (information only).
    MaskField("gfm_state", "gfm_state", 14, 0x3,
              {0: "not_supported", 1: "connected", 2: "disconnected"}, {},
              {"connected": "connected", "disconnected": "disconnected"}),
)

#: nvml.h NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3 struct ``healthSummary``).
SUMMARY: dict[int, HealthSummary] = {
    0: "not_supported",
    1: "healthy",
    2: "unhealthy",
    3: "limited_capacity",
}

#: Words meaning "no value" in nvidia-smi output: N/A is a value, not an error.
NA_WORDS = frozenset({"n/a", "[n/a]", "not supported", "[not supported]", "unknown", ""})


@dataclass(frozen=True)
class HealthField:
    """A decoded health field: ``value`` is a word of :data:`FIELDS` (None when N/A);
    ``impact`` is ``unhealthy``/``degraded`` when the value is a problem, else None."""

    name: str
    value: str | None
    impact: Impact | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "value": self.value, "impact": self.impact}


def decode_mask(mask: int) -> tuple[HealthField, ...]:
    """Every field of a raw health mask (nvml.h layout). Unknown raw values decode to
    ``"other"`` (a newer driver's value), which counts as bad where the field has bad values."""
    out = []
    for f in FIELDS:
        raw = (mask >> f.shift) & f.width
        value = f.values.get(raw, "other")
        out.append(HealthField(f.name, value, f.bad.get(value)))
    return tuple(out)


def decode_smi(key: str, printed: str) -> HealthField | None:
    """One ``Fabric / Health`` row of nvidia-smi (text key or XML tag) -> HealthField.

    Returns None for keys that are not mask fields (``Summary`` is handled by
    :func:`summary_from_smi`). N/A gives value None. An unexpected word for
    ``Incorrect Configuration`` (anything but None) is kept, lower-cased, and counts as bad.
    """
    norm = key.strip().lower().replace(" ", "_")
    for f in FIELDS:
        if f.smi_key == norm:
            word = printed.strip().lower()
            if word in NA_WORDS:
                return HealthField(f.name, None)
            value = f.smi_values.get(word)
            if value is None:
                value = word.replace(" ", "_")
                impact = f.bad.get(value) or f.bad.get("other")
            else:
                impact = f.bad.get(value)
            return HealthField(f.name, value, impact)
    return None


def summary_from_smi(printed: str) -> str | None:
    """nvidia-smi ``Summary : Healthy | Unhealthy | Limited Capacity | N/A`` -> summary word."""
    word = printed.strip().lower()
    if word in NA_WORDS:
        return None
    return word.replace(" ", "_")

"""Live GPU fabric state through NVML, every version the driver offers, newest first:
``nvmlDeviceGetGpuFabricInfo_v4`` (NVML 615: up to 64 cliques per GPU, each with its type),
then ``nvmlDeviceGetGpuFabricInfoV`` with v3 (580: the health summary) and v2, then the v1
``nvmlDeviceGetGpuFabricInfo``; and the GPU's recovery action (field
``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, 570+; RECOVER_IMEX_DOMAIN 595, BUS_RESET and
SYSTEM_REBOOT 615). Sources: nvml.h of nvidia-ml-py 13.615; NVIDIA's NVML API reference and
its change log (docs.nvidia.com/deploy/nvml-api/change-log.html).

The structs are defined here, not taken from the ``nvidia-ml-py`` binding, whose own layouts
were wrong across releases (UUID field size, ``state`` declared as a 4-byte int where nvml.h has
``typedef unsigned char nvmlGpuFabricState_t``, field names, byte decoding of the UUID). Layouts
follow nvml.h (``nvmlGpuFabricInfo_t``, ``nvmlGpuFabricInfo_v2_t``, ``nvmlGpuFabricInfo_v3_t``,
``nvmlGpuFabricInfo_v4_t``); their sizes are checked at import against the header's version
words (``NVML_STRUCT_VERSION(GpuFabricInfo, 2) == 0x02000024``, ``v3 == 0x03000028``: size in
the low 24 bits; v4 has no version word: 548 bytes, its own function), and the cluster UUID is
read as 16 raw bytes. v4 replaces ``cliqueId`` with ``cliques[64]`` (type, id) and
``numCliques``; the legacy clique id is the first unicast pointer clique's (the NVML reference,
``nvmlGpuFabricInfo_v4_t``).

:func:`query` and :func:`decode` are pure over a device handle and callables, so they are tested
with structs built in memory; :func:`read` is the host shell (imports pynvml lazily).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from nvfabric.model.findings import Finding
from nvfabric.model.health import (
    STATES,
    Clique,
    FabricHealth,
    GpuFabric,
    status_name,
    uuid_from_bytes,
)
from nvfabric.model.mask import SUMMARY, decode_mask
from nvfabric.model.vocab import CliqueType, RecoveryAction

UUID_LEN = 16  # nvml.h NVML_GPU_FABRIC_UUID_LEN
CLIQUE_MAX = 64  # nvml.h NVML_GPU_FABRIC_CLIQUE_MAX

#: nvml.h NVML_GPU_FABRIC_CLIQUE_TYPE_*.
CLIQUE_TYPES: dict[int, CliqueType] = {
    0: "unicast_pointer",
    1: "multicast_pointer",
    2: "unicast_logical_endpoint",
    3: "multicast_logical_endpoint",
}
#: nvml.h nvmlDeviceGpuRecoveryAction_t (NVML_GPU_RECOVERY_ACTION_*).
RECOVERY_ACTIONS: dict[int, RecoveryAction] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
#: nvml.h NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, read with nvmlDeviceGetFieldValues.
FI_DEV_GET_GPU_RECOVERY_ACTION = 230

# nvml.h nvmlReturn_t values this module branches on.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


#: The fields every layout shares, in nvml.h order (v1 has no version word in front).
_COMMON: list[tuple[str, Any]] = [
    ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
    ("status", ctypes.c_uint),
    ("cliqueId", ctypes.c_uint),
    ("state", ctypes.c_ubyte),
]
#: v2 adds the version word in front and the health mask behind; v3 then the health summary.
_V2: list[tuple[str, Any]] = [("version", ctypes.c_uint), *_COMMON, ("healthMask", ctypes.c_uint)]


class FabricInfoV1(ctypes.Structure):
    """nvml.h ``nvmlGpuFabricInfo_t`` (no version word): 28 bytes."""

    _fields_ = _COMMON


class FabricInfoV2(ctypes.Structure):
    """nvml.h ``nvmlGpuFabricInfo_v2_t``: 36 bytes (``nvmlGpuFabricInfo_v2 = 0x02000024``)."""

    _fields_ = _V2


class FabricInfoV3(ctypes.Structure):
    """nvml.h ``nvmlGpuFabricInfo_v3_t``: 40 bytes (``nvmlGpuFabricInfo_v3 = 0x03000028``)."""

    _fields_ = [*_V2, ("healthSummary", ctypes.c_ubyte)]


class FabricClique(ctypes.Structure):
    """nvml.h ``nvmlGpuFabricClique_v1_t``: the clique's type and id, 8 bytes."""

    _fields_ = [("type", ctypes.c_ubyte), ("id", ctypes.c_uint)]


class FabricInfoV4(ctypes.Structure):
    """nvml.h ``nvmlGpuFabricInfo_v4_t`` (no version word; ``nvmlDeviceGetGpuFabricInfo_v4``):
    548 bytes."""

    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliques", FabricClique * CLIQUE_MAX),
        ("numCliques", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
        ("healthSummary", ctypes.c_ubyte),
    ]


#: struct version -> (ctypes class, size in nvml.h).
LAYOUTS: dict[int, tuple[type[ctypes.Structure], int]] = {
    1: (FabricInfoV1, 28),
    2: (FabricInfoV2, 0x24),
    3: (FabricInfoV3, 0x28),
    4: (FabricInfoV4, 548),
}


def struct_version(version: int) -> int:
    """nvml.h ``NVML_STRUCT_VERSION``: ``sizeof(struct) | (version << 24)``."""
    cls, _ = LAYOUTS[version]
    return ctypes.sizeof(cls) | (version << 24)


def check_layouts() -> None:
    """RuntimeError when a struct's size differs from nvml.h (a wrong layout would make NVML
    write past the buffer or misread fields)."""
    for version, (cls, size) in LAYOUTS.items():
        if ctypes.sizeof(cls) != size:
            raise RuntimeError(
                f"nvmlGpuFabricInfo v{version}: sizeof is {ctypes.sizeof(cls)}, nvml.h says {size}"
            )


check_layouts()

#: (device handle, pointer to a FabricInfo struct) -> nvmlReturn_t.
FabricCall = Callable[[Any, Any], int]


def query(
    handle: Any, get_v: FabricCall | None, get_v1: FabricCall | None,
    get_v4: FabricCall | None = None,
) -> tuple[ctypes.Structure | None, int, int]:
    """Ask NVML for one GPU's fabric info, newest version first: v4 through
    ``nvmlDeviceGetGpuFabricInfo_v4`` (when the library has it and it answers success), then
    v3 and v2 through ``nvmlDeviceGetGpuFabricInfoV`` (a driver that does not know v3
    answers NVML_ERROR_ARGUMENT_VERSION_MISMATCH), then v1 through
    ``nvmlDeviceGetGpuFabricInfo``. ``get_*`` are None when the library lacks the function.
    Returns (struct or None, struct version used, NVML return code); code 13
    (NVML_ERROR_FUNCTION_NOT_FOUND) when no function exists. A v4 that fails is not the answer
    while an older function is there to ask (a driver may have the entry point and refuse it).
    """
    if get_v4 is not None:
        info4 = FabricInfoV4()
        rc = int(get_v4(handle, ctypes.pointer(info4)))
        if rc == NVML_SUCCESS or (get_v is None and get_v1 is None):
            return (info4 if rc == NVML_SUCCESS else None), 4, rc
    if get_v is not None:
        for version in (3, 2):
            cls, _ = LAYOUTS[version]
            info = cls()
            info.version = struct_version(version)
            rc = int(get_v(handle, ctypes.pointer(info)))
            if rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                continue
            return (info if rc == NVML_SUCCESS else None), version, rc
    if get_v1 is not None:
        info1 = FabricInfoV1()
        rc = int(get_v1(handle, ctypes.pointer(info1)))
        return (info1 if rc == NVML_SUCCESS else None), 1, rc
    return None, 0, NVML_ERROR_FUNCTION_NOT_FOUND


def cliques_of(info: ctypes.Structure) -> tuple[Clique, ...]:
    """The cliques of a filled v4 struct: its first ``numCliques`` entries (at most
    :data:`CLIQUE_MAX`) of a type nvml.h names, in the driver's order (by type, then id)."""
    raw: Any = info
    count = min(int(raw.numCliques), CLIQUE_MAX)
    return tuple(Clique(CLIQUE_TYPES[int(c.type)], int(c.id)) for c in raw.cliques[:count]
                 if int(c.type) in CLIQUE_TYPES)


def decode(
    info: ctypes.Structure,
    version: int,
    index: int,
    uuid: str | None = None,
    pci: str | None = None,
    name: str | None = None,
) -> GpuFabric:
    """A filled FabricInfo struct -> GpuFabric. Pure.

    ``status`` is meaningful only when ``state`` is completed (nvml.h comment on the field); it
    is reported as read. The cluster UUID is the 16 raw bytes, formatted 8-4-4-4-12.
    """
    raw: Any = info
    state = STATES.get(int(raw.state), "not_supported")
    mask = int(raw.healthMask) if version >= 2 else None
    summary = SUMMARY.get(int(raw.healthSummary), "not_supported") if version >= 3 else None
    supported = state != "not_supported"
    cliques = cliques_of(info) if version >= 4 and supported else ()
    if version >= 4:
        clique = next((c.id for c in cliques if c.type == "unicast_pointer"), None)
    else:
        clique = int(raw.cliqueId) if supported else None
    return GpuFabric(
        index=index,
        uuid=uuid,
        pci=pci,
        name=name,
        state=state,
        status=status_name(int(raw.status)) if supported else None,
        clique_id=clique,
        cluster_uuid=uuid_from_bytes(bytes(raw.clusterUuid)) if supported else None,
        health_summary=summary,
        health=decode_mask(mask) if mask is not None and supported else (),
        health_mask=mask,
        cliques=cliques,
    )


HINT_INSTALL = (
    "install the NVIDIA driver's NVML library (libnvidia-ml.so.1, shipped with the driver) and "
    "the Python package nvidia-ml-py; or read a saved capture with --from-nvidia-smi FILE"
)


def _text(value: Any) -> str:
    """A string NVML returned (UUID, name, bus id): bytes decoded as UTF-8 with bad bytes
    replaced (a driver's odd byte in a product name is not an input error), control
    characters kept for the renderer to escape."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read() -> FabricHealth:
    """Read every GPU's fabric info from the live NVML. Never raises for an NVML problem:

    - package ``pynvml`` missing, or libnvidia-ml.so.1 missing -> ``nvml_unavailable`` (error);
    - NVML_ERROR_DRIVER_NOT_LOADED -> ``driver_not_loaded`` (error);
    - neither fabric function in the library -> ``nvml_function_not_found`` (warning: a driver
      older than the fabric API, 525-ish; GPUs reported as not_supported);
    - NVML_ERROR_NOT_SUPPORTED for a GPU -> its state is not_supported plus one
      ``fabric_info_not_supported`` (info) finding.
    """
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError:
        return FabricHealth(
            "nvml", (), findings=(
                Finding("nvml_unavailable", "error",
                        "the Python package nvidia-ml-py (module pynvml) is not installed",
                        HINT_INSTALL, {"reason": "package_missing"}),
            ),
        )
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return FabricHealth("nvml", (), findings=(init_finding(int(err.value)),))
    try:
        return _read_devices(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def init_finding(code: int) -> Finding:
    """The finding for an ``nvmlInit`` failure code (pure; tested as a table)."""
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return Finding(
            "driver_not_loaded", "error",
            "NVML says the NVIDIA kernel driver is not loaded",
            "load it (`modprobe nvidia`; check `dmesg` for why it failed) before any fabric "
            "service", {"nvml_error": status_name(code)},
        )
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return Finding(
            "nvml_unavailable", "error",
            "the NVML library libnvidia-ml.so.1 was not found (no NVIDIA driver user space here)",
            HINT_INSTALL, {"reason": "library_missing", "nvml_error": status_name(code)},
        )
    return Finding(
        "nvml_unavailable", "error", f"nvmlInit failed: {status_name(code)}", HINT_INSTALL,
        {"reason": "init_failed", "nvml_error": status_name(code)},
    )


def _read_devices(pynvml: Any) -> FabricHealth:
    findings: list[Finding] = []
    try:
        driver: str | None = _text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError:
        driver = None
    lib = getattr(pynvml, "nvmlLib", None)
    get_v4 = getattr(lib, "nvmlDeviceGetGpuFabricInfo_v4", None)
    get_v = getattr(lib, "nvmlDeviceGetGpuFabricInfoV", None)
    get_v1 = getattr(lib, "nvmlDeviceGetGpuFabricInfo", None)
    gpus: list[GpuFabric] = []
    for index in range(int(pynvml.nvmlDeviceGetCount())):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            pci = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            name = _text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as err:
            findings.append(Finding(
                "nvml_unavailable", "error",
                f"GPU {index}: NVML cannot read the device: {status_name(int(err.value))}",
                "check `nvidia-smi -q -i " + str(index) + "` and dmesg for Xid errors",
                {"reason": "device_error", "gpu": index},
            ))
            continue
        gpu = fabric_of(index, handle, uuid, pci, name, get_v, get_v1, findings, get_v4)
        gpus.append(replace(gpu, recovery_action=recovery_action(pynvml, handle)))
    return FabricHealth("nvml", tuple(gpus), driver, tuple(findings))


def recovery_action(pynvml: Any, handle: Any) -> RecoveryAction | None:
    """The GPU's recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` through
    ``nvmlDeviceGetFieldValues``), None when the driver does not report it (before 570, a
    value nvml.h does not name, or an error)."""
    try:
        (value,) = pynvml.nvmlDeviceGetFieldValues(handle, [FI_DEV_GET_GPU_RECOVERY_ACTION])
        if int(value.nvmlReturn) != NVML_SUCCESS:
            return None
        return RECOVERY_ACTIONS.get(int(value.value.uiVal))
    except (pynvml.NVMLError, AttributeError, TypeError, ValueError):
        return None


def fabric_of(
    index: int, handle: Any, uuid: str | None, pci: str | None, name: str | None,
    get_v: FabricCall | None, get_v1: FabricCall | None, findings: list[Finding],
    get_v4: FabricCall | None = None,
) -> GpuFabric:
    """One GPU: query with fallback, decode, and append the reader's findings (each kind of
    failure once per reading)."""
    info, version, rc = query(handle, get_v, get_v1, get_v4)
    if info is not None:
        filled: Any = info
        raw_state = int(filled.state)
        if raw_state not in STATES:
            findings.append(Finding(
                "registration_error", "error",
                f"GPU {index}: NVML reports fabric state {raw_state}, which nvml.h "
                "(NVML_GPU_FABRIC_STATE_*) does not define: the registration cannot be judged",
                "check `nvidia-smi -q -i " + str(index) + "` (Fabric section); a driver newer "
                "than this nvfabric may define the value: update nvfabric",
                {"gpu": index, "state_raw": raw_state},
            ))
        return decode(info, version, index, uuid, pci, name)
    codes = {f.code for f in findings}
    if rc == NVML_ERROR_FUNCTION_NOT_FOUND:
        if "nvml_function_not_found" not in codes:
            findings.append(Finding(
                "nvml_function_not_found", "warning",
                "this NVML has neither nvmlDeviceGetGpuFabricInfoV nor nvmlDeviceGetGpuFabricInfo:"
                " the driver predates the GPU fabric API, so registration cannot be read",
                "upgrade the driver (and fabric manager with it, same version), or judge by "
                "fabric manager's log: nvfabric doctor --log ...",
            ))
    elif rc == NVML_ERROR_NOT_SUPPORTED:
        if "fabric_info_not_supported" not in codes:
            findings.append(Finding(
                "fabric_info_not_supported", "info",
                "NVML reports no fabric for this GPU (NVML_ERROR_NOT_SUPPORTED): PCIe cards, "
                "NVLink bridges and GPUs before Hopper have no fabric registration",
                "nothing to fix on such GPUs; on an NVSwitch baseboard fabric manager's "
                "liveness stands in for the registration (`nvfabric status` checks it)",
            ))
    else:
        findings.append(Finding(
            "nvml_unavailable", "error",
            f"GPU {index}: reading its fabric info failed: {status_name(rc)}",
            "check `nvidia-smi -q -i " + str(index) + "` and dmesg for Xid errors",
            {"reason": "fabric_info_error", "gpu": index, "nvml_error": status_name(rc)},
        ))
    return GpuFabric(index=index, uuid=uuid, pci=pci, name=name, state="not_supported",
                     status=None)

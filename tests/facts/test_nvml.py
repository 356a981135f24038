"""NVML reading without a GPU: nvmlGpuFabricInfo structs built in memory with the C layout of
nvml.h, fake NVML entry points for the v3 -> v2 -> v1 fallback, a fake pynvml for the reader's
flow, and the real binding with the library absent."""

from __future__ import annotations

import ctypes
import struct
import sys
import types
from typing import Any

import pytest

from nvfabric.facts import nvml
from nvfabric.facts.nvml import FabricInfoV1, FabricInfoV2, FabricInfoV3, decode, query

CLUSTER = bytes(range(0x10, 0x20))
CLUSTER_TEXT = "10111213-1415-1617-1819-1a1b1c1d1e1f"

# C layouts of nvml.h, packed by hand: natural alignment, unsigned char state followed by
# 3 bytes of padding before the next unsigned int, trailing padding to a multiple of 4.
V1_C = "<16sIIB3x"        # clusterUuid, status, cliqueId, state
V2_C = "<I16sIIB3xI"      # version, ..., state, healthMask
V3_C = "<I16sIIB3xIB3x"   # ..., healthSummary


def test_struct_sizes_and_version_words_match_nvml_h() -> None:
    assert [ctypes.sizeof(c) for c in (FabricInfoV1, FabricInfoV2, FabricInfoV3)] == [
        struct.calcsize(V1_C), struct.calcsize(V2_C), struct.calcsize(V3_C)] == [28, 36, 40]
    assert nvml.struct_version(2) == 0x02000024  # nvml.h nvmlGpuFabricInfo_v2
    assert nvml.struct_version(3) == 0x03000028  # nvml.h nvmlGpuFabricInfo_v3
    assert FabricInfoV3.healthMask.offset == 32 and FabricInfoV3.healthSummary.offset == 36
    assert FabricInfoV1.state.size == 1  # typedef unsigned char nvmlGpuFabricState_t
    nvml.check_layouts()


def test_v3_struct_from_bytes_decodes_every_field() -> None:
    # healthMask: route_unhealthy TRUE (1 << 4), degraded_bw FALSE (2), incorrect config
    # NONE (1 << 8), partition assigned TRUE (1 << 12); summary UNHEALTHY (2).
    mask = 2 | (2 << 2) | (1 << 4) | (2 << 6) | (1 << 8) | (1 << 12)
    raw = struct.pack(V3_C, nvml.struct_version(3), CLUSTER, 0, 7, 3, mask, 2)
    g = decode(FabricInfoV3.from_buffer_copy(raw), 3, index=4, uuid="GPU-x", pci="0:1:0.0")
    assert (g.index, g.state, g.status, g.clique_id) == (4, "completed", "success", 7)
    assert g.cluster_uuid == CLUSTER_TEXT
    assert g.health_summary == "unhealthy" and g.health_mask == mask
    values = {f.name: (f.value, f.impact) for f in g.health}
    assert values["route_unhealthy"] == ("true", "unhealthy")
    assert values["degraded_bandwidth"] == ("false", None)
    assert values["incorrect_configuration"] == ("none", None)
    assert values["partition_assigned"] == ("true", None)


def test_uuid_is_16_raw_bytes_not_text() -> None:
    raw_uuid = bytes([0xC8, 0x1D, 0x4E, 0x2A, 0x9B, 0x3F, 0x4A, 0x61, 0x8D, 0x07, 0x1E, 0x6F,
                      0x2B, 0x9A, 0x4C, 0x00])  # ends in a NUL byte: must not be cut
    raw = struct.pack(V2_C, nvml.struct_version(2), raw_uuid, 0, 2, 3, 0)
    g = decode(FabricInfoV2.from_buffer_copy(raw), 2, index=0)
    assert g.cluster_uuid == "c81d4e2a-9b3f-4a61-8d07-1e6f2b9a4c00"
    assert g.health_summary is None  # v2 has no summary


def test_v1_struct_has_no_health() -> None:
    raw = struct.pack(V1_C, CLUSTER, 23, 0, 3)
    g = decode(FabricInfoV1.from_buffer_copy(raw), 1, index=0)
    assert (g.status, g.health, g.health_mask) == ("NVML_ERROR_INSUFFICIENT_RESOURCES", (), None)


def test_not_supported_state_has_no_values() -> None:
    raw = struct.pack(V3_C, nvml.struct_version(3), bytes(16), 0, 0, 0, 0, 0)
    g = decode(FabricInfoV3.from_buffer_copy(raw), 3, index=0)
    assert (g.state, g.status, g.clique_id, g.cluster_uuid) == ("not_supported", None, None, None)


def _filler(payload: dict[int, bytes], accept: set[int], rc: int = 0) -> Any:
    """A fake nvmlDeviceGetGpuFabricInfoV: answers version mismatch (25) for struct versions
    not in ``accept``, else copies the packed bytes for that version into the struct."""
    calls: list[int] = []

    def fn(handle: Any, ptr: Any) -> int:
        version = ptr.contents.version >> 24
        calls.append(version)
        if version not in accept:
            return nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if rc:
            return rc
        data = payload[version]
        assert len(data) == ctypes.sizeof(ptr.contents)
        ctypes.memmove(ptr, data, len(data))
        return 0

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_query_uses_v3_when_the_driver_knows_it() -> None:
    fn = _filler({3: struct.pack(V3_C, nvml.struct_version(3), CLUSTER, 0, 1, 3, 0, 1)}, {3})
    info, version, rc = query("h", fn, None)
    assert (version, rc, fn.calls) == (3, 0, [3])
    assert info is not None and decode(info, version, 0).health_summary == "healthy"


def test_query_falls_back_to_v2_on_version_mismatch() -> None:
    fn = _filler({2: struct.pack(V2_C, nvml.struct_version(2), CLUSTER, 0, 1, 2, 0)}, {2})
    info, version, rc = query("h", fn, None)
    assert (version, rc, fn.calls) == (2, 0, [3, 2])
    assert info is not None and decode(info, version, 0).state == "in_progress"


def test_query_falls_back_to_v1_without_the_versioned_function() -> None:
    def v1(handle: Any, ptr: Any) -> int:
        ctypes.memmove(ptr, struct.pack(V1_C, CLUSTER, 0, 5, 3), 28)
        return 0

    info, version, rc = query("h", None, v1)
    assert (version, rc) == (1, 0)
    assert info is not None and decode(info, 1, 0).clique_id == 5


def test_query_without_any_fabric_function_is_function_not_found() -> None:
    assert query("h", None, None) == (None, 0, nvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def test_query_passes_not_supported_through() -> None:
    fn = _filler({}, {3}, rc=nvml.NVML_ERROR_NOT_SUPPORTED)
    assert query("h", fn, None)[1:] == (3, nvml.NVML_ERROR_NOT_SUPPORTED)


@pytest.mark.parametrize(
    ("code", "finding", "reason"),
    [
        (9, "driver_not_loaded", None),
        (12, "nvml_unavailable", "library_missing"),
        (18, "nvml_unavailable", "init_failed"),
    ],
    ids=["driver-not-loaded", "library-missing", "rm-version-mismatch"],
)
def test_init_failures_each_give_their_finding(code: int, finding: str, reason: str | None
                                               ) -> None:
    f = nvml.init_finding(code)
    assert f.code == finding and f.severity == "error" and f.hint
    assert f.fields.get("reason") == reason


class _FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _fake_pynvml(init_rc: int = 0, lib: Any = None, count: int = 2) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    state = {"shutdown": 0}

    def init() -> None:
        if init_rc:
            raise _FakeNvmlError(init_rc)

    def shutdown() -> None:
        state["shutdown"] += 1

    mod.NVMLError = _FakeNvmlError  # type: ignore[attr-defined]
    mod.nvmlInit = init  # type: ignore[attr-defined]
    mod.nvmlShutdown = shutdown  # type: ignore[attr-defined]
    mod.nvmlSystemGetDriverVersion = lambda: b"580.105.08"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: count  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
        busId=b"00000000:18:00.0")
    mod.nvmlDeviceGetName = lambda h: "NVIDIA B200"  # type: ignore[attr-defined]
    mod.nvmlLib = lib  # type: ignore[attr-defined]
    mod.state = state  # type: ignore[attr-defined]
    return mod


def test_read_through_a_fake_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    v3 = _filler({3: struct.pack(V3_C, nvml.struct_version(3), CLUSTER, 0, 0, 3, 0, 1)}, {3})
    fake = _fake_pynvml(lib=types.SimpleNamespace(nvmlDeviceGetGpuFabricInfoV=v3))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    h = nvml.read()
    assert h.driver_version == "580.105.08" and h.findings == ()
    assert [(g.index, g.uuid, g.pci, g.state) for g in h.gpus] == [
        (0, "GPU-handle0", "00000000:18:00.0", "completed"),
        (1, "GPU-handle1", "00000000:18:00.0", "completed")]
    assert fake.state["shutdown"] == 1  # type: ignore[attr-defined]


def test_read_with_driver_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_rc=9))
    h = nvml.read()
    assert h.gpus == () and [f.code for f in h.findings] == ["driver_not_loaded"]


def test_read_with_no_fabric_function_in_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(lib=types.SimpleNamespace()))
    h = nvml.read()
    assert [g.state for g in h.gpus] == ["not_supported", "not_supported"]
    assert [f.code for f in h.findings] == ["nvml_function_not_found"]  # once, not per GPU


def test_read_with_fabric_not_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    fn = _filler({}, {3}, rc=nvml.NVML_ERROR_NOT_SUPPORTED)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(
        lib=types.SimpleNamespace(nvmlDeviceGetGpuFabricInfoV=fn)))
    h = nvml.read()
    assert [f.code for f in h.findings] == ["fabric_info_not_supported"]
    assert h.findings[0].severity == "info"


def test_read_without_the_python_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    h = nvml.read()
    assert [(f.code, f.fields["reason"]) for f in h.findings] == [
        ("nvml_unavailable", "package_missing")]


def test_read_with_the_real_binding_and_no_libnvidia_ml(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def no_library(name: str, *args: Any, **kwargs: Any) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    h = nvml.read()
    assert h.gpus == ()
    assert [(f.code, f.fields["reason"]) for f in h.findings] == [
        ("nvml_unavailable", "library_missing")]


def test_read_with_a_fabric_state_nvml_h_does_not_define(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tester report 9(a), the NVML side: state 7 was read as not_supported without a word.
    v3 = _filler({3: struct.pack(V3_C, nvml.struct_version(3), CLUSTER, 0, 0, 7, 0, 1)}, {3})
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(
        lib=types.SimpleNamespace(nvmlDeviceGetGpuFabricInfoV=v3), count=1))
    h = nvml.read()
    assert [(f.code, f.severity, f.fields["state_raw"]) for f in h.findings] == [
        ("registration_error", "error", 7)]


def test_fabric_not_supported_finding_carries_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    fn = _filler({}, {3}, rc=nvml.NVML_ERROR_NOT_SUPPORTED)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(
        lib=types.SimpleNamespace(nvmlDeviceGetGpuFabricInfoV=fn)))
    assert nvml.read().findings[0].hint

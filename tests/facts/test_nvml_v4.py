"""The newest GPU fabric info: nvmlGpuFabricInfo_v4 (NVML 615: cliques by type) read first and
v3 -> v2 -> v1 after it, the GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), both
in nvidia-smi captures (the recovery action as real captures print it; the cliques in the
layout the fake prints, an assumption) and in the fakes, the verdict's recovery rule, the
cliques in `status` and in `domain check`."""

from __future__ import annotations

import ctypes
import json
import struct
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from nvfabric.facts import nvml
from nvfabric.facts.nvml import FabricInfoV4, decode, query
from nvfabric.facts.smi import parse
from nvfabric.model.health import Clique, GpuFabric
from nvfabric.rules.imex.domain import check, node_from_status
from nvfabric.rules.verdict import Inputs, verdict
from nvfabric.simulate.fakebin.state import load, save
from tests.conftest import REPO, run_cli
from tests.runkit import sim

CLUSTER = bytes(range(0x10, 0x20))
# nvml.h nvmlGpuFabricInfo_v4_t, packed by hand: clusterUuid, status, 64 x {unsigned char
# type; unsigned int id}, numCliques, state (3 bytes of padding), healthMask, healthSummary
V4_C = "<16sI" + "B3xI" * 64 + "IB3xIB3x"


def _v4(cliques: list[tuple[int, int]], count: int | None = None, state: int = 3,
        summary: int = 1) -> bytes:
    pairs: list[int] = []
    for kind, number in cliques + [(0, 0)] * (64 - len(cliques)):
        pairs += [kind, number]
    return struct.pack(V4_C, CLUSTER, 0, *pairs, len(cliques) if count is None else count,
                       state, 0, summary)


def _filled(data: bytes, rc: int = 0) -> Any:
    calls: list[int] = []

    def fn(handle: Any, ptr: Any) -> int:
        calls.append(1)
        if rc:
            return rc
        assert ctypes.sizeof(ptr.contents) == len(data) == 548
        ctypes.memmove(ptr, data, len(data))
        return 0

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_the_v4_struct_is_nvml_h_s_layout() -> None:
    assert ctypes.sizeof(FabricInfoV4) == struct.calcsize(V4_C) == 548
    assert FabricInfoV4.cliques.offset == 20 and FabricInfoV4.numCliques.offset == 532
    assert FabricInfoV4.state.offset == 536 and FabricInfoV4.healthMask.offset == 540
    assert FabricInfoV4.healthSummary.offset == 544
    nvml.check_layouts()


def test_v4_is_read_first_and_gives_every_clique_and_the_legacy_id() -> None:
    v4 = _filled(_v4([(0, 7), (1, 9), (2, 7), (3, 11)]))
    older = _filled(b"", rc=99)
    info, version, rc = query("h", older, None, v4)
    assert (version, rc, older.calls) == (4, 0, [])
    g = decode(info, version, 0)  # type: ignore[arg-type]
    assert g.cliques == (Clique("unicast_pointer", 7), Clique("multicast_pointer", 9),
                         Clique("unicast_logical_endpoint", 7),
                         Clique("multicast_logical_endpoint", 11))
    assert g.clique_id == 7 and g.health_summary == "healthy" and g.state == "completed"
    assert g.clique_text == "7 (mc 9, uc-le 7, mc-le 11)"


def test_a_failing_v4_falls_back_to_v3() -> None:
    v3 = struct.pack("<I16sIIB3xIB3x", nvml.struct_version(3), CLUSTER, 0, 5, 3, 0, 1)

    def getv(handle: Any, ptr: Any) -> int:
        ctypes.memmove(ptr, v3, len(v3))
        return 0

    info, version, rc = query("h", getv, None, _filled(b"", rc=nvml.NVML_ERROR_NOT_SUPPORTED))
    assert (version, rc) == (3, 0) and decode(info, 3, 0).clique_id == 5  # type: ignore[arg-type]


def test_a_count_past_the_array_and_unknown_types_are_bounded() -> None:
    info, version, _ = query("h", None, None, _filled(_v4([(0, 1), (9, 2)], count=1000)))
    g = decode(info, version, 0)  # type: ignore[arg-type]
    # numCliques 1000: the 64 entries of the array are read; type 9 (not in nvml.h) skipped
    assert len(g.cliques) == 63 and g.cliques[0] == Clique("unicast_pointer", 1)
    info, version, _ = query("h", None, None, _filled(_v4([(0, 1), (9, 2)])))
    assert decode(info, version, 0).cliques == (Clique("unicast_pointer", 1),)  # type: ignore


def test_reading_through_the_binding_gives_the_recovery_action(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.facts.test_nvml import _fake_pynvml

    fake = _fake_pynvml(lib=types.SimpleNamespace(
        nvmlDeviceGetGpuFabricInfo_v4=_filled(_v4([(0, 3)]))))
    answers = {"handle0": (0, 4), "handle1": (nvml.NVML_ERROR_NOT_SUPPORTED, 0)}

    def field_values(handle: Any, fields: list[int]) -> list[Any]:
        assert fields == [nvml.FI_DEV_GET_GPU_RECOVERY_ACTION]
        rc, value = answers[handle]
        return [types.SimpleNamespace(nvmlReturn=rc, value=types.SimpleNamespace(uiVal=value))]

    fake.nvmlDeviceGetFieldValues = field_values  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    h = nvml.read()
    assert [(g.clique_id, g.recovery_action) for g in h.gpus] == [(3, "drain_and_reset"),
                                                                   (3, None)]


def test_the_recovery_action_of_a_real_capture_is_read() -> None:
    text = (REPO / "tests/data/corpus/nvidia-smi/k8s-test-infra-hw-qx-b200.xml").read_text()
    assert {g.recovery_action for g in parse(text).gpus} == {"none"}


def _fake_smi(root: Path, *args: str) -> str:
    from tests.runkit import run

    return run([str(root / "bin/nvidia-smi"), *args], check=True).stdout


@pytest.mark.parametrize("xml", [False, True])
def test_the_fake_prints_cliques_and_the_recovery_action_and_they_read_back(
        tmp_path: Path, xml: bool) -> None:
    root = sim(tmp_path, "gb200-tray")
    data = load(str(root), "gpus.json", {})
    for gpu in data["gpus"]:
        gpu.update(cliques=[["unicast_pointer", 32766], ["multicast_pointer", 12],
                            ["unicast_logical_endpoint", 32766]],
                   recovery_action="drain_and_reset")
    save(str(root), "gpus.json", data)
    health = parse(_fake_smi(root, "-q", *(["-x"] if xml else [])))
    g = health.gpus[0]
    assert g.recovery_action == "drain_and_reset"
    assert [(c.type, c.id) for c in g.cliques] == [
        ("unicast_pointer", 32766), ("multicast_pointer", 12),
        ("unicast_logical_endpoint", 32766)]


def test_status_shows_the_cliques_and_the_recovery_action_decides(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    data = load(str(root), "gpus.json", {})
    data["gpus"][1].update(cliques=[["unicast_pointer", 32766], ["multicast_pointer", 12]],
                           recovery_action="drain_and_reset")
    save(str(root), "gpus.json", data)
    done = run_cli("status", "--root", str(root), "--json")
    doc = json.loads(done.stdout)
    assert doc["verdict"] == "unhealthy" and done.returncode == 1
    gpu = doc["gpus"][1]
    assert gpu["cliques"] == [{"type": "unicast_pointer", "id": 32766},
                              {"type": "multicast_pointer", "id": 12}]
    (f,) = [f for f in doc["findings"] if f["code"] == "gpu_recovery_action"]
    assert f["recovery_action"] == "drain_and_reset" and "reset the GPU" in f["hint"]
    human = run_cli("status", "--root", str(root)).stdout
    assert "32766 (mc 12)" in human and "recovery drain_and_reset" in human


def test_a_recovery_action_goes_into_the_hint_of_the_gpu_s_other_findings() -> None:
    from nvfabric.model.mask import decode_mask

    bad = GpuFabric(0, "GPU-a", "00000000:18:00.0", "completed", "success", 1, None,
                    "unhealthy", decode_mask(0x10), 0x10, recovery_action="gpu_reset")
    v = verdict(Inputs((bad,), fabric="nvswitch"))
    by_code = {f.code: f for f in v.findings}
    assert by_code["fabric_unhealthy"].hint.startswith("the driver asks for gpu_reset")
    assert by_code["gpu_recovery_action"].severity == "error" and v.verdict == "unhealthy"
    drain = GpuFabric(0, "GPU-a", "00000000:18:00.0", "completed", "success", 1, None,
                      "healthy", recovery_action="drain_p2p")
    assert verdict(Inputs((drain,), fabric="nvswitch")).verdict == "degraded"
    fine = GpuFabric(0, "GPU-a", "00000000:18:00.0", "completed", "success", 1, None,
                     "healthy", recovery_action="none")
    assert not [f for f in verdict(Inputs((fine,), fabric="nvswitch")).findings
                if f.code == "gpu_recovery_action"]


def test_a_live_kernel_finding_names_the_recovery_action_of_its_gpu() -> None:
    from nvfabric.rules.live import overlay

    status = {"verdict": "healthy", "gpus": [{"pci": "00000000:1B:00.0",
                                              "recovery_action": "drain_and_reset"}]}
    xid = {"code": "nvlink_xid_error", "pci": "0000:1b:00", "hint": "drain the GPU"}
    out = overlay(status, {"level": "unhealthy", "findings": [xid]})
    assert out["findings"][0]["hint"].startswith("the driver asks for drain_and_reset")


def _report(name: str, cliques: list[dict[str, Any]], clique_id: int = 7) -> dict[str, Any]:
    gpu = {"index": 0, "uuid": f"GPU-{name}", "state": "completed", "status": "success",
           "clique_id": clique_id, "cluster_uuid": "10111213-1415-1617-1819-1a1b1c1d1e1f",
           "cliques": cliques}
    return {"hostname": name, "fabric": "mnnvl", "gpus": [gpu],
            "imex": {"node_list": ["a", "b"]}}


def test_domain_check_judges_each_clique_type() -> None:
    same = [{"type": "unicast_pointer", "id": 7}, {"type": "unicast_logical_endpoint", "id": 1}]
    other_rack = [{"type": "unicast_pointer", "id": 8},
                  {"type": "unicast_logical_endpoint", "id": 1}]
    reports = [node_from_status(_report("a", same), "a"),
               node_from_status(_report("b", other_rack, 8), "b")]
    (domain,) = check(reports).domains
    (split,) = [f for f in domain.findings if f.code == "domain_clique_split"]
    # the logical endpoint clique is shared: a pointer clique of another rack is a warning
    assert split.severity == "warning" and split.fields["clique_type"] == "unicast_pointer"
    torn = [{"type": "unicast_pointer", "id": 7}, {"type": "unicast_logical_endpoint", "id": 2}]
    reports[1] = node_from_status(_report("b", torn), "b")
    (domain,) = check(reports).domains
    (split,) = [f for f in domain.findings if f.code == "domain_clique_split"]
    assert split.severity == "error" and split.fields["clique_type"] == "unicast_logical_endpoint"
    with pytest.raises(ValueError, match=r"gpus\[0\]\.cliques\[0\]"):
        node_from_status(_report("c", [{"type": 3}]), "c")

"""What applications print (D13-D15, D18): NCCL's NVLS set-up failure in every NCCL version's
wording with the hint chosen by the CUDA error, CUDA errors 802, 220 and 226 in every spelling
(number, CUDA_ERROR_*, cudaError*, the text), NCCL's MNNVL self-test, and the CUDA result table
(data/cuda.yaml) they read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nvfabric.model.findings import Finding
from nvfabric.rules.catalogue import Lookup, _cuda_by_text, look_up, lookup_table
from nvfabric.rules.diagnose import Classifier, classify_lines
from tests.conftest import REPO, run_json

CUDA = lookup_table("cuda")


def _one(lines: list[str], fabric: str | None = "nvswitch") -> Finding:
    found = classify_lines(lines, fabric)  # type: ignore[arg-type]
    assert len(found) == 1, [f.to_json() for f in found]
    return found[0]


# NCCL's wordings: host:pid:tid [dev] file:line NCCL WARN|INFO text (src/debug.cc of every
# version); the text from src/transport/nvls.cc and src/include/cudawrap.h of each release.
V218 = "node-01:2211:2290 [0] transport/nvls.cc:137 NCCL WARN Cuda failure '{text}'"
V219 = "node-01:2211:2290 [0] transport/nvls.cc:254 NCCL WARN Cuda failure {n} '{text}'"
V227 = ("node-01:2211:2290 [0] transport/nvls.cc:284 NCCL WARN Failed to bind NVLink SHARP "
        "(NVLS) Multicast memory of size 2097152 : CUDA error {n} '{text}'.")
TORCH = ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error {n} "
         "'{text}'.")
FALLBACK = ("node-01:2211:2290 [0] NCCL INFO Failed to bind NVLink SHARP (NVLS) Multicast memory "
            "of size 2097152 : CUDA error {n} '{text}'. Proceeding without NVLS support.")
WORDINGS = {"2.17-2.18 text only": V218, "2.19-2.26 CUCHECK": V219, "2.27+ bind WARN": V227,
            "torch Last error": TORCH}


def _line(wording: str, number: int) -> str:
    return wording.format(n=number, text=CUDA[number]["text"])


@pytest.mark.parametrize("wording", WORDINGS.values(), ids=list(WORDINGS))
@pytest.mark.parametrize("number", [1, 401])
def test_nvls_gpus_not_reset_in_every_wording(wording: str, number: int) -> None:
    f = _one([_line(wording, number)])
    assert (f.code, f.severity, f.fields["cuda_error"]) == (
        "multicast_team_failure", "error", number)
    assert f.fields["catalogue_name"] == CUDA[number]["name"]
    assert "reset the GPUs" in f.hint and "NCCL_NVLS_ENABLE=0" in f.hint


@pytest.mark.parametrize("wording", WORDINGS.values(), ids=list(WORDINGS))
def test_nvls_out_of_memory_is_multicast_exhausted_and_blames_no_fabric_manager(
        wording: str) -> None:
    f = _one([_line(wording, 2)])
    assert (f.code, f.severity, f.fields["cuda_error"]) == ("nvls_multicast_exhausted", "error", 2)
    assert "fabric manager" not in (f.message + f.hint).lower()
    assert "not a fabric fault" in f.message and "NCCL_NVLS_ENABLE=0" in f.hint


@pytest.mark.parametrize("wording", WORDINGS.values(), ids=list(WORDINGS))
def test_nvls_system_not_ready_is_a_fabric_not_ready_at_job_start(wording: str) -> None:
    f = _one([_line(wording, 802)])  # one finding: the 802 rows leave NVLS lines to these
    assert (f.code, f.fields["cuda_error"]) == ("multicast_team_failure", 802)
    assert "not ready when the job started" in f.message
    assert "`nvfabric status`" in f.hint and "retry" in f.hint


@pytest.mark.parametrize("wording", WORDINGS.values(), ids=list(WORDINGS))
@pytest.mark.parametrize("number", [801, 101, 304])
def test_nvls_other_errors_are_named_with_a_neutral_hint(wording: str, number: int) -> None:
    f = _one([_line(wording, number)])
    assert (f.code, f.fields["cuda_error"]) == ("multicast_team_failure", number)
    assert CUDA[number]["name"] in f.message and CUDA[number]["name"] in f.hint
    assert "reset the GPUs" not in f.hint and "restarted" not in f.hint


def test_nvls_error_the_table_lacks_says_so() -> None:
    f = _one([V219.format(n=4242, text="a future error")])
    assert (f.code, f.fields["cuda_error"], f.fields["catalogue_class"]) == (
        "multicast_team_failure", 4242, "unknown")
    assert "does not list" in f.message


def test_nvls_text_only_error_the_table_lacks_has_no_number() -> None:
    f = _one([V218.format(text="a future error")])
    assert f.code == "multicast_team_failure" and "cuda_error" not in f.fields


@pytest.mark.parametrize(("number", "code"), [(401, "multicast_team_failure"),
                                              (1, "multicast_team_failure"),
                                              (2, "nvls_multicast_exhausted")])
def test_nccl_fallback_without_nvls_is_a_warning(number: int, code: str) -> None:
    f = _one([_line(FALLBACK, number)])
    assert (f.code, f.severity, f.fields["cuda_error"]) == (code, "warning", number)


def test_torch_exception_with_nccl_last_error_is_one_finding() -> None:
    """Case D14's shape: the torch exception, NCCL's 'Last error' on its own line, and the
    advice lines NCCL prints after it (which name fabric manager, and match nothing)."""
    lines = [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
        "version 2.29.7",
        "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:",
        _line(TORCH, 2),
        "This is usually caused by a system or configuration error in the Fabric Manager or "
        "NVSwitches.",
        "Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future."]
    f = _one(lines)
    assert (f.code, f.fields["sizes"], f.fields["count"]) == (
        "nvls_multicast_exhausted", [2097152], 1)


NOT_READY = [
    "hgx-node02: Test CUDA failure common.cu:941 'system not yet initialized'",
    "  what():  Error (gpu_burn-drv.cpp:298): system not yet initialized",
    "Failed to allocate device vector A (error code system not yet initialized)!",
    "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run "
    "some cuda functions before calling NumCudaDevices() that might have already set an error? "
    "Error 802: system not yet initialized (Triggered internally at "
    "/pytorch/c10/cuda/CUDAFunctions.cpp:109.)",
    "RuntimeError: cuda runtime error (802) : system not yet initialized at /opt/conda/conda-bld/"
    "pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50",
    "2024-11-12 15:37:25.005059: E external/xla/xla/stream_executor/cuda/cuda_driver.cc:152] "
    "failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: "
    "CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized",
    "cupy.cuda.runtime.CUDARuntimeError: cudaErrorSystemNotReady: system not yet initialized",
    'CUDA error at bandwidthTest.cu:686 code=802(cudaErrorSystemNotReady) "cudaSetDevice(0)"',
    "cudaSetDevice err: 802",
    'time=2025-02-11T03:16:37.327Z level=DEBUG source=gpu.go:592 msg="Unable to load cudart '
    'library /usr/lib/ollama/libcudart.so.12.4.127: cudart init failure: 802"',
    "cudaGetDeviceCount returned 802",
    "node-01:5512:5590 [4] init.cc:1875 NCCL WARN Cuda failure 802 'system not yet initialized'",
    "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY",
]


@pytest.mark.parametrize("line", NOT_READY)
def test_cuda_802_in_every_spelling_is_one_fabric_not_ready(line: str) -> None:
    f = _one([line])
    assert (f.code, f.severity, f.fields["cuda_error"]) == ("cuda_fabric_not_ready", "error", 802)


def test_cuda_802_lines_of_one_job_are_one_counted_finding() -> None:
    (f,) = classify_lines(NOT_READY, "nvswitch")
    assert f.fields["count"] == len(NOT_READY)


@pytest.mark.parametrize(("fabric", "severity", "words"), [
    ("nvswitch", "error", "fabric manager is enabled and running"),
    ("nvlink5", "error", "NVLSM"),
    ("mnnvl", "error", "NVLink switch trays"),
    ("none", "warning", "no NVLink fabric problem"),
    (None, "error", "pass --fabric or --root"),
])
def test_cuda_802_follows_the_platform(fabric: str | None, severity: str, words: str) -> None:
    f = _one([NOT_READY[3]], fabric)
    assert f.severity == severity
    assert words in f.message + f.hint


@pytest.mark.parametrize("line", [
    "bond0: IEEE 802.3ad dynamic link aggregation enabled",
    "eth0: 802.1Q VLAN support v1.8, status 802.1q ok",
    "Error 8021: something else",
    "loaded 802 tensors in 3 s",
    "NCCL INFO Channel 00/0 : 802[3] -> 803[4] via P2P/CUMEM",
])
def test_other_802s_are_not_cuda_errors(line: str) -> None:
    assert classify_lines([line], "nvswitch") == []


NVLINK_UNCORRECTABLE = [
    "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
    "node-01:124031:124053 [2] NCCL WARN Cuda failure 'uncorrectable NVLink error detected "
    "during the execution'",
    "node-01:5512:5590 [4] include/alloc.h:185 NCCL WARN Cuda failure 220 'uncorrectable NVLink "
    "error detected during the execution'",
    "cuStreamSynchronize failed: CUDA_ERROR_NVLINK_UNCORRECTABLE",
    'CUDA error at p2pBandwidthLatencyTest.cu:150 code=220(cudaErrorNvlinkUncorrectable) '
    '"cudaDeviceSynchronize()"',
    "CUDA error 220 at kernel launch",
]
CONTAINED = [
    "[rank5]: RuntimeError: CUDA error: Invalid access of peer GPU memory over nvlink or a "
    "hardware error",
    "torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a "
    "hardware error",
    "XlaRuntimeError: INTERNAL: CUDA error: CUDA_ERROR_CONTAINED",
    'CUDA error at simpleP2P.cu:196 code=226(cudaErrorContained) "cudaDeviceSynchronize()"',
    "node-01:5512:5590 [4] NCCL WARN Cuda failure 226 'Invalid access of peer GPU memory over "
    "nvlink or a hardware error'",
]


@pytest.mark.parametrize(("line", "code", "number"),
                         [(x, "cuda_nvlink_uncorrectable", 220) for x in NVLINK_UNCORRECTABLE]
                         + [(x, "cuda_error_contained", 226) for x in CONTAINED])
@pytest.mark.parametrize("fabric", ["none", "nvswitch", "nvlink5", "mnnvl"])
def test_nvlink_faults_in_application_output_point_at_the_kernel_log(
        line: str, code: str, number: int, fabric: str) -> None:
    f = _one([line], fabric)
    assert (f.code, f.severity, f.fields["cuda_error"]) == (code, "error", number)
    assert f.fields["cuda_error_name"] == CUDA[number]["name"]
    assert "kernel log" in f.hint and "Xid" in f.hint and "journalctl -k" in f.hint


@pytest.mark.parametrize(("line", "code"), [
    ("gb200-t07:2231:2231 [0] mnnvl.cc:74 NCCL WARN MNNVL (cliqueSize 72) is available but not "
     "working on this system. Check the IMEX channel configuration "
     "(/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to ignore this issue.",
     "imex_channel_missing"),
    ("gb200-t07:2231:2231 [0] mnnvl.cc:86 NCCL WARN MNNVL (cliqueSize 18) is available but not "
     "working on this system. Check the IMEX configuration (nvidia-imex-ctl -N). Set "
     "NCCL_MNNVL_ENABLE=0 to ignore this issue.", "imex_not_ready"),
])
def test_nccl_mnnvl_self_test_names_the_imex_part(line: str, code: str) -> None:
    f = _one([line], "mnnvl")
    assert (f.code, f.severity) == (code, "error")
    assert f.fields["clique_size"] in (72, 18) and "NCCL_MNNVL_ENABLE=0" in f.hint


def test_cuda_table_carries_its_source_and_unique_names() -> None:
    data = yaml.safe_load((REPO / "src/nvfabric/data/cuda.yaml").read_text(encoding="utf-8"))
    assert "CUresult" in data["source"] and "docs.nvidia.com" in data["source"]
    names = [e["name"] for e in data["results"].values()]
    assert len(names) == len(set(names)) and all(n.startswith("CUDA_ERROR_") for n in names)
    runtime = [e["runtime"] for e in data["results"].values() if "runtime" in e]
    assert len(runtime) == len(set(runtime)) and all(n.startswith("cudaError") for n in runtime)
    assert {n: CUDA[n]["name"] for n in (1, 2, 220, 226, 401, 802)} == {
        1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
        220: "CUDA_ERROR_NVLINK_UNCORRECTABLE", 226: "CUDA_ERROR_CONTAINED",
        401: "CUDA_ERROR_ILLEGAL_STATE", 802: "CUDA_ERROR_SYSTEM_NOT_READY"}


def test_a_text_two_results_share_names_neither() -> None:
    assert CUDA[200]["text"] == CUDA[300]["text"]
    assert CUDA[200]["text"] not in _cuda_by_text()
    assert _cuda_by_text()["the operation cannot be performed in the present state"] == 401
    lookup = Lookup("cuda", "cuda_error", {}, text="reason")
    assert look_up(lookup, {"reason": CUDA[300]["text"]}) == ("unknown", {
        "catalogue_class": "unknown"})


def test_the_classifier_counts_repeats_of_one_cuda_error_across_wordings() -> None:
    c = Classifier("nvswitch")
    for line in (_line(V227, 401), _line(TORCH, 401), _line(V219, 401)):
        c.feed(line)
    (f,) = c.findings()  # one CUDA error, one finding, whichever wording printed it
    assert (f.code, f.fields["count"], f.fields["cuda_error"]) == ("multicast_team_failure", 3, 401)


def test_doctor_on_a_job_log_through_the_cli(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("\n".join([_line(V227, 2), NOT_READY[3], CONTAINED[0]]) + "\n",
                   encoding="utf-8")
    out, rc = run_json("doctor", "--fabric", "nvswitch", "--log", str(log))
    assert rc == 1
    assert [(f["code"], f["cuda_error"]) for f in out["findings"]] == [
        ("nvls_multicast_exhausted", 2), ("cuda_fabric_not_ready", 802),
        ("cuda_error_contained", 226)]

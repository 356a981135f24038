"""Every capture of tests/data/corpus/nvidia-smi parses, and gives the answer its provenance
(tests/data/corpus/PROVENANCE.md) says it shows; CSV query output; format detection."""

from __future__ import annotations

from typing import Any

import pytest

from nvfabric.facts.smi import SmiFormatError, detect, parse
from nvfabric.model.health import ZERO_UUID
from nvfabric.rules.verdict import Inputs, infer_fabric, verdict
from tests.cases import CORPUS

SMI = CORPUS / "nvidia-smi"

# file -> (format, GPU count, driver, (state, status, clique, cluster) of GPU 0, summary of
# GPU 0, verdict with the fabric kind inferred from the capture). From PROVENANCE.md.
READABLE: dict[str, tuple[Any, ...]] = {
    "hgx-h100-535.161.08-nvidia-smi-q.txt":
        ("text", 8, "535.161.08", ("completed", "success", None, None), None, "healthy"),
    "h100-passthrough-535.183.01-nvidia-smi-q.txt":
        ("text", 8, "535.183.01", ("completed", "success", None, None), None, "healthy"),
    "rtx4090-8gpu-535.154.05-nvidia-smi-q.txt":
        ("text", 8, "535.154.05", ("not_supported", None, None, None), None, "not_applicable"),
    "a10-535.129.03-nvidia-smi-q.txt":
        ("text", 1, "535.129.03", ("not_supported", None, None, None), None, "not_applicable"),
    "titanv-560.35.03-nvidia-smi-q.txt":
        ("text", 1, "560.35.03", ("not_supported", None, None, None), None, "not_applicable"),
    "hgx-h100-560.35.03-nvidia-smi-a-1gpu-slurm.txt":
        ("text", 1, "560.35.03", ("completed", "success", 0, ZERO_UUID), None, "healthy"),
    "fabric-in-progress-580-wide-columns-gpuop2511.txt":
        ("text", 1, None, ("in_progress", None, None, None), None, "pending"),
    "fabric-insufficient-resources-azhpc506.txt":
        ("text", 1, None,
         ("completed", "NVML_ERROR_INSUFFICIENT_RESOURCES", 0, ZERO_UUID), None, "unhealthy"),
    "gb200-fabric-unhealthy-grep-C3-dra626.txt":
        ("text", 1, None, ("completed", "success", 2, "00000000-0000-0000-0000-000000000001"),
         "unhealthy", "unhealthy"),
    "k8s-test-infra-hw-qx-gb200.xml":
        ("xml", 4, "580.173.02", ("completed", "success", 2,
                                  "00000001-0000-0000-0000-000000000001"), "healthy", "healthy"),
    "k8s-test-infra-hw-qx-b200.xml":
        ("xml", 8, "580.105.08", ("completed", "success", 0, ZERO_UUID), "healthy", "healthy"),
    "k8s-test-infra-hw-qx-h100.xml":
        ("xml", 8, "580.105.08", ("completed", "success", 0, ZERO_UUID), None, "healthy"),
    "k8s-test-infra-hw-qx-a100.xml":
        ("xml", 1, "570.148.08", ("not_supported", None, None, None), None, "not_applicable"),
    "k8s-test-infra-hw-qx-l40s.xml":
        ("xml", 1, "595.91.07", ("not_supported", None, None, None), None, "not_applicable"),
    "k8s-test-infra-hw-qx-t4.xml":
        ("xml", 1, "595.91.07", ("not_supported", None, None, None), None, "not_applicable"),
}

# Captures of other nvidia-smi commands: recognised and named, never mistaken for fabric state.
OTHERS: dict[str, str] = {
    "a100-sxm4-nvidia-smi-nvlink-status.txt": "nvlink --status",
    "gb200-nvidia-smi-nvlink-s-excerpt-k8stestinfra371.txt": "nvlink --status",
    "gb200-nvidia-smi-nvlink-info-excerpt-k8stestinfra371.txt": "nvlink -info",
    "h100-passthrough-vm-nvidia-smi-list-gpus.txt": "--list-gpus",
    "h100-passthrough-vm-nvidia-smi-topo-matrix.txt": "topo --matrix",
    "hgx-h100-550.90.07-nvidia-smi.txt": "default table",
    "geforce-525.125.06-nvidia-smi-err.txt": "default table",
    # The banner and header of an 8-GPU node's `nvidia-smi -q`, cut before the GPU sections:
    # a capture of no GPU certifies nothing (it was `not_applicable`, exit 0, before).
    "nvidia-smi-query-header-580.159.04-wide-columns-gpuop2511.txt": "text capture lists no GPU",
}


def test_every_capture_is_in_one_of_the_tables() -> None:
    assert sorted(p.name for p in SMI.iterdir()) == sorted([*READABLE, *OTHERS])


def _text(name: str) -> str:
    return (SMI / name).read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("name", sorted(READABLE))
def test_capture_parses_to_what_its_provenance_says(name: str) -> None:
    fmt, count, driver, first, summary, expected_verdict = READABLE[name]
    text = _text(name)
    assert detect(text) == fmt
    h = parse(text)
    assert (len(h.gpus), h.driver_version) == (count, driver)
    assert [g.index for g in h.gpus] == list(range(count))
    if first is not None:
        g = h.gpus[0]
        assert (g.state, g.status, g.clique_id, g.cluster_uuid) == first
        assert g.health_summary == summary
    v = verdict(Inputs(h.gpus, infer_fabric(h.gpus)))
    assert v.verdict == expected_verdict


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_other_nvidia_smi_outputs_are_named_not_misread(name: str) -> None:
    with pytest.raises(SmiFormatError, match=OTHERS[name]):
        parse(_text(name))


def test_gb200_xml_decodes_the_health_block_with_na_fields() -> None:
    g = parse(_text("k8s-test-infra-hw-qx-gb200.xml")).gpus[3]
    values = {f.name: f.value for f in g.health}
    assert values == {
        "degraded_bandwidth": "false", "route_recovery": "false", "route_unhealthy": "false",
        "access_timeout_recovery": "false", "incorrect_configuration": None,
        "partition_assigned": None,
    }
    assert g.name == "NVIDIA GB200" and g.uuid and g.uuid.startswith("GPU-")


def test_580_wide_columns_give_the_full_v3_health_list_as_na() -> None:
    g = parse(_text("fabric-in-progress-580-wide-columns-gpuop2511.txt")).gpus[0]
    assert g.health_summary is None
    assert [f.name for f in g.health] == [
        "degraded_bandwidth", "route_recovery", "route_unhealthy", "access_timeout_recovery",
        "incorrect_configuration", "partition_assigned"]
    assert all(f.value is None for f in g.health)


def test_gpu_uuids_and_bus_ids_come_from_the_gpu_blocks() -> None:
    h = parse(_text("hgx-h100-535.161.08-nvidia-smi-q.txt"))
    assert h.gpus[1].pci == "00000000:3B:00.0"
    assert h.gpus[1].uuid == "GPU-00000000-0000-0000-0000-000000000002"
    assert h.gpus[1].name == "NVIDIA H100 80GB HBM3"


CSV_HEADER = "index, uuid, fabric.state, fabric.status, fabric.cliqueId, fabric.clusterUuid\n"


def test_csv_query_output_with_header() -> None:
    text = CSV_HEADER + (
        "0, GPU-a, Completed, Success, 7, 5B1E0F8C-2D7A-4C39-8E61-0D5F3A9B7C21\n"
        "1, GPU-b, Completed, Insufficient Resources, 0, 00000000-0000-0000-0000-000000000000\n"
        "2, GPU-c, In Progress, [N/A], [N/A], [N/A]\n"
    )
    assert detect(text) == "csv"
    h = parse(text)
    assert [(g.index, g.uuid, g.state, g.status, g.clique_id) for g in h.gpus] == [
        (0, "GPU-a", "completed", "success", 7),
        (1, "GPU-b", "completed", "NVML_ERROR_INSUFFICIENT_RESOURCES", 0),
        (2, "GPU-c", "in_progress", None, None),
    ]
    assert h.gpus[0].cluster_uuid == "5b1e0f8c-2d7a-4c39-8e61-0d5f3a9b7c21"


def test_csv_without_header_uses_the_documented_column_order() -> None:
    h = parse("3, GPU-d, N/A, N/A, N/A, N/A\n")
    assert [(g.index, g.state, g.status) for g in h.gpus] == [(3, "not_supported", None)]


def test_csv_with_other_columns_ignores_them() -> None:
    h = parse("index, name, pci.bus_id, fabric.state, fabric.status, fabric.cliqueId, "
              "fabric.clusterUuid, power.draw\n0, NVIDIA B200, 00000000:18:00.0, In Progress, "
              "N/A, N/A, N/A, 120 W\n")
    g = h.gpus[0]
    assert (g.name, g.pci, g.state) == ("NVIDIA B200", "00000000:18:00.0", "in_progress")
    assert infer_fabric(h.gpus) == "nvlink5"


@pytest.mark.parametrize(("text", "missing"), [
    ("index, fabric.status, fabric.cliqueId, fabric.clusterUuid\n0, Success, 0, [N/A]\n",
     "fabric.state"),
    ("index, name\n0, NVIDIA H100 80GB HBM3\n",
     "fabric.state, fabric.status, fabric.cliqueId, fabric.clusterUuid"),
], ids=["no-state", "no-fabric-column"])
def test_csv_without_the_state_column_is_refused_naming_what_it_lacks(text: str,
                                                                       missing: str) -> None:
    """No verdict can be told without the state: refused by the reader, naming each column
    the capture lacks, what it has and the capture line."""
    with pytest.raises(SmiFormatError) as err:
        parse(text)
    assert f"lacks the column{'s' if ',' in missing else ''} {missing} (it has: index" \
        in str(err.value)
    assert "every verdict needs fabric.state" in str(err.value)
    assert "--query-gpu=index,uuid,pci.bus_id,fabric.state,fabric.status" in str(err.value)


@pytest.mark.parametrize(("text", "unread"), [
    ("index, pci.bus_id, fabric.state\n0, 00000000:18:00.0, Completed\n",
     ("fabric.status", "fabric.cliqueId", "fabric.clusterUuid")),
    ("fabric.state, fabric.status\nCompleted, Success\n",
     ("fabric.cliqueId", "fabric.clusterUuid")),
    ("index, name, fabric.state, fabric.status\n0, NVIDIA GB300, In Progress, N/A\n",
     ("fabric.cliqueId", "fabric.clusterUuid")),
    ("index, fabric.state [enum], fabric.cliqueId, fabric.clusterUuid\n0, Completed, 0, [N/A]\n",
     ("fabric.status",)),
    (CSV_HEADER + "0, GPU-a, In Progress, N/A, N/A, N/A\n", ()),
], ids=["state-only", "no-clique-no-cluster", "gb300-in-progress", "units-suffix", "all"])
def test_csv_columns_it_lacks_are_unread_not_na(text: str, unread: tuple[str, ...]) -> None:
    """S08's kind, read on what the capture has: the columns it lacks are named in
    ``unread`` (values None on every GPU); judging or refusing is the verdict's
    (rules.verdict.columns_needed, tests/cli/test_status.py)."""
    h = parse(text)
    assert h.unread == unread
    for column in unread:
        attr = {"fabric.status": "status", "fabric.cliqueId": "clique_id",
                "fabric.clusterUuid": "cluster_uuid"}[column]
        assert all(getattr(g, attr) is None for g in h.gpus)


def test_text_and_xml_captures_have_no_unread_columns() -> None:
    assert parse(_text("hgx-h100-535.161.08-nvidia-smi-q.txt")).unread == ()


@pytest.mark.parametrize("text", ["", "hello\n", "<html></html>", "index, uuid\n0, GPU-a\n"],
                         ids=["empty", "prose", "other-xml", "csv-without-fabric"])
def test_unreadable_text_is_a_format_error(text: str) -> None:
    with pytest.raises(SmiFormatError):
        parse(text)


def test_malformed_xml_is_a_format_error() -> None:
    with pytest.raises(SmiFormatError, match="malformed"):
        parse("<?xml version='1.0'?><nvidia_smi_log><gpu>")


# Tester report 9(a): a value nvidia-smi never prints was read as not_supported / an invented
# NVML error name, and the verdict came out healthy. Every capture format refuses it, naming
# the GPU row and the value.
@pytest.mark.parametrize(("text", "where", "value"), [
    (CSV_HEADER + "0, GPU-a, Completed, Success, 7, 5b1e0f8c-2d7a-4c39-8e61-0d5f3a9b7c21\n"
     "1, GPU-bbbb, Bogus, Whatever, x, y\n", "CSV row 2", "'Bogus'"),
    ("1, GPU-bbbb, Completed, Whatever, 3, 5b1e0f8c-2d7a-4c39-8e61-0d5f3a9b7c21\n",
     "CSV row 1", "'Whatever'"),
    (CSV_HEADER + "1, GPU-b, Completed, Success, 3, y\n", "CSV row 1", "'y'"),
    (CSV_HEADER + "1, GPU-b, Completed, Success, x, [N/A]\n", "CSV row 1", "'x'"),
    ("GPU 00000000:18:00.0\n    Fabric\n        State : Finished\n        Status : Success\n",
     "GPU 0 (00000000:18:00.0)", "'Finished'"),
    ("<?xml version='1.0'?><nvidia_smi_log><gpu id='00000000:19:00.0'><fabric>"
     "<state>Completed</state><status>Success</status><cliqueId>1</cliqueId>"
     "<clusterUuid>not-a-uuid</clusterUuid></fabric></gpu></nvidia_smi_log>",
     "GPU 0 (00000000:19:00.0)", "'not-a-uuid'"),
], ids=["csv-state", "csv-status-headerless", "csv-cluster-uuid", "csv-clique",
        "text-state", "xml-cluster-uuid"])
def test_unrecognised_fabric_values_are_refused_naming_row_and_value(
    text: str, where: str, value: str
) -> None:
    with pytest.raises(SmiFormatError) as err:
        parse(text)
    assert str(err.value).startswith(where + ":") and value in str(err.value)


def test_csv_row_with_more_fields_than_the_header_is_refused() -> None:
    with pytest.raises(SmiFormatError, match="CSV row 1: 7 fields"):
        parse(CSV_HEADER + "1, GPU-bbbb, Completed, Success, 3, "
                           "5b1e0f8c-2d7a-4c39-8e61-0d5f3a9b7c21, z\n")


def test_every_nvml_error_word_nvidia_smi_prints_is_still_read() -> None:
    text = CSV_HEADER + "".join(
        f"{i}, GPU-{i}, Completed, {word}, 0, {ZERO_UUID}\n"
        for i, word in enumerate(("Success", "Insufficient Resources", "Unknown Error",
                                  "NVML_ERROR_TIMEOUT", "Not Ready", "[N/A]")))
    assert [g.status for g in parse(text).gpus] == [
        "success", "NVML_ERROR_INSUFFICIENT_RESOURCES", "NVML_ERROR_UNKNOWN",
        "NVML_ERROR_TIMEOUT", "NVML_ERROR_NOT_READY", None]

"""Captures that do not say what the verdict would read: an ``nvidia-smi -q`` cut inside a
GPU's section is refused naming the GPU (it read as ``not_applicable``, fabric ``none``), and
a capture that names no GPU product is judged for an unknown fabric kind with a
``capture_column_missing`` finding (a ``--query-gpu`` CSV without ``name`` read as an NVSwitch
system on a B200 node). The cut and column-less variants are made here from the corpus
captures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvfabric.facts.smi import parse_xml
from tests.cases import CORPUS
from tests.conftest import run_cli, run_json

SMI = CORPUS / "nvidia-smi"
H100_Q = SMI / "hgx-h100-535.161.08-nvidia-smi-q.txt"
B200_XML = SMI / "k8s-test-infra-hw-qx-b200.xml"


def _refused(path: Path) -> str:
    proc = run_cli("status", "--from-nvidia-smi", str(path))
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"nvfabric: input_unreadable: {path}: "), lines[0]
    return lines[0]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _cut_at(pattern: str, nth: int = 0, after: int = 0) -> str:
    """The H100 capture up to (not including) the ``nth`` line matching ``pattern``, plus
    ``after`` lines."""
    lines = _lines(H100_Q)
    at = [i for i, ln in enumerate(lines) if re.search(pattern, ln)][nth]
    return "".join(lines[: at + after])


@pytest.mark.parametrize(("text", "says"), [
    # the banner and the first GPU's header only: cut before its Product Name
    (lambda: _cut_at(r"Product Name"), "GPU 0 (00000000:19:00.0): the capture has its header "
     "but neither its Product Name nor its Fabric section"),
    # cut mid-way through the first GPU, after its name, before its Fabric section
    (lambda: _cut_at(r"^    Fabric"), "GPU 0 (00000000:19:00.0): no Fabric section where the "
     "capture lists 1 of the 8 attached GPUs"),
    # cut inside the second GPU: the first read whole
    (lambda: _cut_at(r"^    Fabric", nth=1), "GPU 1 (00000000:3B:00.0): no Fabric section "
     "where other GPUs of the capture have one"),
    # cut before the third GPU's name: its header alone
    (lambda: _cut_at(r"Product Name", nth=2), "GPU 2 (00000000:4C:00.0): the capture has its "
     "header but neither"),
], ids=["before-first-name", "before-first-fabric", "inside-second-gpu", "before-third-name"])
def test_a_q_capture_cut_inside_a_gpu_is_refused_naming_it(tmp_path: Path, text, says) -> None:
    path = tmp_path / "cut.txt"
    path.write_text(text())
    assert says in _refused(path)


def test_the_whole_q_capture_is_still_judged() -> None:
    out, rc = run_json("status", "--from-nvidia-smi", str(H100_Q))
    assert (out["verdict"], rc, out["fabric"], out["fabric_source"]) == (
        "healthy", 0, "nvswitch", "inferred")


def _d_fabric(path: Path) -> Path:
    """``nvidia-smi -q -d FABRIC`` of the H100 node: the banner, each GPU's header and its
    Fabric section, no Product Name."""
    keep, inside = [], False
    for line in _lines(H100_Q):
        if line.startswith("GPU ") or not line.startswith(" "):
            keep.append(line)
            inside = False
        elif line.startswith("    Fabric"):
            keep.append(line)
            inside = True
        elif inside and line.startswith("        "):
            keep.append(line)
        else:
            inside = False
    path.write_text("".join(keep))
    return path


def _csv(path: Path, columns: tuple[str, ...]) -> Path:
    """The B200 XML capture's GPUs as ``--query-gpu=COLUMNS --format=csv``."""
    health = parse_xml(B200_XML.read_text())
    value = {"index": lambda g: str(g.index), "name": lambda g: g.name,
             "uuid": lambda g: g.uuid, "pci.bus_id": lambda g: g.pci,
             "fabric.state": lambda g: g.state.replace("_", " ").title(),
             "fabric.status": lambda g: (g.status or "N/A").title(),
             "fabric.cliqueId": lambda g: str(g.clique_id),
             "fabric.clusterUuid": lambda g: g.cluster_uuid}
    rows = [", ".join(columns)] + [", ".join(value[c](g) for c in columns) for g in health.gpus]
    path.write_text("\n".join(rows) + "\n")
    return path


FIELDS = ("index", "uuid", "pci.bus_id", "fabric.state", "fabric.status", "fabric.cliqueId",
          "fabric.clusterUuid")


def test_a_csv_without_the_name_column_is_of_an_unknown_kind_not_nvswitch(
        tmp_path: Path) -> None:
    out, _ = run_json("status", "--from-nvidia-smi", str(_csv(tmp_path / "b200.csv", FIELDS)))
    assert (out["fabric"], out["fabric_source"]) == (None, "unknown")
    (f,) = [f for f in out["findings"] if f["code"] == "capture_column_missing"]
    assert (f["severity"], f["columns"]) == ("info", ["name"])
    assert "cannot be told" in f["message"] and "--fabric" in f["hint"]
    assert "nvswitch" not in " ".join(out["reasons"])
    named, _ = run_json("status", "--from-nvidia-smi",
                        str(_csv(tmp_path / "named.csv", ("index", "name", *FIELDS[1:]))))
    assert (named["fabric"], named["fabric_source"]) == ("nvlink5", "inferred")
    assert not [f for f in named["findings"] if f["code"] == "capture_column_missing"]


def test_a_q_d_fabric_capture_is_judged_for_an_unknown_kind(tmp_path: Path) -> None:
    out, rc = run_json("status", "--from-nvidia-smi", str(_d_fabric(tmp_path / "d.txt")))
    assert (out["verdict"], rc, out["fabric"], out["fabric_source"]) == (
        "healthy", 0, None, "unknown")
    assert len(out["gpus"]) == 8
    assert [f["columns"] for f in out["findings"] if f["code"] == "capture_column_missing"] \
        == [["name"]]
    text = run_cli("status", "--from-nvidia-smi", str(tmp_path / "d.txt")).stdout
    assert text.startswith("healthy  fabric unknown (not told by the capture)"), text


def test_a_fabric_state_only_csv_is_read(tmp_path: Path) -> None:
    """``--query-gpu=fabric.state``: GPUs In Progress are pending; Completed ones need the
    status a one-column query did not ask for (S08), so that capture is refused naming it,
    not as "not an nvidia-smi capture"."""
    pending = tmp_path / "pending.csv"
    pending.write_text("fabric.state\nIn Progress\nIn Progress\n")
    out, rc = run_json("status", "--from-nvidia-smi", str(pending))
    assert (out["verdict"], rc, out["source"], len(out["gpus"])) == (
        "pending", 1, "nvidia-smi-csv", 2)
    done = _csv(tmp_path / "done.csv", ("fabric.state",))
    line = _refused(done)
    assert "CSV lacks the columns fabric.status" in line
    assert "Completed GPUs 0, 1, 2, 3, 4, 5, 6, 7" in line

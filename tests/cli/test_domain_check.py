"""`nvfabric domain check` on synthetic status reports of 72 racks x 18 GB200 trays with
planted faults: a GPU not attached, a tray of another domain, a clique split, an oversized node
list, a missing report, two HGX B200 nodes in one list."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from nvfabric.model.words import plural
from nvfabric.rules.imex import domain as fleet
from tests.conftest import run_cli, run_json

RACKS, TRAYS = 72, 18


def cluster_uuid(rack: int) -> str:
    return f"{rack + 1:08x}-0000-4000-8000-{rack + 1:012x}"


def tray_name(rack: int, tray: int) -> str:
    return f"gb-r{rack:02d}n{tray:02d}"


def report(rack: int, tray: int, entries: list[str]) -> dict[str, Any]:
    """One `nvfabric status --json` report of a healthy GB200 tray (4 GPUs), with the
    optional keys the fleet check reads: hostname, fabric, imex.node_list."""
    return {
        "verdict": "healthy",
        "hostname": tray_name(rack, tray),
        "fabric": "mnnvl",
        "imex": {"node_list": entries},
        "gpus": [
            {"index": i, "uuid": f"GPU-{rack:04d}{tray:04d}-0000-0000-0000-00000000000{i}",
             "state": "completed", "status": "success", "clique_id": 32766,
             "cluster_uuid": cluster_uuid(rack), "health_summary": "healthy"}
            for i in range(4)
        ],
        "findings": [],
    }


def planted_fleet() -> list[dict[str, Any]]:
    out = []
    for rack in range(RACKS):
        entries = [tray_name(rack, t) for t in range(TRAYS)]
        if rack == 30:
            entries.append(tray_name(31, 0))  # a 19-entry list spanning two racks
        for tray in range(TRAYS):
            if rack == 40 and tray == 17:
                continue  # no report collected from this tray
            r = report(rack, tray, entries)
            if rack == 3 and tray == 5:
                r["gpus"][2].update(state="in_progress", status=None,
                                    cluster_uuid="00000000-0000-0000-0000-000000000000")
            if rack == 10 and tray == 7:
                for g in r["gpus"]:
                    g["cluster_uuid"] = cluster_uuid(11)  # cabled to the next rack's domain
            if rack == 20 and tray == 0:
                for g in r["gpus"]:
                    g["clique_id"] = 7
            out.append(r)
    hgx = ["hgx-b200-a", "hgx-b200-b"]
    for i, name in enumerate(hgx):
        out.append({"verdict": "healthy", "hostname": name, "fabric": "nvlink5",
                    "imex": {"node_list": hgx},
                    "gpus": [{"index": g, "uuid": None, "state": "completed",
                              "status": "success", "clique_id": 0,
                              "cluster_uuid": f"{900 + i:08x}-0000-0000-0000-000000000000",
                              "health_summary": "healthy"} for g in range(8)]})
    return out


def by_code(result: fleet.FleetResult) -> dict[str, set[str]]:
    """finding code -> the node names its domain holds (first node list entry names it)."""
    out: dict[str, set[str]] = {}
    for d in result.domains:
        for f in d.findings:
            out.setdefault(f.code, set()).add(d.nodes[0] if d.nodes else d.key)
    return out


@pytest.fixture(scope="module")
def result() -> fleet.FleetResult:
    reports = [fleet.node_from_status(r, f"r{i}") for i, r in enumerate(planted_fleet())]
    return fleet.check(reports, 18)


def test_every_rack_is_one_domain(result: fleet.FleetResult) -> None:
    assert result.reports == RACKS * TRAYS - 1 + 2
    assert len(result.domains) == RACKS + 1
    assert {d.grouped_by for d in result.domains} == {"node list"}


def test_planted_faults_are_found_and_nothing_else(result: fleet.FleetResult) -> None:
    found = by_code(result)
    assert found == {
        "domain_gpus_not_attached": {"gb-r03n00"},
        "domain_cluster_uuid_split": {"gb-r10n00"},
        "domain_clique_split": {"gb-r20n00"},
        "domain_size_mismatch": {"gb-r30n00"},
        "domain_report_missing": {"gb-r30n00", "gb-r40n00"},
        "domain_not_nvlink_domain": {"hgx-b200-a"},
    }
    bad = sorted(d.nodes[0] for d in result.domains if not d.ok)
    assert bad == ["gb-r03n00", "gb-r10n00", "gb-r20n00", "gb-r30n00", "hgx-b200-a"]
    assert not result.ok


def _finding(result: fleet.FleetResult, code: str) -> Any:
    return next(f for f in result.all_findings() if f.code == code)


def test_faults_name_the_nodes(result: fleet.FleetResult) -> None:
    assert _finding(result, "domain_gpus_not_attached").fields["nodes"] == {
        "gb-r03n05": ["GPU 2: state in_progress"]}
    split = _finding(result, "domain_cluster_uuid_split")
    assert split.fields["nodes"] == {"gb-r10n07": [cluster_uuid(11)]}
    assert split.fields["cluster_uuid"] == cluster_uuid(10)
    assert list(_finding(result, "domain_clique_split").fields["nodes"]) == ["gb-r20n00"]
    missing = [f for f in result.all_findings() if f.code == "domain_report_missing"]
    assert sorted(tuple(f.fields["entries"]) for f in missing) == [("gb-r31n00",),
                                                                   ("gb-r40n17",)]
    size = _finding(result, "domain_size_mismatch")
    assert (size.severity, size.fields["count"]) == ("error", 19)
    assert "nvlink5 x2" in _finding(result, "domain_not_nvlink_domain").message


def test_without_node_lists_nodes_are_grouped_by_cluster_uuid() -> None:
    raw = [report(r, t, []) for r in range(2) for t in range(TRAYS)]
    for r in raw:
        del r["imex"]
    res = fleet.check([fleet.node_from_status(r, "x") for r in raw])
    assert [(d.grouped_by, len(d.nodes)) for d in res.domains] == [("ClusterUUID", 18)] * 2
    assert res.ok


def test_node_list_files_define_the_domains() -> None:
    raw = [report(0, t, []) for t in range(TRAYS)]
    res = fleet.check([fleet.node_from_status(r, "x") for r in raw],
                      node_lists={"rack0": [tray_name(0, t) for t in range(TRAYS)] + ["gb-x"]})
    assert by_code(res) == {"domain_size_mismatch": {"gb-r00n00"},
                            "domain_report_missing": {"gb-r00n00"}}


def test_a_partial_node_list_is_a_warning_only() -> None:
    names = [tray_name(0, t) for t in range(4)]
    res = fleet.check([fleet.node_from_status(report(0, t, names), "x") for t in range(4)])
    (f,) = res.all_findings()
    assert (f.code, f.severity, res.ok) == ("domain_size_mismatch", "warning", True)


def test_not_a_status_report_is_refused() -> None:
    with pytest.raises(ValueError, match="not an nvfabric status report"):
        fleet.node_from_status({"fabric": "mnnvl"}, "x")


def test_cli_on_a_directory_of_1296_reports(tmp_path: Path) -> None:
    for r in planted_fleet():
        (tmp_path / f"{r['hostname']}.json").write_text(json.dumps(r))
    out, rc = run_json("domain", "check", str(tmp_path))
    assert rc == 1
    assert out["reports"] == RACKS * TRAYS + 1
    assert sum(1 for d in out["domains"] if not d["ok"]) == 5
    codes = {f["code"] for f in out["findings"]}
    assert "domain_not_nvlink_domain" in codes and "domain_cluster_uuid_split" in codes


def test_cli_reads_json_lines_with_pdsh_prefixes(tmp_path: Path) -> None:
    names = [tray_name(0, t) for t in range(TRAYS)]
    lines = [f"{n}: " + json.dumps(report(0, t, names)) for t, n in enumerate(names)]
    path = tmp_path / "all.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out, rc = run_json("domain", "check", str(path))
    assert (rc, out["ok"], out["domains"][0]["count"]) == (0, True, 18)
    proc = run_cli("domain", "check", str(path))
    assert proc.returncode == 0 and "18 reports read, 1 domain\n" in proc.stdout


def test_cli_bad_input_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = run_cli("domain", "check", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.startswith("nvfabric: input_unreadable:")
    assert "Traceback" not in proc.stderr


def test_cli_reads_concatenated_indented_reports_from_stdin() -> None:
    names = [tray_name(1, t) for t in range(TRAYS)]
    text = "".join(json.dumps(report(1, t, names), indent=2) + "\n" for t in range(TRAYS))
    proc = run_cli("domain", "check", "-", "--json", stdin=text)
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["reports"], out["ok"]) == (0, TRAYS, True)


# Tester report 11: reports collected with `kubectl logs --prefix` (or pdsh, indented) lost
# their prefix and were named -:1, -:2 ...
@pytest.mark.parametrize("prefix", ["[pod/nvfabric-{n}/nvfabric] ", "{n}: "],
                         ids=["kubectl-prefix", "pdsh"])
def test_cli_names_reports_without_hostname_by_their_line_prefix(prefix: str) -> None:
    names = [tray_name(2, t) for t in range(3)]
    text = ""
    for t, n in enumerate(names):
        r = report(2, t, names)
        del r["hostname"]
        text += "".join(prefix.format(n=n) + line + "\n"
                        for line in json.dumps(r, indent=2).splitlines())
    out, rc = run_json("domain", "check", "-", stdin=text)
    (d,) = out["domains"]
    expected = [prefix.format(n=n).strip().strip("[]:").strip() for n in names]
    assert (rc, d["nodes"]) == (0, expected)
    if prefix.startswith("{n}"):  # pdsh names are the host names: every entry reported
        assert d["missing_reports"] == []


# Tester report 11: three copies of one report counted as three nodes.
def test_duplicate_reports_are_flagged_and_counted_once(tmp_path: Path) -> None:
    names = [tray_name(0, t) for t in range(2)]
    one = report(0, 0, names)
    text = "\n".join(json.dumps(r) for r in (one, one, one, report(0, 1, names))) + "\n"
    out, rc = run_json("domain", "check", "-", stdin=text)
    assert (rc, out["reports"], out["domains"][0]["count"]) == (0, 2, 2)
    assert (out["inputs"], out["duplicates"]) == (4, 2)
    (dup,) = [f for f in out["findings"] if f["code"] == "domain_report_duplicate"]
    assert dup["severity"] == "warning" and "2 reports repeat" in dup["message"]
    text = run_cli("domain", "check", "-", stdin=text).stdout
    assert "4 reports read, 2 duplicates, 1 domain" in text
    assert ": 2 nodes" in text


# Wording: "1 reports", "1 entries" in the fleet check and IMEX node list output.
def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    one = report(0, 0, [tray_name(0, 0)])
    text = "\n".join(json.dumps(r) for r in (one, one)) + "\n"
    proc = run_cli("domain", "check", "-", stdin=text)
    assert "2 reports read, 1 duplicate, 1 domain" in proc.stdout
    assert ": 1 node " in proc.stdout
    out, _ = run_json("domain", "check", "-", stdin=text)
    (dup,) = [f for f in out["findings"] if f["code"] == "domain_report_duplicate"]
    assert dup["message"].startswith("1 report repeats")
    lists = tmp_path / "nodes.cfg"
    lists.write_text(f"{tray_name(0, 0)}\ngb-absent\n")
    out, _ = run_json("domain", "check", "--node-list", str(lists), "-", stdin=text)
    messages = [f["message"] for f in out["findings"]]
    assert any("no report from 1 node list entry: gb-absent" in m for m in messages), messages
    assert plural(1, "node list entry") == "1 node list entry"
    assert plural(3, "node list entry") == "3 node list entries"


# "gpus[0]: expected an object, got NoneType": a null says missing.
@pytest.mark.parametrize(("where", "named"), [("gpu", "gpus[0]"),
                                              ("node_list", "imex.node_list[1]")])
def test_null_where_a_value_is_needed_says_missing(where: str, named: str) -> None:
    r = report(0, 0, ["gb-1", "gb-2"])
    if where == "gpu":
        r["gpus"][0] = None
    else:
        r["imex"] = {"node_list": ["gb-1", None]}
    with pytest.raises(ValueError, match=rf"^x: {re.escape(named)}: missing \(null\)") as err:
        fleet.node_from_status(r, "x")
    assert "NoneType" not in str(err.value)


@pytest.mark.parametrize(("key", "value", "named"), [
    ("imex", {"node_list": "notalist"}, "imex.node_list"),
    ("imex", {"node_list": ["gb-1", 7]}, "imex.node_list[1]"),
    ("imex", "x", "imex"),
    ("hostname", ["gb-1"], "hostname"),
    ("addresses", "192.0.2.1", "addresses"),
    ("fabric", 5, "fabric"),
], ids=["node-list-string", "node-list-number", "imex-string", "hostname-list",
        "addresses-string", "fabric-number"])
def test_wrong_json_types_are_an_input_error_naming_the_key(key: str, value: Any,
                                                            named: str) -> None:
    r = report(0, 0, [])
    r[key] = value
    with pytest.raises(ValueError, match=rf"^x: {re.escape(named)}: expected"):
        fleet.node_from_status(r, "x")


@pytest.mark.parametrize(("field", "value"), [("state", 3), ("clique_id", "7"),
                                              ("cluster_uuid", ["a"]), ("index", True)])
def test_wrong_gpu_field_types_are_refused(field: str, value: Any) -> None:
    r = report(0, 0, [])
    r["gpus"][1][field] = value
    with pytest.raises(ValueError, match=rf"gpus\[1\]\.{field}: expected"):
        fleet.node_from_status(r, "x")


def test_cli_wrong_type_is_exit_2_naming_the_file_and_key(tmp_path: Path) -> None:
    r = report(0, 0, [])
    r["imex"] = {"node_list": "notalist"}
    path = tmp_path / "gb.json"
    path.write_text(json.dumps(r))
    out, rc = run_json("domain", "check", str(path))
    assert rc == 2
    assert out["error"]["message"].startswith(f"{path}: imex.node_list: expected a list")


# Tester report 12: README says a partial domain is a warning; grouped by ClusterUUID it was
# info.
def test_fewer_trays_than_the_domain_is_a_warning_however_grouped() -> None:
    raw = [report(0, t, []) for t in range(4)]
    for r in raw:
        del r["imex"]
    res = fleet.check([fleet.node_from_status(r, "x") for r in raw])
    (f,) = res.all_findings()
    assert (f.code, f.severity, res.ok) == ("domain_size_mismatch", "warning", True)


# Tester report 1: a host name with markup crashed the human output; a node list id followed
# by ':' became an emoji.
def test_cli_human_output_prints_report_values_literally(tmp_path: Path) -> None:
    r = report(0, 0, [])
    r["hostname"] = "gb-[/bold]x"
    r["imex"] = {"node_list": ["gb-[/bold]x"], "node_list_id": "sha256:abc"}
    path = tmp_path / "gb.json"
    path.write_text(json.dumps(r))
    proc = run_cli("domain", "check", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "node list sha256:abc: 1 node (size 18)" in proc.stdout


def hgx_report(name: str, fabric: str, gpus: int = 8, **gpu: Any) -> dict[str, Any]:
    """A healthy HGX baseboard's status report: zero ClusterUUID, clique 0, no imex section."""
    return {"verdict": "healthy", "hostname": name, "fabric": fabric,
            "gpus": [{"index": g, "uuid": f"GPU-{name}-{g}", "state": "completed",
                      "status": "success", "clique_id": 0,
                      "cluster_uuid": "00000000-0000-0000-0000-000000000000",
                      "health_summary": "healthy", **gpu} for g in range(gpus)]}


def test_hgx_nodes_are_each_their_own_healthy_single_node_domain() -> None:
    raw = [hgx_report(f"h100-{i}", "nvswitch") for i in range(3)]
    raw += [hgx_report(f"b200-{i}", "nvlink5") for i in range(2)]
    res = fleet.check([fleet.node_from_status(r, f"r{i}") for i, r in enumerate(raw)])
    assert res.ok and res.all_findings() == ()
    assert [(d.grouped_by, d.nodes, d.expected_size) for d in res.domains] == [
        ("node", (r["hostname"],), 1) for r in raw]
    assert {d.cluster_uuid for d in res.domains} == {"00000000-0000-0000-0000-000000000000"}


def test_hgx_single_node_domains_next_to_gb200_racks() -> None:
    raw = [report(0, t, []) for t in range(TRAYS)] + [hgx_report("h100-a", "nvswitch"),
                                                      hgx_report("h100-b", "nvswitch")]
    for r in raw[:TRAYS]:
        del r["imex"]
    res = fleet.check([fleet.node_from_status(r, "x") for r in raw])
    assert res.ok
    assert sorted((d.grouped_by, len(d.nodes), d.expected_size) for d in res.domains) == [
        ("ClusterUUID", 18, 18), ("node", 1, 1), ("node", 1, 1)]


def test_an_hgx_node_still_registering_is_named() -> None:
    bad = hgx_report("b200-x", "nvlink5", state="in_progress", status=None)
    res = fleet.check([fleet.node_from_status(bad, "x"),
                       fleet.node_from_status(hgx_report("b200-y", "nvlink5"), "y")])
    (f,) = res.all_findings()
    assert (f.code, list(f.fields["nodes"])) == ("domain_gpus_not_attached", ["b200-x"])
    assert "domain_not_nvlink_domain" not in {x.code for x in res.all_findings()}


def test_cli_on_status_reports_of_two_simulated_hgx_nodes(tmp_path: Path) -> None:
    from nvfabric.simulate.fakebin import fabricmanager
    from tests.runkit import sim

    paths = []
    for name, profile in (("h100", "hgx-h100"), ("b200", "dgx-b200")):
        root = sim(tmp_path, profile, name=name)
        fabricmanager._set_gpus(str(root), "completed")  # what the fake fabric manager does
        out = run_cli("status", "--root", str(root), "--json")
        path = tmp_path / f"{name}.json"
        path.write_text(out.stdout, encoding="utf-8")
        paths.append(str(path))
    data, rc = run_json("domain", "check", *paths)
    assert (rc, data["ok"], data["findings"]) == (0, True, [])
    assert [(d["grouped_by"], d["count"], d["expected_size"]) for d in data["domains"]] == [
        ("node", 1, 1), ("node", 1, 1)]


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_reports_without_hostname_in_one_file_are_named_by_line_not_one_name(
        tmp_path: Path, layout: str) -> None:
    """Two HGX nodes' reports (no hostname) in one JSON Lines file or array: two nodes named
    by file and line/position (before: both named by the file's stem, and a duplicate-name
    warning told the operator to give each node its own host name)."""
    one, two = hgx_report("x", "nvswitch"), hgx_report("y", "nvlink5")
    for r, tag in ((one, "a"), (two, "b")):
        r.pop("hostname", None)
        for i, g in enumerate(r["gpus"]):
            g["uuid"] = f"GPU-{tag}-{i}"
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps([one, two]) if layout == "array"
                    else json.dumps(one) + "\n" + json.dumps(two) + "\n", encoding="utf-8")
    out, rc = run_json("domain", "check", str(path))
    assert rc == 0, out
    assert not [f for f in out["findings"] if f["code"] == "domain_report_duplicate"]
    names = sorted(n for d in out["domains"] for n in d["nodes"])
    assert names == (["fleet:1", "fleet:2"] if layout == "jsonl" else ["fleet[0]", "fleet[1]"])
    packed = tmp_path / "fleet.json.gz"  # compressed, the same names (it was "fleet.json:1")
    packed.write_bytes(gzip.compress(path.read_bytes()))
    again, rc = run_json("domain", "check", str(packed))
    assert rc == 0 and sorted(n for d in again["domains"] for n in d["nodes"]) == names

"""nvidia-imex-ctl output: the captures of tests/data/corpus/imex (-N text of an 18-node
P6e-GB200, -N -j DEGRADED and UP), the -q query, unreachable nodes named, and the hard timeout
on a ctl that hangs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from nvfabric.facts.imex import ctl
from tests import runkit
from tests.cases import CORPUS
from tests.conftest import run_cli, run_json
from tests.runkit import until

IMEX = CORPUS / "imex"
TEXT_UP = IMEX / "aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt"
JSON_DEGRADED = IMEX / "dcgm-test-imex-ctl-N-j-degraded-580.30.json"
JSON_UP = IMEX / "dcgm-test-imex-ctl-N-j-up-oneline.json"


def test_eighteen_node_text_table_is_up() -> None:
    status = ctl.parse_domain(TEXT_UP.read_text())
    assert (status.state, status.source, len(status.nodes)) == ("UP", "text", 18)
    assert status.nodes[9].host == "198.51.100.10"
    assert {n.status for n in status.nodes} == {"READY"}
    assert {n.version for n in status.nodes} == {"570.172"}
    assert status.timestamp == "5/12/2025 06:08:10.580"
    assert (status.unreachable, status.bad_links) == ((), ())
    assert status.finding() is None


def test_degraded_json_names_the_nodes_nobody_reaches() -> None:
    status = ctl.parse_domain(JSON_DEGRADED.read_text())
    assert (status.state, status.source) == ("DEGRADED", "json")
    assert [(n.node_id, n.host, n.version) for n in status.nodes] == [
        (1, "198.51.100.2", "580.30"), (3, "198.51.100.1", "580.30")]
    assert status.unreachable == ("198.51.100.4 (node 0, no status reported)",
                                  "198.51.100.3 (node 6, no status reported)")
    f = status.finding()
    assert f is not None and f.code == "imex_domain_degraded"
    assert "198.51.100.3" in f.message and "198.51.100.4" in f.message


def test_one_line_up_json() -> None:
    status = ctl.parse_domain(JSON_UP.read_text())
    assert (status.state, len(status.nodes), status.nodes[0].host) == ("UP", 1, "")
    assert status.finding() is None


def test_text_table_with_a_lost_node_names_it() -> None:
    lines = TEXT_UP.read_text().splitlines()
    out = []
    for line in lines:
        if line.startswith("Node #4 "):
            line = line.replace("READY       ", "UNAVAILABLE ")
        elif line.strip().split()[:1] and line.strip().split()[0].isdigit():
            cells = line.split()
            if len(cells) == 19:
                cells[1 + 4] = "I"
                line = "      " + "   ".join(cells)
        elif line.startswith("Domain State"):
            line = "Domain State: DEGRADED"
        out.append(line)
    status = ctl.parse_domain("\n".join(out) + "\n")
    assert status.state == "DEGRADED"
    assert status.unreachable[0] == "198.51.100.5 (node 4)"
    assert "node 0 -> node 4: invalid (not reachable)" in status.bad_links
    assert status.nodes[4].status == "UNAVAILABLE"


@pytest.mark.parametrize("text", ["", "Nodes:\n", "{\"nodes\": {}}", "{not json"])
def test_unparseable_output_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        ctl.parse_domain(text)


@pytest.mark.parametrize(("text", "ready"), [("READY\n", True), ("  READY  \n", True),
                                             ("NOT READY\n", False), ("", False),
                                             ("UNAVAILABLE\n", False)])
def test_query_output(text: str, ready: bool) -> None:
    assert ctl.parse_query(text) is ready


def test_ctl_argv_is_built_from_paths_only() -> None:
    with pytest.raises(ValueError):
        ctl.domain_argv("nvidia-imex-ctl", "/etc/nvidia-imex/config.cfg")


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-imex-ctl"
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return str(path)


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its new parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_hanging_ctl_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    ctl_path = _script(tmp_path, f"sleep 300 &\necho $! > {marker}\nwait\n")
    # 5 s: the script must have started its child and written the marker before the kill,
    # however slow a loaded machine starts sh
    result = ctl.run_ctl((ctl_path, "-q"), timeout_s=5)
    assert result.timed_out and result.rc is None
    child = int(marker.read_text())
    until(lambda: _dead(child), "the hung ctl's child killed")


def test_a_ctl_call_in_flight_when_nvfabric_exits_is_killed(tmp_path: Path) -> None:
    # nvfabric run's readiness probe calls ctl in a worker thread; when run stops, the thread
    # is abandoned after a bounded join. The hung ctl (its own session) must not outlive it.
    marker = tmp_path / "ctl.pid"
    ctl_path = _script(tmp_path, f"echo $$ > {marker}\nexec sleep 300\n")
    code = (
        "import sys, threading, time\n"
        "from nvfabric.facts.imex import ctl\n"
        f"t = threading.Thread(target=ctl.run_ctl, args=(({ctl_path!r}, '-q'), 60),"
        " daemon=True)\n"
        "t.start()\n"
        # the pid written, not only the file made: `echo $$ > F` creates F before it writes
        f"while not __import__('os').path.exists({str(marker)!r}) or not open({str(marker)!r})"
        ".read().strip(): time.sleep(0.01)\n"
        "sys.exit(0)\n"
    )
    runkit.run([sys.executable, "-c", code], timeout=60, check=True)
    pid = int(marker.read_text())
    until(lambda: _dead(pid), "the in-flight nvidia-imex-ctl killed with nvfabric's exit")


def test_domain_command_reads_saved_outputs() -> None:
    out, rc = run_json("imex", "domain", "--from-file", str(JSON_DEGRADED))
    assert (rc, out["state"], out["findings"][0]["code"]) == (1, "DEGRADED",
                                                            "imex_domain_degraded")
    out, rc = run_json("imex", "domain", "--from-file", str(TEXT_UP))
    assert (rc, out["state"], len(out["nodes"])) == (0, "UP", 18)


def test_domain_command_times_out_on_a_hanging_ctl(tmp_path: Path) -> None:
    ctl_path = _script(tmp_path, "sleep 300\n")
    out, rc = run_json("imex", "domain", "--ctl", ctl_path, "--timeout", "0.3",
                       "--config", "/etc/nvidia-imex/config.cfg")
    assert rc == 1
    assert out["error"]["code"] == "imex_ctl_timeout"


def test_domain_command_falls_back_to_the_text_table(tmp_path: Path) -> None:
    ctl_path = _script(tmp_path, 'case "$*" in *-j*) echo "usage"; exit 1;; esac\n'
                                 f"cat '{TEXT_UP}'\n")
    out, rc = run_json("imex", "domain", "--ctl", ctl_path)
    assert (rc, out["state"], len(out["nodes"])) == (0, "UP", 18)


def test_down_without_nodes_says_so_instead_of_none_named() -> None:
    # Tester report 14: "IMEX domain is DOWN: unreachable none named".
    status = ctl.parse_domain("Nodes:\n\nDomain State: DOWN\n")
    f = status.finding()
    assert f is not None and "none named" not in f.message
    assert f.message == ("IMEX domain is DOWN: nvidia-imex-ctl lists no node (is the daemon "
                         "running with a node list?)")


def test_domain_from_file_prints_markup_in_host_names_literally(tmp_path: Path) -> None:
    # Tester report 1: a -N table with host `[/]host` crashed the human output (exit 3).
    text = TEXT_UP.read_text().replace("198.51.100.2 ", "[/]host\x1b[2J ", 1)
    saved = tmp_path / "n.txt"
    saved.write_text(text)
    proc = run_cli("imex", "domain", "--from-file", str(saved))
    assert proc.returncode == 0, proc.stderr
    assert "[/]host\\x1b[2J" in proc.stdout and "\x1b" not in proc.stdout


def test_domain_from_file_that_is_not_text_is_exit_2(tmp_path: Path) -> None:
    saved = tmp_path / "n.bin"
    saved.write_bytes(b"\xff\xfe\x00Domain State: UP\n")
    out, rc = run_json("imex", "domain", "--from-file", str(saved))
    assert rc == 2 and "not a text file" in out["error"]["message"]


def test_domain_with_a_relative_root_runs_the_roots_ctl(tmp_path: Path) -> None:
    # Tester report 6/7: `imex domain --root <relative>` failed with a ValueError about an
    # absolute path.
    (tmp_path / "usr/bin").mkdir(parents=True)
    ctl_path = tmp_path / "usr/bin/nvidia-imex-ctl"
    ctl_path.write_text(f"#!/bin/sh\ncat '{JSON_UP}'\n")
    ctl_path.chmod(0o755)
    proc = run_cli("imex", "domain", "--root", tmp_path.name, "--json", cwd=tmp_path.parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "UP"


# The one root-join refuses '..': a --ctl or --config under a root that would step out of it
# (before: the root and the path were concatenated, and a binary outside the tree ran).
@pytest.mark.parametrize("option", ["--ctl", "--config"])
def test_domain_paths_that_leave_the_root_are_refused(tmp_path: Path, option: str) -> None:
    outside = _script(tmp_path, f"cat '{JSON_UP}'\n")
    root = tmp_path / "node"
    root.mkdir()
    out, rc = run_json("imex", "domain", "--root", str(root), option,
                       "/../" + os.path.basename(outside))
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert option in out["error"]["message"] and "'..'" in out["error"]["message"]


# -- issue 10: stdin, checked statuses, UP that is not healthy --------------------------------


def test_domain_from_file_dash_reads_stdin() -> None:
    out, rc = run_json("imex", "domain", "--from-file", "-", stdin=TEXT_UP.read_text())
    assert (rc, out["state"], len(out["nodes"])) == (0, "UP", 18)
    out, rc = run_json("imex", "domain", "--from-file", "-", stdin=JSON_DEGRADED.read_text())
    assert (rc, out["state"]) == (1, "DEGRADED")


@pytest.mark.parametrize("state", ["HEALTHY", "UP?", "", "READY"])
def test_an_unknown_domain_status_is_refused(tmp_path: Path, state: str) -> None:
    data = json.loads(JSON_UP.read_text())
    data["status"] = state
    saved = tmp_path / "n.json"
    saved.write_text(json.dumps(data))
    out, rc = run_json("imex", "domain", "--from-file", str(saved))
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert "unknown IMEX domain status" in out["error"]["message"]
    text = TEXT_UP.read_text().replace("Domain State: UP", f"Domain State: {state or 'X?'}")
    out, rc = run_json("imex", "domain", "--from-file", "-", stdin=text)
    assert rc == 2 and "unknown IMEX domain status" in out["error"]["message"]


def test_up_with_no_node_or_an_unreachable_one_is_not_healthy(tmp_path: Path) -> None:
    out, rc = run_json("imex", "domain", "--from-file", "-", stdin="Nodes:\n\nDomain State: UP\n")
    assert rc == 1 and out["findings"][0]["code"] == "imex_domain_degraded"
    assert "lists no node" in out["findings"][0]["message"]
    empty = {"nodes": {}, "timestamp": "5/22/2025 19:46:40.891", "status": "UP"}
    out, rc = run_json("imex", "domain", "--from-file", "-", stdin=json.dumps(empty))
    assert rc == 1
    lost = TEXT_UP.read_text().replace("198.51.100.2    - READY ", "198.51.100.2    - UNAVAILABLE ",
                                       1)
    out, rc = run_json("imex", "domain", "--from-file", "-", stdin=lost)
    assert (rc, out["state"]) == (1, "UP")
    assert any("198.51.100.2" in u for u in out["unreachable"])

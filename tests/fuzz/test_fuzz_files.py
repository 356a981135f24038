"""Every input of ../shared/fuzz (byte-identical copies in tests/data/fuzz, checked by
tests/meta/test_shared_copy.py), fed as its README
says, through the real CLI: exit 2 with one line naming the input and what is wrong with it,
never an internal error (exit 3), never a hang. The two quadratic kinds are also fed at 10-40
times their size: with the old quadratic code those took hours, so the subprocess timeout (a
hang guard, not a timing assertion; figures live in bench/bench_readers.py) catches a
regression of the kind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import runkit
from tests.cases import CASES, FUZZ
from tests.conftest import run_cli
from tests.runkit import Run, codes, events, sim


def _file(name: str) -> Path:
    return FUZZ / name


def _overlay(name: str, root: Path) -> None:
    """Build the overlay's node (a case id or a profile) and write its files: each content is
    a string of code points 0-255, one byte each (../shared/fuzz/README.md)."""
    doc = json.loads(_file(name).read_text())
    tree = doc["tree"]
    cases = sorted(CASES.glob(f"{tree}-*.yaml"))
    args = ("simulate", "--spec", str(cases[0])) if cases else ("simulate", tree)
    proc = run_cli(*args, str(root))
    assert proc.returncode == 0, proc.stderr
    for rel, content in doc["files"].items():
        full = root / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(content.encode("latin-1"))


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nvfabric: input_unreadable: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_numa_node_superscript_two_is_input_unreadable_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "n"
    _overlay("sysfs-numa-superscript.json", root)
    line = _one_line_exit_2(run_cli("plan", "--root", str(root)), "numa_node", "'²'")
    assert "0000:18:00.0" in line


@pytest.mark.parametrize("text", ["--1\n", "1_0\n", "٣\n", "9" * 5000 + "\n", " 1\x00\n"])
def test_every_kind_of_non_number_in_numa_node_is_refused_the_same_way(
        tmp_path: Path, text: str) -> None:
    root = tmp_path / "n"
    _overlay("sysfs-numa-superscript.json", root)
    (root / "sys/devices/pci0000:00/0000:18:00.0/numa_node").write_text(text)
    _one_line_exit_2(run_cli("plan", "--root", str(root)), "numa_node")


def test_numa_node_minus_one_is_no_affinity(tmp_path: Path) -> None:
    root = tmp_path / "n"
    _overlay("sysfs-numa-superscript.json", root)
    (root / "sys/devices/pci0000:00/0000:18:00.0/numa_node").write_text("-1\n")
    proc = run_cli("detect", "--root", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    gpu = next(g for g in json.loads(proc.stdout)["gpus"] if g["pci"] == "0000:18:00.0")
    assert gpu["numa_node"] is None


def _apt(tmp_path: Path, packages: bytes) -> subprocess.CompletedProcess[str]:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "Packages").write_bytes(packages)
    return run_cli("fetch", "--source", "apt", "--driver-version", "580.95.05", "--arch",
                   "x86_64", "--components", "fabricmanager", "--mirror", str(mirror),
                   "--dry-run")


def test_apt_size_superscript_is_input_unreadable(tmp_path: Path) -> None:
    _one_line_exit_2(_apt(tmp_path, _file("apt-size-superscript.Packages").read_bytes()),
                     "Packages", "Size", "'²'")


def test_apt_stanza_with_4000_package_lines_is_refused_not_reparsed(tmp_path: Path) -> None:
    _one_line_exit_2(_apt(tmp_path, _file("apt-4000-package-lines.Packages").read_bytes()),
                     "Packages", "more than one Package field")


def test_apt_stanza_with_160000_package_lines_still_ends_at_once(tmp_path: Path) -> None:
    # 40 times the shared input (4.8 MB): the old per-line re-parse would run for hours
    data = _file("apt-4000-package-lines.Packages").read_bytes() * 40
    _one_line_exit_2(_apt(tmp_path, data), "more than one Package field")


def test_doctor_4303_digit_rc_is_dropped_and_counted() -> None:
    # a number of thousands of digits in a log line is no fabric log's (never int()'s
    # 4,300-digit error, exit 3): that line is dropped with its reason, not the log refused
    path = str(_file("doctor-4303-digit-rc.log"))
    proc = run_cli("doctor", "--log", path, "--json")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    out = json.loads(proc.stdout)
    assert (out["lines"], out["dropped"], out["findings"]) == (1, {"bad_number": 1}, [])


def _rpm(tmp_path: Path, primary: bytes) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "mirror"
    (repo / "repodata").mkdir(parents=True)
    (repo / "repodata/primary.xml").write_bytes(primary)
    digest = hashlib.sha256(primary).hexdigest()
    (repo / "repodata/repomd.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<repomd xmlns="http://linux.duke.edu/metadata/repo">'
        f'<data type="primary"><checksum type="sha256">{digest}</checksum>'
        '<location href="repodata/primary.xml"/></data></repomd>\n')
    return run_cli("fetch", "--source", "rpm", "--driver-version", "580.95.05", "--arch",
                   "x86_64", "--components", "fabricmanager", "--mirror", str(repo),
                   "--dry-run")


def test_rpm_empty_primary_is_input_unreadable(tmp_path: Path) -> None:
    _one_line_exit_2(_rpm(tmp_path, _file("rpm-primary-empty.xml").read_bytes()),
                     "primary.xml", "not XML")


@pytest.mark.parametrize("primary", [
    b'<?xml version="1.0" encoding="x-unknown-42"?><metadata/>',
    b"<metadata>" + b"<a>" * 100_000,
    b'<?xml version="1.0"?><metadata xmlns="http://linux.duke.edu/metadata/common">'
    b'<package><name>nvidia-fabricmanager</name><size package="\xc2\xb2"/></package>'
    b"</metadata>",
])
def test_rpm_primary_library_failures_are_input_unreadable(tmp_path: Path,
                                                            primary: bytes) -> None:
    _one_line_exit_2(_rpm(tmp_path, primary), "primary.xml")


def test_smi_csv_field_over_the_csv_limit_is_input_unreadable() -> None:
    path = str(_file("smi-csv-131073-char-field.csv"))
    _one_line_exit_2(run_cli("status", "--from-nvidia-smi", path), path, "field limit")


def test_smi_text_100k_line_is_refused_at_once() -> None:
    path = str(_file("smi-text-100k-line.txt"))
    _one_line_exit_2(run_cli("status", "--from-nvidia-smi", path), path, "line 2")


def test_smi_text_long_blank_runs_without_colon_parse_in_linear_time(tmp_path: Path) -> None:
    # the backtracking kind itself, on lines under the line limit: 4,000 lines of a word, a
    # blank run and no colon (the old regex spent ~O(n^2) per line: minutes here)
    text = "Fabric\n    State : Completed\n" + ("        a" + " " * 4000 + "b\n") * 4000
    path = tmp_path / "smi.txt"
    path.write_text(text)
    proc = run_cli("status", "--from-nvidia-smi", str(path), "--json", timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["gpus"][0]["state"] == "completed"


def test_smi_capture_from_dev_zero_is_refused_by_size() -> None:
    _one_line_exit_2(run_cli("status", "--from-nvidia-smi", "/dev/zero"),
                     "/dev/zero", "larger than 16 MiB")


def test_smi_capture_of_500_mb_of_zeros_is_refused_by_size(tmp_path: Path) -> None:
    big = tmp_path / "zeros"
    with open(big, "wb") as fh:
        fh.truncate(500 * 10**6)  # sparse: no disk, the reader still sees 500 MB of zeros
    _one_line_exit_2(run_cli("status", "--from-nvidia-smi", str(big)), str(big), "larger")


def test_spec_bad_timestamp_is_input_unreadable(tmp_path: Path) -> None:
    path = str(_file("spec-bad-timestamp.yaml"))
    _one_line_exit_2(run_cli("simulate", "--spec", path, str(tmp_path / "n")), path)
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize("text", [
    "!!int x\n",
    "!!float x\n",
    "!!python/object/apply:os.system [true]\n",
    "gpus: [{device_id: !!binary ~, count: 1}]\n",
    "[" * 5000 + "]" * 5000 + "\n",
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
    "gpus: 1" + "0" * 5000 + "\n",
])
def test_spec_yaml_library_failures_and_alias_bombs_are_input_unreadable(
        tmp_path: Path, text: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    _one_line_exit_2(run_cli("simulate", "--spec", str(spec), str(tmp_path / "n")), str(spec))


def test_imex_ctl_connections_string_names_the_path() -> None:
    path = str(_file("imex-ctl-connections-string.json"))
    _one_line_exit_2(run_cli("imex", "domain", "--from-file", path), path,
                     "nodes.0.connections", "expected an object, got a string")


@pytest.mark.parametrize("doc,where", [
    ('{"status": "UP", "nodes": {"0": {"host": ["x"], "status": "READY"}}}', "nodes.0.host"),
    ('{"status": "UP", "nodes": {"0": {"connections": {"1": 5}}}}', "nodes.0.connections.1"),
    ('{"status": "UP", "nodes": {"²": {}}}', "node key"),
    ('{"status": "UP", "nodes": {"0": {"version": 1' + "0" * 5000 + "}}}", "digits"),
    ('{"status": "UP", "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
])
def test_imex_ctl_json_wrong_types_anywhere_name_the_value(tmp_path: Path, doc: str,
                                                           where: str) -> None:
    path = tmp_path / "ctl.json"
    path.write_text(doc)
    _one_line_exit_2(run_cli("imex", "domain", "--from-file", str(path)), where)


def test_slurm_hostlist_nested_brackets_is_input_unreadable(tmp_path: Path) -> None:
    root = tmp_path / "n"
    assert run_cli("simulate", "gb200-tray", str(root)).returncode == 0
    expression = _file("slurm-hostlist-nested-brackets.txt").read_text()
    _one_line_exit_2(run_cli("imex", "config", "--root", str(root), "--peers-slurm",
                             expression, "--dry-run"), "Slurm hostlist")


def test_slurm_hostlist_recursion_without_control_characters(tmp_path: Path) -> None:
    root = tmp_path / "n"
    assert run_cli("simulate", "gb200-tray", str(root)).returncode == 0
    _one_line_exit_2(run_cli("imex", "config", "--root", str(root), "--peers-slurm",
                             "[][]" * 2000, "--dry-run"), "nested too deeply")


def test_fm_config_nul_in_socket_path_is_input_unreadable(tmp_path: Path) -> None:
    root = tmp_path / "n"
    _overlay("fmcfg-nul-in-socket-path.json", root)
    for extra in ((), ("--fabric", "nvlink5")):
        _one_line_exit_2(run_cli("status", "--root", str(root), *extra),
                         "fabricmanager.cfg", "FM_SM_IPC_INTERFACE")


def test_slurm_conf_prolog_with_nul_is_not_globbed(tmp_path: Path) -> None:
    # a path read from slurm.conf is checked like a command-line path (hostpath.problem)
    root = tmp_path / "n"
    assert run_cli("simulate", "gb200-tray", str(root)).returncode == 0
    conf = root / "etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_bytes(b"Prolog=/etc/slurm/prolog\x00.d/*\nSwitchType=switch/none\n")
    proc = run_cli("imex", "owner", "--root", str(root), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    assert "internal_error" not in proc.stdout


def test_doctor_refuses_a_device_instead_of_reading_it_forever() -> None:
    _one_line_exit_2(run_cli("doctor", "--log", "/dev/zero"), "/dev/zero", "device")


def test_pid_file_with_superscript_or_huge_pid_is_no_process(tmp_path: Path) -> None:
    root = tmp_path / "n"
    assert run_cli("simulate", "dgx-b200", str(root)).returncode == 0
    pidfile = root / "run/nvfabric/fabricmanager.pid"
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    for text in ("²\n", "9" * 5000 + "\n", "-5\n", f"{os.getpid()}\x00\n"):
        pidfile.write_text(text)
        proc = run_cli("status", "--root", str(root), "--json")
        assert proc.returncode in (0, 1), (text[:10], proc.stderr)
        fm = next(s for s in json.loads(proc.stdout)["services"]
                  if s["name"] == "fabricmanager")
        assert fm["pid"] is None


def test_stdin_is_not_read_past_the_cap() -> None:
    proc = runkit.run([sys.executable, "-m", "nvfabric", "status", "--from-nvidia-smi", "-"],
                      stdin=open("/dev/zero", "rb"))
    _one_line_exit_2(proc, "-", "larger than")


def test_imex_config_over_the_cap_is_refused_not_cut(tmp_path: Path) -> None:
    # a cut config, patched and written back, would lose its tail: refused whole
    root = tmp_path / "n"
    assert run_cli("simulate", "gb200-tray", str(root)).returncode == 0
    cfg = root / "etc/nvidia-imex/config.cfg"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("# padding\n" * 120_000 + "SERVER_PORT=50000\n")
    before = cfg.read_bytes()
    proc = run_cli("imex", "config", "--root", str(root), "--peer", "192.0.2.10")
    _one_line_exit_2(proc, "config.cfg", "larger than 1 MiB")
    assert cfg.read_bytes() == before


_LOL = "".join(f'<!ENTITY l{i} "' + f"&l{i - 1};" * 10 + '">' for i in range(1, 10))


@pytest.mark.parametrize("xml,needle", [
    ("<nvidia_smi_log><gpu></nvidia_smi_log>", "mismatched tag"),
    ('<!DOCTYPE x [<!ENTITY l0 "lol">' + _LOL + ']><nvidia_smi_log><driver_version>&l9;'
     "</driver_version></nvidia_smi_log>", "amplification"),
    ("<nvidia_smi_log>" + "<gpu>" * 50_000, "XML"),
])
def test_smi_xml_library_failures_are_input_unreadable(tmp_path: Path, xml: str,
                                                       needle: str) -> None:
    path = tmp_path / "q.xml"
    path.write_text(xml)
    _one_line_exit_2(run_cli("status", "--from-nvidia-smi", str(path)), str(path), needle)


@pytest.mark.parametrize("expression", ["gb-[1-99999]", "x[1-9][1-9][1-9][1-9][1-9]"])
def test_slurm_hostlist_past_4096_hosts_is_refused_before_expanding(
        tmp_path: Path, expression: str) -> None:
    # python-hostlist would build and nvfabric parse up to 100,000 names (seconds of CPU)
    root = tmp_path / "n"
    assert run_cli("simulate", "gb200-tray", str(root)).returncode == 0
    _one_line_exit_2(run_cli("imex", "config", "--root", str(root), "--peers-slurm",
                             expression, "--dry-run"), "too large")


def test_apt_version_with_a_4301_digit_revision_is_input_unreadable(tmp_path: Path) -> None:
    # found by make fuzz: python-debian compares revisions with int() (4,300-digit limit)
    stanza = ("Package: nvidia-fabricmanager\nVersion: 580.95.05-{rev}\nArchitecture: amd64\n"
              "Filename: ./fm_{n}.deb\nSize: 10\nSHA256: " + "a" * 64 + "\n\n")
    index = stanza.format(rev="1", n=1) + stanza.format(rev="1" * 4301, n=2)
    _one_line_exit_2(_apt(tmp_path, index.encode()), "Packages", "more than 40 digits")


# ---------------------------------------------------------------- round 3
# nvfabric's own state files read back: the readiness file, the run lock, the fetch record,
# the supervisor's job, the GPU probe's answer, a pid file in run's state directory.

_NESTED = b"[" * 1000 + b"]" * 1000

#: Damage of every kind a state file can show: nesting, a pid past the digit limit, bytes
#: that are no UTF-8, a superscript where a number stands, half a document.
DAMAGED_STATE = [
    pytest.param(_NESTED, id="nested-brackets"),
    pytest.param(b'{"pid": 1' + b"0" * 5000 + b"}", id="5001-digit-pid"),
    pytest.param(b'{"pid": \xff\xfe}', id="not-utf-8"),
    pytest.param('{"pid": ²}'.encode(), id="superscript-pid"),
    pytest.param(b'{"pid": 4242, "ready_after_s": 0.2', id="cut-short"),
]


def _simulated(tmp_path: Path, profile: str = "hgx-h100") -> Path:
    root = tmp_path / "n"
    proc = run_cli("simulate", profile, str(root))
    assert proc.returncode == 0, proc.stderr
    return root


def test_ready_file_nested_brackets_is_not_ready_naming_the_file(tmp_path: Path) -> None:
    root = _simulated(tmp_path)
    ready = root / "run/nvfabric/ready"
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_bytes(_file("ready-file-nested-brackets.json").read_bytes())
    proc = run_cli("ready", "--root", str(root), "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    (f,) = json.loads(proc.stdout)["findings"]
    assert f["code"] == "run_not_ready"
    assert str(ready) in f["message"] and "nested more than 64 levels" in f["message"]


@pytest.mark.parametrize("content", DAMAGED_STATE)
def test_damaged_ready_file_is_not_ready_and_a_blocked_run_removes_it(
        tmp_path: Path, content: bytes) -> None:
    root = _simulated(tmp_path)
    ready = root / "run/nvfabric/ready"
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_bytes(content)
    for extra in ((), ("--json",)):
        proc = run_cli("ready", "--root", str(root), *extra)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert "internal_error" not in proc.stdout + proc.stderr
    (root / "run/nvfabric/run.lock").write_bytes(content)  # the run lock is damaged too
    shutil.rmtree(root / "sys/module/nvidia")  # the driver unloaded: the plan is blocked
    proc = run_cli("run", "--root", str(root), "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["result"] == "blocked"
    assert not ready.exists()
    assert "removed the stale readiness file" in proc.stderr


def test_damaged_fetch_record_is_input_unreadable_naming_it(tmp_path: Path) -> None:
    root = _simulated(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    record = cache / "nvfabric-artifacts.json"
    for content in [p.values[0] for p in DAMAGED_STATE]:
        record.write_bytes(content)
        proc = run_cli("install", "--from", str(cache), "--root", str(root), "--dry-run")
        _one_line_exit_2(proc, str(record), "unreadable fetch record")


def test_damaged_dpkg_status_of_the_root_is_input_unreadable(tmp_path: Path) -> None:
    # python-debian splits a field's lines on \f too (str.splitlines): the piece after it
    # is a continuation line without its leading blank, which it refuses with ValueError
    from nvfabric.artifacts import dpkgdb
    from nvfabric.model.errors import NvfabricError

    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text("Package: nvidia-fabricmanager\nStatus: install ok installed\n"
                      "Description: Fabric\n Manager\x0cfor NVSwitch\n")
    for read in (lambda: dpkgdb.read(str(tmp_path)),
                 lambda: dpkgdb.status_of(str(tmp_path), ["nvidia-fabricmanager"])):
        with pytest.raises(NvfabricError) as err:
            read()
        assert err.value.exit_code == 2
        assert err.value.finding.message.startswith(f"{status}: not a dpkg status database")


@pytest.mark.parametrize("content", DAMAGED_STATE)
def test_damaged_supervisor_job_is_refused_as_a_value_error(content: bytes) -> None:
    # the lean supervisor's main turns a ValueError into its one-line refusal (exit 3)
    from nvfabric.supervisor.lean import read_job

    fd = os.memfd_create("job", os.MFD_CLOEXEC)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    with pytest.raises(ValueError):
        read_job(fd)


@pytest.mark.parametrize("content", DAMAGED_STATE)
def test_damaged_gpu_probe_answer_is_an_unreadable_state(content: bytes,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # the probe child's answer, read back from its pipe: damaged, the state is unreadable
    from types import SimpleNamespace

    from nvfabric.model.gpucheck import GpuCheck
    from nvfabric.supervisor import gpuprobe

    text = content.decode("utf-8", "surrogateescape")
    monkeypatch.setattr(gpuprobe, "json", SimpleNamespace(dumps=lambda _obj: text,
                                                          loads=json.loads))
    check = gpuprobe.in_child(lambda: GpuCheck(True, True, "8 GPUs: completed x8"), 60)
    assert (check.ready, check.error) == (False, "the GPU probe ended without an answer")


def test_pid_file_that_is_not_utf_8_does_not_end_the_supervisor(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # run removes a daemon's pid file once the daemon is gone, if it still names it: a file
    # of other bytes is compared as read, never decoded strictly (a crash, exit 3, before)
    root = sim(tmp_path, "hgx-h100")
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    (fm,) = [int(e["pid"]) for e in events(root, "fabricmanager", "exec")]
    pidfile = root / "run/nvfabric/fabricmanager.pid"
    pidfile.write_bytes(b"\xff\xfe\n")
    os.kill(fm, signal.SIGKILL)
    assert run.wait() == 1, run.log
    result = run.result()
    assert result["result"] == "failed" and "service_exited" in codes(result)
    assert pidfile.read_bytes() == b"\xff\xfe\n"  # not its pid: left alone


# a bug report's section fields, as the damaged reports people attach show them

def _report_text(name: str) -> str:
    import gzip

    return gzip.decompress((REPORTS / name).read_bytes()).decode("utf-8", "replace")


REPORTS = FUZZ.parent / "bugreports"


def _triaged(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """A triage that judged the report (exit 0 or 1, one JSON object), never exit 3."""
    assert proc.returncode in (0, 1), (proc.returncode, proc.stdout, proc.stderr)
    data = json.loads(proc.stdout)
    assert isinstance(data, dict) and "report" in data
    return data


def test_triage_lspci_hex_field_too_long_is_judged_not_a_crash(tmp_path: Path) -> None:
    path = str(_file("triage-lspci-hex-field-too-long.log"))
    _triaged(run_cli("triage", path, "--json"))
    proc = run_cli("simulate", "--from-bug-report", path, str(tmp_path / "n"))
    assert proc.returncode in (0, 2), (proc.stdout, proc.stderr)
    assert "internal_error" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("old,new", [
    ("\n00: de 10 ", "\n00: de10 "),  # two bytes glued: "de10" is no byte
    ("\n00: de 10 ", "\n00: de 100 "),  # three digits
    ("\n10: ", "\n10:"),  # the blank after the offset lost
    ("\tNUMA node: 0", "\tNUMA node: ²"),
    ("Port GUID: 0x", "Port GUID: 0x" + "f" * 40),
    ("Capability mask: 0x", "Capability mask: 0x²"),
    ("Port 1:", "Port 99999999999:"),
    ("Base lid: ", "Base lid: ٣"),
], ids=["hex-glued", "hex-3-digits", "hex-no-blank", "numa-superscript", "guid-40-digits",
        "cap-mask-superscript", "port-11-digits", "lid-arabic-indic"])
def test_damaged_fields_of_every_section_are_judged_not_a_crash(
        tmp_path: Path, old: str, new: str) -> None:
    text = _report_text("dgx-b200-healthy.log.gz")
    assert old in text
    path = tmp_path / "report.log"
    path.write_text(text.replace(old, new))
    _triaged(run_cli("triage", str(path), "--json"))
    proc = run_cli("simulate", "--from-bug-report", str(path), str(tmp_path / "n"))
    assert proc.returncode in (0, 2), (proc.stdout, proc.stderr)
    assert "internal_error" not in proc.stdout + proc.stderr


# the strict number helper, in every reader: Attached GPUs

@pytest.mark.parametrize("extra", [(), ("--prometheus",), ("--json",)])
def test_smi_attached_gpus_superscript_is_input_unreadable(extra: tuple[str, ...]) -> None:
    path = str(_file("smi-attached-gpus-superscript.txt"))
    proc = run_cli("status", "--from-nvidia-smi", path, *extra)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "internal_error" not in proc.stdout + proc.stderr
    if "--json" not in extra:
        _one_line_exit_2(proc, path)


@pytest.mark.parametrize("count", ["²", "٣", "1" + "0" * 50, "--1", "８"])
def test_attached_gpus_that_is_no_number_is_no_count(tmp_path: Path, count: str) -> None:
    # a whole capture whose Attached GPUs is no number: judged by the GPUs it lists
    capture = (FUZZ.parent / "corpus/nvidia-smi").glob("*q*.txt")
    text = next(p for p in sorted(capture) if "Attached GPUs" in p.read_text())
    path = tmp_path / "q.txt"
    lines = [f"Attached GPUs                             : {count}"
             if ln.startswith("Attached GPUs") else ln for ln in text.read_text().splitlines()]
    path.write_text("\n".join(lines) + "\n")
    for extra in ((), ("--prometheus",)):
        proc = run_cli("status", "--from-nvidia-smi", str(path), *extra)
        assert proc.returncode in (0, 1), (count[:8], proc.stdout, proc.stderr)


# a config reader linear in a run of blank lines

def test_imex_config_blank_line_run_is_read_at_once(tmp_path: Path) -> None:
    root = _simulated(tmp_path, "gb200-tray")
    cfg = root / "etc/nvidia-imex/config.cfg"
    cfg.write_bytes(_file("imex-config-blank-line-run.cfg").read_bytes())
    proc = run_cli("imex", "config", "--root", str(root), "--peer", "192.0.2.1",
                   "--skip-local-check", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["node_list"] == ["192.0.2.1"]


@pytest.mark.parametrize("blank", [" \n", "\n", "\t\n", " \t \n"])
def test_shipped_configs_with_40000_blank_lines_are_read_at_once(tmp_path: Path,
                                                                  blank: str) -> None:
    # 40,000 blank lines (~100 KB): the cubic check took hours; the bound below is a hang
    # guard, not a timing assertion (figures: bench/bench_readers.py)
    root = _simulated(tmp_path, "gb200-tray")
    cfg = root / "etc/nvidia-imex/config.cfg"
    cfg.write_text("SERVER_PORT=50000\n" + blank * 40_000)  # no key after the run
    proc = run_cli("imex", "config", "--root", str(root), "--peer", "192.0.2.1",
                   "--skip-local-check", "--dry-run", "--set", "SERVER_PORTX=1", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "SERVER_PORTX: not a key nvidia-imex knows" in proc.stderr


@pytest.mark.parametrize("start,lines", [
    ("NVRM: Xid (PCI:0000:07:00): 79, pid=1, ", 2),
    ("Sending inband response message: ", 2),
    ("[ERROR] Failed to get export ref for UUID: x for request ", 16),
])
def test_log_lines_repeating_a_signature_start_are_classified_at_once(
        tmp_path: Path, start: str, lines: int) -> None:
    # found by make fuzz: 'A .* B' searched in a line repeating A without B costs the square
    # of the line (300 KB of Xid prefixes: 25 s); these logs of ~1 MiB lines took 5-10
    # minutes. The bound is a hang guard, not a timing assertion (bench/bench_readers.py)
    log = tmp_path / "fm.log"
    line = start * ((1 << 20) // len(start) - 1) + "\n"
    log.write_text(line * lines)
    proc = run_cli("doctor", "--log", str(log), "--json", timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "internal_error" not in proc.stdout

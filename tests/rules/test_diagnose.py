"""The signature catalogue and the classifier: examples, wording variants, platform awareness,
aggregation, streams, bounded state, and every log/IMEX capture of tests/data/corpus."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from nvfabric.model.findings import CODES
from nvfabric.rules import diagnose
from nvfabric.rules.catalogue import CatalogueError, Signature, catalogue, parse_catalogue
from nvfabric.rules.diagnose import Classifier, classify_lines, classify_stream, timestamp
from tests.cases import CORPUS

SIGNATURES = catalogue()


@pytest.mark.parametrize("sig", SIGNATURES, ids=[s.id for s in SIGNATURES])
def test_every_signature_matches_its_examples_and_is_sourced(sig: Signature) -> None:
    assert sig.examples and sig.source
    for line in sig.examples:
        assert sig.needle in line
        assert sig.pattern.search(line), line
        assert sig.scan is None or sig.scan.search(line.encode()), line
    for outcome in (sig.default, *sig.by_fabric.values()):
        assert outcome.code is None or outcome.code in CODES
        assert outcome.hint  # every outcome says what to do (tester report 14: empty hints)


VERSION_LINES = [
    ("fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with driver "
     "version 530.41.03. Please update with matching NVIDIA driver package.",
     "530.30.02", "530.41.03"),
    ("fabric manager NVIDIA GPU driver interface version 550.90.07 don’t match with driver "
     "version 550.107.02. Please update with matching NVIDIA driver package",
     "550.90.07", "550.107.02"),
    ("fabric manager NVIDIA GPU driver interface version 550.127.05 doesn't match with the "
     "driver version 550.120. Please update with the matching NVIDIA driver package.",
     "550.127.05", "550.120"),
    ("fabric manager NVIDIA GPU driver interface version 590.48.01 don't match with driver "
     "version 580.126.09.", "590.48.01", "580.126.09"),
]


@pytest.mark.parametrize(("line", "fm", "driver"), VERSION_LINES,
                         ids=["dont", "curly-apostrophe", "doesnt-with-the-two-part", "split"])
def test_version_mismatch_wordings_are_one_signature(line: str, fm: str, driver: str) -> None:
    (f,) = classify_lines([line])
    assert (f.code, f.fields["fm_version"], f.fields["driver_version"]) == (
        "version_mismatch", fm, driver)
    assert f.fields["signature"] == "fm-driver-version-mismatch"


NOTHING = ("nv-fabricmanager[2211]: request to query NVSwitch device information from NVSwitch "
           "driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")


@pytest.mark.parametrize(
    ("fabric", "code", "severity"),
    [
        ("none", "fm_not_applicable", "info"),
        ("mnnvl", "fm_not_applicable", "info"),
        ("nvswitch", "nvswitch_not_visible", "error"),
        ("nvlink5", "nvlsm_missing", "error"),
        (None, "fm_not_applicable", "warning"),
    ],
)
def test_nothing_to_do_depends_on_the_platform(fabric: str | None, code: str, severity: str
                                               ) -> None:
    (f,) = classify_lines([NOTHING], fabric)
    assert (f.code, f.severity) == (code, severity)


def test_multicast_response_status_only_when_not_zero() -> None:
    line = ("[Oct 31 2023 21:10:07] [INFO] [tid 526859] Sending inband response message:  "
            "Message header details: magic Id:adbc request Id:79743a616996a3b9 status:{} type:3 "
            "length:24\n")
    assert _streamed(line.format(0).encode() * 3) == []
    (f,) = _streamed(line.format(0).encode() + line.format(57).encode())
    assert (f["code"], f["status"], f["count"]) == ("multicast_team_failure", 57, 1)


def test_pre_nvl5_line_is_a_fault_only_on_nvlink5() -> None:
    line = "nvidia-fabricmanager-start.sh[5037]: Detected Pre-NVL5 system"
    assert classify_lines([line], "nvswitch") == []
    assert [f.code for f in classify_lines([line], "nvlink5")] == ["nvlsm_missing"]


def test_repeats_aggregate_with_count_and_first_last_timestamps() -> None:
    c = Classifier()
    line = "[{}] [ERROR] [tid 77] fabric manager config file item: {} has an invalid value"
    new1 = c.feed(line.format("Nov 03 2024 18:40:12", "FABRIC_NODE_CONFIG_FILE"))
    new2 = c.feed(line.format("Nov 03 2024 18:40:17", "FABRIC_NODE_CONFIG_FILE"))
    new3 = c.feed(line.format("Nov 03 2024 18:40:18", "DATABASE_PATH"))
    assert [len(new1), len(new2), len(new3)] == [1, 0, 1]
    first, second = c.findings()
    assert (first.fields["key"], first.fields["count"]) == ("FABRIC_NODE_CONFIG_FILE", 2)
    assert (first.fields["first_seen"], first.fields["last_seen"]) == (
        "Nov 03 2024 18:40:12", "Nov 03 2024 18:40:17")
    assert second.fields["key"] == "DATABASE_PATH"


def test_collected_fields_merge_ports_into_one_finding() -> None:
    lines = [f"[Dec 19 2024 19:17:49] [ERROR] [tid 1374] detected NVSwitch non-fatal error 12028 "
             f"on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port {p}"
             for p in (36, 33, 36)]
    (f,) = classify_lines(lines)
    assert (f.code, f.fields["error"], f.fields["ports"], f.fields["count"]) == (
        "nvswitch_nonfatal_error", 12028, [33, 36], 3)


@pytest.mark.parametrize(
    ("line", "stamp"),
    [
        ("[Jun 28 2023 10:12:01] [ERROR] [tid 1183] x", "Jun 28 2023 10:12:01"),
        ("May 16 15:10:22 node-01 nv-fabricmanager[29850]: [May 16 2025 15:10:21] [INFO] x",
         "May 16 2025 15:10:21"),
        ("Sep 18 03:19:01 node-01 nvidia-fabricmanager-start.sh[4753]: x", "Sep 18 03:19:01"),
        ("11月 15 14:15:47 node-01 nv-fabricmanager[4177]: x", "11月 15 14:15:47"),
        ("192.0.2.101: 2025/11/25 13:58:49 nvidia-fabricmanager-wrapper: x",
         "2025/11/25 13:58:49"),
        ("[2025-05-10 23:09:41] node-01:630335 x", "2025-05-10 23:09:41"),
        ("[  117.984502] nvidia-nvswitch3: x", "117.984502"),
        ("Kernel module \"ib_umad\" has not been loaded", None),
    ],
    ids=["fm-file", "journal-wrapping-fm", "journal", "journal-zh-locale", "talos", "iso",
         "dmesg", "journalctl-o-cat"],
)
def test_timestamps_of_each_log_format(line: str, stamp: str | None) -> None:
    assert timestamp(line) == stamp


def _per_line(path: Path, fabric: str | None = None) -> list[dict[str, object]]:
    c = Classifier(fabric)
    for line in path.read_bytes().decode("utf-8", "replace").splitlines():
        c.feed(line)
    return [f.to_json() for f in c.findings()]


def _streamed(data: bytes, fabric: str | None = None) -> list[dict[str, object]]:
    c = Classifier(fabric)
    classify_stream(c, io.BytesIO(data))
    return [f.to_json() for f in c.findings()]


# What each capture shows, per PROVENANCE.md (fabric kind unknown: as `doctor --log` alone).
LOGS: dict[str, set[str]] = {
    "a40-nvlink-bridge-fm-520-nothing-to-do-journal-gpuop610.txt":
        {"fm_not_applicable", "service_exited"},
    "bottlerocket-b200-fm-nvlsm-guid-systemctl-status-kk142.txt": set(),
    "bottlerocket-p4d-a100-fm-systemctl-status-br3873.txt": set(),
    "driver-container-start-sh-unknown-option-usage-gpuop1595.txt": {"launcher_cli_mismatch"},
    "fm-590.48.01-systemctl-status-pre-nvl5-node-01.txt": {"nvswitch_nonfatal_error"},
    "fm-590.48.01-systemctl-status-pre-nvl5-node-02.txt": set(),
    "fm-rhel-ai-vm-systemctl-status-nvswitch-devices-path.txt": set(),
    "fm-version-mismatch-525-vs-530-talos-pkgs720.txt": {"version_mismatch"},
    "fm-version-mismatch-530-gpuop544.txt": {"version_mismatch"},
    "fm-version-mismatch-550-curly-apostrophe-nvtrust55.txt": {"version_mismatch"},
    "fm-version-mismatch-550-systemctl-akash632.txt": {"version_mismatch", "service_exited"},
    "fm-version-mismatch-590-vs-580-driver-container-gdc735.txt": {"version_mismatch"},
    "gpud-dev-kmsg-nvswitch-open-excerpt.txt": set(),
    "gpud-hgx-h100-535.161.08-fabricmanager.log": {"nvswitch_nonfatal_error"},
    "gpud-hgx-h100-550.90.07-dmesg-nvswitch-probe-excerpt.log": set(),
    "gpud-hgx-multicast-team-fabricmanager.log": {"nvswitch_nonfatal_error"},
    "h20-ppcie-fm-journalctl-restart-nvtrust128.txt": set(),
    "hgx-b200-start-sh-nvl5-ib_umad-not-loaded-canvos700.txt": {"missing_kernel_module"},
    "nccl-nvls-invalid-argument-h100-550.124.06-nccl1705.txt": {"multicast_team_failure"},
    "nvidia-nvswitch-devices-path-systemctl-status-rhel-ai.txt": set(),
    "nvswitch-sxid-22013-dmesg-590.48.01.txt": {"nvswitch_nonfatal_error"},
    "rtx4090-start-sh-pre-nvl5-nothing-to-do-cubestudio29.txt":
        {"fm_not_applicable", "service_exited"},
    "talos-dgx-b200-wrapper-lpf-scan-excerpt-ext895.txt": set(),
    "talos-fm-config-invalid-value-ext511.txt": {"config_invalid_value"},
    "talos-hgx-b200-wrapper-nvlsm-start-excerpt-ext893.txt": set(),
    "talos-nvlsm-umad-init-abi-version-docs581.txt": {"missing_kernel_module"},
}
IMEX: dict[str, set[str]] = {
    "imex-daemon-error-lines-580.105.08-dra948.txt": {"imex_memory_export_failed"},
}


def _corpus(kind: str, table: dict[str, set[str]]) -> list[tuple[Path, set[str]]]:
    return [(p, table.get(p.name, set())) for p in sorted((CORPUS / kind).iterdir())]


def test_every_log_capture_is_in_the_table() -> None:
    assert sorted(p.name for p in (CORPUS / "logs").iterdir()) == sorted(LOGS)


@pytest.mark.parametrize(("path", "codes"), _corpus("logs", LOGS) + _corpus("imex", IMEX),
                         ids=lambda v: v.name if isinstance(v, Path) else "")
def test_corpus_capture_gives_what_it_shows(path: Path, codes: set[str]) -> None:
    findings = _streamed(path.read_bytes())
    assert {f["code"] for f in findings} == codes
    assert findings == _per_line(path)  # the block scanner changes nothing


def test_version_mismatch_capture_keeps_the_two_part_driver_version() -> None:
    (f, _) = _streamed((CORPUS / "logs/fm-version-mismatch-550-systemctl-akash632.txt")
                       .read_bytes())
    assert (f["fm_version"], f["driver_version"]) == ("550.127.05", "550.120")


def test_ib_umad_capture_names_the_module() -> None:
    for name in ("hgx-b200-start-sh-nvl5-ib_umad-not-loaded-canvos700.txt",
                 "talos-nvlsm-umad-init-abi-version-docs581.txt"):
        (f,) = _streamed((CORPUS / "logs" / name).read_bytes())
        assert f["module"] == "ib_umad"


def test_stream_handles_blocks_crlf_missing_final_newline_and_long_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(diagnose, "BLOCK", 64)
    line = "OpenSM[3120]: Perhaps another instance of OpenSM is already running"
    data = ("x" * 300 + "\r\n" + line + "\r\n" + "filler\n" * 20 + line).encode()
    (f,) = _streamed(data)
    assert (f["code"], f["count"]) == ("sm_already_running", 2)


def test_state_is_bounded_on_endless_distinct_values() -> None:
    c = Classifier()
    for n in range(diagnose.MAX_KEYS + 50):
        c.feed(f"config file item: KEY_{n} has an invalid value")
    found = c.findings()
    assert len(found) == diagnose.MAX_KEYS + 1
    assert found[-1].fields["overflow"] is True and found[-1].fields["count"] == 50


def test_catalogue_rows_are_validated() -> None:
    row = {"id": "x", "code": "no_such_code", "severity": "error", "needle": "a",
           "pattern": "a", "message": "m", "hint": "h"}
    with pytest.raises(CatalogueError, match="unknown finding code"):
        parse_catalogue([row])
    with pytest.raises(CatalogueError, match="bad pattern"):
        parse_catalogue([{**row, "code": "version_mismatch", "pattern": "("}])
    with pytest.raises(CatalogueError, match="int/hex/collect"):
        parse_catalogue([{**row, "code": "version_mismatch", "hex": ["n"]}])
    with pytest.raises(CatalogueError, match="int/hex/collect"):
        parse_catalogue([{**row, "code": "version_mismatch", "int": ["n"]}])
    # hints: fields of the row and the placeholders of HINT_PLACEHOLDERS, as each is written
    good = {**row, "code": "version_mismatch", "pattern": "a(?P<n>\\d+)"}
    assert parse_catalogue([{**good, "hint": "`{nvfabric:fetch --driver-version {n}}`, "
                                             "`ls {path:/dev/x}`, `modprobe x`{on_host}; "
                                             "{fm_start}; {imex_start}; {imex_domain}"}])
    for hint, says in [
            ("{imex_restart}", "unknown placeholder {imex_restart}"),
            ("{module}", "unknown placeholder {module}"),
            ("`{nvfabric}`", "needs the command's words"),
            ("`{nvfabric:status --root /x}`", "without --root"),
            ("{path:dev/x}", "absolute host path"),
            ("{on_host:x}", "takes nothing after a colon"),
            ("{nvfabric:fetch {nope}}", "unknown placeholder {nope}"),
            ("{n!r}", "takes no conversion"),
            ("{n:>8}", "takes no format spec"),
            ("{n", "expected '}'")]:
        with pytest.raises(CatalogueError, match=re.escape(says)):
            parse_catalogue([{**good, "hint": hint}])
    with pytest.raises(CatalogueError, match="for hints only"):
        parse_catalogue([{**good, "message": "{on_host}"}])
    with pytest.raises(CatalogueError, match=re.escape("by_fabric.none.hint: unknown")):
        parse_catalogue([{**good, "by_fabric": {"none": {"hint": "{x}"}}}])
    with pytest.raises(CatalogueError, match="names of hint placeholders"):
        parse_catalogue([{**good, "pattern": "a(?P<path>\\d+)"}])


def test_unknown_fabric_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fabric kind"):
        Classifier("nvlink6")


EXAMPLE_LINES = [line for sig in SIGNATURES for line in sig.examples] + [
    "[Dec 18 2024 19:09:50] [INFO] [tid 1584] multicast group 1 is allocated.", "", "x" * 90]


def test_block_scanner_equals_line_by_line_for_any_block_size() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.sampled_from(EXAMPLE_LINES), max_size=40), st.integers(1, 300),
           st.sampled_from(["\n", "\r\n"]))
    def check(lines: list[str], block: int, eol: str) -> None:
        data = eol.join(lines).encode()
        c = Classifier()
        for line in data.decode().split("\n"):
            c.feed(line)
        old = diagnose.BLOCK
        diagnose.BLOCK = block
        try:
            assert _streamed(data) == [f.to_json() for f in c.findings()]
        finally:
            diagnose.BLOCK = old

    check()

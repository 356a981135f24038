"""Compressed input files (logrotate's ``kern.log.2.gz``, a capture attached as ``.xz``):
told by their first bytes and read decompressed by every reader of an operator's file
(``doctor --log``, ``status --from-nvidia-smi``, ``domain check``, ``imex domain
--from-file``), the readers' bounds applying to the decompressed bytes; zstd, which the
standard library does not read before Python 3.14, is refused naming ``zstdcat``. The
compressed variants are made here from the corpus captures."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvfabric.cli import doctor as doctor_cli
from nvfabric.effects.history import History
from nvfabric.facts import textfile
from nvfabric.model.errors import NvfabricError
from tests import runkit
from tests.cases import CORPUS
from tests.conftest import run_cli, run_json

SXID = CORPUS / "logs/nvswitch-sxid-22013-dmesg-590.48.01.txt"
H100_Q = CORPUS / "nvidia-smi/hgx-h100-535.161.08-nvidia-smi-q.txt"
IMEX_N = CORPUS / "imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt"

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}
#: A zstd frame: the magic (RFC 8878, 3.1.1) and a frame header; nothing reads the rest.
ZSTD = b"\x28\xb5\x2f\xfd\x24\x05\x29\x00\x00hello"


def _one_line(proc_stderr: str) -> str:
    lines = proc_stderr.strip().splitlines()
    assert len(lines) == 1, proc_stderr
    return lines[0]


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_doctor_reads_a_compressed_kernel_log_as_its_text(tmp_path: Path, suffix: str) -> None:
    plain, rc_plain = run_json("doctor", "--log", str(SXID))
    packed = tmp_path / f"kern.log.2.{suffix}"
    packed.write_bytes(COMPRESS[suffix](SXID.read_bytes()))
    out, rc = run_json("doctor", "--log", str(packed))
    assert (rc, out["lines"], out["findings"]) == (rc_plain, plain["lines"], plain["findings"])
    assert [f["code"] for f in out["findings"]] == ["nvswitch_nonfatal_error"]


def test_doctor_reads_a_gzip_log_on_stdin(tmp_path: Path) -> None:
    """``zcat``-less: ``nvfabric doctor --log - < kern.log.2.gz``."""
    packed = tmp_path / "kern.log.2.gz"
    packed.write_bytes(gzip.compress(SXID.read_bytes()))
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    with packed.open("rb") as fh:
        proc = runkit.run([sys.executable, "-m", "nvfabric", "doctor", "--log", "-", "--json"],
                          stdin=fh, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [f["code"] for f in out["findings"]] == ["nvswitch_nonfatal_error"]


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_compressed_log_cut_short_is_one_line_naming_the_format(tmp_path: Path,
                                                                 suffix: str) -> None:
    whole = COMPRESS[suffix](SXID.read_bytes() * 50)
    cut = tmp_path / f"kern.log.{suffix}"
    cut.write_bytes(whole[: len(whole) // 2])
    proc = run_cli("doctor", "--log", str(cut))
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    fmt = {"gz": "gzip", "xz": "xz", "bz2": "bzip2"}[suffix]
    assert line.startswith(f"nvfabric: input_unreadable: {cut}: the {fmt} stream "), line
    assert f"{fmt} -t {cut}" in line


def test_a_zstd_log_is_refused_naming_zstdcat(tmp_path: Path) -> None:
    path = tmp_path / "kern.log.2.zst"
    path.write_bytes(ZSTD)
    for args in (("doctor", "--log", str(path)), ("status", "--from-nvidia-smi", str(path))):
        proc = run_cli(*args)
        assert proc.returncode == 2, args
        line = _one_line(proc.stderr)
        assert f"{path} is zstd-compressed" in line and f"`zstdcat {path} > OUT`" in line


def test_a_gzip_bomb_stops_at_the_log_bound_in_bounded_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MiB of kernel lines in well under 1 MiB of gzip, with the 16 GiB bound of one log
    set to 4 MiB (the bound itself is too large to feed in a test; every line up to it is
    classified, under tracemalloc): the decompressed bytes stop there with one line, and
    memory stays that of a block, never the file's."""
    line = SXID.read_bytes().splitlines(keepends=True)[0]
    block = line * ((1 << 20) // len(line))
    comp = zlib.compressobj(9, wbits=31)  # the gzip container
    bomb = tmp_path / "kern.log.gz"
    with bomb.open("wb") as fh:
        for _ in range(64):
            fh.write(comp.compress(block))
        fh.write(comp.flush())
    assert bomb.stat().st_size < 4 << 20
    monkeypatch.setattr(doctor_cli, "MAX_LOG_BYTES", 4 << 20)
    tracemalloc.start()
    try:
        result = CliRunner().invoke(doctor_cli.doctor, ["--log", str(bomb), "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 2, result.output
    error = json.loads(result.output)["error"]
    assert error["code"] == "input_unreadable"
    assert error["message"].startswith(f"{bomb}: more than ")
    assert "decompressed (a gzip file), the limit for one log input" in error["message"]
    assert peak < 16 << 20, peak  # a quarter of the decompressed file


def test_status_judges_a_gzip_capture_as_the_capture(tmp_path: Path) -> None:
    plain, rc_plain = run_json("status", "--from-nvidia-smi", str(H100_Q))
    for suffix, pack in COMPRESS.items():
        packed = tmp_path / f"q.txt.{suffix}"
        packed.write_bytes(pack(H100_Q.read_bytes()))
        out, rc = run_json("status", "--from-nvidia-smi", str(packed))
        assert (rc, out) == (rc_plain, plain), suffix


def test_a_gzip_bomb_as_a_capture_stops_at_the_capture_bound(tmp_path: Path) -> None:
    bomb = tmp_path / "q.txt.gz"
    bomb.write_bytes(gzip.compress(H100_Q.read_bytes() * 400, 9))  # ~30 MB of text
    assert bomb.stat().st_size < 1 << 20
    proc = run_cli("status", "--from-nvidia-smi", str(bomb))
    assert proc.returncode == 2
    assert _one_line(proc.stderr).startswith(
        f"nvfabric: input_unreadable: {bomb}: larger than 16 MiB decompressed (a gzip file), "
        "the limit for an nvidia-smi capture")


def test_imex_domain_from_a_gzip_capture(tmp_path: Path) -> None:
    plain, rc_plain = run_json("imex", "domain", "--from-file", str(IMEX_N))
    packed = tmp_path / "imex-ctl-N.txt.gz"
    packed.write_bytes(gzip.compress(IMEX_N.read_bytes()))
    out, rc = run_json("imex", "domain", "--from-file", str(packed))
    assert (rc, out) == (rc_plain, plain)


def test_read_capped_and_read_text_file_decompress_within_their_bounds(tmp_path: Path) -> None:
    text = IMEX_N.read_bytes()
    packed = tmp_path / "f.xz"
    packed.write_bytes(lzma.compress(text))
    assert textfile.read_capped(str(packed), len(text), "a test") == text
    assert textfile.read_text_file(str(packed), "--from-file", len(text)) == text.decode()
    with pytest.raises(NvfabricError, match="decompressed \\(a xz file\\), the limit for a test"):
        textfile.read_capped(str(packed), len(text) - 1, "a test")


@pytest.mark.parametrize(("head", "fmt"), [
    (gzip.compress(b"x", mtime=0)[:10], "gzip"), (lzma.compress(b"x")[:10], "xz"),
    (bz2.compress(b"x")[:10], "bzip2"), (ZSTD[:10], "zstd"),
    (b"BZh9 text!", None), (b"Jun 28 10:", None), (b"", None),
], ids=["gzip", "xz", "bzip2", "zstd", "BZh-text", "text", "empty"])
def test_compression_is_told_by_the_magic_bytes(head: bytes, fmt: str | None) -> None:
    assert textfile.compression_of(head) == fmt


def _crashed_run_history(tmp_path: Path) -> Path:
    """The event history ``nvfabric run`` leaves when fabric manager crashes after the fabric
    was ready (the records a simulated hgx-h100 run with ``crash_after_s`` wrote)."""
    state = tmp_path / "run/nvfabric"
    state.mkdir(parents=True)
    h = History(str(state), clock=iter([1796190364.6, 1796190364.7, 1796190365.7,
                                        1796190365.8]).__next__)
    h.append("run", {"pid": 8736, "services": ["fabricmanager"], "fabric": "nvswitch",
                     "driver_version": "550.90.07"})
    h.append("ready", {"ready_after_s": 0.111, "restarts": 0,
                       "services": [{"service": "fabricmanager", "pid": 8742}]})
    h.append("exit", {"code": "service_exited", "severity": "error",
                      "message": "fabricmanager (pid 8742) exited with code 1 after the fabric "
                                 "was ready",
                      "hint": "read the service's last lines above", "service": "fabricmanager"})
    h.append("stop", {"result": "failed", "exit_code": 1, "restarts": 0})
    h.close()
    return state / "events"


def _doctor_stdin(data: bytes, *args: str) -> runkit.Done:
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    return runkit.run([sys.executable, "-m", "nvfabric", "doctor", "--log", "-", *args],
                      input=data, timeout=60, env=env, text=False)


@pytest.mark.parametrize("suffix", ["", *sorted(COMPRESS)])
def test_a_run_history_is_told_by_its_header_however_it_is_given(tmp_path: Path,
                                                                 suffix: str) -> None:
    events = _crashed_run_history(tmp_path)
    data = events.read_bytes() if not suffix else COMPRESS[suffix](events.read_bytes())
    given = tmp_path / f"events.{suffix or 'copy'}"
    given.write_bytes(data)
    for proc in (run_cli("doctor", "--log", str(given)), _doctor_stdin(data)):
        out = proc.stdout if isinstance(proc.stdout, str) else proc.stdout.decode()
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert out.startswith("4 records of an event history read, fabric kind unknown: "
                              "1 finding"), out
        assert "service_exited" in out
    doc, rc = run_json("doctor", "--log", str(given), "--log", str(SXID))
    assert rc == 1 and (doc["lines"], doc["records"]) == (3, 4)  # the dmesg file: 3 lines
    assert [f["code"] for f in doc["findings"]] == ["nvswitch_nonfatal_error", "service_exited"]


def test_triage_takes_a_compressed_history(tmp_path: Path) -> None:
    events = _crashed_run_history(tmp_path)
    packed = tmp_path / "events.gz"
    packed.write_bytes(gzip.compress(events.read_bytes()))
    report = CORPUS.parent / "bugreports/hgx-h100-healthy.log.gz"
    doc, rc = run_json("triage", str(report), "--events", str(packed))
    added = [f["code"] for f in doc["findings"] if f.get("section") == "nvfabric events"]
    assert (added, rc) == (["service_exited"], 1)


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_bytes_after_the_compressed_data_are_a_warning_the_log_read(tmp_path: Path,
                                                                    suffix: str) -> None:
    """``(cat f.gz; echo garbage) > t.gz``: gzip(1) and bzip2(1) decompress it whole and warn
    of the trailing garbage; so does nvfabric, counting the bytes, in its own words."""
    plain, rc_plain = run_json("doctor", "--log", str(SXID))
    packed = tmp_path / f"t.{suffix}"
    packed.write_bytes(COMPRESS[suffix](SXID.read_bytes()) + b"garbage\n")
    for proc in (run_cli("doctor", "--log", str(packed), "--json"),
                 _doctor_stdin(packed.read_bytes(), "--json")):
        err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode()
        assert proc.returncode == rc_plain, err
        assert json.loads(proc.stdout)["findings"] == plain["findings"]
        fmt = {"gz": "gzip", "xz": "xz", "bz2": "bzip2"}[suffix]
        name = str(packed) if isinstance(proc.stderr, str) else "the stream on stdin"
        assert _one_line(err) == (f"nvfabric: warning: {name}: the {fmt} data is whole but "
                                  f"followed by 8 bytes that are not {fmt}; they were ignored "
                                  "(as gzip and bzip2 do)")


def test_two_gzip_members_are_read_as_zcat_reads_them(tmp_path: Path) -> None:
    plain, _ = run_json("doctor", "--log", str(SXID))
    both = tmp_path / "kern.log.gz"
    both.write_bytes(gzip.compress(SXID.read_bytes()) * 2)
    doc, rc = run_json("doctor", "--log", str(both))
    assert (rc, doc["lines"]) == (0, 6)  # a non-fatal SXid: a warning
    assert [f["count"] for f in doc["findings"]] == [2 * f["count"] for f in plain["findings"]]


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_damaged_stream_on_stdin_is_named_as_the_stream(suffix: str) -> None:
    whole = COMPRESS[suffix](SXID.read_bytes() * 50)
    proc = _doctor_stdin(whole[: len(whole) // 2])
    line = _one_line(proc.stderr.decode())
    fmt = {"gz": "gzip", "xz": "xz", "bz2": "bzip2"}[suffix]
    assert proc.returncode == 2
    assert line.startswith(f"nvfabric: input_unreadable: the stream on stdin: the {fmt} "
                           "stream ends in the middle (the stream is cut short)"), line
    assert f"{fmt} -t -" not in line and f"`{fmt} -t FILE` checks a file" in line


@pytest.mark.parametrize("suffix", ["gz", "xz"])
def test_nul_padding_after_gzip_or_xz_is_read_silently(tmp_path: Path, suffix: str) -> None:
    """``gzip -t`` and ``xz -t`` pass NUL padding (xz: stream padding, between streams too)."""
    one = COMPRESS[suffix](SXID.read_bytes())
    padded = tmp_path / f"kern.log.{suffix}"
    padded.write_bytes(one + bytes(8) + one + bytes(4))
    proc = run_cli("doctor", "--log", str(padded), "--json")
    assert (proc.returncode, proc.stderr, json.loads(proc.stdout)["lines"]) == (0, "", 6)

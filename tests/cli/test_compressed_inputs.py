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

"""Safe extraction and idempotent install of redist archives made in the test: archives with
``../``, absolute paths, escaping symlinks, outside hard links and devices are refused whole
and nothing is written."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from nvfabric.artifacts.install import install_archive, verify
from nvfabric.artifacts.installed import RECORD
from nvfabric.artifacts.model import Artifact
from nvfabric.artifacts.safetar import Member, refusals
from nvfabric.model.errors import NvfabricError
from tests.cli.test_fetch_mirror import component_archive, sha256

TOP = "fabricmanager-linux-x86_64-580.95.05-archive"


def artifact(data: bytes, version: str = "580.95.05") -> Artifact:
    return Artifact("fabricmanager", version, "x86_64", f"https://m/{TOP}.tar.xz",
                    sha256(data), len(data), "redist")


def write(tmp: Path, data: bytes, name: str = "a.tar.xz") -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def evil_archive(kind: str) -> bytes:
    """A tar.xz with one good file and one member of the given hostile ``kind``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        good = tarfile.TarInfo(f"{TOP}/bin/nv-fabricmanager")
        good.size = 3
        tar.addfile(good, io.BytesIO(b"ok\n"))
        info = tarfile.TarInfo(f"{TOP}/x")
        if kind == "dotdot":
            info.name = f"{TOP}/../../escaped.txt"
        elif kind == "absolute":
            info.name = "/tmp/nvfabric-absolute-escape.txt"
        elif kind == "symlink_out":
            info.type, info.linkname = tarfile.SYMTYPE, "../../../outside"
        elif kind == "symlink_abs":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "hardlink_out":
            info.type, info.linkname = tarfile.LNKTYPE, "../etc/passwd"
        elif kind == "device":
            info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        payload = b"pwned\n" if info.type == tarfile.REGTYPE else None
        if payload is not None:
            info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return buf.getvalue()


@pytest.mark.parametrize(
    "kind", ["dotdot", "absolute", "symlink_out", "symlink_abs", "hardlink_out", "device"]
)
def test_hostile_archive_is_refused_and_nothing_is_written(tmp_path: Path, kind: str) -> None:
    data = evil_archive(kind)
    archive = write(tmp_path, data)
    prefix = tmp_path / "root" / "opt" / "nvfabric"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(NvfabricError) as err:
        install_archive(archive, artifact(data), str(prefix))
    assert err.value.finding.code == "archive_unsafe"
    assert err.value.exit_code == 1
    assert "nothing was written" in err.value.finding.message
    assert not (tmp_path / "root").exists(), "not even the prefix was created"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not Path("/tmp/nvfabric-absolute-escape.txt").exists()


def test_refusals_pure_rules() -> None:
    ok = [Member("a/b", "file"), Member("a/l", "symlink", "b"), Member("a/d/l", "symlink", "../b"),
          Member("a/h", "hardlink", "a/b"), Member("./a/c", "file")]
    assert refusals(ok) == []
    bad = [Member("a/../../x", "file"), Member("/x", "file"), Member("a/l", "symlink", "../../x"),
           Member("l", "symlink", ".."), Member("a/h", "hardlink", "/etc/shadow"),
           Member("a/fifo", "other"), Member("", "file")]
    assert len(refusals(bad)) == len(bad)


def test_install_extracts_strips_the_top_directory_and_records_hashes(tmp_path: Path) -> None:
    rel, data = component_archive("libnvidia_nscq", "linux-x86_64", "580.95.05")
    art = Artifact("libnvidia_nscq", "580.95.05", "x86_64", f"https://m/{rel}", sha256(data),
                   len(data), "redist")
    done = install_archive(write(tmp_path, data), art, str(tmp_path / "prefix"))
    target = tmp_path / "prefix" / "libnvidia_nscq-580.95.05"
    assert done.path == str(target) and done.changed and done.files == 2
    lib = target / "lib" / "libnvidia_nscq.so.580.95.05"
    assert lib.read_bytes() == b"\x7fELF fake"
    assert os.readlink(target / "lib" / "libnvidia_nscq.so") == "libnvidia_nscq.so.580.95.05"
    record = json.loads((target / RECORD).read_text())
    assert record["archive_sha256"] == sha256(data)
    files = {f["path"]: f for f in record["files"]}
    assert files["lib/libnvidia_nscq.so.580.95.05"]["sha256"] == sha256(b"\x7fELF fake")
    assert record["links"] == [{"path": "lib/libnvidia_nscq.so",
                                "target": "libnvidia_nscq.so.580.95.05"}]
    assert [p.name for p in (tmp_path / "prefix").iterdir()] == [target.name], "no staging left"


def test_install_is_idempotent_and_repairs_a_tampered_install(tmp_path: Path) -> None:
    rel, data = component_archive("fabricmanager", "linux-x86_64", "580.95.05")
    art = Artifact("fabricmanager", "580.95.05", "x86_64", f"https://m/{rel}", sha256(data),
                   len(data), "redist")
    archive = write(tmp_path, data)
    prefix = str(tmp_path / "prefix")
    first = install_archive(archive, art, prefix)
    record = Path(first.path) / RECORD
    mtime = record.stat().st_mtime_ns
    again = install_archive(archive, art, prefix)
    assert not again.changed
    assert record.stat().st_mtime_ns == mtime, "an intact install is not rewritten"
    binary = Path(first.path) / "bin" / "fabricmanager"
    binary.write_text("tampered")
    problems = verify(first.path, json.loads(record.read_text()))
    assert problems == ["bin/fabricmanager: content changed"]
    repaired = install_archive(archive, art, prefix)
    assert repaired.changed
    assert binary.read_text() == "#!/bin/sh\necho fabricmanager 580.95.05\n"
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755


def test_setuid_bits_are_dropped_by_the_data_filter(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        info = tarfile.TarInfo(f"{TOP}/bin/suid")
        info.size, info.mode = 2, 0o4755
        tar.addfile(info, io.BytesIO(b"x\n"))
    data = buf.getvalue()
    done = install_archive(write(tmp_path, data), artifact(data), str(tmp_path / "p"))
    mode = stat.S_IMODE((Path(done.path) / "bin" / "suid").stat().st_mode)
    assert not mode & stat.S_ISUID


def test_damaged_archive_is_one_clear_error(tmp_path: Path) -> None:
    data = b"\xfd7zXZ\x00 not really"
    with pytest.raises(NvfabricError) as err:
        install_archive(write(tmp_path, data), artifact(data), str(tmp_path / "p"))
    assert err.value.finding.code == "input_unreadable"
    assert not (tmp_path / "p").exists()

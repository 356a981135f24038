"""tests/data is a byte-identical copy of ../shared (cases, corpus, fuzz, the bench starter):
checked against ../shared when it sits beside the repository, against the copy's own manifest
always, and the comparison itself on folders made in the test."""

from __future__ import annotations

import sys
from pathlib import Path

from tests import runkit
from tests.datasync import (
    DATA,
    REPO,
    copied_files,
    differences,
    manifest_differences,
    read_manifest,
    shared_dir,
    sync,
)


def test_tests_data_is_the_copy_of_shared() -> None:
    """The check of make test: with ../shared beside the repository every copied file is
    byte-identical (run `make sync-shared` to refresh); the manifest matches the copy always."""
    assert manifest_differences() == [], "tests/data departs from SHARED.sha256"
    shared = shared_dir()
    if shared.is_dir():
        diffs = differences(shared)
        assert diffs == [], f"tests/data differs from {shared}; run `make sync-shared`: {diffs}"
    else:
        # No ../shared (a fresh clone): the copy holds every kind of data the tests read.
        listed = read_manifest()
        assert {rel.split("/", 1)[0] for rel in listed} == {"bench", "cases", "corpus", "fuzz"}


def test_the_copy_has_every_case_file_kind() -> None:
    rels = copied_files(DATA)
    assert {"cases/README.md", "cases/RUN.md", "corpus/PROVENANCE.md", "fuzz/README.md",
            "bench/limit-starter.c"} <= set(rels)
    for prefix in "DFPS":
        assert any(r.startswith(f"cases/{prefix}") and r.endswith(".yaml") for r in rels)


def _tree(base: Path, files: dict[str, bytes]) -> Path:
    for rel, content in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(content)
    return base


def test_differences_name_each_file(tmp_path: Path) -> None:
    shared = _tree(tmp_path / "shared", {
        "cases/D01-a.yaml": b"id: D01\n", "cases/D02-b.yaml": b"id: D02\n",
        "cases/notes.txt": b"not copied", "corpus/logs/x.log": b"line\n",
        "fuzz/f.bin": b"\x00\xff", "bench/limit-starter.c": b"int main;"})
    data = _tree(tmp_path / "data", {
        "cases/D01-a.yaml": b"id: D01 \n", "corpus/logs/x.log": b"line\n",
        "corpus/old.txt": b"gone", "fuzz/f.bin": b"\x00\xff",
        "bench/limit-starter.c": b"int main;"})
    assert differences(shared, data) == [
        "missing from the copy: cases/D02-b.yaml", "differs: cases/D01-a.yaml",
        "not in ../shared: corpus/old.txt"]


def test_sync_makes_an_exact_copy_and_its_manifest(tmp_path: Path) -> None:
    shared = _tree(tmp_path / "shared", {
        "cases/D01-a.yaml": b"id: D01\n", "cases/RUN.md": b"# runs\n",
        "corpus/deep/er/x.log": b"\xff\xfel\x00", "fuzz/f": b"1"})
    data = _tree(tmp_path / "data", {"cases/D01-a.yaml": b"old", "fuzz/stale": b"x"})
    changed = sync(shared, data)
    assert "differs: cases/D01-a.yaml" in changed and "not in ../shared: fuzz/stale" in changed
    assert differences(shared, data) == []
    assert not (data / "fuzz/stale").exists()
    assert manifest_differences(data) == []
    (data / "corpus/deep/er/x.log").write_bytes(b"changed")
    assert manifest_differences(data) == ["differs from SHARED.sha256: corpus/deep/er/x.log"]


def test_sync_shared_cli_check_reports_and_exits_1(tmp_path: Path) -> None:
    """`python -m tests.datasync --check` against a ../shared that has one more case."""
    shared = tmp_path / "shared"
    for rel in copied_files(DATA):
        (shared / rel).parent.mkdir(parents=True, exist_ok=True)
        (shared / rel).write_bytes((DATA / rel).read_bytes())
    (shared / "cases/D99-new.yaml").write_text("id: D99\n", encoding="utf-8")
    proc = runkit.run([sys.executable, "-m", "tests.datasync", "--check"], cwd=REPO,
                      env={"NVFABRIC_SHARED": str(shared), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["missing from the copy: cases/D99-new.yaml"]

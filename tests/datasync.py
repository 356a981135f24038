"""The copy of the field data in tests/data and its source, ../shared (the project's read-only
field data beside the repository; ``NVFABRIC_SHARED`` names another place).

What is copied (byte for byte): ``cases/`` (every ``*.yaml``, ``README.md``, ``RUN.md``),
``corpus/`` and ``fuzz/`` (every file, at any depth), ``bench/limit-starter.c``,
``k8s/apiserver.sh`` (the real kube-apiserver + etcd of the Kubernetes integration tests and
bench; run with ``bash``: the copy keeps no mode). The copy's
``SHARED.sha256`` lists each copied file with its SHA-256, so a clone with no ../shared can
still tell a complete copy from a damaged one.

``python -m tests.datasync`` (``make sync-shared``) refreshes the copy from ../shared: new and
changed files are written, files ../shared no longer has are removed from the copied folders,
and the manifest is rewritten. ``python -m tests.datasync --check`` only lists differences
(exit 1 when there are any).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
MANIFEST = "SHARED.sha256"


def shared_dir() -> Path:
    """../shared beside the repository, or ``$NVFABRIC_SHARED`` when set."""
    env = os.environ.get("NVFABRIC_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def copied_files(base: Path) -> list[str]:
    """Relative paths (``cases/D10-….yaml``, ``corpus/logs/…``) of the files of ``base`` that
    belong to the copy, sorted; missing folders give nothing."""
    out: list[str] = []
    cases = base / "cases"
    if cases.is_dir():
        out += [f"cases/{p.name}" for p in cases.iterdir() if p.is_file()
                and (p.suffix == ".yaml" or p.name in ("README.md", "RUN.md"))]
    for folder in ("corpus", "fuzz"):
        top = base / folder
        if top.is_dir():
            out += [p.relative_to(base).as_posix() for p in top.rglob("*") if p.is_file()]
    for rel in ("bench/limit-starter.c", "k8s/apiserver.sh"):
        if (base / rel).is_file():
            out.append(rel)
    return sorted(out)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(data: Path = DATA) -> dict[str, str]:
    """``{relative path: sha256}`` of ``data/SHARED.sha256`` (``sha256  path`` lines)."""
    out: dict[str, str] = {}
    for line in (data / MANIFEST).read_text(encoding="utf-8").splitlines():
        digest, _, rel = line.partition("  ")
        out[rel] = digest
    return out


def differences(shared: Path, data: Path = DATA) -> list[str]:
    """One line per file where ``data`` is not a byte-identical copy of ``shared``:
    ``missing from the copy: X``, ``differs: X``, ``not in ../shared: X``. Empty when equal."""
    theirs, ours = copied_files(shared), copied_files(data)
    out = [f"missing from the copy: {rel}" for rel in theirs if rel not in ours]
    out += [f"differs: {rel}" for rel in theirs
            if rel in ours and (shared / rel).read_bytes() != (data / rel).read_bytes()]
    out += [f"not in ../shared: {rel}" for rel in ours if rel not in theirs]
    return out


def manifest_differences(data: Path = DATA) -> list[str]:
    """Where ``data`` departs from its own manifest (a lost, changed or unlisted file)."""
    listed = read_manifest(data)
    present = copied_files(data)
    out = [f"missing from the copy: {rel}" for rel in listed if rel not in present]
    out += [f"differs from {MANIFEST}: {rel}" for rel in present
            if rel in listed and _sha256(data / rel) != listed[rel]]
    out += [f"not in {MANIFEST}: {rel}" for rel in present if rel not in listed]
    return out


def sync(shared: Path, data: Path = DATA) -> list[str]:
    """Make ``data`` the copy of ``shared`` and rewrite the manifest; return what changed
    (the :func:`differences` lines before the sync). Raises ``FileNotFoundError`` when
    ``shared`` has no ``cases`` folder (nothing to copy from)."""
    if not (shared / "cases").is_dir():
        raise FileNotFoundError(f"{shared}/cases: not a folder; nothing to copy from")
    changed = differences(shared, data)
    theirs = copied_files(shared)
    for rel in copied_files(data):
        if rel not in theirs:
            (data / rel).unlink()
    for rel in theirs:
        dest = data / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.is_file() or dest.read_bytes() != (shared / rel).read_bytes():
            shutil.copyfile(shared / rel, dest)
    lines = [f"{_sha256(data / rel)}  {rel}\n" for rel in theirs]
    (data / MANIFEST).write_text("".join(lines), encoding="utf-8")
    return changed


def main(argv: list[str]) -> int:
    """``--check``: list differences, exit 1 if any; otherwise sync and list what changed."""
    shared = shared_dir()
    if "--check" in argv:
        diffs = differences(shared) if shared.is_dir() else manifest_differences()
        for line in diffs:
            print(line)
        return 1 if diffs else 0
    try:
        changed = sync(shared)
    except FileNotFoundError as exc:
        print(f"sync-shared: {exc}", file=sys.stderr)
        return 2
    for line in changed:
        print(line)
    print(f"tests/data is the copy of {shared} ({len(copied_files(shared))} files, "
          f"{len(changed)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`make lint`'s check of the typed vocabulary: a misspelt finding code, fabric kind, severity or
verdict word is a mypy error, and so is every comparison of a fabric kind to a misspelt word
in src (each ``x == "nvlink5"`` and ``!=`` of src, misspelt in a copy, must be refused by
``mypy --strict``, except where a kind is compared as text on purpose, with the reason).

Run as ``python -m tests.meta.vocab_typos`` from the repository root, after ``mypy --strict
src``: the misspellings' file is checked with that run's cache, the copy of src under
build/vocab-typos with a cache of its own that only the misspelt files invalidate, so a run
takes seconds once the first one has filled it. Exit 0 when every typo is refused, 1 (naming
what was let through) otherwise.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "build" / "vocab-typos"

#: A module that uses the vocabulary right, then three typos mypy must refuse (one per line).
_USES = '''
from nvfabric.model.findings import Finding
from nvfabric.rules.plan import Plan
from nvfabric.rules.verdict import Verdict


def fine(p: Plan) -> Finding:
    if p.fabric == "nvlink5" and Verdict("healthy").verdict == "healthy":
        return Finding("nvlsm_missing", "error", "NVLSM is not installed")
    return Finding("fm_not_applicable", "info", "nothing to manage")
'''
_TYPOS = '''

def typos(p: Plan) -> list[object]:
    return [
        Finding("nvlsm_mising", "error", "a misspelt finding code"),
        p.fabric == "nvlnk5",
        Finding("nvlsm_missing", "eror", "a misspelt severity"),
        Verdict("helthy"),
    ]
'''




#: Where a fabric kind is compared as plain text on purpose, by file, with the reason.
_TEXT_FABRIC = {
    "nvfabric/simulate/fakebin/fabricmanager.py": "a fake daemon run as its own script: the "
                                                  "kind is a word of the simulated node's spec",
    "nvfabric/rules/imex/domain.py": "the kinds other nodes' `status --json` reports name: a "
                                     "word a newer nvfabric may add is counted, not refused",
}
_COMPARISON = re.compile(r'([\w.]+)(\s*(?:==|!=)\s*)"(none|nvswitch|nvlink5|mnnvl)"')




def _mypy(*args: str, cache: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                           "--cache-dir", str(cache), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=900, check=False)


def misspelt_words() -> list[str]:
    """The problems of the misspellings' file: the right uses must pass, and each typo must be
    exactly one error on its line, of the kind that names it."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "uses_vocab.py"
        source.write_text(_USES)
        good = _mypy(str(source), cache=REPO / ".mypy_cache", cwd=REPO)
        if good.returncode != 0:
            return [f"the right uses are refused: {good.stdout}{good.stderr}"]
        source.write_text(_USES + _TYPOS)
        bad = _mypy(str(source), cache=REPO / ".mypy_cache", cwd=REPO)
    lines = (_USES + _TYPOS).splitlines()

    def line_of(typo: str) -> int:
        return next(n for n, text in enumerate(lines, 1) if typo in text)

    by_line = {int(ln.split(":")[1]): ln for ln in bad.stdout.splitlines() if ": error: " in ln}
    expected = {line_of('"nvlsm_mising"'): ("[arg-type]", "nvlsm_mising"),
                line_of('"nvlnk5"'): ("[comparison-overlap]", "nvlnk5"),
                line_of('"eror"'): ("[arg-type]", "eror"),
                line_of('"helthy"'): ("[arg-type]", "helthy")}
    if bad.returncode != 1 or sorted(by_line) != sorted(expected):
        return [f"expected one error on each of lines {sorted(expected)}:\n{bad.stdout}"]
    return [f"line {n}: {by_line[n]}" for n, (kind, typo) in expected.items()
            if kind not in by_line[n] or typo not in by_line[n]]


def _copy_with_typos() -> set[tuple[str, int]]:
    """src copied under :data:`WORK` with every comparison of a fabric kind to a word misspelt
    (a file is rewritten only when its text changed, so mypy's cache stays valid for the
    rest); the (file, line) of each misspelling."""
    sites: set[tuple[str, int]] = set()
    wanted: set[Path] = set()
    for path in sorted((REPO / "src").rglob("*.py")):
        if "__pycache__" in path.parts or ".egg-info" in str(path):
            continue
        name = path.relative_to(REPO / "src").as_posix()
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        if name not in _TEXT_FABRIC:
            for number, line in enumerate(lines, 1):
                # the IMEX owner's "none" is not a fabric kind
                words = [m for m in _COMPARISON.finditer(line)
                         if not m.group(1).endswith("owner")]
                for m in reversed(words):
                    line = f'{line[:m.end() - 1]}_typo"{line[m.end():]}'
                if words:
                    sites.add((f"src/{name}", number))
                    lines[number - 1] = line
        copy = WORK / "src" / name
        wanted.add(copy)
        text = "".join(lines)
        if not copy.is_file() or copy.read_text(encoding="utf-8") != text:
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(text, encoding="utf-8")
    for stale in (WORK / "src").rglob("*.py"):
        if stale not in wanted:
            stale.unlink()
    return sites


def unchecked_comparisons() -> list[str]:
    """The misspelt comparisons of the copy that mypy let through."""
    sites = _copy_with_typos()
    if len(sites) < 20:  # the comparisons of plan, verdict, bring-up, status, triage
        return [f"only {len(sites)} comparisons of a fabric kind to a word found"]
    proc = _mypy("src", cache=WORK / "cache", cwd=WORK)
    flagged = {(ln.split(":")[0], int(ln.split(":")[1])) for ln in proc.stdout.splitlines()
               if "[comparison-overlap]" in ln and "_typo" in ln}
    return [f"{f}:{n}: a misspelt fabric kind is not a mypy error" for f, n in sorted(
        sites - flagged)]


def main() -> int:
    problems = misspelt_words() + unchecked_comparisons()
    for p in problems:
        print(f"vocab_typos: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

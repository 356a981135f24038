"""The typed vocabulary (nvfabric.model.vocab): a misspelt word is a mypy error, and words read
from text are checked against the same lists at run time."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from nvfabric.cli.doctor import doctor
from nvfabric.cli.status import status
from nvfabric.model import vocab
from nvfabric.model.findings import CODES, Finding, is_code
from nvfabric.rules.plan import SERVICES_BY_FABRIC
from tests import runkit
from tests.conftest import REPO, run_cli

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


def _mypy(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "uses_vocab.py"
    source.write_text(text)
    return runkit.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                       "--cache-dir", str(tmp_path / "mypy-cache"), str(source)],
                      timeout=300, cwd=REPO)


def test_misspelt_code_fabric_severity_and_verdict_are_mypy_errors(tmp_path: Path) -> None:
    good = _mypy(tmp_path, _USES)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _mypy(tmp_path, _USES + _TYPOS)
    assert bad.returncode == 1
    errors = [ln for ln in bad.stdout.splitlines() if ": error: " in ln]
    lines = (_USES + _TYPOS).splitlines()

    def line_of(typo: str) -> int:
        return next(n for n, text in enumerate(lines, 1) if typo in text)

    # exactly one error per typo, on the typo's line, of the kind that names it
    by_line = {int(ln.split(":")[1]): ln for ln in errors}
    expected = {line_of('"nvlsm_mising"'): ("[arg-type]", "nvlsm_mising"),
                line_of('"nvlnk5"'): ("[comparison-overlap]", "nvlnk5"),
                line_of('"eror"'): ("[arg-type]", "eror"),
                line_of('"helthy"'): ("[arg-type]", "helthy")}
    assert sorted(by_line) == sorted(expected), bad.stdout
    for number, (kind, typo) in expected.items():
        assert kind in by_line[number] and typo in by_line[number], by_line[number]


def test_codes_are_the_words_of_finding_code() -> None:
    assert CODES == frozenset(get_args(vocab.FindingCode))
    assert len(get_args(vocab.FindingCode)) == len(CODES)  # no word listed twice


def test_a_code_from_data_is_still_checked_when_the_finding_is_made() -> None:
    word: str = "nvlsm_mising"  # as a YAML row or a JSON report would give it
    assert not is_code(word)
    with pytest.raises(ValueError, match="unknown finding code 'nvlsm_mising'"):
        Finding(word, "error", "x")  # type: ignore[arg-type]
    assert is_code("nvlsm_missing")


@pytest.mark.parametrize(("guard", "words"), [
    (vocab.is_fabric_kind, ("none", "nvswitch", "nvlink5", "mnnvl")),
    (vocab.is_service, ("nvlsm", "fabricmanager", "imex")),
    (vocab.is_severity, ("info", "warning", "error")),
    (vocab.is_health_summary, ("healthy", "unhealthy", "limited_capacity", "not_supported")),
])
def test_guards_accept_exactly_the_design_words(guard: object, words: tuple[str, ...]) -> None:
    assert callable(guard)
    assert [w for w in words if guard(w)] == list(words)
    for near in ("", "NVLink5", "nvlink5 ", "Healthy", "warn", "imexd", None, 5):
        assert not guard(near)


def test_services_by_fabric_in_start_order_and_only_services() -> None:
    assert set(SERVICES_BY_FABRIC) == set(vocab.FABRIC_KINDS)
    assert SERVICES_BY_FABRIC["nvlink5"] == ("nvlsm", "fabricmanager")  # NVLSM first
    assert {k for k, s in SERVICES_BY_FABRIC.items() if "fabricmanager" in s} == vocab.FM_FABRICS
    assert vocab.FM_FABRICS | vocab.NO_FM_FABRICS == set(vocab.FABRIC_KINDS)
    assert not vocab.FM_FABRICS & vocab.NO_FM_FABRICS


def test_fabric_options_offer_the_vocabulary_and_refuse_a_typo() -> None:
    for command in (status, doctor):
        option = next(p for p in command.params if p.name == "fabric")
        assert tuple(option.type.choices) == vocab.FABRIC_KINDS  # type: ignore[attr-defined]
    proc = run_cli("status", "--fabric", "nvlnk5", "--from-nvidia-smi", "/dev/null")
    assert proc.returncode == 2
    assert "'nvlnk5' is not one of" in proc.stderr


#: Where a fabric kind is compared as plain text on purpose, by file, with the reason.
_TEXT_FABRIC = {
    "nvfabric/simulate/fakebin/fabricmanager.py": "a fake daemon run as its own script: the "
                                                  "kind is a word of the simulated node's spec",
    "nvfabric/rules/imex/domain.py": "the kinds other nodes' `status --json` reports name: a "
                                     "word a newer nvfabric may add is counted, not refused",
}
_COMPARISON = re.compile(r'([\w.]+)(\s*(?:==|!=)\s*)"(none|nvswitch|nvlink5|mnnvl)"')


def test_every_comparison_of_a_fabric_kind_to_a_word_is_type_checked(tmp_path: Path) -> None:
    """Misspell every ``x == "nvlink5"`` (and !=) in a copy of src: mypy --strict must refuse
    each one (the operand is a FabricKind), except where _TEXT_FABRIC says why it is text."""
    shutil.copytree(REPO / "src", tmp_path / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    sites = set()
    for path in sorted((tmp_path / "src").rglob("*.py")):
        name = path.relative_to(tmp_path / "src").as_posix()
        if name in _TEXT_FABRIC:
            continue
        lines = path.read_text().splitlines(keepends=True)
        for number, line in enumerate(lines, 1):
            # the IMEX owner's "none" is not a fabric kind
            words = [m for m in _COMPARISON.finditer(line) if not m.group(1).endswith("owner")]
            for m in reversed(words):
                line = f'{line[:m.end() - 1]}_typo"{line[m.end():]}'
            if words:
                sites.add((f"src/{name}", number))
                lines[number - 1] = line
        path.write_text("".join(lines))
    assert len(sites) >= 20  # the comparisons of plan, verdict, bring-up, status, triage
    proc = runkit.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                       "--cache-dir", str(tmp_path / "mypy-cache"), "src"],
                      timeout=600, cwd=tmp_path)
    flagged = {(ln.split(":")[0], int(ln.split(":")[1])) for ln in proc.stdout.splitlines()
               if "[comparison-overlap]" in ln and "_typo" in ln}
    assert sorted(sites - flagged) == [], sorted(sites - flagged)

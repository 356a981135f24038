"""The typed vocabulary (nvfabric.model.vocab): words read from text are checked against the
same lists at run time. That a misspelt word is a mypy error is checked by `make lint`
(tests/meta/vocab_typos.py)."""

from __future__ import annotations

from typing import get_args

import pytest

from nvfabric.cli.doctor import doctor
from nvfabric.cli.status import status
from nvfabric.model import vocab
from nvfabric.model.findings import CODES, Finding, is_code
from nvfabric.rules.plan import SERVICES_BY_FABRIC
from tests.conftest import run_cli


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

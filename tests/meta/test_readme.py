"""The README documents every finding code and every command (docs that cannot drift)."""

from __future__ import annotations

from nvfabric.cli import COMMANDS
from nvfabric.model.findings import CODES
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def test_every_finding_code_is_documented() -> None:
    missing = sorted(c for c in CODES if f"`{c}`" not in README)
    assert missing == []


def test_every_command_is_documented() -> None:
    missing = sorted(c for c in COMMANDS if f"`nvfabric {c}" not in README)
    assert missing == []


def test_quick_start_has_exactly_the_two_setup_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick.split("```sh", 1)[1].split("```", 1)[0]
    commands = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.strip()]
    assert commands == ["make demo", "make test"]

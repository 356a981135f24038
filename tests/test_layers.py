"""The layer contract ([tool.importlinter] in pyproject.toml, run by `make lint`): the real tree
keeps it, and an import that breaks it, injected into a copy of src, fails lint-imports with
the importer, the imported module and the line named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import runkit
from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the nvfabric package under ``tree``/src with ``tree``/pyproject.toml's
    contract; ``tree``/src comes first on the path, before the installed (editable) nvfabric."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    return runkit.run([str(LINT_IMPORTS), "--no-cache"], timeout=300, cwd=tree, env=env)


def test_the_real_tree_keeps_every_contract() -> None:
    proc = _lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(("module", "injected", "contract", "chain"), [
    # the example: a rule that reaches for the CLI
    ("rules/plan.py", "from nvfabric.cli import render",
     "rules are pure", "nvfabric.rules.plan -> nvfabric.cli.render"),
    # a rule that reads the host
    ("rules/verdict.py", "from nvfabric.facts import services",
     "rules are pure", "nvfabric.rules.verdict -> nvfabric.facts.services"),
    # a reader that reaches the CLI through another module: indirect imports count
    ("facts/pci.py", "from nvfabric.supervisor import lean",
     "facts and effects never reach the CLI", "nvfabric.facts.pci -> nvfabric.supervisor.lean"),
    # the vocabulary that depends on a layer above it
    ("model/findings.py", "from nvfabric.rules import plan",
     "model is the shared vocabulary", "nvfabric.model.findings -> nvfabric.rules.plan"),
    # an effect that renders
    ("effects/atomic.py", "from nvfabric.cli import render",
     "facts and effects never reach the CLI", "nvfabric.effects.atomic -> nvfabric.cli.render"),
    # a production writer that depends on the simulator
    ("effects/unitfile.py", "from nvfabric.simulate import tree",
     "facts and effects never reach the CLI",
     "nvfabric.effects.unitfile -> nvfabric.simulate.tree"),
])
def test_an_injected_violation_fails_naming_the_import(
    tmp_path: Path, module: str, injected: str, contract: str, chain: str
) -> None:
    shutil.copytree(REPO / "src", tmp_path / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    path = tmp_path / "src" / "nvfabric" / module
    lines = path.read_text().splitlines(keepends=True)
    # after the module docstring and `from __future__`: the first line that imports
    first = next(n for n, ln in enumerate(lines) if ln.startswith(("import ", "from "))
                 and "__future__" not in ln)
    lines.insert(first, injected + "  # injected by tests/test_layers.py\n")
    path.write_text("".join(lines))

    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    broken = [ln for ln in proc.stdout.splitlines() if " BROKEN" in ln]
    assert [ln for ln in broken if ln.startswith(contract)], proc.stdout
    assert f"{chain} (l.{first + 1})" in proc.stdout, proc.stdout

"""The layer contracts ([tool.importlinter] in pyproject.toml, run by `make lint`): one layer
order from the CLI down to model/ and no import cycle. The real tree keeps both, and an import
that breaks one, injected into a copy of src (at the top or inside a function), fails
lint-imports with the importer, the imported module and the line named."""

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


#: The contracts' names (pyproject.toml), as lint-imports prints them.
LAYERS = "one layer order, from the command line down to the shared base"
ACYCLIC = "no import cycle: not between the modules of a package, nor between packages"


def _inject(tmp_path: Path, module: str, text: str, inside_function: bool) -> int:
    """A copy of src and pyproject.toml under ``tmp_path`` with ``text`` (an import) added to
    ``module``: after its docstring and ``from __future__`` (the first line that imports), or
    at the end inside a function; the line number it got."""
    shutil.copytree(REPO / "src", tmp_path / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    path = tmp_path / "src" / "nvfabric" / module
    lines = path.read_text().splitlines(keepends=True)
    if inside_function:
        lines += ["\n", "\n", "def _injected() -> None:\n",
                  f"    {text}  # injected by tests/meta/test_layers.py\n"]
        at = len(lines) - 1
    else:
        at = next(n for n, ln in enumerate(lines) if ln.startswith(("import ", "from "))
                  and "__future__" not in ln)
        lines.insert(at, text + "  # injected by tests/meta/test_layers.py\n")
    path.write_text("".join(lines))
    return at + 1


@pytest.mark.parametrize(("module", "injected", "inside", "chain"), [
    # a rule that reaches for the CLI
    ("rules/plan.py", "from nvfabric.cli import render", False,
     "nvfabric.rules.plan -> nvfabric.cli.render"),
    # a rule that reads the host
    ("rules/verdict.py", "from nvfabric.facts import services", False,
     "nvfabric.rules.verdict -> nvfabric.facts.services"),
    # a reader that reaches the supervisor
    ("facts/pci.py", "from nvfabric.supervisor import lean", False,
     "nvfabric.facts.pci -> nvfabric.supervisor.lean"),
    # the vocabulary that depends on a layer above it
    ("model/findings.py", "from nvfabric.rules import plan", False,
     "nvfabric.model.findings -> nvfabric.rules.plan"),
    # an effect that renders
    ("effects/atomic.py", "from nvfabric.cli import render", False,
     "nvfabric.effects.atomic -> nvfabric.cli.render"),
    # a production writer that depends on the simulator
    ("effects/unitfile.py", "from nvfabric.simulate import tree", False,
     "nvfabric.effects.unitfile -> nvfabric.simulate.tree"),
    # the supervisor reaching up for a procedure, from inside a function: those count too
    ("supervisor/loop.py", "from nvfabric.app import run", True,
     "nvfabric.supervisor.loop -> nvfabric.app.run"),
    # two siblings of one layer are independent of each other
    ("observe/metrics.py", "from nvfabric.triage import spec", False,
     "nvfabric.observe.metrics -> nvfabric.triage.spec"),
])
def test_an_injected_violation_fails_naming_the_import(
    tmp_path: Path, module: str, injected: str, inside: bool, chain: str
) -> None:
    line = _inject(tmp_path, module, injected, inside)
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{LAYERS} BROKEN" in proc.stdout, proc.stdout
    assert f"{chain} (l.{line})" in proc.stdout, proc.stdout


def test_an_injected_cycle_inside_a_package_fails_naming_the_import(tmp_path: Path) -> None:
    # the supervisor's policy is a value the state machine and the loop read: it imports
    # neither (the loop imports the machine, the machine the policy)
    _inject(tmp_path, "supervisor/policy.py", "from nvfabric.supervisor import loop", False)
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{ACYCLIC} BROKEN" in proc.stdout and f"{LAYERS} KEPT" in proc.stdout, proc.stdout
    assert "No cycles are allowed in nvfabric.supervisor." in proc.stdout, proc.stdout
    assert "- .policy -> .loop (1 import)" in proc.stdout, proc.stdout

"""Sizes as signals for all of src: a module over 500 lines is a warning that names the reason
written down for it (a module may be long when it is one concept; it is never split into
files that share private names to meet a number), and one over 500 without a reason fails;
no function over 60 lines. Data tables (a top-level assignment of facts, one row a line) are
excepted by name, each with its reason; their lines do not count towards their module's 500.

A failure lists every offender with its size, so the list is the work left to do."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

from tests.conftest import REPO

SRC = REPO / "src"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

#: ``path:NAME`` of a top-level assignment -> why it is a data table, not code to split.
DATA_TABLES: dict[str, str] = {
    "nvfabric/model/vocab.py:FindingCode":
        "the catalogue of finding codes, one code a line in the groups of README "
        "'Finding codes' (extend, never rename)",
    "nvfabric/simulate/profiles.py:PROFILES":
        "the built-in node profiles of `nvfabric simulate`, one real product per entry",
    "nvfabric/model/health.py:NVML_RETURN":
        "nvml.h nvmlReturn_t, one value a line",
}


#: ``path`` of a module over :data:`MAX_MODULE_LINES` -> why it is one concept.
LONG_MODULES: dict[str, str] = {
    "nvfabric/rules/imex/owner.py":
        "the IMEX owner decision: one pure function from the evidence to one owner, its runner "
        "and its channel owner, with the reasons and the unit policy that follow from it; the "
        "parts read one evidence value and one table of layouts",
    "nvfabric/rules/verdict.py":
        "the verdict: one pure function of the fabric's readings and its rules (registration, "
        "health, services), which share its accumulator; split, they shared private names",
    "nvfabric/supervisor/machine.py":
        "the unit state machine: one class (start order, readiness, stop order, restarts, "
        "R04), whose parts share its state; split, they shared private names across files",
    "nvfabric/facts/smi.py":
        "the nvidia-smi readers: `-q` text, `-q -x` XML and the CSV query of one tool, each "
        "built into one FabricHealth by one private builder and shared value parsers; split, "
        "they shared private names",
    "nvfabric/app/run.py":
        "the run procedure: one procedure for every fabric kind, its steps in the vendor's "
        "order (read, prepare, lock, preflight, apply, supervise) and its options",
}


def _modules() -> list[Path]:
    return sorted(p for p in (SRC / "nvfabric").rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _table_spans(path: Path, tree: ast.Module) -> dict[str, int]:
    """Lines of each top-level assignment of ``path`` named in :data:`DATA_TABLES`."""
    spans = {}
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            key = f"{_name(path)}:{getattr(target, 'id', '')}"
            if key in DATA_TABLES:
                spans[key] = (node.end_lineno or node.lineno) - node.lineno + 1
    return spans


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int, int]]:
    """(qualified name, first line, lines) of every function, methods and nested ones too."""
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            out.append((prefix + node.name, node.lineno, lines))
            out += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            out += _functions(node, f"{prefix}{node.name}.")
        else:
            out += _functions(node, prefix)
    return out


def _parsed() -> list[tuple[Path, str, ast.Module]]:
    return [(p, text, ast.parse(text, str(p))) for p in _modules()
            for text in [p.read_text(encoding="utf-8")]]


def test_every_data_table_exception_names_a_table_that_exists() -> None:
    found: dict[str, int] = {}
    for path, _, tree in _parsed():
        found.update(_table_spans(path, tree))
    assert sorted(set(DATA_TABLES) - set(found)) == []
    assert all(reason.strip() for reason in DATA_TABLES.values())


def _long_modules() -> dict[str, int]:
    """Modules over :data:`MAX_MODULE_LINES` (data tables not counted) -> their lines."""
    out = {}
    for path, text, tree in _parsed():
        lines = len(text.splitlines()) - sum(_table_spans(path, tree).values())
        if lines > MAX_MODULE_LINES:
            out[_name(path)] = lines
    return out


def test_a_module_over_500_lines_has_its_reason_written_down() -> None:
    long = _long_modules()
    unexplained = [f"{name}: {lines} lines" for name, lines in long.items()
                   if not LONG_MODULES.get(name, "").strip()]
    assert unexplained == [], (
        f"{len(unexplained)} modules over {MAX_MODULE_LINES} lines without a reason in "
        "LONG_MODULES (one concept may be long; say why, or split where the concept splits):\n  "
        + "\n  ".join(unexplained))
    for name, lines in long.items():
        warnings.warn(f"{name}: {lines} lines: {LONG_MODULES[name]}", stacklevel=1)
    # a reason for a module that is no longer long (or gone) is dropped here
    assert sorted(set(LONG_MODULES) - set(long)) == []


def test_no_function_over_60_lines() -> None:
    offenders = []
    for path, _, tree in _parsed():
        for name, first, lines in _functions(tree):
            if lines > MAX_FUNCTION_LINES:
                offenders.append(f"{_name(path)}:{first} {name}: {lines} lines")
    assert offenders == [], (
        f"{len(offenders)} functions over {MAX_FUNCTION_LINES} lines:\n  "
        + "\n  ".join(offenders))


def test_the_counting_itself_on_a_known_shape(tmp_path: Path) -> None:
    """The walk finds methods and nested functions and counts a def from its line to its end."""
    source = "class A:\n    def m(self):\n        def inner():\n            return 1\n" \
             "        return inner()\n\n\nasync def f():\n    pass\n"
    names = {(n, first, lines) for n, first, lines in _functions(ast.parse(source))}
    assert names == {("A.m", 2, 4), ("A.m.inner", 3, 2), ("f", 8, 2)}

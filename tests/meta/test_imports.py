"""Imports at the top: nvfabric imports its own modules inside functions only where that buys
start-up time or memory a benchmark shows (bench/bench_run.py): the CLI's command loading (a
command's module is imported when it is invoked) and the lean supervisor's entry (what only a
probe, a diagnosis or a restart needs, imported when it first does). Walks the AST of every
module of src, so an import added inside a function anywhere else fails here, naming it."""

from __future__ import annotations

import ast

from tests.conftest import REPO

SRC = REPO / "src"

#: The modules allowed to import nvfabric modules inside functions, and why.
ALLOWED = {
    "nvfabric/cli/__init__.py": "the CLI's command loading: a command's module on first use",
    "nvfabric/supervisor/lean.py": "the lean supervisor's entry: its idle memory",
}


def _inner_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of an nvfabric module (absolute or relative) inside a
    function, nested functions and methods included."""
    found: dict[int, tuple[int, str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (
                    node.level or (node.module or "").split(".")[0] == "nvfabric"):
                found[id(node)] = (node.lineno, "." * node.level + (node.module or ""))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "nvfabric":
                        found[id(node)] = (node.lineno, alias.name)
    return sorted(found.values())


def _every_module() -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted((SRC / "nvfabric").rglob("*.py")):
        inner = _inner_imports(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if inner:
            out[path.relative_to(SRC).as_posix()] = inner
    return out


def test_only_the_listed_modules_import_nvfabric_inside_functions() -> None:
    found = _every_module()
    stray = [f"{name}:{line} imports {module}" for name, inner in found.items()
             if name not in ALLOWED for line, module in inner]
    assert stray == [], "imports of nvfabric modules inside functions:\n  " + "\n  ".join(stray)
    assert sorted(found) == sorted(ALLOWED)  # a listed module that no longer needs it: drop it
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_walk_finds_imports_in_nested_functions_and_methods() -> None:
    source = ("import nvfabric.model\n"
              "from nvfabric.model import vocab\n"
              "class A:\n    def m(self):\n        from nvfabric.model import errors\n"
              "        def inner():\n            import nvfabric.effects.log\n"
              "            from . import sibling\n")
    assert _inner_imports(ast.parse(source)) == [
        (5, "nvfabric.model"), (7, "nvfabric.effects.log"), (8, ".")]


#: Modules that load a module by name (the builtin ``__import__``, ``importlib``), and why.
LOADED_BY_NAME = {
    "nvfabric/simulate/fakebin/__init__.py":
        "the fake daemons of a simulated node, a copy in DIR/bin run without nvfabric: a "
        "launcher runs one fake and imports only its module (tests/simulate/test_fakes_startup.py)",
}


def _loads_by_name(tree: ast.AST) -> list[int]:
    """Lines that call ``__import__`` or ``import_module``."""
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module"))
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")))


def test_only_the_fakes_load_a_module_by_name() -> None:
    found = {path.relative_to(SRC).as_posix(): lines
             for path in sorted((SRC / "nvfabric").rglob("*.py"))
             if (lines := _loads_by_name(ast.parse(path.read_text(encoding="utf-8"))))}
    assert sorted(found) == sorted(LOADED_BY_NAME), found

"""One error hierarchy (nvfabric.model.errors): every exception class of nvfabric is an
NvfabricError carrying its finding, the tree drawn in the module's docstring is the real one,
and the CLI turns each into one line and its exit code."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import nvfabric
from nvfabric.cli.render import guarded
from nvfabric.model import errors
from nvfabric.model.errors import InputError, NvfabricError
from nvfabric.model.findings import Finding
from tests.runkit import sim

#: Exception classes that are not errors of nvfabric (see the docstring of model/errors.py).
NOT_ERRORS = {"nvfabric.artifacts.transport._Transient", "nvfabric.rules.imex.script._OverBudget",
              "nvfabric.effects.stop.Stopped"}


def _exception_classes() -> Iterator[type[BaseException]]:
    for info in pkgutil.walk_packages(nvfabric.__path__, "nvfabric."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI when imported
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                yield cls


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _drawn_tree() -> dict[str, str]:
    """``{class: parent}`` as model/errors.py's docstring draws it (full dotted names)."""
    assert errors.__doc__
    parents: dict[int, str] = {}
    out: dict[str, str] = {}
    for line in errors.__doc__.splitlines():
        top = re.fullmatch(r"    (NvfabricError)\s.*", line)
        if top:
            parents[0] = "nvfabric.model.errors.NvfabricError"
            continue
        m = re.match(r"    ([│ ]*)[├└]── (\S+)", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + 1
        short = m.group(2)
        full = f"nvfabric.{short}" if "." in short else f"nvfabric.model.errors.{short}"
        out[full] = parents[depth - 1]
        parents[depth] = full
    return out


def test_every_exception_class_is_an_nvfabric_error() -> None:
    found = {_name(c): c for c in _exception_classes()}
    assert len(found) >= 20  # the walk reached the whole package
    outside = sorted(n for n, c in found.items()
                     if not issubclass(c, NvfabricError) and n not in NOT_ERRORS)
    assert outside == []


def test_the_docstring_draws_the_real_tree() -> None:
    found = {_name(c): c for c in _exception_classes() if issubclass(c, NvfabricError)}
    real = {name: _name(next(b for b in c.__bases__ if issubclass(b, NvfabricError)))
            for name, c in found.items() if c is not NvfabricError}
    assert _drawn_tree() == real


def _refused_values() -> Iterator[type[InputError]]:
    for cls in _exception_classes():
        if issubclass(cls, InputError) and cls.__init__ is InputError.__init__:
            yield cls


@pytest.mark.parametrize("cls", list(_refused_values()), ids=_name)
def test_a_refused_value_is_a_value_error_with_a_finding(cls: type[InputError]) -> None:
    err = cls("line 3: '0x12G' is not a hexadecimal number")
    assert isinstance(err, ValueError)  # every `except ValueError` still catches it
    assert str(err) == err.finding.message == "line 3: '0x12G' is not a hexadecimal number"
    assert err.finding.severity == "error" and err.finding.code == cls.code
    assert err.exit_code == (3 if cls.code == "internal_error" else 2)


def test_config_value_error_names_its_key_in_the_finding() -> None:
    from nvfabric.model.keyvalue import ConfigValueError, validate

    with pytest.raises(ConfigValueError) as info:
        validate("IMEX_SERVER_PORT", "50000\nIMEX_CMD_PORT=1")
    assert info.value.key == "IMEX_SERVER_PORT"
    assert info.value.finding.code == "config_invalid_value"
    assert info.value.finding.fields == {"key": "IMEX_SERVER_PORT"}
    assert str(info.value).startswith("IMEX_SERVER_PORT: ")


def test_an_error_raised_with_its_finding_carries_that_finding() -> None:
    from nvfabric.model.fmkeys import ConfigError, check_value

    with pytest.raises(ConfigError) as info:
        check_value("FM_CMD_PORT_NUMBER", "70000")
    assert info.value.finding.code == "config_invalid_value"
    assert info.value.finding.fields == {"key": "FM_CMD_PORT_NUMBER"}
    assert info.value.exit_code == 2 and isinstance(info.value, ValueError)


def test_not_published_is_artifact_not_available() -> None:
    from nvfabric.artifacts.transport import NotPublished

    err = NotPublished("https://example.invalid/nvidia-fabricmanager_570.86.15-1_amd64.deb")
    assert err.finding.code == "artifact_not_available" and err.exit_code == 1
    assert err.url.endswith("_amd64.deb") and err.finding.fields["url"] == err.url


def test_a_refused_value_reaching_the_cli_is_one_json_object_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before the hierarchy an uncaught SmiFormatError was internal_error, exit 3."""
    from nvfabric.facts.smi import parse

    @guarded
    def command(as_json: bool) -> None:
        # `nvidia-smi topo -m`, not a capture `status --from-nvidia-smi` reads
        parse("        GPU0    GPU1    CPU Affinity\nGPU0     X      NV18    0-55\n")

    with pytest.raises(SystemExit) as info:
        command(as_json=True)
    assert info.value.code == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "input_unreadable" and error["severity"] == "error"
    assert "nvidia-smi topo --matrix" in error["message"]


def test_finding_error_keeps_exit_code_one_by_default() -> None:
    err = NvfabricError(Finding("fm_inactive", "error", "fabric manager is not running"))
    assert err.exit_code == 1 and str(err) == "fabric manager is not running"


#: ``nvfabric ARGS`` with a bug injected: the plan raises an exception no command expects.
_WITH_A_BUG = """
import runpy, sys
import nvfabric.rules.plan as rules_plan
def bug(*args, **kwargs):
    raise RuntimeError("an injected bug")
rules_plan.plan = bug
sys.argv = ["nvfabric", *sys.argv[1:]]
runpy.run_module("nvfabric", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "NVFABRIC_DEBUG=1"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_internal_error_exits_3_with_or_without_nvfabric_debug(
        tmp_path: Path, debug: bool, as_json: bool) -> None:
    """README exit codes: 3 for a bug; NVFABRIC_DEBUG=1 adds the traceback and changes
    nothing else (it used to re-raise: Python's exit 1, which means "the checked thing is
    bad")."""
    root = sim(tmp_path, "hgx-h100")
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    if debug:
        env["NVFABRIC_DEBUG"] = "1"
    proc = subprocess.run([sys.executable, "-c", _WITH_A_BUG, "plan", "--root", str(root),
                           *(["--json"] if as_json else [])], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 3, proc.stderr
    assert ("Traceback" in proc.stderr) is debug, proc.stderr
    assert "RuntimeError: an injected bug" in proc.stderr + proc.stdout
    if as_json:
        assert json.loads(proc.stdout)["error"]["code"] == "internal_error"
    else:
        assert proc.stderr.rstrip().splitlines()[-1].startswith("nvfabric: internal_error: ")

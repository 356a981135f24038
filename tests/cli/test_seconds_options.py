"""Every duration option of every command refuses ``nan`` and ``inf`` with a usage error
(exit 2): click's FloatRange lets NaN through any bound, and ``wait --timeout nan`` used to
wait forever instead of refusing."""

from __future__ import annotations

from collections.abc import Iterator

import click
import click.testing
import pytest

from nvfabric.cli import COMMANDS, main
from tests.conftest import run_cli


def _float_options() -> Iterator[tuple[str, click.Command, click.Option]]:
    for name, load in COMMANDS.items():
        stack: list[tuple[str, click.Command]] = [(name, load())]
        while stack:
            path, cmd = stack.pop()
            if isinstance(cmd, click.Group):
                stack += [(f"{path} {n}", sub) for n, sub in cmd.commands.items()]
            for p in cmd.params:
                if isinstance(p, click.Option) and isinstance(p.type, click.types.FloatParamType):
                    yield path, cmd, p


def test_the_duration_options_are_found() -> None:
    found = {(path, p.opts[0]) for path, _, p in _float_options()}
    assert {("wait", "--timeout"), ("wait", "--interval"), ("status", "--registration-grace"),
            ("run", "--grace"), ("fetch", "--timeout"),
            ("install", "--timeout")} <= found


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_every_float_option_refuses_non_finite_values(value: str) -> None:
    runner = click.testing.CliRunner()
    for path, _, p in _float_options():
        extra = (["--driver-version", "550.90.07", "--fabric", "nvswitch", "--dry-run"]
                 if path in ("fetch", "install") else [])
        result = runner.invoke(main, [*path.split(), p.opts[0], value, *extra])
        assert result.exit_code == 2, (path, p.opts[0], value, result.output)
        assert (f"Invalid value for '{p.opts[0]}'" in result.output
                or f"{p.opts[0]} must be a positive number" in result.output), (path, result.output)


def test_wait_timeout_nan_exits_at_once() -> None:
    proc = run_cli("wait", "--timeout", "nan", timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "'--timeout'" in proc.stderr and "finite" in proc.stderr


def test_grace_names_one_thing_the_registration_grace_is_another() -> None:
    # `run --grace` is the SIGTERM-to-SIGKILL time of a stop; status and wait had a --grace
    # that was the time GPUs may take to register: one name, two meanings
    by_command: dict[str, dict[str, str]] = {}
    for path, _, p in _float_options():
        by_command.setdefault(path, {})[p.opts[0]] = p.help or ""
    assert "SIGKILL" in by_command["run"]["--grace"]
    for path in ("status", "wait"):
        assert "--grace" not in by_command[path]
        assert "register" in by_command[path]["--registration-grace"]
    proc = run_cli("status", "--grace", "5")
    assert proc.returncode == 2 and "No such option '--grace'" in proc.stderr

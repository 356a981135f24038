"""The ``nvfabric`` command line: parse arguments, call the core, print, exit.

One module per command (each parses its options, calls its procedure and renders the result);
a command's module is imported only when it is invoked, by the loaders of :data:`COMMANDS`
(the one place nvfabric imports its own modules inside functions, besides the lean supervisor's
entry), so that ``nvfabric plan --json`` does not pay for the imports of ``run`` or
``fetch``.

Exit codes (all commands): 0 success; 1 the checked thing is bad (blocked, unhealthy,
failed); 2 usage or unreadable input; 3 internal error (a bug: please report it).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import click

from nvfabric.effects import stop
from nvfabric.effects.stdio import standard_streams


def _detect() -> click.Command:
    from nvfabric.cli.detect import detect

    return detect


def _plan() -> click.Command:
    from nvfabric.cli.plan import plan_cmd

    return plan_cmd


def _run() -> click.Command:
    from nvfabric.cli.run import run_cmd

    return run_cmd


def _simulate() -> click.Command:
    from nvfabric.cli.simulate import simulate

    return simulate


def _status() -> click.Command:
    from nvfabric.cli.status import status

    return status


def _wait() -> click.Command:
    from nvfabric.cli.status import wait

    return wait


def _ready() -> click.Command:
    from nvfabric.cli.ready import ready

    return ready


def _doctor() -> click.Command:
    from nvfabric.cli.doctor import doctor

    return doctor


def _triage() -> click.Command:
    from nvfabric.cli.triage import triage_cmd

    return triage_cmd


def _imex() -> click.Command:
    from nvfabric.cli.imex import imex

    return imex


def _domain() -> click.Command:
    from nvfabric.cli.domain import domain

    return domain


def _fetch() -> click.Command:
    from nvfabric.cli.fetch import fetch

    return fetch


def _install() -> click.Command:
    from nvfabric.cli.install import install

    return install


def _unit() -> click.Command:
    from nvfabric.cli.unit import unit

    return unit


#: command name -> its loader (the command's module is imported on first use), in help order.
COMMANDS: dict[str, Callable[[], click.Command]] = {
    "detect": _detect,
    "plan": _plan,
    "run": _run,
    "simulate": _simulate,
    "status": _status,
    "wait": _wait,
    "ready": _ready,
    "doctor": _doctor,
    "triage": _triage,
    "imex": _imex,
    "domain": _domain,
    "fetch": _fetch,
    "install": _install,
    "unit": _unit,
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (:data:`COMMANDS`); before
    anything runs, the standard streams are made safe to write to
    (:func:`nvfabric.effects.stdio.standard_streams`: closed descriptors on /dev/null, a
    broken pipe never changes the exit code)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        standard_streams()
        return super().main(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        load = COMMANDS.get(cmd_name)
        if load is None:
            return None
        if cmd_name == "run":
            # From here until the supervisor takes them over, SIGTERM and SIGINT are events
            # (nvfabric.effects.stop): whatever run is doing, it ends with `stopped`, exit 0
            # and its one JSON object, never killed half-way or with click's `Aborted!`;
            # SIGHUP is ignored with one line, as the supervisor ignores it.
            stop.watch(ignored=(signal.SIGHUP,))
        return load()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nvfabric")
def main() -> None:
    """Bring up the NVLink fabric of an NVIDIA GPU node and say whether it is usable.

    \b
    Exit codes: 0 ok; 1 the checked thing is bad (blocked, unhealthy, failed);
    2 usage or unreadable input; 3 internal error.
    """

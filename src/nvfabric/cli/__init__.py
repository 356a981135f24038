"""The ``nvfabric`` command line: parse arguments, call the core, print, exit.

Commands live in :mod:`nvfabric.cli` and are imported only when invoked, so that
``nvfabric plan --json`` does not pay for the imports of ``run`` or ``fetch``.

Exit codes (all commands): 0 success; 1 the checked thing is bad (blocked, unhealthy,
failed); 2 usage or unreadable input; 3 internal error (a bug: please report it).
"""

from __future__ import annotations

import importlib
import signal
from typing import Any

import click

from nvfabric.effects import stop

#: command name -> "module:attribute" of its click command, in help order.
COMMANDS: dict[str, str] = {
    "detect": "nvfabric.cli.detect:detect",
    "plan": "nvfabric.cli.plan:plan_cmd",
    "run": "nvfabric.cli.run:run_cmd",
    "simulate": "nvfabric.cli.simulate:simulate",
    "status": "nvfabric.cli.status:status",
    "wait": "nvfabric.cli.status:wait",
    "ready": "nvfabric.cli.ready:ready",
    "doctor": "nvfabric.cli.doctor:doctor",
    "events": "nvfabric.cli.events:events_cmd",
    "triage": "nvfabric.cli.triage:triage_cmd",
    "imex": "nvfabric.cli.imex:imex",
    "domain": "nvfabric.cli.domain:domain",
    "fetch": "nvfabric.cli.fetch:fetch",
    "install": "nvfabric.cli.install:install",
    "unit": "nvfabric.cli.unit:unit",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use; before anything runs, the
    standard streams are made safe to write to (:func:`nvfabric.cli.render.standard_streams`:
    closed descriptors on /dev/null, a broken pipe never changes the exit code)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from nvfabric.cli.render import standard_streams

        standard_streams()
        return super().main(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        if cmd_name == "run":
            # From here until the supervisor takes them over, SIGTERM and SIGINT are events
            # (nvfabric.effects.stop): whatever run is doing, it ends with `stopped`, exit 0
            # and its one JSON object, never killed half-way or with click's `Aborted!`;
            # SIGHUP is ignored with one line, as the supervisor ignores it.
            stop.watch(ignored=(signal.SIGHUP,))
        command: Any = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nvfabric")
def main() -> None:
    """Bring up the NVLink fabric of an NVIDIA GPU node and say whether it is usable.

    \b
    Exit codes: 0 ok; 1 the checked thing is bad (blocked, unhealthy, failed);
    2 usage or unreadable input; 3 internal error.
    """

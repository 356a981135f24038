"""``nvfabric unit install``: put nvfabric's systemd unit where systemd looks."""

from __future__ import annotations

import os
import sys

import click

from nvfabric.cli.render import guarded, json_option, root_option
from nvfabric.effects import unitfile
from nvfabric.effects.stdio import print_json
from nvfabric.model.commandline import NVFABRIC_UNIT
from nvfabric.model.errors import usage_error


@click.group()
def unit() -> None:
    """nvfabric's systemd unit (nvfabric.service)."""


@unit.command("install")
@root_option
@click.option("--dry-run", is_flag=True,
              help="Print the unit on stdout (and where it would go on stderr); write nothing.")
@json_option
@guarded
def install_cmd(root: str, dry_run: bool, as_json: bool) -> None:
    """Write nvfabric.service to <root>/etc/systemd/system (atomic; a different file there is
    kept as nvfabric.service.nvfabric.bak) and say how to enable it.

    \b
    Exit codes: 0 written, unchanged or (--dry-run) would write; 1 not installed (the path is
    a link, e.g. a masked unit, or cannot be written); 2 usage.
    """
    if not os.path.isdir(root):
        raise usage_error(f"--root {root} is not a directory",
                          "give the root of the node or image tree (/ for this host)")
    start = unitfile.exec_start(root, unitfile.running_program(),
                                None if getattr(sys, "frozen", False) else sys.executable)
    text = unitfile.unit_text_for(start)
    done = unitfile.install(root, dry_run=dry_run, text=text)
    steps = unitfile.next_steps(root)
    if as_json:
        print_json({"unit": NVFABRIC_UNIT, "path": done.path, "result": done.result,
                    "dry_run": dry_run, "backup": done.backup, "shadows": done.shadows,
                    "exec_start": {"argv": [*start.argv, "run"], "why": start.why},
                    "next": steps, "content": text})
        return
    if dry_run:
        sys.stdout.write(text)
        sys.stdout.flush()
        where = f"would write {done.path}" if done.result == "would_write" else \
            f"{done.path} is already this unit"
        click.echo(f"nvfabric: {where}", err=True)
        click.echo(f"nvfabric: ExecStart: {start.why}", err=True)
        return
    said = {"written": "wrote", "replaced": "replaced", "unchanged": "unchanged:"}[done.result]
    click.echo(f"{said} {done.path}")
    if done.backup:
        click.echo(f"the previous file is kept as {done.backup}")
    if done.shadows:
        click.echo(f"note: it overrides the package's {done.shadows}")
    click.echo(f"ExecStart: {start.why}")
    click.echo("to enable it:")
    for step in steps:
        click.echo(f"  {step}")

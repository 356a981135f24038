"""``nvfabric plan``: which fabric services this node needs, and why."""

from __future__ import annotations

import sys

import click

from nvfabric.cli.render import (
    arch_option,
    console,
    guarded,
    json_option,
    print_findings,
    root_option,
    safe,
)
from nvfabric.effects.stdio import print_json
from nvfabric.facts.inventory import collect
from nvfabric.model.commandline import HintContext
from nvfabric.rules.plan import Plan, plan


def print_plan(p: Plan) -> None:
    """Human rendering of a plan: fabric, services, port, reasons, blockers, warnings. Every
    value that came from the node (arch, driver version, device names, GUIDs, reasons quoting
    them) goes through :func:`safe`: printed literally, never taken as markup or a terminal
    escape."""
    con = console()
    port = p.management_port
    con.print(f"[bold]fabric[/bold]   {p.fabric}")
    con.print(f"[bold]services[/bold] {' -> '.join(p.services) or 'none'}")
    con.print(f"[bold]driver[/bold]   {safe(p.driver_version or 'not loaded')} ({safe(p.arch)})")
    if port:
        con.print(f"[bold]port[/bold]     {safe(port.device)} port {port.port} "
                  f"GUID {safe(port.guid)}")
    con.print("[bold]why[/bold]")
    for r in p.reasons:
        con.print(f"  - {safe(r)}")
    print_findings(con, p.blockers, "blocked by")
    print_findings(con, p.findings, "warnings")


@click.command("plan")
@root_option
@arch_option
@json_option
@guarded
def plan_cmd(root: str, arch: str | None, as_json: bool) -> None:
    """Decide the fabric kind, services, management port; exit 1 when blocked."""
    p = plan(collect(root, arch), HintContext(root))
    if as_json:
        print_json(p.to_json())
    else:
        print_plan(p)
    sys.exit(1 if p.blocked else 0)

"""``nvfabric plan``: which fabric services this node needs, and why."""

from __future__ import annotations

import sys

import click

from ..inventory import collect
from ..output import (
    arch_option,
    console,
    guarded,
    json_option,
    print_findings,
    print_json,
    root_option,
)
from ..plan import Plan, plan


def print_plan(p: Plan) -> None:
    """Human rendering of a plan: fabric, services, port, reasons, blockers."""
    from rich.markup import escape

    con = console()
    port = p.management_port
    con.print(f"[bold]fabric[/bold]   {p.fabric}")
    con.print(f"[bold]services[/bold] {' -> '.join(p.services) or 'none'}")
    con.print(f"[bold]driver[/bold]   {p.driver_version or 'not loaded'} ({p.arch})")
    if port:
        con.print(f"[bold]port[/bold]     {port.device} port {port.port} GUID {port.guid}")
    con.print("[bold]why[/bold]")
    for r in p.reasons:
        con.print(f"  - {escape(r)}")
    print_findings(con, p.blockers, "blocked by")


@click.command("plan")
@root_option
@arch_option
@json_option
@guarded
def plan_cmd(root: str, arch: str | None, as_json: bool) -> None:
    """Decide the fabric kind, services, management port; exit 1 when blocked."""
    p = plan(collect(root, arch))
    if as_json:
        print_json(p.to_json())
    else:
        print_plan(p)
    sys.exit(1 if p.blocked else 0)

"""``nvfabric triage FILE``: judge an ``nvidia-bug-report.log.gz`` as nvfabric judges a live
node: the node in one line, its plan, the verdict of its nvidia-smi section, the findings of
every log section (with the section each came from), what ran against what should have, and
which sections were missing.

Exit codes: 0 no error finding; 1 at least one error finding (plan blockers and the verdict's
included); 2 unreadable input or not a bug report.
"""

from __future__ import annotations

import sys

import click

from nvfabric.cli.render import VERDICT_STYLE, console, guarded, json_option, safe, severity_style
from nvfabric.effects.stdio import print_json
from nvfabric.triage import triage
from nvfabric.triage.build import Triage


def print_triage(t: object) -> None:
    """Human rendering: node line, report line, verdict, findings by severity with hints and
    sections, missing sections, how facts were rebuilt. Values from the report go through
    :func:`safe`."""
    assert isinstance(t, Triage)
    con = console()
    r = t.report
    con.print(f"[bold]node[/bold]     {safe(t.node_line())}")
    state = "complete" if r["complete"] else "[yellow]incomplete[/yellow]"
    con.print(f"[bold]report[/bold]   {safe(r['file'])}: nvidia-bug-report.sh "
              f"{safe(r['script_version'] or '?')}, {safe(r['date'] or 'no date')}, "
              f"{r['sections']} sections, {state}")
    if t.verdict is None:
        con.print("[bold]verdict[/bold]  not judged (no nvidia-smi --query section)")
    else:
        v = t.verdict.verdict
        con.print(f"[bold]verdict[/bold]  [{VERDICT_STYLE[v]}]{v}[/] (nvidia-smi --query, "
                  f"{len(t.gpus)} GPUs)")
    if t.findings:
        con.print("[bold]findings[/bold]")
        for f in t.findings:
            section = f.fields.get("section")
            where = f" \\[{safe(section)}]" if section else ""
            con.print(f"  [{severity_style(f.severity)}]{f.severity:7}[/] {safe(f.code)}"
                      f"{where}: {safe(f.message)}")
            if f.hint:
                con.print(f"          hint: {safe(f.hint)}")
    else:
        con.print("[bold]findings[/bold] none")
    if t.missing:
        con.print("[bold]not in the report[/bold] (could not be judged)")
        for m in t.missing:
            con.print(f"  - {safe(m.name)}: {safe(m.status)}"
                      + (f" ({safe(m.detail)})" if m.detail else ""))
    if t.reasons:
        con.print("[bold]how the node was rebuilt[/bold]")
        for reason in t.reasons:
            con.print(f"  - {safe(reason)}")


@click.command("triage")
@click.argument("file")
@json_option
@guarded
def triage_cmd(file: str, as_json: bool) -> None:
    """Triage an nvidia-bug-report.log(.gz) FILE ('-': stdin): plan, verdict, findings.

    \b
    Exit codes: 0 no error finding; 1 at least one error finding;
    2 unreadable input or not a bug report."""
    t = triage(file)
    if as_json:
        print_json(t.to_json())
    else:
        print_triage(t)
    sys.exit(t.exit_code)

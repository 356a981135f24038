"""``nvfabric events``: the event history of ``nvfabric run`` (bring-up, daemon exits and
restarts, live kernel events, verdict changes), live or after the run ended; the procedure is
:func:`nvfabric.app.events.events`.

Exit codes: 0 listed; 1 a listed event is an error finding; 2 no history, unreadable, or a
bad option.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from nvfabric.app.events import Events, events
from nvfabric.cli.render import (
    console,
    guarded,
    json_option,
    root_option,
    safe,
    severity_style,
)
from nvfabric.effects.log import rfc3339
from nvfabric.effects.stdio import print_json
from nvfabric.model.commandline import DEFAULT_STATE_DIR


def _value(v: Any) -> str:
    """A record's value in the words of the JSON it came from, never Python's repr:
    ``services=[service=fabricmanager pid=8454]``, ``true``, ``null``."""
    if isinstance(v, bool) or v is None:
        return "null" if v is None else str(v).lower()
    if isinstance(v, dict):
        return " ".join(f"{k}={_value(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return "[" + "; ".join(_value(x) for x in v) + "]"
    return str(v)


def _line(r: dict[str, Any]) -> str:
    """One record as one line: time, kind, then what it says."""
    t = r.get("time")
    when = rfc3339(t) if isinstance(t, int | float) and not isinstance(t, bool) else "?"
    kind = str(r.get("kind", "?"))
    if kind == "verdict":
        what = (f"{safe(r.get('was'))} -> {safe(r.get('verdict'))}: {safe(r.get('code'))}: "
                f"{safe(r.get('message', ''))}")
    elif "code" in r:
        severity = str(r.get("severity", ""))
        count = f" (x{r['count']})" if isinstance(r.get("count"), int) and r["count"] > 1 else ""
        device = f" [{safe(r['device'])}]" if r.get("device") else ""
        what = (f"[{severity_style(severity) or 'default'}]{safe(severity)}[/] "
                f"{safe(r['code'])}{device}: {safe(r.get('message', ''))}{count}")
    else:
        rest = {k: v for k, v in r.items() if k not in ("time", "kind")}
        what = safe(", ".join(f"{k}={_value(v)}" for k, v in rest.items()))
    return f"{when} {kind:13} {what}"


def print_events(ev: Events) -> None:
    con = console()
    con.print(f"{len(ev.records)} of {ev.total} events in {safe(ev.path)}"
              + (f" ({ev.damaged} damaged lines dropped)" if ev.damaged else ""))
    for r in ev.records:
        con.print(_line(r), emoji=False)


@click.command("events")
@root_option
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
              help="The state directory of the `nvfabric run` whose history to read.")
@click.option("--since", default=None, metavar="DURATION",
              help="Only events of the last DURATION (90s, 10m, 2h, 1d).")
@click.option("--code", default=None, metavar="CODE", help="Only findings of this code.")
@json_option
@guarded
def events_cmd(root: str, state_dir: str, since: str | None, code: str | None,
               as_json: bool) -> None:
    """List what happened to the fabric while `nvfabric run` ran (its event history)."""
    ev = events(root, state_dir, since, code)
    if as_json:
        print_json(ev.to_json())
    else:
        print_events(ev)
    sys.exit(ev.exit_code)

"""``nvfabric ready``: is a live ``nvfabric run`` ready on this node? A readiness probe
(Kubernetes ``readinessProbe``, a health check) that cannot be fooled by a stale file.

``<state-dir>/ready`` counts only while the pid inside is the ``nvfabric run`` holding the run
lock (:func:`nvfabric.effects.runlock.live_ready`, RUN.md R10): after ``kill -9`` of the run the
file is still there, but nobody holds the lock. Exit codes: 0 ready; 1 not ready (no file, or
stale); 2 bad input.
"""

from __future__ import annotations

import sys

import click

from nvfabric.cli.render import guarded, json_option, root_option
from nvfabric.effects.log import printable
from nvfabric.effects.runlock import live_ready
from nvfabric.effects.stdio import print_json
from nvfabric.facts.inventory import require_root
from nvfabric.model.commandline import DEFAULT_STATE_DIR, command_line
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import confined


@click.command("ready")
@root_option
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
              help="The state directory of `nvfabric run`.")
@json_option
@guarded
def ready(root: str, state_dir: str, as_json: bool) -> None:
    """Exit 0 when a live `nvfabric run` is ready on this node (its readiness file names the
    run holding the run lock), 1 otherwise (`run_not_ready`: no file, or a stale one)."""
    require_root(root)  # exit 2 like every command that reads a node, never "not ready"
    try:
        state = confined(root, state_dir, "--state-dir")
    except ValueError as err:
        raise usage_error(str(err), "host paths are absolute, resolved under --root, and may "
                          "not leave it") from None
    info, why = live_ready(state)
    finding = None if info is not None else Finding(
        "run_not_ready", "error", why,
        f"start `{command_line('run', root=root, state_dir=state_dir)}` (or wait for it to "
        "report ready); a file left by a run that is gone is removed by the next run",
        {"state_dir": state})
    if as_json:
        print_json({"ready": info is not None, "run": info,
                    "findings": [] if finding is None else [finding.to_json()]})
    elif info is not None:
        click.echo(printable(f"ready: nvfabric run pid {info.get('pid')} (fabric "
                             f"{info.get('fabric')}, ready after {info.get('ready_after_s')} s)"))
    else:
        assert finding is not None
        click.echo(printable(f"not ready: {finding.message}"), err=True)
    sys.exit(0 if info is not None else 1)

"""``nvfabric ready``: is a live ``nvfabric run`` ready on this node? Parses, asks
:func:`nvfabric.app.ready.check` (the run's readiness file, believed only while its pid holds
the run lock; on a tray, no second IMEX owner beside it) and renders. Exit codes: 0 ready; 1
not ready (no file, a stale one, or another IMEX owner); 2 bad input.
"""

from __future__ import annotations

import sys

import click

from nvfabric.app import ready as readiness
from nvfabric.cli.render import guarded, json_option, root_option
from nvfabric.effects.log import printable
from nvfabric.effects.stdio import print_json
from nvfabric.facts.inventory import require_root
from nvfabric.model.commandline import DEFAULT_STATE_DIR
from nvfabric.model.errors import usage_error
from nvfabric.model.hostpath import confined


@click.command("ready")
@root_option
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
              help="The state directory of `nvfabric run`.")
@json_option
@guarded
def ready(root: str, state_dir: str, as_json: bool) -> None:
    """Exit 0 when a live `nvfabric run` is ready on this node (its readiness file names the
    run holding the run lock), 1 otherwise (`run_not_ready`: no file, or a stale one; on a
    GB200/GB300 tray `imex_owner_conflict`: another IMEX owner beside the run)."""
    require_root(root)  # exit 2 like every command that reads a node, never "not ready"
    try:
        state = confined(root, state_dir, "--state-dir")
    except ValueError as err:
        raise usage_error(str(err), "host paths are absolute, resolved under --root, and may "
                          "not leave it") from None
    found = readiness.check(root, state_dir, state)
    info = found.run
    if as_json:
        print_json({"ready": found.ready, "run": info,
                    "findings": [f.to_json() for f in found.findings]})
    elif found.ready and info is not None:
        click.echo(printable(f"ready: nvfabric run pid {info.get('pid')} (fabric "
                             f"{info.get('fabric')}, ready after {info.get('ready_after_s')} s)"))
    else:
        click.echo(printable(f"not ready: {found.findings[0].message}"), err=True)
    sys.exit(0 if found.ready else 1)

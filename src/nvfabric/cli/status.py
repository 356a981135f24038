"""``nvfabric status`` and ``nvfabric wait``: is this node's NVLink fabric usable by CUDA?

``status`` reads the fabric state (NVML on the node, the node's nvidia-smi on a simulated root,
or a saved capture with ``--from-nvidia-smi``), the plan and the services' liveness, and prints
the verdict (:func:`nvfabric.app.status.evaluate`). ``wait`` repeats that until the verdict is
healthy (or not applicable) or the timeout passes (:func:`nvfabric.app.status.wait`).
``status --publish`` also writes the verdict to the Node, ``--npd`` answers as a
node-problem-detector plugin (:func:`nvfabric.app.status.tell`). Exit codes: 0 healthy /
not_applicable; 1 degraded, unhealthy or pending (wait: timed out); 2 bad input; 4 the
publish failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

import click

from nvfabric.app import status as procedure
from nvfabric.app.kube import KubeRequest
from nvfabric.app.status import Report, Told, evaluate
from nvfabric.cli.kube import status_options
from nvfabric.cli.render import (
    VERDICT_STYLE,
    Seconds,
    console,
    guarded,
    json_option,
    one_output_form,
    print_findings,
    root_option,
    safe,
)
from nvfabric.effects import stop
from nvfabric.effects.atomic import write_atomic
from nvfabric.effects.log import printable
from nvfabric.effects.stdio import print_json
from nvfabric.model.errors import NvfabricError, os_error, usage_error
from nvfabric.model.hostpath import confined, shown_under
from nvfabric.model.vocab import FABRIC_KINDS, FabricKind
from nvfabric.observe.metrics import render

FABRIC_CHOICES = FABRIC_KINDS




def print_report(report: Report) -> None:
    """Human rendering: verdict line, per-GPU table, services, findings, reasons. Every value
    read from the node or a capture goes through :func:`nvfabric.cli.render.safe` (markup and
    control characters shown literally)."""
    from rich.table import Table  # rich only for a human report (its import is ~50 ms)

    con = console()
    v = report.verdict.verdict
    driver = report.health.driver_version
    health = report.health
    # "read from nvml" only when something was read: a reader that failed read nothing
    unread = not health.gpus and any(f.code == "nvml_unavailable" for f in health.findings)
    where = f"not read ({health.source} tried)" if unread else f"read from {health.source}"
    told = "not told by the capture" if report.fabric_source == "unknown" else \
        report.fabric_source
    con.print(f"[{VERDICT_STYLE[v]}]{v}[/]  fabric {safe(report.fabric or 'unknown')} "
              f"({told}), {where}"
              + (f", driver {safe(driver)}" if driver else ""))
    if report.health.gpus:
        table = Table(box=None, pad_edge=False)
        for col in ("GPU", "PCI", "state", "status", "clique", "ClusterUUID", "health"):
            table.add_column(col)
        for g in report.health.gpus:
            bad = g.problems
            table.add_row(
                str(g.index), safe(g.pci or "-"), safe(g.state), safe(g.status or "N/A"),
                safe(g.clique_text),
                safe(g.cluster_uuid or "N/A"),
                safe(", ".join([g.health_summary or "N/A", *bad])),
            )
        con.print(table)
    for s in report.services or ():
        state = "running" if s.running else "not running"
        age = f", {s.age_s:.0f} s" if s.age_s is not None else ""
        con.print(f"service {safe(s.name)}: {state}{age} ({safe(s.detail)})")
    imex = dict(report.node).get("imex")
    if isinstance(imex, dict):
        run = imex.get("run")
        by = f" (run by {imex['runner']})" if imex.get("runner") else ""
        ran = (f", nvfabric run pid {run['pid']}, state dir {run['state_dir']}"
               if isinstance(run, dict) else "")
        con.print(f"IMEX owner {safe(str(imex.get('owner')))}{safe(by)}{safe(ran)}; channels: "
                  f"{safe(str(imex.get('channel_owner')))}", emoji=False)
    print_findings(con, list(report.verdict.findings), "findings")
    for r in report.verdict.reasons:
        con.print(f"  - {safe(r)}")


def _root_given(ctx: click.Context) -> bool:
    source = ctx.get_parameter_source("root")
    return source is not None and source.name != "DEFAULT"


fabric_option = click.option(
    "--fabric", type=click.Choice(FABRIC_CHOICES), default=None,
    help="The node's fabric kind (default: from --root's plan, or inferred from a capture).",
)
#: ``--registration-grace``, not ``--grace``: ``run --grace`` is the SIGTERM-to-SIGKILL time of
#: a stop, another thing; one name means one thing across commands.
grace_option = click.option(
    "--registration-grace", "grace", type=Seconds(min=0), default=None,
    help="Seconds GPUs may take to register after the services started (default 300).",
)


@click.command("status")
@root_option
@click.option("--from-nvidia-smi", "capture", metavar="FILE", default=None,
              help="Judge a saved `nvidia-smi -q` / `-q -x` / `--query-gpu` capture ('-': stdin).")
@fabric_option
@grace_option
@click.option("--prometheus", is_flag=True,
              help="Print the reading as Prometheus metrics (text format) instead.")
@click.option("--textfile", metavar="PATH", default=None,
              help="Also write the metrics to PATH (*.prom, a host path under --root; "
                   "its directory must exist) atomically, for node_exporter's textfile "
                   "collector.")
@json_option
@click.pass_context
@guarded
@status_options
def status(ctx: click.Context, root: str, capture: str | None, fabric: FabricKind | None,
           grace: float | None, prometheus: bool, textfile: str | None, as_json: bool,
           kube: KubeRequest | None) -> None:
    """Verdict on the NVLink fabric: healthy, degraded, unhealthy, pending or not_applicable.

    \b
    Exit codes: 0 healthy or not_applicable; 1 degraded, unhealthy or pending; 2 bad input;
    4 --publish failed (the report is still printed). --npd: 0 OK, 1 problem, 3 unknown.
    --json, --prometheus and --npd each choose the output: two of them are exit 2.
    """
    one_output_form({"--json": as_json, "--prometheus": prometheus,
                     "--npd": kube is not None and kube.npd is not None},
                    "give --json (the report as JSON), --prometheus (its metrics) or --npd "
                    "(node-problem-detector's line); --textfile goes with any")
    if textfile is not None:
        textfile = textfile_path(root, textfile)
    metrics = prometheus or textfile is not None
    with stopped_exits():
        report = evaluate(root, capture, fabric, _root_given(ctx), grace, metrics=metrics)
        told = procedure.tell(report, root, kube) if kube is not None else Told()
        text = render(report.reading) if report.reading is not None else b""
        stop.check()  # one that came during a read that waits on nothing
        if textfile is not None:
            write_textfile(textfile, text)
    if told.publish_error is not None:
        sys.stderr.write(f"nvfabric: kube publish: {printable(told.publish_error)}\n")
    if told.publish_skipped is not None:
        sys.stderr.write(f"nvfabric: kube publish: {printable(told.publish_skipped)}\n")
    if told.npd is not None:  # node-problem-detector reads one line: the report is not printed
        sys.stdout.write(printable(told.npd[1]) + "\n")
    elif prometheus:
        sys.stdout.write(text.decode())
    elif as_json:
        print_json(report.to_json())
    else:
        print_report(report)
    sys.exit(told.exit_code(report))


def textfile_path(root: str, path: str) -> str:
    """``--textfile``: a host path under ``root`` ending in ``.prom`` (node_exporter's textfile
    collector reads only those: node_exporter ``collector/textfile.go``) whose directory
    exists. Exit 2 otherwise, before anything is read."""
    if not path.endswith(".prom") or path.endswith("/.prom"):
        raise usage_error(f"--textfile {path!r}: the name must end in .prom",
                          "node_exporter's textfile collector reads only *.prom files")
    try:
        full = confined(root, path, "--textfile")
    except ValueError as err:
        raise usage_error(str(err), "host paths are absolute, resolved under --root, and may "
                          "not leave it") from None
    if not os.path.isdir(os.path.dirname(full) or "/"):
        raise usage_error(f"--textfile {path!r}: no directory "
                          f"{shown_under(root, os.path.dirname(path))}",
                          "create the textfile collector's directory (node_exporter "
                          "--collector.textfile.directory) first; the path is a host path "
                          "under --root")
    return full


def write_textfile(path: str, text: bytes) -> None:
    """Replace ``path`` with ``text`` atomically (temp file, fsync, rename: the collector never
    reads half a file), mode 0644, no backup (the file is regenerated on every reading). A
    write error is the one line of :func:`nvfabric.model.errors.os_error`."""
    try:
        write_atomic(path, text, mode=0o644, backup=False)
    except OSError as err:
        finding, code = os_error(err, "cannot write the metrics textfile", path)
        raise NvfabricError(finding, exit_code=code) from None


@contextlib.contextmanager
def stopped_exits() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT end the command with ``128 + signal`` (143, 130: the
    shell's figures, never 1, which means "unhealthy"), at once also while a probe runs
    (:mod:`nvfabric.effects.stop`: the probe's group is killed, an NVML read blocked in its
    helper thread is left behind) or a capture is read from stdin or a FIFO; the one line
    (or JSON object) ``interrupted`` says so (:func:`nvfabric.cli.render.guarded`)."""
    with stop.watching():
        try:
            yield
        except stop.Stopped as got:
            if not got.signum:  # seen before the handler ran: the signal it recorded
                raise stop.Stopped(stop.received() or signal.SIGTERM, got.during) from None
            raise


@click.command("wait")
@root_option
@fabric_option
@grace_option
@click.option("--timeout", type=Seconds(min=0), default=300.0, show_default=True,
              help="Seconds to wait for a healthy fabric.")
@click.option("--interval", type=Seconds(min=0.05), default=1.0, show_default=True,
              help="Seconds between checks.")
@json_option
@guarded
def wait(root: str, fabric: FabricKind | None, grace: float | None, timeout: float, interval: float,
         as_json: bool) -> None:
    """Block until the fabric is healthy (exit 0) or the timeout passes (exit 1, findings).

    For init containers, ExecStartPost= and job prologs.
    """
    with stopped_exits():
        report = procedure.wait(root, fabric, grace, timeout, interval)
    if as_json:
        print_json({**report.to_json(), "timed_out": report.exit_code != 0})
    else:
        if report.exit_code != 0:
            console(stderr=True).print(f"timed out after {timeout:.0f} s")
        print_report(report)
    sys.exit(report.exit_code)


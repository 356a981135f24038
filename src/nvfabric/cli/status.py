"""``nvfabric status`` and ``nvfabric wait``: is this node's NVLink fabric usable by CUDA?

``status`` reads the fabric state (NVML on the node, the node's nvidia-smi on a simulated root,
or a saved capture with ``--from-nvidia-smi``), the plan and the services' liveness, and prints
the verdict. ``wait`` repeats that until the verdict is healthy (or not applicable) or the
timeout passes. Exit codes: 0 healthy / not_applicable; 1 degraded, unhealthy or pending (wait:
timed out); 2 bad input.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from nvfabric.cli.render import (
    Seconds,
    console,
    guarded,
    json_option,
    print_findings,
    print_json,
    root_option,
    safe,
)
from nvfabric.effects import stop
from nvfabric.model.errors import usage_error
from nvfabric.model.vocab import FABRIC_KINDS, FabricKind

if TYPE_CHECKING:  # the health modules are imported lazily, inside the functions
    from nvfabric.model.findings import Finding
    from nvfabric.model.health import FabricHealth
    from nvfabric.rules.imex.owner import Ownership
    from nvfabric.rules.verdict import ServiceState, Verdict

OK_VERDICTS = ("healthy", "not_applicable")
FABRIC_CHOICES = FABRIC_KINDS


@dataclass(frozen=True)
class Report:
    """One evaluation: the verdict, what it was computed from, and where the fabric kind came
    from (``option``, ``plan`` or ``inferred`` from a capture's product names)."""

    verdict: Verdict
    health: FabricHealth
    fabric: FabricKind | None
    fabric_source: str
    services: tuple[ServiceState, ...] | None
    node: tuple[tuple[str, Any], ...] = ()

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.verdict in OK_VERDICTS else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.verdict,
            "fabric": self.fabric,
            "fabric_source": self.fabric_source,
            "source": self.health.source,
            "driver_version": self.health.driver_version,
            "gpus": [g.to_json() for g in self.health.gpus],
            "services": None if self.services is None else [s.to_json() for s in self.services],
            "findings": [f.to_json() for f in self.verdict.findings],
            "reasons": list(self.verdict.reasons),
            **dict(self.node),
        }


def _decode(data: bytes) -> str:
    """A capture's text: UTF-8, or UTF-16/UTF-32 with or without a BOM (PowerShell's ``>`` and
    Windows editors save UTF-16 LE), detected as ``doctor`` detects a log's encoding
    (:func:`nvfabric.rules.logtext.detect_encoding`).
    SmiFormatError for other data with NUL bytes."""
    from nvfabric.facts.smi import SmiFormatError
    from nvfabric.rules.logtext import LogEncodingError, detect_encoding

    try:
        name, skip = detect_encoding(data)
    except LogEncodingError as err:
        raise SmiFormatError(str(err).replace("not a log file", "not an nvidia-smi capture")) \
            from None
    text = data[skip:].decode(name, "replace")
    return text.replace("\0", "") if name == "utf-8" else text  # NUL padding


def read_capture(path: str) -> FabricHealth:
    """A saved nvidia-smi capture (``-`` for stdin), at most
    :data:`nvfabric.facts.gpu.SMI_MAX_BYTES` (16 MiB: `nvidia-smi -q -x` of an 8-GPU node is
    ~250 KB; `/dev/zero` or a 500 MB file is refused instead of filling memory), the same
    bound as the node's nvidia-smi output. Unreadable or unrecognised -> exit 2."""
    from nvfabric.facts.gpu import SMI_MAX_BYTES
    from nvfabric.facts.smi import SmiFormatError, parse
    from nvfabric.strict import read_capped

    data = read_capped(path, SMI_MAX_BYTES, "an nvidia-smi capture",
                       "give a file saved from `nvidia-smi -q` (or -q -x)")
    try:
        return parse(_decode(data))
    except SmiFormatError as err:
        raise usage_error(f"{path}: {err}", CAPTURE_HINT) from None


#: The hint of a refused capture.
CAPTURE_HINT = ("save `nvidia-smi -q > FILE` (or `nvidia-smi -q -x`, or `nvidia-smi --query-gpu="
                "index,uuid,pci.bus_id,fabric.state,fabric.status,fabric.cliqueId,"
                "fabric.clusterUuid --format=csv`)")


def evaluate(
    root: str,
    capture: str | None = None,
    fabric_option: FabricKind | None = None,
    root_given: bool = True,
    grace_s: float | None = None,
    probe_timeout_s: float | None = None,
) -> Report:
    """Read, then judge. With a capture, the node (``root``) is consulted only when it was
    given explicitly, for its fabric kind; services are then unknown. Only the services of
    the fabric kind judged (the plan's, or ``--fabric``'s) are read and listed.
    ``probe_timeout_s`` bounds the fabric-state probe (NVML or the node's nvidia-smi; default
    :data:`nvfabric.facts.gpu.SMI_TIMEOUT_S`)."""
    from nvfabric.rules.verdict import DEFAULT_GRACE_S, Inputs, infer_fabric, verdict

    grace = DEFAULT_GRACE_S if grace_s is None else grace_s
    node = (_read_node(root, fabric_option, live=capture is None)
            if capture is None or root_given else _Node(None))
    if capture is not None:
        health = read_capture(capture)
    else:
        from nvfabric.facts.gpu import SMI_TIMEOUT_S, read_health

        health = read_health(root, SMI_TIMEOUT_S if probe_timeout_s is None
                             else probe_timeout_s)
    if fabric_option:
        fabric, source = fabric_option, "option"
    elif node.fabric is not None:
        fabric, source = node.fabric, "plan"
    else:
        fabric, source = infer_fabric(health.gpus, health.findings), "inferred"
    _refuse_unread(capture, health, fabric if source != "inferred"
                   or any(g.name for g in health.gpus) else None)
    result = verdict(Inputs(
        gpus=health.gpus, fabric=fabric, services=node.services,
        pci_gpu_count=node.pci_gpu_count, grace_s=grace, fabric_mode=node.fabric_mode,
        reader_findings=health.findings, imex_owner=node.imex_owner,
        unread_columns=health.unread,
        imex_findings=node.imex_findings,
    ))
    if source == "inferred":
        result = type(result)(result.verdict, result.findings, (
            f"fabric kind {fabric} inferred from the capture's GPU names and states "
            "(pass --root or --fabric to state it)",
            *result.reasons,
        ))
    return Report(result, health, fabric, source, node.services,
                  node_identity(root, fabric, node.imex) if capture is None or root_given else ())



def _refuse_unread(capture: str | None, health: FabricHealth, fabric: FabricKind | None) -> None:
    """Exit 2 (S08) when the capture lacks a column the verdict of its rows needs
    (:func:`nvfabric.rules.verdict.columns_needed`; ``fabric`` None when only guessed from
    states), naming every column it lacks and which rows need which."""
    from nvfabric.facts.smi import missing_columns_error
    from nvfabric.rules.verdict import columns_needed

    needed = columns_needed(health.gpus, fabric)
    lacking = [c for c in health.unread if c in needed]
    if not lacking:
        return
    by_rows: dict[str, list[str]] = {}
    for column in lacking:  # columns needed by the same rows are named together
        by_rows.setdefault(needed[column], []).append(column)
    why = "the verdict needs " + "; ".join(f"{', '.join(cs)} ({rows})"
                                           for rows, cs in by_rows.items())
    raise usage_error(f"{capture}: {missing_columns_error(health.unread, why)}",
                      CAPTURE_HINT) from None


@dataclass(frozen=True)
class _Node:
    """What :func:`evaluate` reads of the node under ``root``: its plan's fabric kind (None:
    the node is not consulted), and for a live verdict (else None) the GPUs on PCI, the
    services' liveness, FABRIC_MODE and, on an mnnvl tray, the IMEX decision and what is wrong
    with it (two owners, a channel the owner needs that is missing)."""

    fabric: FabricKind | None
    pci_gpu_count: int | None = None
    services: tuple[ServiceState, ...] | None = None
    fabric_mode: int | None = None
    imex: Ownership | None = None
    imex_findings: tuple[Finding, ...] = ()

    @property
    def imex_owner(self) -> str | None:
        return self.imex.owner if self.imex is not None else None


def _read_node(root: str, fabric_option: FabricKind | None, live: bool) -> _Node:
    """The node's plan; when ``live``, also the services of the fabric kind judged
    (``--fabric``'s or the plan's), FABRIC_MODE and, on an mnnvl tray, who owns IMEX."""
    from nvfabric.facts.inventory import collect
    from nvfabric.rules.plan import SERVICES_BY_FABRIC, plan

    p = plan(collect(root))
    if not live:
        return _Node(p.fabric)
    from nvfabric.facts import services as svc

    kind = fabric_option or p.fabric
    services = svc.read(root, SERVICES_BY_FABRIC.get(kind, p.services))
    mode = svc.fabric_mode(root)
    if kind != "mnnvl":
        return _Node(p.fabric, p.gpu_count, services, mode)
    from nvfabric.facts import imex as imex_facts
    from nvfabric.rules.imex import channels, owner

    # Who owns IMEX now (a live nvfabric run included) and the channels that owner needs:
    # the same rule as run's check (Ownership.required_channels).
    decision = owner.decide(imex_facts.gather_evidence(root))
    needed = decision.required_channels if decision.owner != "none" else ()
    found = channels.check(imex_facts.read_channels(root), needed) if needed else ()
    problems = tuple(f for f in (decision.conflict, decision.unknown) if f) + tuple(
        f for f in found if f.code == "imex_channel_missing")
    return _Node(p.fabric, p.gpu_count, services, mode, decision, problems)


def node_identity(root: str, fabric: FabricKind | None,
                  decision: Ownership | None = None) -> tuple[tuple[str, Any], ...]:
    """What ``nvfabric domain check`` needs to place this report in a node list: the host
    name, and on mnnvl trays the node's addresses and its IMEX section (owner, node list,
    channels; :func:`nvfabric.facts.imex.section`, with the IMEX ``decision`` already made
    when given)."""
    from nvfabric.facts import imexhost as host

    names = host.local_names(root)
    out: list[tuple[str, Any]] = [("hostname", names[0] if names else None)]
    if fabric == "mnnvl":
        from nvfabric.facts.imex import section

        out += [("addresses", list(host.node_addresses(root))),
                ("imex", section(root, decision=decision))]
    return tuple(out)


VERDICT_STYLE = {
    "healthy": "bold green", "not_applicable": "bold cyan", "pending": "bold yellow",
    "degraded": "bold yellow", "unhealthy": "bold red",
}


def print_report(report: Report) -> None:
    """Human rendering: verdict line, per-GPU table, services, findings, reasons. Every value
    read from the node or a capture goes through :func:`nvfabric.cli.render.safe` (markup and
    control characters shown literally)."""
    from rich.table import Table

    con = console()
    v = report.verdict.verdict
    driver = report.health.driver_version
    health = report.health
    # "read from nvml" only when something was read: a reader that failed read nothing
    unread = not health.gpus and any(f.code == "nvml_unavailable" for f in health.findings)
    where = f"not read ({health.source} tried)" if unread else f"read from {health.source}"
    con.print(f"[{VERDICT_STYLE[v]}]{v}[/]  fabric {safe(report.fabric or 'unknown')} "
              f"({report.fabric_source}), {where}"
              + (f", driver {safe(driver)}" if driver else ""))
    if report.health.gpus:
        table = Table(box=None, pad_edge=False)
        for col in ("GPU", "PCI", "state", "status", "clique", "ClusterUUID", "health"):
            table.add_column(col)
        for g in report.health.gpus:
            bad = [f"{f.name}={f.value}" for f in g.health if f.impact]
            table.add_row(
                str(g.index), safe(g.pci or "-"), safe(g.state), safe(g.status or "N/A"),
                "N/A" if g.clique_id is None else str(g.clique_id),
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
              help="Also write the metrics to PATH (*.prom) atomically, for node_exporter's "
                   "textfile collector.")
@json_option
@click.pass_context
@guarded
def status(ctx: click.Context, root: str, capture: str | None, fabric: FabricKind | None,
           grace: float | None, prometheus: bool, textfile: str | None, as_json: bool) -> None:
    """Verdict on the NVLink fabric: healthy, degraded, unhealthy, pending or not_applicable.

    \b
    Exit codes: 0 healthy or not_applicable; 1 degraded, unhealthy or pending; 2 bad input.
    """
    if prometheus and as_json:
        raise usage_error("--prometheus and --json both choose the output: give one",
                          "drop --json for the Prometheus text format, or --prometheus for "
                          "the JSON object")
    if textfile is not None:
        textfile = textfile_path(root, textfile)
    with stopped_exits():
        report = evaluate(root, capture, fabric, _root_given(ctx), grace)
        if prometheus or textfile is not None:
            from nvfabric.observe.metrics import reading_of, render

            reading = reading_of(report)
            if any(s.name == "imex" and s.running for s in report.services or ()):
                reading = _with_imex_domain(root, reading)
            if capture is None:
                reading = _with_run_ready(root, reading)
            text = render(reading)
        stop.check()  # one that came during a read that waits on nothing
        if textfile is not None:
            write_textfile(textfile, text)
    if prometheus:
        sys.stdout.write(text.decode())
    elif as_json:
        print_json(report.to_json())
    else:
        print_report(report)
    sys.exit(report.exit_code)


#: The IMEX control tool and config of a host-run nvidia-imex (the package's paths), asked for
#: the domain state by ``status --prometheus`` on mnnvl trays where an IMEX daemon runs (where
#: none runs, e.g. between the DRA driver's jobs, a DOWN domain is no fault: no series).
IMEX_CTL, IMEX_CONFIG = "/usr/bin/nvidia-imex-ctl", "/etc/nvidia-imex/config.cfg"


def _with_imex_domain(root: str, reading: Any) -> Any:
    """``reading`` with the IMEX domain state as the node's ``nvidia-imex-ctl -N -j`` reports
    it (unchanged when the daemon cannot be asked: not installed, not running, timed out)."""
    from dataclasses import replace

    from nvfabric.cli.listen import imex_domain
    from nvfabric.facts.paths import under

    return replace(reading, imex_domain=imex_domain(under(root, IMEX_CTL),
                                                    under(root, IMEX_CONFIG)))


#: The state directory of ``nvfabric run`` (its default ``--state-dir``): run lock, ready file.
RUN_STATE_DIR = "/run/nvfabric"


def _with_run_ready(root: str, reading: Any) -> Any:
    """``reading`` with the readiness of a live ``nvfabric run`` on the node (RUN.md R10: its
    ready file, valid only while its pid holds the run lock in :data:`RUN_STATE_DIR`);
    unchanged when no run holds the lock or the state cannot be read."""
    from dataclasses import replace

    from nvfabric.facts.paths import under
    from nvfabric.supervisor import live_ready, run_lock_holder

    state = under(root, RUN_STATE_DIR)
    try:
        if run_lock_holder(state) is None:
            return reading
    except OSError:
        return reading
    info, _ = live_ready(state)
    after = info.get("ready_after_s") if info else None
    seconds = float(after) if isinstance(after, (int, float)) and not isinstance(after, bool) \
        and after >= 0 else None  # a damaged file's true, -1 or string is no time
    return replace(reading, run_ready=info is not None, ready_after_s=seconds)


def textfile_path(root: str, path: str) -> str:
    """``--textfile``: a host path under ``root`` ending in ``.prom`` (node_exporter's textfile
    collector reads only those: node_exporter ``collector/textfile.go``) whose directory
    exists. Exit 2 otherwise, before anything is read."""
    from nvfabric.facts.paths import confined

    if not path.endswith(".prom") or path.endswith("/.prom"):
        raise usage_error(f"--textfile {path!r}: the name must end in .prom",
                          "node_exporter's textfile collector reads only *.prom files")
    try:
        full = confined(root, path, "--textfile")
    except ValueError as err:
        raise usage_error(str(err), "host paths are absolute, resolved under --root, and may "
                          "not leave it") from None
    if not os.path.isdir(os.path.dirname(full) or "/"):
        raise usage_error(f"--textfile {path!r}: no directory {os.path.dirname(path)}",
                          "create the textfile collector's directory (node_exporter "
                          "--collector.textfile.directory) first")
    return full


def write_textfile(path: str, text: bytes) -> None:
    """Replace ``path`` with ``text`` atomically (temp file, fsync, rename: the collector never
    reads half a file), mode 0644, no backup (the file is regenerated on every reading). A
    write error is the one line of :func:`nvfabric.cli.render.os_error`."""
    from nvfabric.cli.render import os_error
    from nvfabric.effects.atomic import write_atomic
    from nvfabric.model.errors import NvfabricError

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
    helper thread is left behind); nothing is printed."""
    with stop.watching():
        try:
            yield
        except stop.Stopped as got:
            sys.exit(128 + (got.signum or stop.received() or signal.SIGTERM))


#: The shortest fabric-state probe ``wait`` makes, even when its time is (nearly) up, so that
#: the last answer is a reading rather than a timeout; it bounds the overrun of --timeout.
MIN_PROBE_S = 0.5


def probe_budget(left_s: float) -> float:
    """Seconds the next fabric-state probe of ``wait`` may take: the time left before the
    deadline in whole tenths (a bound a message can say: 2.9, not 2.99997), at least
    :data:`MIN_PROBE_S`, at most the usual probe timeout."""
    from nvfabric.facts.gpu import SMI_TIMEOUT_S

    return min(SMI_TIMEOUT_S, max(MIN_PROBE_S, math.floor(left_s * 10) / 10))


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
    deadline = time.monotonic() + timeout
    with stopped_exits():
        while True:
            left = deadline - time.monotonic()
            report = evaluate(root, None, fabric, True, grace,
                              probe_timeout_s=probe_budget(left))
            stop.check()  # one that came during a read that waits on nothing
            if report.exit_code == 0 or time.monotonic() >= deadline:
                break
            stop.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    if as_json:
        print_json({**report.to_json(), "timed_out": report.exit_code != 0})
    else:
        if report.exit_code != 0:
            console(stderr=True).print(f"timed out after {timeout:.0f} s")
        print_report(report)
    sys.exit(report.exit_code)


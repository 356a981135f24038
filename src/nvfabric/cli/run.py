"""``nvfabric run``: bring the fabric of this node up and keep it up (the main job).

The command parses its options, runs the procedure (:func:`nvfabric.app.run.run`: read the
node, plan, prepare the bring-up of its fabric kind, take the run lock, preflight, apply and
supervise) and renders how it ended: the one ``--dry-run`` listing of every fabric kind and
the one result printer (the ``run --json`` object, :func:`nvfabric.supervisor.outcome.
run_result`, plus ``imex`` on a tray and ``actions`` in a tray's dry run; or, for a human, the
findings with their hints on stderr). Once the supervisor runs the processes it reports the
end itself. Values from the node and its files are escaped
(:func:`nvfabric.effects.log.printable`).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import click

from nvfabric.app.run import RunOptions, RunResult, run
from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import nvlsm
from nvfabric.bringup.mnnvl import imex_json
from nvfabric.bringup.prepared import Prepared
from nvfabric.bringup.spec import written_by_run
from nvfabric.cli import kube
from nvfabric.cli.render import (
    Seconds,
    arch_option,
    console,
    guarded,
    json_option,
    print_findings,
    root_option,
)
from nvfabric.effects.log import Log, current_format, printable
from nvfabric.effects.stdio import print_json
from nvfabric.model.commandline import DEFAULT_STATE_DIR
from nvfabric.model.findings import Finding
from nvfabric.model.words import plural
from nvfabric.rules.imex.tables import CTL_TIMEOUT_RANGE_S, CTL_TIMEOUT_S
from nvfabric.rules.live import (
    DEFAULT_BOOT_WINDOW_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_LINES_PER_S,
)
from nvfabric.supervisor.outcome import run_result

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds between two readings of the fabric by ``run --listen`` (GPU fabric state, services).
DEFAULT_HEALTH_INTERVAL_S = 30.0


def _watch_options(fn: F) -> F:
    """The options that watch the run from outside (``--listen``, ``--health-interval``,
    ``--log-format``: :mod:`nvfabric.app.listen`), in the order ``run --help`` shows them."""
    fn = click.option(
        "--log-format", type=click.Choice(["text", "json"]), default="text",
        show_default=True, help="Log lines as text (RFC 3339 time first) or one JSON object "
        "per line (time, level, source, message, code).")(fn)
    fn = click.option(
        "--health-interval", type=Seconds(min=1), default=DEFAULT_HEALTH_INTERVAL_S,
        show_default=True, help="With --listen: seconds between readings of the GPUs' fabric "
        "state (never read per request).")(fn)
    return click.option(
        "--listen", "listen_at", metavar="HOST:PORT", default=None,
        help="Serve /metrics, /healthz, /readyz, /status over HTTP [default: off; the "
        "DaemonSet listens on 0.0.0.0:9464].")(fn)


def _kernel_options(fn: F) -> F:
    """The options that watch the kernel log while the unit runs
    (:mod:`nvfabric.supervisor.kernelwatch`; docs/watching.md): where it is read from, the
    boot window of link-training notices, how often repeats are said, and the flood bound.
    The event history needs no option: it is ``events`` in the state directory
    (:mod:`nvfabric.effects.history`)."""
    fn = click.option(
        "--kernel-max-lines", type=click.IntRange(100), default=DEFAULT_MAX_LINES_PER_S,
        show_default=True, help="Kernel log lines a second beyond which the rest of the "
        "second is skipped and counted (a flood).")(fn)
    fn = click.option(
        "--kernel-interval", type=Seconds(1.0), default=DEFAULT_INTERVAL_S,
        show_default=True, help="Seconds within which the repeats of a kernel finding on "
        "one device are one log line with their count.")(fn)
    fn = click.option(
        "--link-training-window", type=Seconds(0.0), default=DEFAULT_BOOT_WINDOW_S,
        show_default=True, help="Seconds after the NVIDIA driver loaded during which "
        "link-training notices are counted, not raised (NVSentinel's boot grace period).")(fn)
    return click.option(
        "--kernel-log", type=click.Choice(["auto", "kmsg", "journal", "off"]), default="auto",
        show_default=True, help="Watch the kernel log for fabric events while supervising: "
        "/dev/kmsg under --root, else the journal's kernel stream (auto).")(fn)


@click.command("run")
@root_option
@arch_option
@json_option
@click.option("--dry-run", is_flag=True, help="Print the argv and files, start nothing.")
@click.option("--restart", type=click.Choice(["never", "on-failure"]), default="never",
              show_default=True, help="Restart the unit in-process after a failure.")
@click.option("--stay", is_flag=True,
              help="On a node with nothing to manage, keep running until SIGTERM.")
@click.option("--fm-set", "fm_sets", multiple=True, metavar="KEY=VALUE",
              help="Override a fabricmanager.cfg key (repeatable).")
@click.option("--fabric-mode", type=click.Choice(["0", "1", "2"]), default=None,
              help="FABRIC_MODE: 0 bare metal, 1 shared NVSwitch, 2 vGPU.")
@click.option("--gpu-reset-command", default=None, metavar="CMD",
              help="Command (split like a shell, run without one) that resets the GPUs before "
                   "fabric manager is restarted after GPUs registered (H100 and later).")
@click.option("--gpu-reset-timeout", type=Seconds(0.01), default=300.0,
              show_default=True, help="Seconds the GPU reset command may take; then it is "
              "killed and nothing is started.")
@click.option("--socket-timeout", type=Seconds(0.01), default=60.0, show_default=True,
              help="Seconds to wait for NVLSM's IPC socket.")
@click.option("--ready-timeout", type=Seconds(0.01), default=300.0, show_default=True,
              help="Seconds after which GPUs still registering are reported.")
@click.option("--grace", type=Seconds(0.0), default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL when stopping a service.")
@click.option("--restart-delay", type=Seconds(0.0), default=1.0, show_default=True,
              help="First restart delay; doubles each time.")
@click.option("--restart-max-delay", type=Seconds(0.0), default=30.0, show_default=True,
              help="Cap of the restart delay.")
@click.option("--restart-limit-burst", type=click.IntRange(0), default=5, show_default=True,
              help="With --restart on-failure: this many starts within --restart-limit-interval "
                   "end a crash loop (like systemd's StartLimitBurst; 0: no limit).")
@click.option("--restart-limit-interval", type=Seconds(0.0), default=300.0,
              show_default=True, help="Seconds of the restart limit's window.")
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
              help="Where the effective config and the readiness file are written.")
@click.option("--fm-bin", default=fm.BINARY, show_default=True,
              help="Fabric manager's binary (host path, under --root).")
@click.option("--fm-config", default=fm.CONFIG, show_default=True,
              help="The shipped fabricmanager.cfg (read, never edited).")
@click.option("--nvlsm-bin", default=nvlsm.BINARY, show_default=True,
              help="NVLSM's binary (NVLink 5; host path, under --root).")
@click.option("--nvlsm-config", default=nvlsm.CONFIG, show_default=True,
              help="NVLSM's shipped config file (read, never edited).")
@click.option("--nvlsm-pid-file", default=nvlsm.PID_FILE, show_default=True,
              help="Where NVLSM writes its pid (its --pid_file).")
@click.option("--fm-sm-socket", default=None,
              help=f"NVLSM's IPC socket [default: FM_SM_IPC_INTERFACE, else {nvlsm.SOCKET}]")
@click.option("--imex-owner", type=click.Choice(["host", "dra", "dra-host", "slurm", "none"]),
              default=None,
              help="GB200/GB300: who runs IMEX here [default: detected; nvfabric when none]; "
              "dra-host: the DRA driver in imex.mode=hostManaged, served by nvfabric.")
@click.option("--imex-bin", default="/usr/bin/nvidia-imex", show_default=True,
              help="The IMEX daemon's binary (GB200/GB300; host path, under --root).")
@click.option("--imex-ctl", default="/usr/bin/nvidia-imex-ctl", show_default=True,
              help="nvidia-imex-ctl, which readiness is asked of (host path, under --root).")
@click.option("--imex-config", default="/etc/nvidia-imex/config.cfg", show_default=True,
              help="The shipped IMEX config.cfg (read, never edited).")
@click.option("--imex-peers", default=None, metavar="FILE",
              help="IMEX node list [default: IMEX_NODE_CONFIG_FILE of the shipped config].")
@click.option("--imex-local-address", multiple=True, metavar="ADDR",
              help="This node's addresses, instead of reading its interfaces (repeatable).")
@click.option("--imex-ctl-timeout", type=Seconds(*CTL_TIMEOUT_RANGE_S), default=CTL_TIMEOUT_S,
              show_default=True, help="Hard timeout of each nvidia-imex-ctl call, seconds.")
@_watch_options
@_kernel_options
@guarded
@kube.options
def run_cmd(**params: Any) -> None:
    """Bring the fabric up (NVLSM, fabric manager; IMEX on GB200/GB300 trays) and supervise it
    as one unit."""
    ctx = click.get_current_context()
    typed = frozenset(name for name in params
                      if (src := ctx.get_parameter_source(name)) is not None
                      and src.name != "DEFAULT")
    o = RunOptions(**params, typed=typed)
    ended = run(o)
    if ended.listing is not None and not o.as_json:
        dry_run(*ended.listing)
    report(ended, as_json=o.as_json, dry_run=o.dry_run)
    sys.exit(ended.code)


def _echo(text: str) -> None:
    """One plain line on stdout (values from the node and its files: escaped)."""
    click.echo(printable(text))


def dry_run(prepared: Prepared, refused: bool) -> None:
    """The human ``--dry-run`` listing: who runs the fabric (a tray's IMEX owner), the argv
    in start order with its readiness, the notes, and what ``run`` would make and write
    (channel nodes, files with their content); when the run would be refused, nothing of
    what it would make or write."""
    if prepared.imex is not None:
        _imex_header(prepared)
    else:
        _echo(f"fabric {prepared.fabric}: {plural(len(prepared.processes), 'process')}, "
              "in start order")
    for s in prepared.processes:
        _echo(f"  {s.name}: {shlex.join(s.argv)}")
        if s.ready_socket:
            _echo(f"    ready when the socket {s.ready_socket} listens")
        if s.name == "imex" and prepared.imex is not None:
            _echo(f"    ready when `{shlex.join(prepared.imex.ready_query)}` prints READY")
        elif s.ready_gpus:
            _echo("    ready when every GPU's fabric state is completed")
        for path in written_by_run(s.argv, prepared.files):
            _echo(f"    note: {path} is written by the run before it starts {s.name}"
                  + (" (refused here: not written)" if refused else " (content below)")
                  + "; typed by hand before that, this command finds no such file")
    if prepared.imex is not None:
        _imex_middle(prepared, refused)
    else:
        for note in prepared.notes:
            _echo(f"  note: {note}")
        if refused:
            _echo("refused: nothing would be written or started")
    for f in () if refused else prepared.files:
        _echo(f"file {f.path} (mode {f.mode:o}):")
        for line in f.content.splitlines():
            _echo(f"  | {line}")


def _imex_header(prepared: Prepared) -> None:
    assert prepared.imex is not None
    d = prepared.imex.ownership
    _echo(f"fabric mnnvl: IMEX owner {d.owner}"
          + (f" (run by {d.runner})" if d.runner else "") + f", {d.source}")
    for r in d.reasons:
        _echo(f"  why: {r}")


def _imex_middle(prepared: Prepared, refused: bool) -> None:
    if refused:  # run would make and write nothing: nothing is shown as if it would
        _echo("refused: nothing would be created, written or started")
    for a in () if refused else prepared.actions():
        _echo(f"  action: {a}")
    for note in prepared.notes:
        _echo(f"  note: {note}")


def plain(findings: Sequence[Finding]) -> list[Finding]:
    """Findings with control characters escaped, for the human listing (rich escapes the
    markup): messages may quote a daemon's output."""
    return [replace(f, message=printable(f.message), hint=printable(f.hint)) for f in findings]


def report(ended: RunResult, *, as_json: bool, dry_run: bool) -> None:
    """Print how the run ended: under ``--json`` the one ``run`` object (``listed``: the
    prepared bring-up whose processes and files it lists; ``imex``: the tray's, adding
    ``imex`` and, in a dry run, ``actions``); else the findings under the title on stderr
    (nothing without a title): as log lines of the run's format (each with its timestamp, as
    every line a run logs), or, for a text dry run, under the listing it prints."""
    findings, title, p = ended.findings, ended.title, ended.plan
    if not as_json:
        if findings and title and (current_format() == "json" or not dry_run):
            log = Log()  # the findings as log records: one line (or JSON object) each
            # "run refused: ...", not "refused: ...", which reads as a finding's "CODE: ..."
            log.say(f"run {title}")
            for f in findings:
                log.finding(f)
        elif findings and title:
            print_findings(console(stderr=True), plain(findings), title)
        return
    listed, imex = ended.listed, ended.imex
    obj = run_result(
        ended.result, ended.code, p.fabric, findings, dry_run=dry_run,
        processes=listed.processes if listed else (), files=listed.files if listed else (),
        reasons=p.reasons,
        vendor_files=ended.vendor_files.to_json() if ended.vendor_files is not None else ())
    if imex is not None:
        obj["imex"] = imex_json(imex)
        if dry_run:
            obj["actions"] = imex.actions()
    print_json(obj)

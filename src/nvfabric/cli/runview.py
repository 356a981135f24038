"""What ``nvfabric run`` prints: the one ``--dry-run`` renderer (human listing; the JSON
comes from :func:`report`) of every fabric kind, and the one result printer: the ``run
--json`` object (:func:`nvfabric.supervisor.outcome.run_result`, plus ``imex`` on a tray and
``actions`` in a tray's dry run) or, for a human, the findings with their hints on stderr.
Values from the node and its files are escaped (:func:`nvfabric.effects.log.printable`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

import click

from nvfabric.cli.render import console, print_findings
from nvfabric.effects.log import Log, printable
from nvfabric.effects.stdio import print_json
from nvfabric.model.findings import Finding
from nvfabric.model.words import plural
from nvfabric.supervisor.outcome import run_result

if TYPE_CHECKING:
    from nvfabric.bringup.prepared import Prepared
    from nvfabric.bringup.vendor import Resolved
    from nvfabric.rules.plan import Plan
    from nvfabric.supervisor.outcome import Outcome

#: What the command's paths call to print an outcome and exit (``result``, exit code,
#: findings, and :func:`report`'s keywords).
Emit = Callable[..., NoReturn]


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
        if s.name == "imex":
            _echo("    ready when `nvidia-imex-ctl -q` prints READY")
        elif s.ready_gpus:
            _echo("    ready when every GPU's fabric state is completed")
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


def report(result: str, code: int, findings: Sequence[Finding], p: Plan, *, as_json: bool,
           dry_run: bool, title: str = "", listed: Prepared | None = None,
           imex: Prepared | None = None, outcome: Outcome | None = None,
           vendor_files: Resolved | None = None) -> None:
    """Print the outcome: under ``--json`` the one ``run`` object (``listed``: the prepared
    bring-up whose processes and files it lists; ``imex``: the tray's, adding ``imex`` and,
    in a dry run, ``actions``); else the findings under ``title`` on stderr (nothing without
    a title): as log lines of the run's format (each with its timestamp, as every line a run
    logs), or, for a text dry run, under the listing it prints."""
    if not as_json:
        from nvfabric.effects.log import current_format

        if findings and title and (current_format() == "json" or not dry_run):
            log = Log()  # the findings as log records: one line (or JSON object) each
            # "run refused: ...", not "refused: ...", which reads as a finding's "CODE: ..."
            log.say(f"run {title}")
            for f in findings:
                log.finding(f)
        elif findings and title:
            print_findings(console(stderr=True), plain(findings), title)
        return
    obj = run_result(
        result, code, p.fabric, findings, dry_run=dry_run,
        processes=listed.processes if listed else (), files=listed.files if listed else (),
        ready_after_s=outcome.ready_after_s if outcome else None,
        restarts=outcome.restarts if outcome else 0, reasons=p.reasons,
        vendor_files=vendor_files.to_json() if vendor_files is not None else ())
    if imex is not None:
        from nvfabric.bringup.mnnvl import imex_json

        obj["imex"] = imex_json(imex)
        if dry_run:
            obj["actions"] = imex.actions()
    print_json(obj)

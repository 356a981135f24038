"""Triage of ``nvidia-bug-report.log.gz``: the file the field already shares, read as
nvfabric reads a live node.

- :mod:`.report` streams the report (gzip members or plain text) and cuts it into sections;
- :mod:`.lspci`, :mod:`.ibstat`, :mod:`.units` parse the sections that hold facts;
- :mod:`.collect` routes each section to its reader (logs to the diagnosis catalogue);
- :mod:`.build` rebuilds the inventory and runs the plan, the verdict, the diagnosis and
  :mod:`.checks` (what ran against what should have);
- :mod:`.spec` turns the rebuilt facts into a node spec for ``nvfabric simulate``.

:func:`triage` is the entry point; it never holds the report whole. :func:`with_history`
adds what the event history of ``nvfabric run`` on that node says (``triage --events``).
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import replace
from typing import IO, Any, cast

from nvfabric.effects.history import MAGIC, for_diagnosis, is_history, read_stream
from nvfabric.facts.textfile import decompressing, open_input
from nvfabric.model.errors import usage_error
from nvfabric.rules.diagnose import Classifier
from nvfabric.triage.build import Triage, build
from nvfabric.triage.collect import read
from nvfabric.triage.report import ReportTooLarge


def triage_stream(raw: IO[bytes], label: str) -> Triage:
    """Triage a report read from ``raw`` (gzip or plain). NvfabricError (exit 2) when the
    text has no block of nvidia-bug-report.sh at all, none in its first 64 MiB, or is over
    16 GiB (:class:`.report.ReportTooLarge`: an endless stream stops there)."""
    buffered = raw if hasattr(raw, "peek") else cast(IO[bytes], io.BufferedReader(cast(Any, raw)))
    try:
        collected = read(buffered)
    except ReportTooLarge as err:
        raise usage_error(f"{label}: {err}",
                          "give the nvidia-bug-report.log.gz written by "
                          "`sudo nvidia-bug-report.sh`") from None
    known = [s for s in collected.sections if s.kind not in ("empty",)]
    if not collected.seen and not any(s.kind in ("prologue", "epilogue") for s in known):
        damage = collected.outcome.damage
        if damage is not None:
            # a gzip file that breaks before its first block: say so, not "no bug report"
            raise usage_error(
                f"{label}: {damage} after {collected.outcome.bytes_read} bytes of text, "
                "before any block of nvidia-bug-report.sh",
                "the copy is damaged or cut short: copy nvidia-bug-report.log.gz again "
                "(`gzip -t` checks it)")
        raise usage_error(
            f"{label}: not an nvidia-bug-report log (no block of nvidia-bug-report.sh: "
            "no line of underscores followed by a command or file name)",
            "give the nvidia-bug-report.log.gz written by `sudo nvidia-bug-report.sh`")
    return build(collected, label)


def open_report(path: str) -> IO[bytes]:
    """The report file as a buffered binary stream (``-``: stdin). NvfabricError (exit 2)
    when it cannot be opened or is not a regular file or pipe (a directory, a device)."""
    try:  # a stop signal while it waits for a writer or the next block: Stopped
        stream = open_input(path)
    except OSError as err:
        raise usage_error(f"cannot read {path}: {err.strerror}",
                          "give the path of nvidia-bug-report.log.gz, or - for stdin") from None
    if path == "-":
        return stream
    mode = os.fstat(stream.fileno()).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        stream.close()
        raise usage_error(f"{path} is not a regular file",
                          "give the path of nvidia-bug-report.log.gz, or - for stdin")
    return stream


def triage(path: str) -> Triage:
    """Triage the report at ``path`` (``-``: stdin). Errors: NvfabricError exit 2 for an
    unreadable file or one that is no bug report."""
    stream = open_report(path)
    try:
        return triage_stream(stream, "stdin" if path == "-" else path)
    except OSError as err:
        raise usage_error(f"cannot read {path}: {err.strerror or err}",
                          "give a readable nvidia-bug-report.log(.gz), or '-' for stdin") from None
    finally:
        if path != "-":
            stream.close()


def with_history(t: Triage, path: str) -> Triage:
    """``t`` with the findings of the event history at ``path`` (section ``nvfabric events``,
    :mod:`nvfabric.effects.history`): its kernel lines classified for the report's fabric
    kind, its other findings as recorded; error findings first. NvfabricError (exit 2) when
    the file cannot be read or is no event history."""
    try:
        with open_input(path) as fh:  # the file, stdin, or either compressed
            stream, _ = decompressing(fh, path)
            if not is_history(stream.peek(len(MAGIC))[:len(MAGIC)]):
                raise usage_error(f"--events {path}: not an event history of nvfabric run",
                                  "give <state-dir>/events (default /run/nvfabric/events)")
            reading = read_stream(stream)
    except OSError as err:
        raise usage_error(f"--events {path}: {err.strerror or err}",
                          "give the events file of nvfabric run's state directory") from None
    lines, found = for_diagnosis(reading.records)
    classifier = Classifier(t.plan.fabric)
    for line in lines:
        classifier.feed(line)
    section = {"section": "nvfabric events"}
    more = [replace(f, fields={**f.fields, **section}) for f in (*classifier.findings(), *found)]
    return replace(t, findings=tuple(sorted((*t.findings, *more),
                                            key=lambda f: f.severity != "error")))

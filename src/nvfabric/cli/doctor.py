"""``nvfabric doctor --log FILE...``: classify fabric manager, start script, NVLSM/OpenSM, IMEX,
NCCL and kernel log lines into findings with hints (catalogue: nvfabric/data/signatures.yaml).

Files are read as streams (constant memory); ``-`` is stdin, so ``journalctl -u
nvidia-fabricmanager -o cat | nvfabric doctor --log -`` works. The fabric kind that decides
platform-dependent lines comes from ``--fabric`` or, with ``--root``, from the node's plan;
without either it is unknown and such lines say both meanings. With ``--root`` the hints type
their commands and host paths for that node (``nvfabric status --root R``, ``/dev/...`` under
R, ``systemctl`` said to be typed on the host), and say who starts fabric manager and IMEX
there (:func:`nvfabric.app.hints.of_node`; :func:`nvfabric.rules.diagnose.render_hint`).

Logs in UTF-16/UTF-32 (a BOM, or NUL bytes between ASCII characters) are decoded; a file
with NUL bytes that is no text in those encodings is refused (exit 2), never read as "no
findings". A log compressed with gzip, xz or bzip2 (``kern.log.2.gz`` as logrotate leaves it),
told by its first bytes, is read decompressed, :data:`MAX_LOG_BYTES` of decompressed text at
most; zstd is refused naming ``zstdcat`` (:func:`nvfabric.facts.textfile.decompressing`).

An event history of ``nvfabric run`` (``<state-dir>/events``, :mod:`nvfabric.effects.history`),
told by its first bytes after decompression (``events.gz``, on stdin too), is read as one: its
kernel lines are classified again, its other findings listed as recorded; the text says how many
records it held (``records`` in the JSON), the ``lines`` count log lines only.

A line holding a value no fabric log prints (a number of thousands of digits) is dropped and
counted by reason (``dropped`` in the JSON, a line of the text), never the whole log refused.

Exit codes: 0 no error-level finding; 1 at least one; 2 unreadable input.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import IO, cast

import click

from nvfabric.app.hints import of_node
from nvfabric.cli.render import console, guarded, json_option, print_findings, root_option
from nvfabric.effects.history import MAGIC, for_diagnosis, is_history, read_stream
from nvfabric.effects.stdio import print_json
from nvfabric.facts.inventory import collect
from nvfabric.facts.textfile import Stream, decompressing, open_input
from nvfabric.model.commandline import HintContext
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FABRIC_KINDS, FabricKind
from nvfabric.model.words import plural
from nvfabric.rules.diagnose import DROP_REASONS, Classifier, classify_stream
from nvfabric.rules.logtext import LogEncodingError, LogInputError
from nvfabric.rules.plan import plan


def fabric_of_root(root: str) -> FabricKind:
    """The plan's fabric kind of the node under ``root``."""
    return plan(collect(root)).fabric


#: The most one log input may hold. Logs are streamed in blocks (constant memory), so this only
#: bounds time: 16 GiB is years of a fabric manager log; an endless stream stops here.
MAX_LOG_BYTES = 16 << 30


class _Capped:
    """A binary stream that refuses (``input_unreadable``) to go past :data:`MAX_LOG_BYTES`
    (of the decompressed bytes when the log is compressed: ``fmt`` its format)."""
    def __init__(self, stream: Stream, path: str, fmt: str | None = None) -> None:
        self.stream, self.path, self.fmt, self.total = stream, path, fmt, 0

    def read(self, size: int = -1) -> bytes:
        return self._count(self.stream.read(size))

    def read1(self, size: int = -1) -> bytes:
        return self._count(self.stream.read1(size))

    def _count(self, block: bytes) -> bytes:
        self.total += len(block)
        if self.total > MAX_LOG_BYTES:
            what = "" if self.fmt is None else f" decompressed (a {self.fmt} file)"
            raise usage_error(f"{self.path}: more than {MAX_LOG_BYTES >> 30} GiB{what}, the "
                              "limit for one log input", "give the part of the log that matters")
        return block


def _history(classifier: Classifier, stream: _Capped) -> tuple[int, list[Finding]]:
    """An event history of ``nvfabric run`` given as a log (the file, decompressed or on
    stdin): its record count, its kernel lines classified (as if read from the kernel log,
    not counted as lines read), the findings of its other records as recorded."""
    records = read_stream(stream).records
    lines, found = for_diagnosis(records)
    counted = classifier.lines
    for line in lines:
        classifier.feed(line)
    classifier.lines = counted
    return len(records), found


def _read(lines: int, records: int, histories: int) -> str:
    """What was read, in words: log lines, records of event histories, or both."""
    said = [plural(lines, "line")] if lines or not histories else []
    if histories:
        of = "an event history" if histories == 1 else f"{histories} event histories"
        said.append(f"{plural(records, 'record')} of {of}")
    return " and ".join(said) + " read"


@click.command("doctor")
@root_option
@click.option("--fabric", type=click.Choice(FABRIC_KINDS),
              default=None, help="The node's fabric kind (default: from --root when given).")
@click.option("--log", "logs", multiple=True, required=True, metavar="FILE",
              help="Log file to classify ('-': stdin); repeat for several.")
@json_option
@click.pass_context
@guarded
def doctor(ctx: click.Context, root: str, fabric: FabricKind | None, logs: tuple[str, ...],
           as_json: bool) -> None:
    """Explain fabric logs: each known failure line becomes a finding with a hint."""
    source = ctx.get_parameter_source("root")
    hints = HintContext()
    if source is not None and source.name != "DEFAULT":
        fabric = fabric or fabric_of_root(root)
        hints = of_node(root, fabric)
    classifier = Classifier(fabric, hints=hints)
    extra: list[Finding] = []  # findings an event history recorded (not log lines)
    records = histories = 0  # the event histories read, and their records
    for path in logs:
        try:
            # stdin or the file; a stop signal while it waits for a writer or the next
            # block ends the command (interrupted, exit 130/143)
            with open_input(path) as fh:
                mode = os.fstat(fh.fileno()).st_mode
                if path != "-" and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
                    raise usage_error(f"{path} is a device, not a log file",
                                      "give a log file, or - for stdin")
                stream, fmt = decompressing(fh, path)  # kern.log.2.gz as logrotate leaves it
                capped = _Capped(stream, path, fmt)
                if is_history(stream.peek(len(MAGIC))[:len(MAGIC)]):  # run's, however given
                    n, found = _history(classifier, capped)
                    records, histories, extra = records + n, histories + 1, [*extra, *found]
                    continue
                classify_stream(classifier, cast(IO[bytes], capped))
        except OSError as err:
            raise usage_error(f"cannot read {path}: {err.strerror or err}",
                              "give a readable log file, or - for stdin") from None
        except LogEncodingError as err:
            raise usage_error(f"{path}: {err}",
                              "give the log as text (UTF-8, or UTF-16/UTF-32 as Windows "
                              "tools save it), e.g. `journalctl -k -o short-iso > FILE`") from None
        except LogInputError as err:
            raise usage_error(f"{path}: {err}",
                              "give the log as the daemon or the kernel wrote it") from None
    findings = [*classifier.findings(), *extra]
    if as_json:
        print_json({"fabric": fabric, "lines": classifier.lines, "records": records,
                    "dropped": dict(classifier.dropped),
                    "findings": [f.to_json() for f in findings]})
    else:
        con = console()
        con.print(f"{_read(classifier.lines, records, histories)}, fabric kind "
                  f"{fabric or 'unknown'}: {plural(len(findings), 'finding')}")
        for reason, n in classifier.dropped.items():
            con.print(f"{plural(n, 'line')} dropped unclassified: {DROP_REASONS[reason]}",
                      markup=False)
        print_findings(con, findings, "findings")
    sys.exit(1 if any(f.severity == "error" for f in findings) else 0)

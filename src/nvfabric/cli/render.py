"""Printing and exiting, shared by every command: ``--json`` gives one JSON object on stdout,
otherwise human text through rich (imported only then). Errors become one line on stderr.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from nvfabric.effects import stop
from nvfabric.effects.stdio import debug_traceback, fail, quiet_stdout
from nvfabric.model.errors import NvfabricError, internal_error, os_error, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import problem

F = TypeVar("F", bound=Callable[..., Any])

def checked_root(value: str) -> str:
    """``value`` made absolute (relative to the working directory); ValueError when it cannot
    be a root: not valid UTF-8 (undecodable bytes kept by os.fsdecode), control characters or
    PATH_MAX (:func:`nvfabric.model.hostpath.problem`). Paths under a root go into configs and argv
    as text, so a root that text cannot hold is refused here, once."""
    root = os.path.abspath(value)
    try:
        root.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{root.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8: nvfabric writes "
            "paths under the root into configs and argv as text") from None
    why = problem(root)
    if why is not None:
        raise ValueError(f"{root!r} {why}")
    return root


def absolute_root(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--root`` made absolute once, at the CLI edge, so that no command has to: paths built
    under it go into argv and config files, which take absolute paths only. An empty value is a
    usage error (exit 2); :func:`guarded` refuses one that text cannot hold
    (:func:`checked_root`), as one line or one JSON object."""
    if not value:
        raise click.BadParameter("must name a directory (use / for this host)")
    return os.path.abspath(value)


#: Shared option decorators so that every command spells them the same way.
root_option = click.option(
    "--root", default="/", show_default=True, type=click.Path(file_okay=False),
    callback=absolute_root,
    help="Read the node under this directory (a simulated node tree); relative to the "
    "working directory.",
)


class Seconds(click.FloatRange):
    """A duration option in seconds: a float within the range that is also finite.

    click's ``FloatRange`` lets ``nan`` through every bound (comparisons with NaN are false)
    and ``inf`` through an open top, so ``wait --timeout nan`` would wait forever; both are
    usage errors (exit 2) here.
    """

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds.", param, ctx)
        return number


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def one_output_form(given: dict[str, bool], hint: str) -> None:
    """Refuse two options that each choose what stdout holds (``status --json`` and
    ``--npd``: one JSON object or node-problem-detector's one line): a usage error (exit 2)
    naming every one given, never one of them silently winning. ``given``: option -> whether
    it was given, in the order the message names them."""
    chosen = [option for option, on in given.items() if on]
    if len(chosen) < 2:
        return
    names = f"{', '.join(chosen[:-1])} and {chosen[-1]}"
    raise usage_error(f"{names} {'both' if len(chosen) == 2 else 'all'} choose the output: "
                      "give one", hint)


arch_option = click.option("--arch", default=None, help="Override the architecture (uname -m).")


def console(stderr: bool = False) -> Any:
    """A rich Console (lazy import: rich costs ~50 ms to import)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 132  # logs and pipes: do not squeeze tables to 80
    con = Console(stderr=stderr, highlight=False, soft_wrap=True, width=width, emoji=False)
    con.on_broken_pipe = _on_broken_pipe  # type: ignore[method-assign]  # rich exits 1 there
    return con


def _on_broken_pipe() -> None:
    """The reader went away (``nvfabric status | head -1``): the rest of the output is
    dropped and the command goes on to its own exit code (:class:`QuietOnBrokenPipe`)."""
    quiet_stdout()


#: The rich style of each verdict word.
VERDICT_STYLE = {
    "healthy": "bold green", "not_applicable": "bold cyan", "pending": "bold yellow",
    "degraded": "bold yellow", "unhealthy": "bold red",
}


def severity_style(severity: str) -> str:
    return {"error": "bold red", "warning": "yellow", "info": "cyan"}.get(severity, "")


def print_findings(con: Any, findings: list[Finding] | tuple[Finding, ...], title: str) -> None:
    """Human listing of findings: one line each plus the hint, indented. Messages carry values
    read from nodes and files, so they go through :func:`safe`."""
    if not findings:
        return
    con.print(f"[bold]{title}[/bold]")
    for f in findings:
        con.print(
            f"  [{severity_style(f.severity)}]{f.severity:7}[/] {safe(f.code)}: {safe(f.message)}"
        )
        seen = _seen(f)
        if seen:
            con.print(f"          {safe(seen)}")
        if f.hint:
            con.print(f"          hint: {safe(f.hint)}")


def _seen(f: Finding) -> str | None:
    """``seen 12000 times, first 1000.12, last 12999.12`` for a log finding that repeats
    (``doctor``: fields ``count``, ``first_seen``, ``last_seen``; lines without a timestamp
    have only the count and the ``signature`` that matched); None otherwise (another
    finding's ``count`` counts GPUs, not lines)."""
    count = f.fields.get("count")
    if not isinstance(count, int) or count < 2 or not (
            "first_seen" in f.fields or "signature" in f.fields):
        return None
    first, last = f.fields.get("first_seen"), f.fields.get("last_seen")
    span = f", first {first}, last {last}" if first and last else ""
    return f"seen {count} times{span}"


def safe(value: object) -> str:
    """A value read from the node or an input file, made safe for rich console output: markup
    brackets escaped (``[/]`` in a sysfs file must not be taken as a style tag) and control
    characters shown as ``\\xNN`` (no raw escape sequences reach the operator's terminal)."""
    from rich.markup import escape

    text = str(value)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text):
        text = "".join(
            c if not (ord(c) < 32 or 127 <= ord(c) < 160) else f"\\x{ord(c):02x}" for c in text
        )
    return escape(text)


def guarded(fn: F) -> F:
    """Turn NvfabricError and stray exceptions into one line (one JSON object under ``--json``)
    and an exit code; never a traceback unless NVFABRIC_DEBUG is set (then also the traceback,
    with the same exit code).

    A stop signal the command does not own (:class:`nvfabric.effects.stop.Stopped`, raised
    where it waits or blocks reading stdin or a FIFO; a SIGINT that nothing watches, Python's
    KeyboardInterrupt) is ``interrupted``: one line naming the signal and what it read, exit
    130 or 143 (:meth:`~nvfabric.effects.stop.Stopped.finding`), never click's ``Aborted!``.

    An OSError or UnicodeDecodeError that escapes a command is about the files or directories
    it was given (a file where a directory should be, bytes that are not text): exit 2 with
    the path and the hint of its errno; a full disk is ``disk_full``, exit 1
    (:func:`os_error`). A broken stdout never gets here (:class:`QuietOnBrokenPipe`, installed
    by :func:`standard_streams`); should one still escape, exit 0. Anything else is a bug:
    exit 3.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            if isinstance(kwargs.get("root"), str):
                try:
                    kwargs["root"] = checked_root(kwargs["root"])
                except ValueError as err:
                    raise usage_error(f"--root {err}", "give a plain absolute directory "
                                      "(UTF-8, no control characters)") from None
            return fn(*args, **kwargs)
        except NvfabricError as err:
            fail(err.finding, err.exit_code, as_json)
        except stop.Stopped as got:  # a stop signal while the command waited or read
            fail(got.finding(), got.exit_code, as_json)
        except KeyboardInterrupt:  # SIGINT where nothing watches it: the same end
            by_sigint = stop.Stopped(signal.SIGINT)
            fail(by_sigint.finding(), by_sigint.exit_code, as_json)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except BrokenPipeError:
            quiet_stdout()
            sys.exit(0)
        except UnicodeDecodeError as err:
            debug_traceback()
            fail(Finding("input_unreadable", "error", f"input is not text: {err}",
                         "give a text file (UTF-8)"), 2, as_json)
        except OSError as err:
            debug_traceback()
            fail(*os_error(err), as_json)
        except Exception as err:  # noqa: BLE001 - last resort, see docstring
            debug_traceback()
            fail(internal_error(err), 3, as_json)

    return wrapper  # type: ignore[return-value]

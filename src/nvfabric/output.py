"""Printing and exiting, shared by every command: ``--json`` gives one JSON object on stdout,
otherwise human text through rich (imported only then). Errors become one line on stderr.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from .errors import NvfabricError
from .findings import Finding

F = TypeVar("F", bound=Callable[..., Any])

def absolute_root(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--root`` made absolute once, at the CLI edge (relative to the working directory), so
    that no command has to: paths built under it go into argv and config files, which take
    absolute paths only. An empty value is a usage error (exit 2)."""
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
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
arch_option = click.option("--arch", default=None, help="Override the architecture (uname -m).")


def print_json(obj: Any) -> None:
    """One JSON object on stdout, newline-terminated."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def console(stderr: bool = False) -> Any:
    """A rich Console (lazy import: rich costs ~50 ms to import)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 132  # logs and pipes: do not squeeze tables to 80
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def severity_style(severity: str) -> str:
    return {"error": "bold red", "warning": "yellow", "info": "cyan"}.get(severity, "")


def print_findings(con: Any, findings: list[Finding] | tuple[Finding, ...], title: str) -> None:
    """Human listing of findings: one line each plus the hint, indented."""
    from rich.markup import escape

    if not findings:
        return
    con.print(f"[bold]{title}[/bold]")
    for f in findings:
        con.print(
            f"  [{severity_style(f.severity)}]{f.severity:7}[/] {escape(f.code)}: "
            f"{escape(f.message)}"
        )
        if f.hint:
            con.print(f"          hint: {escape(f.hint)}")


def fail(finding: Finding, exit_code: int, as_json: bool) -> NoReturn:
    """Report a failure as one line (or one JSON object) and exit."""
    if as_json:
        print_json({"error": finding.to_json()})
    else:
        hint = f" (hint: {finding.hint})" if finding.hint else ""
        sys.stderr.write(f"nvfabric: {finding.code}: {finding.message}{hint}\n")
    sys.exit(exit_code)


def guarded(fn: F) -> F:
    """Turn NvfabricError and stray exceptions into one line and an exit code; never a
    traceback unless NVFABRIC_DEBUG is set."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except NvfabricError as err:
            fail(err.finding, err.exit_code, as_json)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            sys.exit(0)
        except Exception as err:  # noqa: BLE001 - last resort, see docstring
            if os.environ.get("NVFABRIC_DEBUG"):
                raise
            sys.stderr.write(
                f"nvfabric: internal error: {type(err).__name__}: {err} "
                "(run with NVFABRIC_DEBUG=1 for the traceback)\n"
            )
            sys.exit(3)

    return wrapper  # type: ignore[return-value]

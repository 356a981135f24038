"""nvfabric's standard streams: made safe before anything runs (closed descriptors on
/dev/null, a reader that goes away never changes the exit code), one JSON object on stdout, and
the one line (or JSON object) that ends a command with its exit code. Shared by the CLI and
the lean supervisor process (which imports neither click nor rich).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, NoReturn

from nvfabric.model.findings import Finding


def print_json(obj: Any) -> None:
    """One JSON object on stdout, newline-terminated."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


class QuietOnBrokenPipe:
    """A text stream (sys.stdout, sys.stderr) whose reader may go away: a write or flush that
    meets a broken pipe (EPIPE) points the descriptor at /dev/null and drops the text, so the
    command ends with its own exit code (``nvfabric status | head -1`` on an unhealthy node
    still exits 1), never with an internal error or the interpreter's exit code 120. Every
    other attribute is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.lost = False

    def _gone(self) -> None:
        self.lost = True
        _quiet_fd(self._stream)

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()  # what was buffered now goes to /dev/null

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def standard_streams() -> None:
    """Called once before any command runs: descriptors 0, 1 and 2 that were closed
    (``>&-``, ``2>&-``) are opened on /dev/null, so that no file nvfabric opens later (a lock,
    a config) becomes its stdout, and sys.stdin/stdout/stderr (None then) are streams again;
    stdout and stderr are wrapped in :class:`QuietOnBrokenPipe`. The descriptors stay open
    across an exec (``run``'s into the lean supervisor, whose streams are these)."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, flags)
                if null != fd:
                    os.dup2(null, fd)  # inheritable
                    os.close(null)
                else:  # os.open's descriptors are close-on-exec (PEP 446)
                    os.set_inheritable(fd, True)
    if sys.stdin is None:
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives with the process
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - as above
        if not isinstance(stream, QuietOnBrokenPipe):
            setattr(sys, name, QuietOnBrokenPipe(stream))


def fail(finding: Finding, exit_code: int, as_json: bool) -> NoReturn:
    """Report a failure as one line (or one JSON object) and exit."""
    if as_json:
        try:
            print_json({"error": finding.to_json()})
            sys.exit(exit_code)
        except OSError:  # stdout itself is the problem (full disk, closed pipe): say it below
            quiet_stdout()
    hint = f" (hint: {finding.hint})" if finding.hint else ""
    message = " ".join(f"nvfabric: {finding.code}: {finding.message}{hint}".splitlines())
    sys.stderr.write(message + "\n")
    sys.exit(exit_code)


def debug_traceback() -> None:
    """With ``NVFABRIC_DEBUG`` set, the traceback of the exception being handled on stderr.
    The exit code stays the contract's (3 for a bug, 2 for unreadable input): debugging
    changes what is printed, never how the command ends."""
    if os.environ.get("NVFABRIC_DEBUG"):
        import traceback

        traceback.print_exc()


def quiet_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is
    silent."""
    _quiet_fd(sys.stdout)


def _quiet_fd(stream: Any) -> None:
    """Point the descriptor of ``stream`` at /dev/null (its reader went away)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass

"""A text file named on the command line (``--imex-peers``, ``imex config --peers``, ``imex
status --from-file``), read whole and checked to be UTF-8 text before anything uses it."""

from __future__ import annotations

import sys

from nvfabric.model.errors import usage_error

#: What each option's file holds, for the hint of a file that is not it.
NODE_LIST = "a text file: one address or host name per line"


def read_text_file(path: str, what: str, limit: int = 1 << 20, holds: str = NODE_LIST) -> str:
    """A UTF-8 text file given on the command line (up to ``limit`` bytes; ``-`` is stdin);
    usage error (exit 2) naming the option when it cannot be read or is not text (a binary
    file, NUL bytes), whose hint says what the file should hold (``holds``: a node list by
    default)."""
    try:
        if path == "-":  # stdin, as every command reads it
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
    except (OSError, AttributeError) as err:  # AttributeError: no binary stdin
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise usage_error(f"cannot read {what} {path}: {why}",
                          "give a readable text file") from None
    if len(data) > limit:
        raise usage_error(f"{what} {path} is larger than {limit >> 20} MiB, the limit for it",
                          "give the file itself, not a device or a larger file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise usage_error(f"{what} {path} is not a text file (byte 0x{data[err.start]:02x} at "
                          f"offset {err.start} is not UTF-8)",
                          f"give {holds}") from None
    if "\x00" in text:
        raise usage_error(f"{what} {path} is not a text file (it holds NUL bytes)",
                          f"give {holds}")
    return text

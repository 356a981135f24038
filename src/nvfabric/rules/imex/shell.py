"""The words of a POSIX shell line, as far as :mod:`nvfabric.rules.imex.script` reads a
prolog: logical lines (backslash-newline joined), the simple commands of a line split at
``;``, ``&&``, ``||``, ``|``, ``&`` and parentheses, quotes removed, ``#`` comments dropped
(POSIX.1-2017 Shell Command Language, 2.2 Quoting, 2.3 Token Recognition), and the
redirections of a command. Pure. Time is linear in the line: one pass of one regular
expression whose alternatives are each linear (:mod:`shlex`, used before, is quadratic in a
token's length in its punctuation mode).
"""

from __future__ import annotations

import re

#: Operators that end a simple command, and those of a redirection.
SEPARATORS = frozenset({";", ";;", "&", "&&", "|", "||", "(", ")", "|&"})
REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<<", "<>"})
#: A positional parameter's or a redirection's number: ASCII digits only (str.isdigit
#: also takes '²', which no shell reads as a number).
DIGITS = re.compile(r"[0-9]+")
#: One piece of a shell line: white space, a quoted string, an escaped character, a run of
#: operator characters, a run of word characters; ``bad`` an unterminated quote or a trailing
#: backslash. Each alternative is linear (the double-quoted one unrolled: no nested repeat).
_PIECE = re.compile(r"""
    (?P<space>[ \t\r\n]+)
  | '(?P<single>[^']*)'
  | "(?P<double>[^"\\]*(?:\\.[^"\\]*)*)"
  | \\(?P<escape>.)
  | (?P<op>[;&|()<>]+)
  | (?P<word>[^ \t\r\n'"\\;&|()<>]+)
  | (?P<bad>.)
""", re.X | re.S)
_DQ_ESCAPE = re.compile(r'\\([\\"])')


def trailing_backslashes(line: str) -> int:
    """How many backslashes end ``line``: an odd number escapes the newline (a continuation),
    an even number is escaped backslashes (POSIX.1-2017 2.2.1; Slurm's parser counts the same
    way, :func:`nvfabric.rules.imex.slurm.conf_lines`)."""
    return len(line) - len(line.rstrip("\\"))


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with backslash-newline continuations joined: (first line number, text). A line
    continues when it ends in an odd number of backslashes (``a \\\\`` ends in one escaped
    backslash and does not; ``a \\\\\\`` does). The pieces of a continued line are joined
    once (no string grown piece by piece)."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if trailing_backslashes(raw) % 2:
            pending.append(raw[:-1])
            continue
        out.append((start, " ".join(pending + [raw])))
        pending = []
    if pending:
        out.append((start, " ".join(pending) + " "))
    return out


def _tokens(line: str) -> list[str] | None:
    """The words and operators of one line as a POSIX shell splits them (quotes removed; in
    double quotes a backslash escapes only ``"`` and ``\\``; ``#`` at the start of a word
    begins a comment; a run of ``;&|()<>`` is one operator); None for an unterminated quote.
    One pass of :data:`_PIECE`: time linear in the line."""
    tokens: list[str] = []
    pieces: list[str] = []
    quoted = False
    for m in _PIECE.finditer(line):
        kind = m.lastgroup
        if kind == "space" or kind == "op":
            if pieces or quoted:
                tokens.append("".join(pieces))
            pieces, quoted = [], False
            if kind == "op":
                tokens.append(m.group("op"))
        elif kind == "word":
            text = m.group("word")
            if not pieces and not quoted and text.startswith("#"):
                break  # a comment, to the end of the line
            pieces.append(text)
        elif kind == "single":
            pieces.append(m.group("single"))
            quoted = True
        elif kind == "double":
            pieces.append(_DQ_ESCAPE.sub(r"\1", m.group("double")))
            quoted = True
        elif kind == "escape":
            pieces.append(m.group("escape"))
        else:
            return None
    if pieces or quoted:
        tokens.append("".join(pieces))
    return tokens


def commands(line: str) -> list[list[str]]:
    """The simple commands of one logical line, each a list of words (quotes removed,
    comments dropped), split at ``;``, ``&&``, ``||``, ``|``, ``&``, parentheses; an
    unbalanced quote (a multi-line string) falls back to splitting at white space."""
    tokens = _tokens(line)
    if tokens is None:
        tokens = line.split("#", 1)[0].split()
    out: list[list[str]] = []
    current: list[str] = []
    for token in tokens:
        if token in SEPARATORS:
            if current:
                out.append(current)
            current = []
        else:
            current.append(token)
    if current:
        out.append(current)
    return out


def split_redirects(words: list[str]) -> tuple[list[str], list[str]]:
    """(the words without redirections, the redirection targets prefixed by their operator:
    ``>/etc/nvidia-imex/nodes_config.cfg``). ``2>&1`` and ``>/dev/null`` are dropped."""
    out: list[str] = []
    targets: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in REDIRECTS:
            if i + 1 < len(words):
                targets.append(word + words[i + 1])
                skip = True
            continue
        if DIGITS.fullmatch(word) and i + 1 < len(words) and words[i + 1] in REDIRECTS:
            continue
        out.append(word)
    return out, targets

"""The words of a POSIX shell line, as far as :mod:`nvfabric.rules.imex.script` reads a
prolog: logical lines (a backslash-newline removed, outside single quotes and comments), the
simple commands of a line split at ``;``, ``&&``, ``||``, ``|``, ``&`` and parentheses, quotes
removed, ``#`` comments dropped (POSIX.1-2017 Shell Command Language, 2.2 Quoting, 2.3 Token
Recognition), and the redirections of a command. Pure. Time is linear: the lines by one pass
of a scanner over the text, each line's words by one pass of one regular expression whose
alternatives are each linear (:mod:`shlex`, used before, is quadratic in a token's length in
its punctuation mode).
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
#: The scanner of :func:`logical_lines`, one pattern a state: what ends plain text, a single-
#: quoted string, a double-quoted one, a comment. A '#' counts only after a character that ends
#: a word (:data:`_WORD_ENDS`); one at a piece's start is checked by the scanner.
_PLAIN = re.compile(r"""[\\'"\n]|(?<=[ \t\r;&|()<>])#""")
_SINGLE = re.compile(r"['\n]")
_DOUBLE = re.compile(r'[\\"\n]')
_COMMENT = re.compile(r"\n")
_WORD_ENDS = frozenset(" \t\r;&|()<>")


def trailing_backslashes(line: str) -> int:
    """How many backslashes end ``line``: an odd number escapes the newline (a continuation),
    an even number is escaped backslashes (POSIX.1-2017 2.2.1; Slurm's parser counts the same
    way, :func:`nvfabric.rules.imex.slurm.conf_lines`)."""
    return len(line) - len(line.rstrip("\\"))


def logical_lines(text: str) -> list[tuple[int, str]]:
    """The shell's lines of ``text``: (first physical line's number, text), a line ending at
    ``\\n`` alone (a ``\\r`` stays, white space to :func:`commands`). One pass of a scanner,
    plain / single-quoted / double-quoted / comment (POSIX.1-2017 Shell Command Language):

    - outside single quotes a backslash-newline is removed, nothing in its place (2.2.1,
      2.2.3): ``nvidia-im\\<newline>ex`` is ``nvidia-imex``, ``foo \\<newline>bar`` two words;
      any other backslash escapes the next character (``a \\\\`` does not continue);
    - ``#`` at a word's start (the line's start, after a blank or one of ``;&|()<>``) begins
      a comment to the newline, its backslash no continuation (2.3 rule 10); ``a#b`` a word;
    - in single quotes a backslash is a character (2.2.2).

    A quote open at a newline ends the logical line, as each line was read before (its words
    split at white space by :func:`commands`): here-documents are not read, and an apostrophe
    in one would open a quote hiding the commands after it. The text keeps quotes and
    comments. Linear in ``text``: a line's pieces (one per continuation) joined once."""
    out: list[tuple[int, str]] = []
    pieces: list[str] = []
    n = len(text)
    number = start = 1
    mark = i = 0  # the start of the text not yet put in pieces; where the scan goes on
    state = _PLAIN
    word_start = True  # a '#' at ``mark`` would begin a comment (plain state)
    escaped = -1  # the index after the last escaped character
    while True:
        if state is _PLAIN and i == mark and word_start and text.startswith("#", i):
            state = _COMMENT
        m = state.search(text, i)
        if m is None:
            break
        j = m.start()
        c = text[j]
        if c == "\n":
            pieces.append(text[mark:j])
            out.append((start, "".join(pieces)))
            pieces = []
            number += 1
            start, mark, i, state, word_start = number, j + 1, j + 1, _PLAIN, True
        elif c == "\\":
            if text.startswith("\n", j + 1):  # a continuation: both removed
                if j > mark:
                    word_start = text[j - 1] in _WORD_ENDS and j != escaped
                pieces.append(text[mark:j])
                number += 1
                mark = i = j + 2
            else:
                i = escaped = j + 2
        elif c == "#":  # after a blank or an operator (the pattern's look-behind)
            if j == escaped:
                i = j + 1
            else:
                state, i = _COMMENT, j
        else:  # a quote opens or closes
            state = _PLAIN if state is not _PLAIN else _SINGLE if c == "'" else _DOUBLE
            i = j + 1
    if mark < n or pieces:
        pieces.append(text[mark:])
        out.append((start, "".join(pieces)))
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

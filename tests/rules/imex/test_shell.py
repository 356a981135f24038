"""The shell-word splitter of the Slurm script reader (rules/imex/shell.py) against the POSIX
rules it follows (quotes, escapes, operators, comments), with :mod:`shlex` in punctuation mode,
the splitter it replaced, as the oracle on ordinary prolog lines, and bash on continued lines."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest

from nvfabric.rules.imex import shell

#: Lines of real prologs' shapes (tests/data/cases I*, packaging/slurm) and the quoting rules.
LINES = [
    'systemctl restart nvidia-imex.service',
    'scontrol show hostnames "$SLURM_JOB_NODELIST" > /etc/nvidia-imex/nodes_config.cfg',
    '[ -x /usr/bin/nvidia-imex ] && /usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg &',
    "echo 'a b' \"c \\\"d\\\" \\$e\" f\\ g # a comment",
    'exec 2>&1; timeout 30 nice -n 5 env A=B /opt/x.sh||true',
    '( cd /tmp && ./run.sh ) | logger -t prolog',
    'x="" y=\'\' ; echo ""',
    'for f in /etc/slurm/prolog.d/*.sh; do "$f"; done',
]


@pytest.mark.parametrize("line", LINES)
def test_ordinary_lines_split_as_shlex_split_them(line: str) -> None:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    want: list[list[str]] = [[]]
    for token in lexer:
        if token in shell.SEPARATORS:
            want.append([])
        else:
            want[-1].append(token)
    assert shell.commands(line) == [c for c in want if c]


def test_a_hash_inside_a_word_starts_no_comment() -> None:
    # shlex takes the '#' of `$#` or `a#b` for a comment; the shell only at a word's start
    # (POSIX 2.3, rule 10)
    assert shell.commands("[ $# -ge 1 ] && echo a#b && systemctl stop nvidia-imex # done") == [
        ["[", "$#", "-ge", "1", "]"], ["echo", "a#b"], ["systemctl", "stop", "nvidia-imex"]]


def test_an_unterminated_quote_falls_back_to_white_space() -> None:
    assert shell.commands('echo "a b; systemctl stop nvidia-imex') == [
        ["echo", '"a', "b;", "systemctl", "stop", "nvidia-imex"]]


def test_continued_lines_are_joined_with_their_first_line_number() -> None:
    # the backslash and the newline removed, nothing put in their place (POSIX 2.2.1)
    text = "a \\\n  b \\\n  c\nd\ne \\\n"
    assert shell.logical_lines(text) == [(1, "a   b   c"), (4, "d"), (5, "e ")]


def test_redirections_are_taken_out_with_their_operator() -> None:
    words = ["scontrol", "show", "hostnames", "2", ">", "/dev/null", ">>", "/etc/x.cfg"]
    assert shell.split_redirects(words) == (["scontrol", "show", "hostnames"],
                                            [">/dev/null", ">>/etc/x.cfg"])


@pytest.mark.parametrize(("text", "lines"), [
    ("a \\\\\nb\n", [(1, "a \\\\"), (2, "b")]),          # an escaped backslash: no continuation
    ("a \\\\\\\nb\n", [(1, "a \\\\b")]),               # escaped backslash, then a continuation
    ("a \\\\\\\\\nb\n", [(1, "a \\\\\\\\"), (2, "b")]),  # two escaped backslashes
])
def test_an_odd_number_of_trailing_backslashes_continues_the_line(
        text: str, lines: list[tuple[int, str]]) -> None:
    assert shell.logical_lines(text) == lines


#: Scripts of continuations, comments and quotes, and the logical lines the shell reads in
#: them (POSIX.1-2017 2.2.1 Escape Character, 2.2.2 Single-Quotes, 2.2.3 Double-Quotes, 2.3
#: rule 10 for '#'); each is also run by bash, where ``p`` prints its words.
CONTINUATIONS = [
    ("p nvidia-im\\\nex -c /etc/nvidia-imex/config.cfg\n",
     [(1, "p nvidia-imex -c /etc/nvidia-imex/config.cfg")]),
    ("p a\\\nb\np c\n", [(1, "p ab"), (3, "p c")]),
    ("p foo \\\nbar\n", [(1, "p foo bar")]),
    ("p a \\\n\\\nb\n", [(1, "p a b")]),
    # a comment runs to the newline: its backslash is no continuation
    ("p a # b \\\np c\n", [(1, "p a # b \\"), (2, "p c")]),
    ("# a comment \\\np c\n", [(1, "# a comment \\"), (2, "p c")]),
    ("p x;#y \\\np z\n", [(1, "p x;#y \\"), (2, "p z")]),
    # '#' begins a comment at a word's start only, also when a continuation put it there
    ("p a#b \\\nc\n", [(1, "p a#b c")]),
    ("p a \\\n#b \\\np c\n", [(1, "p a #b \\"), (3, "p c")]),
    ("p a \\\n\\\n#b \\\np c\n", [(1, "p a #b \\"), (4, "p c")]),
    ("p a\\\n#b\n", [(1, "p a#b")]),
    ("p a\\ #b\\\nc\n", [(1, "p a\\ #bc")]),
    ("p \\#a \\\nb\n", [(1, "p \\#a b")]),
    ("p \"a\"#b '#' \\\nc\n", [(1, "p \"a\"#b '#' c")]),
    # in double quotes a backslash-newline is removed; '#' and a backslash are no comment there
    ("p \"x # y \\\nz\" \\\"\np w\n", [(1, "p \"x # y z\" \\\""), (3, "p w")]),
    # escaped backslashes before the newline: no continuation
    ("p a \\\\\np b\n", [(1, "p a \\\\"), (2, "p b")]),
    ("p a \\\\\\\nb\n", [(1, "p a \\\\b")]),
]


@pytest.mark.parametrize(("text", "lines"), CONTINUATIONS)
def test_logical_lines_are_the_shells(text: str, lines: list[tuple[int, str]]) -> None:
    assert shell.logical_lines(text) == lines


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(("text", "lines"), CONTINUATIONS)
def test_the_words_of_the_logical_lines_are_the_words_bash_runs(
        text: str, lines: list[tuple[int, str]]) -> None:
    # p prints its words, each ended by a unit separator, a command a line; globbing off. The
    # script is the fixed table's, run with an argv list.
    prelude = "set -f; p() { printf '%s\\037' \"$@\"; printf '\\n'; }\n"
    ran = subprocess.run(["bash", "--noprofile", "--norc", "-c", prelude + text],
                         capture_output=True, text=True, timeout=30, check=False,
                         env={"PATH": os.defpath, "LC_ALL": "C"})
    assert (ran.returncode, ran.stderr) == (0, "")
    bash = [record.split("\x1f")[:-1] for record in ran.stdout.splitlines()]
    ours = [words[1:] for _, line in shell.logical_lines(text) for words in shell.commands(line)]
    assert ours == bash


@pytest.mark.parametrize(("text", "lines"), [
    # in single quotes a backslash is a character: no continuation (2.2.2). A quote open at a
    # newline ends the logical line, as before: each line split at white space by commands
    ("p 'a\\\nb'\np c\n", [(1, "p 'a\\"), (2, "b'"), (3, "p c")]),
    ("cat <<EOF\nit's\nEOF\nnvidia-imex\n", [(1, "cat <<EOF"), (2, "it's"), (3, "EOF"),
                                              (4, "nvidia-imex")]),
    ('p "a\nb"\n', [(1, 'p "a'), (2, 'b"')]),
    # the newline alone ends a line (a carriage return stays, white space to commands); a
    # form feed is no line end; a backslash at the end of the text is kept; a continuation
    # at the end gives its line
    ("p a\r\n\fp b\n", [(1, "p a\r"), (2, "\fp b")]),
    ("p a\\", [(1, "p a\\")]),
    ("p a \\\n", [(1, "p a ")]),
    ("\\\n", [(1, "")]),
    ("a\n\nb", [(1, "a"), (2, ""), (3, "b")]),
    ("", []),
])
def test_a_quote_open_at_a_newline_ends_the_logical_line(
        text: str, lines: list[tuple[int, str]]) -> None:
    assert shell.logical_lines(text) == lines


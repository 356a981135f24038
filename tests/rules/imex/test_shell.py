"""The shell-word splitter of the Slurm script reader (rules/imex/shell.py) against the POSIX
rules it follows (quotes, escapes, operators, comments), with :mod:`shlex` in punctuation mode,
the splitter it replaced, as the oracle on ordinary prolog lines."""

from __future__ import annotations

import shlex

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
    text = "a \\\n  b \\\n  c\nd\ne \\\n"
    assert shell.logical_lines(text) == [(1, "a    b    c"), (4, "d"), (5, "e  ")]


def test_redirections_are_taken_out_with_their_operator() -> None:
    words = ["scontrol", "show", "hostnames", "2", ">", "/dev/null", ">>", "/etc/x.cfg"]
    assert shell.split_redirects(words) == (["scontrol", "show", "hostnames"],
                                            [">/dev/null", ">>/etc/x.cfg"])


@pytest.mark.parametrize(("text", "lines"), [
    ("a \\\\\nb\n", [(1, "a \\\\"), (2, "b")]),           # an escaped backslash: no continuation
    ("a \\\\\\\nb\n", [(1, "a \\\\ b")]),                # escaped backslash, then a continuation
    ("a \\\\\\\\\nb\n", [(1, "a \\\\\\\\"), (2, "b")]),  # two escaped backslashes
])
def test_an_odd_number_of_trailing_backslashes_continues_the_line(
        text: str, lines: list[tuple[int, str]]) -> None:
    assert shell.logical_lines(text) == lines

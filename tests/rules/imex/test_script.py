"""The Slurm script reader (rules/imex/script.py) on hostile prologs: its time is linear in the
script (a 4 MB line of one word, one quoted string, IMEX commands, wrapper prefixes, read
within a generous CPU bound where the shlex-based reader took minutes to hours), the work of
its expansions is bounded by a budget and said when reached, and the split keeps the shell's
words (``$#`` is no comment; the byte that marks held substitutions is harmless in a
script). Speed itself is bench/bench_readers.py's."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from nvfabric.rules.imex import script as script_rules


class _CpuBound(Exception):
    pass


@pytest.fixture
def cpu_bound() -> Iterator[None]:
    """A generous CPU-time bound for the test (as tests/fuzz does: CPU, not wall time, so a
    loaded machine does not trip it): 60 s, where the quadratic reader took minutes."""
    def expire(_sig: int, _frame: FrameType | None) -> None:
        raise _CpuBound("the script reader used more than 60 s of CPU")

    old = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, 60.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


MB4 = 4 << 20


@pytest.mark.parametrize("body", [
    "a" * MB4,                                          # one word (shlex: quadratic)
    '"' + "a" * MB4 + '"',                              # one quoted string
    "systemctl restart nvidia-imex; " * (MB4 // 31),    # many IMEX commands on one line
    "exec " * (MB4 // 5) + "systemctl start nvidia-imex",  # a million prefixes
    "systemctl \\\n" * (MB4 // 12) + "restart nvidia-imex",  # 350,000 continuations
    "\\#'a'\"b\" " * (MB4 // 9),                         # escapes and quotes
], ids=["word", "quoted", "imex-commands", "prefixes", "continuations", "escapes-quotes"])
def test_a_4_mb_prolog_line_is_read_within_a_generous_cpu_bound(body: str,
                                                                cpu_bound: None) -> None:
    found = script_rules.analyse("#!/bin/sh\n" + body + "\n", "/p", "/p", {})
    assert len(found.actions.lines) <= script_rules.MAX_EVIDENCE + 1
    if "nvidia-imex" in body:
        assert found.actions.drives_unit


def test_expansions_past_the_budget_are_unread_not_unbounded(cpu_bound: None) -> None:
    # each line doubles A: 2**60 characters unbounded; the budget stops it and says so
    text = "#!/bin/sh\nA=xx\n" + "A=$A$A\n" * 60 + "systemctl restart nvidia-imex\n"
    found = script_rules.analyse(text, "/p", "/p", {})
    (unread,) = found.unread
    assert unread.startswith("/p:") and "exceed the reading budget" in unread


def test_a_parameter_count_is_no_comment() -> None:
    # `$#` is a word to the shell; a tokenizer that took its '#' for a comment lost the command
    text = '#!/bin/sh\n[ $# -ge 0 ] && systemctl restart nvidia-imex\necho a#b\n'
    assert script_rules.analyse(text, "/p", "/p", {}).actions.unit_verbs == ("restart",)


def test_the_marker_byte_of_held_substitutions_in_a_script_is_harmless() -> None:
    text = "#!/bin/sh\nX=\x019\x01 ${A}\nsystemctl stop nvidia-imex\n"
    assert script_rules.analyse(text, "/p", "/p", {}).actions.unit_verbs == ("stop",)


@pytest.mark.parametrize(("text", "evidence"), [
    # a word split by a backslash-newline is one word to the shell (POSIX 2.2.1)
    ("#!/bin/sh\nexec /usr/bin/nvidia-im\\\nex -c /etc/nvidia-imex/config.cfg &\n",
     "/p:2: /usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg"),
    # a comment's backslash is no continuation: the next line is a command (POSIX 2.3)
    ("#!/bin/sh\n# start the daemon, see \\\nnvidia-imex -c /etc/nvidia-imex/config.cfg\n",
     "/p:3: nvidia-imex -c /etc/nvidia-imex/config.cfg"),
    ("#!/bin/sh\nlogger -t prolog imex # \\\nnvidia-imex -c /etc/nvidia-imex/config.cfg\n",
     "/p:3: nvidia-imex -c /etc/nvidia-imex/config.cfg"),
])
def test_a_prolog_runs_nvidia_imex_as_the_shell_reads_its_continuations(
        text: str, evidence: str) -> None:
    a = script_rules.analyse(text, "/p", "/p", {}).actions
    assert (a.daemon, a.lines) == (True, (evidence,))

"""What a script that Slurm runs (a prolog, an epilog, a dispatcher they hand off to) does to
IMEX, read the way a shell would run it, as far as ownership needs and no further. Pure: the
text comes from :mod:`nvfabric.facts.slurm`, which follows the hand-offs this module names.

Read: its variables (``NAME=value``, ``${NAME:-default}``, ``${NAME%/*}``, ``$(readlink -f
$0)``, ``$(dirname ...)``), its simple commands (split first, then each expanded in order, so
that a value set earlier on the line counts), and what each command does:

- drives the host unit: ``systemctl start|restart|stop|is-enabled|... nvidia-imex[.service]``
  (or ``service nvidia-imex ...``): AWS ParallelCluster's 91_nvidia_imex_prolog.sh
  (tests/data/cases/I01);
- runs the daemon itself: ``nvidia-imex -c ...`` as a command, or ``nvfabric run``;
- writes the node list: a redirection, ``tee``, ``cp`` ... onto a ``nodes_config`` file, or
  ``nvfabric imex config``;
- creates channels: ``mknod`` under ``nvidia-caps-imex-channels``, ``nvfabric imex channel
  --create``;
- hands off: runs or sources another file (an absolute path, a glob, a ``for`` loop variable
  that is executed, ``run-parts DIR``, ``bash FILE``): slurm-gcp's ``slurm_mux`` runs
  ``${BASE}/${SLURM_SCRIPT_CONTEXT}.d/*.${SLURM_SCRIPT_CONTEXT}`` (Cluster Toolkit,
  community/modules/scheduler/schedmd-slurm-gcp-v6-controller, slurm_mux). A variable the
  script does not set reads as ``*`` in a path, so the follower globs over it (bounded).

A script in another language (Python, Perl) is read for the systemctl and nvidia-imex words
alone. A mention in a comment or an ``echo`` is no action.

Reading is linear in the script: each line is split into words in one pass
(:mod:`nvfabric.rules.imex.shell`), and the work of the expansions is counted against a budget
proportional to the script's size (:data:`WORK_PER_BYTE`). A bound reached (that budget,
:data:`MAX_LOOP_WORDS`, :data:`MAX_FOLLOW`) is said in :attr:`Analysis.unread`: what was not
read may run IMEX.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nvfabric.rules.imex.shell import DIGITS, commands, logical_lines, split_redirects

#: systemctl/service verbs that mean a script drives the host unit (systemctl(1)).
UNIT_VERBS = frozenset({
    "start", "restart", "stop", "reload", "try-restart", "reload-or-restart",
    "try-reload-or-restart", "is-enabled", "is-active", "kill", "enable", "disable",
})
IMEX_UNIT_NAMES = frozenset({"nvidia-imex", "nvidia-imex.service"})
#: Words before the command of a simple command that do not change which program it runs.
_PREFIXES = frozenset({"exec", "command", "nohup", "setsid", "builtin", "time", "then", "do",
                       "else", "elif", "if", "while", "until", "!", "{", "}", "-", "sudo"})
_SHELLS = frozenset({"sh", "bash", "dash", "ksh", "zsh"})
#: Options of the wrappers (env, nice, timeout, ...) that take a value (``nice -n 5``).
_TAKES_VALUE = frozenset({"-n", "-s", "-k", "-u", "-c", "-p", "--signal", "--kill-after"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_REF = re.compile(
    r"\$\{([^{}]*)\}"                 # ${...}
    r"|\$\(((?:[^()]|\([^()]*\))*)\)"  # $(...), one level of parentheses inside
    r"|`([^`]*)`"                      # `...`
    r"|\$([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])"
)
_HELD = re.compile("\x01([0-9]+)\x01")
#: What an unset variable reads as in a path: a glob over whatever is there.
UNKNOWN = "*"
#: The most words of one ``for`` list, and of one script's follow list (every absolute
#: command is one: Slurm runs prologs without a PATH, so sites write /usr/bin/logger).
MAX_LOOP_WORDS = 64
MAX_FOLLOW = 1024
#: The work of a script's expansions (characters made, compared) allowed per byte of the
#: script, plus a base for short scripts; past it the rest of the script is not read.
WORK_PER_BYTE = 16
WORK_BASE = 1 << 20
#: Evidence lines kept per script (the rest counted).
MAX_EVIDENCE = 16


# -- what a script does ----------------------------------------------------------------------


@dataclass(frozen=True)
class Actions:
    """What a script does to IMEX. ``unit_verbs``: systemctl/service verbs it applies to
    nvidia-imex.service; ``daemon``: it runs nvidia-imex itself (or ``nvfabric run``);
    ``node_list``: it writes the node list; ``channels``: it creates channel nodes;
    ``lines``: the evidence, ``path:line: command``."""

    unit_verbs: tuple[str, ...] = ()
    daemon: bool = False
    node_list: bool = False
    channels: bool = False
    lines: tuple[str, ...] = ()

    @property
    def imex(self) -> bool:
        """The script manages IMEX in one of the four ways."""
        return bool(self.unit_verbs) or self.daemon or self.node_list or self.channels

    @property
    def drives_unit(self) -> bool:
        return bool(self.unit_verbs)

    def summary(self) -> str:
        """One phrase: ``drives nvidia-imex.service (systemctl is-enabled/stop/start)``, ..."""
        parts = []
        if self.unit_verbs:
            parts.append(f"drives nvidia-imex.service (systemctl {'/'.join(self.unit_verbs)})")
        if self.daemon:
            parts.append("runs nvidia-imex itself")
        if self.node_list:
            parts.append("writes the IMEX node list")
        if self.channels:
            parts.append("creates IMEX channels")
        return ", ".join(parts) or "does nothing to IMEX"


@dataclass(frozen=True)
class Analysis:
    """One script read: its ``actions``; ``follow``: host path patterns (globs) it runs or
    sources, in order; ``exported``: its variables at the end (a script it hands off to
    inherits them); ``nvfabric_prolog``: it is nvfabric's own Slurm prolog; ``unread``: what
    a bound kept from being read (``path:line: ...`` lines; empty when read whole)."""

    actions: Actions
    follow: tuple[str, ...] = ()
    exported: Mapping[str, str] = field(default_factory=dict)
    nvfabric_prolog: bool = False
    unread: tuple[str, ...] = ()


def is_shell(head: bytes) -> bool:
    """A file whose first bytes say it is a shell script (``#!`` naming a shell), or text
    with no ``#!`` at all (a file that is sourced); False for ELF and other interpreters."""
    if head.startswith(b"\x7fELF"):
        return False
    if not head.startswith(b"#!"):
        return b"\0" not in head[:4096]
    first = head.split(b"\n", 1)[0][2:].decode("utf-8", "replace").split()
    if not first:
        return True
    prog = posixpath.basename(first[0])
    if prog == "env" and len(first) > 1:
        prog = posixpath.basename(first[-1] if not first[1].startswith("-") else first[-1])
    return prog in _SHELLS


def is_script(head: bytes) -> bool:
    """Text a prolog could be (``#!`` first, any interpreter), not a binary."""
    return head.startswith(b"#!") or (not head.startswith(b"\x7fELF") and b"\0" not in head)


def analyse(text: str, invoked: str, real: str, env: Mapping[str, str],
            shell: bool = True) -> Analysis:
    """What the script ``text`` does (module docstring). ``invoked``: the host path it is run
    by (``$0``); ``real``: where that path leads (``readlink -f $0``); ``env``: the variables
    it starts with (Slurm's ``SLURM_SCRIPT_CONTEXT``, what the script that ran it exported).
    ``shell``: False for another interpreter (Python, Perl), read for the systemctl and
    nvidia-imex words alone."""
    if not shell:
        return Analysis(_other_language(text, invoked))
    state = _State(dict(env), invoked, real, WORK_BASE + WORK_PER_BYTE * len(text))
    unread: list[str] = []
    for number, line in logical_lines(text):
        try:
            state.line(number, line)
        except _OverBudget:
            unread.append(f"{invoked}:{number}: its expansions exceed the reading budget "
                          f"({WORK_PER_BYTE} per byte): the rest of the script not read")
            break
    follow = tuple(dict.fromkeys(state.follow))
    if len(follow) > MAX_FOLLOW:
        unread.append(f"{invoked}: hands off to more than {MAX_FOLLOW} paths: "
                      f"{len(follow) - MAX_FOLLOW} not followed")
    unread += state.cut_loops
    return Analysis(state.done(), follow[:MAX_FOLLOW], dict(state.vars),
                    "NVFABRIC_IMEX_START" in text, tuple(unread))


class _OverBudget(Exception):
    """The expansions of one script did more work than its budget allows: a private signal,
    caught in :func:`analyse` (model/errors.py: not an error of nvfabric)."""


class _State:
    """The reading of one script: its variables so far, what it did, what it runs."""

    def __init__(self, env: dict[str, str], invoked: str, real: str, budget: int) -> None:
        self.vars = env
        self.invoked = invoked
        self.real = real
        self.budget = budget
        self.verbs: dict[str, None] = {}
        self.kinds: set[str] = set()
        self.lines: list[str] = []
        self.more = 0
        self.follow: list[str] = []
        self.loops: dict[str, tuple[str, ...]] = {}
        self.cut: dict[str, int] = {}
        self.cut_loops: list[str] = []

    def spend(self, work: int) -> None:
        self.budget -= work
        if self.budget < 0:
            raise _OverBudget()

    def done(self) -> Actions:
        """What the script did, its evidence lines at most :data:`MAX_EVIDENCE`."""
        lines = self.lines + ([f"{self.invoked}: {self.more} more IMEX commands"]
                              if self.more else [])
        return Actions(tuple(self.verbs), "daemon" in self.kinds, "node_list" in self.kinds,
                       "channels" in self.kinds, tuple(lines))

    # -- expansion

    def expand(self, text: str, depth: int = 0) -> str:
        if depth > 4:
            return text

        def one(m: re.Match[str]) -> str:
            if m.group(1) is not None:
                out = self._brace(m.group(1), depth)
            elif m.group(2) is not None or m.group(3) is not None:
                out = self._substitution(m.group(2) if m.group(2) is not None
                                         else m.group(3), depth)
            else:
                out = self._var(m.group(4))
            self.spend(len(out))
            return out

        return _REF.sub(one, text)

    def _var(self, name: str) -> str:
        if name == "0":
            return self.invoked
        if name in ("@", "*", "#", "?", "$", "!", "-") or DIGITS.fullmatch(name):
            return ""
        return self.vars.get(name, UNKNOWN)

    def _brace(self, expr: str, depth: int) -> str:
        found = re.match(r"(#?)([A-Za-z_][A-Za-z0-9_]*|0)(.*)", expr, re.S)
        if not found:
            return UNKNOWN
        length, name, op = found.groups()
        known = name == "0" or name in self.vars
        value = self._var(name)
        if length:
            return str(len(value)) if known else UNKNOWN
        if not op:
            return value
        for sep in (":-", ":=", "-", "="):
            if op.startswith(sep):
                if known and (value or not sep.startswith(":")):
                    return value
                default = self.expand(op[len(sep):], depth + 1)
                if "=" in sep:
                    self.vars[name] = default
                return default
        if op.startswith((":+", "+")):
            return self.expand(op[2 if op.startswith(":") else 1:], depth + 1) if known else ""
        if not known:
            return UNKNOWN
        for sep, longest, suffix in (("%%", True, True), ("%", False, True),
                                     ("##", True, False), ("#", False, False)):
            if op.startswith(sep):
                self.spend(len(value) * (len(value) + 1))  # a match tried at each position
                return _strip(value, self.expand(op[len(sep):], depth + 1), longest, suffix)
        return value

    def _substitution(self, command: str, depth: int) -> str:
        words = self.expand(command, depth + 1).replace('"', " ").replace("'", " ").split()
        if not words:
            return ""
        prog = posixpath.basename(words[0])
        args = [w for w in words[1:] if not w.startswith("-")]
        if prog in ("readlink", "realpath") and args:
            return self.real if args[0] == self.invoked else args[0]
        if prog == "dirname" and args:
            return posixpath.dirname(args[0])
        if prog == "basename" and args:
            return posixpath.basename(args[0])
        if prog == "pwd":
            return posixpath.dirname(self.real)
        return UNKNOWN

    # -- commands

    def line(self, number: int, raw: str) -> None:
        """Split the line into simple commands first, then expand each command's words in
        order, so that ``S=x; cmd "$S"`` and ``for f in ...; do "$f"; done`` see the value set
        before them. Substitutions (``${...}``, ``$(...)``, backquotes) are kept whole
        through the split."""
        held: list[str] = []

        def hold(m: re.Match[str]) -> str:
            if m.group(4) is not None:
                return m.group(0)
            held.append(m.group(0))
            return f"\x01{len(held) - 1}\x01"

        # the marker's byte is no shell text: dropped, so that no word of the script reads as one
        for words in commands(_REF.sub(hold, raw.replace("\x01", ""))):
            self.command(number, [self.expand(_HELD.sub(lambda m: held[int(m.group(1))], w))
                                  for w in words])

    def command(self, number: int, words: list[str]) -> None:
        words, redirects = split_redirects(words)
        if any("nodes_config" in t for t in redirects if not t.startswith("<")):
            self._did(number, words or redirects, node_list=True)
        words = self._strip_prefixes(words)
        if not words:
            return
        head = words[0]
        if head == "for" and len(words) >= 3:
            self._loop(words)
            return
        if head in ("[", "[[", "test", "case", "esac", "fi", "done", "echo", "printf",
                    "function", "return", "exit", "local", "shift", "set", "trap",
                    "unset", "wait", "read", "cd"):
            return
        prog = posixpath.basename(head)
        args = words[1:]
        if prog == "systemctl":
            verbs = [w for w in args if w in UNIT_VERBS]
            if verbs and any(w in IMEX_UNIT_NAMES for w in args):
                self._did(number, words, verbs=tuple(verbs))
        elif prog == "service" and args and args[0] in IMEX_UNIT_NAMES and len(args) > 1:
            self._did(number, words, verbs=(args[1],))
        elif prog == "nvidia-imex":
            self._did(number, words, daemon=True)
        elif prog == "nvfabric":
            self._nvfabric(number, words)
        elif prog == "mknod" and any("nvidia-caps-imex-channels" in w for w in args):
            self._did(number, words, channels=True)
        elif prog in ("tee", "cp", "mv", "install", "ln", "scp", "rsync") and any(
                "nodes_config" in w for w in args[-1:] + [a for a in args if prog == "tee"]):
            self._did(number, words, node_list=True)
        elif prog in ("source", "."):
            self._follow(args[:1])
        elif prog in _SHELLS:
            self._follow([a for a in args if not a.startswith("-")][:1])
        elif prog == "run-parts":
            dirs = [a for a in args if not a.startswith("-")]
            self._follow([posixpath.join(dirs[-1], "*")] if dirs else [])
        elif head in self.loops:  # the loop's variable run as a command
            self._follow(list(self.loops[head]))
            if self.cut.pop(head, 0) > 0:
                self.cut_loops.append(f"{self.invoked}:{number}: runs each word of a for loop "
                                      f"of more than {MAX_LOOP_WORDS}: the rest not followed")
        elif head.startswith("/"):
            self._follow([head])

    def _strip_prefixes(self, words: list[str]) -> list[str]:
        """Drop assignments (recorded when they stand alone), ``export``/``local``/...,
        wrappers (``exec``, ``timeout 30``, ``env A=B``, ``nice -n 5``) before the command.
        One pass over the words (an index, no slices: a line of a million prefixes is read in
        linear time)."""
        i, n = 0, len(words)
        while i < n:
            head = words[i]
            if _ASSIGN.fullmatch(head):
                j = i
                while j < n and _ASSIGN.fullmatch(words[j]):
                    j += 1
                if j == n:  # assignments alone: they set the shell's variables
                    for w in words[i:]:
                        m = _ASSIGN.fullmatch(w)
                        assert m is not None
                        self.vars[m.group(1)] = m.group(2)
                    return []
                i = j  # assignments before a command: its environment only
            elif head in ("export", "readonly", "local", "declare", "typeset"):
                for w in words[i + 1:]:
                    m = _ASSIGN.fullmatch(w)
                    if m:
                        self.vars[m.group(1)] = m.group(2)
                return []
            elif head in _PREFIXES:
                i += 1
            elif head in ("env", "nice", "ionice", "stdbuf", "chrt", "taskset", "timeout"):
                i += 1
                while i < n and (words[i].startswith("-") or _ASSIGN.fullmatch(words[i])):
                    i += 2 if words[i] in _TAKES_VALUE else 1
                if head in ("timeout", "chrt", "taskset") and i < n:
                    i += 1  # the duration / the priority / the mask
            else:
                break
        return words[i:]

    def _loop(self, words: list[str]) -> None:
        name = words[1]
        if not _NAME.fullmatch(name) or words[2] != "in":
            return
        items = tuple(w for w in words[3:] if w not in ("do", ";"))
        marker = f"@loop{len(self.loops)}:{name}@"
        self.loops[marker] = items[:MAX_LOOP_WORDS]
        self.cut[marker] = len(items) - MAX_LOOP_WORDS
        self.vars[name] = marker

    def _nvfabric(self, number: int, words: list[str]) -> None:
        args = words[1:]
        if "run" in args[:1] or (args and args[0] == "run"):
            self._did(number, words, daemon=True)
        elif args[:2] == ["imex", "config"]:
            self._did(number, words, node_list=True)
        elif args[:2] == ["imex", "channel"] and "--create" in args:
            self._did(number, words, channels=True)

    def _did(self, number: int, words: list[str], verbs: tuple[str, ...] = (),
             daemon: bool = False, node_list: bool = False, channels: bool = False) -> None:
        self.verbs.update(dict.fromkeys(verbs))
        self.kinds.update(k for k, on in (("daemon", daemon), ("node_list", node_list),
                                          ("channels", channels)) if on)
        if len(self.lines) >= MAX_EVIDENCE:
            self.more += 1
            return
        shown = " ".join(words[:64])
        self.lines.append(f"{self.invoked}:{number}: {shown[:160]}")

    def _follow(self, paths: list[str]) -> None:
        for path in paths:
            if path.startswith("/") and "@loop" not in path:
                self.follow.append(path)


def _strip(value: str, pattern: str, longest: bool, suffix: bool) -> str:
    """``${v%pat}`` / ``${v%%pat}`` (suffix) and ``${v#pat}`` / ``${v##pat}`` (prefix) with glob
    patterns, shortest or longest match, as the shell does."""
    ends = range(len(value) + 1)
    if suffix:
        for i in (ends if longest else reversed(ends)):
            if fnmatch.fnmatchcase(value[i:], pattern):
                return value[:i]
    else:
        for i in (reversed(ends) if longest else ends):
            if fnmatch.fnmatchcase(value[:i], pattern):
                return value[i:]
    return value


def _other_language(text: str, where: str) -> Actions:
    """A prolog in Python, Perl, ...: ``systemctl <verb> nvidia-imex`` and a bare
    ``/usr/bin/nvidia-imex`` word on one line, read without its language."""
    verbs: dict[str, None] = {}
    daemon = False
    lines: list[str] = []
    more = 0
    for number, line in enumerate(text.splitlines(), 1):
        words = re.findall(r"[A-Za-z0-9_./-]+", line)
        found = False
        if "systemctl" in words and any(w in IMEX_UNIT_NAMES for w in words):
            said = [w for w in words if w in UNIT_VERBS]
            verbs.update(dict.fromkeys(said))
            found = bool(said)
        elif any(w.endswith("/nvidia-imex") for w in words):
            daemon = found = True
        if found and len(lines) < MAX_EVIDENCE:
            lines.append(f"{where}:{number}: {line.strip()[:160]}")
        elif found:
            more += 1
    if more:
        lines.append(f"{where}: {more} more IMEX commands")
    return Actions(tuple(verbs), daemon, lines=tuple(lines))

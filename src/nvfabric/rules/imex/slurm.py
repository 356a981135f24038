"""Slurm as a site installs it, read for IMEX ownership: slurm.conf, the prolog and epilog
scripts it runs and what they do (:mod:`nvfabric.rules.imex.script`), as one value
(:class:`SlurmFacts`). Pure: the texts come from :mod:`nvfabric.facts.slurm`, which finds the
files and follows the hand-offs.

slurm.conf (slurm.conf(5)): ``Key=Value`` lines, keys case-insensitive, ``#`` starts a
comment, ``Include FILE`` pulls in another file (relative to slurm.conf's directory, globs
allowed). ``Prolog``/``Epilog``: programs slurmd runs on the node, comma-separated, each a path
or a glob ("/etc/slurm/prolog.d/*"); a relative name is next to slurm.conf (the form a
configless cluster ships, "Configless Slurm", Limitations). ``SwitchType=switch/nvidia_imex``:
Slurm's own IMEX channel plugin (Slurm 24.05 and later; SchedMD
src/plugins/switch/nvidia_imex): slurmctld gives each job (from 25.11 optionally each segment)
a channel and slurmstepd creates that channel's device in the job's own mount namespace; it
writes no node list, starts no IMEX daemon and checks no health.

nvfabric's own prolog (packaging/slurm/nvfabric-imex-prolog, told by its setting
``NVFABRIC_IMEX_START``) does what its settings say: :func:`nvfabric_prolog_actions`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from nvfabric.rules.imex.script import Actions
from nvfabric.rules.imex.shell import trailing_backslashes
from nvfabric.rules.imex.tables import SLURM_SWITCH_IMEX

_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
#: The part of a slurm.conf line before its comment: a ``#`` after an even number of
#: backslashes starts one (parse_config.c ``_strip_comments``). Linear: each alternative
#: consumes at least one character.
_UNCOMMENTED = re.compile(r"(?:[^#\\]|\\.?)*", re.S)
#: A backslash and the character it escapes (parse_config.c ``_strip_escapes``).
_ESCAPED = re.compile(r"\\(.?)", re.S)
#: What C's isspace() takes for blank after a continuation's backslash.
_BLANKS = " \t\r\n\v\f"

# -- slurm.conf -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfLine:
    """One ``Key=Value`` of slurm.conf: ``key`` as written, ``value`` stripped, 1-based
    ``line`` of the file ``path`` (host path: slurm.conf or a file it includes)."""

    key: str
    value: str
    line: int
    path: str = ""

    def where(self) -> str:
        """``path:line: Key=Value``, the evidence form."""
        return f"{self.path}:{self.line}: {self.key}={self.value}"


def conf_lines(text: str) -> list[tuple[int, str]]:
    """The logical lines of a Slurm config file as Slurm's own parser reads them
    (src/common/parse_config.c, ``_get_next_line``), each with its first line's number. Per
    physical line: a ``#`` after an even number of backslashes starts a comment (``\\#`` is a
    ``#``); then a line whose last characters, trailing blanks aside, are an odd number of
    backslashes continues on the next: the last backslash and the blanks after it are dropped
    and the next line follows with no separator; an even number (``\\\\``) is escaped
    backslashes and ends the line. Then every backslash escapes the character after it
    (``\\\\`` is one backslash, a lone one at the end goes). A continuation on the last line
    ends with the file."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        uncommented = _UNCOMMENTED.match(raw)  # matches every line, the empty one too
        line = uncommented.group(0) if uncommented else raw
        body = line.rstrip(_BLANKS)
        if trailing_backslashes(body) % 2:
            pending.append(body[:-1])
            continue
        out.append((start, _ESCAPED.sub(r"\1", "".join(pending) + line)))
        pending = []
    if pending:
        out.append((start, _ESCAPED.sub(r"\1", "".join(pending))))
    return out


def parse_conf(text: str, path: str = "") -> tuple[tuple[ConfLine, ...], tuple[str, ...]]:
    """(the ``Key=Value`` lines, the ``Include`` patterns) of slurm.conf text read from
    ``path``. A line with several pairs (``NodeName=a CPUs=4``) yields its first key with the
    rest as value, which is all the keys read here need (they stand alone on their line)."""
    items: list[ConfLine] = []
    includes: list[str] = []
    for number, joined in conf_lines(text):
        line = joined.strip()
        if not line:
            continue
        head, _, rest = line.partition(" ")
        if head.lower() == "include" and rest.strip():
            includes.append(rest.strip())
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key and "\t" not in key:
            items.append(ConfLine(key, value.strip(), number, path))
    return tuple(items), tuple(includes)


def conf_value(items: tuple[ConfLine, ...], key: str) -> ConfLine | None:
    """The last ``key`` line (Slurm takes the last setting of a key), case-insensitive."""
    found = None
    for item in items:
        if item.key.lower() == key.lower():
            found = item
    return found


def conf_values(items: tuple[ConfLine, ...], key: str) -> tuple[ConfLine, ...]:
    """Every ``key`` line, case-insensitive (Prolog and Epilog may be given more than once)."""
    return tuple(i for i in items if i.key.lower() == key.lower())


def switch_is_imex(value: str) -> bool:
    """``SwitchType`` names Slurm's IMEX channel plugin."""
    return value.strip().strip('"').lower() == SLURM_SWITCH_IMEX


def script_patterns(value: str, conf_dir: str) -> tuple[str, ...]:
    """Host path patterns of a Prolog/Epilog value: comma-separated, quotes dropped, a relative
    name joined to ``conf_dir`` (where slurm.conf lives)."""
    out = []
    for item in value.split(","):
        item = item.strip().strip('"').strip("'")
        if not item:
            continue
        out.append(item if item.startswith("/") else posixpath.join(conf_dir, item))
    return tuple(out)


def nvfabric_prolog_actions(settings: Mapping[str, str], where: str,
                            origins: Mapping[str, str] | None = None) -> Actions:
    """What nvfabric's own Slurm prolog does under ``settings`` (its KEY=VALUE settings, the
    environment first; packaging/slurm/nvfabric-imex-prolog): ``NVFABRIC_IMEX_START``
    ``nvfabric`` (default) starts ``nvfabric run`` (the daemon run by the prolog), ``unit``
    restarts nvidia-imex.service, ``none`` starts nothing; both write the job's node list;
    ``NVFABRIC_IMEX_CHANNEL`` a number creates that channel, ``job`` none (the
    switch/nvidia_imex plugin makes the job's own), ``auto`` (default) channel 0 unless that
    plugin is configured (which then owns the channels either way). ``origins``: where each
    setting was set (``/etc/default/nvfabric-slurm:3``, ``set by /etc/slurm/prolog.sh``), named
    in the evidence line beside it; a setting not set is ``(the default)``."""
    mode = settings.get("NVFABRIC_IMEX_START") or "nvfabric"
    channel = settings.get("NVFABRIC_IMEX_CHANNEL") or "auto"

    def said(key: str, value: str) -> str:
        origin = (origins or {}).get(key) if settings.get(key) else None
        return f"{key}={value} ({origin or 'the default'})"

    return Actions(
        unit_verbs=("restart", "stop") if mode == "unit" else (),
        daemon=mode == "nvfabric",
        node_list=mode in ("nvfabric", "unit"),
        channels=channel != "job",
        lines=(f"{where}: nvfabric's Slurm prolog, {said('NVFABRIC_IMEX_START', mode)}, "
               f"{said('NVFABRIC_IMEX_CHANNEL', channel)}",),
    )


def parse_settings(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of a settings file read as data (``#`` comments), as the nvfabric
    prolog reads /etc/default/nvfabric-slurm."""
    return {key: value for key, (value, _) in settings_at(text).items()}


def settings_at(text: str) -> dict[str, tuple[str, int]]:
    """:func:`parse_settings` with the 1-based line each setting was last set at."""
    out: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = _ASSIGN.fullmatch(line)
        if found:
            out[found.group(1)] = (found.group(2).strip().strip('"').strip("'"), number)
    return out


# -- the node's Slurm, as read ------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """A script Slurm runs on the node that manages IMEX. ``key``: ``Prolog`` or ``Epilog``;
    ``chain``: how slurmd gets there, from the slurm.conf line through each hand-off (a link
    shown ``path -> target``); ``nvfabric``: nvfabric's own prolog."""

    key: str
    chain: tuple[str, ...]
    actions: Actions
    nvfabric: bool = False

    def line(self) -> str:
        return f"{' => '.join(self.chain)}: {self.actions.summary()}"


@dataclass(frozen=True)
class SlurmFacts:
    """Slurm on the node. ``conf``: the slurm.conf read (host path), None when none was
    found; ``found_by``: how (``SLURM_CONF of slurmd (pid 812)``, ``compiled-in default of
    ...``, ``configless cache``); ``switch``: the ``SwitchType=switch/nvidia_imex`` line
    (``path:line: ...``) when set; ``scripts``: the prolog/epilog scripts that manage IMEX;
    ``notes``: what slurmd cannot run (a Prolog that names no file, a directory, a loop of
    links: every job's prolog fails there); ``unread``: what slurmd would run that was not
    read whole (a bound reached, a file nvfabric may not read, a
    binary): each may run IMEX, so with any of them "no IMEX prolog" is not known."""

    conf: str | None = None
    found_by: str = ""
    switch: str | None = None
    scripts: tuple[Script, ...] = ()
    notes: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()

    @property
    def daemon_scripts(self) -> tuple[Script, ...]:
        """The scripts that start, drive or configure the daemon (not only channels)."""
        return tuple(s for s in self.scripts
                     if s.actions.drives_unit or s.actions.daemon or s.actions.node_list)

    @property
    def runner(self) -> str | None:
        """Who runs the daemon for the Slurm prologs: ``unit`` when one drives
        nvidia-imex.service (it must stay enabled), ``prolog`` when one runs the daemon
        itself, None when they only write the node list or make channels."""
        if any(s.actions.drives_unit for s in self.scripts):
            return "unit"
        if any(s.actions.daemon for s in self.scripts):
            return "prolog"
        return None

    @property
    def creates_channels(self) -> bool:
        return any(s.actions.channels for s in self.scripts)

    @property
    def nvfabric_prolog(self) -> bool:
        return any(s.nvfabric for s in self.scripts)

    def lines(self) -> tuple[str, ...]:
        out = []
        if self.conf:
            out.append(f"slurm.conf {self.conf} ({self.found_by})")
        if self.switch:
            out.append(f"{self.switch}: Slurm creates each job's IMEX channel")
        out += [s.line() for s in self.scripts]
        return tuple(out + list(self.notes) + [f"not read: {u}" for u in self.unread])

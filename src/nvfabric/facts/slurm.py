"""Slurm on a node, read under a root for IMEX ownership: which slurm.conf slurmd reads, its
``SwitchType``, and the prolog and epilog scripts it runs, followed through their hand-offs.
What the texts mean is :mod:`nvfabric.rules.imex.slurm` and
:mod:`nvfabric.rules.imex.script`; this module finds and reads them.

slurm.conf is found the way slurmd finds it ("Configless Slurm", Notes: ``--conf-server``,
then ``-f``, then ``SLURM_CONF``, then the compiled-in default):

1. a ``slurmd`` process of the root's process table (:mod:`nvfabric.facts.procs`): its ``-f
   FILE``, its ``--conf-server`` (configless: the cache), its ``SLURM_CONF``;
2. slurmd's systemd unit and drop-ins: ``Environment=SLURM_CONF=...``, the
   ``EnvironmentFile=`` it names (``SLURM_CONF``, ``SLURMD_OPTIONS`` with ``-f`` or
   ``--conf-server``), ``ExecStart=`` with ``-f``;
3. the compiled-in defaults of the common builds
   (:data:`nvfabric.rules.imex.tables.SLURM_CONF_PATHS`);
4. the configless cache (:data:`nvfabric.rules.imex.tables.SLURM_CONFIGLESS_PATHS`).

Every path is joined under the root (:func:`nvfabric.model.hostpath.under`) and its links
resolved as the node (slurmd) resolves them: an absolute target from the root
(``/etc/slurm/slurm.conf -> /etc/slurm-llnl/slurm.conf`` on a DaemonSet's ``/host``; the
readers, globs and file tests of :mod:`nvfabric.facts.fs`); every read is
bounded (:data:`~nvfabric.rules.imex.tables.SLURM_MAX_SCRIPT_BYTES` a file,
:data:`~nvfabric.rules.imex.tables.SLURM_MAX_TOTAL_BYTES` in all, at most
:data:`~nvfabric.rules.imex.tables.SLURM_MAX_SCRIPTS` scripts,
:data:`~nvfabric.rules.imex.tables.SLURM_MAX_GLOB` matches a glob,
:data:`~nvfabric.rules.imex.tables.SLURM_MAX_DEPTH` hand-offs deep). What slurmd would run
but was not read whole (a bound reached, a file nvfabric may not read, a binary) is said in
:attr:`~nvfabric.rules.imex.slurm.SlurmFacts.unread`; a ``Prolog``/``Epilog`` entry slurmd
cannot run (it matches no file, or a directory, a loop of links, a link to nothing) in
:attr:`~nvfabric.rules.imex.slurm.SlurmFacts.notes`: slurmd globs each entry and fails the
job's prolog when the list is empty or a script fails (SchedMD
src/plugins/prep/script/prep_script_slurmd.c; a failed prolog drains the node and requeues
the job: the Prolog and Epilog Guide).
"""

from __future__ import annotations

import errno
import glob
import os
import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from nvfabric.facts import fs, procs
from nvfabric.facts.fs import listdir, read_bytes, read_text
from nvfabric.model import hostpath
from nvfabric.model.hostpath import PathEscape, host_view, under
from nvfabric.rules.imex import script, slurm
from nvfabric.rules.imex.tables import (
    NVFABRIC_SLURM_DEFAULTS,
    SLURM_CONF_PATHS,
    SLURM_CONFIGLESS_PATHS,
    SLURM_MAX_DEPTH,
    SLURM_MAX_GLOB,
    SLURM_MAX_SCRIPT_BYTES,
    SLURM_MAX_SCRIPTS,
    SLURM_MAX_TOTAL_BYTES,
    SLURMD_UNIT,
)

#: systemd unit directories, admin copies first (systemd.unit(5), "Unit File Load Path").
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system",
             "/lib/systemd/system")
#: Include files followed from slurm.conf, in all.
MAX_INCLUDES = 32
#: What Slurm sets for the scripts it runs (SLURM_SCRIPT_CONTEXT, SchedMD
#: doc/html/prolog_epilog.shtml).
CONTEXT = {"Prolog": "prolog_slurmd", "Epilog": "epilog_slurmd"}


def read(root: str) -> slurm.SlurmFacts:
    """Slurm on the node under ``root`` (module docstring); an empty value when no
    slurm.conf is found."""
    conf, found_by = find_conf(root)
    if conf is None:
        return slurm.SlurmFacts()
    return read_conf(root, conf, found_by)


def read_conf(root: str, conf: str, found_by: str) -> slurm.SlurmFacts:
    """Slurm on the node under ``root`` as the slurm.conf at host path ``conf`` (found
    ``found_by``) describes it: its ``SwitchType`` and the scripts it runs, followed. Each
    evidence line names the file and line it was read at (slurm.conf or an ``Include``)."""
    items, unread = _conf_items(root, conf)
    switch = slurm.conf_value(items, "SwitchType")
    switch_line = (switch.where()
                   if switch is not None and slurm.switch_is_imex(switch.value) else None)
    walker = _Walker(root)
    walker.unread += unread
    for key in ("Prolog", "Epilog"):
        for item in slurm.conf_values(items, key):
            patterns = slurm.script_patterns(item.value, posixpath.dirname(conf))
            walker.entry(key, item.where(), patterns, {"SLURM_SCRIPT_CONTEXT": CONTEXT[key]})
    return slurm.SlurmFacts(conf, found_by, switch_line, tuple(walker.found),
                            tuple(walker.notes), tuple(walker.finish()))


def find_conf(root: str) -> tuple[str | None, str]:
    """(host path of the slurm.conf slurmd reads, how it was found); (None, "") when none."""
    for named, how in named_confs(root):
        if named == "configless":
            for path in SLURM_CONFIGLESS_PATHS:
                if _is_file(root, path):
                    return path, f"configless cache ({how})"
            continue
        if _is_file(root, named):
            return named, how
    for path, build in SLURM_CONF_PATHS:
        if _is_file(root, path):
            return path, f"compiled-in default of {build}"
    for path in SLURM_CONFIGLESS_PATHS:
        if _is_file(root, path):
            return path, "configless cache"
    return None, ""


def named_confs(root: str) -> list[tuple[str, str]]:
    """What names slurm.conf explicitly, in slurmd's order of precedence: (path or
    ``configless``, how)."""
    out: list[tuple[str, str]] = []
    for p in procs.by_name(root, ("slurmd",)):
        where = f"slurmd (pid {p.pid})"
        out += _from_options(list(p.argv[1:]), where)
        if p.env.get("SLURM_CONF"):
            out.append((p.env["SLURM_CONF"], f"SLURM_CONF of {where}"))
    for unit, text in _unit_texts(root):
        out += _from_unit(root, unit, text)
    return [(path, how) for path, how in out
            if path == "configless" or hostpath.problem(path) is None]


def _from_options(args: list[str], where: str) -> list[tuple[str, str]]:
    """``-f FILE`` / ``-fFILE`` / ``--conf-server`` in slurmd's arguments."""
    out: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        if arg.startswith("--conf-server"):
            out.insert(0, ("configless", f"--conf-server of {where}"))
        elif arg == "-f" and i + 1 < len(args):
            out.append((args[i + 1], f"-f of {where}"))
        elif arg.startswith("-f") and len(arg) > 2 and not arg.startswith("--"):
            out.append((arg[2:], f"-f of {where}"))
    return out


def _unit_texts(root: str) -> list[tuple[str, str]]:
    """(host path, text) of slurmd.service (the first unit directory that has it) and its
    drop-ins (``slurmd.service.d/*.conf``)."""
    out: list[tuple[str, str]] = []
    for d in UNIT_DIRS:
        path = f"{d}/{SLURMD_UNIT}"
        text = read_text(under(root, path), limit=1 << 16)
        if text is not None:
            out.append((path, text))
            break
    for d in UNIT_DIRS:
        drop = f"{d}/{SLURMD_UNIT}.d"
        for name in sorted(listdir(under(root, drop))):
            if name.endswith(".conf"):
                text = read_text(under(root, f"{drop}/{name}"), limit=1 << 16)
                if text is not None:
                    out.append((f"{drop}/{name}", text))
    return out


def _from_unit(root: str, unit: str, text: str) -> list[tuple[str, str]]:
    """``SLURM_CONF`` and ``-f``/``--conf-server`` a slurmd unit file sets, with its
    ``EnvironmentFile=`` read (a leading ``-`` means optional: systemd.exec(5))."""
    out: list[tuple[str, str]] = []
    for raw in text.splitlines():
        key, sep, value = raw.strip().partition("=")
        if not sep:
            continue
        if key == "Environment":
            for word in _words(value):
                name, eq, val = word.partition("=")
                if eq and name == "SLURM_CONF" and val:
                    out.append((val, f"SLURM_CONF of {unit}"))
        elif key == "EnvironmentFile":
            path = value.strip().lstrip("-")
            env = slurm.parse_settings(read_text(under(root, path), limit=1 << 16) or "") \
                if hostpath.problem(path) is None else {}
            if env.get("SLURM_CONF"):
                out.append((env["SLURM_CONF"], f"SLURM_CONF of {path} ({unit})"))
            out += _from_options(_words(env.get("SLURMD_OPTIONS", "")), f"{path} ({unit})")
        elif key == "ExecStart":
            out += _from_options(_words(value)[1:], unit)
    return out


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _is_file(root: str, path: str) -> bool:
    """A regular file is at host path ``path``, links resolved as slurmd resolves them:
    readable or not (slurmd reads it; what nvfabric cannot read of it is said, never taken
    for no slurm.conf)."""
    try:
        return fs.is_file(under(root, path))
    except PathEscape:
        return False


def _conf_items(root: str, conf: str) -> tuple[tuple[slurm.ConfLine, ...], list[str]]:
    """slurm.conf's lines with its ``Include`` files (relative to its directory, globs), each
    line naming its file, bounded by :data:`MAX_INCLUDES`; and what was not read (an
    ``Include`` nvfabric may not read or past the bound: a ``Prolog`` may be in it)."""
    items: list[slurm.ConfLine] = []
    unread: list[str] = []
    queue = [(conf, "")]
    seen: set[str] = set()
    while queue:
        path, by = queue.pop(0)
        if path in seen:
            continue
        if len(seen) >= MAX_INCLUDES:
            unread.append(f"{by}: Include {path}: more than {MAX_INCLUDES} files included, "
                          f"{len({p for p, _ in queue if p not in seen}) + 1} not read")
            break
        seen.add(path)
        full = under(root, path)
        data = read_bytes(full, SLURM_MAX_SCRIPT_BYTES + 1)
        if data is None:
            unread.append(f"{by + ': Include ' if by else ''}{path}: {_unreadable(full)}")
            continue
        if len(data) > SLURM_MAX_SCRIPT_BYTES:
            data = data[:SLURM_MAX_SCRIPT_BYTES]
            unread.append(f"{path}: larger than {SLURM_MAX_SCRIPT_BYTES >> 20} MiB: only its "
                          "start read")
        lines, includes = slurm.parse_conf(data.decode("utf-8", "replace"), path)
        items += lines
        for pattern in includes:
            full = pattern if pattern.startswith("/") else posixpath.join(
                posixpath.dirname(conf), pattern)
            found = _glob(root, full)
            queue += [(m, path) for m in found.files]
            if found.unsearchable is not None:
                unread.append(f"{path}: Include {full}: nvfabric may not search "
                              f"{found.unsearchable} (Permission denied)")
            if found.more:
                unread.append(f"{path}: Include {full}: {found.more} matches past "
                              f"{SLURM_MAX_GLOB}")
    return tuple(items), unread


def _read(root: str, path: str, limit: int = SLURM_MAX_SCRIPT_BYTES) -> str | None:
    try:
        data = read_bytes(under(root, path), limit)
    except PathEscape:
        return None
    return None if data is None else data.decode("utf-8", "replace")


@dataclass
class _Matches:
    """What a glob matched under the root (host paths, sorted): ``files`` regular files (at
    most :data:`SLURM_MAX_GLOB`; their links resolved under the root, as slurmd does),
    ``unrunnable`` (path, why) of matches no program can be run from (a directory, a loop of
    links, a link to nothing), ``more`` how many matches past the bound were left;
    ``unsearchable`` when nothing matched, the directory on the way nvfabric may not search
    or list (slurmd, as root, may find scripts there)."""

    files: list[str] = field(default_factory=list)
    unrunnable: list[tuple[str, str]] = field(default_factory=list)
    more: int = 0
    unsearchable: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.files or self.unrunnable)


def _glob(root: str, pattern: str) -> _Matches:
    """The matches of ``pattern`` under ``root`` (:class:`_Matches`); none for a pattern that
    is not a plain absolute host path or leaves the root."""
    out = _Matches()
    if hostpath.problem(pattern) is not None:
        return out
    try:
        full = under(root, pattern)
    except PathEscape:
        return out
    found = fs.glob(full)
    out.more = max(0, len(found) - SLURM_MAX_GLOB)
    for match in found[:SLURM_MAX_GLOB]:
        if fs.is_file(match):
            out.files.append(host_view(root, match))
        else:
            out.unrunnable.append((host_view(root, match), _not_a_file(match)))
    if out.empty:
        denied = _unsearchable(full)
        out.unsearchable = None if denied is None else host_view(root, denied)
    return out


def _unsearchable(full: str) -> str | None:
    """The first directory of the plain part of the glob ``full`` (up to its first component
    with ``*?[``) that nvfabric may not search (or list, before a glob component): glob finds
    nothing there, which says nothing of what slurmd finds. None when each is open to it or
    one does not exist."""
    parts = full.strip("/").split("/")
    path = "/"
    for i, part in enumerate(parts[:-1]):
        if glob.has_magic(part):
            break
        path = os.path.join(path, part)
        if not fs.is_dir(path):
            return None
        listed = glob.has_magic(parts[i + 1])
        try:
            real = hostpath.resolve(path)
        except OSError:
            return None
        if not os.access(real, os.X_OK | (os.R_OK if listed else 0)):
            return path
    return None


def _not_a_file(full: str) -> str:
    """Why ``full`` (which exists as a name) is no file a program can be run from, its links
    resolved as slurmd resolves them."""
    try:
        os.stat(hostpath.resolve(full))
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a loop of symbolic links"
        try:
            return (f"a symbolic link to {os.readlink(hostpath.resolve_parent(full))}, which "
                    "does not exist")
        except OSError:
            return f"not readable ({err.strerror})"
    return "a directory" if fs.is_dir(full) else "not a regular file"


def _unreadable(full: str) -> str:
    """Why the regular file at ``full`` could not be read, for the evidence: its open's error
    (``nvfabric may not read it (Permission denied)``), links resolved as the readers do."""
    try:
        os.close(os.open(hostpath.resolve(full), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as err:
        return f"nvfabric may not read it ({err.strerror})"
    return "it could not be read"


def _settings(root: str, path: str | None = None) -> dict[str, tuple[str, str]]:
    """nvfabric's Slurm prolog settings file (``path``, the prolog's
    ``NVFABRIC_SLURM_DEFAULTS``, else /etc/default/nvfabric-slurm), as that prolog reads it:
    each setting's value and where it was set (``path:line``)."""
    where = path if path and hostpath.problem(path) is None else NVFABRIC_SLURM_DEFAULTS
    return {key: (value, f"{where}:{number}") for key, (value, number)
            in slurm.settings_at(_read(root, where, 1 << 16) or "").items()}


class _Walker:
    """Follows the scripts slurmd runs (bounded), keeping those that manage IMEX; ``notes``
    what slurmd cannot run, ``unread`` what was not read whole."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.found: list[slurm.Script] = []
        self.notes: list[str] = []
        self.unread: list[str] = []
        self.read: set[str] = set()
        self.bytes = 0
        self.over: list[str] = []
        self.over_why = ""

    def entry(self, key: str, start: str, patterns: tuple[str, ...],
              env: Mapping[str, str]) -> None:
        """One ``Prolog``/``Epilog`` line (``start``, its evidence form): slurmd globs each
        of its ``patterns`` and runs what they list; an entry that lists no file, or lists one
        that cannot be run, fails the job's prolog (module docstring)."""
        fails = (f"slurmd cannot run it, so every job's {key.lower()} fails (the node is "
                 "drained, the job requeued)")
        for pattern in patterns:
            found = _glob(self.root, pattern)
            if found.empty and found.unsearchable is None:
                self.notes.append(f"{start}: {pattern} matches no file: {fails}")
            self.notes += [f"{start}: {path} is {why}: {fails}"
                           for path, why in found.unrunnable]
            self._read_all(key, found, env, (start,), 0)

    def walk(self, key: str, patterns: tuple[str, ...], env: Mapping[str, str],
             chain: tuple[str, ...], depth: int) -> None:
        if depth > SLURM_MAX_DEPTH:
            self.unread.append(f"{chain[-1]}: hands off deeper than {SLURM_MAX_DEPTH} "
                               "scripts: not followed further")
            return
        for pattern in patterns:
            self._read_all(key, _glob(self.root, pattern), env, chain, depth)

    def _read_all(self, key: str, found: _Matches, env: Mapping[str, str],
                  chain: tuple[str, ...], depth: int) -> None:
        if found.unsearchable is not None:
            self.unread.append(f"{chain[-1]}: nvfabric may not search {found.unsearchable} "
                               "(Permission denied)")
        if found.more:
            self.unread.append(f"{chain[-1]}: {found.more} matches past the first "
                               f"{SLURM_MAX_GLOB} of a glob")
        for path in found.files:
            self.read_script(key, path, env, chain, depth)

    def finish(self) -> list[str]:
        """``unread``, with the scripts left past :data:`SLURM_MAX_SCRIPTS` or
        :data:`SLURM_MAX_TOTAL_BYTES` said once."""
        if self.over:
            return self.unread + [f"{self.over_why}: {len(self.over)} more not read, the "
                                  f"first {self.over[0]}"]
        return self.unread

    def read_script(self, key: str, path: str, env: Mapping[str, str], chain: tuple[str, ...],
                    depth: int) -> None:
        """Read one file slurmd (``depth`` 0) or a script (deeper) runs. A program that is not
        text is read no further: at ``depth`` 0 that is unread (a site's compiled prolog may
        run IMEX), deeper it is a system program (``/usr/bin/logger``; nvidia-imex itself is
        known by its name)."""
        full = under(self.root, path)
        try:
            real = host_view(self.root, hostpath.resolve(full))
        except OSError:  # a loop: the read below says so
            real = path
        if real in self.read:
            return
        if len(self.read) >= SLURM_MAX_SCRIPTS or self.bytes >= SLURM_MAX_TOTAL_BYTES:
            self.over_why = self.over_why or (
                f"{SLURM_MAX_SCRIPTS} files read (the bound)"
                if len(self.read) >= SLURM_MAX_SCRIPTS
                else f"{SLURM_MAX_TOTAL_BYTES >> 20} MiB of scripts read (the bound)")
            self.over.append(path)
            return
        self.read.add(real)
        shown = path if real == path else f"{path} -> {real}"
        where = " => ".join(chain + (shown,))
        head = read_bytes(full, 4096)
        if head is None:
            self.unread.append(f"{where}: {_unreadable(full)}")
            return
        if not script.is_script(head):
            if depth == 0:
                self.unread.append(f"{where}: a binary program: what it does is not read")
            return
        data = read_bytes(full, SLURM_MAX_SCRIPT_BYTES + 1) if len(head) == 4096 else head
        if data is None:
            self.unread.append(f"{where}: {_unreadable(full)}")
            return
        if len(data) > SLURM_MAX_SCRIPT_BYTES:
            data = data[:SLURM_MAX_SCRIPT_BYTES]
            self.unread.append(f"{where}: larger than {SLURM_MAX_SCRIPT_BYTES >> 20} MiB: "
                               "only its start read")
        self.bytes += len(data)
        text = data.decode("utf-8", "replace")
        found = script.analyse(text, path, real, env, shell=script.is_shell(head))
        self.unread += [f"{' => '.join(chain)} => {u}" for u in found.unread]
        actions = found.actions
        if found.nvfabric_prolog:
            # the settings file, then what the script that runs the prolog exported over it
            settings = {**_settings(self.root, env.get("NVFABRIC_SLURM_DEFAULTS")),
                        **{k: (v, f"set by {chain[-1]}") for k, v in env.items()
                           if k.startswith("NVFABRIC_") and v != script.UNKNOWN}}
            actions = slurm.nvfabric_prolog_actions(
                {k: v for k, (v, _) in settings.items()}, shown,
                {k: o for k, (_, o) in settings.items()})
        if actions.imex:
            self.found.append(slurm.Script(key, chain + (shown,), actions,
                                           found.nvfabric_prolog))
        if found.follow and not found.nvfabric_prolog:
            self.walk(key, found.follow, found.exported, chain + (shown,), depth + 1)

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

Every path is joined under the root (:func:`nvfabric.model.hostpath.under`); a glob match or a
link that leads out of the root is not read (noted); every read is bounded
(:data:`~nvfabric.rules.imex.tables.SLURM_MAX_SCRIPT_BYTES` a file, at most
:data:`~nvfabric.rules.imex.tables.SLURM_MAX_SCRIPTS` scripts,
:data:`~nvfabric.rules.imex.tables.SLURM_MAX_DEPTH` hand-offs deep).
"""

from __future__ import annotations

import glob
import os
import posixpath
import shlex
from collections.abc import Mapping

from nvfabric.facts import procs
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
    ``found_by``) describes it: its ``SwitchType`` and the scripts it runs, followed."""
    items, notes = _conf_items(root, conf)
    switch = slurm.conf_value(items, "SwitchType")
    switch_line = (f"{conf}:{switch.line}: {switch.key}={switch.value}"
                   if switch is not None and slurm.switch_is_imex(switch.value) else None)
    walker = _Walker(root)
    for key in ("Prolog", "Epilog"):
        for item in slurm.conf_values(items, key):
            start = f"{conf}:{item.line}: {item.key}={item.value}"
            patterns = slurm.script_patterns(item.value, posixpath.dirname(conf))
            walker.walk(key, patterns, {"SLURM_SCRIPT_CONTEXT": CONTEXT[key]}, (start,), 0)
    return slurm.SlurmFacts(conf, found_by, switch_line, tuple(walker.found),
                            notes + tuple(walker.notes))


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
    try:
        full = under(root, path)
    except PathEscape:
        return False
    return read_bytes(full, 1) is not None


def _conf_items(root: str, conf: str) -> tuple[tuple[slurm.ConfLine, ...], tuple[str, ...]]:
    """slurm.conf's lines with its ``Include`` files (relative to its directory, globs),
    bounded by :data:`MAX_INCLUDES`."""
    items: list[slurm.ConfLine] = []
    notes: list[str] = []
    queue = [conf]
    seen: set[str] = set()
    while queue and len(seen) < MAX_INCLUDES:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        text = _read(root, path)
        if text is None:
            continue
        lines, includes = slurm.parse_conf(text)
        items += lines
        for pattern in includes:
            full = pattern if pattern.startswith("/") else posixpath.join(
                posixpath.dirname(conf), pattern)
            matches, escaped = _glob(root, full)
            queue += matches
            notes += [f"{conf}: Include {m} leads out of the root: not read" for m in escaped]
    return tuple(items), tuple(notes)


def _read(root: str, path: str, limit: int = SLURM_MAX_SCRIPT_BYTES) -> str | None:
    try:
        data = read_bytes(under(root, path), limit)
    except PathEscape:
        return None
    return None if data is None else data.decode("utf-8", "replace")


def _glob(root: str, pattern: str) -> tuple[list[str], list[str]]:
    """(host paths of the regular files ``pattern`` matches under ``root``, sorted and at most
    :data:`SLURM_MAX_GLOB`; the matches that lead out of the root through a link)."""
    if hostpath.problem(pattern) is not None:
        return [], []
    try:
        full = under(root, pattern)
    except PathEscape:
        return [], []
    base = os.path.realpath(root)
    inside: list[str] = []
    outside: list[str] = []
    for match in sorted(glob.glob(full))[:SLURM_MAX_GLOB]:
        real = os.path.realpath(match)
        if base != "/" and not (real == base or real.startswith(base.rstrip("/") + "/")):
            outside.append(host_view(root, match))
        elif os.path.isfile(match):
            inside.append(host_view(root, match))
    return inside, outside


def _settings(root: str, path: str | None = None) -> dict[str, str]:
    """nvfabric's Slurm prolog settings file (``path``, the prolog's
    ``NVFABRIC_SLURM_DEFAULTS``, else /etc/default/nvfabric-slurm), as that prolog reads it."""
    where = path if path and hostpath.problem(path) is None else NVFABRIC_SLURM_DEFAULTS
    return slurm.parse_settings(_read(root, where, 1 << 16) or "")


class _Walker:
    """Follows the scripts slurmd runs (bounded), keeping those that manage IMEX."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.found: list[slurm.Script] = []
        self.notes: list[str] = []
        self.read: set[str] = set()

    def walk(self, key: str, patterns: tuple[str, ...], env: Mapping[str, str],
             chain: tuple[str, ...], depth: int) -> None:
        if depth > SLURM_MAX_DEPTH:
            self.notes.append(f"{chain[-1]}: hands off deeper than {SLURM_MAX_DEPTH} "
                              "scripts: not followed further")
            return
        for pattern in patterns:
            matches, escaped = _glob(self.root, pattern)
            self.notes += [f"{chain[-1]}: {m} leads out of the root: not read" for m in escaped]
            for path in matches:
                self.read_script(key, path, env, chain, depth)

    def read_script(self, key: str, path: str, env: Mapping[str, str], chain: tuple[str, ...],
               depth: int) -> None:
        real = host_view(self.root, os.path.realpath(under(self.root, path)))
        if real in self.read:
            return
        if len(self.read) >= SLURM_MAX_SCRIPTS:
            if len(self.read) == SLURM_MAX_SCRIPTS:
                self.notes.append(f"more than {SLURM_MAX_SCRIPTS} scripts: the rest not read")
                self.read.add("")
            return
        self.read.add(real)
        try:
            data = read_bytes(under(self.root, path), SLURM_MAX_SCRIPT_BYTES)
        except PathEscape:
            data = None
        if data is None or not script.is_script(data[:4096]):
            return
        shown = path if real == path else f"{path} -> {real}"
        text = data.decode("utf-8", "replace")
        found = script.analyse(text, path, real, env, shell=script.is_shell(data[:4096]))
        actions = found.actions
        if found.nvfabric_prolog:
            settings = {**_settings(self.root, env.get("NVFABRIC_SLURM_DEFAULTS")),
                        **{k: v for k, v in env.items()
                           if k.startswith("NVFABRIC_") and v != script.UNKNOWN}}
            actions = slurm.nvfabric_prolog_actions(settings, shown)
        if actions.imex:
            self.found.append(slurm.Script(key, chain + (shown,), actions,
                                           found.nvfabric_prolog))
        if found.follow and not found.nvfabric_prolog:
            self.walk(key, found.follow, found.exported, chain + (shown,), depth + 1)

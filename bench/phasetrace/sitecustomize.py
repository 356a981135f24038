"""Phase tracer for ``bench_run.py`` (loaded by ``site`` when this directory is on PYTHONPATH
and NVFABRIC_PHASE_TRACE names a file; inert otherwise).

It records wall-clock times (``time.time()``, so that they compare with the fakes' records and
the benchmark's own clock) of: this module's load (the interpreter's start-up is done), the
first nvfabric import, and entry/exit of the host-access functions of ``nvfabric run`` named
in :data:`TRACED` (wrapped right after their module executes, before any other module binds
them). Each record is one JSON line ``{"t": ..., "ev": "enter"|"exit"|"mark", "what": ...,
"thread": ...}`` appended to the file. Nothing of nvfabric's behaviour changes; the cost is one
finder lookup per import and two records per traced call.

A traced name that no longer exists (code moved) is simply never recorded: the benchmark
prints such a phase as "not seen", so a restructure shows up instead of silently measuring
nothing.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import os
import sys
import threading
import time

_FILE = os.environ.get("NVFABRIC_PHASE_TRACE")

#: module -> functions to time (host access on the way from start to NVLSM's exec).
TRACED: dict[str, tuple[str, ...]] = {
    "nvfabric.facts.inventory": ("collect",),
    "nvfabric.rules.plan": ("plan",),
    "nvfabric.bringup.vendor": ("resolve",),
    "nvfabric.facts.fmconfig": ("read_shipped",),
    "nvfabric.bringup.fabricmanager": ("prepare",),
    "nvfabric.facts.probes": ("running", "fm_version"),
    "nvfabric.facts.gpu": ("read_health",),
    "nvfabric.effects.runlock": ("acquire_run_lock",),
    "nvfabric.effects.sockets": ("socket_listening",),
    "nvfabric.effects.apply": ("apply",),
    "nvfabric.supervisor.lean": ("supervise",),
}


def _record(ev: str, what: str) -> None:
    line = json.dumps({"t": time.time(), "ev": ev, "what": what,
                       "thread": threading.get_ident()})
    fd = os.open(_FILE or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _timed(fn, what):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _record("enter", what)
        try:
            return fn(*args, **kwargs)
        finally:
            _record("exit", what)
    return wrapper


class _Loader:
    def __init__(self, loader, name):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for attr in TRACED.get(self._name, ()):
            fn = getattr(module, attr, None)
            if callable(fn):
                setattr(module, attr, _timed(fn, f"{self._name}.{attr}"))

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder:
    seen_nvfabric = False

    def find_spec(self, name, path=None, target=None):
        if name == "nvfabric" and not self.seen_nvfabric:
            self.seen_nvfabric = True
            _record("mark", "import nvfabric")
        if name not in TRACED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, name)
        return spec


if _FILE:
    _record("mark", "site")
    sys.meta_path.insert(0, _Finder())

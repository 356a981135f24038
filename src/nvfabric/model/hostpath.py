"""Host path values: the one check for a path that reaches a daemon's command line or a config
file, and the one way to see a host path from a root directory.

A host path value must be absolute, one line (no newline, NUL) and free of ``..`` segments:
nvfabric resolves every path under ``--root`` and a ``..`` would step out of it; a newline in a
config value would inject a second key. Pure, except :func:`confined`, which follows symbolic
links of the tree to prove the resolved location stays under the root.

Reads are confined too, by one mechanism: every root other than ``/`` that a path is joined
under (:func:`under_root`, and :func:`nvfabric.facts.fs.under`, which the sysfs/procfs
readers use) is remembered with its real location, and :func:`escapes` tells a reader that
the file it opened (``/proc/self/fd``) lies outside the root its path was built under: a
``sys/module/nvidia/version`` linked to a file elsewhere is then not read. Links inside the
tree (sysfs's own relative ones, ``../../../devices/...``) resolve inside it and are followed.
"""

from __future__ import annotations

import os

from nvfabric.strict import control_free

#: The longest path Linux takes (include/uapi/linux/limits.h, terminating NUL included).
PATH_MAX = 4096


def problem(path: str) -> str | None:
    """Why ``path`` is not a valid host path value (a short phrase), or None when it is."""
    if not path.startswith("/"):
        return "must be an absolute path"
    if len(path) >= PATH_MAX or len(path.encode("utf-8", "surrogatepass")) >= PATH_MAX:
        return f"is longer than PATH_MAX ({PATH_MAX} bytes)"
    if not control_free(path):
        return "may not contain a newline, NUL or other control character"
    if ".." in path.split("/"):
        return "may not contain '..' (paths are resolved under --root and must stay there)"
    return None


def check(path: str, what: str) -> str:
    """``path`` when :func:`problem` finds nothing; ValueError naming ``what`` otherwise."""
    why = problem(path)
    if why is not None:
        raise ValueError(f"{what} {path!r}: {why}")
    return path


#: Every root other than ``/`` paths were joined under: its absolute path -> its real path.
_ROOTS: dict[str, str] = {}


def register(root: str) -> str:
    """Remember ``root`` for :func:`escapes` (``/`` is not confined); its absolute path."""
    base = os.path.abspath(root)
    if base != "/" and base not in _ROOTS:
        _ROOTS[base] = os.path.realpath(base)
    return base


def escapes(path: str, real: str) -> bool:
    """True when ``path``, built under a root seen by :func:`register` (the longest that
    contains it), really is ``real`` (where its links led, e.g. the target of an open
    descriptor), outside that root's real location. False for paths under no such root."""
    if not _ROOTS:
        return False
    full = path if path.startswith("/") else os.path.abspath(path)
    best = ""
    for base in _ROOTS:
        if (full == base or full.startswith(base + "/")) and len(base) > len(best):
            best = base
    if not best:
        return False
    rbase = _ROOTS[best]
    return not (real == rbase or real.startswith(rbase.rstrip("/") + "/"))


def under_root(root: str, path: str) -> str:
    """A host path seen from ``root``, normalised (``//`` and ``.`` dropped; unchanged when
    root is ``/``; an empty value stays empty). ValueError when ``path`` has a ``..`` segment.
    The root is registered for :func:`escapes`."""
    if not path:
        return path
    if ".." in path.split("/"):
        raise ValueError(f"path {path!r} may not contain '..' (it must stay under --root)")
    if register(root) == "/":
        return path
    relative = os.path.normpath(path.lstrip("/") or ".")
    base = os.path.abspath(root)
    return base if relative == "." else os.path.join(base, relative)


def confined(root: str, path: str, what: str = "path") -> str:
    """``path`` checked (:func:`check`) and resolved under ``root``, with every symbolic link on
    the way followed (also in the part that exists so far): ValueError when the real location
    is outside ``root``."""
    full = under_root(root, check(path, what))
    base = os.path.realpath(root)
    real = os.path.realpath(full)
    if base != "/" and real != base and not real.startswith(base.rstrip("/") + "/"):
        raise ValueError(f"{what} {path!r} resolves to {real}, outside the root {root}")
    return full

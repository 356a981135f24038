"""Host path values: the one check for a path that reaches a daemon's command line or a config
file, and the one way to see a host path from a root directory.

A host path value must be absolute, one line (no newline, NUL) and free of ``..`` segments:
nvfabric resolves every path under ``--root`` and a ``..`` would step out of it; a newline in a
config value would inject a second key. Pure, except :func:`confined`, which follows symbolic
links of the tree to prove the resolved location stays under the root.
"""

from __future__ import annotations

import os

from .strict import control_free

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


def under_root(root: str, path: str) -> str:
    """A host path seen from ``root``, normalised (``//`` and ``.`` dropped; unchanged when
    root is ``/``; an empty value stays empty). ValueError when ``path`` has a ``..`` segment."""
    if not path:
        return path
    if ".." in path.split("/"):
        raise ValueError(f"path {path!r} may not contain '..' (it must stay under --root)")
    if os.path.abspath(root) == "/":
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

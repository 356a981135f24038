"""Host path values: the one check for a path that reaches a daemon's command line or a config
file.

A host path value must be absolute, one line (no newline, NUL) and free of ``..`` segments:
nvfabric resolves every path under ``--root`` and a ``..`` would step out of it; a newline in a
config value would inject a second key. Pure.

Joining a host path to a root directory, and refusing links that lead out of it, is
:mod:`nvfabric.facts.paths` (``under``, ``confined``): the one root-join of nvfabric.
"""

from __future__ import annotations

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

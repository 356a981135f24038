"""The one way a host path is seen from a root directory (``--root``, default ``/``), and the
one check of a host path value.

A host path value (an option, a config key, a daemon's argument) must be absolute, one line (no
newline, NUL or other control character) and free of ``..`` segments (:func:`problem`,
:func:`check`): nvfabric resolves every path under ``--root`` and a ``..`` would step out of
it; a newline in a config value would inject a second key.

Every reader in ``facts/`` and every writer in ``effects/`` (and the bring-ups, the artifact
installers, the CLI) joins a host path to the root with :func:`under`; nothing else
concatenates a root and a path. The join refuses what would step out of the root:

- a ``..`` segment (``/etc/../../x``), lexically, before anything is touched;
- a NUL (the kernel would cut the path there; ``os`` raises an obscure ValueError);
- a symbolic link on the way that leads out of the root: the root is registered with its
  real location (:func:`register`), and the readers of :mod:`nvfabric.facts.fs` refuse a file
  whose open descriptor (``/proc/self/fd``) lies outside it (:func:`escapes`); a path that is
  to be written or handed to a daemon is resolved at once by :func:`confined`.

Links inside the tree (sysfs's own relative ones, ``../../../devices/...``, or an absolute
one pointing into the root) resolve inside it and are followed, as on the node itself.

The root ``/`` is the node itself: there is nothing to confine, paths are returned as given.

Errors: :class:`PathEscape` (a ValueError) for every refusal, naming the path and why.
"""

from __future__ import annotations

import os

from nvfabric.model.errors import InputError
from nvfabric.model.strict import control_free

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



class PathEscape(InputError):
    """A host path that would leave the root: a ``..`` segment, a NUL, or a link on the way
    that points outside it."""


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


def under(root: str, path: str) -> str:
    """``path`` (a host path; a leading ``/`` is optional) as seen from ``root``.

    Under ``/`` the path is returned as given (the node itself: nothing to join; a relative
    option value stays relative to the working directory, as it always was); under another
    root the result is the root's absolute path joined with the normalised path (``//`` and
    ``.`` dropped; a leading ``/`` optional). An empty path stays empty (an option not given). The
    root is registered (:func:`register`), so the readers of :mod:`nvfabric.facts.fs` do not
    follow links out of it. Raises :class:`PathEscape` for a ``..`` segment or a NUL.
    """
    if not path:
        return path
    if "\x00" in path:
        raise PathEscape(f"path {path!r} may not contain a NUL byte")
    if ".." in path.split("/"):
        raise PathEscape(f"path {path!r} may not contain '..' (it must stay under --root)")
    base = register(root)
    if base == "/":
        return path
    relative = os.path.normpath(path.lstrip("/") or ".")
    return base if relative == "." else os.path.join(base, relative)


def confined(root: str, path: str, what: str = "path") -> str:
    """``path`` checked as a host path value (:func:`check`: absolute,
    one line, no ``..``) and joined under ``root`` (:func:`under`), with every symbolic link on
    the way followed (also in the part that exists so far): :class:`PathEscape` naming
    ``what`` when the path is not valid or its real location is outside ``root``. Every file
    nvfabric writes under a root, and every path it hands to a daemon, goes through here."""
    try:
        full = under(root, check(path, what))
    except PathEscape:
        raise
    except ValueError as err:
        raise PathEscape(str(err)) from None
    base = os.path.realpath(root)
    real = os.path.realpath(full)
    if base != "/" and real != base and not real.startswith(base.rstrip("/") + "/"):
        raise PathEscape(f"{what} {path!r} resolves to {real}, outside the root {root}")
    return full


def program(full: str) -> str:
    """``full``, a program nvfabric is about to execute, checked: when it was joined under a
    root other than ``/`` (:func:`under`), it must really be inside that root (the tree's
    ``bin/nvidia-smi``, fabric manager, ``nvidia-imex-ctl``), not a link out of it, which
    would run a program of the host or of another tree. :class:`PathEscape` naming where it
    leads otherwise. The one rule for every program run under a root: the probe door
    (:func:`nvfabric.effects.program.run`) and the daemons ``run`` starts
    (:func:`nvfabric.facts.probes.path_seen`) both apply it."""
    real = os.path.realpath(full)
    if full.startswith("/") and escapes(full, real):
        raise PathEscape(f"{full} is a link out of the root (to {real}): it is not run")
    return full


def host_view(root: str, full: str) -> str:
    """The host path of ``full``, a path under ``root`` (:func:`under`'s inverse): ``full``
    itself under ``/``, else ``full`` with the root's absolute path cut off."""
    base = os.path.abspath(root).rstrip("/")
    return full[len(base):] if base and full.startswith(base + "/") else full


def is_live(root: str) -> bool:
    """True when ``root``'s ``proc`` is the running kernel's procfs: its ``proc/self`` is the
    same directory as this process's ``/proc/self`` (the kernel's link to the reader's own
    ``/proc/<pid>``, proc(5); same device and inode, which no file in a tree can be). This is
    the one door between "the node itself" and "a directory holding a node's files": NVML,
    the interface table, the resolver and the host name of the running system are only asked
    for a live root (``/`` on a node, or a root whose ``proc`` is the live procfs
    bind-mounted); a simulated tree (``nvfabric simulate``, a test's directory) has no such
    directory and is read through its own files and its own ``bin/`` tools."""
    try:
        return os.path.samefile(under(root, "/proc/self"), "/proc/self")
    except OSError:
        return False

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
- a NUL (the kernel would cut the path there; ``os`` raises an obscure ValueError).

Symbolic links are resolved as the node resolves them. A root other than ``/`` is a node's
``/`` seen from elsewhere (the DaemonSet's ``/host``, a captured tree): on the node an
absolute link target (``/etc/slurm/slurm.conf -> /etc/slurm-llnl/slurm.conf``, an
``/etc/alternatives`` chain) starts at the node's ``/``, which is the root, as under
chroot(2) or openat2(2)'s ``RESOLVE_IN_ROOT``. The kernel of the reader follows such a link
from the reader's own ``/`` instead. So:

- the root is registered with its real location (:func:`register`); a path whose real
  location, as the reader's kernel resolves it, lies inside the root is taken as it is (the
  fast path: sysfs's own relative links ``../../../devices/...``, and a tree's absolute links
  to itself by its own path, as tests and captures copied with ``cp -a`` have);
- otherwise (:func:`escapes`) the path is resolved again component by component under the
  root (:func:`in_root`): an absolute target restarts at the root, a relative one at the
  link's directory, ``..`` stops at the root, more than :data:`MAX_LINKS` links is ELOOP.
  The result never leaves the root: a link to ``/etc/shadow`` means ``<root>/etc/shadow``
  or nothing, never the reader's own. :func:`resolve` is both steps; the readers of
  :mod:`nvfabric.facts.fs` open the result and check the descriptor (``/proc/self/fd``)
  again, so a link swapped in between is still not followed out of the root.

Writes and programs stay strict (:func:`confined`, :func:`program`): a path nvfabric writes
is written by its own kernel, and a path it hands to a daemon or executes is resolved by that
process's kernel, both from nvfabric's view, where an absolute link leads out of the root;
a write that landed outside could not be undone, so such a path is refused
(:class:`PathEscape`, naming where the node would resolve it) rather than rewritten.

The root ``/`` is the node itself: there is nothing to confine, paths are returned as given.

Errors: :class:`PathEscape` (a ValueError) for every refusal, naming the path and why;
:func:`in_root` and :func:`resolve` raise OSError (ELOOP) for a loop of links.
"""

from __future__ import annotations

import errno
import os
import stat

from nvfabric.model.errors import InputError
from nvfabric.model.strict import control_free

#: The longest path Linux takes (include/uapi/linux/limits.h, terminating NUL included).
PATH_MAX = 4096
#: The most symbolic links one path resolution follows before ELOOP (the kernel's
#: MAXSYMLINKS, include/linux/namei.h).
MAX_LINKS = 40


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


def root_of(path: str) -> tuple[str, str] | None:
    """(absolute path, real path) of the longest registered root containing ``path`` (made
    absolute), or None when no registered root does."""
    if not _ROOTS:
        return None
    full = path if path.startswith("/") else os.path.abspath(path)
    best = ""
    for base in _ROOTS:
        if (full == base or full.startswith(base + "/")) and len(base) > len(best):
            best = base
    return (best, _ROOTS[best]) if best else None


def _within(real: str, base: str) -> bool:
    return real == base or real.startswith(base.rstrip("/") + "/")


def escapes(path: str, real: str) -> bool:
    """True when ``path``, built under a root seen by :func:`register` (the longest that
    contains it), really is ``real`` (where its links led, e.g. the target of an open
    descriptor), outside that root's real location. False for paths under no such root."""
    if not _ROOTS:
        return False
    full = path if path.startswith("/") else os.path.abspath(path)
    best = ""
    for base in _ROOTS:  # root_of, inline: once per read of every reader
        if (full == base or full.startswith(base + "/")) and len(base) > len(best):
            best = base
    if not best:
        return False
    rbase = _ROOTS[best]
    return not (real == rbase or real.startswith(rbase.rstrip("/") + "/"))


def in_root(path: str) -> str:
    """``path`` (built under a registered root) with every symbolic link on it resolved as
    the node resolves it (module docstring): an absolute target from the root (one naming the
    root by its own path, absolute or real, from the root too), a relative one from the
    link's directory, ``..`` stopping at the root. Components that do not exist (or cannot be
    searched) are kept as they are, so the result is also where a missing file would be.
    Returned under the root's absolute path; ``path`` itself under no registered root.
    OSError ELOOP past :data:`MAX_LINKS` links."""
    found = root_of(path)
    if found is None:
        return path
    base, real = found
    full = path if path.startswith("/") else os.path.abspath(path)
    todo = full[len(base):].split("/")[::-1]  # a stack: the next component last
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        at = real.rstrip("/") + "/" + "/".join(done + [part])
        try:
            mode = os.lstat(at).st_mode
        except OSError:
            done.append(part)  # missing or unsearchable: the open says which
            continue
        if not stat.S_ISLNK(mode):
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        try:
            target = os.readlink(at)
        except OSError:
            done.append(part)
            continue
        if target.startswith("/"):
            done = []
            for own in (base, real):  # the tree's own path: a link into the root
                if own != "/" and _within(target, own):
                    target = target[len(own):]
                    break
        todo += target.split("/")[::-1]
    return base.rstrip("/") + "/" + "/".join(done) if done else base


def resolve(path: str) -> str:
    """Where ``path`` leads, links resolved as the node resolves them: its real path when that
    is inside the root it was built under (the fast path; returned under the root's absolute
    path, so :func:`host_view` cuts it), else :func:`in_root`'s. ``os.path.realpath`` for a
    path under no registered root. OSError ELOOP for a loop of links."""
    real = os.path.realpath(path)
    found = root_of(path)
    if found is None:
        return real
    base, rbase = found
    if _within(real, rbase):
        return base + real[len(rbase):] if rbase != "/" else base.rstrip("/") + real
    return in_root(path)


def resolve_parent(path: str) -> str:
    """``path`` with every component but the last resolved (:func:`resolve`): where its last
    component stands, not followed (``lstat``, ``readlink``, ``lexists``). OSError ELOOP."""
    head, tail = os.path.split(path)
    return os.path.join(resolve(head), tail) if head and tail else path


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


def shown_under(root: str, path: str) -> str:
    """How a message names the host path ``path`` looked for under ``root``: where it was
    looked for and what was typed (``R/etc/x (/etc/x under --root R)``), or ``path`` itself
    under ``/``. A path that names the host's file where the tree's was meant reads as a
    false "no such file" to an operator who sees it exists."""
    full = under(root, path)
    return path if full == path else f"{full} ({path} under --root {root})"


def _node_sees(full: str) -> str:
    """``; the node resolves it to X`` (X a host path, :func:`in_root`) for the refusals of
    :func:`confined` and :func:`program`, or nothing when that cannot be said."""
    found = root_of(full)
    if found is None:
        return ""
    try:
        host = in_root(full)[len(found[0].rstrip("/")):] or "/"
    except OSError:
        return ""
    return (f"; the node resolves it to {host}, but nvfabric's own kernel (and a daemon's) "
            "would follow it out of the root: give that path")


def confined(root: str, path: str, what: str = "path") -> str:
    """``path`` checked as a host path value (:func:`check`: absolute,
    one line, no ``..``) and joined under ``root`` (:func:`under`), with every symbolic link on
    the way followed (also in the part that exists so far): :class:`PathEscape` naming
    ``what`` when the path is not valid or its real location, as nvfabric's kernel resolves
    it, is outside ``root`` (the message adds where the node would resolve it,
    :func:`in_root`). Every file nvfabric writes under a root, and every path it hands to a
    daemon, goes through here. Strict, not resolved as the node does (module docstring): the
    write or the daemon's open follows the links from nvfabric's view after this check, and
    a write that landed outside the root could not be undone."""
    try:
        full = under(root, check(path, what))
    except PathEscape:
        raise
    except ValueError as err:
        raise PathEscape(str(err)) from None
    base = os.path.realpath(root)
    real = os.path.realpath(full)
    if base != "/" and real != base and not real.startswith(base.rstrip("/") + "/"):
        raise PathEscape(f"{what} {path!r} resolves to {real}, outside the root {root}"
                         f"{_node_sees(full)}")
    return full


def program(full: str) -> str:
    """``full``, a program nvfabric is about to execute, checked: when it was joined under a
    root other than ``/`` (:func:`under`), it must really be inside that root (the tree's
    ``bin/nvidia-smi``, fabric manager, ``nvidia-imex-ctl``), not a link out of it, which
    would run a program of the host or of another tree. :class:`PathEscape` naming where it
    leads otherwise. The one rule for every program run under a root: the probe door
    (:func:`nvfabric.effects.program.run`) and the daemons ``run`` starts
    (:func:`nvfabric.facts.probes.path_seen`) both apply it. Strict, not resolved as the node
    does: execve(2), the program's dynamic loader and its interpreter all resolve from
    nvfabric's view (module docstring); the message adds where the node would resolve it."""
    real = os.path.realpath(full)
    if full.startswith("/") and escapes(full, real):
        raise PathEscape(f"{full} is a link out of the root (to {real}): it is not run"
                         f"{_node_sees(full)}")
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

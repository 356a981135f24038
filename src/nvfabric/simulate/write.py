"""Write a simulated node's tree (:func:`nvfabric.simulate.tree.layout`) to disk: the
imperative shell of the simulator. :func:`build` refuses any target that is not a new or empty
directory and writes the entries; no entry's path goes through a link (links are written, never
written through), files are created with O_EXCL|O_NOFOLLOW, so nothing is written outside the
target directory; when a write fails, what was written is removed (:func:`clear`).
"""

from __future__ import annotations

import os
import shutil
import stat

from nvfabric.model.errors import usage_error
from nvfabric.simulate.spec import NodeSpec
from nvfabric.simulate.tree import Entry, ancestors, layout


def build(spec: NodeSpec, root: str) -> None:
    """Write the tree of ``spec`` under ``root``, which must be a new directory (its parent
    existing) or an empty one, and never ``/``.

    Raises SpecError for a ``files:`` entry that collides with the tree (before anything is
    written) and NvfabricError (exit 2) for a target that is not a new or empty directory.
    An OSError while writing propagates after what was written has been removed.
    """
    entries = layout(spec)
    created = _prepare(root)
    try:
        _write_all(root, entries)
    except BaseException:
        clear(root, remove_root=created)
        raise


def _prepare(root: str) -> bool:
    """Check the target directory; create it when absent. True when it was created."""
    if os.path.realpath(root) == "/":
        raise usage_error("refusing to write a simulated node over /",
                          "give a new or empty directory")
    if os.path.lexists(root):
        if not os.path.isdir(root):
            raise usage_error(f"{root} exists and is not a directory",
                              "give a new or empty directory")
        if os.listdir(root):
            raise usage_error(f"{root} exists and is not empty",
                              "give a new or empty directory; nvfabric never writes a "
                              "simulated node over existing files")
        return False
    parent = os.path.dirname(os.path.abspath(root))
    if not os.path.isdir(parent):
        raise usage_error(f"the parent directory of {root} does not exist ({parent})",
                          "create it first, or give a directory in an existing one")
    os.mkdir(root)
    return True


def clear(root: str, remove_root: bool) -> None:
    """Remove what a failed build wrote under ``root`` (links are removed, never followed);
    ``root`` itself too when the build created it."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass
    if remove_root:
        try:
            os.rmdir(root)
        except OSError:
            pass


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_all(root: str, entries: tuple[Entry, ...]) -> None:
    """Write ``entries`` under ``root`` (an empty directory). Directories are made as needed;
    files and channel nodes are created, never opened if something is already there."""
    made: set[str] = {""}

    def parent_of(rel: str) -> str:
        parent = os.path.dirname(rel)
        if parent not in made:
            os.makedirs(os.path.join(root, parent), exist_ok=True)
            made.update([parent, *ancestors(parent)])
        return os.path.join(root, rel)

    for e in entries:
        if e.kind == "dir":
            if e.path not in made:
                os.makedirs(os.path.join(root, e.path), exist_ok=True)
                made.update([e.path, *ancestors(e.path)])
        elif e.kind == "link":
            os.symlink(e.target, parent_of(e.path))
        elif e.kind == "chardev":
            _imex_channel(parent_of(e.path), e.major, e.minor)
        elif e.kind == "fifo":
            os.mkfifo(parent_of(e.path), 0o600)
        else:
            fd = os.open(parent_of(e.path), _CREATE, 0o666)
            try:
                view = memoryview(e.data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)


def _imex_channel(path: str, major: int | None, minor: int) -> None:
    """An IMEX channel node as the driver makes it: a character device ``major:minor`` (the
    node spec's ``nvidia-caps-imex-channels`` major, the channel number), mode 0666 (NVIDIA
    IMEX guide, "IMEX Channels"). Only root may mknod; otherwise, where mknod is not permitted
    (a container without CAP_MKNOD) or the spec gives no major, an empty regular file stands
    in, which nvfabric's channel check reports as not a device."""
    if major is not None and os.geteuid() == 0:
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        except PermissionError:
            pass
        else:
            os.chmod(path, 0o666)  # mknod applies the umask
            return
    os.close(os.open(path, _CREATE, 0o666))

"""The host side of fabric manager's config: the shipped ``fabricmanager.cfg`` read as the
vendor's regular file, and whether the paths the effective config names exist (or can be
made) under the root. The config itself, shipped text in, effective text out, is pure:
:mod:`nvfabric.bringup.fmconfig`.
"""

from __future__ import annotations

import os
import stat

from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.model import fmkeys, keyvalue
from nvfabric.model.findings import Finding


def read_shipped(path: str, limit: int = 1 << 20) -> str:
    """The text of the shipped fabricmanager.cfg at ``path`` (already under the root).

    Refused (ShippedConfigError): a symbolic link (a link to an unrelated file, ``/etc/
    passwd``, would be copied into the effective config and printed), anything that is not a
    regular file (opened with O_NOFOLLOW and O_NONBLOCK, so a FIFO never blocks), a file over
    ``limit`` bytes, and a file without a ``KEY=VALUE`` line (empty: fabric manager would run
    on its built-in defaults, not the vendor's file). Raises OSError when it cannot be opened
    (missing) and UnicodeDecodeError for bytes that are not UTF-8."""

    def refuse(why: str) -> fmkeys.ShippedConfigError:
        return fmkeys.ShippedConfigError(Finding(
            "input_unreadable", "error", f"the shipped fabric manager config {path} {why}",
            "reinstall the fabric manager package (its fabricmanager.cfg is a regular file "
            "with the keys of that version), or pass --fm-config", {"path": path}))

    if os.path.islink(path):
        raise refuse(f"is a symbolic link (to {os.readlink(path)}), not the vendor's file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse("is not a regular file")
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        raise refuse(f"is larger than {limit} bytes")
    text = data.decode("utf-8")
    if not keyvalue.parse(text).items():
        raise refuse("is empty (no KEY=VALUE line)")
    return text


def check_paths(eff: fmcfg.Effective) -> list[Finding]:
    """Preflight of the path-valued keys (see :data:`nvfabric.model.fmkeys.PATH_KEYS`): one
    ``config_invalid_value`` finding per key whose path does not exist and cannot be created.
    Host access: stat only."""
    problems: list[Finding] = []
    for key, kind in fmkeys.PATH_KEYS.items():
        value = eff.get(key)
        if not value:
            continue
        if kind == "dir" and not os.path.isdir(value):
            problems.append(fmkeys.invalid(key, f"directory {value} does not exist",
                                           f"install the fabric manager package data into "
                                           f"{value} or point the key at where it lives"))
        elif kind == "file" and not os.path.isfile(value):
            problems.append(fmkeys.invalid(key, f"file {value} does not exist",
                                           f"create {value} or unset {key}"))
        elif kind == "parent" and not _creatable_dir(os.path.dirname(value)):
            problems.append(fmkeys.invalid(key, f"directory of {value} does not exist and "
                                           "cannot be created", f"create "
                                           f"{os.path.dirname(value)} or change {key}"))
    return problems


def _creatable_dir(path: str) -> bool:
    """True when ``path`` is a directory, or its nearest existing ancestor is a writable one."""
    probe = path or "/"
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    if probe == path:
        return os.path.isdir(path)
    return os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)

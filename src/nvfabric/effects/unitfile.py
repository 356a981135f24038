"""nvfabric's systemd unit: its one text and where it goes on a node.

The unit text is package data (``nvfabric/data/nvfabric.service``); the Debian package ships
the same bytes from ``packaging/systemd/nvfabric.service`` (tests/cli/test_unit.py keeps the
two equal). :func:`install` writes it where systemd looks for the administrator's units,
``/etc/systemd/system`` (systemd.unit(5), "Unit File Load Path": it wins over the package's
``/usr/lib/systemd/system``), under a root directory so that tests and image builds write
into a tree.

Errors: :class:`UnitError` (a finding, exit 1) when the path is a symbolic link (a masked
unit is a link to ``/dev/null``; writing through or over it would unmask it) or not a file,
when a file stands where one of its directories should be (named in the message), or when
the write fails; the previous file is then untouched (configs/atomic.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import stat
import sys
import sysconfig
from dataclasses import dataclass
from importlib import resources

from nvfabric.effects.atomic import write_atomic
from nvfabric.effects.dirs import not_a_directory
from nvfabric.effects.frozen import is_frozen, is_one_file, unit_for_binary
from nvfabric.model.commandline import NVFABRIC_UNIT
from nvfabric.model.errors import NvfabricError, os_hint
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import under

#: Where the administrator's units live (systemd.unit(5)): what ``unit install`` writes.
UNIT_DIR = "/etc/systemd/system"
#: Where a package's units live (Debian: ``/lib`` is ``/usr/lib``); an install in
#: :data:`UNIT_DIR` overrides a unit found here.
PACKAGE_UNIT_DIRS = ("/usr/lib/systemd/system", "/lib/systemd/system")
#: The suffix of the copy kept of a unit file that is replaced (configs/atomic.py).
BACKUP_SUFFIX = ".nvfabric.bak"


def unit_text() -> str:
    """The unit file, exactly as shipped (UTF-8 text ending in a newline); from the
    single-file binary with ``NotifyAccess=all`` (:func:`nvfabric.effects.frozen.unit_for_binary`;
    the one-dir build notifies from its main pid, as the interpreter does)."""
    text = (resources.files("nvfabric") / "data" / NVFABRIC_UNIT).read_text(encoding="utf-8")
    return unit_for_binary(text) if is_one_file() else text


@dataclass(frozen=True)
class Installed:
    """What :func:`install` did. ``path``: the unit file (under the root); ``result``:
    ``written`` (new), ``replaced`` (a different file was there, copied to ``backup``
    first), ``unchanged`` (the same bytes were there: nothing written) or ``would_write``
    (dry run: nothing written); ``shadows``: a package's unit of the same name that this
    one overrides, if any."""

    path: str
    result: str
    backup: str | None
    shadows: str | None


class UnitError(NvfabricError):
    """The unit cannot be installed (exit 1); nothing was changed."""

    def __init__(self, message: str, hint: str, path: str) -> None:
        super().__init__(Finding("unit_not_installed", "error", message, hint,
                                 {"path": path}), exit_code=1)


#: The program the shipped unit runs (``ExecStart=/usr/bin/nvfabric run``): the Debian
#: package's link to its directory build (/usr/lib/nvfabric/nvfabric).
UNIT_PROGRAM = "/usr/bin/nvfabric"
_SHIPPED_EXEC = f"\nExecStart={UNIT_PROGRAM} run\n"
#: Where the unit's ``ProtectHome=yes`` hides everything (systemd.exec(5) ProtectHome=).
HOME_DIRS = ("/home", "/root", "/run/user")
#: What a word of ExecStart may hold here: no quoting, no specifier (``%``), no variable
#: (``$``), no space (systemd.service(5) "Command lines").
_EXEC_WORD = re.compile(r"[A-Za-z0-9_./+@:=,-]+")


@dataclass(frozen=True)
class ExecStart:
    """The command the installed unit runs before ``run``: ``argv`` (the program, and ``-m
    nvfabric`` for an interpreter) and ``why``, one line for the operator."""

    argv: tuple[str, ...]
    why: str


def running_program() -> tuple[str, ...]:
    """This nvfabric as a command line: the single-file binary itself; else the console script
    pip wrote beside this interpreter (its scripts directory, e.g. ``.venv/bin/nvfabric``);
    else the interpreter with ``-m nvfabric``. Paths as they are, links not followed (a
    virtual environment's ``bin/python`` is a link, and resolving it loses the venv)."""
    if is_frozen():
        return (os.path.abspath(sys.executable),)
    script = os.path.join(sysconfig.get_path("scripts"), "nvfabric")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return (os.path.abspath(script),)
    return (os.path.abspath(sys.executable), "-m", "nvfabric")


def _hidden_by_protect_home(paths: list[str]) -> str | None:
    """The first of ``paths`` (each with every link followed) under :data:`HOME_DIRS`."""
    for path in paths:
        real = os.path.realpath(path)
        if any(real == d or real.startswith(d + "/") for d in HOME_DIRS):
            return real
    return None


def exec_start(root: str, program: tuple[str, ...], interpreter: str | None) -> ExecStart:
    """What the unit under ``root`` runs, ``program`` being the running nvfabric
    (:func:`running_program`; ``interpreter`` its Python, None for the single-file binary):

    - on this host (``root`` is ``/``): :data:`UNIT_PROGRAM` when that is this nvfabric, else
      ``program`` itself (a virtual environment's nvfabric: the shipped path does not exist
      there, or is another nvfabric); refused (:class:`UnitError`) when systemd could not run
      it as installed: under a home directory (the program or its interpreter, links
      followed), which the unit's ``ProtectHome=yes`` hides, or a path ExecStart cannot hold;
    - in a tree (an image being built): :data:`UNIT_PROGRAM`, the program of the tree (this
      host's nvfabric is not the tree's), with a note when the tree has none yet.
    """
    shipped = ExecStart((UNIT_PROGRAM,), f"{UNIT_PROGRAM}: the package's path")
    if os.path.abspath(root) != "/":
        if os.path.exists(under(root, UNIT_PROGRAM)):
            return ExecStart((UNIT_PROGRAM,), f"{UNIT_PROGRAM}: the tree's nvfabric")
        return ExecStart((UNIT_PROGRAM,), f"{UNIT_PROGRAM}, which the tree does not have yet: "
                         "install nvfabric there (the .deb, or the single-file binary as "
                         f"{UNIT_PROGRAM}) before the unit starts")
    with contextlib.suppress(OSError):
        if len(program) == 1 and os.path.samefile(program[0], UNIT_PROGRAM):
            return shipped
    command = " ".join(program)
    hidden = _hidden_by_protect_home([program[0], *([interpreter] if interpreter else [])])
    fix = (f"install nvfabric where systemd can run it: the .deb ({UNIT_PROGRAM}), the "
           "single-file binary, or a virtual environment outside /home and /root made with a "
           "Python that is not under them either; then run `unit install` from there")
    if hidden is not None:
        raise UnitError(f"the running nvfabric ({command}) needs {hidden}, under a home "
                        "directory, which the unit's ProtectHome=yes hides: the service "
                        "could not start; nothing was written", fix, f"{UNIT_DIR}/{NVFABRIC_UNIT}")
    if not all(_EXEC_WORD.fullmatch(w) for w in program):
        raise UnitError(f"the running nvfabric ({command}) has a path ExecStart= cannot hold "
                        "unquoted (a space, % or $); nothing was written", fix,
                        f"{UNIT_DIR}/{NVFABRIC_UNIT}")
    where = "does not exist" if not os.path.exists(UNIT_PROGRAM) else "is another nvfabric"
    return ExecStart(program, f"{command}: the running nvfabric ({UNIT_PROGRAM} {where})")


def unit_text_for(start: ExecStart) -> str:
    """:func:`unit_text` with its ExecStart naming ``start`` (unchanged for
    :data:`UNIT_PROGRAM`; otherwise a comment above says why)."""
    text = unit_text()
    if start.argv == (UNIT_PROGRAM,):
        return text
    return text.replace(_SHIPPED_EXEC, (
        "\n# ExecStart: the nvfabric that ran `nvfabric unit install`, not the package's "
        f"{UNIT_PROGRAM}\nExecStart={' '.join(start.argv)} run\n"), 1)


def install(root: str, *, dry_run: bool = False, text: str | None = None) -> Installed:
    """Write ``text`` (default :func:`unit_text`) to ``<root>/etc/systemd/system/
    nvfabric.service``: temporary file, fsync, rename; a different file already there is
    kept as ``nvfabric.service.nvfabric.bak``; the same bytes are left alone. ``dry_run``
    checks the same and writes nothing. Raises :class:`UnitError` (see module docstring)."""
    content = unit_text() if text is None else text
    path = under(root, f"{UNIT_DIR}/{NVFABRIC_UNIT}")
    real_dir = os.path.realpath(os.path.dirname(path))
    base = os.path.realpath(root)
    if base != "/" and not (real_dir + "/").startswith(base.rstrip("/") + "/"):
        raise UnitError(f"{os.path.dirname(path)} resolves to {real_dir}, outside the root "
                        f"{root}; nothing was written",
                        "give a --root whose etc/systemd/system is a directory in it", path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        blocker = not_a_directory(os.path.dirname(path)) or os.path.dirname(path)
        raise UnitError(f"{blocker} is a file where a directory should be; nothing was "
                        "written", f"move {blocker} away (systemd reads units from the "
                        f"directory {UNIT_DIR}), then install again", path) from None
    except OSError as err:
        raise UnitError(f"cannot read {path}: {err.strerror or err}",
                        "check the permissions of etc/systemd/system", path) from None
    old: bytes | None = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            what = "masked (a link to /dev/null)" if target == os.devnull else \
                f"a link to {target}"
            raise UnitError(
                f"{path} is {what}; nothing was written",
                f"systemctl unmask {NVFABRIC_UNIT} (or remove the link) if nvfabric should "
                "manage the fabric here, then install again", path)
        if not stat.S_ISREG(st.st_mode):
            raise UnitError(f"{path} exists and is not a regular file; nothing was written",
                            "remove it, then install again", path)
        try:
            with open(path, "rb") as fh:
                old = fh.read()
        except OSError as err:
            raise UnitError(f"cannot read {path}: {err.strerror or err}",
                            "check its permissions", path) from None
    data = content.encode()
    shadows = next((under(root, f"{d}/{NVFABRIC_UNIT}") for d in PACKAGE_UNIT_DIRS
                    if os.path.isfile(under(root, f"{d}/{NVFABRIC_UNIT}"))), None)
    if old == data:
        return Installed(path, "unchanged", None, shadows)
    result = "written" if old is None else "replaced"
    backup = path + BACKUP_SUFFIX if old is not None else None
    if dry_run:
        return Installed(path, "would_write", backup, shadows)
    try:
        write_atomic(path, data, mode=0o644, backup=True, dir_mode=0o755)
    except OSError as err:
        raise UnitError(f"cannot write {path}: {err.strerror or err}; the previous file, if "
                        "any, is untouched", os_hint(err, os.path.dirname(path)),
                        path) from None
    return Installed(path, result, backup, shadows)


def next_steps(root: str) -> list[str]:
    """The commands that make systemd load and start the installed unit: on the running
    system (``root`` is ``/``), daemon-reload then enable --now; in a tree (an image being
    built), ``systemctl --root`` enable (offline: it only makes the wants/ link), quoted as a
    shell reads it (shlex)."""
    if os.path.abspath(root) == "/":
        return ["systemctl daemon-reload", f"systemctl enable --now {NVFABRIC_UNIT}"]
    # quoted for a shell: the operator pastes it (an image tree may be "/srv/img 2")
    return [shlex.join(["systemctl", "--root", os.path.abspath(root), "enable", NVFABRIC_UNIT])]

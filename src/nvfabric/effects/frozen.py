"""The PyInstaller builds: the single-file binary (``make dist``, one-file, ``dist/nvfabric``)
and the directory build (``make dist-dir``, one-dir, ``dist/nvfabric-dir/``: the executable
``nvfabric`` beside its ``_internal/`` directory), which start in
packaging/dist/nvfabric-entry.py: :func:`prepare`, then the lean supervisor
(:func:`supervising`), a fake daemon (:func:`faking`) or the CLI, each imported only then.

Either is the whole CLI plus the fake daemons of simulated nodes. The directory build is one
process: its bootloader sets ``LD_LIBRARY_PATH`` to ``_internal/`` (the caller's value saved as
``LD_LIBRARY_PATH_ORIG``), executes itself once more in place and runs Python in that same
process, with nothing unpacked (PyInstaller manual, "Bundling to One Folder"; measured: one
``execve`` of the same file, one pid). A one-file PyInstaller executable is two processes:
the bootloader unpacks the bundled libraries into a private ``_MEI*`` directory, sets
``LD_LIBRARY_PATH`` to it (the caller's value saved as ``LD_LIBRARY_PATH_ORIG``) and runs the
Python part as its child (PyInstaller manual, "The Bootstrap Process in Detail"). Before
anything else :func:`prepare` therefore

- gives the processes nvfabric starts (fabric manager, NVLSM, nvidia-imex, ``mknod``,
  ``systemctl``, a GPU reset command) the caller's ``LD_LIBRARY_PATH``, not the bundle's, so a
  vendor daemon never loads the bundle's copy of a system library;
- sets ``PYINSTALLER_RESET_ENVIRONMENT=1`` so that a child which is this binary again (a fake
  daemon of a simulated node) unpacks its own copy instead of sharing this process's, which is
  deleted when this process exits (PyInstaller >= 6.10, "Run-time information");
- asks for SIGTERM when the bootloader dies (prctl(2) ``PR_SET_PDEATHSIG``): the bootloader
  forwards the signals it gets, but SIGKILL of the main pid (the only pid a caller knows)
  reaches the bootloader alone, and its child, the supervisor, went on as an orphan with
  NVLSM, fabric manager or IMEX (measured: tests/integration/test_dist.py). With it the
  supervisor stops its daemons in order, as for a forwarded SIGTERM.

The fake daemons (:mod:`nvfabric.simulate.fakebin`) are Python scripts in a tree written by
the interpreter; from the binary, ``nvfabric simulate`` writes launchers whose shebang is this
binary with :data:`FAKE_FLAG`, so the kernel runs ``nvfabric --nvfabric-sim-fake
DIR/bin/PROG ARGS...`` and the entry dispatches to the fake named by the launcher's file
name, with ``DIR`` as its simulated root (the entry calls
:func:`nvfabric.simulate.fakebin.main`). The flag is not a CLI command: it is never shown in
``--help`` and nothing else reaches it.
"""

from __future__ import annotations

import os
import sys

#: argv[1] of a fake daemon's launcher in a tree written by the single-file binary.
FAKE_FLAG = "--nvfabric-sim-fake"
#: argv[1] of the one-dir build re-executed as the lean supervisor by ``nvfabric run``
#: (:data:`nvfabric.supervisor.lean.FLAG`, spelled here so the dispatch imports nothing).
SUPERVISE_FLAG = "--supervise-fd"


def is_frozen() -> bool:
    """True when running as a PyInstaller build, one-file or one-dir (PyInstaller sets
    ``sys.frozen``)."""
    return bool(getattr(sys, "frozen", False))


def is_one_file() -> bool:
    """True when running as the single-file binary: a PyInstaller build whose bundle
    (``sys._MEIPASS``) is unpacked outside the executable's own directory (a ``_MEI*``
    directory under TMPDIR). The one-dir build's bundle is its ``_internal/`` directory, beside
    the executable (PyInstaller manual, "Run-time information": ``sys._MEIPASS``)."""
    if not is_frozen():
        return False
    bundle = getattr(sys, "_MEIPASS", None)
    if not isinstance(bundle, str):
        return False
    home = os.path.dirname(os.path.realpath(sys.executable))
    return os.path.dirname(os.path.realpath(bundle)) != home \
        and os.path.realpath(bundle) != home


def child_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the processes nvfabric starts should see it (see the module docstring):
    ``LD_LIBRARY_PATH`` back to ``LD_LIBRARY_PATH_ORIG`` (removed when the caller had none)
    and ``PYINSTALLER_RESET_ENVIRONMENT=1``. Pure: returns a new dict."""
    out = dict(env)
    original = out.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is None:
        out.pop("LD_LIBRARY_PATH", None)
    else:
        out["LD_LIBRARY_PATH"] = original
    out["PYINSTALLER_RESET_ENVIRONMENT"] = "1"
    return out


#: The unit's line that the single-file binary cannot satisfy, and its replacement: READY=1
#: and the watchdog pings come from the Python child of the bootloader, not the main pid
#: (the one-dir build is one process: the unit as shipped holds for it).
#: Source: systemd.exec(5) NotifyAccess=; measured in tests/integration/test_deb_systemd.py.
UNIT_NOTIFY_MAIN = "NotifyAccess=main\n"
UNIT_NOTIFY_BINARY = (
    "# The single-file binary notifies from the bootloader's child process.\n"
    "NotifyAccess=all\n"
)


def unit_for_binary(text: str) -> str:
    """The unit text ``nvfabric unit install`` writes from the single-file binary: its
    ``NotifyAccess=main`` line becomes ``NotifyAccess=all`` (a comment above says why); any
    other text is returned unchanged. Pure. (The Debian package carries the directory build,
    one process: it keeps the unit as shipped.)"""
    return text.replace(UNIT_NOTIFY_MAIN, UNIT_NOTIFY_BINARY, 1) if (
        "\n" + UNIT_NOTIFY_MAIN) in text else text


#: prctl(2) option (<linux/prctl.h> PR_SET_PDEATHSIG = 1): the signal this process gets when
#: the thread that forked it exits.
_PR_SET_PDEATHSIG = 1


def same_executable(pid: int, proc: str = "/proc") -> bool:
    """True when process ``pid`` runs the same executable file as this process (``PROC/PID/exe``
    and ``PROC/self/exe`` are one inode; still true after the file was replaced or deleted, as
    by a package upgrade). False when either cannot be read. Host access: procfs only."""
    try:
        theirs, ours = os.stat(f"{proc}/{pid}/exe"), os.stat(f"{proc}/self/exe")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def bootloader_pid() -> int | None:
    """The bootloader's pid when this process is the single-file binary's Python child (its
    parent runs the same executable), else None. That pid is the unit's main pid, the one
    systemd names in ``$WATCHDOG_PID`` (systemd.service(5) WatchdogSec=), while the pings come
    from here: :func:`nvfabric.effects.notify.watchdog_usec` accepts it. Independent of how
    the bundle is laid out (one file or one directory): a bootloader that runs Python as its
    child is the parent with the same executable. Host access: procfs only."""
    if not is_frozen():
        return None
    parent = os.getppid()
    return parent if parent > 1 and same_executable(parent) else None


def follow_bootloader() -> None:
    """In the bootloader's Python child: SIGTERM when the bootloader dies (see the module
    docstring). Does nothing when the parent is not this binary (the bootloader already gone,
    or a binary run some other way). Exits 1 with one line when the bootloader died before the
    request took effect (nothing has started yet). Linux only; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    if not same_executable(parent):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    if os.getppid() != parent:
        sys.stderr.write("nvfabric: the single-file binary's main process exited at start\n")
        sys.exit(1)


#: A simulated node's root holds this file (:data:`nvfabric.simulate.fakebin.state.STATE_DIR`,
#: written by ``nvfabric simulate``); spelled here so the fakes' dispatch imports nothing.
_SIM_NODE_FILE = "var/lib/nvfabric-sim/node.json"


def fake_target(script: str) -> tuple[str, str]:
    """(program, simulated root) of the launcher at ``script``: the program is the launcher's
    file name, links followed (``DIR/bin/PROG``, reached directly or through a vendor-path link
    such as ``DIR/usr/bin/nvidia-imex``); the root is the nearest directory above it that holds
    a simulated node's state (:data:`_SIM_NODE_FILE`), so a launcher laid out elsewhere in the
    tree (a stand-in fabric archive installed at ``DIR/usr/bin/nv-fabricmanager`` or
    ``DIR/opt/nvfabric/fabricmanager-V/bin/``) finds its node too; without one, the parent of
    the launcher's directory."""
    real = os.path.realpath(script)
    here = os.path.dirname(real)
    while True:
        if os.path.isfile(os.path.join(here, _SIM_NODE_FILE)):
            return os.path.basename(real), here
        up = os.path.dirname(here)
        if up == here:
            return os.path.basename(real), os.path.dirname(os.path.dirname(real))
        here = up


def prepare() -> None:
    """The first thing a build does (see the module docstring): in the bootloader's Python
    child, SIGTERM when the bootloader dies; the processes nvfabric starts get the caller's
    environment, not the bundle's. Nothing outside a build."""
    if is_frozen():
        follow_bootloader()
        env = child_environment(dict(os.environ))
        os.environ.clear()
        os.environ.update(env)


def supervising(argv: list[str]) -> bool:
    """``argv`` asks for the lean supervisor (``nvfabric --supervise-fd N``): the one-dir build
    re-executed by ``nvfabric run``; never the one-file binary, which supervises in-process."""
    return len(argv) >= 3 and argv[1] == SUPERVISE_FLAG and not is_one_file()


def faking(argv: list[str]) -> bool:
    """``argv`` is a fake daemon's launcher (:data:`FAKE_FLAG`, :func:`fake_target`)."""
    return len(argv) >= 3 and argv[1] == FAKE_FLAG

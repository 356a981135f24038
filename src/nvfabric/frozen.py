"""Entry point of the single-file binary (``make dist``: PyInstaller one-file, ``dist/nvfabric``).

The binary is the whole CLI plus the fake daemons of simulated nodes. A one-file PyInstaller
executable is two processes: the bootloader unpacks the bundled libraries into a private
``_MEI*`` directory, sets ``LD_LIBRARY_PATH`` to it (the caller's value saved as
``LD_LIBRARY_PATH_ORIG``) and runs the Python part as its child (PyInstaller manual, "The
Bootstrap Process in Detail"). Before anything else :func:`main` therefore

- gives the processes nvfabric starts (fabric manager, NVLSM, nvidia-imex, ``mknod``,
  ``systemctl``, a GPU reset command) the caller's ``LD_LIBRARY_PATH``, not the bundle's, so a
  vendor daemon never loads the bundle's copy of a system library;
- sets ``PYINSTALLER_RESET_ENVIRONMENT=1`` so that a child which is this binary again (a fake
  daemon of a simulated node) unpacks its own copy instead of sharing this process's, which is
  deleted when this process exits (PyInstaller >= 6.10, "Run-time information").

The fake daemons (:mod:`nvfabric.simulate.fakebin`) are Python scripts in a tree written by
the interpreter; from the binary, ``nvfabric simulate`` writes launchers whose shebang is this
binary with :data:`FAKE_FLAG`, so the kernel runs ``nvfabric --nvfabric-sim-fake
DIR/bin/PROG ARGS...`` and :func:`main` dispatches to the fake named by the launcher's file
name, with ``DIR`` as its simulated root. The flag is not a CLI command: it is never shown in
``--help`` and nothing else reaches it.
"""

from __future__ import annotations

import os
import sys

#: argv[1] of a fake daemon's launcher in a tree written by the single-file binary.
FAKE_FLAG = "--nvfabric-sim-fake"


def is_frozen() -> bool:
    """True when running as the single-file binary (PyInstaller sets ``sys.frozen``)."""
    return bool(getattr(sys, "frozen", False))


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
#: and the watchdog pings come from the Python child of the bootloader, not the main pid.
#: Source: systemd.exec(5) NotifyAccess=; measured in tests/integration/test_deb_systemd.py.
UNIT_NOTIFY_MAIN = "NotifyAccess=main\n"
UNIT_NOTIFY_BINARY = (
    "# The single-file binary notifies from the bootloader's child process (nvfabric.frozen).\n"
    "NotifyAccess=all\n"
)


def unit_for_binary(text: str) -> str:
    """The unit text ``nvfabric unit install`` writes from the single-file binary: its
    ``NotifyAccess=main`` line becomes ``NotifyAccess=all`` (a comment above says why); any
    other text is returned unchanged. Pure. (The Debian package keeps the unit as shipped and
    adds the same setting as a drop-in.)"""
    return text.replace(UNIT_NOTIFY_MAIN, UNIT_NOTIFY_BINARY, 1) if (
        "\n" + UNIT_NOTIFY_MAIN) in text else text


def fake_target(script: str) -> tuple[str, str]:
    """(program, simulated root) of the launcher at ``script`` (``DIR/bin/PROG``, reached
    directly or through a vendor-path link such as ``DIR/usr/bin/nvidia-imex``)."""
    real = os.path.realpath(script)
    return os.path.basename(real), os.path.dirname(os.path.dirname(real))


def main() -> None:
    """Run the CLI, or the fake daemon a simulated tree's launcher names (:data:`FAKE_FLAG`)."""
    if is_frozen():
        env = child_environment(dict(os.environ))
        os.environ.clear()
        os.environ.update(env)
    argv = sys.argv
    if len(argv) >= 3 and argv[1] == FAKE_FLAG:
        from .simulate import fakebin

        prog, root = fake_target(argv[2])
        sys.argv = [argv[2], *argv[3:]]
        sys.exit(fakebin.main(prog, argv[3:], root=root))
    from .cli import main as cli_main

    cli_main(prog_name="nvfabric")

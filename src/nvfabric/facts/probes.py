"""The single reads a prepared bring-up asks for before it starts (its ``checks``, collected by
:func:`nvfabric.app.collect.probes`): whether a binary is executable, which fabric daemons
already run, what ``nv-fabricmanager --version`` says, the GPUs' fabric states, and where a
vendor path under the root leads. Each read is independent of the others (they may run at
once) and raises nothing for its own failure: the failure is its answer.
"""

from __future__ import annotations

import os

from nvfabric.bringup.fabricmanager import parse_version
from nvfabric.effects import program
from nvfabric.effects.program import Ran
from nvfabric.facts import gpu, services
from nvfabric.facts.execinfo import INTERPRETER_HINT, exec_error, missing_interpreter
from nvfabric.model.health import GpuFabric
from nvfabric.model.hostpath import PathEscape, confined, under
from nvfabric.model.hostpath import problem as path_problem
from nvfabric.model.hostpath import program as program_path
from nvfabric.model.vocab import Service
from nvfabric.rules.nodefacts import PathSeen, RunningService, VersionRead


def executable(path: str) -> bool:
    """``path`` (already under the root) is a regular file this process may execute."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def running(root: str, wanted: tuple[Service, ...]) -> tuple[RunningService, ...]:
    """The ``wanted`` services (``fabricmanager``, ``imex``) running on the node under
    ``root`` (:func:`nvfabric.facts.services.read`: pid files, the process table, fabric
    manager's command port)."""
    if not wanted:
        return ()
    return tuple(RunningService(s.name, s.pid, s.detail) for s in services.read(root, wanted)
                 if s.running)


#: The most of ``<binary> --version``'s output read: a version is one line; this is the limit
#: of a one-value file (an attribute, ``sys/module/nvidia/version``), and a program printing
#: more is killed at it (``yes`` as ``--fm-bin`` once filled 18.6 GB).
VERSION_MAX_BYTES = 64 << 10


def version_output(binary: str, timeout_s: float = 10.0) -> Ran:
    """``<binary> --version`` through the probe door (:func:`nvfabric.effects.program.run`:
    argv only, stdout and stderr each at most :data:`VERSION_MAX_BYTES`, killed at a cap or
    after ``timeout_s`` seconds); each daemon module parses its output with its own pattern.
    Raises OSError when it cannot be executed, PathEscape for a link out of the root,
    Stopped."""
    return program.run([binary, "--version"], timeout_s, VERSION_MAX_BYTES, VERSION_MAX_BYTES)


def fm_version(binary: str, timeout_s: float = 10.0) -> VersionRead:
    """What ``<binary> --version`` says, parsed by
    :func:`nvfabric.bringup.fabricmanager.parse_version` (User Guide, "Startup Options");
    an exec failure, a link out of the root or a timeout is the ``error``, a cap met the
    ``probe_limit`` finding, never raised."""
    try:
        ran = version_output(binary, timeout_s)
    except PathEscape as err:
        return VersionRead(None, error=str(err))
    except OSError as err:
        return VersionRead(None, error=exec_error(binary, err),
                           hint=INTERPRETER_HINT if missing_interpreter(binary) else None)
    text = (ran.stdout + ran.stderr).decode("utf-8", "replace")
    if ran.timed_out:  # the binary is there and runs: it hangs, which is not binary_missing
        return VersionRead(None, text, error=ran.limit_text(), finding=ran.finding(
            f"run `{binary} --version` by hand: fabric manager answers at once; a hang is a "
            "broken installation or another program at that path (--fm-bin)"))
    if ran.limit is not None:
        return VersionRead(None, text, error=ran.limit_text(), finding=ran.finding(
            "run it by hand: a fabric manager prints one version line; this is not the "
            "vendor's nv-fabricmanager (or --fm-bin names another program)"))
    return VersionRead(parse_version(text), text)


#: The GPUs' fabric states and, when none could be read, why (the reader's error message).
GpuReading = tuple[tuple[GpuFabric, ...], "str | None"]


def gpu_reading(root: str) -> GpuReading:
    """The GPUs' fabric states (:func:`nvfabric.facts.gpu.read_health`: NVML, or the node's
    nvidia-smi) and, when it gave none, the message of its error finding (a hung or failing
    nvidia-smi, NVML unavailable); never raises for the reading's own failure."""
    health = gpu.read_health(root)
    why = next((f.message for f in health.findings if f.severity == "error"), None)
    return tuple(health.gpus), None if health.gpus else why


def path_seen(root: str, path: str, kind: str) -> PathSeen:
    """``path`` under ``root``: present as ``kind`` (``exec``: an executable regular file;
    ``file``; ``dir``), or where a link on it leads out of the root (not present then)."""
    if path_problem(path) is None:  # relative or with '..': not a question of links
        try:  # a program: the rule of every program run under a root (hostpath.program)
            program_path(under(root, path)) if kind == "exec" else confined(root, path)
        except ValueError:
            return PathSeen(False, os.path.realpath(under(root, path)))
    full = under(root, path)
    if kind == "dir":
        return PathSeen(os.path.isdir(full))
    if kind == "exec":
        return PathSeen(executable(full))
    return PathSeen(os.path.isfile(full))

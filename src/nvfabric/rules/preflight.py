"""The preflight of ``nvfabric run``: what refuses a start before anything is written, reset
or started, the same for ``run`` and ``run --dry-run``. Pure: a function of the node's
snapshot (:class:`nvfabric.rules.nodefacts.NodeFacts`, whose probes were read first) and of the
prepared processes and options; no I/O, no clock.

Checks, one finding per problem, in this order:

- a fabric manager already running on the node (``fabric_service_running``);
- each process's binary is an executable file (``nvlsm_missing``, ``binary_missing``);
- fabric manager's ``--version`` equals the loaded driver's (``version_mismatch``; fabric
  manager refuses to run otherwise: tests/data/corpus/logs/fm-version-mismatch-*.txt);
- nobody serves NVLSM's IPC socket yet (``sm_already_running``: one subnet manager per
  management port);
- the path keys of the effective fabric manager config (``config_invalid_value``);
- GPUs already registered where a fabric manager start needs a GPU reset first, or a fabric
  state that cannot be read there (unknown is not "not registered"; ``restart_needs_gpu_reset``,
  RUN.md R04, R09).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nvfabric.model import versions
from nvfabric.model.commandline import THE_NODE, HintContext, command_line
from nvfabric.model.findings import Finding
from nvfabric.model.health import summarise_gpus
from nvfabric.rules.nodefacts import NodeFacts, RunningService, VersionRead

#: The ``nvfabric status`` name of each fabric daemon that ``run`` would start, and what it is.
_RUNNING_WHAT = {"fabricmanager": "fabric manager", "imex": "nvidia-imex"}


@dataclass(frozen=True)
class Preflight:
    """What preflight found: ``findings`` (errors refuse the start; info is reported) and
    ``registered``: GPUs are already registered with the NVLink fabric on a node where fabric
    manager may not start again without a GPU reset (R04; False when that does not apply)."""

    findings: tuple[Finding, ...]
    registered: bool = False

    @property
    def refused(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


@dataclass(frozen=True)
class Process:
    """What preflight needs of one prepared process: its service ``name``, ``binary``
    (argv[0], under the root), the ``ready_socket`` it will serve and whether a restart needs
    a GPU reset."""

    name: str
    binary: str
    ready_socket: str | None = None
    restart_needs_gpu_reset: bool = False




def service_running(running: Iterable[RunningService], services: Iterable[str],
                    root: str = "/") -> tuple[Finding, ...]:
    """``fabric_service_running`` (error) for each of ``services`` found running on the node
    under ``root``, whoever started it (another ``nvfabric run`` with another
    ``--state-dir``, a vendor unit, a hand start)."""
    wanted = set(services)
    out = []
    for state in running:
        if state.name not in wanted:
            continue
        what = _RUNNING_WHAT.get(state.name, state.name)
        pid = f"pid {state.pid}" if state.pid is not None else "pid unknown"
        out.append(Finding(
            "fabric_service_running", "error",
            f"{what} is already running on this node ({pid}; {state.detail}): nvfabric "
            "neither resets the GPUs nor starts a second one",
            f"stop the running {what} first (its unit, or the nvfabric run that started it: "
            f"`{command_line('status', root=root)}` shows it); one per node",
            {"service": state.name, "pid": state.pid}))
    return tuple(out)


def binary_missing(proc: Process, driver: str | None,
                   hints: HintContext = THE_NODE) -> Finding:
    """The binary of ``proc`` is not an executable file."""
    if proc.name == "nvlsm":
        return Finding(
            "nvlsm_missing", "error",
            f"NVLSM is not installed at {proc.binary}; an NVLink 5 baseboard needs it before "
            "fabric manager", "install the nvlsm package of the same CUDA release as the "
            f"driver (`{hints.nvfabric('fetch')}`), or pass --nvlsm-bin", {"path": proc.binary})
    return Finding(
        "binary_missing", "error", f"{proc.name} is not installed at {proc.binary} (or not "
        "executable)", f"install it (version {driver} for fabric manager, "
        "to match the driver) or pass its path", {"service": proc.name, "path": proc.binary})


def fm_version(binary: str, driver: str | None, read: VersionRead,
               hints: HintContext = THE_NODE) -> list[Finding]:
    """``nv-fabricmanager --version`` against the loaded driver, compared as fetch does
    (numeric per field: 550.90.7 is 550.90.07), both printed as published."""
    if read.finding is not None:
        return [read.finding]
    if read.error is not None:
        hint = read.hint or "check the fabric manager installation"
        return [Finding("binary_missing", "error", f"cannot run {binary} --version: {read.error}",
                        hint, {"path": binary})]
    version = read.version
    if version is None:
        first = read.text.strip().splitlines()[:1]
        return [Finding("version_mismatch", "error",
                        f"cannot read fabric manager's version from `{binary} --version`"
                        + (f" ({first[0][:200]})" if first else ""),
                        "reinstall fabric manager of the driver's exact version",
                        {"fm_version": None, "driver_version": driver})]
    if driver is not None and version != driver and not versions.same(version, driver):
        return [Finding("version_mismatch", "error",
                        f"fabric manager {version} does not match the loaded driver {driver}; "
                        "fabric manager refuses to run", f"install fabric manager {driver} "
                        f"exactly (or the driver {version}); `{hints.nvfabric('fetch')}` "
                        "resolves it",
                        {"fm_version": version, "driver_version": driver})]
    return []


def sm_already_running(socket: str) -> Finding:
    """A process already serves NVLSM's IPC socket: another subnet manager."""
    return Finding(
        "sm_already_running", "error",
        f"a process already serves {socket}: another subnet manager owns "
        "the management port", "stop the other nvlsm/opensm (vendor start script, a "
        "hand-made unit) first; one owner per management port", {"socket": socket})


def reset_example(hints: HintContext, smi: str = "nvidia-smi") -> str:
    """``nvfabric run [--root R] --gpu-reset-command 'SMI -r'``, quoted: the run that resets
    the GPUs first. ``smi``: the node's nvidia-smi as this machine runs it (the reset program
    is looked up on this machine's PATH, never under the root: on another root, the tree's
    own, e.g. ``R/usr/bin/nvidia-smi``)."""
    return hints.nvfabric("run", options=(("--gpu-reset-command", f"{smi} -r"),))


def registered(summary: str, reset_argv: tuple[str, ...] | None,
               why: str | None = None, hints: HintContext = THE_NODE,
               smi: str = "nvidia-smi") -> Finding:
    """R04 at start: GPUs registered before this run (a fabric manager ran since the last
    GPU reset), or, with ``why`` (the reader's error), a fabric state that cannot be read,
    so that it is unknown: an error without ``--gpu-reset-command``, else what will be done
    (info; after the reset R09 checks the state). ``hints``/``smi``: :func:`reset_example`."""
    again = f"`{reset_example(hints, smi)}`"
    fields = {"services": "fabricmanager", "gpus": summary, **({"reason": why} if why else {})}
    state = (f"GPUs are already registered with the NVLink fabric ({summary})" if why is None
             else f"the GPUs' fabric state cannot be read ({why})")
    if reset_argv is not None:
        checked = "" if why is None else ", and the state is checked after it"
        return Finding(
            "restart_needs_gpu_reset", "info",
            f"{state}: `{shlex.join(reset_argv)}` resets them before fabric manager "
            f"starts{checked}", "CUDA clients must be stopped: a GPU in use cannot be reset",
            fields)
    if why is None:
        return Finding(
            "restart_needs_gpu_reset", "error",
            f"{state}: a fabric manager ran before; starting it again on H100 and later "
            "without a GPU reset breaks NVLink SHARP (NCCL 'invalid argument'), so nvfabric "
            "does not start it",
            f"stop CUDA clients, then run again with the GPU reset: {again} (or your reset "
            "procedure), or reboot the node", fields)
    return Finding(
        "restart_needs_gpu_reset", "error",
        f"{state}: whether they are already registered with the NVLink fabric is unknown, "
        "and starting fabric manager on registered GPUs (H100 and later) without a GPU reset "
        "breaks NVLink SHARP, so nvfabric does not start it",
        f"find why the state cannot be read (`nvidia-smi -q`{hints.on_host()}, `dmesg` for Xid "
        f"errors{hints.on_host()}); then run again, with the GPU reset if a fabric manager "
        f"ran: {again}, or reboot the node", fields)


def reset_missing(reset_argv: tuple[str, ...], registered_now: bool,
                  hints: HintContext = THE_NODE, smi: str = "nvidia-smi") -> Finding:
    """``--gpu-reset-command`` names a program that cannot be run (not on PATH, not an
    executable file): an error when GPUs are registered now (the reset runs before fabric
    manager and would fail), else a warning (a restart after they register would fail).
    The program is looked up on this machine (its PATH), never under the root: the hint names
    the node's own (:func:`reset_example`)."""
    command = shlex.join(reset_argv)
    hint = "give the reset program's absolute path, or one on PATH, in --gpu-reset-command"
    if not hints.host:
        hint += (f" (looked up on this machine, not under the root): "
                 f"`{reset_example(hints, smi)}`")
    if registered_now:
        return Finding(
            "restart_needs_gpu_reset", "error",
            f"GPUs are registered with the NVLink fabric and must be reset before fabric "
            f"manager starts, but the reset command `{command}` cannot run: "
            f"{reset_argv[0]!r} is not an executable file (nor found on PATH)",
            hint, {"services": "fabricmanager", "command": list(reset_argv)})
    return Finding(
        "restart_needs_gpu_reset", "warning",
        f"the reset command `{command}` cannot run: {reset_argv[0]!r} is not an executable "
        "file (nor found on PATH); a restart after the GPUs register would fail at it",
        hint, {"services": "fabricmanager", "command": list(reset_argv)})


def preflight(facts: NodeFacts, processes: Sequence[Process], *, driver: str | None,
              needs_reset: bool, reset_argv: tuple[str, ...] | None,
              reset_found: bool = True, hints: HintContext | None = None,
              smi: str = "nvidia-smi") -> Preflight:
    """The checks of the module docstring over ``facts`` (probed for ``processes``: see
    :func:`nvfabric.bringup.prepared.Prepared.checks`). ``driver``: the plan's driver
    version; ``needs_reset``: a fabric manager restart needs a GPU reset on this node;
    ``reset_found``: the program of ``reset_argv`` can be run (read by the caller,
    :func:`nvfabric.facts.fs.program_path`); ``hints``: the node the hints type their
    commands for (default: the facts' root, nothing else known), ``smi`` its nvidia-smi as
    this machine runs it (:func:`reset_example`)."""
    hints = hints if hints is not None else HintContext(facts.root)
    problems = list(service_running(
        facts.running, [p.name for p in processes if p.name == "fabricmanager"], hints.root))
    missing = set()
    for proc in processes:
        if not facts.executables.get(proc.binary, False):
            missing.add(proc.binary)
            problems.append(binary_missing(proc, driver, hints))
    for proc in processes:
        if proc.name == "fabricmanager" and proc.binary not in missing:
            problems += fm_version(proc.binary, driver,
                                   facts.fm_versions.get(proc.binary, VersionRead(None)), hints)
        if proc.ready_socket and facts.sockets.get(proc.ready_socket, False):
            problems.append(sm_already_running(proc.ready_socket))
    problems += facts.config_findings
    is_registered = False
    if needs_reset and any(p.restart_needs_gpu_reset for p in processes):
        summary = summarise_gpus(facts.gpus or ())
        is_registered = summary.registered
        r04 = None
        if is_registered:
            r04 = registered(summary.summary, reset_argv, hints=hints, smi=smi)
        elif not facts.gpus and facts.gpu_error is not None:
            # unknown is not "not registered": taken as registered, as R09 takes a state that
            # cannot be read after a reset (the reset, when given, runs and is checked)
            is_registered = True
            r04 = registered("fabric state unreadable", reset_argv, why=facts.gpu_error,
                             hints=hints, smi=smi)
        if reset_argv is not None and not reset_found:
            # the reset it would run cannot run: said instead of "it resets them"
            r04 = reset_missing(reset_argv, is_registered, hints, smi)
        if r04 is not None:
            problems.append(r04)
    return Preflight(tuple(problems), is_registered)

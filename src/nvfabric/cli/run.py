"""``nvfabric run``: bring the fabric of this node up and keep it up (the main job).

Plan -> refuse on blockers -> build the unit (services/unit.py) -> preflight (binaries,
fabric manager version = driver version, config paths, a second subnet manager) -> write the
effective config -> supervise (supervisor.py) until SIGTERM or a failure.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import click

from nvfabric.artifacts import versions
from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.bringup import nvlsm, vendor
from nvfabric.bringup.spec import Unit, already_running
from nvfabric.bringup.unit import RunConfig, build, environ_items
from nvfabric.cli import listen
from nvfabric.cli.render import (
    Seconds,
    arch_option,
    console,
    guarded,
    json_option,
    os_error,
    print_findings,
    print_json,
    root_option,
)
from nvfabric.facts.execinfo import INTERPRETER_HINT, exec_error, missing_interpreter
from nvfabric.model import keyvalue
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import confined, under_root
from nvfabric.model.words import plural
from nvfabric.observe.hook import attach
from nvfabric.observe.unitstate import NOTHING_TO_RUN, of_supervisor
from nvfabric.rules.plan import Plan
from nvfabric.supervisor import (
    LOCK_FILE,
    READY_FILE,
    GpuCheck,
    Log,
    Outcome,
    Policy,
    RunLock,
    Supervisor,
    acquire_run_lock,
    clear_stale_ready,
    ensure_dir,
    not_a_directory,
    notify_nothing_to_start,
    printable,
    run_lock_holder,
    run_result,
    socket_listening,
    wait_for_stop,
)


def gpu_check(root: str) -> GpuCheck:
    """Read the GPUs' fabric state through the health module (NVML on a real host, the node's
    nvidia-smi on a simulated root) and summarise it for readiness."""
    from nvfabric.facts import gpu as live

    gpus = live.read(root)
    if not gpus:
        return GpuCheck(False, False, "no GPU fabric state", "no GPU fabric state could be read")
    counts = Counter(str(g.state) for g in gpus)
    summary = f"{plural(len(gpus), 'GPU')}: " + ", ".join(
        f"{k} x{v}" for k, v in sorted(counts.items()))
    supported = [g for g in gpus if g.state != "not_supported"]
    if not supported:
        return GpuCheck(False, False, summary, supported=False)
    done = [g for g in supported if g.state == "completed"]
    bad = [g for g in done if (g.status or "").lower() not in ("success", "")]
    findings: tuple[Finding, ...] = ()
    if bad:
        findings = (Finding(
            "registration_error", "warning",
            f"{plural(len(bad), 'GPU')} completed fabric registration with an error status: "
            + "; ".join(f"{g.label}: {g.status}" for g in bad),
            "run `nvfabric status` for the per-GPU verdict", {"count": len(bad)}),)
    return GpuCheck(len(done) == len(supported), bool(done), summary, findings=findings,
                    progress=(len(done), len(supported)),
                    registered_gpus=tuple(g.label for g in done))


def _generations(root: str, arch: str | None) -> set[str]:
    from nvfabric.facts.inventory import collect
    from nvfabric.rules.products import lookup

    out = set()
    for gpu in collect(root, arch).gpus:
        product = lookup(gpu.vendor, gpu.device)
        if product:
            out.add(product.generation)
    return out


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


def preflight(unit: Unit, p: Plan, *, root: str, needs_reset: bool,
              reset_argv: tuple[str, ...] | None) -> Preflight:
    """Checks before any start, the same for ``run`` and ``run --dry-run`` (host access: stat,
    ``nv-fabricmanager --version``, a connect to NVLSM's socket, the GPUs' fabric state, a
    fabric manager already running: :func:`nvfabric.bringup.spec.already_running`).
    One finding per problem; nothing is started, written or reset."""
    problems: list[Finding] = list(already_running(
        root, tuple(s.name for s in unit.services if s.name == "fabricmanager")))
    for spec in unit.services:
        binary = spec.argv[0]
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            continue
        if spec.name == "nvlsm":
            problems.append(Finding(
                "nvlsm_missing", "error",
                f"NVLSM is not installed at {binary}; an NVLink 5 baseboard needs it before "
                "fabric manager", "install the nvlsm package of the same CUDA release as the "
                "driver (`nvfabric fetch`), or pass --nvlsm-bin", {"path": binary}))
        else:
            problems.append(Finding(
                "binary_missing", "error", f"{spec.name} is not installed at {binary} (or not "
                "executable)", f"install it (version {p.driver_version} for fabric manager, "
                "to match the driver) or pass its path", {"service": spec.name, "path": binary}))
    for spec in unit.services:
        if spec.name == "fabricmanager" and not any(f.fields.get("path") == spec.argv[0]
                                                    for f in problems):
            problems += _check_fm_version(spec.argv[0], p.driver_version)
        if spec.ready_socket and socket_listening(spec.ready_socket):
            problems.append(Finding(
                "sm_already_running", "error",
                f"a process already serves {spec.ready_socket}: another subnet manager owns "
                "the management port", "stop the other nvlsm/opensm (vendor start script, a "
                "hand-made unit) first; one owner per management port",
                {"socket": spec.ready_socket}))
    for planned in unit.files:
        if os.path.basename(planned.path) == "fabricmanager.cfg":
            eff = fmcfg.Effective(keyvalue.parse(planned.content), planned.content)
            problems += fmcfg.check_paths(eff)
    registered = False
    if needs_reset and any(s.restart_needs_gpu_reset for s in unit.services):
        check = gpu_check(root)
        registered = check.registered
        if registered:
            problems.append(_registered(check, reset_argv))
    return Preflight(tuple(problems), registered)


def _registered(check: GpuCheck, reset_argv: tuple[str, ...] | None) -> Finding:
    """R04 at start: GPUs registered before this run (a fabric manager ran since the last
    GPU reset): an error without ``--gpu-reset-command``, else what will be done (info)."""
    fields = {"services": "fabricmanager", "gpus": check.summary}
    if reset_argv is None:
        return Finding(
            "restart_needs_gpu_reset", "error",
            f"GPUs are already registered with the NVLink fabric ({check.summary}): a fabric "
            "manager ran before; starting it again on H100 and later without a GPU reset "
            "breaks NVLink SHARP (NCCL 'invalid argument'), so nvfabric does not start it",
            "stop CUDA clients, then run again with --gpu-reset-command 'nvidia-smi -r' (or "
            "your reset procedure), or reboot the node", fields)
    return Finding(
        "restart_needs_gpu_reset", "info",
        f"GPUs are already registered with the NVLink fabric ({check.summary}): "
        f"`{shlex.join(reset_argv)}` resets them before fabric manager starts",
        "CUDA clients must be stopped: a GPU in use cannot be reset", fields)


def _check_fm_version(binary: str, driver: str | None) -> list[Finding]:
    """``nv-fabricmanager --version`` against the loaded driver, compared as fetch does
    (numeric per field: 550.90.7 is 550.90.07), both printed as published."""
    try:
        version, text = fm.probe_version(binary)
    except subprocess.TimeoutExpired as err:
        return [Finding("binary_missing", "error", f"cannot run {binary} --version: {err}",
                        "check the fabric manager installation", {"path": binary})]
    except OSError as err:
        return [Finding("binary_missing", "error",
                        f"cannot run {binary} --version: {exec_error(binary, err)}",
                        INTERPRETER_HINT if missing_interpreter(binary) else
                        "check the fabric manager installation", {"path": binary})]
    if version is None:
        first = text.strip().splitlines()[:1]
        return [Finding("version_mismatch", "error",
                        f"cannot read fabric manager's version from `{binary} --version`"
                        + (f" ({first[0][:200]})" if first else ""),
                        "reinstall fabric manager of the driver's exact version",
                        {"fm_version": None, "driver_version": driver})]
    if driver is not None and version != driver and not versions.same(version, driver):
        return [Finding("version_mismatch", "error",
                        f"fabric manager {version} does not match the loaded driver {driver}; "
                        "fabric manager refuses to run", f"install fabric manager {driver} "
                        f"exactly (or the driver {version}); `nvfabric fetch` resolves it",
                        {"fm_version": version, "driver_version": driver})]
    return []


def _restart_checks(unit: Unit, p: Plan) -> list[Finding]:
    """What is checked again before an in-process restart (the supervisor checks the
    binaries itself): fabric manager's version against the loaded driver, as at the start."""
    return [f for spec in unit.services if spec.name == "fabricmanager"
            for f in _check_fm_version(spec.argv[0], p.driver_version)]


def _plain(findings: Sequence[Finding]) -> list[Finding]:
    """Findings with control characters escaped, for the human listing (rich escapes the
    markup): messages may quote a daemon's output."""
    return [replace(f, message=printable(f.message), hint=printable(f.hint)) for f in findings]


def _emit(result: str, code: int, findings: Sequence[Finding], *, p: Plan, as_json: bool,
          dry_run: bool, title: str = "", unit: Unit | None = None,
          outcome: Outcome | None = None, vendor_files: vendor.Resolved | None = None
          ) -> NoReturn:
    """Print the outcome (the one JSON shape, :func:`nvfabric.supervisor.run_result`, plus
    ``vendor_files``: which file run uses and where it came from, or the findings with their
    hints) and exit with ``code``."""
    if as_json:
        print_json(run_result(
            result, code, p.fabric, findings, dry_run=dry_run,
            processes=unit.services if unit else (), files=unit.files if unit else (),
            ready_after_s=outcome.ready_after_s if outcome else None,
            restarts=outcome.restarts if outcome else 0, reasons=p.reasons,
            vendor_files=vendor_files.to_json() if vendor_files is not None else ()))
    elif findings and title:
        print_findings(console(stderr=True), _plain(findings), title)
    sys.exit(code)


def _dry_run_listing(unit: Unit, refused: bool = False) -> None:
    """The human ``--dry-run`` listing: argv in start order, notes, and the files ``run``
    writes with their content; when the preflight refuses, no file (``run`` would write
    none)."""
    out = click.echo
    out(f"fabric {unit.fabric}: {plural(len(unit.services), 'process')}, in start order")
    for s in unit.services:
        out(printable(f"  {s.name}: {shlex.join(s.argv)}"))
        if s.ready_socket:
            out(printable(f"    ready when the socket {s.ready_socket} exists"))
        if s.ready_gpus:
            out("    ready when every GPU's fabric state is completed")
    for note in unit.notes:
        out(printable(f"  note: {note}"))
    if refused:
        out("refused: nothing would be written or started")
    for f in () if refused else unit.files:
        out(printable(f"file {f.path} (mode {f.mode:o}):"))
        for line in f.content.splitlines():
            out(printable(f"  | {line}"))


def _already_running(pid: int, lock: str) -> Finding:
    return Finding(
        "already_running", "error",
        f"nvfabric run is already running on this node (pid {pid or 'unknown'}, lock {lock}); "
        "nothing was started or written",
        "one nvfabric run per node: stop the running one first (systemctl stop, or kill -TERM "
        "its pid); `nvfabric status` shows the fabric it keeps up",
        {"pid": pid or None, "lock": lock})


def _state_dir(root: str, state_dir: str) -> str:
    """The state directory under the root; exit 2 naming the path when something other than
    a directory is in the way."""
    state = under_root(root, state_dir)
    blocker = not_a_directory(state)
    if blocker is not None:
        raise usage_error(
            f"--state-dir: {blocker} exists and is not a directory (state directory {state})",
            f"remove {blocker} or pass --state-dir DIR")
    return state


def _clear_stale_unlocked(root: str, state_dir: str) -> None:
    """R10 for a run refused before it takes the lock (plan blockers): a readiness file that
    no live run holds the lock for is removed, so it never outlives the run that wrote it.
    Best effort: a state directory that is not valid or readable is left to the checks that
    follow (they report it)."""
    try:
        state = confined(root, check_path(state_dir, "--state-dir"), "--state-dir")
        if run_lock_holder(state) is None and clear_stale_ready(state) is not None:
            Log().say(f"removed the stale readiness file {state}/{READY_FILE} (no run holds "
                      "the lock)")
    except (OSError, ValueError):
        return


def _take_lock(state: str, dry_run: bool) -> tuple[RunLock | None, Finding | None]:
    """``run``: the run lock, taken before anything is written or reset (the state directory
    is created for it); ``--dry-run``: only who holds it. A Finding when another run does."""
    lock_path = os.path.join(state, LOCK_FILE)
    existed = os.path.isdir(state)
    try:
        if dry_run:
            lock, holder = None, run_lock_holder(state)
        else:
            lock, holder = acquire_run_lock(state)
            if not existed:
                Log().say(f"created state directory {state} (mode 0700)")
    except OSError as err:
        finding, code = os_error(err, "cannot take the run lock", lock_path)
        raise NvfabricError(finding, code) from None
    return lock, None if holder is None else _already_running(holder, lock_path)


def _stay() -> None:
    """Block until SIGTERM or SIGINT (a DaemonSet pod on a node with nothing to manage)."""
    wait_for_stop("--stay: waiting for SIGTERM")
    Log().say("stopped")


@click.command("run")
@root_option
@arch_option
@json_option
@click.option("--dry-run", is_flag=True, help="Print the argv and files, start nothing.")
@click.option("--restart", type=click.Choice(["never", "on-failure"]), default="never",
              show_default=True, help="Restart the unit in-process after a failure.")
@click.option("--stay", is_flag=True,
              help="On a node with nothing to manage, keep running until SIGTERM.")
@click.option("--fm-set", "fm_sets", multiple=True, metavar="KEY=VALUE",
              help="Override a fabricmanager.cfg key (repeatable).")
@click.option("--fabric-mode", type=click.Choice(["0", "1", "2"]), default=None,
              help="FABRIC_MODE: 0 bare metal, 1 shared NVSwitch, 2 vGPU.")
@click.option("--gpu-reset-command", default=None, metavar="CMD",
              help="Command (split like a shell, run without one) that resets the GPUs before "
                   "fabric manager is restarted after GPUs registered (H100 and later).")
@click.option("--gpu-reset-timeout", type=Seconds(0.01), default=300.0,
              show_default=True, help="Seconds the GPU reset command may take; then it is "
              "killed and nothing is started.")
@click.option("--socket-timeout", type=Seconds(0.01), default=60.0, show_default=True,
              help="Seconds to wait for NVLSM's IPC socket.")
@click.option("--ready-timeout", type=Seconds(0.01), default=300.0, show_default=True,
              help="Seconds after which GPUs still registering are reported.")
@click.option("--grace", type=Seconds(0.0), default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL when stopping a service.")
@click.option("--restart-delay", type=Seconds(0.0), default=1.0, show_default=True,
              help="First restart delay; doubles each time.")
@click.option("--restart-max-delay", type=Seconds(0.0), default=30.0, show_default=True,
              help="Cap of the restart delay.")
@click.option("--restart-limit-burst", type=click.IntRange(0), default=5, show_default=True,
              help="With --restart on-failure: this many starts within --restart-limit-interval "
                   "end a crash loop (like systemd's StartLimitBurst; 0: no limit).")
@click.option("--restart-limit-interval", type=Seconds(0.0), default=300.0,
              show_default=True, help="Seconds of the restart limit's window.")
@click.option("--state-dir", default="/run/nvfabric", show_default=True,
              help="Where the effective config and the readiness file are written.")
@click.option("--fm-bin", default=fm.BINARY, show_default=True)
@click.option("--fm-config", default=fm.CONFIG, show_default=True,
              help="The shipped fabricmanager.cfg (read, never edited).")
@click.option("--nvlsm-bin", default=nvlsm.BINARY, show_default=True)
@click.option("--nvlsm-config", default=nvlsm.CONFIG, show_default=True)
@click.option("--nvlsm-pid-file", default=nvlsm.PID_FILE, show_default=True)
@click.option("--fm-sm-socket", default=None,
              help=f"NVLSM's IPC socket [default: FM_SM_IPC_INTERFACE, else {nvlsm.SOCKET}]")
@click.option("--imex-owner", type=click.Choice(["host", "dra", "slurm", "none"]), default=None,
              help="GB200/GB300: who runs IMEX here [default: detected; nvfabric when none].")
@click.option("--imex-bin", default="/usr/bin/nvidia-imex", show_default=True)
@click.option("--imex-ctl", default="/usr/bin/nvidia-imex-ctl", show_default=True)
@click.option("--imex-config", default="/etc/nvidia-imex/config.cfg", show_default=True,
              help="The shipped IMEX config.cfg (read, never edited).")
@click.option("--imex-peers", default=None, metavar="FILE",
              help="IMEX node list [default: IMEX_NODE_CONFIG_FILE of the shipped config].")
@click.option("--imex-local-address", multiple=True, metavar="ADDR",
              help="This node's addresses, instead of reading its interfaces (repeatable).")
@click.option("--imex-ctl-timeout", type=Seconds(0.05, 120), default=5.0,
              show_default=True, help="Hard timeout of each nvidia-imex-ctl call, seconds.")
@listen.options
@guarded
def run_cmd(root: str, arch: str | None, as_json: bool, dry_run: bool, restart: str, stay: bool,
            fm_sets: tuple[str, ...], fabric_mode: str | None, gpu_reset_command: str | None,
            gpu_reset_timeout: float, socket_timeout: float, ready_timeout: float, grace: float,
            restart_delay: float,
            restart_max_delay: float, restart_limit_burst: int, restart_limit_interval: float,
            state_dir: str, fm_bin: str, fm_config: str,
            nvlsm_bin: str, nvlsm_config: str, nvlsm_pid_file: str,
            fm_sm_socket: str | None, imex_owner: str | None, imex_bin: str, imex_ctl: str,
            imex_config: str, imex_peers: str | None, imex_local_address: tuple[str, ...],
            imex_ctl_timeout: float, listen_at: str | None, health_interval: float,
            log_format: str) -> None:
    """Bring the fabric up (NVLSM, fabric manager; IMEX on GB200/GB300 trays) and supervise it
    as one unit."""
    from nvfabric.facts.inventory import collect
    from nvfabric.rules.plan import plan

    address = listen.check(listen_at, log_format)
    serve = functools.partial(listen.start, None if dry_run else address, root, health_interval)
    p = plan(collect(root, arch))
    emit = functools.partial(_emit, p=p, as_json=as_json, dry_run=dry_run)
    if p.blocked:
        if not dry_run:
            _clear_stale_unlocked(root, state_dir)
        emit("blocked", 1, list(p.blockers), title="blocked: nothing was started")
    for path, what in ((state_dir, "--state-dir"), (fm_bin, "--fm-bin"),
                       (fm_config, "--fm-config"), (nvlsm_bin, "--nvlsm-bin"),
                       (nvlsm_config, "--nvlsm-config"), (nvlsm_pid_file, "--nvlsm-pid-file"),
                       (fm_sm_socket, "--fm-sm-socket"), (imex_bin, "--imex-bin"),
                       (imex_ctl, "--imex-ctl"), (imex_config, "--imex-config")):
        if path is not None:
            try:
                check_path(path, what)
            except ValueError as err:
                raise usage_error(str(err), "host paths are absolute, resolved under --root, "
                                  "and may not leave it") from None

    try:  # the state directory (lock, configs, ready file) may not leave the root by a link
        confined(root, state_dir, "--state-dir")
    except ValueError as err:
        raise usage_error(str(err), "host paths are resolved under --root and may not leave "
                          "it, also through a symbolic link") from None

    def hold() -> RunLock | None:
        """One run per node: the lock (``--dry-run``: who holds it), before anything is
        written, reset or started and after every pure check. Its descriptor is never closed:
        the lock lasts as long as this process, however it ends."""
        state = _state_dir(root, state_dir)
        lock, busy = _take_lock(state, dry_run)
        if busy is not None:
            emit("refused", 1, [busy], title="refused: another nvfabric run is active")
        if lock is not None:  # R10: ours now; a ready file left by a run that is gone goes
            try:
                stale = clear_stale_ready(state)
            except OSError as err:
                raise usage_error(f"cannot remove the stale readiness file in {state}: "
                                  f"{err.strerror or err}", "check --state-dir") from None
            if stale is not None:
                Log().say(f"removed the stale readiness file {state}/{READY_FILE} (run pid "
                          f"{stale or 'unknown'} is gone)")
        return lock

    from nvfabric.cli.imex import _read_text_file

    # the node list file is read like `imex config --peers` reads it (exit 2 when it is
    # unreadable or not text), before the lock, on every fabric: a mistyped path in a unit
    # shared by a fleet is said, not ignored where IMEX does not run
    peers_text = None if imex_peers is None else _read_text_file(imex_peers, "--imex-peers")
    if p.fabric == "mnnvl":
        # ---- MNNVL / IMEX path (issue 6): nvfabric.bringup.mnnvl. Never fabric manager. ----
        from nvfabric.bringup import imexd as imex_service
        from nvfabric.bringup import mnnvl as bringup
        from nvfabric.rules.diagnose import Classifier

        hold()
        serve()
        imex_opts = bringup.ImexRunOptions(
            root=root, state_dir=state_dir, owner=imex_owner,
            paths=imex_service.ImexPaths(imex_bin, imex_ctl, imex_config),
            peers_file=imex_peers, local_addresses=imex_local_address,
            peers_text=peers_text,
            ctl_timeout_s=imex_ctl_timeout, grace_s=grace)
        imex_policy = Policy(restart=restart, backoff_base_s=restart_delay,
                             backoff_cap_s=restart_max_delay, ready_timeout_s=ready_timeout,
                             start_limit_burst=restart_limit_burst,
                             start_limit_interval_s=restart_limit_interval)
        sys.exit(bringup.run(p, imex_opts, dry_run=dry_run, as_json=as_json, stay=stay,
                             policy=imex_policy, classifier=lambda name: Classifier("mnnvl")))
    reset_argv: tuple[str, ...] | None = None
    if gpu_reset_command is not None:
        try:
            reset_argv = tuple(shlex.split(gpu_reset_command))
        except ValueError as err:
            raise usage_error(f"--gpu-reset-command: {err}") from None
        if not reset_argv or any("\x00" in a for a in reset_argv):
            raise usage_error("--gpu-reset-command: empty or contains NUL")
    try:
        sets = fmcfg.parse_sets(fm_sets)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    vend = _vendor_files(root, p, sets, {"--fm-bin": ("fm_bin", fm_bin),
                                         "--fm-config": ("fm_config", fm_config),
                                         "--nvlsm-bin": ("nvlsm_bin", nvlsm_bin),
                                         "--nvlsm-config": ("nvlsm_config", nvlsm_config)})
    if vend.findings:  # R08: a vendor package is missing: a fault of the node
        emit("refused", 1, list(vend.findings), vendor_files=vend,
             title="refused: a vendor package is missing; nothing was started")
    fm_bin = vend.paths.get("--fm-bin", fm_bin)
    fm_config = vend.paths.get("--fm-config", fm_config)
    nvlsm_bin = vend.paths.get("--nvlsm-bin", nvlsm_bin)
    nvlsm_config = vend.paths.get("--nvlsm-config", nvlsm_config)
    try:
        cfg = RunConfig(
            root=root, state_dir=state_dir,
            fm=fm.FabricManagerPaths(fm_bin, fm_config),
            nvlsm=nvlsm.NvlsmPaths(nvlsm_bin, nvlsm_config, nvlsm_pid_file),
            socket=fm_sm_socket, fm_sets=tuple(sets.items()),
            environ=environ_items(os.environ), fabric_mode=fabric_mode, grace_s=grace)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    emit = functools.partial(emit, vendor_files=vend)
    if p.fabric == "none":
        if stay:  # a DaemonSet pod that stays: still one per node
            hold()
            serve()
            attach(lambda: NOTHING_TO_RUN)
        why = p.reasons[-1] if p.reasons else "no fabric service applies"
        if not as_json:
            Log().say(f"fabric none: nothing to start ({why})")
        if not dry_run:
            notify_nothing_to_start(f"fabric none: nothing to start ({why})")
        if stay and not dry_run:
            _stay()
        emit("nothing_to_do", 0, [])
    shipped_path = cfg.resolve(fm_config)
    try:
        shipped = fmcfg.read_shipped(shipped_path)
    except fmcfg.ShippedConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    except (OSError, UnicodeDecodeError) as err:
        problem = (err.strerror or str(err)) if isinstance(err, OSError) else "not UTF-8 text"
        raise NvfabricError(Finding(
            "input_unreadable", "error",
            f"cannot read the shipped fabric manager config {shipped_path}: {problem}",
            "install the fabric manager package, or pass --fm-config"), exit_code=2) from None
    needs_reset = fm.needs_gpu_reset(_generations(root, arch))
    try:
        unit = build(p, cfg, shipped, needs_reset=needs_reset)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    except ValueError as err:
        raise usage_error(str(err)) from None
    unit = replace(unit, notes=(*unit.notes, *vend.notes()))
    hold()
    pre = preflight(unit, p, root=root, needs_reset=needs_reset, reset_argv=reset_argv)
    if dry_run:
        if not as_json:
            _dry_run_listing(unit, pre.refused)
        emit("refused" if pre.refused else "would_start", 1 if pre.refused else 0,
             list(pre.findings), unit=unit, title="preflight would refuse to start"
             if pre.refused else "preflight")
    if pre.refused:
        emit("refused", 1, list(pre.findings), unit=unit, title="preflight: nothing was started")
    serve()
    outcome = _supervise(unit, p, cfg, pre, restart, reset_argv, socket_timeout, ready_timeout,
                         restart_delay, restart_max_delay, gpu_reset_timeout,
                         (restart_limit_burst, restart_limit_interval))
    findings = [*outcome.findings, *pre.findings]
    if not as_json and outcome.exit_code:
        # Each finding was logged with its hint when it happened; one closing line (no rich
        # listing: importing rich would delay the exit that restarts the unit by ~80 ms).
        Log().say(f"run failed: {findings[0].code}: {findings[0].message}" if findings
                  else "run failed")
    emit(outcome.reason, outcome.exit_code, findings, unit=unit, outcome=outcome)


def _vendor_files(root: str, p: Plan, sets: dict[str, str],
                  options: dict[str, tuple[str, str]]) -> vendor.Resolved:
    """Where fabric manager's (and NVLSM's) files come from (:mod:`nvfabric.bringup.vendor`):
    ``options`` maps each option to its click parameter name and value; only a value the
    operator typed counts as typed. When the topology directory comes from an install, the
    fabric manager keys that point at the missing vendor directory (TOPOLOGY_FILE_PATH,
    DATABASE_PATH) are set to it in ``sets``, unless the operator set them. A typed path that
    does not exist is exit 2."""
    ctx = click.get_current_context()
    typed = {opt: (value if (src := ctx.get_parameter_source(name)) is not None
                   and src.name != "DEFAULT" else None)
             for opt, (name, value) in options.items()}
    topology = None if "TOPOLOGY_FILE_PATH" in sets else vendor.TOPOLOGY_DIR
    try:
        vend = vendor.resolve(root, p.fabric, typed, p.driver_version, topology)
        shipped_keys: dict[str, str] = {}
        if "--fm-config" in vend.paths:
            try:
                with open(under_root(root, vend.paths["--fm-config"]), encoding="utf-8") as fh:
                    text = fh.read()
                eff = fmcfg.Effective(keyvalue.parse(text), text)
                shipped_keys = {k: v for k in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH")
                                if (v := eff.get(k))}
            except (OSError, UnicodeDecodeError):
                pass  # read again (and refused with its reason) where the unit is built
        shipped_topology = shipped_keys.get("TOPOLOGY_FILE_PATH")
        if topology and shipped_topology and shipped_topology != topology:
            vend = vendor.resolve(root, p.fabric, typed, p.driver_version, shipped_topology)
    except vendor.TypedPathMissing as err:
        raise usage_error(str(err), "give the path where the file is, or leave the option out: "
                          "run then uses the vendor path or what `nvfabric install` "
                          "installed") from None
    if vend.sources.get("topology", "").startswith("install record"):
        missing = shipped_topology or vendor.TOPOLOGY_DIR
        for key in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH"):
            if key not in sets and shipped_keys.get(key, missing) == missing:
                sets[key] = vend.paths["topology"]
    return vend


def _supervise(unit: Unit, p: Plan, cfg: RunConfig, pre: Preflight, restart: str,
               reset_argv: tuple[str, ...] | None, socket_timeout: float, ready_timeout: float,
               restart_delay: float, restart_max_delay: float,
               gpu_reset_timeout: float, start_limit: tuple[int, float]) -> Outcome:
    from nvfabric.rules.diagnose import Classifier

    log = Log()
    state_dir = cfg.resolve(cfg.state_dir)
    if ensure_dir(state_dir):
        log.say(f"created state directory {state_dir} (mode 0700)")
    for planned in unit.files:
        fmcfg.write(planned.path, fmcfg.Effective(keyvalue.parse(planned.content),
                                                  planned.content))
        log.say(f"wrote {planned.path}")
    for note in unit.notes:
        log.say(note)
    for f in pre.findings:  # not errors: those refused the start
        log.finding(f)
    policy = Policy(restart=restart, backoff_base_s=restart_delay,
                    backoff_cap_s=restart_max_delay, socket_timeout_s=socket_timeout,
                    ready_timeout_s=ready_timeout, gpu_reset_argv=reset_argv,
                    gpu_reset_timeout_s=gpu_reset_timeout, registered_at_start=pre.registered,
                    start_limit_burst=start_limit[0], start_limit_interval_s=start_limit[1])
    info: dict[str, Any] = {"fabric": p.fabric, "driver_version": p.driver_version,
                            "management_port": p.management_port.to_json()
                            if p.management_port else None}
    sup = Supervisor(unit.services, policy, log=log,
                     classifier=lambda name: Classifier(p.fabric),
                     probe=lambda: gpu_check(cfg.root), ready_file=cfg.ready_file,
                     ready_info=info, pid_dir=state_dir, preflight=lambda: _restart_checks(unit, p))
    attach(lambda: of_supervisor(sup))
    return sup.run()

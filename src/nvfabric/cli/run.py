"""``nvfabric run``: bring the fabric of this node up and keep it up (the main job).

The command reads like the procedure: read the node (:mod:`nvfabric.facts.inventory`), plan
(:func:`nvfabric.rules.plan.plan`), refuse on blockers, prepare the bring-up of the fabric
kind (:mod:`nvfabric.bringup`: fabric manager and NVLSM by ``unit.prepare``, IMEX by
``mnnvl.prepare``, both a :class:`nvfabric.bringup.prepared.Prepared`), take the run lock,
probe what the bring-up needs checked (:func:`nvfabric.facts.node.collect`), run the
preflight (:func:`nvfabric.rules.preflight.preflight`), then either print the dry run or
apply (:func:`nvfabric.effects.apply.apply`) and supervise (:mod:`nvfabric.supervisor`)
until SIGTERM or a failure. Output: :mod:`nvfabric.cli.runview`.
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import sys
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import click

from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.bringup import nvlsm, vendor
from nvfabric.bringup.prepared import Prepared
from nvfabric.bringup.unit import RunConfig, environ_items
from nvfabric.cli import listen, runlock, runview, watching
from nvfabric.cli.render import (
    Seconds,
    arch_option,
    guarded,
    json_option,
    root_option,
)
from nvfabric.cli.runview import Emit
from nvfabric.cli.textfile import read_text_file
from nvfabric.effects import stop
from nvfabric.effects.log import Log
from nvfabric.effects.notify import notify_nothing_to_start
from nvfabric.effects.runlock import READY_FILE, RunLock
from nvfabric.effects.stop import SIGHUP_IGNORED
from nvfabric.facts.fs import program_path
from nvfabric.facts.paths import confined
from nvfabric.frozen import is_one_file
from nvfabric.model.commandline import DEFAULT_STATE_DIR
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.inventory import Inventory
from nvfabric.observe.hook import attach
from nvfabric.observe.unitstate import NOTHING_TO_RUN, of_running, phase_of_running
from nvfabric.rules.imex.tables import CTL_TIMEOUT_RANGE_S, CTL_TIMEOUT_S
from nvfabric.rules.live import DEFAULT_BOOT_WINDOW_S
from nvfabric.rules.plan import Plan
from nvfabric.supervisor.outcome import run_result
from nvfabric.supervisor.policy import Policy


@dataclass(frozen=True)
class RunOptions:
    """The options of ``nvfabric run`` as typed (click's parameter names; see the options'
    help). ``typed``: the names the operator gave (not defaults): a vendor path counts as
    typed only then (:mod:`nvfabric.bringup.vendor`)."""

    root: str
    arch: str | None
    as_json: bool
    dry_run: bool
    restart: str
    stay: bool
    fm_sets: tuple[str, ...]
    fabric_mode: str | None
    gpu_reset_command: str | None
    gpu_reset_timeout: float
    socket_timeout: float
    ready_timeout: float
    grace: float
    restart_delay: float
    restart_max_delay: float
    restart_limit_burst: int
    restart_limit_interval: float
    state_dir: str
    fm_bin: str
    fm_config: str
    nvlsm_bin: str
    nvlsm_config: str
    nvlsm_pid_file: str
    fm_sm_socket: str | None
    imex_owner: str | None
    imex_bin: str
    imex_ctl: str
    imex_config: str
    imex_peers: str | None
    imex_local_address: tuple[str, ...]
    imex_ctl_timeout: float
    listen_at: str | None = None
    health_interval: float = 30.0
    log_format: str = "text"
    kernel_log: str = "auto"
    link_training_window: float = DEFAULT_BOOT_WINDOW_S
    kernel_interval: float = watching.DEFAULT_INTERVAL_S
    kernel_max_lines: int = watching.DEFAULT_MAX_LINES_PER_S
    typed: frozenset[str] = frozenset()

    def kernel_watch(self) -> dict[str, Any] | None:
        """The kernel log watch of the job (:func:`nvfabric.cli.watching.spec`)."""
        return watching.spec(self.root, self.kernel_log, self.link_training_window,
                             self.kernel_interval, self.kernel_max_lines)

    def policy(self, **more: Any) -> Policy:
        """The supervisor's policy from the restart and readiness options (``more``: the
        fabric manager path's socket timeout, GPU reset and R04 state)."""
        return Policy(restart=self.restart, backoff_base_s=self.restart_delay,
                      backoff_cap_s=self.restart_max_delay, ready_timeout_s=self.ready_timeout,
                      start_limit_burst=self.restart_limit_burst,
                      start_limit_interval_s=self.restart_limit_interval, **more)


#: The host path options, checked before anything is read under them.
_PATH_OPTIONS = (("state_dir", "--state-dir"), ("fm_bin", "--fm-bin"),
                 ("fm_config", "--fm-config"), ("nvlsm_bin", "--nvlsm-bin"),
                 ("nvlsm_config", "--nvlsm-config"), ("nvlsm_pid_file", "--nvlsm-pid-file"),
                 ("fm_sm_socket", "--fm-sm-socket"), ("imex_bin", "--imex-bin"),
                 ("imex_ctl", "--imex-ctl"), ("imex_config", "--imex-config"))


#: The outcomes decided before anything was started, which a stop signal that came meanwhile
#: turns into ``stopped`` (exit 0; their findings kept): the operator asked for a stop.
_BEFORE_START = ("blocked", "refused", "would_start")


def _emit(result: str, code: int, findings: list[Finding], *, p: Plan, o: RunOptions,
          **kw: Any) -> NoReturn:
    """Print the outcome (:func:`nvfabric.cli.runview.report`) and exit with ``code``; a stop
    signal that came before (:mod:`nvfabric.effects.stop`) makes an outcome decided before
    the start ``stopped``."""
    for _ in stop.ignored():
        Log().say(SIGHUP_IGNORED)
    if stop.received() and result in _BEFORE_START:
        result, code = "stopped", 0
        kw["title"] = "found before the stop" if kw.get("title") else ""
        _say_stopped()
    runview.report(result, code, findings, p, as_json=o.as_json, dry_run=o.dry_run, **kw)
    sys.exit(code)


def _say_stopped() -> None:
    """The one log line of a run stopped before it started anything."""
    name = signal.Signals(stop.received() or signal.SIGTERM).name
    Log().say(f"received {name} before anything was started: stopped")


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
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
              help="Where the effective config and the readiness file are written.")
@click.option("--fm-bin", default=fm.BINARY, show_default=True,
              help="Fabric manager's binary (host path, under --root).")
@click.option("--fm-config", default=fm.CONFIG, show_default=True,
              help="The shipped fabricmanager.cfg (read, never edited).")
@click.option("--nvlsm-bin", default=nvlsm.BINARY, show_default=True,
              help="NVLSM's binary (NVLink 5; host path, under --root).")
@click.option("--nvlsm-config", default=nvlsm.CONFIG, show_default=True,
              help="NVLSM's shipped config file (read, never edited).")
@click.option("--nvlsm-pid-file", default=nvlsm.PID_FILE, show_default=True,
              help="Where NVLSM writes its pid (its --pid_file).")
@click.option("--fm-sm-socket", default=None,
              help=f"NVLSM's IPC socket [default: FM_SM_IPC_INTERFACE, else {nvlsm.SOCKET}]")
@click.option("--imex-owner", type=click.Choice(["host", "dra", "dra-host", "slurm", "none"]),
              default=None,
              help="GB200/GB300: who runs IMEX here [default: detected; nvfabric when none]; "
              "dra-host: the DRA driver in imex.mode=hostManaged, served by nvfabric.")
@click.option("--imex-bin", default="/usr/bin/nvidia-imex", show_default=True,
              help="The IMEX daemon's binary (GB200/GB300; host path, under --root).")
@click.option("--imex-ctl", default="/usr/bin/nvidia-imex-ctl", show_default=True,
              help="nvidia-imex-ctl, which readiness is asked of (host path, under --root).")
@click.option("--imex-config", default="/etc/nvidia-imex/config.cfg", show_default=True,
              help="The shipped IMEX config.cfg (read, never edited).")
@click.option("--imex-peers", default=None, metavar="FILE",
              help="IMEX node list [default: IMEX_NODE_CONFIG_FILE of the shipped config].")
@click.option("--imex-local-address", multiple=True, metavar="ADDR",
              help="This node's addresses, instead of reading its interfaces (repeatable).")
@click.option("--imex-ctl-timeout", type=Seconds(*CTL_TIMEOUT_RANGE_S), default=CTL_TIMEOUT_S,
              show_default=True, help="Hard timeout of each nvidia-imex-ctl call, seconds.")
@listen.options
@watching.options
@guarded
def run_cmd(**params: Any) -> None:
    """Bring the fabric up (NVLSM, fabric manager; IMEX on GB200/GB300 trays) and supervise it
    as one unit."""
    ctx = click.get_current_context()
    typed = frozenset(name for name in params
                      if (src := ctx.get_parameter_source(name)) is not None
                      and src.name != "DEFAULT")
    _run(RunOptions(**params, typed=typed))


def _run(o: RunOptions) -> NoReturn:
    """The flow of the module docstring; every branch ends in :func:`_emit` (exit)."""
    from nvfabric.facts.inventory import collect
    from nvfabric.rules.plan import plan

    listen.check(o.listen_at, o.log_format)  # the log format, and --listen parsed: exit 2
    inv = collect(o.root, o.arch)
    p = plan(inv)
    emit: Emit = functools.partial(_emit, p=p, o=o)
    try:
        _bring_up(o, inv, p, emit)
    except stop.Stopped:  # during a wait of the preflight, or at the hand-over
        _say_stopped()
        emit("stopped", 0, [])


def _bring_up(o: RunOptions, inv: Inventory, p: Plan, emit: Emit) -> NoReturn:
    """Refuse a blocked plan, or bring up the plan's fabric kind."""
    if p.blocked:
        if not o.dry_run:
            runlock.clear_stale_unlocked(o.root, o.state_dir)
        emit("blocked", 1, list(p.blockers), title="blocked: nothing was started")
    _check_paths(o)
    # the node list file is read like `imex config --peers` reads it (exit 2 when it is
    # unreadable or not text), before the lock, on every fabric: a mistyped path in a unit
    # shared by a fleet is said, not ignored where IMEX does not run
    peers_text = None if o.imex_peers is None else read_text_file(o.imex_peers, "--imex-peers")
    if p.fabric == "mnnvl":  # IMEX (issue 6), never fabric manager
        from nvfabric.cli.runimex import run_mnnvl

        run_mnnvl(o, inv, p, peers_text, emit)
    _run_fm(o, inv, p, emit)


def serve(o: RunOptions) -> None:
    """``--listen``: serve the run's state over HTTP from now on (:func:`nvfabric.cli.listen.start`;
    not in a dry run). The supervisor then stays in this process (the server's threads live
    here), and the unit's state is read through :func:`nvfabric.supervisor.running`."""
    if o.listen_at is None or o.dry_run:
        return
    listen.start(listen.check(o.listen_at, o.log_format), o.root, o.health_interval)
    attach(of_running, phase=phase_of_running)


def _check_paths(o: RunOptions) -> None:
    """Every host path option is absolute and stays under the root (the state directory also
    through links): exit 2 otherwise."""
    for name, what in _PATH_OPTIONS:
        path = getattr(o, name)
        if path is not None:
            try:
                check_path(path, what)
            except ValueError as err:
                raise usage_error(str(err), "host paths are absolute, resolved under --root, "
                                  "and may not leave it") from None
    try:  # the state directory (lock, configs, ready file) may not leave the root by a link
        confined(o.root, o.state_dir, "--state-dir")
    except ValueError as err:
        raise usage_error(str(err), "host paths are resolved under --root and may not leave "
                          "it, also through a symbolic link") from None


def _reset_argv(o: RunOptions) -> tuple[str, ...] | None:
    """``--gpu-reset-command`` split like a shell (never run by one); exit 2 when empty."""
    if o.gpu_reset_command is None:
        return None
    try:
        argv = tuple(shlex.split(o.gpu_reset_command))
    except ValueError as err:
        raise usage_error(f"--gpu-reset-command: {err}", "quote it as a shell would, e.g. "
                          "--gpu-reset-command 'nvidia-smi -r'") from None
    if not argv or any("\x00" in a for a in argv):
        raise usage_error("--gpu-reset-command: empty or contains NUL",
                          "give the reset program and its arguments, e.g. 'nvidia-smi -r'")
    return argv


def _run_fm(o: RunOptions, inv: Inventory, p: Plan, emit: Emit) -> NoReturn:
    """nvswitch and nvlink5 (and none): fabric manager, after NVLSM on NVLink 5."""
    from nvfabric.bringup import unit
    from nvfabric.facts import node
    from nvfabric.rules.preflight import preflight

    reset_argv = _reset_argv(o)
    # the GPU read (R04's registered GPUs) is the slowest probe: it starts now, beside the
    # vendor files, the prepare and the lock, where the bring-up will ask for it
    gpu_read = node.start_gpu_read(o.root) \
        if p.fabric != "none" and unit.needs_reset(inv) else None
    cfg, vend = _fm_config(o, p)
    if vend.findings:  # R08: a vendor package is missing: a fault of the node
        emit("refused", 1, list(vend.findings), vendor_files=vend,
             title="refused: a vendor package is missing; nothing was started")
    emit = functools.partial(emit, vendor_files=vend)
    if p.fabric == "none":
        _nothing_to_do(o, p, emit)
    shipped = _shipped(cfg)
    try:
        prepared = unit.prepare(inv, p, cfg, shipped)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    except ValueError as err:
        raise usage_error(str(err), "pass absolute host paths (resolved under --root) without "
                          "control characters") from None
    prepared = replace(prepared, notes=(*prepared.notes, *vend.notes()))
    try:
        lock = runlock.hold(o.root, o.state_dir, o.dry_run, emit)
        facts = node.collect(o.root, inv, prepared.checks(), gpu_read)
        pre = preflight(facts, prepared.preflight_processes(), driver=p.driver_version,
                        needs_reset=prepared.needs_reset, reset_argv=reset_argv,
                        reset_found=reset_argv is None
                        or program_path(reset_argv[0]) is not None)
        # the plan's warnings (management_port_unverified) go with the preflight's
        pre = replace(pre, findings=(*p.findings, *pre.findings))
        if o.dry_run:
            if not o.as_json:
                runview.dry_run(prepared, pre.refused)
            emit("refused" if pre.refused else "would_start", 1 if pre.refused else 0,
                 list(pre.findings), listed=prepared, title="preflight would refuse to start"
                 if pre.refused else "preflight")
        if pre.refused:
            emit("refused", 1, list(pre.findings), listed=prepared,
                 title="preflight: nothing was started")
        serve(o)
        _supervise_fm(o, prepared, p, cfg.root, pre.findings,
                      o.policy(socket_timeout_s=o.socket_timeout, gpu_reset_argv=reset_argv,
                               gpu_reset_timeout_s=o.gpu_reset_timeout,
                               registered_at_start=pre.registered), vend, lock)
    except stop.Stopped:  # during a probe's wait, or at the hand-over: nothing was started
        _say_stopped()
        emit("stopped", 0, [], listed=prepared)


def _nothing_to_do(o: RunOptions, p: Plan, emit: Emit) -> NoReturn:
    """Fabric none: nothing to start; ``--stay`` keeps the process (and the lock) until
    SIGTERM."""
    if o.stay:  # a DaemonSet pod that stays: still one per node
        runlock.hold(o.root, o.state_dir, o.dry_run, emit)
        serve(o)
        attach(lambda: NOTHING_TO_RUN)
    why = p.reasons[-1] if p.reasons else "no fabric service applies"
    if not o.as_json:
        Log().say(f"fabric none: nothing to start ({why})")
    if not o.dry_run:
        notify_nothing_to_start(f"fabric none: nothing to start ({why})")
    if o.stay and not o.dry_run:
        runlock.stay()
    # the plan's warnings (sxm_gpus_without_nvswitch): nothing to start, but said
    emit("nothing_to_do", 0, list(p.findings), title="warnings" if p.findings else "")


def _fm_config(o: RunOptions, p: Plan) -> tuple[RunConfig, vendor.Resolved]:
    """The run's fabric manager configuration (:class:`nvfabric.bringup.unit.RunConfig`)
    with the vendor files resolved; exit 2 for a bad ``--fm-set``."""
    try:
        sets = fmcfg.parse_sets(o.fm_sets)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    given = {"--fm-bin": ("fm_bin", o.fm_bin), "--fm-config": ("fm_config", o.fm_config),
             "--nvlsm-bin": ("nvlsm_bin", o.nvlsm_bin),
             "--nvlsm-config": ("nvlsm_config", o.nvlsm_config)}
    vend = _vendor_files(o.root, p, sets, {opt: value if name in o.typed else None
                                           for opt, (name, value) in given.items()})
    path = {opt: vend.paths.get(opt, value) for opt, (_, value) in given.items()}
    try:
        cfg = RunConfig(
            root=o.root, state_dir=o.state_dir,
            fm=fm.FabricManagerPaths(path["--fm-bin"], path["--fm-config"]),
            nvlsm=nvlsm.NvlsmPaths(path["--nvlsm-bin"], path["--nvlsm-config"],
                                   o.nvlsm_pid_file),
            socket=o.fm_sm_socket, fm_sets=tuple(sets.items()),
            environ=environ_items(os.environ), fabric_mode=o.fabric_mode, grace_s=o.grace)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    return cfg, vend


def _shipped(cfg: RunConfig) -> str:
    """The shipped fabricmanager.cfg's text (:func:`nvfabric.facts.fmconfig.read_shipped`);
    exit 2 when it is not the vendor's readable text file."""
    from nvfabric.facts.fmconfig import read_shipped

    shipped_path = cfg.resolve(cfg.fm.shipped_config)
    try:
        return read_shipped(shipped_path)
    except fmcfg.ShippedConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    except (OSError, UnicodeDecodeError) as err:
        problem = (err.strerror or str(err)) if isinstance(err, OSError) else "not UTF-8 text"
        raise NvfabricError(Finding(
            "input_unreadable", "error",
            f"cannot read the shipped fabric manager config {shipped_path}: {problem}",
            "install the fabric manager package, or pass --fm-config"), exit_code=2) from None


def _vendor_files(root: str, p: Plan, sets: dict[str, str],
                  typed: dict[str, str | None]) -> vendor.Resolved:
    """Where fabric manager's (and NVLSM's) files come from: found under the root
    (:func:`nvfabric.facts.node.vendor_seen`), decided by
    :func:`nvfabric.bringup.vendor.resolve`. The shipped fabricmanager.cfg names the
    topology directory to look for: when it names another than the vendor's, that one is
    looked up (a read that depends on the file found first). The keys an installed topology
    directory needs (:func:`nvfabric.bringup.vendor.install_topology_keys`) are added to
    ``sets``. A typed path that does not exist is exit 2."""
    from nvfabric.facts.node import fm_shipped_keys, vendor_seen

    topology = None if "TOPOLOGY_FILE_PATH" in sets else vendor.TOPOLOGY_DIR

    def resolved(where: str | None) -> vendor.Resolved:
        seen = vendor_seen(root, p.fabric, typed, p.driver_version, where)
        return vendor.resolve(seen, root, p.fabric, typed, p.driver_version, where)

    try:
        vend = resolved(topology)
        shipped_keys = fm_shipped_keys(root, vend.paths["--fm-config"]) \
            if "--fm-config" in vend.paths else {}
        shipped_topology = shipped_keys.get("TOPOLOGY_FILE_PATH")
        if topology and shipped_topology and shipped_topology != topology:
            vend = resolved(shipped_topology)
    except vendor.TypedPathMissing as err:
        raise usage_error(str(err), "give the path where the file is, or leave the option out: "
                          "run then uses the vendor path or what `nvfabric install` "
                          "installed") from None
    sets.update(vendor.install_topology_keys(vend, sets, shipped_keys))
    return vend


def _supervise_fm(o: RunOptions, prepared: Prepared, p: Plan, root: str,
                  pre: tuple[Finding, ...], policy: Policy, vend: vendor.Resolved,
                  lock: RunLock | None) -> NoReturn:
    """Apply the bring-up (state directory, effective config), then hand its processes to the
    supervisor (:func:`nvfabric.supervisor.lean.supervise`: the lean process this one execs
    into, same pid, the run lock kept), which reports the end as :func:`_emit` would; before
    a restart it checks fabric manager's version again."""
    from nvfabric.effects.apply import apply
    from nvfabric.supervisor.job import Job, Report
    from nvfabric.supervisor.lean import supervise

    log = Log()
    stop.check()  # a stop that came where nothing waited: before anything is written
    apply(prepared, root, log.say)
    for note in prepared.notes:
        log.say(note)
    for f in pre:  # not errors: those refused the start
        log.finding(f)
    info: dict[str, Any] = {"fabric": p.fabric, "driver_version": p.driver_version,
                            "management_port": p.management_port.to_json()
                            if p.management_port else None}
    fms = [s.argv[0] for s in prepared.processes if s.name == "fabricmanager"]
    report = Report(o.as_json, run_result(
        "stopped", 0, p.fabric, [], processes=prepared.processes, files=prepared.files,
        reasons=p.reasons, vendor_files=vend.to_json()), tuple(f.to_json() for f in pre))
    supervise(Job(prepared.processes, policy, report,
                  ready_file=os.path.join(prepared.state_dir, READY_FILE), ready_info=info,
                  pid_dir=prepared.state_dir, fabric=p.fabric, probe_root=root,
                  fm_check=(fms[0], p.driver_version) if fms else None,
                  state_dir=prepared.state_dir, lock_fd=lock.fd if lock else None,
                  log_format=o.log_format, kernel_watch=o.kernel_watch()),
              in_process=o.listen_at is not None or is_one_file())


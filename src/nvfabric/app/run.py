"""``nvfabric run``: bring the NVLink fabric of this node up and keep it up (the main job).

One procedure for every fabric kind, in the vendor's order (NVIDIA Fabric Manager User
Guide: on NVLink 5 systems "NVLSM must be started before Fabric Manager", with the same
management port GUID; on GB200/GB300 trays no fabric manager runs: IMEX, "NVIDIA IMEX
Service"):

1. read the node (PCI, VPD, InfiniBand ports, driver) and plan (pure): a blocked plan starts
   nothing;
2. read what the bring-up builds on (fabric manager: the vendor files and the shipped
   fabricmanager.cfg; a tray: its IMEX owner evidence, channels, config and node list) and
   prepare it (pure: :mod:`nvfabric.bringup.fabricmanager`, :mod:`nvfabric.bringup.mnnvl`),
   the same :class:`~nvfabric.bringup.prepared.Prepared` for every kind;
3. take the run lock: one run per node;
4. preflight: probe what the prepared bring-up needs checked (fabric manager), then judge
   (pure); a dry run ends here;
5. apply (channel nodes, the state directory, the files) and hand the processes to the
   supervisor (:func:`nvfabric.supervisor.lean.supervise`: the lean process this one execs
   into), which waits for each to be ready (NVLSM's socket, the GPUs registered, IMEX READY),
   watches the kernel log beside them (``--kernel-log``:
   :mod:`nvfabric.supervisor.kernelwatch`), records the run's events in the state directory
   (:mod:`nvfabric.effects.history`) and reports the end itself. ``--listen`` and
   ``--publish`` watch the run from the preflight on (:func:`_watch`); the supervisor then
   stays in this process.

Every end decided before the start is a :class:`RunResult`, which the command renders
(:mod:`nvfabric.cli.run`).
"""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any

from nvfabric.app import collect, kube, listen, lock
from nvfabric.app.collect import FabricManagerFiles, ImexRequest
from nvfabric.app.kube import KubeRequest
from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.bringup import mnnvl, nvlsm, vendor
from nvfabric.bringup.fabricmanager import RunConfig, environ_items
from nvfabric.bringup.prepared import Prepared
from nvfabric.effects import stop
from nvfabric.effects.apply import apply
from nvfabric.effects.frozen import is_one_file
from nvfabric.effects.log import Log
from nvfabric.effects.notify import notify_nothing_to_start
from nvfabric.effects.runlock import READY_FILE, RunLock, run_lock_holder
from nvfabric.facts import inventory, services
from nvfabric.facts.fs import node_program, program_path
from nvfabric.facts.imex import tray
from nvfabric.facts.parallel import Pending
from nvfabric.facts.probes import GpuReading
from nvfabric.facts.textfile import read_text_file
from nvfabric.model.commandline import NVFABRIC_UNIT, HintContext
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.fmkeys import ConfigError
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import confined
from nvfabric.model.inventory import Inventory
from nvfabric.observe.hook import attach
from nvfabric.observe.unitstate import (
    NOTHING_TO_RUN,
    kernel_of_running,
    of_running,
    phase_of_running,
)
from nvfabric.publish.api import Target
from nvfabric.rules.live import (
    DEFAULT_BOOT_WINDOW_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_LINES_PER_S,
)
from nvfabric.rules.plan import Plan, plan
from nvfabric.rules.preflight import preflight
from nvfabric.supervisor.job import Job, Report
from nvfabric.supervisor.lean import supervise
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
    kernel_interval: float = DEFAULT_INTERVAL_S
    kernel_max_lines: int = DEFAULT_MAX_LINES_PER_S
    kube: KubeRequest | None = None
    typed: frozenset[str] = frozenset()

    def kernel_watch(self) -> dict[str, Any] | None:
        """The kernel log watch of the job (:attr:`nvfabric.supervisor.job.Job.kernel_watch`,
        built in the supervisor by :func:`nvfabric.supervisor.kernelwatch.from_spec`); None
        for ``--kernel-log off``."""
        if self.kernel_log == "off":
            return None
        return {"root": self.root, "use": self.kernel_log,
                "boot_window_s": self.link_training_window,
                "interval_s": self.kernel_interval, "max_lines_per_s": self.kernel_max_lines}

    def policy(self, **more: Any) -> Policy:
        """The supervisor's policy from the restart and readiness options (``more``: the
        fabric manager path's socket timeout, GPU reset and R04 state)."""
        return Policy(restart=self.restart, backoff_base_s=self.restart_delay,
                      backoff_cap_s=self.restart_max_delay, ready_timeout_s=self.ready_timeout,
                      start_limit_burst=self.restart_limit_burst,
                      start_limit_interval_s=self.restart_limit_interval, **more)


@dataclass(frozen=True)
class RunResult:
    """How a run ended before its processes started (or, ``--dry-run``, how it would begin):
    ``result`` (a word of :data:`nvfabric.supervisor.outcome.RUN_RESULTS`), the exit code, the
    findings under ``title`` (a human run prints them only with a title), the plan; what the
    ``run --json`` object lists besides (``listed``: the prepared bring-up whose processes and
    files it shows; ``imex``: a tray's, adding its ``imex`` object; ``vendor_files``: where
    fabric manager's files came from); ``listing``: the bring-up a human dry run prints, and
    whether the run would be refused."""

    result: str
    code: int
    findings: tuple[Finding, ...]
    plan: Plan
    title: str = ""
    listed: Prepared | None = None
    imex: Prepared | None = None
    vendor_files: vendor.Resolved | None = None
    listing: tuple[Prepared, bool] | None = None


#: The outcomes decided before anything was started, which a stop signal that came meanwhile
#: turns into ``stopped`` (exit 0; their findings kept): the operator asked for a stop.
_BEFORE_START = ("blocked", "refused", "would_start")


def run(o: RunOptions) -> RunResult:
    """The procedure of the module docstring. Returns the end of a run that started nothing;
    once the supervisor has the processes it reports the end and the process exits there.
    Raises NvfabricError (exit 2) for options or files that cannot be used."""
    # The log format takes effect, --listen is parsed and --publish's kubeconfig read, before
    # anything else: a usage error leaves the host as it was (no state directory made).
    outside = _Outside(listen.check(o.listen_at, o.log_format),
                       kube.run_target(o.kube, o.root) if kube.publishing(o.kube) else None)
    # 1. The node: PCI functions, VPD, InfiniBand ports, the loaded driver; the plan (pure).
    inv = inventory.collect(o.root, o.arch)
    p = plan(inv, HintContext(o.root))
    try:
        return _bring_up(o, outside, inv, p)
    except stop.Stopped:  # during a wait of the preflight, or at the hand-over
        _say_stopped()
        return _ended(o, p, "stopped", 0, [])


@dataclass(frozen=True)
class _Outside:
    """What watches the run from outside, checked before anything is read or written:
    ``address``, where ``--listen`` serves (None: off); ``publish``, ``--publish``'s target or
    why it cannot publish (:func:`nvfabric.app.kube.run_target`; None: not asked);
    ``bound``: ``--listen``'s port, bound just before the lock (:func:`_hold`)."""

    address: tuple[str, int] | None
    publish: Target | str | None
    bound: listen.Bound | None = None


@dataclass(frozen=True)
class _Bringup:
    """What a fabric kind's read and preparation give the rest of the procedure: the prepared
    unit; ``shown``: what every later result reports of it (``vendor_files``, ``imex``); for
    fabric manager the GPU read already started, the reset command and whether it can run."""

    prepared: Prepared
    shown: dict[str, Any] = field(default_factory=dict)
    gpu_read: Pending[GpuReading] | None = None
    reset_argv: tuple[str, ...] | None = None
    reset_found: bool = True


def _bring_up(o: RunOptions, outside: _Outside, inv: Inventory, p: Plan) -> RunResult:
    if p.blocked:
        if not o.dry_run:
            lock.clear_stale_unlocked(o.root, o.state_dir)
        return _ended(o, p, "blocked", 1, p.blockers, title="blocked: nothing was started")
    _check_paths(o)
    # --fm-set's KEY=VALUE form is checked on every fabric, as the paths are: a unit shared by
    # a mixed fleet fails on every node it is wrong for, not only on fabric manager's
    _fm_sets(o)
    # the node list file is read like `imex config --peers` reads it (exit 2 when it is
    # unreadable or not text), before the lock, on every fabric: a mistyped path in a unit
    # shared by a fleet is said, not ignored where IMEX does not run
    peers_text = None if o.imex_peers is None else read_text_file(o.imex_peers, "--imex-peers")
    # 2. Read what the bring-up builds on, and prepare it (pure).
    up = _mnnvl(o, inv, p, peers_text) if p.fabric == "mnnvl" else _fabric_manager(o, inv, p)
    if isinstance(up, RunResult):
        return up
    if not up.prepared.processes and up.prepared.imex is None:  # fabric none
        return _nothing_to_do(o, outside, p, up)
    prepared = up.prepared
    try:
        # 3. One run per node: the lock (a dry run: who holds it), before anything is
        # written, reset or started.
        held, busy, outside = _hold(o, outside)
        if busy is not None:
            return _ended(o, p, "refused", 1, [busy], **up.shown,
                          title="refused: another nvfabric run is active")
        # 4. Preflight: what the host shows against what the bring-up needs; a dry run ends.
        checked = _preflight(o, inv, p, up)
        if isinstance(checked, RunResult):
            return checked
        checked = replace(checked, findings=(*checked.findings,
                                             *options_not_for(o.typed, p.fabric)))
        _watch(o, outside)
        if not prepared.processes:  # IMEX is owned by another starter
            return _not_ours(o, p, prepared, checked.findings)
        # 5. Apply, then supervise.
        return _supervise(o, p, up, held, checked)
    except stop.Stopped:  # during a probe's wait, or at the hand-over: nothing was started
        _say_stopped()
        return _ended(o, p, "stopped", 0, [], listed=prepared, **up.shown)


# -- 2. the fabric kinds ------------------------------------------------------------------------


def _fabric_manager(o: RunOptions, inv: Inventory, p: Plan) -> _Bringup | RunResult:
    """nvswitch and nvlink5 (and none): fabric manager, after NVLSM on NVLink 5. Reads the
    vendor files and the shipped fabricmanager.cfg (:func:`nvfabric.app.collect.
    fabric_manager_files`), then prepares the unit (:func:`nvfabric.bringup.fabricmanager.
    prepare`). A refusal (a vendor package missing) is the RunResult."""
    reset_argv = _reset_argv(o)
    # the GPU read (R04's registered GPUs) is the slowest probe: it starts now, beside the
    # vendor files, the prepare and the lock, where the preflight will ask for it
    gpu_read = (collect.start_gpu_read(o.root)
                if p.fabric != "none" and fm.needs_reset(inv) else None)
    cfg, files = _fm_config(o, p)
    vend = files.vendor
    if vend.findings:  # R08: a vendor package is missing: a fault of the node
        return _ended(o, p, "refused", 1, vend.findings, vendor_files=vend,
                      title="refused: a vendor package is missing; nothing was started")
    if p.fabric == "none":
        return _Bringup(Prepared("none"), {"vendor_files": vend})
    if files.shipped_error is not None:
        raise files.shipped_error
    assert files.shipped is not None
    try:
        prepared = fm.prepare(inv, p, cfg, files.shipped)
    except ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    except ValueError as err:
        raise usage_error(str(err), "pass absolute host paths (resolved under --root) without "
                          "control characters") from None
    prepared = replace(prepared, notes=(*prepared.notes, *vend.notes()))
    return _Bringup(prepared, {"vendor_files": vend}, gpu_read, reset_argv,
                    reset_argv is None or program_path(reset_argv[0]) is not None)


def _fm_config(o: RunOptions, p: Plan) -> tuple[RunConfig, FabricManagerFiles]:
    """The run's fabric manager configuration (:class:`nvfabric.bringup.fabricmanager.
    RunConfig`) with the vendor files found and the shipped config read; exit 2 for a bad
    ``--fm-set`` or a typed path that is not there. The keys an installed topology directory
    needs (:func:`nvfabric.bringup.vendor.install_topology_keys`) join the ``--fm-set`` ones."""
    sets = _fm_sets(o)
    given = {"--fm-bin": ("fm_bin", o.fm_bin), "--fm-config": ("fm_config", o.fm_config),
             "--nvlsm-bin": ("nvlsm_bin", o.nvlsm_bin),
             "--nvlsm-config": ("nvlsm_config", o.nvlsm_config)}
    typed = {opt: value if name in o.typed else None for opt, (name, value) in given.items()}
    try:
        files = collect.fabric_manager_files(o.root, p.fabric, typed, p.driver_version,
                                             "TOPOLOGY_FILE_PATH" in sets)
    except vendor.TypedPathMissing as err:
        raise usage_error(str(err), "give the path where the file is, or leave the option out: "
                          "run then uses the vendor path or what `nvfabric install` "
                          "installed") from None
    sets.update(vendor.install_topology_keys(files.vendor, sets, files.shipped_keys))
    path = {opt: files.vendor.paths.get(opt, value) for opt, (_, value) in given.items()}
    try:
        cfg = RunConfig(
            root=o.root, state_dir=o.state_dir,
            fm=fm.FabricManagerPaths(path["--fm-bin"], path["--fm-config"]),
            nvlsm=nvlsm.NvlsmPaths(path["--nvlsm-bin"], path["--nvlsm-config"],
                                   o.nvlsm_pid_file),
            socket=o.fm_sm_socket, fm_sets=tuple(sets.items()),
            environ=environ_items(os.environ), fabric_mode=o.fabric_mode, grace_s=o.grace)
    except ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    return cfg, files


def _fm_sets(o: RunOptions) -> dict[str, str]:
    """``--fm-set KEY=VALUE`` as fabric manager config keys
    (:func:`nvfabric.bringup.fmconfig.parse_sets`); exit 2 for a malformed one."""
    try:
        return fmcfg.parse_sets(o.fm_sets)
    except ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None


def _mnnvl(o: RunOptions, inv: Inventory, p: Plan, peers_text: str | None) -> _Bringup:
    """GB200/GB300 trays: IMEX, never fabric manager. Reads the tray
    (:func:`nvfabric.app.collect.imex`), then prepares (:func:`nvfabric.bringup.mnnvl.prepare`:
    nvidia-imex when nvfabric is the host owner, nothing for another owner)."""
    facts = collect.imex(o.root, inv, ImexRequest(
        o.imex_owner, o.imex_bin, o.imex_ctl, o.imex_config, o.imex_peers, peers_text,
        o.imex_local_address))
    prepared = mnnvl.prepare(facts, p, _imex_options(o, peers_text))
    return _Bringup(prepared, {"imex": prepared})


def _imex_options(o: RunOptions, peers_text: str | None) -> mnnvl.ImexRunOptions:
    return mnnvl.ImexRunOptions(
        root=o.root, state_dir=o.state_dir, owner=o.imex_owner,
        paths=mnnvl.ImexPaths(o.imex_bin, o.imex_ctl, o.imex_config),
        peers_file=o.imex_peers, local_addresses=o.imex_local_address, peers_text=peers_text,
        ctl_timeout_s=o.imex_ctl_timeout, grace_s=o.grace)


# -- 4. preflight -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Checked:
    """What the preflight found that does not refuse the start (logged, and listed after the
    outcome's findings), and whether GPUs were registered at the start (R04)."""

    findings: tuple[Finding, ...] = ()
    registered: bool = False


def _preflight(o: RunOptions, inv: Inventory, p: Plan, up: _Bringup) -> _Checked | RunResult:
    """The checks before the start: for fabric manager the host probes the prepared unit asks
    for (:func:`nvfabric.app.collect.probes`) judged by
    :func:`nvfabric.rules.preflight.preflight`; for a tray what :func:`nvfabric.bringup.mnnvl.
    prepare` found in the facts read with it. A dry run and a refusal end here."""
    prepared = up.prepared
    if prepared.imex is not None:
        refused = bool(prepared.refusals)
        if o.dry_run:
            word = "refused" if refused else "would_start" if prepared.processes else "not_started"
            return _ended(o, p, word, 1 if refused else 0,
                          [*prepared.refusals, *prepared.warnings], listed=prepared,
                          title="problems", listing=(prepared, refused), **up.shown)
        if refused:
            return _ended(o, p, "refused", 1, prepared.refusals, **up.shown,
                          title="refused: nothing was started")
        return _Checked(prepared.warnings)
    facts = collect.probes(o.root, inv, prepared.checks(), up.gpu_read)
    pre = preflight(facts, prepared.preflight_processes(), driver=p.driver_version,
                    needs_reset=prepared.needs_reset, reset_argv=up.reset_argv,
                    reset_found=up.reset_found, hints=HintContext(o.root),
                    smi=node_program(o.root, "nvidia-smi"))
    # the plan's warnings (management_port_unverified) go with the preflight's
    findings = (*p.findings, *pre.findings)
    if o.dry_run:
        return _ended(o, p, "refused" if pre.refused else "would_start",
                      1 if pre.refused else 0, findings, listed=prepared, **up.shown,
                      title="preflight would refuse to start" if pre.refused else "preflight",
                      listing=(prepared, pre.refused))
    if pre.refused:
        return _ended(o, p, "refused", 1, findings, listed=prepared, **up.shown,
                      title="preflight: nothing was started")
    return _Checked(findings, pre.registered)


# -- 5. apply and supervise ---------------------------------------------------------------------


def _supervise(o: RunOptions, p: Plan, up: _Bringup, held: RunLock | None,
               checked: _Checked) -> RunResult:
    """Apply the bring-up (channel nodes, state directory, files), then hand its processes to
    the supervisor, which reports the end as :func:`_ended` would (its own closing line, or
    the one ``run --json`` object) and exits; before a restart it checks fabric manager's
    version again. Returns only when the bring-up could not be applied (a channel node that
    cannot be made)."""
    prepared = up.prepared
    log = Log()
    if prepared.imex is not None:
        ownership = prepared.imex.ownership
        log.say(f"fabric mnnvl: IMEX owner {ownership.owner}, nvfabric starts and supervises "
                "nvidia-imex (" + "; ".join(ownership.reasons) + ")")
    stop.check()  # a stop that came where nothing waited: before anything is made or written
    failed = apply(prepared, o.root, log.say)
    if prepared.imex is not None:  # what the report shows of the channels: read again
        prepared = replace(prepared, imex=replace(prepared.imex,
                                                  channels=tray.read_channels(o.root)))
        if failed:
            return _ended(o, p, "refused", 1, failed, imex=prepared,
                          title="refused: nothing was started")
    for note in prepared.notes:
        log.say(note)
    for f in checked.findings:  # not errors: those refused the start
        log.finding(f)
    job = _job(o, p, up, prepared, held, checked)
    if job.imex_probe is not None:  # --listen asks the daemon for the IMEX domain state
        attach(of_running, imex=job.imex_probe[1:3], phase=phase_of_running,
               kernel=kernel_of_running)
    supervise(job, in_process=o.listen_at is not None or kube.publishing(o.kube)
              or is_one_file())


def _job(o: RunOptions, p: Plan, up: _Bringup, prepared: Prepared, held: RunLock | None,
         checked: _Checked) -> Job:
    """The supervisor's job: the processes, the policy, the readiness probe of the fabric
    kind (the GPUs registered for fabric manager, ``nvidia-imex-ctl -q`` for IMEX), the
    ``run --json`` object the end fills in, and the node its findings' hints are typed for
    (the root; this run runs the daemons; nvfabric.service enabled there)."""
    shown = run_result("stopped", 0, p.fabric, [], processes=prepared.processes,
                       files=prepared.files, reasons=p.reasons,
                       vendor_files=up.shown["vendor_files"].to_json()
                       if "vendor_files" in up.shown else ())
    common: dict[str, Any] = {
        "ready_file": os.path.join(prepared.state_dir, READY_FILE),
        "pid_dir": prepared.state_dir, "fabric": p.fabric, "state_dir": prepared.state_dir,
        "lock_fd": held.fd if held else None, "log_format": o.log_format,
        "kernel_watch": o.kernel_watch()}
    ours = services.unit_enabled(o.root, NVFABRIC_UNIT)
    if prepared.imex is not None:
        ownership = prepared.imex.ownership
        opts = _imex_options(o, None)
        ctl, cfg = opts.resolve(opts.paths.ctl), prepared.files[1].path
        common["hints"] = HintContext(o.root, nvfabric_unit=ours, imex_owner=ownership.owner,
                                      imex_runner="nvfabric",
                                      imex_config=os.path.join(opts.state_dir,
                                                               mnnvl.EFFECTIVE_CFG))
        listed = mnnvl.imex_json(prepared)
        # the pid file (<state dir>/imex.pid), the owner record and the ready file tell `imex
        # owner` and `status` that this run owns IMEX (owner nvfabric, its pid and state dir,
        # and what it serves it as); the readiness query is the one --dry-run prints (dra-host:
        # READY over the command socket the DRA driver's kubelet plugin asks)
        return Job(prepared.processes, o.policy(),
                   Report(o.as_json, {**shown, "imex": listed},
                          tuple(f.to_json() for f in checked.findings)),
                   ready_info={"fabric": "mnnvl", "driver_version": p.driver_version,
                               "imex_owner": ownership.owner,
                               "node_list_id": listed["node_list_id"]},
                   imex_probe=(prepared.imex.ready_query, ctl, cfg, opts.ctl_timeout_s),
                   **common)
    fms = [s.argv[0] for s in prepared.processes if s.name == "fabricmanager"]
    common["hints"] = HintContext(o.root, "nvfabric" if fms else None, ours)
    policy = o.policy(socket_timeout_s=o.socket_timeout, gpu_reset_argv=up.reset_argv,
                      gpu_reset_timeout_s=o.gpu_reset_timeout,
                      registered_at_start=checked.registered)
    return Job(prepared.processes, policy,
               Report(o.as_json, shown, tuple(f.to_json() for f in checked.findings)),
               ready_info={"fabric": p.fabric, "driver_version": p.driver_version,
                           "management_port": p.management_port.to_json()
                           if p.management_port else None},
               probe_root=o.root, fm_check=(fms[0], p.driver_version) if fms else None,
               **common)


def _hold(o: RunOptions, outside: _Outside
          ) -> tuple[RunLock | None, Finding | None, _Outside]:
    """The run lock (:func:`nvfabric.app.lock.hold`), ``--listen``'s port bound just before
    it (a real run; a dry run binds nothing): a port in use is exit 2 before the state
    directory and the lock are made, while a port held by another run's listener is that
    run's ``already_running`` (the lock is asked first, read only). The port goes back when
    the lock is another run's."""
    if outside.address is not None and not o.dry_run and outside.bound is None:
        holder = None
        with suppress(OSError):  # an unreadable lock is said by lock.hold
            holder = run_lock_holder(lock.state_dir(o.root, o.state_dir))
        if holder is None:
            outside = replace(outside, bound=listen.bind(outside.address, o.root,
                                                         o.health_interval))
    held, busy = lock.hold(o.root, o.state_dir, o.dry_run)
    if busy is not None and outside.bound is not None:
        outside.bound.close()
        outside = replace(outside, bound=None)
    return held, busy, outside


def _watch(o: RunOptions, outside: _Outside) -> None:
    """From now on, ``--listen``: the run's state over HTTP; ``--publish``: told to the
    Kubernetes API beside the supervisor, from the same watch (:func:`nvfabric.app.kube.
    start_beside`). The supervisor then stays in this process: the threads live here."""
    if outside.bound is not None:
        listen.start(outside.bound)
    if kube.publishing(o.kube) and outside.publish is not None:
        kube.start_beside(o.kube, outside.publish, listen.watch(o.root, o.health_interval),
                          lock.state_dir(o.root, o.state_dir))
    attach(of_running, phase=phase_of_running, kernel=kernel_of_running)


# -- nothing to start ---------------------------------------------------------------------------


def _nothing_to_do(o: RunOptions, outside: _Outside, p: Plan, up: _Bringup) -> RunResult:
    """Fabric none: nothing to start; ``--stay`` keeps the process (and the lock) until
    SIGTERM."""
    if o.stay:  # a DaemonSet pod that stays: still one per node
        _, busy, outside = _hold(o, outside)
        if busy is not None:
            return _ended(o, p, "refused", 1, [busy], **up.shown,
                          title="refused: another nvfabric run is active")
        if not o.dry_run:
            _watch(o, outside)
        attach(lambda: NOTHING_TO_RUN)
    why = p.reasons[-1] if p.reasons else "no fabric service applies"
    if not o.as_json:
        Log().say(f"fabric none: nothing to start ({why})")
    if not o.dry_run:
        notify_nothing_to_start(f"fabric none: nothing to start ({why})")
    if o.stay and not o.dry_run:
        stop.wait_for_stop("--stay: waiting for SIGTERM", Log().say)
        Log().say("stopped")
    # the plan's warnings (sxm_gpus_without_nvswitch, baseboard_mixed): nothing to start, but said
    return _ended(o, p, "nothing_to_do", 0, p.findings, **up.shown,
                  title="warnings" if p.findings else "")


def _not_ours(o: RunOptions, p: Plan, prepared: Prepared,
              findings: tuple[Finding, ...]) -> RunResult:
    """IMEX is run by someone else (DRA driver, Slurm, the host unit) or by nobody on
    request: say who and start nothing (``--stay``: until SIGTERM). ``findings``: the
    preparation's warnings (and the options that do not apply), logged and returned."""
    assert prepared.imex is not None
    log = Log()
    d = prepared.imex.ownership
    runner = {"unit": "the nvidia-imex.service unit", "prolog": "the Slurm prolog",
              "nvfabric": "another nvfabric run"}.get(d.runner or "", d.runner)
    log.say(f"fabric mnnvl: IMEX is owned by {d.owner}"
            + (f" (run by {runner})" if runner else "")
            + "; nvfabric starts nothing")
    for r in d.reasons:
        log.say(f"  {r}")
    for f in findings:
        log.finding(f)
    notify_nothing_to_start(f"IMEX is owned by {d.owner}; nvfabric starts nothing")
    attach(lambda: NOTHING_TO_RUN)
    if o.stay:
        stop.wait_for_stop("--stay: waiting for SIGTERM", log.say)
    return RunResult("not_started", 0, findings, p, imex=prepared)


# -- the end ------------------------------------------------------------------------------------


def _ended(o: RunOptions, p: Plan, result: str, code: int, findings: Sequence[Finding],
           **shown: Any) -> RunResult:
    """The end of a run that started nothing, with the warnings of the options typed that
    the node's fabric does not use (:func:`options_not_for`); a stop signal that came before
    (:mod:`nvfabric.effects.stop`) makes an end decided before the start ``stopped``. Each
    SIGHUP that came meanwhile is said (it is ignored)."""
    for _ in stop.ignored():
        Log().say(stop.SIGHUP_IGNORED)
    ignored = options_not_for(o.typed, p.fabric)
    if ignored:  # said with every end (a human run prints findings only under a title)
        findings = (*findings, *ignored)
        shown["title"] = shown.get("title") or "warnings"
    if stop.received() and result in _BEFORE_START:
        result, code = "stopped", 0
        shown["title"] = "found before the stop" if shown.get("title") else ""
        _say_stopped()
    return RunResult(result, code, tuple(findings), p, **shown)


def _say_stopped() -> None:
    """The one log line of a run stopped before it started anything."""
    name = signal.Signals(stop.received() or signal.SIGTERM).name
    Log().say(f"received {name} before anything was started: stopped")


# -- the options --------------------------------------------------------------------------------


#: The host path options, checked before anything is read under them.
_PATH_OPTIONS = (("state_dir", "--state-dir"), ("fm_bin", "--fm-bin"),
                 ("fm_config", "--fm-config"), ("nvlsm_bin", "--nvlsm-bin"),
                 ("nvlsm_config", "--nvlsm-config"), ("nvlsm_pid_file", "--nvlsm-pid-file"),
                 ("fm_sm_socket", "--fm-sm-socket"), ("imex_bin", "--imex-bin"),
                 ("imex_ctl", "--imex-ctl"), ("imex_config", "--imex-config"))


#: The options of one part of a bring-up (click's parameter name -> the option), with the
#: fabric kinds whose bring-up uses that part: fabric manager on NVSwitch and NVLink 5 nodes,
#: NVLSM before it on NVLink 5 only, IMEX on GB200/GB300 trays only (NVIDIA Fabric Manager User
#: Guide; "NVIDIA IMEX Service"). --ready-timeout, --restart-*, --grace and --state-dir apply
#: to whatever unit runs.
OPTIONS_BY_PART: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("fabric manager", ("nvswitch", "nvlink5"), {
        "fm_sets": "--fm-set", "fabric_mode": "--fabric-mode", "fm_bin": "--fm-bin",
        "fm_config": "--fm-config", "gpu_reset_command": "--gpu-reset-command",
        "gpu_reset_timeout": "--gpu-reset-timeout"}),
    ("NVLSM", ("nvlink5",), {
        "nvlsm_bin": "--nvlsm-bin", "nvlsm_config": "--nvlsm-config",
        "nvlsm_pid_file": "--nvlsm-pid-file", "fm_sm_socket": "--fm-sm-socket",
        "socket_timeout": "--socket-timeout"}),
    ("IMEX", ("mnnvl",), {
        "imex_owner": "--imex-owner", "imex_bin": "--imex-bin", "imex_ctl": "--imex-ctl",
        "imex_config": "--imex-config", "imex_peers": "--imex-peers",
        "imex_local_address": "--imex-local-address",
        "imex_ctl_timeout": "--imex-ctl-timeout"}),
)

#: Why a part does not run on a fabric kind, for the message.
_RUNS_HERE = {"none": "nothing runs on this node", "nvswitch": "fabric manager runs here, "
              "without NVLSM (NVLink 5 only) or IMEX (GB200/GB300 trays)",
              "nvlink5": "NVLSM and fabric manager run here, IMEX only on GB200/GB300 trays",
              "mnnvl": "a GB200/GB300 tray runs IMEX, never a local fabric manager or NVLSM"}


def options_not_for(typed: frozenset[str], fabric: str) -> tuple[Finding, ...]:
    """``option_not_for_fabric`` (warning), one per part of :data:`OPTIONS_BY_PART` whose
    options the operator typed (``typed``: click's parameter names, not defaults) on a node of
    a ``fabric`` kind that does not run that part: ignored, not refused (one unit file serves
    a fleet of mixed nodes), but said. Pure."""
    out = []
    for part, fabrics, options in OPTIONS_BY_PART:
        given = [opt for name, opt in options.items() if name in typed]
        if given and fabric not in fabrics:
            verb = "does" if len(given) == 1 else "do"
            out.append(Finding(
                "option_not_for_fabric", "warning",
                f"{', '.join(given)} {verb} not apply to fabric {fabric}: "
                f"{_RUNS_HERE.get(fabric, 'no ' + part + ' runs here')}; ignored",
                f"{part} options apply on {' and '.join(fabrics)} nodes only; a unit "
                "shared by nodes of several fabric kinds may keep them",
                {"options": given, "part": part, "fabric": fabric}))
    return tuple(out)


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

"""``nvfabric run`` on a GB200/GB300 compute tray (fabric mnnvl): IMEX, never fabric
manager. Read the tray (:func:`nvfabric.facts.node.collect_imex`), prepare
(:func:`nvfabric.bringup.mnnvl.prepare`), then print the dry run, refuse, report the owner
that is not nvfabric, or apply (:func:`nvfabric.effects.apply.apply`) and supervise
``nvidia-imex`` (RUN.md R07). Output: :mod:`nvfabric.cli.runview`.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from nvfabric.bringup.prepared import Prepared
from nvfabric.cli import runview
from nvfabric.cli.runlock import hold
from nvfabric.cli.runview import Emit
from nvfabric.effects import stop
from nvfabric.model.inventory import Inventory
from nvfabric.observe.hook import attach
from nvfabric.observe.unitstate import NOTHING_TO_RUN, of_supervisor
from nvfabric.rules.plan import Plan
from nvfabric.supervisor import Log, Supervisor, notify_nothing_to_start, wait_for_stop

if TYPE_CHECKING:
    from nvfabric.bringup.mnnvl import ImexRunOptions
    from nvfabric.cli.run import RunOptions


def run_mnnvl(o: RunOptions, inv: Inventory, p: Plan, peers_text: str | None,
               emit: Emit) -> NoReturn:
    """GB200/GB300 trays: IMEX, started by nvfabric only when it is the host owner."""
    from nvfabric.bringup import imexd, mnnvl
    from nvfabric.cli.run import serve
    from nvfabric.facts import node

    hold(o.root, o.state_dir, o.dry_run, emit)
    serve(o)
    opts = mnnvl.ImexRunOptions(
        root=o.root, state_dir=o.state_dir, owner=o.imex_owner,
        paths=imexd.ImexPaths(o.imex_bin, o.imex_ctl, o.imex_config),
        peers_file=o.imex_peers, local_addresses=o.imex_local_address, peers_text=peers_text,
        ctl_timeout_s=o.imex_ctl_timeout, grace_s=o.grace)
    facts = node.collect_imex(o.root, inv, node.ImexRequest(
        o.imex_owner, o.imex_bin, o.imex_ctl, o.imex_config, o.imex_peers, peers_text,
        o.imex_local_address))
    prepared = mnnvl.prepare(facts, p, opts)
    emit = functools.partial(emit, imex=prepared)
    refused = bool(prepared.refusals)
    if o.dry_run:
        if not o.as_json:
            runview.dry_run(prepared, refused)
        emit("refused" if refused else "would_start" if prepared.processes else "not_started",
             1 if refused else 0, [*prepared.refusals, *prepared.warnings], listed=prepared,
             title="problems")
    if refused:
        emit("refused", 1, list(prepared.refusals), title="refused: nothing was started")
    if not prepared.processes:
        _imex_not_ours(o, p, prepared)
    _supervise_imex(o, opts, prepared, p, emit)


def _imex_not_ours(o: RunOptions, p: Plan, prepared: Prepared) -> NoReturn:
    """IMEX is run by someone else (DRA driver, Slurm, the host unit) or by nobody on
    request: say who, report, and start nothing (``--stay``: until SIGTERM)."""
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
    for f in prepared.warnings:
        log.finding(f)
    runview.report("not_started", 0, list(prepared.warnings), p,
                   as_json=o.as_json, dry_run=False, imex=prepared)
    notify_nothing_to_start(f"IMEX is owned by {d.owner}; nvfabric starts nothing")
    attach(lambda: NOTHING_TO_RUN)
    if o.stay:
        wait_for_stop("--stay: waiting for SIGTERM", log)
    sys.exit(0)


def _supervise_imex(o: RunOptions, opts: ImexRunOptions, prepared: Prepared, p: Plan,
                    emit: Emit) -> NoReturn:
    """Make channel0 and write the files (:func:`nvfabric.effects.apply.apply`), then
    supervise ``nvidia-imex`` until ``nvidia-imex-ctl -q`` prints READY and after."""
    from nvfabric.bringup.mnnvl import imex_json
    from nvfabric.effects.apply import apply
    from nvfabric.facts import imexhost
    from nvfabric.facts.imexready import readiness_probe
    from nvfabric.observe.history import begin
    from nvfabric.observe.kernelwatch import from_spec
    from nvfabric.rules.diagnose import Classifier

    assert prepared.imex is not None
    ownership = prepared.imex.ownership
    log = Log()
    log.say(f"fabric mnnvl: IMEX owner {ownership.owner}, nvfabric starts and supervises "
            "nvidia-imex (" + "; ".join(ownership.reasons) + ")")
    for note in prepared.notes:
        log.say(note)
    for f in prepared.warnings:
        log.finding(f)
    stop.check()  # a stop that came where nothing waited: before anything is made
    failed = apply(prepared, o.root, log.say)
    # what the report shows of the channels: read again, after they were made
    prepared = replace(prepared, imex=replace(prepared.imex,
                                              channels=imexhost.read_channels(o.root)))
    emit = functools.partial(emit, imex=prepared)
    if failed:
        emit("refused", 1, failed, title="refused: nothing was started")
    info: dict[str, Any] = {"fabric": "mnnvl", "driver_version": p.driver_version,
                            "imex_owner": ownership.owner, "node_list_id": imex_json(prepared)[
                                "node_list_id"]}
    # dra-host: READY over the command socket the DRA driver's kubelet plugin asks.
    socket = opts.resolve(ownership.socket) if ownership.socket else None
    # The pid file (<state dir>/imex.pid) and the ready file tell `imex owner` and `status`
    # that this run owns IMEX (owner nvfabric, its pid and state dir).
    # the event history and the kernel log watch, as the lean supervisor has them
    history = begin(opts.resolve(opts.state_dir), [s.name for s in prepared.processes], info)
    spec = o.kernel_watch()
    sup = Supervisor(
        prepared.processes, o.policy(), log=log, classifier=lambda name: Classifier("mnnvl"),
        probe=readiness_probe(opts.resolve(opts.paths.ctl), prepared.files[1].path,
                              opts.ctl_timeout_s, socket),
        ready_file=opts.ready_file, ready_info=info, pid_dir=opts.resolve(opts.state_dir),
        watch=None if spec is None else from_spec(spec, "mnnvl", history.append),
        history=history.append)
    attach(lambda: of_supervisor(sup), imex=(opts.resolve(opts.paths.ctl), prepared.files[1].path),
           phase=lambda: sup.unit.phase)
    stop.handover()  # the signals are the supervisor's from here on
    outcome = sup.run()
    emit(outcome.reason, outcome.exit_code, list(outcome.findings), listed=prepared,
         outcome=outcome, title="run failed" if outcome.exit_code else "")

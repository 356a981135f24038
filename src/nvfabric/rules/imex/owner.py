"""Who runs IMEX on this node, and who makes its channels. Pure: decides from
:class:`OwnerEvidence` (read by :func:`nvfabric.facts.imex.tray.gather_evidence`).

Owners of the daemon (NVIDIA IMEX guide, "Deployment Models"; exactly one per tray):

- ``host``: one node-wide daemon for the whole node list, run by the packaged
  ``nvidia-imex.service`` (runner ``unit``) or by ``nvfabric run`` (runner ``nvfabric``).
- ``dra``: NVIDIA's DRA driver in its default mode (``imex.mode=driverManaged``) runs one daemon
  per ComputeDomain in a pod; the host unit must be disabled and masked (DRA driver
  prerequisites, "Driver-managed IMEX").
- ``dra-host``: the DRA driver with ``imex.mode=hostManaged`` (feature gate
  ``HostManagedIMEXDaemon``): the admin runs one host daemon with ``IMEX_CMD_ENABLED=1`` and
  ``IMEX_CMD_UNIX_DOMAIN_PATH`` at the socket the kubelet plugin queries (``nvidia-imex-ctl -q
  --u=<socket>`` at claim prepare; default /etc/nvidia-imex/imex_ctrl.sock); the driver
  creates no daemons and hands out channels per claim (DRA driver prerequisites,
  "Host-managed IMEX"). The runner is the unit, or ``nvfabric run``.
- ``slurm``: a Slurm prolog writes the job's node list and starts IMEX per job: through the
  host unit (runner ``unit``: AWS ParallelCluster's prolog restarts nvidia-imex.service and
  skips IMEX when it is not enabled, case I01) or by running the daemon itself (runner
  ``prolog``).
- ``nvfabric``: a live ``nvfabric run`` supervises nvidia-imex now (its run lock, ready file
  and pid file in its state directory say so): the answer while it runs, not a choice.
- ``none``: nothing runs IMEX here.
- ``unknown``: no owner shows, but part of what Slurm runs was not read whole: ``imex owner``
  and ``status`` warn (``imex_owner_unknown``), ``run`` and ``install --from`` refuse.

Channels are a second duty: Slurm's ``switch/nvidia_imex`` plugin makes each job's channel in
the job's own mount namespace (SchedMD src/plugins/switch/nvidia_imex), the DRA driver one per
claim; then nobody else creates any and a missing host channel0 is no fault
(:data:`CHANNELS_PER_JOB`).

Two daemons on one node break each other (``Failed to allocate Imex session ...
NV_ERR_IN_USE``): that is ``imex_owner_conflict``, with the exact fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nvfabric.model.commandline import IMEX_UNIT
from nvfabric.model.findings import Finding
from nvfabric.rules.imex.slurm import SlurmFacts
from nvfabric.rules.imex.tables import DRA_HOST_SOCKET, DRA_HOST_UNIT_FIX

#: The owners an operator may name (``--imex-owner``).
OWNERS = ("host", "dra", "dra-host", "slurm", "none")
#: The answer when the evidence could not be read whole (never requested).
UNKNOWN = "unknown"
#: Who may create channels: Slurm's switch plugin, the DRA driver, a Slurm prolog, nvfabric
#: run, or the host (its admin, or the driver's NVreg_CreateImexChannel0).
CHANNEL_OWNERS = ("slurm", "dra", "prolog", "nvfabric", "host")
#: Channel owners that make channels per job or claim: no host channel is expected.
CHANNELS_PER_JOB = ("slurm", "dra")


@dataclass(frozen=True)
class DraMode:
    """The DRA driver's IMEX mode as its kubelet plugin runs: ``mode`` ``hostManaged`` or
    ``driverManaged``; ``socket`` the host path of the command socket it queries (its
    ``IMEX_HOST_SOCKET_PATH`` under its driver root); ``where`` the evidence line."""

    mode: str
    socket: str
    where: str

    @property
    def host_managed(self) -> bool:
        return self.mode == "hostManaged"


@dataclass(frozen=True)
class RunFacts:
    """A live ``nvfabric run`` supervising nvidia-imex: ``pid`` (the run lock's holder),
    ``state_dir`` (host path), ``imex_pid`` the daemon it runs (its pid file), ``ready`` its
    ready file is current, ``serves`` the owner it runs IMEX as (``host``, ``dra-host``; from
    the ready file), ``slurm`` the state directory is the one nvfabric's Slurm prolog
    starts it in, ``socket`` the command socket its daemon serves for ``dra-host`` (host
    path; the ready file's ``imex_socket``)."""

    pid: int
    state_dir: str
    imex_pid: int | None = None
    ready: bool = False
    serves: str | None = None
    slurm: bool = False
    socket: str | None = None

    @property
    def serves_dra_host(self) -> bool:
        """It runs the host daemon of the DRA driver's host-managed mode: the driver makes the
        channels per claim, the kubelet plugin asks the daemon over its command socket."""
        return self.serves == "dra-host"

    def line(self) -> str:
        daemon = f", nvidia-imex pid {self.imex_pid}" if self.imex_pid else ""
        state = "ready" if self.ready else "not ready yet"
        by = ", started by nvfabric's Slurm prolog" if self.slurm else ""
        mode = (" for the DRA driver's host-managed mode (dra-host)" if self.serves_dra_host
                else "")
        return (f"nvfabric run pid {self.pid} (state dir {self.state_dir}{daemon}, {state}"
                f"{by}) supervises nvidia-imex{mode}")

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "state_dir": self.state_dir, "imex_pid": self.imex_pid,
                "ready": self.ready, "serves": self.serves, "slurm_prolog": self.slurm,
                "socket": self.socket}


@dataclass(frozen=True)
class OwnerEvidence:
    """What the host shows, each fact naming where it comes from.

    ``dra``: DRA kubelet plugin state found; ``dra_mode``: the kubelet plugin's IMEX mode
    (None: no plugin process seen); ``unit_enabled``: wants/ symlinks of the host unit;
    ``unit_masked``: the unit is masked (a link to /dev/null), which overrides enabled;
    ``slurm``: slurm.conf and the scripts it runs (:class:`~nvfabric.rules.imex.slurm.
    SlurmFacts`); ``run``: a live nvfabric run supervising nvidia-imex; ``daemons``: pids of
    the nvidia-imex processes running now.
    """

    dra: tuple[str, ...] = ()
    unit_enabled: tuple[str, ...] = ()
    unit_masked: str | None = None
    slurm: SlurmFacts = field(default_factory=SlurmFacts)
    dra_mode: DraMode | None = None
    run: RunFacts | None = None
    daemons: tuple[int, ...] = ()

    @property
    def unit_active(self) -> bool:
        """Enabled and not masked: the unit starts at boot."""
        return bool(self.unit_enabled) and self.unit_masked is None

    @property
    def dra_present(self) -> bool:
        return bool(self.dra) or self.dra_mode is not None

    @property
    def dra_host_managed(self) -> bool:
        return self.dra_mode is not None and self.dra_mode.host_managed

    @property
    def other_daemons(self) -> tuple[int, ...]:
        """nvidia-imex processes that are not the live run's."""
        own = self.run.imex_pid if self.run else None
        return tuple(p for p in self.daemons if p != own)

    def lines(self) -> tuple[str, ...]:
        out = [f"DRA: {d}" for d in self.dra]
        if self.dra_mode:
            out.append(f"DRA: {self.dra_mode.where}")
        out += [f"{IMEX_UNIT} enabled: {w}" for w in self.unit_enabled]
        if self.unit_masked:
            out.append(f"{IMEX_UNIT} masked: {self.unit_masked}")
        out += [f"Slurm: {s}" for s in self.slurm.lines()]
        if self.run:
            out.append(self.run.line())
        if self.other_daemons:
            out.append("nvidia-imex running: pid " + ", ".join(map(str, self.other_daemons)))
        return tuple(out)


@dataclass(frozen=True)
class Ownership:
    """The decision. ``owner``: one of :data:`OWNERS` or ``nvfabric`` (a live run); ``source``
    ``requested`` or ``detected``; ``runner`` who runs the daemon (``unit``, ``nvfabric``,
    ``prolog``; None when nobody on the host does); ``channels`` who creates the channels
    (:data:`CHANNEL_OWNERS`); ``socket`` the command socket a ``dra-host`` daemon serves (also
    one a live run started as ``dra-host`` serves);
    ``run`` the live nvfabric run; ``conflict`` the ``imex_owner_conflict`` finding when two
    owners claim the node, ``unknown`` ``imex_owner_unknown`` (owner :data:`UNKNOWN`);
    ``slurm_script`` the line of the Slurm script that runs IMEX."""

    owner: str
    source: str
    runner: str | None
    evidence: tuple[str, ...]
    reasons: tuple[str, ...]
    conflict: Finding | None = None
    channels: str = "host"
    socket: str | None = None
    run: RunFacts | None = None
    slurm_conf: tuple[str, str] | None = None
    slurm_script: str | None = None
    unknown: Finding | None = None

    @property
    def refusal(self) -> Finding | None:
        """Why nothing may be started or set for IMEX: two owners, or an owner not known."""
        return self.conflict or self.unknown

    @property
    def nvfabric_starts_imex(self) -> bool:
        """``nvfabric run`` starts and supervises the host daemon (for ``host`` or
        ``dra-host``)."""
        return (self.owner in ("host", "dra-host") and self.runner == "nvfabric"
                and self.conflict is None)

    @property
    def required_channels(self) -> tuple[int, ...]:
        """The host channels that must exist: channel0, unless channels are made per job or
        claim (:data:`CHANNELS_PER_JOB`). The one answer of ``run``'s check, ``status``,
        ``imex owner`` and ``imex channel`` (``status`` and ``run`` ask none of owner ``none``,
        where nothing runs IMEX; ``imex channel`` checks the channel0 the host owner to come
        will need)."""
        return () if self.channels in CHANNELS_PER_JOB else (0,)

    @property
    def channel_duty(self) -> str:
        """One line: the host channels :attr:`required_channels` names and who makes them."""
        if self.channels in CHANNELS_PER_JOB:
            return "no host channel needed: " + _CHANNEL_WHY[self.channels].removeprefix(
                "channels: ")
        if self.owner == "none":
            return ("channel0, which IMEX on the host will need (nobody runs IMEX yet; "
                    "`nvfabric run` makes it, the host unit needs it made)")
        unknown = "the IMEX owner is not known (`imex owner`), so " if self.owner == UNKNOWN \
            else ""
        return f"{unknown}channel0 needed, made by {_CHANNEL_MAKER[self.channels]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "source": self.source,
            "runner": self.runner,
            "channel_owner": self.channels,
            "socket": self.socket,
            "run": self.run.to_json() if self.run else None,
            "slurm_conf": None if self.slurm_conf is None else {
                "path": self.slurm_conf[0], "found_by": self.slurm_conf[1]},
            "evidence": list(self.evidence),
            "reasons": list(self.reasons),
            "conflict": self.conflict.to_json() if self.conflict else None,
            "unknown": self.unknown.to_json() if self.unknown else None,
        }


def detect(ev: OwnerEvidence) -> str:
    """The owner the evidence points to: a live nvfabric run first (it owns IMEX now), then
    the DRA driver (``dra-host`` in its host-managed mode), then a Slurm script that runs
    IMEX, then :data:`UNKNOWN` when what Slurm runs was not read whole (even beside an
    enabled unit: an unread prolog may drive it or run a daemon), then the host unit."""
    if ev.run is not None and not ev.run.slurm:
        return "nvfabric"
    if ev.dra_present:
        return "dra-host" if ev.dra_host_managed else "dra"
    if ev.slurm.daemon_scripts or (ev.run is not None and ev.run.slurm):
        return "slurm"
    if ev.slurm.unread:
        return UNKNOWN
    if ev.unit_active:
        return "host"
    return "none"


def decide(ev: OwnerEvidence, requested: str | None = None, for_run: bool = False) -> Ownership:
    """Decide the owner; ``requested`` is ``--imex-owner`` (None: detect). ``for_run``: the
    caller is ``nvfabric run``, which becomes the host owner when nothing else claims the node
    (and runs the daemon of ``dra-host`` when the unit does not).

    Raises ValueError for an owner not in :data:`OWNERS`.
    """
    if requested is not None and requested not in OWNERS:
        raise ValueError(f"unknown IMEX owner {requested!r}; known: {', '.join(OWNERS)}")
    detected = detect(ev)
    reasons: list[str] = []
    if requested is not None:
        owner, source = requested, "requested"
        reasons.append(f"--imex-owner {requested} (detected: {detected})")
    else:
        owner, source = detected, "detected"
        reasons.append(_why_detected(ev, detected))
    if owner == "none" and requested is None and for_run:
        owner = "host"
        reasons.append("no other owner on this node: nvfabric run starts and supervises "
                       "nvidia-imex")
    runner = _runner(ev, owner, requested, for_run, reasons)
    channels = _channel_owner(ev, owner, runner)
    if channels in CHANNELS_PER_JOB:
        reasons.append(_CHANNEL_WHY[channels])
    socket = _socket(ev, owner)
    if socket is not None:
        reasons.append(f"the host daemon serves the DRA driver's command socket {socket} "
                       "(IMEX_CMD_ENABLED=1, IMEX_CMD_UNIX_DOMAIN_PATH)")
    conflict = _conflict(ev, owner, runner, requested, for_run)
    scripts = ev.slurm.daemon_scripts
    return Ownership(
        owner, source, runner, ev.lines(), tuple(reasons), conflict, channels, socket, ev.run,
        (ev.slurm.conf, ev.slurm.found_by) if ev.slurm.conf else None,
        scripts[0].line() if scripts else None, _unknown(ev, for_run) if owner == UNKNOWN else None)


def _unknown(ev: OwnerEvidence, for_run: bool) -> Finding:
    """``imex_owner_unknown``: an error for ``run``, else a warning."""
    unread = ev.slurm.unread
    more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
    return Finding(
        "imex_owner_unknown", "error" if for_run else "warning",
        ("nvfabric run starts no IMEX daemon: " if for_run else "") + "who runs IMEX is not "
        f"known: part of what Slurm runs on this node was not read whole ({unread[0]}{more}), "
        "and it may run IMEX",
        "name the owner: --imex-owner slurm if a Slurm prolog runs IMEX, --imex-owner host "
        "for the host unit or nvfabric run, --imex-owner none for no IMEX; or make the "
        "prologs readable within the bounds (docs/imex.md)",
        {"unread": list(unread)})


#: Who makes the host's channel0, per channel owner that needs one.
_CHANNEL_MAKER = {
    "prolog": "the Slurm prolog",
    "nvfabric": "`nvfabric run`",
    "host": "the host (the driver with NVreg_CreateImexChannel0=1, or `nvfabric imex channel "
            "--create 0`)",
}

#: Why no host channel is expected, per channel owner.
_CHANNEL_WHY = {
    "slurm": "channels: Slurm's switch/nvidia_imex plugin gives each job its own channel "
             "(made in the job's namespace): nvfabric creates none",
    "dra": "channels: the DRA driver creates them per claim: nvfabric creates none",
}


def _runner(ev: OwnerEvidence, owner: str, requested: str | None, for_run: bool,
            reasons: list[str]) -> str | None:
    """Who runs the daemon for ``owner`` (a reason line added)."""
    if owner in ("host", "dra-host"):
        if ev.unit_active and not (for_run and requested in ("host", "dra-host")):
            reasons.append(f"{IMEX_UNIT} runs IMEX; nvfabric starts no second daemon")
            return "unit"
        if for_run:
            return "nvfabric"
        return "unit" if ev.unit_active else None
    if owner == "nvfabric":
        return "nvfabric"
    if owner == "slurm":
        if ev.run is not None and ev.run.slurm:
            reasons.append("nvfabric's Slurm prolog started nvfabric run for the job")
            return "prolog"
        runner = ev.slurm.runner
        if runner == "unit":
            reasons.append(f"the Slurm prolog drives {IMEX_UNIT}: the unit runs the daemon "
                           "(it must stay enabled), the prolog restarts it per job")
        elif runner == "prolog":
            reasons.append("the Slurm prolog runs the daemon itself: the host unit must not "
                           "(masked)")
        return runner
    return None


def _serves_dra_host(ev: OwnerEvidence, owner: str) -> bool:
    """The host daemon of the DRA driver's host-managed mode: ``dra-host`` decided now, or a
    live nvfabric run started as it (``run --imex-owner dra-host``, its ready file says so)."""
    return owner == "dra-host" or (owner == "nvfabric" and ev.run is not None
                                   and ev.run.serves_dra_host)


def _socket(ev: OwnerEvidence, owner: str) -> str | None:
    """The command socket the DRA driver's kubelet plugin asks the host daemon over (host
    path): the live run's, else the one the plugin runs with, else the driver's default."""
    if not _serves_dra_host(ev, owner):
        return None
    if owner == "nvfabric" and ev.run is not None and ev.run.socket:
        return ev.run.socket
    return ev.dra_mode.socket if ev.dra_mode else DRA_HOST_SOCKET


def _channel_owner(ev: OwnerEvidence, owner: str, runner: str | None) -> str:
    if ev.slurm.switch:
        return "slurm"
    if owner == "dra" or _serves_dra_host(ev, owner):
        return "dra"
    if owner == "slurm" and ev.slurm.creates_channels:
        return "prolog"
    if runner == "nvfabric":
        return "nvfabric"
    return "host"


def _why_detected(ev: OwnerEvidence, detected: str) -> str:
    if detected == "nvfabric":
        assert ev.run is not None
        return ev.run.line()
    if detected == "dra":
        return "DRA driver kubelet plugin state present: the DRA driver runs IMEX per ComputeDomain"
    if detected == "dra-host":
        return ("the DRA driver runs with imex.mode=hostManaged: one host nvidia-imex serves "
                "every ComputeDomain")
    if detected == "slurm":
        scripts = ev.slurm.daemon_scripts
        if scripts:
            return f"Slurm runs IMEX per job: {scripts[0].line()}"
        return "nvfabric's Slurm prolog runs IMEX for the job"
    if detected == "host":
        return f"{IMEX_UNIT} is enabled: the host runs IMEX"
    if detected == UNKNOWN:
        return "no owner shows, but part of what Slurm runs was not read whole: unknown"
    if ev.unit_masked:
        return f"{IMEX_UNIT} is masked and no DRA or Slurm evidence: nothing runs IMEX"
    if ev.other_daemons:
        return ("nvidia-imex runs (pid " + ", ".join(map(str, ev.other_daemons)) + ") but no "
                "owner shows: no enabled unit, no DRA state, no Slurm prolog, no nvfabric run")
    prolog = "no Slurm script that runs IMEX" if ev.slurm.conf else "no Slurm prolog"
    return f"no DRA plugin state, no enabled host unit, {prolog}: nothing runs IMEX"


def _conflict(ev: OwnerEvidence, owner: str, runner: str | None, requested: str | None,
              for_run: bool) -> Finding | None:
    """The first way two owners claim this node, as one finding naming both."""
    lines = list(ev.lines())
    # The driver runs its own daemons: its mode says so, or (mode not seen) its state is here
    # and the operator did not name the host-managed mode.
    known_driver = ev.dra_mode is not None and not ev.dra_mode.host_managed
    driver_managed = known_driver or (ev.dra_present and ev.dra_mode is None
                                      and requested != "dra-host")
    if (owner == "dra" or driver_managed) and ev.unit_active:
        return _finding(
            f"the DRA driver owns IMEX on this node and {IMEX_UNIT} is enabled: two IMEX "
            "daemons fail with 'Failed to allocate Imex session ... NV_ERR_IN_USE'",
            f"on DRA nodes disable and mask the host unit: {DRA_HOST_UNIT_FIX}",
            ["dra", "host"], lines)
    if (requested == "host" and driver_managed) or (requested == "dra-host" and known_driver):
        return _finding(
            f"--imex-owner {requested} on a node with DRA driver ComputeDomain state: the DRA "
            "driver starts its own IMEX daemon here",
            "run with --imex-owner dra (the DRA driver owns IMEX); with the driver in "
            "imex.mode=hostManaged use --imex-owner dra-host; or remove the node from the "
            "DRA driver's ComputeDomains before the host runs IMEX",
            [requested, "dra"], lines)
    if ev.run is not None and not ev.run.slurm:
        found = _run_conflict(ev, owner, requested, for_run, lines)
        if found is not None:
            return found
    if for_run and requested in ("host", "dra-host") and ev.unit_active:
        return _finding(
            f"--imex-owner {requested} under nvfabric run while {IMEX_UNIT} is enabled: it "
            "and nvfabric would each start nvidia-imex",
            f"let nvfabric supervise IMEX: systemctl disable --now {IMEX_UNIT}; or leave IMEX "
            "to the unit and run without --imex-owner",
            [requested, "host"], lines)
    if owner == "slurm" and runner == "prolog" and ev.unit_active and not for_run:
        return _finding(
            f"the Slurm prolog runs nvidia-imex itself and {IMEX_UNIT} is enabled: the unit's "
            "daemon at boot and the job's take the same IMEX session (NV_ERR_IN_USE)",
            f"mask the host unit: systemctl disable --now {IMEX_UNIT} && systemctl mask "
            f"{IMEX_UNIT} (nvfabric install --from does this for this owner)",
            ["slurm", "host"], lines)
    return None


def _run_conflict(ev: OwnerEvidence, owner: str, requested: str | None, for_run: bool,
                  lines: list[str]) -> Finding | None:
    """Another owner's evidence while nvfabric run supervises nvidia-imex (not started by
    nvfabric's Slurm prolog, whose run is that prolog's daemon)."""
    run = ev.run
    assert run is not None
    who = f"nvfabric run (pid {run.pid}, state dir {run.state_dir})"
    others: list[tuple[str, str]] = []
    if for_run:
        others.append(("nvfabric", f"{who} already supervises nvidia-imex on this node"))
    if requested is not None and owner != "nvfabric":
        others.append((requested, f"--imex-owner {requested} names another owner"))
    driver_managed = ev.dra_mode is not None and not ev.dra_mode.host_managed
    if ev.dra_present and (driver_managed or run.serves != "dra-host"):
        others.append(("dra", "the DRA driver's kubelet plugin state is here"))
    scripts = ev.slurm.daemon_scripts
    if scripts:
        others.append(("slurm", f"a Slurm script runs IMEX ({scripts[0].line()})"))
    if ev.other_daemons:
        others.append(("host", "another nvidia-imex runs (pid "
                       + ", ".join(map(str, ev.other_daemons)) + f"; {IMEX_UNIT} started?)"))
    if not others:
        return None
    return _finding(
        f"{who} supervises nvidia-imex and " + "; ".join(why for _, why in others)
        + ": two owners take the same IMEX session (NV_ERR_IN_USE)",
        "keep one owner: stop the other (its unit, the DRA driver on this node, the prolog), "
        f"or stop nvfabric run (systemctl stop nvfabric, or kill -TERM {run.pid})",
        ["nvfabric", *dict.fromkeys(o for o, _ in others)], lines)


def _finding(message: str, hint: str, owners: list[str], lines: list[str]) -> Finding:
    return Finding("imex_owner_conflict", "error", message, hint,
                   {"owners": owners, "evidence": lines})


@dataclass(frozen=True)
class UnitPolicy:
    """What to do with :data:`IMEX_UNIT` after the IMEX package is installed: ``action``
    ``enable`` | ``disable`` | ``mask``; ``now`` whether a live host also starts/stops it
    (``--now``); ``reason`` the sentence the output gives."""

    action: str
    now: bool
    reason: str


def unit_policy(decision: Ownership) -> UnitPolicy:
    """The host unit follows its owner (NVIDIA GPU Operator, "NVIDIA DRA Driver for GPUs": the
    host unit must not run on ComputeDomain nodes, disabled and masked; DRA driver
    prerequisites, "Host-managed IMEX": it must run; AWS PCS user guide, "Configure
    UltraServer instances": a per-job prolog needs nvidia-imex enabled):

    - ``host`` -> enabled (and started on a live host);
    - ``dra-host`` -> enabled (the driver's documented host service; its config needs the
      command socket);
    - ``slurm`` whose prolog drives the unit -> enabled, not started (the prolog restarts it
      per job and skips IMEX when it is disabled: case I02);
    - ``slurm`` whose prolog runs the daemon itself, and ``dra`` -> masked (and stopped), so
      that no package upgrade or ``systemctl enable`` brings a second owner back;
    - ``slurm`` otherwise -> disabled, not stopped; ``nvfabric`` (a live run) -> disabled,
      not stopped; ``none`` -> disabled and stopped. ValueError for any other word
      (:data:`UNKNOWN` included: ``install --from`` refuses it first).
    """
    owner, runner = decision.owner, decision.runner
    if owner == "host":
        return UnitPolicy("enable", True,
                          f"the host owns IMEX: {IMEX_UNIT} runs the node-wide daemon")
    if owner == "dra-host":
        return UnitPolicy("enable", True,
                          "the DRA driver runs with imex.mode=hostManaged: the host "
                          f"{IMEX_UNIT} serves every ComputeDomain; its config.cfg needs "
                          "IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH="
                          f"{decision.socket or DRA_HOST_SOCKET}")
    if owner == "dra":
        return UnitPolicy("mask", True,
                          "the DRA driver runs IMEX per ComputeDomain in its pods with the host "
                          f"binary; a node-wide {IMEX_UNIT} would hold the IMEX session "
                          "(NV_ERR_IN_USE): masked, so that an upgrade cannot enable it again")
    if owner == "slurm" and runner == "unit":
        return UnitPolicy("enable", False,
                          f"the Slurm prolog drives {IMEX_UNIT} ({decision.slurm_script}): it "
                          "restarts the unit per job with the job's node list and skips IMEX "
                          "when the unit is not enabled, so the unit stays enabled")
    if owner == "slurm" and runner == "prolog":
        return UnitPolicy("mask", True,
                          "the Slurm prolog runs nvidia-imex itself"
                          + (f" ({decision.slurm_script})" if decision.slurm_script else "")
                          + f": {IMEX_UNIT} would be a second daemon, so it is masked (not "
                          "just disabled: an upgrade cannot bring it back)")
    if owner == "slurm":
        return UnitPolicy("disable", False,
                          "Slurm runs IMEX per job; nothing starts it at boot")
    if owner == "nvfabric":
        return UnitPolicy("disable", False,
                          f"nvfabric run supervises nvidia-imex now: {IMEX_UNIT} stays off")
    if owner == "none":
        return UnitPolicy("disable", True,
                          f"no owner runs IMEX here: {IMEX_UNIT} stays off until one is chosen "
                          "(DRA driver, Slurm prolog, or --imex-owner host)")
    raise ValueError(f"unknown IMEX owner {owner!r}; known: {', '.join(OWNERS)}")

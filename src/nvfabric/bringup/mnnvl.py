"""The mnnvl path of ``nvfabric run`` (GB200/GB300 compute trays): decide who owns IMEX, then
either start nothing and report (DRA driver, Slurm, the host unit, nobody), or, when nvfabric
is the host owner, check or create channel0, write the checked node list and the effective
config.cfg into the state directory, and supervise ``nvidia-imex -c <cfg>`` until
``nvidia-imex-ctl -q`` prints READY (RUN.md R07). Never fabric manager.

Imperative shell: reads the host through :mod:`.host`, decides with the pure modules, spawns
only through :class:`nvfabric.supervisor.Supervisor`. ``prepare`` changes nothing, so
``--dry-run`` shows exactly what ``apply`` would do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nvfabric.bringup import imexd as imex_service
from nvfabric.bringup.spec import PlannedFile, ServiceSpec, already_running
from nvfabric.cli.render import console, print_findings, print_json
from nvfabric.effects.atomic import write_atomic
from nvfabric.facts import imexctl as ctl
from nvfabric.facts import imexhost as host
from nvfabric.facts.execinfo import exec_error
from nvfabric.facts.fs import under
from nvfabric.model import keyvalue
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.observe.hook import attach
from nvfabric.observe.unitstate import NOTHING_TO_RUN, of_supervisor
from nvfabric.rules.imex import channels, config, nodes, owner
from nvfabric.rules.imex.domain import node_list_id, plural
from nvfabric.rules.imex.tables import CTL_TIMEOUT_S, NODES_CONFIG_PATH
from nvfabric.rules.plan import Plan
from nvfabric.supervisor import (
    GpuCheck,
    Log,
    Outcome,
    Policy,
    Supervisor,
    ensure_dir,
    notify_nothing_to_start,
    printable,
    run_result,
    wait_for_stop,
)

EFFECTIVE_CFG = "imex/config.cfg"
EFFECTIVE_NODES = "imex/nodes_config.cfg"


@dataclass(frozen=True)
class ImexRunOptions:
    """Operator choices (host paths; resolved under ``root``). ``owner``: ``--imex-owner``
    (None: detect); ``peers_file``: ``--imex-peers`` (None: the node list the shipped config
    names); ``peers_text``: that file's text, read by the command line like ``imex config
    --peers`` reads it (an unreadable or binary file is exit 2 there); ``local_addresses``:
    ``--imex-local-address`` (empty: the node's interfaces)."""

    root: str = "/"
    state_dir: str = "/run/nvfabric"
    owner: str | None = None
    paths: imex_service.ImexPaths = field(default_factory=imex_service.ImexPaths)
    peers_file: str | None = None
    peers_text: str | None = None
    local_addresses: tuple[str, ...] = ()
    ctl_timeout_s: float = CTL_TIMEOUT_S
    grace_s: float = 10.0

    def resolve(self, path: str) -> str:
        return under(self.root, path) if os.path.abspath(self.root) != "/" else path


@dataclass(frozen=True)
class Prepared:
    """What the run would do. ``refusals``: errors that stop it before any change;
    ``warnings``: reported, not blocking; ``create_channel``: channel0 must be made;
    ``spec``/``files``: set only when nvfabric starts nvidia-imex."""

    ownership: owner.Ownership
    facts: channels.ChannelFacts
    refusals: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    create_channel: bool = False
    spec: ServiceSpec | None = None
    files: tuple[PlannedFile, ...] = ()
    node_list: tuple[nodes.Peer, ...] = ()
    notes: tuple[str, ...] = ()
    channel_at: str = ""  # where channel0 is made: its path under the root (confined)

    @property
    def starts_imex(self) -> bool:
        return self.spec is not None

    def actions(self) -> list[str]:
        if not self.create_channel or self.facts.major is None:
            return []
        path = self.channel_at or channels.channel_path(0)
        return [f"mknod {path} c {self.facts.major} 0 && chmod 0666 {path}"]


def _imex_install_line(root: str, driver_version: str | None) -> str:
    """The ``nvfabric install`` line that puts nvidia-imex where ``run`` looks (the package's
    ``/usr/bin``; a redist archive under ``/opt/nvfabric`` is not read for IMEX): the node's
    package family from its os-release (rpm distributions: ``--source rpm``, else apt), with
    ``--root`` when the node is not ``/`` (RUN.md R08)."""
    import shlex

    from nvfabric.artifacts.naming import distro_dir
    from nvfabric.facts.nvidia import os_release

    distro = distro_dir(dict(os_release(root))) or ""
    source = "apt" if not distro or distro.startswith(("ubuntu", "debian")) else "rpm"
    where = "" if os.path.abspath(root) == "/" else f" --root {shlex.quote(os.path.abspath(root))}"
    version = f" --driver-version {driver_version}" if driver_version else ""
    return f"nvfabric install{where} --source {source} --components imex{version}"


def prepare(opts: ImexRunOptions, driver_version: str | None) -> Prepared:
    """Read the node and decide; changes nothing."""
    decision = owner.decide(host.gather_evidence(opts.root), opts.owner, for_run=True)
    facts = host.read_channels(opts.root)
    if decision.conflict is not None:
        return Prepared(decision, facts, refusals=(decision.conflict,))
    if not decision.nvfabric_starts_imex:
        return Prepared(decision, facts, warnings=channels.check(facts))
    refusals: list[Finding] = list(already_running(opts.root, ("imex",)))
    warnings: list[Finding] = []
    create = channels.needs_create(facts, 0)
    channel_at = ""
    if create:  # before anything is written: the node would be made outside the root
        try:
            channel_at = host.channel_target(opts.root, 0)
        except host.PathEscape as err:
            raise usage_error(str(err), "a link on the channel's path under --root (the "
                              "channel directory, a directory above it, or the channel "
                              "node itself) leads out of it: remove that link (or point it "
                              "inside the root); nothing was started or created") from None
    if facts.major is None:
        refusals += channels.check(facts)
    else:
        warnings += [f for f in channels.check(facts)
                     if f.code != "imex_channel_missing" or not create]
    paths = opts.paths
    shipped_path = opts.resolve(paths.shipped_config)
    why = host.shipped_problem(opts.root, paths.shipped_config)
    shipped = host.read_file(opts.root, paths.shipped_config) if why is None else None
    if why is None and shipped is not None and not keyvalue.parse(shipped).items():
        why = "is empty (no KEY=VALUE line)"
    if why is not None:
        raise usage_error(f"the shipped IMEX config {shipped_path} {why}",
                          "reinstall the nvidia-imex package (its config.cfg is a regular file "
                          "with the keys of that version), or pass --imex-config")
    notes = []
    if shipped is None:
        notes.append(f"no shipped IMEX config at {shipped_path}: using nvfabric's minimal "
                     "config (documented defaults)")
    peers, source, problem = _node_list(opts, shipped)
    if problem is not None:
        refusals.append(problem)
    else:
        refusals += [f for f in nodes.validate(peers, driver_version) if f.severity == "error"]
        addrs = opts.local_addresses or host.node_addresses(opts.root)
        local = nodes.check_local(peers, addrs, host.local_names(opts.root), host.resolve_names(
            opts.root, [p.text for p in peers if p.kind == "hostname"]))
        if local is not None:
            refusals.append(local)
        notes.append(f"IMEX node list: {plural(len(peers), 'entry')} from {source} "
                     f"({node_list_id(p.text for p in peers)})")
    for binary, what, flag in ((paths.binary, "nvidia-imex", "--imex-bin"),
                               (paths.ctl, "nvidia-imex-ctl", "--imex-ctl")):
        real = opts.resolve(binary)
        if not (os.path.isfile(real) and os.access(real, os.X_OK)):
            line = _imex_install_line(opts.root, driver_version)
            refusals.append(Finding(
                "binary_missing", "error", f"{what} is not installed at {real} (or not "
                "executable): the node lacks the nvidia-imex package of driver "
                f"{driver_version or 'loaded'}",
                f"install it: `{line}` (prints the package manager's commands; add --execute "
                f"to run them), or pass {flag}",
                {"service": "imex", "path": real, "file": flag, "install": line}))
    state = opts.resolve(opts.state_dir)
    cfg_path = os.path.join(state, EFFECTIVE_CFG)
    nodes_path = os.path.join(state, EFFECTIVE_NODES)
    try:
        text = config.effective(shipped, config.run_overrides(
            keyvalue.parse(shipped or config.MINIMAL_CONFIG), nodes_path))
    except ConfigValueError as err:
        refusals.append(Finding(
            "config_invalid_value", "error", f"IMEX config: {err}",
            "use a shorter --state-dir (IMEX paths are limited to 256 characters)",
            {"key": err.key}))
        text = ""
    try:
        spec: ServiceSpec | None = imex_service.spec(opts.resolve(paths.binary), cfg_path,
                                                     opts.grace_s)
    except ValueError as err:
        refusals.append(Finding("config_invalid_value", "error", str(err), "pass absolute paths",
                                {"key": "path"}))
        spec = None
    files = (PlannedFile(nodes_path, nodes.render(peers), 0o644),
             PlannedFile(cfg_path, text, 0o644))
    notes.append(f"effective IMEX config: {cfg_path} (from {shipped_path}, which is not edited)")
    return Prepared(decision, facts, tuple(refusals), tuple(warnings), create, spec, files,
                    peers, tuple(notes), channel_at)


def _node_list(opts: ImexRunOptions, shipped: str | None
               ) -> tuple[tuple[nodes.Peer, ...], str, Finding | None]:
    text: str | None
    if opts.peers_file is not None and opts.peers_text is not None:
        where, text = opts.peers_file, opts.peers_text
    elif opts.peers_file is not None:
        where = opts.peers_file
        try:
            with open(where, "rb") as fh:
                text = fh.read(1 << 20).decode("utf-8")
        except OSError as err:
            return (), where, Finding("input_unreadable", "error",
                                      f"cannot read --imex-peers {where}: {err.strerror}",
                                      "give a readable node list file")
        except UnicodeDecodeError as err:
            return (), where, Finding("input_unreadable", "error",
                                      f"--imex-peers {where} is not a text file (offset "
                                      f"{err.start} is not UTF-8)",
                                      "give a text file: one address or host name per line")
    else:
        where = config.node_config_path(shipped, NODES_CONFIG_PATH)
        text = host.read_file(opts.root, where)
        if text is None:
            return (), where, Finding(
                "config_invalid_value", "error",
                f"no IMEX node list: {opts.resolve(where)} {_unread_why(opts.root, where)}",
                "write the addresses of every tray of the domain there (`nvfabric imex config "
                "--peers FILE`), or pass --imex-peers FILE", {"key": "IMEX_NODE_CONFIG_FILE"})
    assert text is not None
    try:
        return nodes.parse_nodes_config(text), where, None
    except nodes.PeerError as err:
        return (), where, Finding("config_invalid_value", "error", f"{where}: {err}",
                                  "one IP address or host name per line", {"key": "nodes"})


def _unread_why(root: str, where: str) -> str:
    """Why :func:`host.read_file` gave nothing for ``where`` under ``root``: it does not
    exist, it is a link that leaves the root (read as missing, never followed out), or it is
    not a readable regular file. One phrase, for the finding's message."""
    kind = host.not_regular(under(root, where))
    if kind is None:
        return "cannot be read"
    if kind[0] == "missing":
        return "does not exist"
    if kind[0] == "link":
        return f"is a symbolic link to {kind[1]!r} that leaves the root or leads nowhere"
    return "is not a regular file"


def apply(prepared: Prepared, opts: ImexRunOptions, log: Log) -> list[Finding]:
    """Make channel0 when needed and write the files; the findings of what failed."""
    out: list[Finding] = []
    if prepared.create_channel and prepared.facts.major is not None:
        try:
            node = host.create_channel(opts.root, 0, prepared.facts.major)
            log.say(f"created IMEX channel {host.channel_target(opts.root, 0)} (c "
                    f"{node.major},{node.minor}, mode 0{node.mode:03o})")
        except (OSError, host.PathEscape) as err:
            why = err.strerror or err if isinstance(err, OSError) else err
            out.append(Finding(
                "imex_channel_missing", "error",
                f"cannot create {channels.channel_path(0)}: {why}",
                "run nvfabric as root with the host's /dev (mknod needs CAP_MKNOD); or "
                + channels.fixes(0, prepared.facts.major),
                {"channel": 0, "major": prepared.facts.major}))
            return out
    state = opts.resolve(opts.state_dir)
    if ensure_dir(state):
        log.say(f"created state directory {state} (mode 0700)")
    for f in prepared.files:
        write_atomic(f.path, f.content, mode=f.mode, backup=False, dir_mode=0o700)
        log.say(f"wrote {f.path}")
    return out


def readiness_probe(ctl_binary: str, cfg_path: str,
                    timeout_s: float) -> Callable[[], GpuCheck]:
    """The supervisor's readiness probe for IMEX: ``nvidia-imex-ctl -q`` under a hard timeout;
    when not READY, ``-N -j`` names the peers it waits for. ``error`` says why it is not READY;
    the supervisor logs it as ``IMEX not READY yet: <why>`` and gives ``imex_not_ready`` after
    the readiness timeout (the spec's :data:`nvfabric.bringup.imexd.IMEX_READY`)."""

    def probe() -> GpuCheck:
        try:
            result = host.run_ctl(ctl.query_argv(ctl_binary, cfg_path), timeout_s)
        except OSError as err:
            return GpuCheck(False, False, "not queried",
                            f"cannot run {ctl_binary}: {exec_error(ctl_binary, err)}")
        if result.timed_out:
            return GpuCheck(False, False, "not answering",
                            f"nvidia-imex-ctl -q did not answer within {timeout_s:g} s "
                            "(killed; it hangs while the daemon does not answer)")
        domain = _domain(ctl_binary, cfg_path, timeout_s)
        if ctl.parse_query(result.stdout):
            where = f", domain {domain.state} ({plural(len(domain.nodes), 'node')})" \
                if domain else ""
            return GpuCheck(True, False, f"READY{where}")
        if domain is not None and domain.unreachable:
            why = f"domain {domain.state}, waiting for " + ", ".join(domain.unreachable[:6])
        elif domain is not None:
            why = f"domain {domain.state}"
        else:
            why = (result.stdout.strip() or result.stderr.strip() or "no answer")[:200]
        return GpuCheck(False, False, "not ready", why)

    return probe


def _domain(ctl_binary: str, cfg_path: str, timeout_s: float) -> ctl.DomainStatus | None:
    try:
        result = host.run_ctl(ctl.domain_argv(ctl_binary, cfg_path), timeout_s)
        return ctl.parse_domain(result.stdout) if result.rc == 0 else None
    except (OSError, ValueError):
        return None


# -- the command's side -----------------------------------------------------------------------


def _imex_json(prepared: Prepared) -> dict[str, Any]:
    return {**prepared.ownership.to_json(),
            "node_list": [p.text for p in prepared.node_list],
            "node_list_id": node_list_id(p.text for p in prepared.node_list)
            if prepared.node_list else None,
            "channels": prepared.facts.to_json()}


def run(p: Plan, opts: ImexRunOptions, *, dry_run: bool, as_json: bool, stay: bool,
        policy: Policy, classifier: Callable[[str], Any] | None) -> int:
    """The mnnvl branch of ``nvfabric run``; returns the exit code (output printed)."""
    prepared = prepare(opts, p.driver_version)
    log = Log()
    if dry_run:
        _print_dry_run(prepared, as_json, p.reasons)
        return 1 if prepared.refusals else 0
    if prepared.refusals:
        _print_result("refused", 1, list(prepared.refusals), prepared, as_json,
                      "refused: nothing was started", p.reasons)
        return 1
    if not prepared.starts_imex:
        d = prepared.ownership
        runner = {"unit": "the nvidia-imex.service unit"}.get(d.runner or "", d.owner)
        log.say(f"fabric mnnvl: IMEX is owned by {d.owner}"
                + (f" (run by {runner})" if d.owner == "host" else "")
                + "; nvfabric starts nothing")
        for r in d.reasons:
            log.say(f"  {r}")
        for f in prepared.warnings:
            log.finding(f)
        _print_result("not_started", 0, list(prepared.warnings), prepared, as_json, "",
                      p.reasons)
        notify_nothing_to_start(f"IMEX is owned by {d.owner}; nvfabric starts nothing")
        attach(lambda: NOTHING_TO_RUN)
        if stay:
            wait_for_stop("--stay: waiting for SIGTERM", log)
        return 0
    log.say("fabric mnnvl: IMEX owner host, nvfabric starts and supervises nvidia-imex ("
            + "; ".join(prepared.ownership.reasons) + ")")
    for note in prepared.notes:
        log.say(note)
    for f in prepared.warnings:
        log.finding(f)
    failed = apply(prepared, opts, log)
    prepared = replace(prepared, facts=host.read_channels(opts.root))
    if failed:
        _print_result("refused", 1, failed, prepared, as_json, "refused: nothing was started",
                      p.reasons)
        return 1
    assert prepared.spec is not None
    cfg_path = prepared.files[1].path
    info: dict[str, Any] = {"fabric": "mnnvl", "driver_version": p.driver_version,
                            "imex_owner": "host", "node_list_id": _imex_json(prepared)[
                                "node_list_id"]}
    sup = Supervisor(
        (prepared.spec,), policy, log=log, classifier=classifier,
        probe=readiness_probe(opts.resolve(opts.paths.ctl), cfg_path, opts.ctl_timeout_s),
        ready_file=os.path.join(opts.resolve(opts.state_dir), "ready"), ready_info=info)
    attach(lambda: of_supervisor(sup), imex=(opts.resolve(opts.paths.ctl), cfg_path))
    outcome: Outcome = sup.run()
    if as_json:
        print_json({**run_result(
            outcome.reason, outcome.exit_code, "mnnvl", outcome.findings,
            processes=(prepared.spec,), files=prepared.files,
            ready_after_s=outcome.ready_after_s, restarts=outcome.restarts, reasons=p.reasons),
            "imex": _imex_json(prepared)})
    elif outcome.exit_code:
        print_findings(console(stderr=True), list(outcome.findings), "run failed")
    return outcome.exit_code


def _print_result(result: str, code: int, findings: list[Finding], prepared: Prepared,
                  as_json: bool, title: str, reasons: Sequence[str]) -> None:
    """The one ``run --json`` shape (:func:`nvfabric.supervisor.run_result`) plus ``imex``."""
    if as_json:
        print_json({**run_result(result, code, "mnnvl", findings, reasons=reasons),
                    "imex": _imex_json(prepared)})
    elif title:
        print_findings(console(stderr=True), findings, title)


def _print_dry_run(prepared: Prepared, as_json: bool, reasons: Sequence[str]) -> None:
    findings = list(prepared.refusals) + list(prepared.warnings)
    if as_json:
        refused = bool(prepared.refusals)
        result = "refused" if refused else ("would_start" if prepared.spec else "not_started")
        print_json({**run_result(
            result, 1 if refused else 0, "mnnvl", findings, dry_run=True,
            processes=(prepared.spec,) if prepared.spec else (), files=prepared.files,
            reasons=reasons), "imex": _imex_json(prepared), "actions": prepared.actions()})
        return
    import shlex

    import click

    def echo(text: str) -> None:  # values from the node and its files: escaped
        click.echo(printable(text))

    d = prepared.ownership
    echo(f"fabric mnnvl: IMEX owner {d.owner}"
         + (f" (run by {d.runner})" if d.runner else "") + f", {d.source}")
    for r in d.reasons:
        echo(f"  why: {r}")
    if prepared.spec is not None:
        echo(f"  {prepared.spec.name}: {shlex.join(prepared.spec.argv)}")
        echo("    ready when `nvidia-imex-ctl -q` prints READY")
    if prepared.refusals:  # run would make and write nothing: nothing is shown as if it would
        echo("refused: nothing would be created, written or started")
    for a in () if prepared.refusals else prepared.actions():
        echo(f"  action: {a}")
    for note in prepared.notes:
        echo(f"  note: {note}")
    for f in () if prepared.refusals else prepared.files:
        echo(f"file {f.path} (mode {f.mode:o}):")
        for line in f.content.splitlines():
            echo(f"  | {line}")
    if findings:
        print_findings(console(stderr=True), findings, "problems")

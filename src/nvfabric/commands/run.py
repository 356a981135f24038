"""``nvfabric run``: bring the fabric of this node up and keep it up (the main job).

Plan -> refuse on blockers -> build the unit (services/unit.py) -> preflight (binaries,
fabric manager version = driver version, config paths, a second subnet manager) -> write the
effective config -> supervise (supervisor.py) until SIGTERM or a failure.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

import click

from ..configs import fabricmanager as fmcfg
from ..configs import keyvalue
from ..errors import NvfabricError, usage_error
from ..findings import Finding
from ..output import (
    arch_option,
    console,
    guarded,
    json_option,
    print_findings,
    print_json,
    root_option,
)
from ..plan import Plan
from ..services import Unit, nvlsm
from ..services import fabricmanager as fm
from ..services.unit import RunConfig, build, environ_items
from ..supervisor import GpuCheck, Log, Outcome, Policy, Supervisor, ensure_dir, socket_listening


def gpu_check(root: str) -> GpuCheck:
    """Read the GPUs' fabric state through the health module (NVML on a real host, the node's
    nvidia-smi on a simulated root) and summarise it for readiness."""
    from ..health import live

    gpus = live.read(root)
    if not gpus:
        return GpuCheck(False, False, "no GPU fabric state", "no GPU fabric state could be read")
    counts = Counter(str(g.state) for g in gpus)
    summary = f"{len(gpus)} GPUs: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    supported = [g for g in gpus if g.state != "not_supported"]
    if not supported:
        return GpuCheck(False, False, summary, supported=False)
    done = [g for g in supported if g.state == "completed"]
    bad = [g for g in done if (g.status or "").lower() not in ("success", "")]
    findings: tuple[Finding, ...] = ()
    if bad:
        findings = (Finding(
            "registration_error", "warning",
            f"{len(bad)} GPU(s) completed fabric registration with an error status: "
            + "; ".join(f"{g.label}: {g.status}" for g in bad),
            "run `nvfabric status` for the per-GPU verdict", {"count": len(bad)}),)
    return GpuCheck(len(done) == len(supported), bool(done), summary, findings=findings)


def _generations(root: str, arch: str | None) -> set[str]:
    from ..inventory import collect
    from ..inventory.products import lookup

    out = set()
    for gpu in collect(root, arch).gpus:
        product = lookup(gpu.vendor, gpu.device)
        if product:
            out.add(product.generation)
    return out


def preflight(unit: Unit, p: Plan) -> list[Finding]:
    """Checks before any start (host access: stat, ``nv-fabricmanager --version``, a connect to
    NVLSM's socket). One finding per problem; nothing is started or written."""
    problems: list[Finding] = []
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
    return problems


def _check_fm_version(binary: str, driver: str | None) -> list[Finding]:
    try:
        version, text = fm.probe_version(binary)
    except (OSError, subprocess.TimeoutExpired) as err:
        return [Finding("binary_missing", "error", f"cannot run {binary} --version: {err}",
                        "check the fabric manager installation", {"path": binary})]
    if version is None:
        first = text.strip().splitlines()[:1]
        return [Finding("version_mismatch", "error",
                        f"cannot read fabric manager's version from `{binary} --version`"
                        + (f" ({first[0]})" if first else ""),
                        "reinstall fabric manager of the driver's exact version",
                        {"fm_version": None, "driver_version": driver})]
    if driver is not None and version != driver:
        return [Finding("version_mismatch", "error",
                        f"fabric manager {version} does not match the loaded driver {driver}; "
                        "fabric manager refuses to run", f"install fabric manager {driver} "
                        f"exactly (or the driver {version}); `nvfabric fetch` resolves it",
                        {"fm_version": version, "driver_version": driver})]
    return []


def _report(findings: list[Finding], as_json: bool, result: str, title: str) -> None:
    if as_json:
        print_json({"result": result, "exit_code": 1, "findings": [f.to_json() for f in findings]})
    else:
        print_findings(console(stderr=True), findings, title)


def _dry_run(unit: Unit, problems: list[Finding], as_json: bool) -> None:
    if as_json:
        print_json({
            "fabric": unit.fabric,
            "processes": [{"service": s.name, "argv": list(s.argv)} for s in unit.services],
            "files": [{"path": f.path, "content": f.content} for f in unit.files],
            "findings": [f.to_json() for f in problems],
        })
    else:
        out = click.echo
        out(f"fabric {unit.fabric}: {len(unit.services)} process(es), in start order")
        for s in unit.services:
            out(f"  {s.name}: {shlex.join(s.argv)}")
            if s.ready_socket:
                out(f"    ready when the socket {s.ready_socket} exists")
            if s.ready_gpus:
                out("    ready when every GPU's fabric state is completed")
        for note in unit.notes:
            out(f"  note: {note}")
        for f in unit.files:
            out(f"file {f.path} (mode {f.mode:o}):")
            for line in f.content.splitlines():
                out(f"  | {line}")
        if problems:
            print_findings(console(stderr=True), problems, "preflight would refuse to start")


def _stay() -> None:
    """Block until SIGTERM or SIGINT (a DaemonSet pod on a node with nothing to manage)."""
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    Log().say("--stay: waiting for SIGTERM")
    signal.sigwait(signals)
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
@click.option("--socket-timeout", type=click.FloatRange(0.01), default=60.0, show_default=True,
              help="Seconds to wait for NVLSM's IPC socket.")
@click.option("--ready-timeout", type=click.FloatRange(0.01), default=300.0, show_default=True,
              help="Seconds after which GPUs still registering are reported.")
@click.option("--grace", type=click.FloatRange(0.0), default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL when stopping a service.")
@click.option("--restart-delay", type=click.FloatRange(0.0), default=1.0, show_default=True,
              help="First restart delay; doubles each time.")
@click.option("--restart-max-delay", type=click.FloatRange(0.0), default=30.0, show_default=True,
              help="Cap of the restart delay.")
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
@click.option("--imex-ctl-timeout", type=click.FloatRange(0.05, 120), default=5.0,
              show_default=True, help="Hard timeout of each nvidia-imex-ctl call, seconds.")
@guarded
def run_cmd(root: str, arch: str | None, as_json: bool, dry_run: bool, restart: str, stay: bool,
            fm_sets: tuple[str, ...], fabric_mode: str | None, gpu_reset_command: str | None,
            socket_timeout: float, ready_timeout: float, grace: float, restart_delay: float,
            restart_max_delay: float, state_dir: str, fm_bin: str, fm_config: str,
            nvlsm_bin: str, nvlsm_config: str, nvlsm_pid_file: str,
            fm_sm_socket: str | None, imex_owner: str | None, imex_bin: str, imex_ctl: str,
            imex_config: str, imex_peers: str | None, imex_local_address: tuple[str, ...],
            imex_ctl_timeout: float) -> None:
    """Bring the fabric up (NVLSM, fabric manager; IMEX on GB200/GB300 trays) and supervise it
    as one unit."""
    from ..inventory import collect
    from ..plan import plan

    p = plan(collect(root, arch))
    if p.blocked:
        _report(list(p.blockers), as_json, "blocked", "blocked: nothing was started")
        sys.exit(1)
    if p.fabric == "mnnvl":
        # ---- MNNVL / IMEX path (issue 6): nvfabric.imex.bringup. Never fabric manager. ----
        from ..diagnose import Classifier
        from ..imex import bringup
        from ..services import imex as imex_service

        imex_opts = bringup.ImexRunOptions(
            root=root, state_dir=state_dir, owner=imex_owner,
            paths=imex_service.ImexPaths(imex_bin, imex_ctl, imex_config),
            peers_file=imex_peers, local_addresses=imex_local_address,
            ctl_timeout_s=imex_ctl_timeout, grace_s=grace)
        imex_policy = Policy(restart=restart, backoff_base_s=restart_delay,
                             backoff_cap_s=restart_max_delay, ready_timeout_s=ready_timeout)
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
        cfg = RunConfig(
            root=root, state_dir=state_dir,
            fm=fm.FabricManagerPaths(fm_bin, fm_config),
            nvlsm=nvlsm.NvlsmPaths(nvlsm_bin, nvlsm_config, nvlsm_pid_file),
            socket=fm_sm_socket, fm_sets=tuple(fmcfg.parse_sets(fm_sets).items()),
            environ=environ_items(os.environ), fabric_mode=fabric_mode, grace_s=grace)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    if p.fabric == "none":
        _nothing_to_do(p, dry_run, stay, as_json)
        return
    shipped_path = cfg.resolve(fm_config)
    try:
        with open(shipped_path, encoding="utf-8") as fh:
            shipped = fh.read()
    except OSError as err:
        raise NvfabricError(Finding(
            "input_unreadable", "error",
            f"cannot read the shipped fabric manager config {shipped_path}: {err.strerror}",
            "install the fabric manager package, or pass --fm-config")) from None
    needs_reset = fm.needs_gpu_reset(_generations(root, arch))
    try:
        unit = build(p, cfg, shipped, needs_reset=needs_reset)
    except fmcfg.ConfigError as err:
        raise NvfabricError(err.finding, exit_code=2) from None
    except ValueError as err:
        raise usage_error(str(err)) from None
    problems = preflight(unit, p)
    if dry_run:
        _dry_run(unit, problems, as_json)
        sys.exit(1 if problems else 0)
    if problems:
        _report(problems, as_json, "refused", "preflight: nothing was started")
        sys.exit(1)
    outcome = _supervise(unit, p, cfg, restart, reset_argv, socket_timeout, ready_timeout,
                         restart_delay, restart_max_delay, needs_reset)
    if as_json:
        print_json(outcome.to_json())
    elif outcome.exit_code:  # each finding was logged when it happened; one closing line
        first = outcome.findings[0] if outcome.findings else None
        Log().say(f"run failed: {first.code}: {first.message}" if first else "run failed")
    sys.exit(outcome.exit_code)


def _nothing_to_do(p: Plan, dry_run: bool, stay: bool, as_json: bool) -> None:
    why = p.reasons[-1] if p.reasons else "no fabric service applies"
    if as_json and dry_run:
        print_json({"fabric": "none", "processes": [], "files": [], "findings": []})
        return
    if as_json:
        print_json({"result": "nothing_to_do", "exit_code": 0, "fabric": "none", "reason": why})
    else:
        Log().say(f"fabric none: nothing to start ({why})")
    if stay and not dry_run:
        _stay()


def _supervise(unit: Unit, p: Plan, cfg: RunConfig, restart: str,
               reset_argv: tuple[str, ...] | None, socket_timeout: float, ready_timeout: float,
               restart_delay: float, restart_max_delay: float, needs_reset: bool) -> Outcome:
    from ..diagnose import Classifier

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
    registered = False
    if needs_reset:
        check = gpu_check(cfg.root)
        registered = check.registered
        if registered:
            log.say(f"GPUs are already registered with the NVLink fabric ({check.summary}): "
                    "a fabric manager ran before")
    policy = Policy(restart=restart, backoff_base_s=restart_delay,
                    backoff_cap_s=restart_max_delay, socket_timeout_s=socket_timeout,
                    ready_timeout_s=ready_timeout, gpu_reset_argv=reset_argv,
                    registered_at_start=registered)
    info: dict[str, Any] = {"fabric": p.fabric, "driver_version": p.driver_version,
                            "management_port": p.management_port.to_json()
                            if p.management_port else None}
    sup = Supervisor(unit.services, policy, log=log,
                     classifier=lambda name: Classifier(p.fabric),
                     probe=lambda: gpu_check(cfg.root), ready_file=cfg.ready_file,
                     ready_info=info, pid_dir=state_dir)
    return sup.run()

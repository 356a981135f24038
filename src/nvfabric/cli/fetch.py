"""``nvfabric fetch`` and ``nvfabric install``: exactly the fabric artifacts of the loaded
driver, verified, then installed (redist archives) or pinned (apt/rpm packages).

The driver version defaults to the loaded module of the node (``--root``), never a config
value; the architecture to the node's; the components to what the node's plan needs
(:data:`nvfabric.artifacts.tables.COMPONENTS_BY_FABRIC`).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from nvfabric.cli.render import (
    console,
    guarded,
    json_option,
    print_findings,
    print_json,
    root_option,
    safe,
)
from nvfabric.facts.fs import under
from nvfabric.facts.inventory import Inventory, collect
from nvfabric.facts.paths import confined
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.words import plural

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DEST = "/var/cache/nvfabric/artifacts"
DEFAULT_PREFIX = "/opt/nvfabric"


def _common(fn: F) -> F:
    """The options ``fetch`` and ``install`` share, spelled once."""
    options = [
        root_option,
        click.option("--driver-version", default=None,
                     help="Driver version as published (default: the loaded module)."),
        click.option("--arch", default=None,
                     help="x86_64/amd64 or aarch64/arm64/sbsa (default: the node's)."),
        click.option("--source", type=click.Choice(["redist", "apt", "rpm"]), default="redist",
                     show_default=True, help="Where the artifacts come from."),
        click.option("--components", default=None,
                     help="Comma list of fabricmanager,libnvidia_nscq,libnvsdm,nvlsm,imex "
                     "(default: what the node's plan needs)."),
        click.option("--mirror", default=None,
                     help="Base URL or directory replacing NVIDIA's (air-gapped sites)."),
        click.option("--distro", default=None,
                     help="CUDA repo distro, e.g. ubuntu2404 (default: from etc/os-release)."),
        click.option("--nvlsm-version", default=None,
                     help="nvlsm calendar version for apt/rpm (default: from the redist "
                     "manifest of the driver release)."),
        click.option("--fabric", type=click.Choice(["none", "nvswitch", "nvlink5", "mnnvl"]),
                     default=None,
                     help="The node's fabric kind (default: the plan of the node under "
                     "--root); mnnvl never gets fabric manager, NVLSM or their libraries."),
        click.option("--dest", default=None,
                     help=f"Download cache (default: <root>{DEFAULT_DEST})."),
        click.option("--timeout", type=float, default=30.0, show_default=True,
                     help="Seconds for connect and each read."),
        click.option("--retries", type=click.IntRange(0, 10), default=3, show_default=True,
                     help="Retries on timeouts, cut connections and 5xx."),
        click.option("--dry-run", is_flag=True, help="Resolve only; download nothing."),
        json_option,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@dataclass(frozen=True)
class Inputs:
    """What the command line and the node say, validated."""

    driver_version: str
    arch: str
    components: tuple[str, ...]
    fabric: str | None
    distro: str | None
    findings: tuple[Finding, ...] = ()


def _is_deb_distro(distro: str) -> bool:
    """Whether a CUDA repository distro (``ubuntu2404``, ``rhel9``) ships .deb packages."""
    return distro.startswith(("ubuntu", "debian"))


def gather(
    root: str, driver_version: str | None, arch: str | None, components: str | None,
    source: str, mirror: str | None, distro: str | None, fabric: str | None = None,
    default_components: tuple[str, ...] | None = None,
) -> Inputs:
    """Fill the unset inputs from the node (read only when something is unset) and validate
    every value. ``fabric`` is ``--fabric`` (None: the node's plan); ``default_components``
    replaces the plan's components when ``--components`` is not given (``install --from``: what
    was fetched). Components the fabric never gets (:data:`~nvfabric.artifacts.tables.
    NEVER_FOR_FABRIC`) are dropped with a ``component_not_for_fabric`` finding. Raises
    usage_error (exit 2) on a bad value, ``driver_not_loaded`` (exit 1) when the driver
    version is neither given nor loaded, ``component_not_for_fabric`` (exit 1) when nothing is
    left."""
    from nvfabric.artifacts.model import not_for_fabric
    from nvfabric.artifacts.naming import canonical_arch, distro_dir, split_for_fabric
    from nvfabric.artifacts.tables import COMPONENTS, COMPONENTS_BY_FABRIC, X86_ONLY
    from nvfabric.artifacts.versions import is_version
    from nvfabric.rules.plan import plan

    inv: Inventory | None = None

    def node() -> Inventory:
        nonlocal inv
        if inv is None:
            inv = collect(root)
        return inv

    if driver_version is None:
        driver_version = node().driver_version
        if driver_version is None:
            raise NvfabricError(
                Finding(
                    "driver_not_loaded", "error",
                    "the NVIDIA kernel module is not loaded, so there is no driver version to "
                    "match",
                    "load the driver first, or pass --driver-version for another node",
                ),
                exit_code=1,
            )
    if not is_version(driver_version):
        raise usage_error(f"--driver-version {driver_version!r} is not a version like 580.95.05",
                          "give the version as published, e.g. 580.95.05")
    canon = canonical_arch(arch or node().arch)
    if canon is None:
        raise usage_error(f"architecture {arch or node().arch!r} is not x86_64 or aarch64",
                          "pass --arch x86_64 (amd64) or --arch aarch64 (arm64, sbsa)")
    fabric = fabric or plan(node()).fabric
    if components is not None:
        wanted = tuple(dict.fromkeys(c.strip() for c in components.split(",") if c.strip()))
        unknown = [c for c in wanted if c not in COMPONENTS]
        if unknown or not wanted:
            raise usage_error(
                f"--components {components!r}: unknown {', '.join(unknown) or 'empty list'}",
                "choose from " + ",".join(COMPONENTS),
            )
    elif default_components is not None:
        wanted = default_components
    else:
        wanted = tuple(
            c for c in COMPONENTS_BY_FABRIC[fabric] if not (c in X86_ONLY and canon != "x86_64")
        )
    wanted, refused = split_for_fabric(wanted, fabric)
    findings: tuple[Finding, ...] = ()
    if refused:
        finding = not_for_fabric(refused, fabric, wanted)
        if not wanted:
            raise NvfabricError(finding, exit_code=1)
        findings = (finding,)
    if distro is not None and not re.match(r"^[a-z]+[0-9]+$", distro):
        raise usage_error(f"--distro {distro!r} is not a CUDA repository name like ubuntu2404",
                          "give the directory name of the CUDA repository, e.g. ubuntu2404, rhel9")
    if source != "redist" and not distro:
        # Also with a --mirror: the mirror replaces the repository's URL, not the node's
        # distribution, which still decides the package manager (yum on RHEL/CentOS 7); a
        # mirror of the other package family (rpm for an image built on Ubuntu) is not it.
        distro = distro_dir(dict(node().os_release))
        if mirror and distro is not None and (source == "apt") != _is_deb_distro(distro):
            distro = None
        if distro is None and not mirror:
            raise usage_error(
                "cannot tell the CUDA repository distro from etc/os-release",
                "pass --distro (e.g. ubuntu2404, rhel9) or --mirror",
            )
    return Inputs(driver_version, canon, wanted, fabric, distro, findings)


def _resolve(
    inputs: Inputs, source: str, mirror: str | None, nvlsm_version: str | None,
    timeout: float, retries: int,
) -> tuple[Any, Any]:
    """(Resolution, open Transport) for the inputs."""
    from nvfabric.artifacts import Request, RetryPolicy, Transport, resolve
    from nvfabric.artifacts.transport import mirror_base, stderr_is_tty
    from nvfabric.artifacts.versions import is_version

    if nvlsm_version is not None and not is_version(nvlsm_version):
        raise usage_error(f"--nvlsm-version {nvlsm_version!r} is not a version like 2025.06.6",
                          "omit it to take the one of the driver release's redist manifest")
    if not 0 < timeout < math.inf:  # also nan
        raise usage_error(f"--timeout must be a positive number of seconds, not {timeout}",
                          "give seconds, e.g. --timeout 30")
    base = mirror_base(mirror) if mirror else None
    transport = Transport(
        RetryPolicy(attempts=retries + 1, timeout_s=timeout), mirror=base,
        progress=stderr_is_tty(),
    )
    request = Request(inputs.driver_version, inputs.arch, inputs.components, source,
                      nvlsm_version)
    try:
        resolution = resolve(request, transport, base, inputs.distro)
    except BaseException:
        transport.close()
        raise
    return resolution, transport


def _header(inputs: Inputs, source: str, resolution: Any, dry_run: bool) -> dict[str, Any]:
    return {
        "driver_version": inputs.driver_version,
        "arch": inputs.arch,
        "source": source,
        "fabric": inputs.fabric,
        "components": list(inputs.components),
        "sources_searched": list(resolution.searched) if resolution else [],
        "dry_run": dry_run,
        "findings": [f.to_json() for f in inputs.findings],
    }


@click.command("fetch")
@_common
@guarded
def fetch(
    root: str, driver_version: str | None, arch: str | None, source: str,
    components: str | None, mirror: str | None, distro: str | None,
    nvlsm_version: str | None, fabric: str | None, dest: str | None, timeout: float,
    retries: int, dry_run: bool, as_json: bool,
) -> None:
    """Resolve and download the exact artifacts of the loaded driver, verified by sha256.

    For apt/rpm sources also print the exact pin lines (install name=version, hold/lock).
    The download directory gets a record (nvfabric-artifacts.json) that `install --from DIR`
    reads with no network.
    """
    from nvfabric.artifacts import cachefile
    from nvfabric.artifacts import fetch as fetch_one
    from nvfabric.artifacts.packages import commands
    from nvfabric.artifacts.resolve import cache_path

    inputs = gather(root, driver_version, arch, components, source, mirror, distro, fabric)
    dest = dest or _default(root, DEFAULT_DEST, "--dest")
    if not inputs.components:
        _nothing(inputs, source, dry_run, as_json)
        return
    resolution, transport = _resolve(inputs, source, mirror, nvlsm_version, timeout, retries)
    rows: list[dict[str, Any]] = []
    with transport:
        for art in resolution.artifacts:
            if dry_run:
                path, state = cache_path(dest, art), "not fetched (dry run)"
            else:
                path, downloaded = fetch_one(art, transport, dest)
                state = "downloaded" if downloaded else "already in cache"
            row = art.to_json(path)
            row["state"] = state
            rows.append(row)
    record = None
    if not dry_run:
        record = cachefile.write(dest, [
            cachefile.Cached(a, a.filename, inputs.driver_version)
            for a in resolution.artifacts])
    pins = [" ".join(argv) for argv in commands(source, resolution.artifacts, inputs.distro)]
    out = _header(inputs, source, resolution, dry_run)
    out["artifacts"] = rows
    out["record"] = record
    if pins:
        out["pins"] = pins
    if as_json:
        print_json(out)
        return
    con = console()
    print_findings(con, inputs.findings, "not fetched")
    con.print(f"driver {safe(inputs.driver_version)} ({safe(inputs.arch)}), source {source}",
              emoji=False)
    for row in rows:
        comp, version, arch_ = (safe(row[k]) for k in ("component", "version", "arch"))
        con.print(f"  {comp:15} {version:15} {arch_:8} {safe(row['state'])}: "
                  f"{safe(row['path'])}", emoji=False)
    if pins:
        con.print("pin exactly these versions:")
        for line in pins:
            con.print(f"  {safe(line)}", emoji=False)
    if record:
        con.print(f"offline install (at boot, e.g. on a runfile-driver image): nvfabric install "
                  f"--from {safe(dest)}", emoji=False)


@click.command("install")
@_common
@click.option("--prefix", default=None,
              help=f"Where redist archives are installed (default: <root>{DEFAULT_PREFIX}).")
@click.option("--execute", is_flag=True,
              help="apt/rpm: run the package manager (otherwise print what would run).")
@click.option("--from", "from_dir", default=None,
              help="Install, with no network, what `fetch --dest DIR` cached in DIR: .debs "
              "with dpkg -i (only runfile-provided dependencies forced), redist archives "
              "under --prefix.")
@click.option("--imex-owner", type=click.Choice(["host", "dra", "slurm", "none"]), default=None,
              help="Who runs IMEX (default: detected); decides whether nvidia-imex.service "
              "is enabled (host) or left disabled (dra, slurm, none).")
@guarded
def install(
    root: str, driver_version: str | None, arch: str | None, source: str,
    components: str | None, mirror: str | None, distro: str | None,
    nvlsm_version: str | None, fabric: str | None, dest: str | None, timeout: float,
    retries: int, dry_run: bool, as_json: bool, prefix: str | None, execute: bool,
    from_dir: str | None, imex_owner: str | None,
) -> None:
    """Install the exact artifacts of the loaded driver.

    redist: download (verified), extract safely under --prefix with an install record;
    idempotent. apt/rpm: run the pinned package-manager commands only with --execute.
    --from DIR: install what fetch cached there, offline (see README, "Version-matched
    artifacts").
    """
    from nvfabric.artifacts import fetch as fetch_one
    from nvfabric.artifacts.install import install_archive, install_dir
    from nvfabric.artifacts.packages import commands, run

    if from_dir is not None:
        if execute or mirror:
            raise usage_error("--from installs what is cached, with no network and no "
                              "package manager: drop --execute and --mirror",
                              "nvfabric install --from DIR [--root ROOT]")
        prefix = prefix or under(root, DEFAULT_PREFIX)
        _install_from(root, from_dir, driver_version, arch, components, fabric, prefix,
                      imex_owner, dry_run, as_json)
        return
    if execute and source == "redist":
        raise usage_error("--execute is for apt/rpm sources; redist archives install directly",
                          "drop --execute, or pass --source apt|rpm")
    if execute and root != "/":
        raise usage_error("--execute runs this host's package manager; it needs --root /",
                          "drop --execute to print the commands for the node under --root")
    inputs = gather(root, driver_version, arch, components, source, mirror, distro, fabric)
    dest = dest or _default(root, DEFAULT_DEST, "--dest")
    # The prefix takes redist archives only (apt on a runfile node: install --from checks it).
    prefix = prefix or (_default(root, DEFAULT_PREFIX, "--prefix") if source == "redist"
                        else under(root, DEFAULT_PREFIX))
    if not inputs.components:
        _nothing(inputs, source, dry_run, as_json)
        return
    resolution, transport = _resolve(inputs, source, mirror, nvlsm_version, timeout, retries)
    if source == "apt" and _runfile_driver(root):
        # apt-get would pull a packaged nvidia-modprobe over the runfile's (issue 17): fetch the
        # exact .debs into --dest and install them as `install --from` does, with dpkg.
        _apt_on_runfile(root, inputs, resolution, transport, dest, prefix, imex_owner,
                        execute, dry_run, as_json)
        return
    out = _header(inputs, source, resolution, dry_run)
    out["artifacts"] = [a.to_json(None) for a in resolution.artifacts]
    out["route"] = "package manager"
    con = None if as_json else console()
    if con is not None:
        print_findings(con, inputs.findings, "not installed")
    with transport:
        if source != "redist":
            argvs = commands(source, resolution.artifacts, inputs.distro)
            out["commands"] = argvs
            out["executed"] = bool(execute and not dry_run)
            if con is not None:
                verb = "running" if out["executed"] else "would run (add --execute)"
                for argv in argvs:
                    con.print(f"{verb}: {safe(' '.join(argv))}", emoji=False)
            if out["executed"]:
                run(argvs)
        else:
            installed = []
            for art in resolution.artifacts:
                if dry_run:
                    installed.append({"component": art.component, "version": art.version,
                                      "path": install_dir(prefix, art), "changed": None})
                    continue
                path, _ = fetch_one(art, transport, dest)
                done = install_archive(path, art, prefix)
                installed.append(done.to_json())
                if con is not None:
                    state = "installed" if done.changed else "unchanged"
                    con.print(f"{state}: {safe(art.component)} {safe(art.version)} -> "
                              f"{safe(done.path)} ({plural(done.files, 'file')})", emoji=False)
            out["installed"] = installed
            if con is not None and dry_run:
                for item in installed:
                    con.print(f"would install {safe(item['component'])} "
                              f"{safe(item['version'])} -> {safe(item['path'])}", emoji=False)
    if as_json:
        print_json(out)


def _default(root: str, host_path: str, flag: str) -> str:
    """The default of ``flag`` (a host path) under ``root``, with every link followed: a
    ``var/cache`` linked out of an image root would have fetch write the host's (or another
    tree's) cache. Raises usage_error (exit 2) naming the flag when it leads out."""
    try:
        return confined(root, host_path, f"{flag} (default)")
    except ValueError as err:
        raise usage_error(str(err), f"pass {flag} DIR explicitly, or make the link in the "
                          "root relative") from None


def _nothing(inputs: Inputs, source: str, dry_run: bool, as_json: bool) -> None:
    """The node's plan needs no fabric artifact: say so, exit 0."""
    out = _header(inputs, source, None, dry_run)
    out["artifacts"] = []
    if as_json:
        print_json(out)
    else:
        sys.stdout.write(
            f"nothing to fetch: the node's fabric is {inputs.fabric or 'none'}, which needs no "
            "fabric service\n"
        )


def _install_from(
    root: str, from_dir: str, driver_version: str | None, arch: str | None,
    components: str | None, fabric: str | None, prefix: str, imex_owner: str | None,
    dry_run: bool, as_json: bool,
) -> None:
    """``install --from DIR``: the boot step of the image flow (README, "Version-matched
    artifacts"). Facts first (the fetch record, the node's driver, the dpkg database, the IMEX
    owner), then the decisions, then dpkg, the archives and the unit."""
    from nvfabric.artifacts import cachefile, debinstall, dpkgdb
    from nvfabric.artifacts.install import install_archive, install_dir
    from nvfabric.artifacts.naming import canonical_arch
    from nvfabric.facts import imexhost as imex_host
    from nvfabric.rules.imex.owner import decide, unit_policy
    from nvfabric.rules.imex.tables import HOST_UNIT, IMEX_BINARY

    directory = os.path.abspath(from_dir)
    record = cachefile.read(directory)
    loaded = None if driver_version else collect(root).driver_version
    on_disk = None if driver_version or loaded else dpkgdb.driver_origin(root).version
    dv, why = cachefile.driver_for(record, driver_version, loaded, root, on_disk)
    reasons = list(why)
    # Offline: no repository is read, so gather() needs no CUDA repository distro ("redist").
    inputs = gather(root, dv, arch, components, "redist", None, None, fabric,
                    default_components=cachefile.components_for(
                        record, canonical_arch(arch) if arch else None))
    chosen = cachefile.pick(record, inputs.components, inputs.arch)
    for c in chosen:
        debinstall.check_version(c, inputs.driver_version)
    if any(c.artifact.source == "rpm" for c in chosen):
        raise usage_error("install --from installs .debs and redist archives; cached RPMs are "
                          "not supported yet", "install RPMs with dnf (install --source rpm)")
    debs = [c for c in chosen if c.artifact.source == "apt"]
    archives = [c for c in chosen if c.artifact.source == "redist"]
    if archives and prefix == under(root, DEFAULT_PREFIX):
        prefix = _default(root, DEFAULT_PREFIX, "--prefix")  # before anything is installed
    findings = list(inputs.findings)
    out: dict[str, Any] = {
        "from": directory, "driver_version": inputs.driver_version, "arch": inputs.arch,
        "fabric": inputs.fabric, "components": [c.artifact.component for c in chosen],
        "dry_run": dry_run, "reasons": reasons, "route": "dpkg",
    }
    prepared = debinstall.prepare(root, directory, debs, inputs.arch) if debs else None
    if archives:
        debinstall.verify_files(directory, archives)
    ownership = None
    live = imex_host.systemd_running(root)
    if any(c.artifact.component == "imex" for c in debs):
        ownership = decide(imex_host.gather_evidence(root), imex_owner)
        if ownership.conflict is not None and unit_policy(ownership.owner).action == "enable":
            # Enabling the host unit beside the DRA driver's daemons: refused before dpkg runs.
            raise NvfabricError(ownership.conflict, exit_code=1)
    if prepared is not None:
        findings += prepared.forced
        out["driver_origin"] = prepared.origin.to_json()
        out["forced"] = [f.to_json() for d in prepared.decisions for f in d.forced]
        out["commands"] = [list(prepared.argv)]
    con = None if as_json else console()
    if con is not None:
        for line in reasons:
            con.print(safe(line), emoji=False)
        if prepared is not None:
            origin = prepared.origin
            con.print(f"driver {safe(inputs.driver_version)} ({safe(inputs.arch)}): "
                      f"{safe(origin.kind)}; {safe('; '.join(origin.evidence))}", emoji=False)
            for d in prepared.decisions:
                for f in d.forced:
                    con.print(f"forcing dependency {safe(f.relation)} of {safe(d.package)}: "
                              f"{safe(f.by.evidence())}", emoji=False)
            verb = "would run" if dry_run else "running"
            con.print(f"{verb}: {safe(' '.join(prepared.argv))}", emoji=False)
    installed: list[dict[str, Any]] = []
    added: list[str] = []
    if not dry_run:
        if prepared is not None:
            added = debinstall.newly_added(root, prepared)
            installed += debinstall.apply(root, prepared)
        for c in archives:
            done = install_archive(os.path.join(directory, c.file), c.artifact, prefix)
            installed.append(done.to_json())
    else:
        installed += [{"component": c.artifact.component, "version": c.artifact.version,
                       "path": install_dir(prefix, c.artifact), "changed": None}
                      for c in archives]
    out["installed"] = installed
    if con is not None and not dry_run:
        for item in installed:
            what = item.get("package") or item.get("component")
            con.print(f"installed: {safe(what)} {safe(item['version'])}", emoji=False)
    if ownership is not None:
        policy = unit_policy(ownership.owner)
        try:
            argv = imex_host.unit_argv(root, policy.action, policy.now, live)
        except ValueError as err:
            raise usage_error(f"refusing to build the systemctl command line: {err}",
                              "use a plain absolute --root (no newline)") from None
        unit: dict[str, Any] = {
            "unit": HOST_UNIT, "owner": ownership.owner, "owner_source": ownership.source,
            "action": policy.action, "live": live, "argv": argv, "reason": policy.reason,
            "owner_reasons": list(ownership.reasons), "binary": IMEX_BINARY,
        }
        present = dry_run or imex_host.unit_file(root) is not None
        if not present:
            unit["state"] = "not installed"
            unit["argv"] = None
            unit["reason"] = f"the package ships no {HOST_UNIT}: nothing to enable or disable"
        elif not dry_run:
            rc, text = _systemctl(argv)
            if rc != 0 and prepared is not None:
                raise debinstall.unit_failed(root, prepared, added, argv, rc, text,
                                             policy.action)
            unit["state"] = imex_host.unit_state(root, live)
        unit["binary_present"] = dry_run or os.path.isfile(under(root, IMEX_BINARY))
        out["imex_unit"] = unit
        if con is not None:
            verb = "would" if dry_run else "did"
            state = f" -> {safe(unit['state'])}" if "state" in unit else ""
            con.print(f"{HOST_UNIT}: {verb} {policy.action} (IMEX owner "
                      f"{safe(ownership.owner)}: {safe(unit['reason'])}){state}", emoji=False)
    out["findings"] = [f.to_json() for f in findings]
    if as_json:
        print_json(out)
    elif con is not None:
        print_findings(con, findings, "findings")


def _systemctl(argv: list[str]) -> tuple[int, str]:
    """Run one systemctl argv; OSError (no systemctl) becomes exit status 127."""
    from nvfabric.facts import imexhost as imex_host

    try:
        return imex_host.run_systemctl(argv)
    except OSError as err:
        return 127, f"cannot run systemctl: {err.strerror}"


def _runfile_driver(root: str) -> bool:
    """True when the node under ``root`` has a dpkg database and its driver came from the
    runfile (:func:`nvfabric.artifacts.dpkgdb.driver_origin`)."""
    from nvfabric.artifacts import dpkgdb

    try:
        dpkgdb.read(root)  # a Debian-family root, or not: then the apt path stays
        return dpkgdb.driver_origin(root).kind == "runfile"
    except NvfabricError:
        return False


def _apt_on_runfile(
    root: str, inputs: Inputs, resolution: Any, transport: Any, dest: str, prefix: str,
    imex_owner: str | None, execute: bool, dry_run: bool, as_json: bool,
) -> None:
    """``install --source apt`` on a runfile-driver node: the verified .debs go into ``dest``
    (with the fetch record) and are installed with dpkg as ``install --from dest`` does; only
    with ``--execute`` is anything installed (otherwise the dpkg argv is printed)."""
    from nvfabric.artifacts import cachefile
    from nvfabric.artifacts import fetch as fetch_one

    if dry_run:
        transport.close()
        out = _header(inputs, "apt", resolution, dry_run)
        out["artifacts"] = [a.to_json(None) for a in resolution.artifacts]
        out["route"] = "dpkg"
        out["commands"] = []
        if as_json:
            print_json(out)
        else:
            console().print(f"runfile driver: install would fetch into {safe(dest)} and install "
                            "with dpkg, forcing only what the runfile provides (as install "
                            "--from)", emoji=False)
        return
    with transport:
        for art in resolution.artifacts:
            fetch_one(art, transport, dest)
    cachefile.write(dest, [cachefile.Cached(a, a.filename, inputs.driver_version)
                           for a in resolution.artifacts])
    _install_from(root, dest, inputs.driver_version, inputs.arch, ",".join(inputs.components),
                  inputs.fabric, prefix, imex_owner, not execute, as_json)

"""``nvfabric fetch``: exactly the fabric artifacts of the loaded driver, resolved (redist
manifest, APT or RPM repository) and downloaded, verified by sha256, with the pin lines of
apt/rpm packages and a record for ``install --from``; ``nvfabric install`` is
:mod:`nvfabric.cli.install`.

The request of both commands: the options they take, and the values they stand for, filled
from the node where unset (driver version from the loaded module, never a config value;
architecture; components from the node's plan,
:data:`nvfabric.artifacts.tables.COMPONENTS_BY_FABRIC`; CUDA repository distro from
etc/os-release) and validated.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from nvfabric.artifacts import cachefile
from nvfabric.artifacts.model import Request, not_for_fabric
from nvfabric.artifacts.naming import canonical_arch, distro_dir, split_for_fabric
from nvfabric.artifacts.packages import commands
from nvfabric.artifacts.resolve import cache_path, resolve
from nvfabric.artifacts.resolve import fetch as fetch_one
from nvfabric.artifacts.tables import COMPONENTS, COMPONENTS_BY_FABRIC, X86_ONLY
from nvfabric.artifacts.transport import RetryPolicy, Transport, mirror_base, stderr_is_tty
from nvfabric.cli.render import console, guarded, json_option, print_findings, root_option, safe
from nvfabric.effects.stdio import print_json
from nvfabric.facts.inventory import collect
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import confined
from nvfabric.model.inventory import Inventory
from nvfabric.model.versions import is_driver_version, is_version
from nvfabric.rules.plan import plan

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DEST = "/var/cache/nvfabric/artifacts"
DEFAULT_PREFIX = "/opt/nvfabric"


def common_options(fn: F) -> F:
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
    inv: Inventory | None = None

    def node() -> Inventory:
        nonlocal inv
        if inv is None:
            inv = collect(root)
        return inv

    driver_version = _driver_version(driver_version, node)
    canon = canonical_arch(arch or node().arch)
    if canon is None:
        raise usage_error(f"architecture {arch or node().arch!r} is not x86_64 or aarch64",
                          "pass --arch x86_64 (amd64) or --arch aarch64 (arm64, sbsa)")
    fabric = fabric or plan(node()).fabric
    wanted = _wanted(components, default_components, fabric, canon)
    wanted, refused = split_for_fabric(wanted, fabric)
    findings: tuple[Finding, ...] = ()
    if refused:
        finding = not_for_fabric(refused, fabric, wanted)
        if not wanted:
            raise NvfabricError(finding, exit_code=1)
        findings = (finding,)
    distro = _repo_distro(source, distro, mirror, node)
    return Inputs(driver_version, canon, wanted, fabric, distro, findings)


def _driver_version(driver_version: str | None, node: Callable[[], Inventory]) -> str:
    """``--driver-version``, else the loaded module's (``node()`` read only then), validated.
    Raises ``driver_not_loaded`` (exit 1) when there is none, usage_error when it is not a
    version."""
    if driver_version is None:
        driver_version = node().driver_version
        why = node().driver_unreadable
        if driver_version is None and why is not None:
            raise NvfabricError(
                Finding(
                    "driver_version_unreadable", "error",
                    f"the loaded NVIDIA driver's version cannot be read ({why}), so there is "
                    "no version to match",
                    "read it as root (`cat /sys/module/nvidia/version`), or pass "
                    "--driver-version",
                    {"reason": why},
                ),
                exit_code=1,
            )
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
    if not is_driver_version(driver_version):
        raise usage_error(f"--driver-version {driver_version!r} is not a driver version like "
                          "580.95.05",
                          "give the version as published, e.g. 580.95.05")
    return driver_version


def _wanted(components: str | None, default_components: tuple[str, ...] | None,
            fabric: str, canon: str) -> tuple[str, ...]:
    """The components asked for: ``--components`` (validated), else ``default_components``,
    else the fabric's (x86_64-only ones dropped on aarch64). Raises usage_error on an unknown
    or empty list."""
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
    return wanted


def _repo_distro(source: str, distro: str | None, mirror: str | None,
                 node: Callable[[], Inventory]) -> str | None:
    """``--distro`` (validated), else for apt/rpm the node's from etc/os-release (dropped when
    a mirror of the other package family is given). Raises usage_error when it is malformed or
    cannot be told."""
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
    return distro


def default_path(root: str, host_path: str, flag: str) -> str:
    """The default of ``flag`` (a host path) under ``root``, with every link followed: a
    ``var/cache`` linked out of an image root would have fetch write the host's (or another
    tree's) cache. Raises usage_error (exit 2) naming the flag when it leads out."""
    try:
        return confined(root, host_path, f"{flag} (default)")
    except ValueError as err:
        raise usage_error(str(err), f"pass {flag} DIR explicitly, or make the link in the "
                          "root relative") from None


def resolve_request(
    inputs: Inputs, source: str, mirror: str | None, nvlsm_version: str | None,
    timeout: float, retries: int,
) -> tuple[Any, Any]:
    """(Resolution, open Transport) for the inputs."""
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


def header(inputs: Inputs, source: str, resolution: Any, dry_run: bool) -> dict[str, Any]:
    """The keys every fetch and install JSON object starts with."""
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


def nothing(inputs: Inputs, source: str, dry_run: bool, as_json: bool) -> None:
    """The node's plan needs no fabric artifact: say so, exit 0."""
    out = header(inputs, source, None, dry_run)
    out["artifacts"] = []
    if as_json:
        print_json(out)
    else:
        sys.stdout.write(
            f"nothing to fetch: the node's fabric is {inputs.fabric or 'none'}, which needs no "
            "fabric service\n"
        )


@click.command("fetch")
@common_options
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
    inputs = gather(root, driver_version, arch, components, source, mirror, distro, fabric)
    dest = dest or default_path(root, DEFAULT_DEST, "--dest")
    if not inputs.components:
        nothing(inputs, source, dry_run, as_json)
        return
    resolution, transport = resolve_request(inputs, source, mirror, nvlsm_version, timeout, retries)
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
    # shell lines to paste: dnf's plugin capability `dnf-command(versionlock)` is quoted
    pins = [shlex.join(argv) for argv in commands(source, resolution.artifacts, inputs.distro)]
    out = header(inputs, source, resolution, dry_run)
    out["artifacts"] = rows
    out["record"] = record
    if pins:
        out["pins"] = pins
    # typed as printed, it installs what was fetched into the same root, for the same
    # architecture and fabric kind as asked here (not the host's /opt/nvfabric)
    out["next"] = offline_install(root, dest, arch, fabric) if record else None
    if as_json:
        print_json(out)
        return
    _print_fetched(inputs, source, rows, pins, out["next"])


def offline_install(root: str, dest: str, arch: str | None, fabric: str | None) -> str:
    """The ``install --from`` line that installs what this fetch cached: ``--root`` when the
    fetch read a root other than ``/``, ``--arch``/``--fabric`` when they were given (the record
    may hold other architectures; the root's plan may say another fabric kind)."""
    return command_line("install", "--from", dest, root=root,
                        options=(("--arch", arch), ("--fabric", fabric)))


def _print_fetched(inputs: Inputs, source: str, rows: list[dict[str, Any]], pins: list[str],
                   next_step: str | None) -> None:
    """The human form of ``fetch``: findings, one line per artifact, the pin lines and the
    offline install command."""
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
    if next_step:
        con.print(f"offline install (at boot, e.g. on a runfile-driver image): "
                  f"{safe(next_step)}", emoji=False)

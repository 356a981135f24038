"""``nvfabric fetch`` and ``nvfabric install``: exactly the fabric artifacts of the loaded
driver, verified, then installed (redist archives) or pinned (apt/rpm packages).

The driver version defaults to the loaded module of the node (``--root``), never a config
value; the architecture to the node's; the components to what the node's plan needs
(:data:`nvfabric.artifacts.tables.COMPONENTS_BY_FABRIC`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..errors import NvfabricError, usage_error
from ..findings import Finding
from ..inventory import Inventory, collect
from ..inventory.fs import under
from ..output import console, guarded, json_option, print_json, root_option, safe

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


def gather(
    root: str, driver_version: str | None, arch: str | None, components: str | None,
    source: str, mirror: str | None, distro: str | None,
) -> Inputs:
    """Fill the unset inputs from the node (read only when something is unset) and validate
    every value. Raises usage_error (exit 2) on a bad value, ``driver_not_loaded`` (exit 1)
    when the driver version is neither given nor loaded."""
    from ..artifacts.naming import canonical_arch, distro_dir
    from ..artifacts.tables import COMPONENTS, COMPONENTS_BY_FABRIC, X86_ONLY
    from ..artifacts.versions import is_version

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
    fabric = None
    if components is not None:
        wanted = tuple(dict.fromkeys(c.strip() for c in components.split(",") if c.strip()))
        unknown = [c for c in wanted if c not in COMPONENTS]
        if unknown or not wanted:
            raise usage_error(
                f"--components {components!r}: unknown {', '.join(unknown) or 'empty list'}",
                "choose from " + ",".join(COMPONENTS),
            )
    else:
        from ..plan import plan

        fabric = plan(node()).fabric
        wanted = tuple(
            c for c in COMPONENTS_BY_FABRIC[fabric] if not (c in X86_ONLY and canon != "x86_64")
        )
    if distro is not None and not re.match(r"^[a-z]+[0-9]+$", distro):
        raise usage_error(f"--distro {distro!r} is not a CUDA repository name like ubuntu2404",
                          "give the directory name of the CUDA repository, e.g. ubuntu2404, rhel9")
    if source != "redist" and not mirror and not distro:
        distro = distro_dir(dict(node().os_release))
        if distro is None:
            raise usage_error(
                "cannot tell the CUDA repository distro from etc/os-release",
                "pass --distro (e.g. ubuntu2404, rhel9) or --mirror",
            )
    return Inputs(driver_version, canon, wanted, fabric, distro)


def _resolve(
    inputs: Inputs, source: str, mirror: str | None, nvlsm_version: str | None,
    timeout: float, retries: int,
) -> tuple[Any, Any]:
    """(Resolution, open Transport) for the inputs."""
    from ..artifacts import Request, RetryPolicy, Transport, resolve
    from ..artifacts.transport import mirror_base, stderr_is_tty
    from ..artifacts.versions import is_version

    if nvlsm_version is not None and not is_version(nvlsm_version):
        raise usage_error(f"--nvlsm-version {nvlsm_version!r} is not a version like 2025.06.6",
                          "omit it to take the one of the driver release's redist manifest")
    if timeout <= 0:
        raise usage_error("--timeout must be positive", "give seconds, e.g. --timeout 30")
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
    }


@click.command("fetch")
@_common
@guarded
def fetch(
    root: str, driver_version: str | None, arch: str | None, source: str,
    components: str | None, mirror: str | None, distro: str | None,
    nvlsm_version: str | None, dest: str | None, timeout: float, retries: int,
    dry_run: bool, as_json: bool,
) -> None:
    """Resolve and download the exact artifacts of the loaded driver, verified by sha256.

    For apt/rpm sources also print the exact pin lines (install name=version, hold/lock).
    """
    from ..artifacts import fetch as fetch_one
    from ..artifacts.packages import commands
    from ..artifacts.resolve import cache_path

    inputs = gather(root, driver_version, arch, components, source, mirror, distro)
    dest = dest or under(root, DEFAULT_DEST)
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
    pins = [" ".join(argv) for argv in commands(source, resolution.artifacts, inputs.distro)]
    out = _header(inputs, source, resolution, dry_run)
    out["artifacts"] = rows
    if pins:
        out["pins"] = pins
    if as_json:
        print_json(out)
        return
    con = console()
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


@click.command("install")
@_common
@click.option("--prefix", default=None,
              help=f"Where redist archives are installed (default: <root>{DEFAULT_PREFIX}).")
@click.option("--execute", is_flag=True,
              help="apt/rpm: run the package manager (otherwise print what would run).")
@guarded
def install(
    root: str, driver_version: str | None, arch: str | None, source: str,
    components: str | None, mirror: str | None, distro: str | None,
    nvlsm_version: str | None, dest: str | None, timeout: float, retries: int,
    dry_run: bool, as_json: bool, prefix: str | None, execute: bool,
) -> None:
    """Install the exact artifacts of the loaded driver.

    redist: download (verified), extract safely under --prefix with an install record;
    idempotent. apt/rpm: run the pinned package-manager commands only with --execute.
    """
    from ..artifacts import fetch as fetch_one
    from ..artifacts.install import install_archive, install_dir
    from ..artifacts.packages import commands, run

    if execute and source == "redist":
        raise usage_error("--execute is for apt/rpm sources; redist archives install directly",
                          "drop --execute, or pass --source apt|rpm")
    if execute and root != "/":
        raise usage_error("--execute runs this host's package manager; it needs --root /",
                          "drop --execute to print the commands for the node under --root")
    inputs = gather(root, driver_version, arch, components, source, mirror, distro)
    dest = dest or under(root, DEFAULT_DEST)
    prefix = prefix or under(root, DEFAULT_PREFIX)
    if not inputs.components:
        _nothing(inputs, source, dry_run, as_json)
        return
    resolution, transport = _resolve(inputs, source, mirror, nvlsm_version, timeout, retries)
    out = _header(inputs, source, resolution, dry_run)
    out["artifacts"] = [a.to_json(None) for a in resolution.artifacts]
    con = None if as_json else console()
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
                              f"{safe(done.path)} ({done.files} files)", emoji=False)
            out["installed"] = installed
            if con is not None and dry_run:
                for item in installed:
                    con.print(f"would install {safe(item['component'])} "
                              f"{safe(item['version'])} -> {safe(item['path'])}", emoji=False)
    if as_json:
        print_json(out)


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

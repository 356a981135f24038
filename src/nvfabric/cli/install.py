"""``nvfabric install``: the exact artifacts of the loaded driver, installed. redist archives
are downloaded (verified) and extracted under ``--prefix``; apt/rpm packages get their pinned
package-manager commands (run only with ``--execute``); on a runfile-driver node apt's .debs
go through dpkg as ``install --from`` does (:mod:`nvfabric.cli.installfrom`).
"""

from __future__ import annotations

import shlex
from typing import Any

import click

from nvfabric.cli.fetch import header, nothing, resolve_request
from nvfabric.cli.fetchargs import (
    DEFAULT_DEST,
    DEFAULT_PREFIX,
    Inputs,
    common_options,
    default_path,
    gather,
)
from nvfabric.cli.installfrom import install_from
from nvfabric.cli.render import console, guarded, print_findings, print_json, safe
from nvfabric.facts.fs import under
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.words import plural


@click.command("install")
@common_options
@click.option("--prefix", default=None,
              help=f"Where redist archives are installed (default: <root>{DEFAULT_PREFIX}).")
@click.option("--execute", is_flag=True,
              help="apt/rpm: run the package manager (otherwise print what would run).")
@click.option("--from", "from_dir", default=None,
              help="Install, with no network, what `fetch --dest DIR` cached in DIR: .debs "
              "with dpkg -i (only runfile-provided dependencies forced), redist archives "
              "under --prefix.")
@click.option("--imex-owner", type=click.Choice(["host", "dra", "dra-host", "slurm", "none"]),
              default=None,
              help="Who runs IMEX (default: detected); decides whether nvidia-imex.service "
              "is enabled (host, dra-host, a Slurm prolog that drives the unit), masked (dra, "
              "a Slurm prolog that runs the daemon itself) or disabled (none).")
@click.option("--layout", type=click.Choice(["prefix", "vendor"]), default="prefix",
              show_default=True,
              help="With --from: redist archives under --prefix with install records "
              "(prefix), or at their packages' vendor paths under --root, an image being "
              "built (vendor).")
@guarded
def install(
    root: str, driver_version: str | None, arch: str | None, source: str,
    components: str | None, mirror: str | None, distro: str | None,
    nvlsm_version: str | None, fabric: str | None, dest: str | None, timeout: float,
    retries: int, dry_run: bool, as_json: bool, prefix: str | None, execute: bool,
    from_dir: str | None, imex_owner: str | None, layout: str,
) -> None:
    """Install the exact artifacts of the loaded driver.

    redist: download (verified), extract safely under --prefix with an install record;
    idempotent. apt/rpm: run the pinned package-manager commands only with --execute.
    --from DIR: install what fetch cached there, offline (docs/commands/install.md).
    """
    if from_dir is not None:
        _check_from(execute, mirror, layout, prefix)
        install_from(root, from_dir, driver_version, arch, components, fabric,
                     prefix or under(root, DEFAULT_PREFIX), imex_owner, dry_run, as_json, layout)
        return
    if layout != "prefix":
        raise usage_error("--layout vendor lays out what fetch cached: use it with --from DIR",
                          "nvfabric fetch --dest DIR ..., then nvfabric install --from DIR "
                          "--root IMAGE_ROOT --layout vendor")
    if execute and source == "redist":
        raise usage_error("--execute is for apt/rpm sources; redist archives install directly",
                          "drop --execute, or pass --source apt|rpm")
    if execute and root != "/":
        raise usage_error("--execute runs this host's package manager; it needs --root /",
                          "drop --execute to print the commands for the node under --root")
    inputs = gather(root, driver_version, arch, components, source, mirror, distro, fabric)
    dest = dest or default_path(root, DEFAULT_DEST, "--dest")
    # The prefix takes redist archives only (apt on a runfile node: install --from checks it).
    prefix = prefix or (default_path(root, DEFAULT_PREFIX, "--prefix") if source == "redist"
                        else under(root, DEFAULT_PREFIX))
    if not inputs.components:
        nothing(inputs, source, dry_run, as_json)
        return
    resolution, transport = resolve_request(inputs, source, mirror, nvlsm_version, timeout,
                                            retries)
    if source == "apt" and _runfile_driver(root):
        # apt-get would pull a packaged nvidia-modprobe over the runfile's (issue 17): fetch the
        # exact .debs into --dest and install them as `install --from` does, with dpkg.
        _apt_on_runfile(root, inputs, resolution, transport, dest, prefix, imex_owner,
                        execute, dry_run, as_json)
        return
    out = header(inputs, source, resolution, dry_run)
    out["artifacts"] = [a.to_json(None) for a in resolution.artifacts]
    out["route"] = "package manager"
    con = None if as_json else console()
    if con is not None:
        print_findings(con, inputs.findings, "not installed")
    with transport:
        if source != "redist":
            _package_manager(out, con, source, resolution.artifacts, inputs.distro, execute,
                             dry_run)
        else:
            out["installed"] = _archives(con, resolution.artifacts, transport, dest, prefix,
                                         dry_run)
    if as_json:
        print_json(out)


def _check_from(execute: bool, mirror: str | None, layout: str, prefix: str | None) -> None:
    """usage_error for the options ``--from`` does not take with the given ones."""
    if execute or mirror:
        raise usage_error("--from installs what is cached, with no network and no "
                          "package manager: drop --execute and --mirror",
                          "nvfabric install --from DIR [--root ROOT]")
    if layout == "vendor" and prefix is not None:
        raise usage_error("--layout vendor places the archives at their vendor paths "
                          "under --root: drop --prefix", "nvfabric install --from DIR "
                          "--root IMAGE_ROOT --layout vendor")


def _package_manager(out: dict[str, Any], con: Any, source: str, artifacts: Any,
                     distro: str | None, execute: bool, dry_run: bool) -> None:
    """apt/rpm: the pinned package-manager argvs into ``out``, printed, and run only with
    ``--execute`` (not on a dry run)."""
    from nvfabric.artifacts.packages import commands, run

    argvs = commands(source, artifacts, distro)
    out["commands"] = argvs
    out["executed"] = bool(execute and not dry_run)
    if con is not None:
        verb = "running" if out["executed"] else "would run (add --execute)"
        for argv in argvs:
            con.print(f"{verb}: {safe(shlex.join(argv))}", emoji=False)
    if out["executed"]:
        run(argvs)


def _archives(con: Any, artifacts: Any, transport: Any, dest: str, prefix: str,
              dry_run: bool) -> list[dict[str, Any]]:
    """redist: download each archive (verified) into ``dest`` and extract it under ``prefix``
    with its install record; on a dry run only where each would go. The installed items."""
    from nvfabric.artifacts import fetch as fetch_one
    from nvfabric.artifacts.install import install_archive, install_dir

    installed = []
    for art in artifacts:
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
    if con is not None and dry_run:
        for item in installed:
            con.print(f"would install {safe(item['component'])} "
                      f"{safe(item['version'])} -> {safe(item['path'])}", emoji=False)
    return installed


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
        out = header(inputs, "apt", resolution, dry_run)
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
    install_from(root, dest, inputs.driver_version, inputs.arch, ",".join(inputs.components),
                 inputs.fabric, prefix, imex_owner, not execute, as_json)

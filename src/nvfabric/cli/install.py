"""``nvfabric install``: the exact artifacts of the loaded driver, installed. redist archives
are downloaded (verified) and extracted under ``--prefix``; apt/rpm packages get their pinned
package-manager commands (run only with ``--execute``); on a runfile-driver node apt's .debs
go through dpkg as ``install --from`` does.

``install --from DIR`` is the boot step of the image flow (docs/commands/install.md),
with no network: what ``fetch --dest DIR`` cached there is checked against its
record and the node's driver, the .debs go through dpkg (forcing only what the runfile
provides), redist archives are extracted under ``--prefix`` (or, with ``--layout vendor``, laid
out at their vendor paths under ``--root``: :mod:`nvfabric.artifacts.vendorlayout`), and
nvidia-imex.service is enabled or left disabled by the IMEX owner.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

import click

from nvfabric.artifacts import cachefile, debinstall, dpkgdb
from nvfabric.artifacts.install import install_archive, install_dir
from nvfabric.artifacts.naming import canonical_arch
from nvfabric.artifacts.packages import commands, run
from nvfabric.artifacts.resolve import fetch as fetch_one
from nvfabric.artifacts.vendorlayout import lay_out
from nvfabric.cli.fetch import (
    DEFAULT_DEST,
    DEFAULT_PREFIX,
    Inputs,
    common_options,
    default_path,
    gather,
    header,
    nothing,
    resolve_request,
)
from nvfabric.cli.render import console, guarded, print_findings, safe
from nvfabric.effects import imex as imex_effects
from nvfabric.effects.stdio import print_json
from nvfabric.facts.imex import tray as imex_facts
from nvfabric.facts.inventory import collect
from nvfabric.model.commandline import IMEX_UNIT
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.hostpath import under
from nvfabric.model.words import plural
from nvfabric.rules.imex.owner import decide, unit_policy
from nvfabric.rules.imex.tables import IMEX_BINARY


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
        # apt-get would pull a packaged nvidia-modprobe over the runfile's: fetch the
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


# -- install --from DIR -----------------------------------------------------------------------


def install_from(
    root: str, from_dir: str, driver_version: str | None, arch: str | None,
    components: str | None, fabric: str | None, prefix: str, imex_owner: str | None,
    dry_run: bool, as_json: bool, layout: str = "prefix",
) -> None:
    """``install --from DIR``: the boot step of the image flow (docs/commands/install.md).
    Facts first (the fetch record, the node's driver, the dpkg database, the IMEX
    owner), then the decisions, then dpkg, the archives and the unit."""
    directory, inputs, reasons, chosen = _choose(root, from_dir, driver_version, arch,
                                                 components, fabric)
    debs = [c for c in chosen if c.artifact.source == "apt"]
    archives = [c for c in chosen if c.artifact.source == "redist"]
    if archives and layout == "prefix" and prefix == under(root, DEFAULT_PREFIX):
        prefix = default_path(root, DEFAULT_PREFIX, "--prefix")  # before anything is installed
    findings = list(inputs.findings)
    out: dict[str, Any] = {
        "from": directory, "driver_version": inputs.driver_version, "arch": inputs.arch,
        "fabric": inputs.fabric, "components": [c.artifact.component for c in chosen],
        "dry_run": dry_run, "reasons": reasons, "route": "dpkg", "layout": layout,
    }
    prepared = debinstall.prepare(root, directory, debs, inputs.arch) if debs else None
    if archives:
        debinstall.verify_files(directory, archives)
    ownership = None
    live = imex_effects.systemd_running(root)
    if any(c.artifact.component == "imex" for c in debs):
        ownership = decide(imex_facts.gather_evidence(root), imex_owner)
        if ownership.unknown is not None:
            # No unit setting is right for an owner not known: refused before dpkg runs.
            raise NvfabricError(ownership.unknown, exit_code=1)
        if ownership.conflict is not None and unit_policy(ownership).action == "enable":
            # Enabling the host unit beside the DRA driver's daemons: refused before dpkg runs.
            raise NvfabricError(ownership.conflict, exit_code=1)
    if prepared is not None:
        findings += prepared.forced
        out["driver_origin"] = prepared.origin.to_json()
        out["forced"] = [f.to_json() for d in prepared.decisions for f in d.forced]
        out["commands"] = [list(prepared.argv)] if prepared.argv else []
        out["unchanged"] = list(prepared.unchanged)
    con = None if as_json else console()
    if con is not None:
        _print_plan(con, reasons, prepared, inputs, dry_run)
    installed, added = _apply(root, prepared, directory, archives, prefix, dry_run, layout,
                              inputs.arch)
    out["installed"] = installed
    if con is not None:
        _print_installed(con, installed, dry_run)
    if ownership is not None:
        out["imex_unit"] = _imex_unit(root, ownership, prepared, added, live, dry_run, con)
    out["findings"] = [f.to_json() for f in findings]
    if as_json:
        print_json(out)
    elif con is not None:
        print_findings(con, findings, "findings")


def _choose(root: str, from_dir: str, driver_version: str | None, arch: str | None,
            components: str | None, fabric: str | None) -> tuple[str, Inputs, list[str], list[Any]]:
    """The facts and the choice: the fetch record of ``from_dir``, the driver to match (given,
    loaded, or on disk), the request's values, and the cached artifacts to install, each
    checked against that driver. (directory, inputs, reasons, chosen). Raises usage_error for
    cached RPMs."""
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
    return directory, inputs, reasons, list(chosen)


def _print_plan(con: Any, reasons: list[str], prepared: Any, inputs: Inputs,
                dry_run: bool) -> None:
    """The human lines before anything is installed: why this driver, the driver's origin,
    each forced dependency and the dpkg argv."""
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
        for k in prepared.controls:
            if k["Package"] in prepared.unchanged:
                con.print(f"unchanged: {safe(k['Package'])} {safe(k['Version'])} is installed "
                          "with the same files (dpkg's md5sums): dpkg is not run for it",
                          emoji=False)
        if prepared.argv:
            verb = "would run" if dry_run else "running"
            con.print(f"{verb}: {safe(' '.join(prepared.argv))}", emoji=False)


def _print_installed(con: Any, installed: list[dict[str, Any]], dry_run: bool) -> None:
    """One line per package or archive: installed, unchanged (nothing was written), or on a
    dry run where an archive would go."""
    for item in installed:
        what, version = item.get("package") or item.get("component"), item["version"]
        if dry_run:
            con.print(f"would install {safe(what)} {safe(version)} -> {safe(item['path'])}",
                      emoji=False)
        elif item.get("changed") is False:
            con.print(f"unchanged: {safe(what)} {safe(version)} (already installed, same "
                      "files)", emoji=False)
        else:
            where = f" at its vendor paths ({plural(len(item['files']), 'file')})" \
                if item.get("layout") == "vendor" else ""
            con.print(f"installed: {safe(what)} {safe(version)}{where}", emoji=False)


def _apply(root: str, prepared: Any, directory: str, archives: list[Any], prefix: str,
           dry_run: bool, layout: str = "prefix",
           arch: str = "x86_64") -> tuple[list[dict[str, Any]], list[str]]:
    """dpkg, then the redist archives (on a dry run only where each would go): under
    ``prefix``, or at the vendor paths under ``root`` (``layout`` vendor, for target
    ``arch``). (installed items, packages dpkg newly added)."""
    installed: list[dict[str, Any]] = []
    added: list[str] = []
    if layout == "vendor" and archives:
        # planned and checked whole before dpkg touches the root
        lay_out(root, directory, archives, arch, dry_run=True)
        if not dry_run and prepared is not None:
            added = debinstall.newly_added(root, prepared)
            installed += debinstall.apply(root, prepared)
        laid = lay_out(root, directory, archives, arch, dry_run=dry_run)
        return installed + laid.to_json(archives), added
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
    return installed, added


def _imex_unit(root: str, ownership: Any, prepared: Any, added: list[str], live: bool,
               dry_run: bool, con: Any) -> dict[str, Any]:
    """Enable or leave disabled nvidia-imex.service as the IMEX owner decides (with
    systemctl; on a dry run only the argv); a failure rolls back what dpkg added
    (:func:`nvfabric.artifacts.debinstall.unit_failed`). The ``imex_unit`` object."""
    policy = unit_policy(ownership)
    try:
        argv = imex_effects.unit_argv(root, policy.action, policy.now, live)
    except ValueError as err:
        raise usage_error(f"refusing to build the systemctl command line: {err}",
                          "use a plain absolute --root (no newline)") from None
    unit: dict[str, Any] = {
        "unit": IMEX_UNIT, "owner": ownership.owner, "owner_source": ownership.source,
        "action": policy.action, "live": live, "argv": argv, "reason": policy.reason,
        "runner": ownership.runner, "owner_reasons": list(ownership.reasons),
        "binary": IMEX_BINARY,
    }
    present = dry_run or imex_facts.unit_file(root) is not None
    if not present:
        unit["state"] = "not installed"
        unit["argv"] = None
        unit["reason"] = f"the package ships no {IMEX_UNIT}: nothing to enable, disable or mask"
    elif not dry_run:
        rc, text = _systemctl(argv)
        if rc != 0 and prepared is not None:
            raise debinstall.unit_failed(root, prepared, added, argv, rc, text,
                                         policy.action)
        unit["state"] = imex_facts.unit_state(root, live)
    unit["binary_present"] = dry_run or os.path.isfile(under(root, IMEX_BINARY))
    if con is not None:
        verb = "would" if dry_run else "did"
        state = f" -> {safe(unit['state'])}" if "state" in unit else ""
        con.print(f"{IMEX_UNIT}: {verb} {policy.action} (IMEX owner "
                  f"{safe(ownership.owner)}: {safe(unit['reason'])}){state}", emoji=False)
    return unit


def _systemctl(argv: list[str]) -> tuple[int, str]:
    """Run one systemctl argv; OSError (no systemctl) becomes exit status 127."""
    try:
        return imex_effects.run_systemctl(argv)
    except OSError as err:
        return 127, f"cannot run systemctl: {err.strerror}"

"""``nvfabric install --from DIR``: the boot step of the image flow (docs/commands/install.md),
with no network: what ``fetch --dest DIR`` cached there is checked against its record and
the node's driver, the .debs go through dpkg (forcing only what the runfile provides), redist
archives are extracted under ``--prefix`` (or, with ``--layout vendor``, laid out at their
vendor paths under ``--root``: :mod:`nvfabric.artifacts.vendorlayout`), and
nvidia-imex.service is enabled or left disabled by the IMEX owner.
"""

from __future__ import annotations

import os
from typing import Any

from nvfabric.cli.fetchargs import DEFAULT_PREFIX, Inputs, default_path, gather
from nvfabric.cli.render import console, print_findings, print_json, safe
from nvfabric.facts.fs import under
from nvfabric.facts.inventory import collect
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.words import plural


def install_from(
    root: str, from_dir: str, driver_version: str | None, arch: str | None,
    components: str | None, fabric: str | None, prefix: str, imex_owner: str | None,
    dry_run: bool, as_json: bool, layout: str = "prefix",
) -> None:
    """``install --from DIR``: the boot step of the image flow (docs/commands/install.md).
    Facts first (the fetch record, the node's driver, the dpkg database, the IMEX owner),
    then the decisions, then dpkg, the archives and the unit."""
    from nvfabric.artifacts import debinstall
    from nvfabric.facts import imexhost as imex_host
    from nvfabric.rules.imex.owner import decide, unit_policy

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
    live = imex_host.systemd_running(root)
    if any(c.artifact.component == "imex" for c in debs):
        ownership = decide(imex_host.gather_evidence(root), imex_owner)
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
    from nvfabric.artifacts import cachefile, debinstall, dpkgdb
    from nvfabric.artifacts.naming import canonical_arch

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
    from nvfabric.artifacts import debinstall
    from nvfabric.artifacts.install import install_archive, install_dir

    installed: list[dict[str, Any]] = []
    added: list[str] = []
    if layout == "vendor" and archives:
        from nvfabric.artifacts.vendorlayout import lay_out

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
    from nvfabric.artifacts import debinstall
    from nvfabric.facts import imexhost as imex_host
    from nvfabric.rules.imex.owner import unit_policy
    from nvfabric.rules.imex.tables import HOST_UNIT, IMEX_BINARY

    policy = unit_policy(ownership)
    try:
        argv = imex_host.unit_argv(root, policy.action, policy.now, live)
    except ValueError as err:
        raise usage_error(f"refusing to build the systemctl command line: {err}",
                          "use a plain absolute --root (no newline)") from None
    unit: dict[str, Any] = {
        "unit": HOST_UNIT, "owner": ownership.owner, "owner_source": ownership.source,
        "action": policy.action, "live": live, "argv": argv, "reason": policy.reason,
        "runner": ownership.runner, "owner_reasons": list(ownership.reasons),
        "binary": IMEX_BINARY,
    }
    present = dry_run or imex_host.unit_file(root) is not None
    if not present:
        unit["state"] = "not installed"
        unit["argv"] = None
        unit["reason"] = f"the package ships no {HOST_UNIT}: nothing to enable, disable or mask"
    elif not dry_run:
        rc, text = _systemctl(argv)
        if rc != 0 and prepared is not None:
            raise debinstall.unit_failed(root, prepared, added, argv, rc, text,
                                         policy.action)
        unit["state"] = imex_host.unit_state(root, live)
    unit["binary_present"] = dry_run or os.path.isfile(under(root, IMEX_BINARY))
    if con is not None:
        verb = "would" if dry_run else "did"
        state = f" -> {safe(unit['state'])}" if "state" in unit else ""
        con.print(f"{HOST_UNIT}: {verb} {policy.action} (IMEX owner "
                  f"{safe(ownership.owner)}: {safe(unit['reason'])}){state}", emoji=False)
    return unit


def _systemctl(argv: list[str]) -> tuple[int, str]:
    """Run one systemctl argv; OSError (no systemctl) becomes exit status 127."""
    from nvfabric.facts import imexhost as imex_host

    try:
        return imex_host.run_systemctl(argv)
    except OSError as err:
        return 127, f"cannot run systemctl: {err.strerror}"

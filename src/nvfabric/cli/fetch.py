"""``nvfabric fetch``: exactly the fabric artifacts of the loaded driver, resolved (redist
manifest, APT or RPM repository) and downloaded, verified by sha256, with the pin lines of
apt/rpm packages and a record for ``install --from``. The request's values come from
:mod:`nvfabric.cli.fetchargs`; ``nvfabric install`` is :mod:`nvfabric.cli.install`.
"""

from __future__ import annotations

import math
import shlex
import sys
from typing import Any

import click

from nvfabric.cli.fetchargs import (
    DEFAULT_DEST,
    Inputs,
    common_options,
    default_path,
    gather,
)
from nvfabric.cli.render import console, guarded, print_findings, safe
from nvfabric.effects.stdio import print_json
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import usage_error


def resolve_request(
    inputs: Inputs, source: str, mirror: str | None, nvlsm_version: str | None,
    timeout: float, retries: int,
) -> tuple[Any, Any]:
    """(Resolution, open Transport) for the inputs."""
    from nvfabric.artifacts.model import Request
    from nvfabric.artifacts.resolve import resolve
    from nvfabric.artifacts.transport import RetryPolicy, Transport, mirror_base, stderr_is_tty
    from nvfabric.model.versions import is_version

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
    from nvfabric.artifacts import cachefile
    from nvfabric.artifacts.packages import commands
    from nvfabric.artifacts.resolve import cache_path
    from nvfabric.artifacts.resolve import fetch as fetch_one

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

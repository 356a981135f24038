"""The request of ``nvfabric fetch`` and ``nvfabric install``: the options both commands
take, and the values they stand for, filled from the node where unset (driver version from the
loaded module, never a config value; architecture; components from the node's plan,
:data:`nvfabric.artifacts.tables.COMPONENTS_BY_FABRIC`; CUDA repository distro from
etc/os-release) and validated.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from nvfabric.cli.render import json_option, root_option
from nvfabric.facts.inventory import collect
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import confined
from nvfabric.model.inventory import Inventory

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
    from nvfabric.artifacts.model import not_for_fabric
    from nvfabric.artifacts.naming import canonical_arch, split_for_fabric
    from nvfabric.rules.plan import plan

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
    from nvfabric.model.versions import is_driver_version

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
    from nvfabric.artifacts.tables import COMPONENTS, COMPONENTS_BY_FABRIC, X86_ONLY

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
    from nvfabric.artifacts.naming import distro_dir

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

"""Steps shared by the package-index sources (:mod:`.apt`, :mod:`.rpm`): which package carries
each requested component on the driver's branch, which exact version is wanted, and the
``artifact_not_available`` error when the index lacks it. Pure.

Package names by branch come from :data:`.tables.PACKAGE_NAMES`; components on their own
version calendar (:data:`.tables.OWN_VERSION`, nvlsm) take ``request.nvlsm_version`` instead
of the driver version.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nvfabric.artifacts.model import Request, not_available
from nvfabric.artifacts.naming import package_name
from nvfabric.artifacts.tables import OWN_VERSION
from nvfabric.model.errors import NvfabricError


def package_names(
    kind: str, platform: str, request: Request, searched: Sequence[str]
) -> dict[str, str]:
    """Component -> package name of ``kind`` (``deb`` | ``rpm``) for the request's driver
    branch, in request order. Raises ``artifact_not_available`` for a component that no
    package of that kind carries on the branch; ``platform`` is the source's arch name."""
    driver = request.driver_version
    names: dict[str, str] = {}
    for comp in request.components:
        name = package_name(kind, comp, driver)
        if name is None:
            raise not_available(
                comp, driver, platform, searched,
                f"no {kind} package carries {comp} for the R{driver.split('.')[0]} branch",
            )
        names[comp] = name
    return names


def wanted_version(
    component: str, request: Request, platform: str, searched: Sequence[str]
) -> str:
    """The exact version to pick for ``component``: the driver version, or
    ``request.nvlsm_version`` for a component with its own calendar. Raises
    ``artifact_not_available`` when that version is not known."""
    if component not in OWN_VERSION:
        return request.driver_version
    if request.nvlsm_version is None:
        raise not_available(
            component, request.driver_version, platform, searched, "its version is not known"
        )
    return request.nvlsm_version


def not_in_index(
    component: str,
    package: str,
    want: str,
    platform: str,
    searched: Sequence[str],
    have: Iterable[str],
    where: str,
) -> NvfabricError:
    """``artifact_not_available`` for a package the index (``where``: "the index", "the
    repository") does not carry at version ``want``; names the versions it ``have``s."""
    present = sorted(set(have))
    detail = (
        f"package {package} has {', '.join(present)} but not {want}" if present
        else f"{where} has no package {package}"
    )
    return not_available(component, want, platform, searched, detail)

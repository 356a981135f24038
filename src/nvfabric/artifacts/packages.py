"""Package-manager commands for apt and rpm sources: the exact pin commands, and running them
(only when the operator asked with ``--execute``). argv lists only, never a shell string;
every name and version was validated before it reached an argv (:func:`.apt.validate_pin`,
:func:`.rpm.commands`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from nvfabric.artifacts import apt, rpm
from nvfabric.artifacts.model import Artifact
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding


def commands(source: str, artifacts: Sequence[Artifact],
             distro: str | None = None) -> list[list[str]]:
    """apt: ``apt-get install -y --no-install-recommends name=version…``, ``apt-mark hold
    name…``; rpm: ``dnf install -y name-ver-rel…``, ``dnf versionlock add name-ver-rel…``
    (``yum`` for RHEL/CentOS 7 and Amazon Linux 2 repositories: ``distro``, else the
    packages' ``.elN`` tag; ``zypper`` for SLES/openSUSE); redist: none."""
    if source == "apt":
        return apt.commands(artifacts)
    if source == "rpm":
        return rpm.commands(artifacts, distro)
    return []


def run(argvs: Sequence[Sequence[str]]) -> None:
    """Run each argv in order, inheriting stdout/stderr; stop at the first failure with
    ``install_failed`` (exit 1) naming the command and its exit status."""
    for argv in argvs:
        try:
            proc = subprocess.run(list(argv), check=False)
        except OSError as err:
            raise _failed(argv, f"cannot run: {err.strerror}") from None
        if proc.returncode != 0:
            raise _failed(argv, f"exit status {proc.returncode}")


def _failed(argv: Sequence[str], why: str) -> NvfabricError:
    return NvfabricError(
        Finding(
            "install_failed", "error", f"`{' '.join(argv)}` failed: {why}",
            "read the package manager's output above; the pins name exact versions, so a "
            "missing repository or an already held other version shows there",
            {"argv": list(argv)},
        ),
        exit_code=1,
    )

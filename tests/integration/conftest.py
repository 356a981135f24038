"""Integration tests: real system components (mmdebstrap, dpkg, podman, systemd, Slurm,
Prometheus) started by the tests as their own children. Run by ``make test-integration``
(``.ci/run`` installs every tool first); ``make test`` does not collect this folder."""

from __future__ import annotations

import pytest

from tests.integration.podman import build_image


@pytest.fixture(scope="session")
def nvfabric_image() -> str:
    """The image of deploy/container/Containerfile (``make image``, through
    tests/integration/podman.py), built once per test session on the private podman storage."""
    return build_image()

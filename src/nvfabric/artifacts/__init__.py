"""Version-matched artifacts: resolve exactly the fabric components a node needs for its
loaded driver version and architecture, download and verify them, install them safely.

Sources: NVIDIA's driver redist manifests (:mod:`.redist`), CUDA APT repositories
(:mod:`.apt`) and CUDA RPM repositories (:mod:`.rpm`). Facts (architecture names per
artifact kind, package names per branch, components per fabric) live in :mod:`.tables`.
Only this package talks to the network (:mod:`.transport`).
"""

from __future__ import annotations

from nvfabric.artifacts.model import Artifact, Request, Resolution
from nvfabric.artifacts.naming import arch_name, canonical_arch, package_name
from nvfabric.artifacts.resolve import fetch, resolve
from nvfabric.artifacts.transport import RetryPolicy, Transport

__all__ = [
    "Artifact",
    "Request",
    "Resolution",
    "RetryPolicy",
    "Transport",
    "arch_name",
    "canonical_arch",
    "fetch",
    "package_name",
    "resolve",
]

"""Version-matched artifacts: resolve exactly the fabric components a node needs for its
loaded driver version and architecture, download and verify them, install them safely.

Sources: NVIDIA's driver redist manifests (:mod:`.redist`), CUDA APT repositories
(:mod:`.apt`) and CUDA RPM repositories (:mod:`.rpm`). Facts (architecture names per
artifact kind, package names per branch, components per fabric) live in :mod:`.tables`.
Only this package talks to the network (:mod:`.transport`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvfabric.lazy import exports

if TYPE_CHECKING:
    from nvfabric.artifacts.model import Artifact, Request, Resolution
    from nvfabric.artifacts.naming import arch_name, canonical_arch, package_name
    from nvfabric.artifacts.resolve import fetch
    from nvfabric.artifacts.transport import RetryPolicy, Transport

#: The package's names and the submodule each comes from, imported on first use (PEP 562):
#: ``nvfabric run`` imports :mod:`.versions` and :mod:`.installed` only, and must not pay for
#: the resolvers, the decompressors and the transport (~25 ms). ``nvfabric.artifacts.resolve``
#: is the submodule (the function is ``nvfabric.artifacts.resolve.resolve``): a lazy package
#: cannot also give that name to the function.
_LAZY = {
    "Artifact": ".model", "Request": ".model", "Resolution": ".model",
    "arch_name": ".naming", "canonical_arch": ".naming", "package_name": ".naming",
    "fetch": ".resolve",
    "RetryPolicy": ".transport", "Transport": ".transport",
}

__all__ = [
    "Artifact", "Request", "Resolution", "RetryPolicy", "Transport", "arch_name",
    "canonical_arch", "fetch", "package_name",
]

__getattr__ = exports(__name__, _LAZY)

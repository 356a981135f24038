"""Version-matched artifacts: resolve exactly the fabric components a node needs for its
loaded driver version and architecture, download and verify them, install them safely.

Sources: NVIDIA's driver redist manifests (:mod:`.redist`), CUDA APT repositories
(:mod:`.apt`) and CUDA RPM repositories (:mod:`.rpm`). Facts (architecture names per
artifact kind, package names per branch, components per fabric) live in :mod:`.tables`.
Only this package talks to the network (:mod:`.transport`).
"""

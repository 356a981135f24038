"""Integration tests: real system components (mmdebstrap, dpkg, podman, systemd, Slurm,
Prometheus) started by the tests as their own children. Run by ``make test-integration``
(``.ci/run`` installs every tool first); ``make test`` does not collect this folder."""

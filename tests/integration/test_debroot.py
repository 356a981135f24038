"""The shared Debian root of the integration tests is a real, working bookworm system."""

from __future__ import annotations

from pathlib import Path

from tests import runkit
from tests.integration.debroot import fresh_root


def test_bookworm_root_runs_its_own_python_and_dpkg(tmp_path: Path) -> None:
    root = fresh_root(tmp_path / "root")
    assert (root / "var/lib/dpkg/status").is_file()
    out = runkit.run(["chroot", str(root), "python3", "-c",
                      "import sys; print(sys.version_info[0])"],
                     check=True)
    assert out.stdout.strip() == "3"
    status = runkit.run(["dpkg", "--root", str(root), "-s", "python3"], check=True)
    assert "Status: install ok installed" in status.stdout

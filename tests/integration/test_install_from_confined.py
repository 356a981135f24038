"""``install --from`` never lets the real ``dpkg --root`` write outside the root: an
mmdebstrap bookworm root has debootstrap's absolute ``var/run -> /run`` link, which dpkg follows
to the host's /run when a package ships a file under /var/run."""

from __future__ import annotations

import os
from pathlib import Path

from tests import runkit
from tests.cli.test_fetch_mirror import sha256
from tests.conftest import run_json
from tests.integration.debroot import fresh_root, require
from tests.integration.test_imex_image_flow import DRIVER, REVISION, host_arch, runfile_driver


def test_a_package_writing_through_var_run_is_refused_and_the_hosts_run_is_untouched(
    tmp_path: Path,
) -> None:
    require("mmdebstrap", "dpkg", "dpkg-deb")
    arch = host_arch()
    root = fresh_root(tmp_path / "root")
    assert os.readlink(root / "var/run") == "/run", "debootstrap's layout"
    runfile_driver(root, arch)
    marker = f"nvfabric-test-{os.getpid()}"
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text(
        f"Package: nvidia-imex\nVersion: {REVISION}\nArchitecture: {arch}\n"
        "Maintainer: t <t@example.invalid>\nDepends: nvidia-modprobe\n"
        "Description: IMEX test package\n a file under /var/run\n")
    (pkg / "var/run" / marker).mkdir(parents=True)
    (pkg / "var/run" / marker / "state").write_text("x\n")
    (pkg / "usr/bin").mkdir(parents=True)
    (pkg / "usr/bin/nvidia-imex").write_text("#!/bin/sh\n")
    deb = tmp_path / "debs" / f"nvidia-imex_{REVISION}_{arch}.deb"
    deb.parent.mkdir()
    runkit.run(["dpkg-deb", "--build", "--root-owner-group", str(pkg), str(deb)], check=True,
               timeout=120, text=False)
    from nvfabric.artifacts import cachefile
    from nvfabric.artifacts.model import Artifact

    data = deb.read_bytes()
    cachefile.write(str(deb.parent), [cachefile.Cached(
        Artifact("imex", REVISION, arch, f"http://127.0.0.1/{deb.name}", sha256(data),
                 len(data), "apt", "nvidia-imex"), deb.name, DRIVER)])
    status = (root / "var/lib/dpkg/status").read_bytes()
    out, rc = run_json("install", "--from", str(deb.parent), "--root", str(root), timeout=300)
    assert rc == 2, out
    assert "it writes /var/run, and directory '/var/run' resolves to /run, outside the root" \
        in out["error"]["message"]
    assert not Path("/run", marker).exists(), "dpkg wrote the host's /run"
    assert (root / "var/lib/dpkg/status").read_bytes() == status


def test_a_unit_step_that_fails_after_dpkg_purges_the_package_again(tmp_path: Path) -> None:
    """systemctl fails after dpkg installed nvidia-imex (its postinst enabled the unit): the
    node must not keep an enabled nvidia-imex.service its owner (none here) does not want."""
    require("mmdebstrap", "dpkg", "dpkg-deb")
    from tests.integration.test_imex_image_flow import build_imex_deb

    arch = host_arch()
    root = fresh_root(tmp_path / "root")
    runfile_driver(root, arch)
    deb = tmp_path / "debs" / f"nvidia-imex_{REVISION}_{arch}.deb"
    deb.parent.mkdir()
    deb.write_bytes(build_imex_deb(tmp_path, arch, "nvidia-modprobe"))
    from nvfabric.artifacts import cachefile
    from nvfabric.artifacts.model import Artifact

    data = deb.read_bytes()
    cachefile.write(str(deb.parent), [cachefile.Cached(
        Artifact("imex", REVISION, arch, f"http://127.0.0.1/{deb.name}", sha256(data),
                 len(data), "apt", "nvidia-imex"), deb.name, DRIVER)])
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    (shim / "systemctl").chmod(0o755)
    status = (root / "var/lib/dpkg/status").read_bytes()
    out, rc = run_json("install", "--from", str(deb.parent), "--root", str(root), timeout=300,
                       env={"PATH": f"{shim}:{os.environ['PATH']}"})
    assert rc == 1, out
    err = out["error"]
    assert err["code"] == "install_failed"
    assert err["message"].startswith(f"`systemctl --root {root} disable nvidia-imex.service` "
                                     "failed (exit status 1): Failed to connect to bus")
    assert err["rolled_back"] == ["nvidia-imex"]
    assert runkit.run(["dpkg", "--root", str(root), "-s", "nvidia-imex"]).returncode != 0
    assert (root / "var/lib/dpkg/status").read_bytes() == status
    assert not (root / "usr/bin/nvidia-imex").exists()

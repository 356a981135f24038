"""The GB200/GB300 image flow of issue 17 with the real tools: a Debian bookworm root from
``mmdebstrap`` holding a runfile-style driver (``nvidia-modprobe`` and the NVML library as plain
files, no package), a test ``nvidia-imex`` .deb built with ``dpkg-deb`` and served from a local
mirror on 127.0.0.1 as a CUDA-style ``Packages`` index with a ``-1ubuntu1`` revision; then
``nvfabric fetch`` into a directory and ``nvfabric install --from`` into the root with the real
``dpkg --root`` and ``systemctl --root``.

The test package is built for the architecture of this machine's dpkg (``dpkg
--print-architecture``, amd64 on the CI machine), not arm64: an arm64 image is built on arm64 (or
in an arm64 build container) whose dpkg is native arm64, so a package of the root's own
architecture is what the real flow installs; forcing a foreign architecture into the root would
test a step the real flow never takes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.cli.test_fetch_mirror import Mirror, sha256
from tests.conftest import run_json
from tests.integration.debroot import fresh_root, require

DRIVER = "580.95.05"
REVISION = f"{DRIVER}-1ubuntu1"
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
QUICK = ("--retries", "1", "--timeout", "10")

UNIT = """[Unit]
Description=NVIDIA IMEX service
After=network-online.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg

[Install]
WantedBy=multi-user.target
"""

# What dh_installsystemd's postinst snippet does for an enabled-by-default unit
# (deb-systemd-helper enable): the wants/ link in /etc, made inside the root (dpkg --root
# runs maintainer scripts chrooted there). The package enables its unit; nvfabric must undo it.
POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
    mkdir -p /etc/systemd/system/multi-user.target.wants
    ln -sf /lib/systemd/system/nvidia-imex.service \\
        /etc/systemd/system/multi-user.target.wants/nvidia-imex.service
fi
"""


def host_arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def build_imex_deb(work: Path, arch: str, depends: str, postinst: str = POSTINST) -> bytes:
    """An nvidia-imex .deb shaped like NVIDIA's: binaries, config, the unit, a postinst that
    enables it; Depends as given."""
    pkg = work / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text(
        f"Package: nvidia-imex\nVersion: {REVISION}\nArchitecture: {arch}\n"
        "Maintainer: cudatools <cudatools@nvidia.com>\n"
        f"Depends: {depends}\nSection: multiverse/devel\nPriority: optional\n"
        "Description: IMEX Manager for NVIDIA based systems\n"
        " Test package shaped like the CUDA repository's nvidia-imex.\n")
    (pkg / "DEBIAN/conffiles").write_text("/etc/nvidia-imex/config.cfg\n")
    (pkg / "DEBIAN/postinst").write_text(postinst)
    (pkg / "DEBIAN/postinst").chmod(0o755)
    for name in ("nvidia-imex", "nvidia-imex-ctl"):
        path = pkg / "usr/bin" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\necho {name} {DRIVER}\n")
        path.chmod(0o755)
    (pkg / "etc/nvidia-imex").mkdir(parents=True)
    (pkg / "etc/nvidia-imex/config.cfg").write_text(
        "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n")
    (pkg / "lib/systemd/system").mkdir(parents=True)
    (pkg / "lib/systemd/system/nvidia-imex.service").write_text(UNIT)
    out = work / "nvidia-imex.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(pkg), str(out)],
                   check=True, capture_output=True, timeout=120)
    return out.read_bytes()


def runfile_driver(root: Path, arch: str) -> None:
    """What NVIDIA-Linux-<arch>-<version>.run leaves on disk, owned by no package."""
    modprobe = root / "usr/bin/nvidia-modprobe"
    modprobe.write_text("#!/bin/sh\nexit 0\n")
    modprobe.chmod(0o4755)
    libdir = root / "usr/lib" / TRIPLETS[arch]
    (libdir / f"libnvidia-ml.so.{DRIVER}").write_bytes(b"\x7fELF runfile NVML")
    os.symlink(f"libnvidia-ml.so.{DRIVER}", libdir / "libnvidia-ml.so.1")


def serve_cuda_repo(mirror: Mirror, deb: bytes, arch: str) -> None:
    """A flat CUDA-style repository: Packages with the exact driver's revision and others."""
    name = f"nvidia-imex_{REVISION}_{arch}.deb"
    mirror.add(name, deb)
    stanzas = [
        # Another driver of the branch, and an older revision scheme of the same one: never
        # chosen (the exact version's highest revision wins).
        ("580.82.07-1ubuntu1", b"other driver", f"nvidia-imex_580.82.07-1ubuntu1_{arch}.deb"),
        (f"{DRIVER}-1", b"older revision", f"nvidia-imex_{DRIVER}-1_{arch}.deb"),
        (REVISION, deb, name),
    ]
    text = ""
    for version, data, filename in stanzas:
        text += (f"Package: nvidia-imex\nArchitecture: {arch}\nVersion: {version}\n"
                 "Depends: nvidia-modprobe\n"
                 f"Filename: ./{filename}\nSize: {len(data)}\nSHA256: {sha256(data)}\n"
                 "Description: IMEX Manager for NVIDIA based systems\n\n")
    mirror.add("Packages", text.encode())


def fetch_and_install(mirror: Mirror, root: Path, dest: Path, arch: str,
                      *extra: str) -> tuple[dict[str, Any], int]:
    out, rc = run_json("fetch", "--root", str(root), "--source", "apt", "--components", "imex",
                       "--arch", arch, "--driver-version", DRIVER, "--mirror", mirror.url,
                       "--dest", str(dest), *QUICK, timeout=120)
    assert rc == 0, out
    assert [(a["package"], a["version"], a["state"]) for a in out["artifacts"]] == [
        ("nvidia-imex", REVISION, "downloaded")]
    hit = sorted(p for p, r in mirror.routes.items() if r.hits)
    assert hit == ["/Packages", f"/nvidia-imex_{REVISION}_{arch}.deb"], "exactly that .deb"
    return run_json("install", "--from", str(dest), "--root", str(root), *extra, timeout=300)


def dpkg_status(root: Path, package: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["dpkg", "--root", str(root), "-s", package], capture_output=True,
                          text=True, timeout=60, check=False)


def is_enabled(root: Path) -> str:
    return subprocess.run(["systemctl", "--root", str(root), "is-enabled",
                           "nvidia-imex.service"], capture_output=True, text=True, timeout=60,
                          check=False).stdout.strip()


def test_runfile_node_gets_imex_with_only_nvidia_modprobe_forced_and_the_unit_off(
    tmp_path: Path,
) -> None:
    require("mmdebstrap", "dpkg", "dpkg-deb", "systemctl")
    arch = host_arch()
    root = fresh_root(tmp_path / "root")
    runfile_driver(root, arch)
    # libc6 is a package of the root: satisfied by dpkg, never forced.
    deb = build_imex_deb(tmp_path, arch, "libc6 (>= 2.34), nvidia-modprobe")
    mirror = Mirror()
    try:
        serve_cuda_repo(mirror, deb, arch)
        out, rc = fetch_and_install(mirror, root, tmp_path / "debs", arch)
    finally:
        mirror.close()
    assert rc == 0, out
    assert out["driver_origin"]["kind"] == "runfile"
    assert out["driver_origin"]["version"] == DRIVER
    assert [(f["dependency"], f["package"], f["version"], f["path"]) for f in out["forced"]] == [
        ("nvidia-modprobe", "nvidia-modprobe", DRIVER, "/usr/bin/nvidia-modprobe")]
    assert [f["code"] for f in out["findings"]] == ["dependency_forced"]
    deb_path = tmp_path / "debs" / f"nvidia-imex_{REVISION}_{arch}.deb"
    assert out["commands"] == [["dpkg", "--root", str(root), f"--log={root}/var/log/dpkg.log",
                                "--ignore-depends=nvidia-modprobe", "-i", str(deb_path)]]
    # dpkg logged into the image's own log, not the host's /var/log/dpkg.log.
    assert f"install nvidia-imex:{arch} <none> {REVISION}" in (
        root / "var/log/dpkg.log").read_text()
    status = dpkg_status(root, "nvidia-imex")
    assert status.returncode == 0
    assert "Status: install ok installed" in status.stdout
    assert f"Version: {REVISION}" in status.stdout
    assert dpkg_status(root, "nvidia-modprobe").returncode != 0, "no packaged nvidia-modprobe"
    assert (root / "usr/bin/nvidia-modprobe").read_text() == "#!/bin/sh\nexit 0\n"
    assert (root / "usr/bin/nvidia-imex").is_file(), "the binary stays where DRA expects it"
    # The package's postinst enabled the unit; with no owner on the node nvfabric disabled it.
    assert out["imex_unit"]["owner"] == "none"
    assert out["imex_unit"]["action"] == "disable"
    assert out["imex_unit"]["state"] == "disabled"
    assert is_enabled(root) == "disabled"

    # A ParallelCluster-style Slurm prolog that restarts the unit per job (case I02): the unit
    # is enabled again, not started, by the real systemctl (it skips IMEX when disabled).
    prolog = root / "opt/slurm/etc/scripts/prolog.d/91_nvidia_imex_prolog.sh"
    prolog.parent.mkdir(parents=True)
    prolog.write_text("#!/usr/bin/env bash\nIMEX_SERVICE=nvidia-imex\n"
                      "systemctl is-enabled ${IMEX_SERVICE} || exit 0\n"
                      "systemctl restart ${IMEX_SERVICE}\n")
    (root / "opt/slurm/etc/slurm.conf").write_text("Prolog=/opt/slurm/etc/scripts/prolog.d/*\n")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       timeout=300)
    assert rc == 0, out
    assert (out["imex_unit"]["owner"], out["imex_unit"]["runner"],
            out["imex_unit"]["action"]) == ("slurm", "unit", "enable")
    assert is_enabled(root) == "enabled"
    prolog.unlink()

    # The host owns IMEX: the unit is enabled. The cached .deb is what is installed (same
    # version, same files by dpkg's md5sums): dpkg is not run again, nor its postinst.
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--imex-owner", "host", timeout=300)
    assert rc == 0, out
    assert out["imex_unit"]["action"] == "enable"
    assert is_enabled(root) == "enabled"
    assert (out["commands"], out["unchanged"]) == ([], ["nvidia-imex"])
    assert [i["changed"] for i in out["installed"]] == [False]
    assert (root / "var/log/dpkg.log").read_text().count(" install nvidia-imex:") == 1

    # The DRA driver's kubelet plugin state appears: detected owner dra, the unit is masked
    # (the driver's documented fix: disable and mask, so no upgrade enables it again).
    plugin = root / "var/lib/kubelet/plugins/compute-domain.nvidia.com"
    plugin.mkdir(parents=True)
    (plugin / "checkpoint.json").write_text("{}")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       timeout=300)
    assert rc == 0, out
    assert (out["imex_unit"]["owner"], out["imex_unit"]["owner_source"]) == ("dra", "detected")
    assert out["imex_unit"]["action"] == "mask"
    assert is_enabled(root) == "masked"


def test_a_dependency_the_runfile_does_not_provide_refuses_and_installs_nothing(
    tmp_path: Path,
) -> None:
    require("mmdebstrap", "dpkg", "dpkg-deb", "systemctl")
    arch = host_arch()
    root = fresh_root(tmp_path / "root")
    runfile_driver(root, arch)
    deb = build_imex_deb(tmp_path, arch, f"nvidia-modprobe, libnvidia-nscq (= {REVISION})")
    status_before = (root / "var/lib/dpkg/status").read_bytes()
    mirror = Mirror()
    try:
        serve_cuda_repo(mirror, deb, arch)
        out, rc = fetch_and_install(mirror, root, tmp_path / "debs", arch)
    finally:
        mirror.close()
    assert rc == 1, out
    err = out["error"]
    assert err["code"] == "dependency_unsatisfied"
    assert err["missing"] == [f"libnvidia-nscq (= {REVISION}): not installed, and not "
                              "provided by the runfile driver"]
    assert "nvidia-modprobe" not in " ".join(err["missing"])
    assert dpkg_status(root, "nvidia-imex").returncode != 0
    assert (root / "var/lib/dpkg/status").read_bytes() == status_before
    assert not (root / "usr/bin/nvidia-imex").exists()
    assert not (root / "etc/systemd/system/multi-user.target.wants/nvidia-imex.service").exists()


def test_a_failing_dpkg_run_is_purged_again_and_leaves_the_root_as_it_was(
    tmp_path: Path,
) -> None:
    require("mmdebstrap", "dpkg", "dpkg-deb", "systemctl")
    arch = host_arch()
    root = fresh_root(tmp_path / "root")
    runfile_driver(root, arch)
    deb = build_imex_deb(tmp_path, arch, "nvidia-modprobe",
                         postinst="#!/bin/sh\necho 'postinst: cannot configure' >&2\nexit 1\n")
    status_before = (root / "var/lib/dpkg/status").read_bytes()
    mirror = Mirror()
    try:
        serve_cuda_repo(mirror, deb, arch)
        out, rc = fetch_and_install(mirror, root, tmp_path / "debs", arch)
    finally:
        mirror.close()
    assert rc == 1, out
    err = out["error"]
    assert err["code"] == "install_failed"
    assert err["rolled_back"] == ["nvidia-imex"]
    assert "exit status 1" in err["message"] and "purged again: nvidia-imex" in err["message"]
    assert dpkg_status(root, "nvidia-imex").returncode != 0
    assert not (root / "usr/bin/nvidia-imex").exists()
    assert (root / "var/lib/dpkg/status").read_bytes() == status_before
    assert (root / "usr/bin/nvidia-modprobe").is_file(), "the runfile's file is untouched"


def test_a_foreign_architecture_of_a_multiarch_root_is_refused_before_dpkg(
    tmp_path: Path,
) -> None:
    # The root's dpkg is this machine's architecture with another one added (dpkg
    # --add-architecture): dpkg would unpack the other architecture's package and leave it
    # unconfigured (its libc6 is looked for as libc6:<other>, which the root lacks), and only
    # the rollback would undo it. Refused before dpkg runs, the root unchanged.
    require("mmdebstrap", "dpkg", "dpkg-deb", "systemctl")
    native = host_arch()
    other = "arm64" if native != "arm64" else "amd64"
    root = fresh_root(tmp_path / "root")
    subprocess.run(["dpkg", "--root", str(root), "--add-architecture", other], check=True,
                   timeout=60)
    (root / "usr/lib" / TRIPLETS[other]).mkdir(parents=True, exist_ok=True)
    runfile_driver(root, other)
    deb = build_imex_deb(tmp_path, other, "libc6 (>= 2.34), nvidia-modprobe")
    status_before = (root / "var/lib/dpkg/status").read_bytes()
    mirror = Mirror()
    try:
        serve_cuda_repo(mirror, deb, other)
        out, rc = fetch_and_install(mirror, root, tmp_path / "debs", other, "--arch", other)
    finally:
        mirror.close()
    assert rc == 1, out
    err = out["error"]
    assert err["code"] == "architecture_mismatch", err
    assert (err["package_arch"], err["root_arch"], err["foreign_archs"]) == (
        other, native, [other])
    assert dpkg_status(root, "nvidia-imex").returncode != 0
    assert (root / "var/lib/dpkg/status").read_bytes() == status_before
    assert not (root / "usr/bin/nvidia-imex").exists()
    log = root / "var/log/dpkg.log"
    assert not log.exists() or "nvidia-imex" not in log.read_text()

"""RPM resolution: repomd.xml -> primary.xml(.gz) made in the test, served by the local
mirror; RPM naming by branch (``nvidia-fabric-manager`` before R580)."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from nvfabric.artifacts import rpm
from nvfabric.artifacts.model import Artifact, Request
from nvfabric.artifacts.resolve import resolve
from nvfabric.artifacts.transport import Transport
from nvfabric.model.errors import NvfabricError
from tests.cli.test_fetch_mirror import (  # noqa: F401 - fixture
    FAST,
    Mirror,
    gz,
    mirror,
    no_sleep,
    primary_xml,
    repomd,
    sha256,
)


def pkg(name: str, ver: str, rel: str = "1", arch: str = "x86_64") -> dict[str, object]:
    data = f"{name}-{ver}-{rel}".encode()
    return {"name": name, "arch": arch, "ver": ver, "rel": rel, "data": data,
            "href": f"{name}-{ver}-{rel}.{arch}.rpm"}


REPO = [
    pkg("nvidia-fabric-manager", "570.148.08"),
    pkg("nvidia-fabric-manager", "570.172.08"),
    pkg("nvidia-fabric-manager", "570.172.08", "2.el9"),
    pkg("nvidia-fabricmanager", "580.95.05"),
    pkg("nvidia-fabricmanager", "590.48.01"),
    pkg("nvidia-fabricmanager-535", "535.230.02"),
    pkg("libnvidia-nscq", "580.95.05"),
    pkg("nvidia-imex", "580.95.05", arch="aarch64"),
    pkg("nvlsm", "2025.06.6"),
]


def serve_repo(m: Mirror, packages: list[dict[str, object]], compress: str = "gz",
               checksum: str | None = None) -> None:
    raw = primary_xml(packages)
    body = {"gz": gz, "xz": lzma.compress, "": lambda b: b}[compress](raw)
    href = "repodata/abc-primary.xml" + (f".{compress}" if compress else "")
    m.add(href, body)
    m.add("repodata/repomd.xml", repomd(href, body, checksum))


def resolve_rpm(m: Mirror, driver: str, *components: str, arch: str = "x86_64",
                nvlsm: str | None = None) -> list[Artifact]:
    with Transport(FAST, mirror=m.url, sleep=no_sleep) as t:
        req = Request(driver, arch, components, "rpm", nvlsm)
        return list(resolve(req, t, m.url).artifacts)


@pytest.mark.parametrize("compress", ["gz", "xz", ""])
def test_r570_uses_the_hyphenated_name_and_the_highest_release(
    mirror: Mirror, compress: str  # noqa: F811
) -> None:
    serve_repo(mirror, REPO, compress)
    [fm] = resolve_rpm(mirror, "570.172.08", "fabricmanager")
    assert (fm.package, fm.version) == ("nvidia-fabric-manager", "570.172.08-2.el9")
    assert fm.url == f"{mirror.url}/nvidia-fabric-manager-570.172.08-2.el9.x86_64.rpm"
    assert fm.sha256 == sha256(b"nvidia-fabric-manager-570.172.08-2.el9")
    assert rpm.pin_lines([fm]) == [
        "dnf install -y 'dnf-command(versionlock)'",
        "dnf install -y nvidia-fabric-manager-570.172.08-2.el9",
        "dnf versionlock add nvidia-fabric-manager-570.172.08-2.el9",
    ]
    assert fm.module_stream is None  # a repository without module metadata


def test_r580_unversioned_name_exact_version(mirror: Mirror) -> None:  # noqa: F811
    serve_repo(mirror, REPO)
    arts = resolve_rpm(mirror, "580.95.05", "fabricmanager", "libnvidia_nscq", "nvlsm",
                       nvlsm="2025.06.6")
    assert [(a.package, a.version) for a in arts] == [
        ("nvidia-fabricmanager", "580.95.05-1"), ("libnvidia-nscq", "580.95.05-1"),
        ("nvlsm", "2025.06.6-1")]


def test_missing_version_lists_what_the_repository_has(mirror: Mirror) -> None:  # noqa: F811
    serve_repo(mirror, REPO)
    with pytest.raises(NvfabricError) as err:
        resolve_rpm(mirror, "580.95.06", "fabricmanager")
    f = err.value.finding
    assert f.code == "artifact_not_available"
    assert "580.95.05-1, 590.48.01-1 but not 580.95.06" in f.message
    assert f.fields["sources_searched"] == [
        f"{mirror.url}/repodata/repomd.xml", f"{mirror.url}/repodata/abc-primary.xml.gz"]


def test_arch_is_the_rpm_name(mirror: Mirror) -> None:  # noqa: F811
    serve_repo(mirror, REPO)
    [imex] = resolve_rpm(mirror, "580.95.05", "imex", arch="arm64")
    assert imex.arch == "aarch64"
    with pytest.raises(NvfabricError):
        resolve_rpm(mirror, "580.95.05", "imex", arch="x86_64")


def test_primary_with_a_wrong_checksum_is_refused(mirror: Mirror) -> None:  # noqa: F811
    serve_repo(mirror, REPO, checksum="0" * 64)
    with pytest.raises(NvfabricError) as err:
        resolve_rpm(mirror, "580.95.05", "fabricmanager")
    assert err.value.finding.code == "checksum_mismatch"


def test_no_repodata_names_the_url(mirror: Mirror) -> None:  # noqa: F811
    with pytest.raises(NvfabricError) as err:
        resolve_rpm(mirror, "580.95.05", "fabricmanager")
    assert f"{mirror.url}/repodata/repomd.xml" in err.value.finding.message


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [("1", "1", 0), ("1.el9", "1", 1), ("2", "10", -1), ("1.el8", "1.el9", -1),
     ("1~rc1", "1", -1), ("1a", "1", 1), ("1.0", "1.a", 1), ("2.el9", "1.el9", 1)],
)
def test_rpmvercmp(a: str, b: str, expected: int) -> None:
    assert rpm.rpmvercmp(a, b) == expected
    assert rpm.rpmvercmp(b, a) == -expected


#: The versionlock plugin line's package, as the pin line quotes it.
PLUGIN = {"dnf": "'dnf-command(versionlock)'", "yum": "yum-plugin-versionlock"}


def _art(version: str, package: str = "nvidia-fabric-manager") -> Artifact:
    return Artifact("fabricmanager", version, "x86_64", "https://x/y.rpm", "0" * 64, None,
                        "rpm", package)


@pytest.mark.parametrize(("distro", "version", "tool"), [
    ("rhel7", "570.172.08-1", "yum"), ("rhel6", "570.172.08-1", "yum"),
    ("amzn2", "570.172.08-1", "yum"), ("rhel8", "570.172.08-1", "dnf"),
    ("rhel9", "570.172.08-1.el7", "dnf"),  # the distro the operator named wins
    ("rhel10", "580.95.05-1", "dnf"), ("amzn2023", "580.95.05-1", "dnf"),
    ("fedora41", "580.95.05-1", "dnf"),
    (None, "570.172.08-1.el7", "yum"), (None, "570.172.08-2.el9", "dnf"),
    (None, "570.172.08-1.el8_10", "dnf"), (None, "570.172.08-1", "dnf"),
])
def test_yum_for_rhel_centos_7_dnf_for_8_and_later(distro: str | None, version: str,
                                                    tool: str) -> None:
    art = _art(version)
    assert rpm.package_manager(distro, [art]) == tool
    assert rpm.pin_lines([art], distro) == [
        f"{tool} install -y {PLUGIN[tool]}",
        f"{tool} install -y nvidia-fabric-manager-{version}",
        f"{tool} versionlock add nvidia-fabric-manager-{version}"]


@pytest.mark.parametrize(("distro", "tool"), [("rhel7", "yum"), ("rhel9", "dnf")])
def test_fetch_cli_prints_the_package_manager_of_the_repository(
        mirror: Mirror, distro: str, tool: str) -> None:  # noqa: F811
    from tests.conftest import run_json

    serve_repo(mirror, REPO)
    out, rc = run_json("fetch", "--source", "rpm", "--driver-version", "580.95.05", "--arch",
                       "x86_64", "--components", "fabricmanager", "--mirror", mirror.url,
                       "--distro", distro, "--dry-run", "--retries", "0")
    assert rc == 0, out
    assert out["pins"] == [f"{tool} install -y {PLUGIN[tool]}",
                           f"{tool} install -y nvidia-fabricmanager-580.95.05-1",
                           f"{tool} versionlock add nvidia-fabricmanager-580.95.05-1"]
    out, rc = run_json("install", "--source", "rpm", "--driver-version", "580.95.05", "--arch",
                       "x86_64", "--components", "fabricmanager", "--mirror", mirror.url,
                       "--distro", distro, "--dry-run", "--retries", "0")
    assert rc == 0 and out["commands"][1][:3] == [tool, "install", "-y"]


@pytest.mark.parametrize(("os_release", "tool"), [
    ('ID="centos"\nVERSION_ID="7"\n', "yum"), ('ID="rhel"\nVERSION_ID="7.9"\n', "yum"),
    ('ID="ol"\nVERSION_ID="7.9"\n', "yum"), ('ID="amzn"\nVERSION_ID="2"\n', "yum"),
    ('ID="rocky"\nVERSION_ID="8.10"\n', "dnf"), ("ID=rhel\nVERSION_ID=9.4\n", "dnf"),
    ('ID="amzn"\nVERSION_ID="2023"\n', "dnf"),
    ('ID=ubuntu\nVERSION_ID="24.04"\n', "dnf"),  # an rpm mirror from an Ubuntu build host
])
def test_with_a_mirror_the_roots_os_release_still_picks_yum_or_dnf(
        mirror: Mirror, tmp_path: Path, os_release: str, tool: str) -> None:  # noqa: F811
    """A --mirror replaces the repository URL, not the node: a CentOS 7 root gets yum lines."""
    from tests.conftest import run_json

    serve_repo(mirror, REPO)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text(os_release)
    for command in ("fetch", "install"):
        out, rc = run_json(command, "--root", str(tmp_path), "--source", "rpm",
                           "--driver-version", "580.95.05", "--arch", "x86_64", "--components",
                           "fabricmanager", "--mirror", mirror.url, "--dry-run", "--retries", "0")
        assert rc == 0, out
        argv = out["pins"][1] if command == "fetch" else " ".join(out["commands"][1])
        assert argv == f"{tool} install -y nvidia-fabricmanager-580.95.05-1"


def test_el7_packages_from_a_mirror_on_an_ubuntu_build_host_are_yum(
        mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    """The packages' .el7 tag still decides when the root's distribution is of the deb family."""
    from tests.conftest import run_json

    serve_repo(mirror, [pkg("nvidia-fabricmanager", "580.95.05", "1.el7")])
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="24.04"\n')
    out, rc = run_json("fetch", "--root", str(tmp_path), "--source", "rpm", "--driver-version",
                       "580.95.05", "--arch", "x86_64", "--components", "fabricmanager",
                       "--mirror", mirror.url, "--dry-run", "--retries", "0")
    assert rc == 0 and out["pins"][:2] == ["yum install -y yum-plugin-versionlock",
                                           "yum install -y nvidia-fabricmanager-580.95.05-1.el7"]


@pytest.mark.parametrize("distro", ["sles15", "opensuse15"])
def test_sles_and_opensuse_get_zypper_lines_never_dnf(distro: str) -> None:
    """SLES/openSUSE have no dnf: zypper installs the exact version and locks by name."""
    arts = [_art("580.95.05-1", "nvidia-fabricmanager"),
            Artifact("libnvidia_nscq", "580.95.05-1", "x86_64", "https://x/z.rpm", "0" * 64,
                         None, "rpm", "libnvidia-nscq")]
    assert rpm.package_manager(distro) == "zypper"
    assert rpm.commands(arts, distro) == [
        ["zypper", "--non-interactive", "install", "nvidia-fabricmanager-580.95.05-1",
         "libnvidia-nscq-580.95.05-1"],
        ["zypper", "addlock", "nvidia-fabricmanager", "libnvidia-nscq"]]


def test_a_sles_root_gets_zypper_lines_from_fetch(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    from tests.conftest import run_json

    serve_repo(mirror, REPO)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('ID="sles"\nVERSION_ID="15.6"\n')
    out, rc = run_json("fetch", "--root", str(tmp_path), "--source", "rpm", "--driver-version",
                       "580.95.05", "--arch", "x86_64", "--components", "fabricmanager",
                       "--mirror", mirror.url, "--dry-run", "--retries", "0")
    assert rc == 0 and out["pins"] == [
        "zypper --non-interactive install nvidia-fabricmanager-580.95.05-1",
        "zypper addlock nvidia-fabricmanager"]

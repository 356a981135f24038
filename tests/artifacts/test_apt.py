"""APT resolution: the Packages stanzas of cases F04/F05 and indexes made in the test, served
as Packages, Packages.gz and Packages.xz by the local mirror."""

from __future__ import annotations

import lzma
import mmap
from pathlib import Path

import pytest

from nvfabric.artifacts import apt
from nvfabric.artifacts.model import Artifact, Request
from nvfabric.artifacts.resolve import resolve
from nvfabric.artifacts.transport import Transport
from nvfabric.model.errors import NvfabricError
from tests.cases import load_cases
from tests.cli.test_fetch_mirror import (  # noqa: F401 - fixture
    FAST,
    Mirror,
    deb_stanza,
    gz,
    mirror,
    no_sleep,
)

F04 = next(c for c in load_cases("F") if c["id"] == "F04")["input"].encode()


def resolve_index(index: bytes, driver: str, *components: str, arch: str = "x86_64",
                  nvlsm: str | None = None) -> list[Artifact]:
    req = Request(driver, arch, components, "apt", nvlsm)
    return apt.resolve(index, ("https://r/Packages",), "https://r", req)


def test_find_stanzas_parses_only_the_named_packages() -> None:
    found = apt.find_stanzas(F04, ["nvidia-fabricmanager"])
    assert [s.version for s in found] == ["580.105.08-1", "580.126.09-1", "590.48.01-1"]
    assert all(s.package == "nvidia-fabricmanager" for s in found)
    assert found[0].provides == "nvidia-fabricmanager-580"
    assert found[0].size == 4519012


def test_f04_exact_version_never_newer() -> None:
    [fm] = resolve_index(F04, "580.126.09", "fabricmanager")
    assert (fm.package, fm.version) == ("nvidia-fabricmanager", "580.126.09-1")
    assert fm.url == "https://r/nvidia-fabricmanager_580.126.09-1_amd64.deb"
    assert fm.sha256 == "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"
    assert apt.pin_lines([fm]) == [
        "apt-get install -y --no-install-recommends nvidia-fabricmanager=580.126.09-1",
        "apt-mark hold nvidia-fabricmanager",
    ]


def test_f05_pre_r580_uses_the_branch_name() -> None:
    [fm] = resolve_index(F04, "535.230.02", "fabricmanager")
    assert (fm.package, fm.version) == ("nvidia-fabricmanager-535", "535.230.02-1")


def test_provides_is_never_taken_for_a_version() -> None:
    """nvidia-fabricmanager-535 Provides nvidia-fabricmanager; for a 535 driver that is not
    the R580 name, and for driver 580.95.05 nothing in F04 carries that version."""
    with pytest.raises(NvfabricError) as err:
        resolve_index(F04, "580.95.05", "fabricmanager")
    assert "has 580.105.08-1, 580.126.09-1, 590.48.01-1 but not 580.95.05" in (
        err.value.finding.message)


def test_transitional_package_satisfies_nothing() -> None:
    """cuda-drivers-fabricmanager-460 is a transitional package at 510.85.02; even a stanza
    under the expected name that says transitional is not taken."""
    index = (deb_stanza("nvidia-fabricmanager-510", "510.85.02-0ubuntu0.22.04.1", b"x",
                        description="Transitional package for nvidia-fabricmanager-515")
             + "\n" + F04.decode()).encode()
    with pytest.raises(NvfabricError) as err:
        resolve_index(index, "510.85.02", "fabricmanager")
    assert "no package nvidia-fabricmanager-510" in err.value.finding.message
    with pytest.raises(NvfabricError):
        resolve_index(F04, "460.32.03", "fabricmanager")


@pytest.mark.parametrize("revision", ["-1", "-0ubuntu1", "-1ubuntu1", "-0ubuntu0.22.04.1"])
def test_debian_revision_suffixes_are_kept_as_published(revision: str) -> None:
    index = deb_stanza("nvidia-fabricmanager-550", f"550.90.07{revision}", b"deb").encode()
    [fm] = resolve_index(index, "550.90.07", "fabricmanager")
    assert fm.version == f"550.90.07{revision}"


def test_highest_revision_of_the_exact_version_wins_by_debian_ordering() -> None:
    index = "\n".join([
        deb_stanza("nvidia-fabricmanager", "580.95.05-1", b"a"),
        deb_stanza("nvidia-fabricmanager", "580.95.05-10", b"b"),
        deb_stanza("nvidia-fabricmanager", "580.95.05-9ubuntu1", b"c"),
        deb_stanza("nvidia-fabricmanager", "580.95.050-1", b"d"),
        deb_stanza("nvidia-fabricmanager", "580.95.06-1", b"e"),
    ]).encode()
    [fm] = resolve_index(index, "580.95.05", "fabricmanager")
    assert fm.version == "580.95.05-10"


def test_epoch_is_kept_and_ignored_for_matching() -> None:
    index = deb_stanza("nvidia-fabricmanager", "1:580.95.05-1", b"a").encode()
    [fm] = resolve_index(index, "580.95.05", "fabricmanager")
    assert fm.version == "1:580.95.05-1"
    assert apt.pin_lines([fm])[0].endswith("nvidia-fabricmanager=1:580.95.05-1")


def test_other_architecture_is_not_taken() -> None:
    index = deb_stanza("nvidia-fabricmanager", "580.95.05-1", b"a", arch="arm64").encode()
    with pytest.raises(NvfabricError) as err:
        resolve_index(index, "580.95.05", "fabricmanager")
    assert err.value.finding.fields["platform"] == "amd64"
    [fm] = resolve_index(index, "580.95.05", "fabricmanager", arch="aarch64")
    assert fm.arch == "arm64"


def test_nvlink5_set_with_nvlsm_calendar_version() -> None:
    index = "\n".join([
        deb_stanza("nvidia-fabricmanager", "580.95.05-1", b"fm"),
        deb_stanza("libnvsdm", "580.95.05-1", b"sdm"),
        deb_stanza("libnvidia-nscq", "580.95.05-1", b"nscq"),
        deb_stanza("nvlsm", "2025.06.6-1", b"sm6"),
        deb_stanza("nvlsm", "2025.06.10-1", b"sm10"),
    ]).encode()
    arts = resolve_index(index, "580.95.05", "fabricmanager", "nvlsm", "libnvsdm",
                         "libnvidia_nscq", nvlsm="2025.06.6")
    assert [(a.package, a.version) for a in arts] == [
        ("nvidia-fabricmanager", "580.95.05-1"), ("nvlsm", "2025.06.6-1"),
        ("libnvsdm", "580.95.05-1"), ("libnvidia-nscq", "580.95.05-1")]
    assert apt.commands(arts)[1] == ["apt-mark", "hold", "nvidia-fabricmanager", "nvlsm",
                                     "libnvsdm", "libnvidia-nscq"]


def test_libnvsdm_before_r570_is_not_packaged() -> None:
    with pytest.raises(NvfabricError) as err:
        resolve_index(F04, "550.90.07", "libnvsdm")
    assert "R550" in err.value.finding.message


def test_unsafe_filename_or_missing_checksum_is_refused() -> None:
    bad = deb_stanza("nvidia-fabricmanager", "580.95.05-1", b"a").replace(
        "Filename: ./", "Filename: ../../")
    with pytest.raises(NvfabricError):
        resolve_index(bad.encode(), "580.95.05", "fabricmanager")


def test_a_shell_hostile_version_never_reaches_a_command_line() -> None:
    art = Artifact("fabricmanager", "1.0;rm -rf /", "amd64", "https://r/x.deb", "0" * 64,
                       None, "apt", "nvidia-fabricmanager")
    with pytest.raises(NvfabricError):
        apt.commands([art])


@pytest.mark.parametrize(
    ("name", "encode"),
    [("Packages.xz", lzma.compress), ("Packages.gz", gz), ("Packages", lambda b: b)],
)
def test_index_is_read_in_every_compression(mirror: Mirror, name: str, encode: object) -> None:  # noqa: F811
    assert callable(encode)
    mirror.add(name, encode(F04))
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t:
        res = resolve(Request("580.126.09", "x86_64", ("fabricmanager",), "apt"), t, mirror.url)
    assert res.artifacts[0].version == "580.126.09-1"
    assert res.searched[-1] == f"{mirror.url}/{name}"


def test_nvlsm_version_comes_from_the_driver_release_manifest(mirror: Mirror) -> None:  # noqa: F811
    from tests.cli.test_fetch_mirror import redist_release, serve_release

    serve_release(mirror, redist_release("580.95.05", nvlsm="2025.06.6"))
    mirror.add("Packages", "\n".join([
        deb_stanza("nvlsm", "2025.06.10-1", b"new"), deb_stanza("nvlsm", "2025.06.6-1", b"old"),
    ]).encode())
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t:
        res = resolve(Request("580.95.05", "x86_64", ("nvlsm",), "apt"), t, mirror.url)
    assert res.artifacts[0].version == "2025.06.6-1"
    assert f"{mirror.url}/redistrib_580.95.05.json" in res.searched


def test_nvlsm_without_a_manifest_says_how_to_give_its_version(mirror: Mirror) -> None:  # noqa: F811
    mirror.add("Packages", deb_stanza("nvlsm", "2025.06.6-1", b"x").encode())
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        resolve(Request("580.95.05", "x86_64", ("nvlsm",), "apt"), t, mirror.url)
    assert "--nvlsm-version" in err.value.finding.hint


def test_stanza_boundaries_prefix_names_and_mmap(tmp_path: Path) -> None:
    """The first stanza (no newline before it), the last (no newline after it), a Package
    field that is not the first line, and a longer name sharing the prefix."""
    text = (
        "Package: nvidia-fabricmanager\nVersion: 580.1.1-1\nArchitecture: amd64\n\n"
        "Package: nvidia-fabricmanager-dev\nVersion: 580.1.1-1\nArchitecture: amd64\n\n"
        "Architecture: amd64\nPackage:  nvidia-fabricmanager \nVersion: 580.1.2-1\n\n"
        "Package: nvidia-fabricmanager\nVersion: 580.1.3-1\nArchitecture: amd64"
    )
    found = apt.find_stanzas(text.encode(), ["nvidia-fabricmanager"])
    assert [s.version for s in found] == ["580.1.1-1", "580.1.2-1", "580.1.3-1"]
    path = tmp_path / "Packages"
    path.write_text(text)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert apt.find_stanzas(m, ["nvidia-fabricmanager"]) == found

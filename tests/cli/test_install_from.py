"""``install --from`` on hostile or odd inputs (issue 17, the fixer's round): values from a
cached .deb that would reach dpkg's command line, paths that lead out of the root, records that
hold more than one version, the driver on disk, the unit step after dpkg. Node trees from
``nvfabric simulate`` with a dpkg database; dpkg itself is never run here (the real-tool cases
are tests/integration/test_imex_image_flow.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvfabric.artifacts import cachefile, debinstall
from nvfabric.artifacts.model import Artifact
from nvfabric.model.errors import NvfabricError
from tests.artifacts.test_debinstall import (  # noqa: F401 - fixture
    NVML,
    _ar,
    _tgz,
    dpkg_tree,
    put,
    runfile_tray,
)
from tests.cli.test_fetch_mirror import Mirror, mirror, sha256  # noqa: F401 - fixture
from tests.conftest import run_cli, run_json


def make_deb(control: str, files: tuple[str, ...]) -> bytes:
    """A Debian binary package laid out as dpkg-deb does, holding ``files`` (host paths)."""
    return _ar([("debian-binary", b"2.0\n"),
                ("control.tar.gz", _tgz({"control": control.encode()})),
                ("data.tar.gz", _tgz({f.lstrip("/"): b"#!/bin/sh\n" for f in files}))])


def cache_deb(directory: Path, *, package: str = "nvidia-imex",
              version: str = "580.126.20-1ubuntu1", arch: str = "arm64",
              depends: str = "nvidia-modprobe", component: str = "imex",
              driver: str = "580.126.20", name: str | None = None,
              record_package: str | None = None,
              files: tuple[str, ...] = ("/usr/bin/nvidia-imex",)) -> Path:
    """One cached .deb with the control given and its record entry (merged into the record)."""
    control = (f"Package: {package}\nVersion: {version}\nArchitecture: {arch}\n"
               f"Maintainer: t <t@example.invalid>\nDepends: {depends}\n"
               "Description: test package\n")
    data = make_deb(control, files)
    directory.mkdir(parents=True, exist_ok=True)
    name = name or f"nvidia-imex_{version}_{arch}.deb"
    (directory / name).write_bytes(data)
    entry = Artifact(component, version, arch, f"http://127.0.0.1/{name}", sha256(data),
                     len(data), "apt", record_package or package)
    old = cachefile.read(str(directory)) if (directory / cachefile.RECORD).exists() else []
    path = directory / cachefile.RECORD
    rows = [c.to_json() for c in old] + [cachefile.Cached(entry, name, driver).to_json()]
    path.write_text(json.dumps({"format": 1, "artifacts": rows}))
    return directory / name


# -- D2: names from the control paragraph reach dpkg's argv -------------------------------

def test_a_package_name_that_is_an_option_never_reaches_dpkg(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    cache_deb(tmp_path / "debs", package="--instdir=/tmp/elsewhere", record_package="nvidia-imex")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert "'--instdir=/tmp/elsewhere', not a Debian package name" in out["error"]["message"]


def test_the_purge_of_a_failed_run_ends_options_and_takes_only_package_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[list[str]] = []

    def fake_dpkg(argv: list[str]) -> Any:
        seen.append(list(argv))
        return None

    monkeypatch.setattr(debinstall, "_dpkg", fake_dpkg)
    monkeypatch.setattr(debinstall, "status_of", lambda root, names: {})
    rolled = debinstall._roll_back(str(tmp_path), ["nvidia-imex", "--instdir=/"])
    assert seen == [["dpkg", "--root", str(tmp_path), f"--log={tmp_path}/var/log/dpkg.log",
                     "--purge", "--", "nvidia-imex"]]
    assert rolled == ["nvidia-imex"]


# -- dpkg's log: dpkg --root writes the host's /var/log/dpkg.log unless told -----------------

def test_dpkg_logs_into_the_image_root_never_the_hosts_log(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    deb = cache_deb(tmp_path / "debs")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 0, out
    assert out["commands"] == [["dpkg", "--root", str(runfile_tray),
                                f"--log={runfile_tray}/var/log/dpkg.log",
                                "--ignore-depends=nvidia-modprobe", "-i", str(deb)]]


def test_a_root_whose_log_directory_leads_out_is_refused_before_dpkg(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    (tmp_path / "hostlog").mkdir()
    log = runfile_tray / "var/log"
    if log.exists():
        log.rmdir()
    log.symlink_to(tmp_path / "hostlog")
    cache_deb(tmp_path / "debs")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert "dpkg log '/var/log/dpkg.log' resolves to" in out["error"]["message"]


# -- links that lead out of the root: dpkg follows them ------------------------------------

def test_a_package_file_behind_a_link_out_of_the_root_is_refused_before_dpkg(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    # debootstrap's own layout: var/run -> /run (absolute), i.e. the host's /run for dpkg.
    outside = tmp_path / "host-run"
    outside.mkdir()
    run = runfile_tray / "var/run"
    if run.is_dir() and not run.is_symlink():
        run.rmdir()
    run.symlink_to(outside)
    cache_deb(tmp_path / "debs", files=("/usr/bin/nvidia-imex", "/var/run/nvidia-imex/pid"))
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert out["error"]["message"] == (
        "refusing to install nvidia-imex: it writes /var/run/nvidia-imex/pid, and directory "
        f"'/var/run/nvidia-imex' resolves to {outside}/nvidia-imex, outside the root "
        f"{runfile_tray}; the node resolves it to {outside}/nvidia-imex, but nvfabric's own "
        "kernel (and a daemon's) would follow it out of the root: give that path")


def test_a_dpkg_database_linked_out_of_the_root_is_refused_before_dpkg(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    admin = runfile_tray / "var/lib/dpkg"
    admin.rename(tmp_path / "elsewhere")
    admin.symlink_to(tmp_path / "elsewhere")
    cache_deb(tmp_path / "debs")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["message"].startswith(
        "refusing to run dpkg: the dpkg database path '/var/lib/dpkg' resolves to "
        f"{tmp_path / 'elsewhere'}")


def test_links_that_stay_in_the_root_are_fine(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    # Merged /usr: lib -> usr/lib (relative) stays in the root.
    (runfile_tray / "usr/lib/systemd/system").mkdir(parents=True)
    if not (runfile_tray / "lib").exists():
        (runfile_tray / "lib").symlink_to("usr/lib")
    cache_deb(tmp_path / "debs", files=("/usr/bin/nvidia-imex",
                                        "/lib/systemd/system/nvidia-imex.service"))
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 0, out


# -- the driver on disk names the version when none is loaded ------------------------------

def image_root(tmp_path: Path, driver: str) -> Path:
    """An image root at boot-script time: a dpkg database, the runfile driver's files on disk
    (NVML library of ``driver``, nvidia-modprobe), no module loaded (no /proc, no /sys)."""
    root = tmp_path / "image"
    dpkg_tree(root, {"libc6": ["/usr/lib/aarch64-linux-gnu/libc.so.6"]})
    put(root, f"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.{driver}")
    put(root, "/usr/bin/nvidia-modprobe")
    return root


def test_an_imex_deb_of_another_driver_than_the_one_on_disk_is_refused(tmp_path: Path) -> None:
    root = image_root(tmp_path, "570.148.08")
    cache_deb(tmp_path / "debs", version="580.126.20-1ubuntu1", driver="580.126.20")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--arch", "arm64", "--dry-run")
    assert rc == 1, out
    assert out["error"]["code"] == "version_mismatch"
    assert out["error"]["driver_version"] == "570.148.08"


def test_the_driver_on_disk_is_the_version_matched_when_none_is_loaded(tmp_path: Path) -> None:
    root = image_root(tmp_path, "580.126.20")
    cache_deb(tmp_path / "debs", version="580.126.20-1ubuntu1", driver="580.126.20")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--arch", "arm64", "--dry-run")
    assert rc == 0, out
    assert out["driver_version"] == "580.126.20"
    assert out["reasons"] == [f"no driver loaded under {root}: matching the driver installed "
                              "there (580.126.20, its NVML library)"]


# -- one component, one entry ---------------------------------------------------------------

def test_a_directory_with_a_deb_and_a_redist_archive_of_imex_is_refused(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    # fetch --source redist, then fetch --source apt into the same --dest: both are recorded
    # (the record merges by component, arch and source), and install --from took both.
    from tests.cli.test_fetch_mirror import make_archive

    debs = tmp_path / "debs"
    cache_deb(debs)
    top = "nvidia-imex-linux-sbsa-580.126.20-archive"
    data = make_archive(top, {"bin/nvidia-imex": b"imex"})
    (debs / f"{top}.tar.xz").write_bytes(data)
    cachefile.write(str(debs), [cachefile.Cached(
        Artifact("imex", "580.126.20", "sbsa", f"http://127.0.0.1/{top}.tar.xz", sha256(data),
                 len(data), "redist"), f"{top}.tar.xz", "580.126.20")])
    assert len(cachefile.read(str(debs))) == 2
    out, rc = run_json("install", "--from", str(debs), "--root", str(runfile_tray),
                       "--prefix", str(tmp_path / "opt"), "--dry-run")
    assert rc == 2, out
    assert out["error"]["message"] == (
        "the fetch record holds 2 imex entries for aarch64: apt nvidia-imex "
        "580.126.20-1ubuntu1 (nvidia-imex_580.126.20-1ubuntu1_arm64.deb); redist imex "
        f"580.126.20 ({top}.tar.xz)")


def test_two_revisions_of_one_package_never_go_to_one_dpkg_run(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    debs = tmp_path / "debs"
    cache_deb(debs, version="580.126.20-1")
    cache_deb(debs, version="580.126.20-1ubuntu1")
    out, rc = run_json("install", "--from", str(debs), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 2, out
    assert "holds 2 imex entries for aarch64" in out["error"]["message"]


# -- the record's component and package agree -------------------------------------------------

def test_a_record_that_calls_the_imex_deb_another_component_is_refused(tmp_path: Path) -> None:
    root = image_root(tmp_path, "580.126.20")
    cache_deb(tmp_path / "debs", component="libnvidia_nscq")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--arch", "arm64", "--dry-run")
    assert rc == 2, out
    assert out["error"]["message"].endswith(
        "the fetch record says libnvidia_nscq is package 'nvidia-imex', but libnvidia_nscq of "
        "driver 580.126.20 is package 'libnvidia-nscq'")


# -- a cached file that changed after fetch ---------------------------------------------------

def test_a_changed_cached_deb_says_fetch_again_not_refresh_the_mirror(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    deb = cache_deb(tmp_path / "debs")
    deb.write_bytes(deb.read_bytes() + b"X")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray))
    assert rc == 1, out
    err = out["error"]
    assert err["code"] == "checksum_mismatch"
    assert "the file changed after it was fetched; nothing was installed" in err["message"]
    assert "nothing was kept" not in err["message"] and "mirror" not in err["hint"]
    assert err["hint"].startswith("fetch again into that directory")
    assert deb.exists(), "the file is left for inspection"


# -- a dpkg run that added nothing --------------------------------------------------------

def test_a_package_dpkg_refused_before_unpacking_is_not_reported_purged(
    monkeypatch: pytest.MonkeyPatch, runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    from nvfabric.effects.program import Ran

    cache_deb(tmp_path / "debs")
    entries = cachefile.read(str(tmp_path / "debs"))
    prepared = debinstall.prepare(str(runfile_tray), str(tmp_path / "debs"), entries, "aarch64")
    calls: list[list[str]] = []

    def refusing_dpkg(argv: list[str]) -> Ran:
        # What dpkg -i says for an arm64 .deb on an amd64 dpkg; it adds nothing.
        calls.append(list(argv))
        return Ran(tuple(argv), 1, b"", b"dpkg: error processing archive: package "
                   b"architecture (arm64) does not match system (amd64)\n")

    monkeypatch.setattr(debinstall, "_dpkg", refusing_dpkg)
    with pytest.raises(NvfabricError) as err:
        debinstall.apply(str(runfile_tray), prepared)
    assert err.value.finding.fields["rolled_back"] == []
    assert "purged again" not in err.value.finding.message
    assert "does not match system (amd64)" in err.value.finding.message
    assert calls == [list(prepared.argv)], "no purge of what was never added"


# -- NVML of two runfile drivers on disk ---------------------------------------------------

def test_the_nvml_link_tells_the_runfile_driver_from_an_older_ones_leftovers(
    tmp_path: Path,
) -> None:
    root = image_root(tmp_path, "580.126.20")
    lib = root / "usr/lib/aarch64-linux-gnu"
    (lib / "libnvidia-ml.so.570.148.08").write_bytes(b"x")  # the older runfile's, left behind
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580.126.20")
    cache_deb(tmp_path / "debs", version="580.126.20-1ubuntu1", driver="580.126.20")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--arch", "arm64", "--dry-run")
    assert rc == 0, out
    assert out["driver_origin"]["version"] == "580.126.20"
    assert out["forced"][0]["version"] == "580.126.20"
    assert "libnvidia-ml.so.1 leads to 580.126.20" in out["driver_origin"]["evidence"][0]


def test_two_runfile_nvml_versions_without_a_link_leave_the_version_unknown() -> None:
    from nvfabric.artifacts.runfile import DiskFile, classify

    libs = [DiskFile("/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.570.148.08", None),
            DiskFile("/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.580.126.20", None)]
    modprobe = [("nvidia-modprobe", DiskFile("/usr/bin/nvidia-modprobe", None))]
    unknown = classify(libs, modprobe)
    assert (unknown.kind, unknown.version) == ("runfile", None)
    assert unknown.provides[0].version is None
    assert "names none of them alone" in unknown.evidence[0]
    linked = classify(libs, modprobe, {"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.570.148.08"})
    assert linked.version == "570.148.08" and linked.provides[0].version == "570.148.08"
    one = classify(libs[1:], modprobe)
    assert one.version == "580.126.20", "one version needs no link"


@pytest.mark.parametrize("fmt", [2, None, "1"])
def test_a_record_of_another_format_is_not_read_as_this_one(tmp_path: Path, fmt: object) -> None:
    cache_deb(tmp_path)
    data = json.loads((tmp_path / cachefile.RECORD).read_text())
    data["format"] = fmt
    (tmp_path / cachefile.RECORD).write_text(json.dumps(data))
    with pytest.raises(NvfabricError) as err:
        cachefile.read(str(tmp_path))
    assert err.value.exit_code == 2
    assert f"record format {fmt!r}, this nvfabric reads format 1" in err.value.finding.message


def test_a_cached_deb_replaced_by_a_link_is_named_a_link(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    deb = cache_deb(tmp_path / "debs")
    real = tmp_path / "elsewhere.deb"
    deb.rename(real)
    deb.symlink_to(real)
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["message"] == f"{deb}: a symbolic link, not the file fetch wrote"


# -- fetch's and install's defaults under a root whose link leads out ----------------------

def test_fetch_default_dest_through_a_link_out_of_the_root_is_refused(
    mirror: Mirror, runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    from tests.artifacts.test_debinstall import imex_index

    imex_index(mirror, "580.126.20-1ubuntu1")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cache = runfile_tray / "var/cache"
    if cache.exists():
        import shutil

        shutil.rmtree(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.symlink_to(outside)
    out, rc = run_json("fetch", "--root", str(runfile_tray), "--source", "apt", "--mirror",
                       mirror.url, "--components", "imex", "--retries", "0")
    assert rc == 2, out
    assert out["error"]["message"] == (
        "--dest (default) '/var/cache/nvfabric/artifacts' resolves to "
        f"{outside}/nvfabric/artifacts, outside the root {runfile_tray}; the node resolves it "
        f"to {outside}/nvfabric/artifacts, but nvfabric's own kernel (and a daemon's) would "
        "follow it out of the root: give that path")
    assert list(outside.iterdir()) == [], "nothing written there"


def test_install_default_prefix_through_a_link_out_of_the_root_is_refused(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    from tests.cli.test_fetch_mirror import make_archive

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (runfile_tray / "opt").symlink_to(outside)
    cache_deb(tmp_path / "debs")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 0, "a .deb alone never uses the prefix"
    top = "libnvidia_nscq-linux-sbsa-580.126.20-archive"
    data = make_archive(top, {"lib/libnvidia-nscq.so.580.126.20": b"nscq"})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / f"{top}.tar.xz").write_bytes(data)
    cachefile.write(str(tmp_path / "c"), [cachefile.Cached(
        Artifact("libnvidia_nscq", "580.126.20", "sbsa", f"http://127.0.0.1/{top}.tar.xz",
                 sha256(data), len(data), "redist"), f"{top}.tar.xz", "580.126.20")])
    out, rc = run_json("install", "--from", str(tmp_path / "c"), "--root", str(runfile_tray),
                       "--fabric", "nvswitch")
    assert rc == 2, out
    assert out["error"]["message"] == (
        f"--prefix (default) '/opt/nvfabric' resolves to {outside}/nvfabric, outside the root "
        f"{runfile_tray}; the node resolves it to {outside}/nvfabric, but nvfabric's own "
        "kernel (and a daemon's) would follow it out of the root: give that path")
    assert list(outside.iterdir()) == [], "nothing written there"


# -- the root's dpkg architecture: a multiarch root's foreign one is refused before dpkg ------

def _dpkg_package(root: Path, arch: str, foreign: tuple[str, ...] = ()) -> None:
    """The root's own dpkg (its Architecture is the root's) and, for a multiarch root, the
    architectures dpkg --add-architecture listed (var/lib/dpkg/arch: native first)."""
    status = root / "var/lib/dpkg/status"
    others = [p for p in status.read_text().split("\n\n") if not p.startswith("Package: dpkg\n")]
    status.write_text("\n\n".join([*others, "Package: dpkg\nStatus: install ok installed\n"
                                  f"Architecture: {arch}\nVersion: 1.21.22\nDescription: dpkg\n"]))
    if foreign:
        (root / "var/lib/dpkg/arch").write_text("".join(a + "\n" for a in (arch, *foreign)))


@pytest.mark.parametrize("foreign", [("arm64",), ()])
def test_a_deb_not_of_the_roots_dpkg_architecture_is_refused_before_dpkg(
    runfile_tray: Path, tmp_path: Path, foreign: tuple[str, ...]  # noqa: F811
) -> None:
    # an amd64 root with arm64 added (multiarch): dpkg would unpack the arm64 package and then
    # leave it unconfigured (libc6:arm64 is not there); without arm64 added dpkg refuses it
    _dpkg_package(runfile_tray, "amd64", foreign)
    cache_deb(tmp_path / "debs", depends="libc6, nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 1, out
    err = out["error"]
    assert err["code"] == "architecture_mismatch"
    assert (err["package_arch"], err["root_arch"], err["foreign_archs"]) == (
        "arm64", "amd64", list(foreign))
    assert "nothing was installed" in err["message"]
    assert ("foreign architecture" in err["message"]) is bool(foreign)
    assert "nvfabric fetch --arch amd64" in err["hint"]


def test_a_deb_of_the_roots_own_architecture_passes_the_check(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    _dpkg_package(runfile_tray, "arm64", ("amd64",))
    cache_deb(tmp_path / "debs")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 0, out


# -- a re-run: nothing to do is said, and dpkg is not run again -----------------------------

def _fake_dpkg(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``dpkg`` first on PATH that records its argv and fails (it must not be reached)."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    calls = tmp_path / "dpkg.calls"
    (bindir / "dpkg").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 9\n")
    (bindir / "dpkg").chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}, calls


def _installed_as_cached(root: Path, deb: Path, version: str) -> None:
    """The root's dpkg database says nvidia-imex is installed at ``version`` with the files
    of ``deb`` (info/nvidia-imex.md5sums as dpkg writes it)."""
    from nvfabric.artifacts import dpkgdb

    status = root / "var/lib/dpkg/status"
    status.write_text(status.read_text() + "\nPackage: nvidia-imex\nStatus: install ok "
                      f"installed\nArchitecture: arm64\nVersion: {version}\n"
                      "Description: imex\n")
    sums, _ = dpkgdb.content_md5sums(str(deb))
    (root / "var/lib/dpkg/info/nvidia-imex.md5sums").write_text(
        "".join(f"{md5}  {path}\n" for path, md5 in sums.items()))


def test_a_rerun_of_an_installed_identical_deb_runs_no_dpkg_and_says_unchanged(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    version = "580.126.20-1ubuntu1"
    deb = cache_deb(tmp_path / "debs", version=version)
    _installed_as_cached(runfile_tray, deb, version)
    env, calls = _fake_dpkg(tmp_path)
    args = ("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray))
    out, rc = run_json(*args, env=env)
    assert rc == 0, out
    assert not calls.exists(), calls.read_text()  # no dpkg: no unpack, no maintainer scripts
    assert out["commands"] == [] and out["unchanged"] == ["nvidia-imex"]
    assert out["installed"] == [{"package": "nvidia-imex", "version": version,
                                 "status": "install ok installed", "changed": False}]
    text = run_cli(*args, env=env)
    assert text.returncode == 0, text.stderr
    assert "unchanged: nvidia-imex 580.126.20-1ubuntu1" in text.stdout
    assert "installed: nvidia-imex" not in text.stdout and "running: dpkg" not in text.stdout


@pytest.mark.parametrize("damage", ["version", "files"])
def test_the_same_version_with_other_files_or_another_version_is_installed_again(
    runfile_tray: Path, tmp_path: Path, damage: str  # noqa: F811
) -> None:
    version = "580.126.20-1ubuntu1"
    deb = cache_deb(tmp_path / "debs", version=version)
    _installed_as_cached(runfile_tray, deb, "580.126.20-1" if damage == "version" else version)
    if damage == "files":
        sums = runfile_tray / "var/lib/dpkg/info/nvidia-imex.md5sums"
        sums.write_text("0" * 32 + "  usr/bin/nvidia-imex\n")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 0, out
    assert out["unchanged"] == [] and out["commands"][0][-1] == str(deb)


def test_install_from_dry_run_and_a_repeated_archive_install_say_what_they_do(
    runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    from tests.cli.test_fetch_mirror import make_archive

    top = "nvidia-imex-linux-sbsa-580.126.20-archive"
    data = make_archive(top, {"bin/nvidia-imex": b"imex"})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / f"{top}.tar.xz").write_bytes(data)
    entry = Artifact("imex", "580.126.20", "sbsa", f"https://x/{top}.tar.xz", sha256(data),
                     len(data), "redist")
    cachefile.write(str(tmp_path / "c"), [cachefile.Cached(entry, f"{top}.tar.xz",
                                                           "580.126.20")])
    args = ("install", "--from", str(tmp_path / "c"), "--root", str(runfile_tray), "--prefix",
            str(tmp_path / "opt"))
    dry = run_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would install imex 580.126.20 -> {tmp_path / 'opt/imex-580.126.20'}" in dry.stdout
    assert not (tmp_path / "opt").exists()
    first, again = run_cli(*args), run_cli(*args)
    assert "installed: imex 580.126.20" in first.stdout
    assert "unchanged: imex 580.126.20" in again.stdout and "installed:" not in again.stdout


@pytest.mark.parametrize(("recorded", "same"), [
    ({"usr/bin/x": "a", "etc/x.cfg": "c"}, True),   # dpkg's own file: conffiles listed too
    ({"usr/bin/x": "a"}, True),                     # the package's md5sums: conffiles left out
    ({"usr/bin/x": "a", "etc/x.cfg": "d"}, False),  # a conffile of another build
    ({"usr/bin/x": "b", "etc/x.cfg": "c"}, False),  # other bytes
    ({"usr/bin/x": "a", "usr/bin/y": "e"}, False),  # a file the .deb does not hold
    ({}, False),
])
def test_an_installed_package_is_the_cached_one_only_with_dpkgs_md5sums_of_its_files(
        recorded: dict[str, str], same: bool) -> None:
    from nvfabric.artifacts.dpkgdb import same_md5sums

    content = {"usr/bin/x": "a", "etc/x.cfg": "c"}
    assert same_md5sums(recorded, content, frozenset({"etc/x.cfg"})) is same


# -- a root whose dpkg database names no architecture: dpkg installs its own there ----------

def _other_arch() -> tuple[str, str]:
    """(this machine's dpkg architecture, another one nvfabric fetches for)."""
    native = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                            timeout=60, check=True).stdout.strip()
    return native, "amd64" if native == "arm64" else "arm64"


def test_an_empty_dpkg_database_is_checked_against_the_dpkg_that_runs(
    node: Callable[..., Path], tmp_path: Path
) -> None:
    """An empty var/lib/dpkg/status names no architecture: the check used to be skipped, the
    dry run exited 0 and the install failed in dpkg ('package architecture (arm64) does not
    match system (amd64)') with a hint about dependencies. Both now refuse alike, before dpkg,
    naming the architecture of the dpkg that would run and how to get the right package."""
    native, other = _other_arch()
    root = node("gb200-tray")
    dpkg_tree(root, {}, arch=None)
    (root / "var/lib/dpkg/status").write_text("")
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    cache_deb(tmp_path / "debs", arch=other, depends="nvidia-modprobe")
    args = ("install", "--from", str(tmp_path / "debs"), "--root", str(root), "--arch", other)
    dry, dry_rc = run_json(*args, "--dry-run")
    real, real_rc = run_json(*args)
    assert (dry_rc, real_rc) == (1, 1), (dry, real)
    assert dry["error"] == real["error"]
    err = dry["error"]
    assert (err["code"], err["package_arch"], err["root_arch"], err["root_arch_from"]) == (
        "architecture_mismatch", other, native, "dpkg --print-architecture")
    assert "names no architecture" in err["message"] and "nothing was installed" in err["message"]
    assert f"nvfabric fetch --arch {native}" in err["hint"]
    assert f"on a machine of architecture {other}" in err["hint"]
    assert (root / "var/lib/dpkg/status").read_text() == ""
    assert not (root / "usr/bin/nvidia-imex").exists()


def test_without_dpkg_the_dry_run_fails_as_the_install_would(
    node: Callable[..., Path], tmp_path: Path
) -> None:
    root = node("gb200-tray")
    dpkg_tree(root, {}, arch=None)
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    cache_deb(tmp_path / "debs", depends="nvidia-modprobe")
    (tmp_path / "empty").mkdir()
    args = ("install", "--from", str(tmp_path / "debs"), "--root", str(root))
    env = {"PATH": str(tmp_path / "empty")}
    dry, dry_rc = run_json(*args, "--dry-run", env=env)
    real, real_rc = run_json(*args, env=env)
    assert (dry_rc, real_rc, dry["error"]) == (1, 1, real["error"])
    assert dry["error"]["code"] == "install_failed"
    assert "cannot run it" in dry["error"]["message"]

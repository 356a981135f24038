"""The pure decisions of the GB200/GB300 image flow (issue 17), without dpkg or systemctl:
which dependencies are forced, runfile detection on node trees, the IMEX owner -> unit rule,
the mnnvl refusal, and ``install --from`` up to (never including) the dpkg run. The real
dpkg/systemctl flow is tests/integration/test_imex_image_flow.py."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.artifacts import cachefile, debinstall, dpkgdb
from nvfabric.artifacts.debdeps import Known, accepts, decide
from nvfabric.artifacts.model import Artifact
from nvfabric.artifacts.naming import split_for_fabric
from nvfabric.artifacts.runfile import DiskFile, OnDisk, classify, library_version
from nvfabric.effects.imex import unit_argv
from nvfabric.model.errors import NvfabricError
from nvfabric.rules.imex.owner import OwnerEvidence, unit_policy
from nvfabric.rules.imex.owner import decide as decide_owner
from nvfabric.rules.imex.script import Actions
from nvfabric.rules.imex.slurm import Script, SlurmFacts
from tests.cli.test_fetch_mirror import (  # noqa: F401 - fixture
    Mirror,
    deb_stanza,
    make_archive,
    mirror,
    sha256,
)
from tests.conftest import run_cli, run_json

MODPROBE = OnDisk("nvidia-modprobe", "580.126.20", "/usr/bin/nvidia-modprobe")
LIBC = Known("libc6", "2.36-9+deb12u7")


def ctrl(depends: str, pre: str = "") -> dict[str, str]:
    out = {"Package": "nvidia-imex", "Version": "580.126.20-1ubuntu1", "Depends": depends}
    if pre:
        out["Pre-Depends"] = pre
    return out


# -- which dependencies are forced -------------------------------------------------------

def test_only_the_runfile_nvidia_modprobe_is_forced_libc_is_satisfied_by_dpkg() -> None:
    d = decide(ctrl("libc6 (>= 2.34), nvidia-modprobe"), [LIBC], [MODPROBE])
    assert d.satisfied == ("libc6 (>= 2.34)",)
    assert [(f.relation, f.by.name) for f in d.forced] == [("nvidia-modprobe", "nvidia-modprobe")]
    assert d.missing == ()
    assert d.ignore == ("nvidia-modprobe",)


def test_a_versioned_dependency_is_forced_only_when_the_runfile_version_meets_it() -> None:
    ok = decide(ctrl("nvidia-modprobe (>= 580.126.20)"), [], [MODPROBE])
    assert ok.ignore == ("nvidia-modprobe",)
    newer = decide(ctrl("nvidia-modprobe (>= 590.44.01)"), [], [MODPROBE])
    assert newer.forced == ()
    assert newer.missing == (
        "nvidia-modprobe (>= 590.44.01): not installed as a package, and /usr/bin/nvidia-modprobe "
        "on disk, owned by no package (runfile driver 580.126.20) does not meet the version",)
    unknown = decide(ctrl("nvidia-modprobe (>= 580)"), [],
                     [OnDisk("nvidia-modprobe", None, "/usr/bin/nvidia-modprobe")])
    assert unknown.forced == () and len(unknown.missing) == 1


def test_any_other_missing_dependency_is_missing_not_forced() -> None:
    d = decide(ctrl("nvidia-modprobe, libnvidia-nscq (= 580.126.20-1ubuntu1)"), [], [MODPROBE])
    assert [f.by.name for f in d.forced] == ["nvidia-modprobe"]
    assert d.missing == ("libnvidia-nscq (= 580.126.20-1ubuntu1): not installed, and not "
                         "provided by the runfile driver",)


def test_a_packaged_nvidia_modprobe_is_used_and_nothing_is_forced() -> None:
    pkg = Known("nvidia-modprobe", "580.126.20-1ubuntu1")
    d = decide(ctrl("nvidia-modprobe (>= 580.126.20)"), [pkg], [MODPROBE])
    assert d.forced == () and d.satisfied == ("nvidia-modprobe (>= 580.126.20)",)


def test_alternatives_provides_and_same_call_packages_satisfy_before_forcing() -> None:
    virtual = Known("nvidia-kernel-support", "580-1", (("nvidia-modprobe", None),))
    assert decide(ctrl("nvidia-modprobe"), [virtual], [MODPROBE]).forced == ()
    # An unversioned Provides never meets a versioned relation (Debian Policy 7.5): forced.
    assert decide(ctrl("nvidia-modprobe (>= 580)"), [virtual], [MODPROBE]).ignore == (
        "nvidia-modprobe",)
    assert decide(ctrl("foo | nvidia-modprobe"), [Known("foo", "1")], [MODPROBE]).forced == ()
    # A package installed by the same dpkg call counts as installed.
    same_call = Known("libnvidia-nscq", "580.126.20-1ubuntu1")
    d = decide(ctrl("libnvidia-nscq (= 580.126.20-1ubuntu1)"), [same_call], [])
    assert d.missing == () and d.forced == ()


def test_pre_depends_are_judged_like_depends() -> None:
    d = decide(ctrl("libc6", pre="nvidia-modprobe"), [LIBC], [MODPROBE])
    assert d.ignore == ("nvidia-modprobe",)
    assert decide(ctrl("", pre="dpkg (>= 1.22)"), [Known("dpkg", "1.21.22")], []).missing


def test_version_relations_follow_debian_ordering() -> None:
    assert accepts("580.126.20-1ubuntu1", (">=", "580.126.20"))
    assert not accepts("580.126.20", (">>", "580.126.20"))
    assert accepts("580.126.20-1", ("<<", "580.126.20-1ubuntu1"))
    assert accepts("1:1.0", (">=", "2.0"))  # the epoch wins
    assert not accepts(None, ("=", "1"))
    assert accepts(None, None)


# -- runfile detection on trees ----------------------------------------------------------

def dpkg_tree(root: Path, installed: dict[str, list[str]], arch: str | None = "arm64") -> None:
    """A dpkg database under ``root``: status stanzas and info/<pkg>.list for each package,
    and the root's own dpkg of ``arch`` (a Debian root has it: its Architecture is the root's;
    None: a database that names no architecture)."""
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True, exist_ok=True)
    stanzas = [] if arch is None else [
        f"Package: dpkg\nStatus: install ok installed\nPriority: required\n"
        f"Architecture: {arch}\nVersion: 1.21.22\nDescription: dpkg\n"]
    for name, paths in installed.items():
        stanzas.append(f"Package: {name}\nStatus: install ok installed\nPriority: optional\n"
                       f"Architecture: arm64\nVersion: 1.0-1\nDescription: {name}\n")
        (info / f"{name}.list").write_text("".join(p + "\n" for p in paths))
    stanzas.append("Package: removed-one\nStatus: deinstall ok config-files\n"
                   "Architecture: arm64\nVersion: 2.0\nDescription: gone\n")
    (root / "var/lib/dpkg/status").write_text("\n".join(stanzas))


def put(root: Path, host: str, data: bytes = b"x") -> None:
    path = root / host.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


NVML = "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.580.126.20"


def test_runfile_driver_is_files_no_package_owns(tmp_path: Path) -> None:
    dpkg_tree(tmp_path, {"libc6": ["/usr/lib/aarch64-linux-gnu/libc.so.6"]})
    put(tmp_path, NVML)
    (tmp_path / "usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1").symlink_to(
        "libnvidia-ml.so.580.126.20")
    put(tmp_path, "/usr/bin/nvidia-modprobe")
    origin = dpkgdb.driver_origin(str(tmp_path))
    assert (origin.kind, origin.version, origin.package) == ("runfile", "580.126.20", None)
    assert origin.provides == (OnDisk("nvidia-modprobe", "580.126.20", "/usr/bin/nvidia-modprobe"),)


def test_packaged_driver_provides_nothing_outside_dpkg(tmp_path: Path) -> None:
    # Debian 12 merged /usr: the package lists /lib/..., the file is reached as /usr/lib/...
    dpkg_tree(tmp_path, {"libnvidia-compute-580": [NVML.removeprefix("/usr")]})
    put(tmp_path, NVML)
    put(tmp_path, "/usr/bin/nvidia-modprobe")
    origin = dpkgdb.driver_origin(str(tmp_path))
    assert (origin.kind, origin.package) == ("package", "libnvidia-compute-580")
    assert origin.provides == ()


def test_no_driver_library_is_unknown_and_provides_nothing(tmp_path: Path) -> None:
    dpkg_tree(tmp_path, {})
    put(tmp_path, "/usr/bin/nvidia-modprobe")
    origin = dpkgdb.driver_origin(str(tmp_path))
    assert (origin.kind, origin.provides) == ("unknown", ())


def test_a_packaged_nvidia_modprobe_beside_a_runfile_driver_is_not_provided(tmp_path: Path) -> None:
    dpkg_tree(tmp_path, {"nvidia-modprobe": ["/usr/bin/nvidia-modprobe"]})
    put(tmp_path, NVML)
    put(tmp_path, "/usr/bin/nvidia-modprobe")
    put(tmp_path, "/usr/bin/nvidia-persistenced")
    db = dpkgdb.read(str(tmp_path))
    origin = dpkgdb.driver_origin(str(tmp_path))
    assert origin.kind == "runfile"
    assert [p.name for p in origin.provides] == ["nvidia-persistenced"]
    assert [k.name for k in db.installed] == ["dpkg", "nvidia-modprobe"], (
        "config-files is not installed")


def test_classify_prefers_a_packaged_library_and_reads_only_versioned_names() -> None:
    assert library_version("/usr/lib64/libnvidia-ml.so.570.172.08") == "570.172.08"
    assert library_version("/usr/lib64/libnvidia-ml.so.1") is None
    both = classify([DiskFile("/usr/lib64/libnvidia-ml.so.535.1.2", None),
                     DiskFile("/usr/lib/x/libnvidia-ml.so.580.1.2", "libnvidia-compute-580")],
                    [("nvidia-modprobe", DiskFile("/usr/bin/nvidia-modprobe", None))])
    assert (both.kind, both.version, both.provides) == ("package", "580.1.2", ())


def test_a_root_without_a_dpkg_database_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(NvfabricError) as err:
        dpkgdb.read(str(tmp_path))
    assert err.value.exit_code == 2 and err.value.finding.code == "input_unreadable"


# -- the IMEX owner decides the unit -------------------------------------------------------

def test_unit_follows_the_imex_owner_and_its_runner() -> None:
    def policy(ev: OwnerEvidence, requested: str | None = None) -> tuple[str, bool]:
        p = unit_policy(decide_owner(ev, requested))
        return p.action, p.now

    unit = SlurmFacts(scripts=(Script("Prolog", ("p",), Actions(unit_verbs=("restart",))),))
    own = SlurmFacts(scripts=(Script("Prolog", ("p",), Actions(daemon=True)),))
    assert policy(OwnerEvidence(), "host") == ("enable", True)
    assert policy(OwnerEvidence(), "dra-host") == ("enable", True)
    assert policy(OwnerEvidence(dra=("d",))) == ("mask", True)
    assert policy(OwnerEvidence(slurm=unit)) == ("enable", False)
    assert policy(OwnerEvidence(slurm=own)) == ("mask", True)
    assert policy(OwnerEvidence(), "slurm") == ("disable", False)
    assert policy(OwnerEvidence()) == ("disable", True)
    assert "ComputeDomain" in unit_policy(decide_owner(OwnerEvidence(dra=("d",)))).reason
    assert "IMEX_CMD_UNIX_DOMAIN_PATH=/etc/nvidia-imex/imex_ctrl.sock" in unit_policy(
        decide_owner(OwnerEvidence(), "dra-host")).reason


def test_unit_argv_uses_systemctl_root_for_an_image_and_now_on_a_live_host() -> None:
    assert unit_argv("/img/root", "disable", True, live=False) == [
        "systemctl", "--root", "/img/root", "disable", "nvidia-imex.service"]
    assert unit_argv("/", "disable", True, live=True) == [
        "systemctl", "disable", "--now", "nvidia-imex.service"]
    assert unit_argv("/", "disable", False, live=True) == [
        "systemctl", "disable", "nvidia-imex.service"]
    assert unit_argv("/", "mask", True, live=True) == [
        "systemctl", "mask", "--now", "nvidia-imex.service"]
    with pytest.raises(ValueError):
        unit_argv("/img/root", "mask; reboot", True, live=False)
    with pytest.raises(ValueError):
        unit_argv("/img\nroot", "enable", True, live=False)


def test_dpkg_argv_forces_only_named_packages_and_checks_every_value() -> None:
    assert debinstall.dpkg_argv("/r", ["nvidia-modprobe"], ["/d/a.deb"]) == [
        "dpkg", "--root", "/r", "--log=/r/var/log/dpkg.log", "--ignore-depends=nvidia-modprobe",
        "-i", "/d/a.deb"]
    assert debinstall.dpkg_argv("/r", [], ["/d/a.deb"]) == [
        "dpkg", "--root", "/r", "--log=/r/var/log/dpkg.log", "-i", "/d/a.deb"]
    # The live host keeps dpkg's own log setting.
    assert debinstall.dpkg_argv("/", [], ["/d/a.deb"]) == ["dpkg", "--root", "/", "-i",
                                                          "/d/a.deb"]
    for bad in (["--force-all"], ["a,b"], ["Nvidia"]):
        with pytest.raises(ValueError):
            debinstall.dpkg_argv("/r", bad, ["/d/a.deb"])
    with pytest.raises(ValueError):
        debinstall.dpkg_argv("/r", [], ["/d/../etc/a.deb"])


# -- mnnvl never gets fabric manager or NVLSM ------------------------------------------------

def test_mnnvl_drops_fabric_manager_nvlsm_and_their_libraries() -> None:
    assert split_for_fabric(("fabricmanager", "imex", "nvlsm", "libnvsdm", "libnvidia_nscq"),
                            "mnnvl") == (("imex",), ("fabricmanager", "nvlsm", "libnvsdm",
                                                     "libnvidia_nscq"))
    assert split_for_fabric(("fabricmanager", "nvlsm"), "nvlink5") == (
        ("fabricmanager", "nvlsm"), ())


def imex_index(m: Mirror, version: str, arch: str = "arm64") -> bytes:
    data = b"imex deb bytes"
    m.add(f"nvidia-imex_{version}_{arch}.deb", data)
    fm = b"fm deb bytes"
    m.add(f"nvidia-fabricmanager_{version}_{arch}.deb", fm)
    m.add("Packages", (deb_stanza("nvidia-imex", version, data, arch) + "\n"
                       + deb_stanza("nvidia-fabricmanager", version, fm, arch)).encode())
    return data


def test_fetch_on_a_gb200_tray_never_fetches_fabric_manager(
    mirror: Mirror, node: Callable[..., Path], tmp_path: Path  # noqa: F811
) -> None:
    root = node("gb200-tray")
    imex_index(mirror, "580.126.20-1ubuntu1")
    out, rc = run_json("fetch", "--root", str(root), "--source", "apt", "--mirror", mirror.url,
                       "--components", "fabricmanager,imex", "--dest", str(tmp_path / "d"),
                       "--retries", "0")
    assert rc == 0, out
    assert out["fabric"] == "mnnvl"
    assert [a["package"] for a in out["artifacts"]] == ["nvidia-imex"]
    assert [(f["code"], f["severity"], f["components"]) for f in out["findings"]] == [
        ("component_not_for_fabric", "warning", ["fabricmanager"])]
    assert "/nvidia-fabricmanager_580.126.20-1ubuntu1_arm64.deb" not in {
        p for p, r in mirror.routes.items() if r.hits}
    only_fm, rc = run_json("fetch", "--root", str(root), "--source", "apt", "--mirror",
                           mirror.url, "--components", "fabricmanager,nvlsm",
                           "--dest", str(tmp_path / "d"))
    assert rc == 1
    assert only_fm["error"]["code"] == "component_not_for_fabric"
    assert only_fm["error"]["components"] == ["fabricmanager", "nvlsm"]


def test_fabric_option_refuses_fabric_manager_for_an_image_without_gpus(tmp_path: Path) -> None:
    out, rc = run_json("fetch", "--root", str(tmp_path), "--fabric", "mnnvl", "--source", "apt",
                       "--components", "fabricmanager", "--arch", "arm64",
                       "--driver-version", "580.126.20", "--distro", "ubuntu2404",
                       "--dry-run")
    assert rc == 1 and out["error"]["code"] == "component_not_for_fabric"


# -- the fetch record ------------------------------------------------------------------------

def art(component: str, version: str, arch: str = "arm64", data: bytes = b"deb") -> Artifact:
    package = {"imex": "nvidia-imex", "fabricmanager": "nvidia-fabricmanager"}[component]
    return Artifact(component, version, arch, f"http://m/{package}_{version}_{arch}.deb",
                    sha256(data), len(data), "apt", package)


def test_record_merges_by_component_and_arch(tmp_path: Path) -> None:
    cachefile.write(str(tmp_path), [cachefile.Cached(art("imex", "580.95.05-1"), "a.deb",
                                                     "580.95.05"),
                                    cachefile.Cached(art("imex", "580.95.05-1", "amd64"),
                                                     "b.deb", "580.95.05")])
    cachefile.write(str(tmp_path), [cachefile.Cached(art("imex", "580.126.20-1ubuntu1"),
                                                     "c.deb", "580.126.20")])
    got = [(c.artifact.arch, c.file, c.driver_version) for c in cachefile.read(str(tmp_path))]
    assert got == [("amd64", "b.deb", "580.95.05"), ("arm64", "c.deb", "580.126.20")]


@pytest.mark.parametrize("record", [
    "not json", '{"artifacts": 3}',
    '{"artifacts": [{"component": "imex", "version": "1", "arch": "arm64", "url": "u", '
    '"source": "apt", "file": "../etc/shadow", "driver_version": "1", "sha256": "' + "a" * 64
    + '"}]}',
])
def test_a_damaged_record_is_unreadable(tmp_path: Path, record: str) -> None:
    (tmp_path / cachefile.RECORD).write_text(record)
    with pytest.raises(NvfabricError) as err:
        cachefile.read(str(tmp_path))
    assert err.value.exit_code == 2


# -- install --from up to the dpkg run ---------------------------------------------------

def _ar(members: list[tuple[str, bytes]]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members:
        out += (f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n").encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return out


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_deb(control: str) -> bytes:
    """A Debian binary package (ar: debian-binary, control.tar.gz, data.tar.gz), as dpkg-deb
    lays it out, built without tools."""
    return _ar([("debian-binary", b"2.0\n"),
                ("control.tar.gz", _tgz({"control": control.encode()})),
                ("data.tar.gz", _tgz({"usr/bin/nvidia-imex": b"#!/bin/sh\n"}))])


def cached_imex(directory: Path, version: str, depends: str, arch: str = "arm64") -> Path:
    control = (f"Package: nvidia-imex\nVersion: {version}\nArchitecture: {arch}\n"
               f"Maintainer: t <t@example.invalid>\nDepends: {depends}\n"
               "Description: IMEX Manager for NVIDIA based systems\n")
    data = make_deb(control)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"nvidia-imex_{version}_{arch}.deb"
    (directory / name).write_bytes(data)
    upstream = version.split("-")[0]
    cachefile.write(str(directory), [cachefile.Cached(art("imex", version, arch, data), name,
                                                      upstream)])
    return directory / name


@pytest.fixture
def runfile_tray(node: Callable[..., Path]) -> Path:
    """A simulated GB200 tray (driver 580.126.20 loaded) with a dpkg database and a runfile
    driver on disk."""
    root = node("gb200-tray")
    dpkg_tree(root, {"libc6": ["/usr/lib/aarch64-linux-gnu/libc.so.6"]})
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    return root


def test_install_from_dry_run_forces_only_nvidia_modprobe_and_leaves_the_unit_off(
    runfile_tray: Path, tmp_path: Path
) -> None:
    deb = cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "libc6, nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--dry-run")
    assert rc == 0, out
    assert out["fabric"] == "mnnvl" and out["driver_version"] == "580.126.20"
    assert out["commands"] == [["dpkg", "--root", str(runfile_tray),
                                f"--log={runfile_tray}/var/log/dpkg.log",
                                "--ignore-depends=nvidia-modprobe", "-i", str(deb)]]
    assert [f["package"] for f in out["forced"]] == ["nvidia-modprobe"]
    assert out["installed"] == []
    assert (out["imex_unit"]["owner"], out["imex_unit"]["action"]) == ("none", "disable")
    assert out["imex_unit"]["argv"] == ["systemctl", "--root", str(runfile_tray), "disable",
                                        "nvidia-imex.service"]


def test_install_from_refuses_a_second_missing_dependency_before_dpkg(
    runfile_tray: Path, tmp_path: Path
) -> None:
    cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe, libnvsdm")
    status = (runfile_tray / "var/lib/dpkg/status").read_bytes()
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray))
    assert rc == 1
    assert out["error"]["code"] == "dependency_unsatisfied"
    assert out["error"]["missing"] == [
        "libnvsdm: not installed, and not provided by the runfile driver"]
    assert (runfile_tray / "var/lib/dpkg/status").read_bytes() == status


def test_install_from_on_a_packaged_driver_forces_nothing_and_points_to_apt(
    node: Callable[..., Path], tmp_path: Path
) -> None:
    root = node("gb200-tray")
    dpkg_tree(root, {"libnvidia-compute-580": [NVML]})
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")  # a stray copy: not the runfile's, never forced
    cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root))
    assert rc == 1
    assert out["error"]["code"] == "dependency_unsatisfied"
    assert out["error"]["driver_origin"] == "package"
    assert "--source apt --execute" in out["error"]["hint"]


def test_install_from_refuses_a_deb_of_another_driver(runfile_tray: Path, tmp_path: Path) -> None:
    cached_imex(tmp_path / "debs", "580.95.05-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray))
    assert rc == 1
    assert out["error"]["code"] == "version_mismatch"
    assert out["error"]["driver_version"] == "580.126.20"


def test_install_from_refuses_changed_bytes_and_a_missing_record(
    runfile_tray: Path, tmp_path: Path
) -> None:
    deb = cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe")
    deb.write_bytes(deb.read_bytes() + b"tampered")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray))
    assert rc == 1 and out["error"]["code"] == "checksum_mismatch"
    out, rc = run_json("install", "--from", str(tmp_path / "empty"), "--root", str(runfile_tray))
    assert rc == 2 and out["error"]["code"] == "input_unreadable"


def test_install_from_on_a_tray_refuses_cached_fabric_manager(
    runfile_tray: Path, tmp_path: Path
) -> None:
    data = b"fm"
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs/fm.deb").write_bytes(data)
    cachefile.write(str(tmp_path / "debs"), [cachefile.Cached(
        art("fabricmanager", "580.126.20-1ubuntu1", data=data), "fm.deb", "580.126.20")])
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray))
    assert rc == 1
    assert out["error"]["code"] == "component_not_for_fabric"
    record = json.loads((tmp_path / "debs" / cachefile.RECORD).read_text())
    assert record["artifacts"][0]["component"] == "fabricmanager"


# -- install --source apt keeps apt-get only where the driver came from packages ----------

def serve_imex_deb(m: Mirror, version: str, depends: str) -> None:
    control = (f"Package: nvidia-imex\nVersion: {version}\nArchitecture: arm64\n"
               f"Maintainer: t <t@example.invalid>\nDepends: {depends}\n"
               "Description: IMEX Manager for NVIDIA based systems\n")
    data = make_deb(control)
    m.add(f"nvidia-imex_{version}_arm64.deb", data)
    m.add("Packages", deb_stanza("nvidia-imex", version, data, "arm64").encode())


def test_install_source_apt_on_a_runfile_node_takes_dpkg_not_apt_get(
    mirror: Mirror, runfile_tray: Path, tmp_path: Path  # noqa: F811
) -> None:
    serve_imex_deb(mirror, "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--root", str(runfile_tray), "--source", "apt",
                       "--mirror", mirror.url, "--dest", str(tmp_path / "d"))
    assert rc == 0, out
    assert out["route"] == "dpkg" and out["dry_run"] is True, "nothing runs without --execute"
    assert out["commands"] == [["dpkg", "--root", str(runfile_tray),
                                f"--log={runfile_tray}/var/log/dpkg.log",
                                "--ignore-depends=nvidia-modprobe", "-i",
                                str(tmp_path / "d/nvidia-imex_580.126.20-1ubuntu1_arm64.deb")]]
    assert not any("apt-get" in " ".join(c) for c in out["commands"])


def test_install_source_apt_on_a_packaged_driver_keeps_apt_get(
    mirror: Mirror, node: Callable[..., Path], tmp_path: Path  # noqa: F811
) -> None:
    root = node("gb200-tray")
    dpkg_tree(root, {"libnvidia-compute-580": [NVML]})
    put(root, NVML)
    serve_imex_deb(mirror, "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--root", str(root), "--source", "apt", "--mirror", mirror.url,
                       "--dest", str(tmp_path / "d"))
    assert rc == 0, out
    assert out["route"] == "package manager"
    assert out["commands"][0] == ["apt-get", "install", "-y", "--no-install-recommends",
                                  "nvidia-imex=580.126.20-1ubuntu1"]


def test_a_root_or_directory_with_a_newline_never_reaches_dpkg(tmp_path: Path) -> None:
    root = tmp_path / "image\nroot"
    dpkg_tree(root, {})
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--arch", "arm64")
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert "newline" in out["error"]["message"]


def test_owner_host_on_a_dra_node_is_refused_before_dpkg(
    runfile_tray: Path, tmp_path: Path
) -> None:
    plugin = runfile_tray / "var/lib/kubelet/plugins/compute-domain.nvidia.com"
    plugin.mkdir(parents=True)
    (plugin / "checkpoint.json").write_text("{}")
    cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(runfile_tray),
                       "--imex-owner", "host", "--dry-run")
    assert rc == 1
    assert out["error"]["code"] == "imex_owner_conflict"
    detected, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root",
                            str(runfile_tray), "--dry-run")
    assert rc == 0
    assert (detected["imex_unit"]["owner"], detected["imex_unit"]["action"]) == ("dra", "mask")


def test_install_from_puts_a_cached_redist_archive_under_the_prefix(
    runfile_tray: Path, tmp_path: Path
) -> None:
    top = "nvidia-imex-linux-sbsa-580.126.20-archive"
    data = make_archive(top, {"bin/nvidia-imex": b"imex", "bin/nvidia-imex-ctl": b"ctl"})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / f"{top}.tar.xz").write_bytes(data)
    entry = Artifact("imex", "580.126.20", "sbsa", f"https://x/{top}.tar.xz", sha256(data),
                     len(data), "redist")
    cachefile.write(str(tmp_path / "c"), [cachefile.Cached(entry, f"{top}.tar.xz",
                                                           "580.126.20")])
    out, rc = run_json("install", "--from", str(tmp_path / "c"), "--root", str(runfile_tray),
                       "--prefix", str(tmp_path / "opt"))
    assert rc == 0, out
    assert out["installed"] == [{"component": "imex", "version": "580.126.20",
                                 "path": str(tmp_path / "opt/imex-580.126.20"), "files": 2,
                                 "changed": True}]
    assert (tmp_path / "opt/imex-580.126.20/bin/nvidia-imex").read_bytes() == b"imex"
    assert "commands" not in out and "imex_unit" not in out


def test_provides_keeps_only_exact_versions() -> None:
    from nvfabric.artifacts.debdeps import provides

    assert provides("") == ()
    assert provides("nvidia-fabricmanager-580 (= 580.95.05-1), libfoo") == (
        ("nvidia-fabricmanager-580", "580.95.05-1"), ("libfoo", None))


def test_install_from_before_the_driver_is_on_disk_says_install_the_driver_first(
    node: Callable[..., Path], tmp_path: Path
) -> None:
    root = node("gb200-tray")
    dpkg_tree(root, {})
    put(root, "/usr/bin/nvidia-modprobe")
    cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root))
    assert rc == 1
    assert out["error"]["code"] == "dependency_unsatisfied"
    assert out["error"]["driver_origin"] == "unknown"
    assert "install the driver first" in out["error"]["hint"]


def test_fetch_says_how_to_install_offline_and_why_fabric_manager_was_left_out(
    mirror: Mirror, node: Callable[..., Path], tmp_path: Path  # noqa: F811
) -> None:
    root = node("gb200-tray")
    imex_index(mirror, "580.126.20-1ubuntu1")
    proc = run_cli("fetch", "--root", str(root), "--source", "apt", "--mirror", mirror.url,
                   "--components", "imex,fabricmanager", "--dest", str(tmp_path / "d"),
                   "--retries", "0")
    assert proc.returncode == 0, proc.stderr
    assert "component_not_for_fabric: not fetched or installed: fabricmanager" in proc.stdout
    assert f"nvfabric install --from {tmp_path / 'd'}" in proc.stdout

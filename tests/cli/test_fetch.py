"""``nvfabric fetch`` and ``nvfabric install`` end to end: the real CLI against a local mirror
(127.0.0.1) serving a driver release made in the test, and simulated nodes for the defaults
(driver version from the loaded module, components from the plan)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.artifacts.packages import run
from nvfabric.model.errors import NvfabricError
from tests.cli.test_fetch_mirror import (  # noqa: F401 - fixture
    Mirror,
    deb_stanza,
    mirror,
    redist_release,
    serve_release,
    sha256,
    write_release,
)
from tests.conftest import run_cli, run_json

QUICK = ("--retries", "1", "--timeout", "5")


def fetch(m: Mirror, dest: Path, *args: str) -> tuple[dict[str, object], int]:
    return run_json("fetch", "--mirror", m.url, "--dest", str(dest), *QUICK, *args)


def test_fetch_downloads_verified_artifacts_then_uses_the_cache(
    mirror: Mirror, tmp_path: Path  # noqa: F811
) -> None:
    rel = redist_release("580.95.05")
    serve_release(mirror, rel)
    args = ("--driver-version", "580.95.05", "--arch", "aarch64",
            "--components", "fabricmanager,imex")
    out, rc = fetch(mirror, tmp_path / "cache", *args)
    assert rc == 0, out
    arts = out["artifacts"]
    assert isinstance(arts, list)
    assert [(a["component"], a["version"], a["arch"], a["state"]) for a in arts] == [
        ("fabricmanager", "580.95.05", "sbsa", "downloaded"),
        ("imex", "580.95.05", "sbsa", "downloaded")]
    for a in arts:
        data = Path(a["path"]).read_bytes()
        assert sha256(data) == a["sha256"] == rel.manifest[a["component"]]["linux-sbsa"]["sha256"]
    assert sorted(os.listdir(tmp_path / "cache")) == sorted(
        [*(Path(a["path"]).name for a in arts), "nvfabric-artifacts.json"])
    record = json.loads((tmp_path / "cache" / "nvfabric-artifacts.json").read_text())
    assert [(r["component"], r["file"], r["sha256"], r["driver_version"])
            for r in record["artifacts"]] == [
        (a["component"], Path(a["path"]).name, a["sha256"], "580.95.05") for a in arts]
    assert out["record"] == str(tmp_path / "cache" / "nvfabric-artifacts.json")
    again, rc = fetch(mirror, tmp_path / "cache", *args)
    assert rc == 0
    assert [a["state"] for a in again["artifacts"]] == ["already in cache"] * 2  # type: ignore[index]
    for comp in ("fabricmanager", "imex"):
        path = "/" + rel.manifest[comp]["linux-sbsa"]["relative_path"]
        assert mirror.routes[path].hits == 1, "a verified cache entry is not fetched again"


def test_checksum_mismatch_exits_1_and_keeps_nothing(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    rel = redist_release("580.95.05")
    rel.archives[rel.manifest["imex"]["linux-x86_64"]["relative_path"]] = b"tampered archive"
    serve_release(mirror, rel)
    out, rc = fetch(mirror, tmp_path / "cache", "--driver-version", "580.95.05",
                    "--arch", "x86_64", "--components", "imex")
    assert rc == 1
    assert out["error"]["code"] == "checksum_mismatch"  # type: ignore[index]
    assert not (tmp_path / "cache").exists() or os.listdir(tmp_path / "cache") == []


def test_archive_missing_on_the_mirror_is_not_available(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    rel = redist_release("580.95.05")
    del rel.archives[rel.manifest["fabricmanager"]["linux-x86_64"]["relative_path"]]
    serve_release(mirror, rel)
    out, rc = fetch(mirror, tmp_path / "c", "--driver-version", "580.95.05", "--arch", "x86_64",
                    "--components", "fabricmanager")
    assert rc == 1
    assert out["error"]["code"] == "artifact_not_available"  # type: ignore[index]


def test_no_manifest_for_the_driver_names_the_manifest_url(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    serve_release(mirror, redist_release("580.95.05"))
    out, rc = fetch(mirror, tmp_path / "c", "--driver-version", "580.95.06", "--arch", "x86_64",
                    "--components", "fabricmanager")
    assert rc == 1
    err = out["error"]
    assert isinstance(err, dict)
    assert err["code"] == "artifact_not_available"
    assert err["sources_searched"] == [f"{mirror.url}/redistrib_580.95.06.json"]


def test_500_then_success_through_the_cli(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    rel = redist_release("580.95.05")
    serve_release(mirror, rel)
    path = "/" + rel.manifest["fabricmanager"]["linux-x86_64"]["relative_path"]
    mirror.routes[path].statuses = [500, 502]
    out, rc = run_json("fetch", "--mirror", mirror.url, "--dest", str(tmp_path / "c"),
                       "--retries", "2", "--driver-version", "580.95.05", "--arch", "x86_64",
                       "--components", "fabricmanager")
    assert rc == 0, out
    assert mirror.routes[path].hits == 3


def test_slow_mirror_times_out_through_the_cli(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    mirror.add("redistrib_580.95.05.json", b"{}", delay_s=5.0)
    out, rc = run_json("fetch", "--mirror", mirror.url, "--timeout", "0.2", "--retries", "0",
                       "--driver-version", "580.95.05", "--arch", "x86_64",
                       "--components", "fabricmanager")
    assert rc == 1
    assert out["error"]["code"] == "download_failed"  # type: ignore[index]
    assert "timed out" in out["error"]["message"]  # type: ignore[index]


def test_defaults_come_from_the_node(
    mirror: Mirror, tmp_path: Path, node: Callable[..., Path]  # noqa: F811
) -> None:
    """dgx-b200 (570.148.08, x86_64, nvlink5): fabricmanager, nvlsm, libnvsdm, nscq."""
    serve_release(mirror, redist_release("570.148.08", nvlsm="2025.03.1"))
    root = node("dgx-b200")
    out, rc = run_json("fetch", "--root", str(root), "--mirror", mirror.url, "--dry-run")
    assert rc == 0, out
    assert out["driver_version"] == "570.148.08" and out["fabric"] == "nvlink5"
    assert [(a["component"], a["version"]) for a in out["artifacts"]] == [  # type: ignore[union-attr]
        ("fabricmanager", "570.148.08"), ("nvlsm", "2025.03.1"), ("libnvsdm", "570.148.08"),
        ("libnvidia_nscq", "570.148.08")]
    assert all(str(a["path"]).startswith(str(root)) for a in out["artifacts"])  # type: ignore[union-attr]


def test_gb200_tray_fetches_imex_for_sbsa(
    mirror: Mirror, node: Callable[..., Path]  # noqa: F811
) -> None:
    serve_release(mirror, redist_release("580.126.20"))
    out, rc = run_json("fetch", "--root", str(node("gb200-tray")), "--mirror", mirror.url,
                       "--dry-run")
    assert rc == 0, out
    assert [(a["component"], a["arch"]) for a in out["artifacts"]] == [("imex", "sbsa")]  # type: ignore[union-attr]


def test_nothing_to_fetch_on_a_node_without_a_fabric(node: Callable[..., Path]) -> None:
    out, rc = run_json("fetch", "--root", str(node("a40-bridge")), "--dry-run")
    assert rc == 0
    assert out["artifacts"] == [] and out["fabric"] == "none"


def test_no_loaded_driver_and_no_version_given(node: Callable[..., Path]) -> None:
    out, rc = run_json("fetch", "--root", str(node("no-gpu")), "--components", "imex",
                       "--dry-run")
    assert rc == 1
    assert out["error"]["code"] == "driver_not_loaded"  # type: ignore[index]


@pytest.mark.parametrize(
    "args",
    [("--driver-version", "latest"), ("--arch", "ppc64le"), ("--components", "fabricmanager,x"),
     ("--mirror", "ftp://example.invalid/"), ("--nvlsm-version", "new"),
     ("--distro", "../../x")],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    base = {"--driver-version": "580.95.05", "--arch": "x86_64",
            "--components": "fabricmanager", "--mirror": str(tmp_path)}
    base[args[0]] = args[1]
    flat = [x for kv in base.items() for x in kv]
    if args[0] in ("--nvlsm-version", "--distro"):
        flat += [*args, "--source", "apt"]
    proc = run_cli("fetch", *flat, "--dry-run")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_mirror_directory(tmp_path: Path) -> None:
    write_release(tmp_path / "mirror", redist_release("590.48.01"))
    out, rc = run_json("fetch", "--mirror", str(tmp_path / "mirror"), "--dest",
                       str(tmp_path / "c"), "--driver-version", "590.48.01", "--arch", "x86_64",
                       "--components", "libnvsdm")
    assert rc == 0, out
    [art] = out["artifacts"]  # type: ignore[misc]
    assert art["url"].startswith("file://") and Path(art["path"]).is_file()


def test_install_redist_is_idempotent_through_the_cli(mirror: Mirror, tmp_path: Path) -> None:  # noqa: F811
    serve_release(mirror, redist_release("580.95.05"))
    args = ("install", "--mirror", mirror.url, "--dest", str(tmp_path / "c"), "--prefix",
            str(tmp_path / "opt"), "--driver-version", "580.95.05", "--arch", "x86_64",
            "--components", "fabricmanager,libnvidia_nscq")
    out, rc = run_json(*args)
    assert rc == 0, out
    installed = out["installed"]
    assert isinstance(installed, list)
    assert [i["changed"] for i in installed] == [True, True]
    fm = Path(installed[0]["path"])
    assert (fm / "bin" / "fabricmanager").is_file()
    record = json.loads((fm / ".nvfabric-install.json").read_text())
    assert {f["path"] for f in record["files"]} == {"LICENSE.txt", "bin/fabricmanager"}
    again, rc = run_json(*args)
    assert rc == 0
    assert [i["changed"] for i in again["installed"]] == [False, False]  # type: ignore[union-attr]


def test_install_from_apt_prints_what_it_would_run(mirror: Mirror) -> None:  # noqa: F811
    mirror.add("Packages", deb_stanza("nvidia-fabricmanager-535", "535.230.02-1", b"x").encode())
    out, rc = run_json("install", "--source", "apt", "--mirror", mirror.url,
                       "--driver-version", "535.230.02", "--arch", "amd64",
                       "--components", "fabricmanager")
    assert rc == 0, out
    assert out["executed"] is False
    assert out["commands"] == [
        ["apt-get", "install", "-y", "--no-install-recommends",
         "nvidia-fabricmanager-535=535.230.02-1"],
        ["apt-mark", "hold", "nvidia-fabricmanager-535"]]
    proc = run_cli("install", "--source", "apt", "--mirror", mirror.url, "--driver-version",
                   "535.230.02", "--arch", "amd64", "--components", "fabricmanager")
    assert "would run (add --execute): apt-mark hold nvidia-fabricmanager-535" in proc.stdout


def test_execute_refuses_a_simulated_root(tmp_path: Path) -> None:
    proc = run_cli("install", "--root", str(tmp_path), "--source", "apt", "--execute",
                   "--driver-version", "580.95.05", "--components", "fabricmanager")
    assert proc.returncode == 2
    assert "--root /" in proc.stderr


def test_package_manager_failure_is_install_failed(tmp_path: Path) -> None:
    import sys

    marker = tmp_path / "second-ran"
    with pytest.raises(NvfabricError) as err:
        run([[sys.executable, "-c", "raise SystemExit(100)"],
             [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]])
    assert err.value.finding.code == "install_failed"
    assert "exit status 100" in err.value.finding.message
    assert not marker.exists(), "stops at the first failure"


def test_apt_without_mirror_uses_the_distro_of_the_node(node: Callable[..., Path]) -> None:
    """No network in tests: the default CUDA repository URL is only checked in the error of
    a node whose os-release names no known distro."""
    root = node({"arch": "x86_64", "driver_version": "580.95.05", "modules": ["nvidia"],
                 "files": {"etc/os-release": "ID=plan9\nVERSION_ID=4\n"}})
    proc = run_cli("fetch", "--root", str(root), "--source", "apt", "--components",
                   "fabricmanager", "--dry-run")
    assert proc.returncode == 2
    assert "--distro" in proc.stderr


def test_progress_bar_only_on_a_terminal() -> None:
    import io

    from nvfabric.artifacts.transport import stderr_is_tty

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert stderr_is_tty(io.StringIO()) is False
    assert stderr_is_tty(Tty()) is True


# Tester report 12: README says input_unreadable exits 2; fetch on a damaged manifest exited 1.
@pytest.mark.parametrize("body", [b"<html>not json</html>", b"\xff\xfe{"],
                         ids=["html", "binary"])
def test_damaged_manifest_is_input_unreadable_exit_2(tmp_path: Path, body: bytes) -> None:
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror/redistrib_580.95.05.json").write_bytes(body)
    out, rc = run_json("fetch", "--mirror", str(tmp_path / "mirror"), "--dest",
                       str(tmp_path / "c"), "--driver-version", "580.95.05", "--arch",
                       "x86_64", "--components", "fabricmanager")
    assert (rc, out["error"]["code"]) == (2, "input_unreadable")
    assert out["error"]["hint"]


# Tester report 1/14: paths and values are printed literally in human output (`[/]` in a
# path was taken for markup: exit 3).
def test_fetch_human_output_prints_paths_literally(tmp_path: Path) -> None:
    write_release(tmp_path / "mirror", redist_release("590.48.01"))
    dest = tmp_path / "cache[/]x"
    proc = run_cli("fetch", "--mirror", str(tmp_path / "mirror"), "--dest", str(dest),
                   "--driver-version", "590.48.01", "--arch", "x86_64",
                   "--components", "libnvsdm")
    assert proc.returncode == 0, proc.stderr
    assert f"downloaded: {dest}/" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [("--driver-version", "latest"), ("--arch", "ppc64le"), ("--mirror", "ftp://x.invalid/"),
     ("--mirror", "http:///nohost"), ("--timeout", "0")],
)
def test_bad_input_under_json_carries_a_hint(args: tuple[str, ...], tmp_path: Path) -> None:
    # Tester report 14: JSON errors carried "hint": "".
    base = {"--driver-version": "580.95.05", "--arch": "x86_64",
            "--components": "fabricmanager", "--mirror": str(tmp_path)}
    base[args[0]] = args[1]
    out, rc = run_json("fetch", *[x for kv in base.items() for x in kv], "--dry-run")
    assert rc == 2 and out["error"]["hint"], out


def test_install_human_output_prints_paths_literally(tmp_path: Path) -> None:
    write_release(tmp_path / "mirror", redist_release("590.48.01"))
    prefix = tmp_path / "opt\x1b[2J"
    proc = run_cli("install", "--mirror", str(tmp_path / "mirror"), "--dest",
                   str(tmp_path / "c"), "--prefix", str(prefix), "--driver-version",
                   "590.48.01", "--arch", "x86_64", "--components", "libnvsdm")
    assert proc.returncode == 0, proc.stderr
    assert "opt\\x1b[2J/libnvsdm-" in proc.stdout and "\x1b" not in proc.stdout

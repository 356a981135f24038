"""`nvfabric simulate` writes only into a new or empty directory, never outside it, and refuses
a bad spec or target with one line (exit 2) before writing anything (tester report items 3, 6,
8, 12, 14)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from nvfabric.simulate import PROFILES, SpecError, build, parse, profile_spec
from nvfabric.simulate.fakes import install
from tests.cases import CASES
from tests.conftest import run_cli, run_json

B200_IB = {"arch": "x86_64", "driver_version": "570.148.08",
           "modules": ["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"],
           "mellanox": [{"ib_device": "mlx5_0", "ports": [{"guid": "0x0a0b0c0300d00001"}]}]}


def spec_file(tmp_path: Path, text: str | bytes, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def one_error_line(proc: Any) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return str(proc.stderr)


def test_non_empty_dir_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "node"
    outside = tmp_path / "outside"
    outside.mkdir()
    target.mkdir()
    (target / "keep").write_text("mine\n")
    os.symlink(outside, target / "etc")  # the tester's DIR/etc -> elsewhere
    err = one_error_line(run_cli("simulate", "dgx-b200", str(target)))
    assert "exists and is not empty" in err
    assert sorted(os.listdir(target)) == ["etc", "keep"] and os.listdir(outside) == []
    assert (target / "keep").read_text() == "mine\n"


def test_root_of_the_host_is_refused(tmp_path: Path) -> None:
    os.symlink("/", tmp_path / "slash")
    for target in ("/", str(tmp_path / "slash")):
        err = one_error_line(run_cli("simulate", "dgx-b200", target))
        assert "refusing to write a simulated node over /" in err


def test_empty_existing_dir_is_used(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = run_cli("simulate", "dgx-b200", str(tmp_path / "empty"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "empty/sys/class/infiniband/mlx5_0").is_symlink()


def test_dir_that_is_a_file_or_has_no_parent_is_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    err = one_error_line(run_cli("simulate", "dgx-b200", str(tmp_path / "afile")))
    assert f"{tmp_path / 'afile'} exists and is not a directory" in err
    err = one_error_line(run_cli("simulate", "dgx-b200", str(tmp_path / "missing" / "node")))
    assert "parent directory" in err and str(tmp_path / "missing") in err
    assert not (tmp_path / "missing").exists()


def test_spec_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, b"\xff\xfea\x00r\x00c\x00h\x00")
    err = one_error_line(run_cli("simulate", "--spec", str(spec), str(tmp_path / "n")))
    assert "is not UTF-8 text (byte 0xff at offset 0)" in err
    assert not (tmp_path / "n").exists()


def test_spec_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "spec.yaml")
    err = one_error_line(run_cli("simulate", "--spec", str(tmp_path / "spec.yaml"),
                                 str(tmp_path / "n"), timeout=30))
    assert "is not a regular file" in err


def test_error_message_keeps_its_closing_quote(tmp_path: Path) -> None:
    err = one_error_line(run_cli("simulate", "--spec", str(spec_file(tmp_path, "arch: riscv64\n")),
                                 str(tmp_path / "n")))
    # the message ends with its closing quote, then the hint every usage error has
    assert "arch: expected x86_64 or aarch64, got 'riscv64' (hint: " in err
    err = one_error_line(run_cli("simulate", "no-such-profile", str(tmp_path / "n")))
    assert "unknown profile 'no-such-profile'; known: a40-bridge" in err


def test_case_file_node_is_taken_and_a_case_without_node_is_refused(tmp_path: Path) -> None:
    data, rc = run_json("simulate", "--spec", str(CASES / "P11-dgx-b200-real.yaml"),
                        str(tmp_path / "p11"))
    assert rc == 0 and data["source"].endswith("P11-dgx-b200-real.yaml")
    fetch_case = CASES / "F01-sbsa-not-aarch64.yaml"  # a fetch case: no node to build
    assert "\nnode:" not in fetch_case.read_text()
    err = one_error_line(run_cli("simulate", "--spec", str(fetch_case), str(tmp_path / "n")))
    assert "is a field case file with no node spec (no `node:` key)" in err
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize(
    ("key", "content", "says"),
    [
        ("bin", "x", "'bin': is a directory the simulated tree writes"),
        ("etc", "x", "'etc': is a directory the simulated tree writes"),
        ("/usr/", "x", "is a directory the simulated tree writes"),
        ("sys/bus/pci/devices/0000:05:00.0", "x", "is a link the simulated tree writes"),
        ("sys/class/infiniband/mlx5_0/ports/1", "x", "is a directory the simulated tree writes"),
        ("proc/devices/x", "x", "proc/devices is a file of the simulated tree"),
        ("bin/nvlsm", "x", "is written by nvfabric's fake daemons"),
        ("usr/bin/nvidia-smi", "x", "is written by nvfabric's fake daemons"),
        ("var/lib/nvfabric-sim/faults.json", "{}", "is written by nvfabric's fake daemons"),
        ("", "x", "empty path"),
        ("/", "x", "empty path"),
        ("x" * 300, "x", "a path component is longer than 255 bytes"),
        ("a\0b", "x", "path contains NUL"),
        ("../outside", "x", "may not contain '..'"),
        ("/../../outside", "x", "may not contain '..'"),
        ("a", None, "'a': no content (null)"),
        ("a", 5, "expected text content"),
    ],
)
def test_bad_files_key_is_refused_before_anything_is_written(
        tmp_path: Path, key: str, content: object, says: str) -> None:
    with pytest.raises(SpecError) as err:  # from parse (the key) or build (the tree)
        build(parse({**B200_IB, "files": {key: content}}), str(tmp_path / "n"))
    assert says in str(err.value) and str(err.value).startswith("files: ")
    assert not (tmp_path / "n").exists() and not (tmp_path / "outside").exists()


def test_files_keys_naming_one_file_twice_or_a_file_inside_another_are_refused() -> None:
    from nvfabric.simulate.tree import layout

    with pytest.raises(SpecError, match="names the same file as another key"):
        parse({"files": {"etc/x": "1", "/etc//./x": "2"}})
    with pytest.raises(SpecError, match="'a' is a file, so 'a/b' cannot be inside it"):
        parse({"files": {"a": "1", "a/b": "2"}})
    fn = "sys/devices/pci0000:00/0000:05:00.0"
    with pytest.raises(SpecError, match=r"names the same file as .* \(through a link"):
        layout(parse({**B200_IB, "files": {f"{fn}/vendor": "1",
                                           "sys/bus/pci/devices/0000:05:00.0/vendor": "2"}}))
    with pytest.raises(SpecError, match=f"{fn}/vendor is a file of the simulated tree"):
        layout(parse({**B200_IB, "files": {"sys/bus/pci/devices/0000:05:00.0/vendor/x": "1"}}))


def test_files_null_and_bad_key_are_refused_through_the_cli(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "arch: x86_64\nfiles: {a: null}\n")
    err = one_error_line(run_cli("simulate", "--spec", str(spec), str(tmp_path / "n")))
    assert "files: 'a': no content (null)" in err and not (tmp_path / "n").exists()
    spec = spec_file(tmp_path, "arch: x86_64\nfiles: {bin: x}\n")
    err = one_error_line(run_cli("simulate", "--spec", str(spec), str(tmp_path / "n")))
    assert "files: 'bin': is a directory" in err and not (tmp_path / "n").exists()


def test_files_are_written_where_the_tree_links_lead_and_replace_its_files(
        tmp_path: Path) -> None:
    root = tmp_path / "n"
    build(parse({**B200_IB, "files": {
        "sys/class/infiniband/mlx5_0/ports/1/cap_mask": "garbage\n",
        "/etc/hostname": "", "dev/nvidia-caps-imex-channels/channel0": "",
        "var/lib/custom": b"\x00\x01"}}), str(root))
    real = root / "sys/devices/pci0000:00/0000:05:00.0/infiniband/mlx5_0/ports/1/cap_mask"
    assert real.read_text() == "garbage\n" and not real.is_symlink()
    assert (root / "etc/hostname").read_text() == ""
    assert (root / "var/lib/custom").read_bytes() == b"\x00\x01"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"gpus": [{"device_id": "2901", "count": 100000}]}, "gpus[0].count: expected 0..64"),
        ({"gpus": [{"device_id": "2901", "count": -3}]}, "gpus[0].count: expected 0..64"),
        ({"gpus": [{"device_id": "2901", "count": 40}] * 2}, "gpus: at most 64 GPUs in all"),
        ({"nvswitches": {"device_id": "22a3", "count": 65}}, "nvswitches.count: expected 0..64"),
        ({"nvswitches": {"device_id": "22a3", "count": -1}}, "nvswitches.count: expected 0..64"),
        ({"mellanox": [{"ib_device": f"mlx5_{i}"} for i in range(65)]},
         "mellanox: at most 64 entries"),
        ({"other_pci": 4097}, "other_pci: expected 0..4096"),
        ({"other_pci": -1}, "other_pci: expected 0..4096"),
        ({"nvswitch_proc_devices": -2}, "nvswitch_proc_devices: expected 0..64"),
        ({"imex_channels": {"major": 234, "channels": [-1]}}, "imex_channels.channels"),
        ({"mellanox": [{"ports": [{"guid": "0x0a0b0c0300d00001", "port": 0}]}]},
         "mellanox[0].ports[0].port: expected 1..254"),
        ({"mellanox": [{"vpd_vendor_field": "x" * 256}]}, "mellanox[0].vpd_vendor_field"),
        ({"gpus": {"device_id": "2901"}}, "gpus: expected a list"),
    ],
)
def test_counts_are_bounded_and_negative_refused_naming_the_key(
        change: dict[str, Any], key: str) -> None:
    with pytest.raises(SpecError) as err:
        parse({"arch": "x86_64", **change})
    assert str(err.value).startswith(key), str(err.value)


def test_count_out_of_bounds_writes_nothing_through_the_cli(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, 'gpus: [{device_id: "2901", count: 100000}]\n')
    err = one_error_line(run_cli("simulate", "--spec", str(spec), str(tmp_path / "n")))
    assert "gpus[0].count: expected 0..64, got 100000" in err
    assert not (tmp_path / "n").exists()


def test_no_entry_of_any_profile_is_written_through_a_link() -> None:
    from nvfabric.simulate.tree import layout

    for name in PROFILES:
        entries = layout(profile_spec(name))
        links = {e.path for e in entries if e.kind == "link"}
        for e in entries:
            parts = e.path.split("/")
            assert ".." not in parts and not e.path.startswith("/")
            assert not any("/".join(parts[:i]) in links for i in range(1, len(parts))), e.path


@pytest.mark.parametrize("profile", ["dgx-b200", "gb200-tray"])
def test_fakes_paths_know_every_directory_install_makes(tmp_path: Path, profile: str) -> None:
    # files: is checked against these; a directory install adds and they miss would let a
    # spec's file break the install half way.
    from nvfabric.simulate.tree import fakes_paths, layout

    root = tmp_path / "n"
    spec = profile_spec(profile)
    build(spec, str(root))
    install(str(root))
    known = set()
    for e in layout(spec):
        parts = e.path.split("/")
        known.update("/".join(parts[:i]) for i in range(1, len(parts) + (e.kind == "dir")))
    fake_dirs, _ = fakes_paths()
    for d in fake_dirs:
        parts = d.split("/")
        known.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    for dirpath, dirnames, _files in os.walk(root):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):  # links to directories are listed, not walked
                assert os.path.relpath(path, root) in known, path


def test_failed_write_removes_what_was_written(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    real_symlink = os.symlink

    def failing_symlink(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise OSError(28, "No space left on device")
        real_symlink(*args, **kwargs)

    monkeypatch.setattr(os, "symlink", failing_symlink)
    with pytest.raises(OSError):
        build(profile_spec("dgx-b200"), str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    calls[0] = 0
    with pytest.raises(OSError):
        build(profile_spec("dgx-b200"), str(tmp_path / "empty"))
    assert os.listdir(tmp_path / "empty") == []


def test_human_output_shows_control_characters_escaped(tmp_path: Path) -> None:
    # a DIR with a control character is refused (its paths would reach configs and argv),
    # and the refusal shows it escaped: nothing raw reaches the terminal
    target = tmp_path / "n\x1b[2Jx"
    proc = run_cli("simulate", "no-gpu", str(target))
    assert proc.returncode == 2, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "n\\x1b[2Jx" in proc.stderr
    assert not target.exists()

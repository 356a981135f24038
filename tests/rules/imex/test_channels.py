"""IMEX channels: the major from /proc/devices captures, channel node checks (missing, regular
file, wrong major, too tight a mode), the stray node of the dra304 capture, module parameters,
`nvfabric imex channel --create` making the node with mknod, and the simulator's channel0
(a real device where it may mknod)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.effects import imex as effects
from nvfabric.facts.imex import tray as host
from nvfabric.facts.nvidia import parse_proc_devices
from nvfabric.rules.imex import channels
from nvfabric.rules.imex.channels import ChannelFacts, DevNode
from nvfabric.simulate import build, profile_spec
from tests.cases import CORPUS
from tests.conftest import run_cli, run_json

PROC = CORPUS / "proc"

#: The shape of /proc/driver/nvidia/params (``Name: value``), IMEX lines as the driver prints
#: them; other lines as on a 570 driver.
PARAMS = (
    "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\n"
    "ImexChannelCount: {count}\nCreateImexChannel0: {create}\n"
    'RegistryDwords: ""\nTemporaryFilePath: "/var/tmp"\n'
)


def ls_nodes(text: str, directory: str) -> list[DevNode]:
    """`ls -la` lines of device nodes (``cr--------  1 root root 511,    1 ... name``)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^([cb])([rwx-]{9})\s+\d+\s+\S+\s+\S+\s+(\d+),\s+(\d+)\s+.*\s(\S+)$",
                     line)
        if not m:
            continue
        perm = sum(1 << (8 - i) for i, c in enumerate(m.group(2)) if c != "-")
        out.append(DevNode(f"{directory}/{m.group(5)}", "char" if m.group(1) == "c" else "block",
                           int(m.group(3)), int(m.group(4)), perm))
    return out


@pytest.mark.parametrize("capture", ["proc-devices-imex-channels-excerpt-dra304.txt",
                                     "proc-devices-grep-nvidia-h20-nvmodprobe9.txt"])
def test_imex_major_from_proc_devices_captures(capture: str) -> None:
    text = (PROC / capture).read_text()
    assert parse_proc_devices(text, "nvidia-caps-imex-channels") == 234


def test_dra304_node_with_the_imex_major_under_nvidia_caps_is_stray() -> None:
    listing = (PROC / "ls-dev-nvidia-caps-dra304.txt").read_text()
    caps = ls_nodes(listing, "/dev/nvidia-caps")
    assert [c.name for c in caps] == ["nvidia-cap1", "nvidia-cap2", "nvidia-cap4323"]
    facts = ChannelFacts(234, caps=tuple(caps))
    found = channels.check(facts)
    assert [f.code for f in found] == ["imex_channel_missing", "imex_channel_stray"]
    assert found[1].fields["path"] == "/dev/nvidia-caps/nvidia-cap4323"
    assert found[1].fields["minor"] == 4323


def _char(number: int, major: int = 234, mode: int = 0o666) -> DevNode:
    return DevNode(f"/dev/nvidia-caps-imex-channels/channel{number}", "char", major, number, mode)


@pytest.mark.parametrize(
    ("facts", "codes", "words"),
    [
        (ChannelFacts(234, (_char(0),)), [], ""),
        (ChannelFacts(234, ()), ["imex_channel_missing"], "does not exist"),
        (ChannelFacts(234, (DevNode("/dev/nvidia-caps-imex-channels/channel0", "file"),)),
         ["imex_channel_missing"], "regular file"),
        (ChannelFacts(234, (_char(0, major=511),)), ["imex_channel_missing"],
         "not an IMEX channel"),
        (ChannelFacts(234, (_char(0, mode=0o600),)), ["imex_channel_permissions"], "0600"),
        (ChannelFacts(None, (), driver_loaded=False), ["imex_channel_missing"], "not loaded"),
        (ChannelFacts(None, ()), ["imex_channel_missing"], "does not register"),
    ],
)
def test_channel0_checks(facts: ChannelFacts, codes: list[str], words: str) -> None:
    found = channels.check(facts)
    assert [f.code for f in found] == codes
    if found:
        assert words in found[0].message


def test_missing_channel_names_both_fixes() -> None:
    (f,) = channels.check(ChannelFacts(234, (), params={"CreateImexChannel0": "0"}))
    assert "nvfabric imex channel --create 0" in f.hint
    assert "mknod /dev/nvidia-caps-imex-channels/channel0 c 234 0" in f.hint
    assert "NVreg_CreateImexChannel0=1" in f.hint
    assert f.fields["create_imex_channel0"] is False


def test_channel_beyond_imex_channel_count_is_refused() -> None:
    facts = ChannelFacts(234, (), params=channels.parse_params(PARAMS.format(count=4, create=0)))
    (f,) = channels.check(facts, (7,))
    assert "ImexChannelCount=4" in f.message


def test_params_are_read_as_the_driver_prints_them() -> None:
    params = channels.parse_params(PARAMS.format(count=2048, create=1))
    facts = ChannelFacts(234, (), params=params)
    assert (facts.channel_count, facts.create_channel0) == (2048, True)
    assert params["TemporaryFilePath"] == '"/var/tmp"'


def test_channel_command_reports_a_regular_file_where_channel0_belongs(
        node: Callable[..., Path]) -> None:
    root = node("gb200-tray")
    channel0 = root / "dev/nvidia-caps-imex-channels/channel0"
    channel0.unlink()
    channel0.write_bytes(b"")  # what `touch` leaves: not a device
    (root / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
    (root / "proc/driver/nvidia/params").write_text(PARAMS.format(count=2048, create=0))
    out, rc = run_json("imex", "channel", "--root", str(root))
    assert rc == 1
    assert out["major"] == 234
    assert (out["imex_channel_count"], out["create_imex_channel0"]) == (2048, False)
    assert [f["code"] for f in out["findings"]] == ["imex_channel_missing"]


def test_simulated_gb200_tray_has_a_real_channel0_device(tmp_path: Path) -> None:
    # `nvfabric simulate` makes channel0 the way the driver does (c 234:0, mode 0666) when it
    # may mknod (root, as in CI); the channel check then finds nothing to fix.
    root = tmp_path / "tray"
    old_umask = os.umask(0o022)
    try:
        proc = run_cli("simulate", "gb200-tray", str(root))
    finally:
        os.umask(old_umask)
    assert proc.returncode == 0, proc.stderr
    st = os.lstat(root / "dev/nvidia-caps-imex-channels/channel0")
    out, rc = run_json("imex", "channel", "--root", str(root))
    codes = [f["code"] for f in out["findings"]]
    if os.geteuid() == 0:
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (234, 0)
        assert (rc, codes) == (0, [])
        assert out["channels"][0]["kind"] == "char"
    else:  # only root may mknod: the stand-in regular file is reported
        assert stat.S_ISREG(st.st_mode)
        assert (rc, codes) == (1, ["imex_channel_missing"])


def test_simulator_falls_back_to_a_regular_file_when_mknod_is_not_permitted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "mknod", refuse)
    build(profile_spec("gb200-tray"), str(tmp_path))
    channel0 = tmp_path / "dev/nvidia-caps-imex-channels/channel0"
    assert stat.S_ISREG(os.lstat(channel0).st_mode) and channel0.read_bytes() == b""
    assert [n.kind for n in host.read_channels(str(tmp_path)).nodes] == ["file"]


def test_channel_create_makes_a_character_device_with_mode_0666(
        node: Callable[..., Path]) -> None:
    root = node("gb200-tray")
    (root / "dev/nvidia-caps-imex-channels/channel0").unlink()  # the simulator made one
    old_umask = os.umask(0o022)
    try:
        out, rc = run_json("imex", "channel", "--root", str(root), "--create", "0")
    finally:
        os.umask(old_umask)
    assert (rc, out["findings"], out["created"]) == (
        0, [], f"{root}/dev/nvidia-caps-imex-channels/channel0")
    st = os.lstat(root / "dev/nvidia-caps-imex-channels/channel0")
    assert stat.S_ISCHR(st.st_mode)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (234, 0)
    assert stat.S_IMODE(st.st_mode) == 0o666
    assert [p.name for p in (root / "dev/nvidia-caps-imex-channels").iterdir()] == ["channel0"]


def test_channel_create_leaves_a_usable_channel_alone_and_says_it_exists(
        node: Callable[..., Path]) -> None:
    # Tester report 14: `--create 5` said "created" when channel5 was already there.
    root = node("gb200-tray")
    effects.create_channel(str(root), 5, 234)
    before = os.lstat(root / "dev/nvidia-caps-imex-channels/channel5")
    proc = run_cli("imex", "channel", "--root", str(root), "--create", "5")
    assert proc.returncode == 0, proc.stderr
    assert f"{root}/dev/nvidia-caps-imex-channels/channel5 exists already" in proc.stdout
    assert "created" not in proc.stdout
    out, rc = run_json("imex", "channel", "--root", str(root), "--create", "5")
    assert (rc, out["created"], out["already_present"]) == (
        0, None, f"{root}/dev/nvidia-caps-imex-channels/channel5")
    assert os.lstat(root / "dev/nvidia-caps-imex-channels/channel5").st_ino == before.st_ino


def test_channel_parameters_missing_from_params_print_not_set(
        node: Callable[..., Path]) -> None:
    # Tester report 14: "ImexChannelCount None, CreateImexChannel0 None".
    root = node("gb200-tray")
    params = root / "proc/driver/nvidia/params"
    if params.exists():
        params.unlink()
    proc = run_cli("imex", "channel", "--root", str(root))
    assert "ImexChannelCount not set, CreateImexChannel0 not set" in proc.stdout
    assert "None" not in proc.stdout
    params.parent.mkdir(parents=True, exist_ok=True)
    params.write_text('ImexChannelCount: 2048\nCreateImexChannel0: 1\n')
    proc = run_cli("imex", "channel", "--root", str(root))
    assert "ImexChannelCount 2048, CreateImexChannel0 1" in proc.stdout


def test_channel_create_without_the_driver_device_fails(node: Callable[..., Path]) -> None:
    spec = {"arch": "aarch64", "driver_version": "580.126.20", "modules": ["nvidia"],
            "gpus": [{"device_id": "2941", "count": 4}]}
    root = node(spec)
    out, rc = run_json("imex", "channel", "--root", str(root), "--create", "3")
    assert rc == 1
    assert out["error"]["code"] == "imex_channel_missing"


def test_read_channels_reads_real_nodes(tmp_path: Path) -> None:
    d = tmp_path / "dev/nvidia-caps-imex-channels"
    d.mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text("Character devices:\n234 nvidia-caps-imex-channels\n")
    node = effects.create_channel(str(tmp_path), 5, 234)
    facts = host.read_channels(str(tmp_path))
    assert facts.major == 234
    assert facts.node(5) == node
    assert channels.check(facts, (5,)) == ()


def test_create_refusal_is_decided_from_the_facts_alone() -> None:
    counted = ChannelFacts(234, (), params=channels.parse_params(PARAMS.format(count=4, create=0)))
    assert channels.create_refusal(counted, 3) is None
    beyond = channels.create_refusal(counted, 4)
    assert beyond is not None and beyond.exit_code == 2
    assert "beyond ImexChannelCount=4" in beyond.finding.message
    unregistered = channels.create_refusal(ChannelFacts(None, driver_loaded=False), 0)
    assert unregistered is not None and unregistered.exit_code == 1
    assert unregistered.finding.code == "imex_channel_missing"
    assert "driver is not loaded" in unregistered.finding.message


# -- what `imex channel` checks: the host channels the IMEX owner needs ------------------------

def _without_channel0(root: Path) -> Path:
    (root / "dev/nvidia-caps-imex-channels/channel0").unlink()
    return root


@pytest.mark.parametrize(("setup", "owner", "channel_owner"), [
    # Slurm's switch/nvidia_imex plugin makes each job's channel in the job's namespace
    ({"etc/slurm/slurm.conf": "ClusterName=gb\nSwitchType=switch/nvidia_imex\n"},
     "none", "slurm"),
    # the DRA driver makes a channel per ComputeDomain claim (channel N, not channel0)
    ({"var/lib/kubelet/plugins/compute-domain.nvidia.com/checkpoint.json": '{"checksum": 0}\n',
      "var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/uid-0/.keep": ""},
     "dra", "dra"),
])
def test_channel_command_needs_no_host_channel0_where_channels_are_made_per_job(
        node: Callable[..., Path], setup: dict[str, str], owner: str,
        channel_owner: str) -> None:
    root = _without_channel0(node("gb200-tray"))
    for path, text in setup.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    out, rc = run_json("imex", "channel", "--root", str(root))
    assert (rc, out["findings"]) == (0, [])
    assert (out["owner"], out["channel_owner"], out["required"]) == (owner, channel_owner, [])
    text = run_cli("imex", "channel", "--root", str(root))
    assert text.returncode == 0
    assert "checked no host channel needed" in " ".join(text.stdout.split())


@pytest.mark.parametrize(("args", "owner", "channel_owner"), [
    ((), "none", "host"),                      # nobody runs IMEX yet: the host owner to come
    (("--imex-owner", "host"), "host", "host"),
])
def test_channel_command_checks_channel0_where_the_host_needs_it(
        node: Callable[..., Path], args: tuple[str, ...], owner: str,
        channel_owner: str) -> None:
    root = _without_channel0(node("gb200-tray"))
    out, rc = run_json("imex", "channel", "--root", str(root), *args)
    assert rc == 1 and [f["code"] for f in out["findings"]] == ["imex_channel_missing"]
    assert (out["owner"], out["channel_owner"], out["required"]) == (owner, channel_owner, [0])
    text = " ".join(run_cli("imex", "channel", "--root", str(root), *args).stdout.split())
    assert "checked channel0" in text and f"(IMEX owner {owner})" in text

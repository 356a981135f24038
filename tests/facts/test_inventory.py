"""The host readers on simulated trees, corpus captures, ibstat as oracle, and fuzzed trees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvfabric.facts.infiniband import guid_from_gid
from nvfabric.facts.inventory import collect, normalise_arch
from nvfabric.facts.nvidia import parse_proc_devices, parse_proc_version
from tests import runkit
from tests.cases import CORPUS
from tests.conftest import run_cli, run_json
from tests.oracles import ibstat

LPF = "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:SMDL=SW_MNG:MODL=C7010Z"


def _ibstat_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(": ")
        if sep:
            out[key] = value
    return out


def test_dgx_b200_ibstat_prints_the_port_as_the_real_capture(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    proc = ibstat(str(root), "mlx5_0")
    assert proc.returncode == 0, proc.stderr
    ours = _ibstat_fields(proc.stdout)
    real = _ibstat_fields((CORPUS / "ibstat" / "dgxb200-ibstat-mlx5_0.txt").read_text())
    assert ours == real


def test_ibstat_lists_devices_in_the_order_the_plan_walks_them(node: Callable[..., Path]) -> None:
    root = node("hgx-b200-4lpf")
    proc = ibstat(str(root), "-l")
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split()
    assert listed == ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_8", "mlx5_9"]
    assert [d.name for d in collect(str(root)).infiniband] == listed


def test_ibstat_and_inventory_agree_on_every_port(node: Callable[..., Path]) -> None:
    root = node("hgx-b200-4lpf")
    inv = collect(str(root))
    for dev in inv.infiniband:
        fields = _ibstat_fields(ibstat(str(root), dev.name).stdout)
        (port,) = dev.ports
        assert fields["Port GUID"] == port.guid
        assert fields["Capability mask"] == f"0x{port.cap_mask:08x}"
        assert fields["Node GUID"] == dev.node_guid


def test_corpus_h100_sysfs_infiniband_reads_without_cap_mask_or_gids(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "proc" / "gpud-h100-sys-class-infiniband",
                    tmp_path / "sys" / "class" / "infiniband")
    inv = collect(str(tmp_path))
    names = [d.name for d in inv.infiniband]
    assert names == sorted(names) and "mlx5_bond_0" in names and len(names) == 9
    mlx5_0 = inv.infiniband[0]
    assert mlx5_0.ports[0].state == "4: ACTIVE"
    assert mlx5_0.ports[0].phys_state == "5: LinkUp"
    assert mlx5_0.ports[0].link_layer == "InfiniBand"
    # the capture has neither gids/0 nor cap_mask: unknown, which is not a zero GUID/mask
    assert (mlx5_0.ports[0].guid, mlx5_0.ports[0].cap_mask) == (None, None)
    assert not mlx5_0.ports[0].guid_is_zero and mlx5_0.ports[0].sm_disabled is None
    assert mlx5_0.pci is None


def test_proc_version_capture_gives_the_driver_version() -> None:
    text = (CORPUS / "proc" / "driver-nvidia-version-590.48.01-open-x86_64.txt").read_text()
    assert parse_proc_version(text) == "590.48.01"


def test_proc_devices_captures_give_the_imex_major() -> None:
    for name in ("proc-devices-imex-channels-excerpt-dra304.txt",
                 "proc-devices-grep-nvidia-h20-nvmodprobe9.txt"):
        text = (CORPUS / "proc" / name).read_text()
        assert parse_proc_devices(text, "nvidia-caps-imex-channels") == 234


def test_driver_version_falls_back_to_proc(tmp_path: Path) -> None:
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        (CORPUS / "proc" / "driver-nvidia-version-590.48.01-open-x86_64.txt").read_text())
    assert collect(str(tmp_path)).driver_version == "590.48.01"


def test_gid_to_guid() -> None:
    assert guid_from_gid("fe80:0000:0000:0000:e09d:7303:00e4:00e8") == "0xe09d730300e400e8"
    assert guid_from_gid("fe80:0000:0000:0000:0000:0000:0000:0000") == "0x0000000000000000"
    for garbage in ("garbage", "fe80::1", "fe80:0000:0000:0000:e09d:7303:00e4:00zz", ""):
        assert guid_from_gid(garbage) is None


def test_arch_spellings() -> None:
    assert [normalise_arch(a) for a in ("amd64", "x86_64", "ARM64", "aarch64", "sbsa")] == [
        "x86_64", "x86_64", "aarch64", "aarch64", "aarch64"]


def test_detect_json_contract_on_dgx_b200(node: Callable[..., Path]) -> None:
    data, rc = run_json("detect", "--root", str(node("dgx-b200")))
    assert rc == 0
    assert data["arch"] == "x86_64" and data["driver_version"] == "570.148.08"
    assert len(data["gpus"]) == 8 and data["gpus"][0]["name"] == "B200"
    assert {"pci", "device_id", "name"} <= set(data["gpus"][0])
    first = data["infiniband"][0]
    assert (first["device"], first["pci"], first["sw_mng"]) == ("mlx5_0", "0000:05:00.0", True)
    assert first["ports"][0] == {
        "port": 1, "guid": "0xe09d730300e400e8", "cap_mask": "0xa751e84a", "sm_disabled": False,
        "state": "4: ACTIVE", "phys_state": "5: LinkUp", "link_layer": "InfiniBand",
        "umad": "umad0"}


def _readable_install(base: Path) -> Path:
    """nvfabric's sources and the installed distributions it requires (their files linked,
    or copied across file systems) in ``base/site``: what a user other than the clone's
    owner can import wherever the clone lives (``mktemp -d`` makes a 0700 directory)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    site = base / "site"

    def place(src: Path, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)

    shutil.copytree(Path(__file__).resolve().parents[2] / "src/nvfabric", site / "nvfabric",
                    ignore=shutil.ignore_patterns("__pycache__"), copy_function=shutil.copy2)
    seen: set[str] = set()
    todo = [req.name for req in map(Requirement, md.requires("nvfabric") or [])
            if req.marker is None or req.marker.evaluate({"extra": ""})]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(name)
        todo += [req.name for req in map(Requirement, dist.requires or [])
                 if req.marker is None or req.marker.evaluate({"extra": ""})]
        for rel in dist.files or []:
            if rel.parts[0] != ".." and "__pycache__" not in rel.parts:
                place(Path(dist.locate_file(rel)), site / rel)
    for d in [base, *base.rglob("*")]:
        if d.is_dir():
            d.chmod(0o755)
    return site


def test_detect_and_plan_on_this_machine_real_root_without_root_privileges() -> None:
    # This machine has no GPU: fabric none, exit 0, whoever runs it.
    data, rc = run_json("plan")
    assert (rc, data["fabric"], data["services"]) == (0, "none", [])
    data, rc = run_json("detect")
    assert rc == 0 and data["gpus"] == []
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("the unprivileged half needs root and setpriv(1) (util-linux)")
    # As nobody (uid 65534), which cannot read the clone when it lives in a private directory:
    # the interpreter itself (not the clone's venv) on a readable copy of what it imports.
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    python = os.path.realpath(sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="nvfabric-unprivileged-", dir="/tmp"))
    try:
        probe = runkit.run([*nobody, python, "-I", "-S", "-c", "pass"], cwd="/")
        if probe.returncode != 0:
            pytest.skip(f"uid 65534 cannot run {python} here: {probe.stderr.strip()[:300]}")
        site = _readable_install(tmp)
        boot = (f"import sys; sys.path.insert(0, {str(site)!r}); import runpy; "
                "runpy.run_module('nvfabric', run_name='__main__', alter_sys=True)")
        proc = runkit.run([*nobody, python, "-I", "-S", "-c", boot, "plan", "--json"],
                          cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}).check()
        assert json.loads(proc.stdout)["fabric"] == "none"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_unreadable_root_is_exit_2_with_one_line(tmp_path: Path) -> None:
    proc = run_cli("plan", "--root", str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "not a readable directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_node_spec_is_exit_2_naming_the_key(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("arch: x86_64\nmellanox:\n  - {ib_device: mlx5_0, ports: [{guid: 12}]}\n")
    proc = run_cli("simulate", "--spec", str(spec), str(tmp_path / "n"))
    assert proc.returncode == 2
    assert "mellanox[0].ports[0].guid" in proc.stderr and "Traceback" not in proc.stderr
    spec.write_text("arch: [unclosed\n")
    proc = run_cli("simulate", "--spec", str(spec), str(tmp_path / "n"))
    assert proc.returncode == 2 and proc.stderr.startswith("nvfabric: input_unreadable")


def test_simulate_accepts_a_case_file(tmp_path: Path) -> None:
    from tests.cases import CASES

    proc = run_cli("simulate", "--spec", str(CASES / "P07-four-lpf-three-sm-disabled.yaml"),
                   str(tmp_path / "n"))
    assert proc.returncode == 0, proc.stderr
    assert [d.name for d in collect(str(tmp_path / "n")).infiniband][:2] == ["mlx5_0", "mlx5_10"]


attr = st.one_of(st.binary(max_size=40), st.text(max_size=40).map(str.encode))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(
    st.sampled_from([
        "sys/bus/pci/devices/0000:05:00.0/vendor", "sys/bus/pci/devices/0000:05:00.0/device",
        "sys/bus/pci/devices/0000:05:00.0/class", "sys/bus/pci/devices/0000:05:00.0/vpd",
        "sys/bus/pci/devices/0000:05:00.0/numa_node",
        "sys/class/infiniband/mlx5_0/node_guid", "sys/class/infiniband/mlx5_0/ports/1/cap_mask",
        "sys/class/infiniband/mlx5_0/ports/1/gids/0", "sys/class/infiniband/mlx5_0/ports/x/state",
        "sys/class/infiniband_mad/umad0/port", "sys/class/infiniband_mad/umad0/ibdev",
        "sys/module/nvidia/version", "proc/driver/nvidia/version", "proc/devices",
        "proc/sys/kernel/arch", "dev/nvidia-caps-imex-channels/channelx",
    ]),
    attr, max_size=16))
def test_readers_never_raise_on_garbage(tmp_path_factory: object, files: dict[str, bytes]) -> None:
    import tempfile

    from nvfabric.model.errors import NvfabricError
    from nvfabric.rules.plan import plan

    with tempfile.TemporaryDirectory() as root:
        for rel, content in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(content)
        # vendor 0x15b3 with garbage VPD must still decode to something
        os.makedirs(os.path.join(root, "sys/bus/pci/devices/0000:06:00.0"), exist_ok=True)
        with open(os.path.join(root, "sys/bus/pci/devices/0000:06:00.0/vendor"), "w") as fh:
            fh.write("0x15b3\n")
        with open(os.path.join(root, "sys/bus/pci/devices/0000:06:00.0/device"), "w") as fh:
            fh.write("0x1021\n")
        with open(os.path.join(root, "sys/bus/pci/devices/0000:06:00.0/vpd"), "wb") as fh:
            fh.write(files.get("sys/bus/pci/devices/0000:05:00.0/vpd", b"\x82\xff"))
        # Either read (garbage attributes are unknown) or refused as input_unreadable naming
        # the file (a number attribute holding what the kernel never writes: issue 10)
        try:
            inv = collect(root)
        except NvfabricError as err:
            assert err.exit_code == 2 and err.finding.code == "input_unreadable"
            assert root in err.finding.message and "\n" not in err.finding.message
            return
        plan(inv)


def test_file_where_a_directory_belongs_is_exit_2_json_under_json(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("x")
    data, rc = run_json("simulate", "dgx-b200", str(target))
    assert rc == 2 and data["error"]["code"] == "input_unreadable"
    assert str(target) in data["error"]["message"]


def test_reader_that_goes_away_is_not_a_failure(node: Callable[..., Path]) -> None:
    root = node("hgx-b200-4lpf")
    read_end, write_end = os.pipe()
    os.close(read_end)  # before nvfabric writes anything: its first write meets EPIPE
    try:
        proc = runkit.run([sys.executable, "-m", "nvfabric", "detect", "--root", str(root)],
                          stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc
    assert "Traceback" not in proc.stderr


def test_fifo_or_device_in_place_of_an_attribute_is_not_read(tmp_path: Path) -> None:
    import threading

    from nvfabric.facts.fs import read_bytes, read_text

    os.mkfifo(tmp_path / "fifo")
    got: list[bytes | None] = []
    # a plain open waits for a writer forever: read in a daemon thread, so that a hang fails
    # this test instead of stopping the suite
    reader = threading.Thread(target=lambda: got.append(read_bytes(str(tmp_path / "fifo"))),
                              daemon=True)
    reader.start()
    reader.join(30)
    assert got == [None]
    assert read_text("/dev/zero") is None  # a device would give `limit` bytes of nothing
    (tmp_path / "attr").write_bytes(b"0x15b3\n")
    assert read_text(str(tmp_path / "attr")) == "0x15b3"


def test_fifos_in_a_node_tree_never_hang_detect_or_plan(node: Callable[..., Path]) -> None:
    # Tester report item 8: a FIFO where sysfs/procfs has a file hung detect, plan, status and
    # run --dry-run. Every kind of attribute the readers open gets one.
    root = node("dgx-b200")
    fn = root / "sys/devices/pci0000:00/0000:05:00.0"
    for rel in (fn / "vpd", fn / "config", fn / "numa_node",
                fn / "infiniband/mlx5_0/ports/1/state",
                fn / "infiniband/mlx5_0/ports/1/cap_mask",
                root / "sys/class/infiniband_mad/umad0/ibdev",
                root / "proc/driver/nvidia/version", root / "sys/module/nvidia/version",
                root / "proc/devices", root / "proc/sys/kernel/arch"):
        os.unlink(rel)
        os.mkfifo(rel)
    data, rc = run_json("detect", "--root", str(root), timeout=30)
    assert rc == 0 and data["driver_version"] is None
    mlx5_0 = data["infiniband"][0]
    # its VPD is a FIFO now: not read, so whether it is an LPF is unknown (not "no")
    assert (mlx5_0["sw_mng"], mlx5_0["vpd_unreadable"]) == (None, True)
    data, rc = run_json("plan", "--root", str(root), timeout=30)
    assert rc == 1 and data["management_port"]["device"] == "mlx5_1"
    # the version files are FIFOs: unreadable, not "not loaded"
    assert [b["code"] for b in data["blockers"]] == ["driver_version_unreadable"]
    assert [f["code"] for f in data["findings"]] == ["management_port_unverified"]


def test_garbled_cap_mask_and_gid_read_as_unknown_not_zero(node: Callable[..., Path]) -> None:
    # Tester report item 10(e): a garbage cap_mask read as 0x00000000 passed for "SM enabled".
    ports = "sys/class/infiniband/{}/ports/1"
    root = node({
        "arch": "x86_64", "driver_version": "570.148.08",
        "modules": ["nvidia", "mlx5_core", "mlx5_ib", "ib_umad"],
        "gpus": [{"device_id": "2901", "count": 8}],
        "mellanox": [{"ib_device": f"mlx5_{i}", "vpd_vendor_field": LPF,
                      "ports": [{"guid": f"0x0a0b0c0300d0000{i}"}]} for i in range(3)],
        "files": {ports.format("mlx5_0") + "/cap_mask": "garbage\n",
                  ports.format("mlx5_1") + "/gids/0": "fe80::1\n",
                  ports.format("mlx5_2") + "/cap_mask": "0x1234567890\n"},
    })
    inv = collect(str(root))
    assert [(p.cap_mask, p.guid, p.sm_disabled) for d in inv.infiniband for p in d.ports] == [
        (None, "0x0a0b0c0300d00000", None), (0xA751E84A, None, False),
        (None, "0x0a0b0c0300d00002", None)]
    data, rc = run_json("detect", "--root", str(root))
    assert rc == 0
    assert [(p["cap_mask"], p["guid"], p["sm_disabled"])
            for d in data["infiniband"] for p in d["ports"]][:2] == [
        (None, "0x0a0b0c0300d00000", None), ("0xa751e84a", None, False)]
    data, rc = run_json("plan", "--root", str(root))
    assert (rc, data["management_port"]) == (1, None)
    (blocker,) = data["blockers"]
    assert blocker["code"] == "management_port_not_found"
    assert "mlx5_0/1 0x0a0b0c0300d00000 cap_mask unreadable: skipped: unreadable capability " \
        "mask" in blocker["message"]
    assert "mlx5_1/1 unreadable cap_mask 0xa751e84a: skipped: unreadable port GUID" \
        in blocker["message"]


@pytest.mark.parametrize("arch", ["ppc64le", "riscv64", "", " "])
def test_unsupported_or_empty_arch_override_is_refused(node: Callable[..., Path],
                                                       arch: str) -> None:
    root = str(node("no-gpu"))
    proc = run_cli("plan", "--root", root, "--arch", arch)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"--arch {arch!r} is not supported; supported: x86_64, aarch64" in proc.stderr


def test_arch_override_spellings_are_taken(node: Callable[..., Path]) -> None:
    root = str(node("no-gpu"))
    assert collect(root, "sbsa").arch == "aarch64"
    assert collect(root, "AMD64").arch == "x86_64"
    data, rc = run_json("detect", "--root", root, "--arch", "arm64")
    assert (rc, data["arch"]) == (0, "aarch64")

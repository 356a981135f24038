"""The bring-ups as pure functions of a snapshot: the facts are read once from a simulated
node (``nvfabric simulate`` trees: app/collect.py), then ``prepare`` decides in process
(bringup/fabricmanager.py for fabric manager and NVLSM, bringup/mnnvl.py for IMEX), both giving the
one ``Prepared`` value; the applier (effects/apply.py) makes it true on the tree."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from nvfabric.app import collect
from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import mnnvl, vendor
from nvfabric.bringup.prepared import Prepared
from nvfabric.effects.apply import apply
from nvfabric.facts import inventory
from nvfabric.facts.fmconfig import read_shipped
from nvfabric.model.errors import NvfabricError
from nvfabric.rules.imex.channels import ChannelFacts
from nvfabric.rules.imex.owner import OwnerEvidence
from nvfabric.rules.nodefacts import InstallSeen, NodeFacts, PathSeen, RunningService, VendorFacts
from nvfabric.rules.plan import Plan, plan
from tests.runkit import sim

LOCAL = "192.0.2.10"  # the simulated tray's address (nvfabric.simulate.fakes.SIM_LOCAL_IP)
CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
DRA_DIR = "var/lib/kubelet/plugins/compute-domain.nvidia.com"


def _tray(tmp_path: Path, name: str = "tray") -> tuple[Path, NodeFacts, Plan,
                                                        mnnvl.ImexRunOptions]:
    root = sim(tmp_path, "gb200-tray", name=name)
    inv = inventory.collect(str(root))
    opts = mnnvl.ImexRunOptions(root=str(root), local_addresses=(LOCAL,))
    facts = collect.imex(str(root), inv, collect.ImexRequest(
        None, opts.paths.binary, opts.paths.ctl, opts.paths.shipped_config,
        local_addresses=opts.local_addresses))
    return root, facts, plan(inv), opts


@pytest.fixture(scope="module")
def tray(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NodeFacts, Plan,
                                                            mnnvl.ImexRunOptions]:
    return _tray(tmp_path_factory.mktemp("bringup"))


def _with(facts: NodeFacts, **imex: object) -> NodeFacts:
    assert facts.imex is not None
    return replace(facts, imex=replace(facts.imex, **imex))  # type: ignore[arg-type]


def test_gb200_tray_prepares_nvidia_imex_with_its_two_files(tray: tuple) -> None:
    root, facts, p, opts = tray
    prepared = mnnvl.prepare(facts, p, opts)
    state = root / "run/nvfabric"
    assert (prepared.fabric, prepared.refusals, prepared.warnings) == ("mnnvl", (), ())
    (spec,) = prepared.processes
    assert spec.argv == (str(root / "usr/bin/nvidia-imex"), "-c",
                         str(state / "imex/config.cfg"))
    # the two files the daemon reads, and the run's owner record
    assert [f.path for f in prepared.files] == [str(state / "imex/nodes_config.cfg"),
                                                str(state / "imex/config.cfg"),
                                                str(state / "imex/owner.json")]
    assert prepared.files[0].content == LOCAL + "\n"
    assert json.loads(prepared.files[2].content) == {"owner": "host", "socket": None}
    assert prepared.channels == () and prepared.actions() == []
    assert prepared.imex is not None and prepared.imex.ownership.owner == "host"
    assert [p.text for p in prepared.imex.node_list] == [LOCAL]
    assert prepared.imex.ready_query == (str(root / "usr/bin/nvidia-imex-ctl"), "-c",
                                         str(state / "imex/config.cfg"), "-q")
    assert prepared.state_dir == str(state)


def test_dra_host_tray_asks_readiness_over_the_drivers_command_socket(tray: tuple) -> None:
    """--imex-owner dra-host: the daemon serves the DRA driver's command socket, readiness is
    asked over it as the kubelet plugin asks it, no channel is made (per claim) and the owner
    record says dra-host with its socket (host path)."""
    root, facts, p, opts = tray
    prepared = mnnvl.prepare(_with(facts, channels=MISSING), p, replace(opts, owner="dra-host"))
    sock = "/etc/nvidia-imex/imex_ctrl.sock"
    assert (prepared.refusals, prepared.warnings, prepared.channels) == ((), (), ())
    assert prepared.imex is not None
    assert prepared.imex.ready_query == (str(root / "usr/bin/nvidia-imex-ctl"), "-q",
                                         f"--u={root}{sock}")
    assert f"IMEX_CMD_UNIX_DOMAIN_PATH={root}{sock}" in prepared.files[1].content
    assert json.loads(prepared.files[2].content) == {"owner": "dra-host", "socket": sock}


def _codes(prepared: Prepared) -> tuple[list[str], list[str]]:
    return [f.code for f in prepared.refusals], [f.code for f in prepared.warnings]


MISSING = ChannelFacts(major=234)  # the driver's major, no channel0 node yet
NO_MAJOR = ChannelFacts(major=None)

IMEX_RUNNING = (RunningService("imex", 811, "process nvidia-imex"),)

#: name -> (changes to the tray's IMEX facts, daemons running, refusal codes, warning codes)
IMEX_CASES: dict[str, tuple[dict[str, object], tuple[RunningService, ...], list[str],
                            list[str]]] = {
    "as_simulated": ({}, (), [], []),
    "imex_already_running": ({}, IMEX_RUNNING, ["fabric_service_running"], []),
    "no_channel_major_refuses": ({"channels": NO_MAJOR}, (), ["imex_channel_missing"], []),
    "node_list_unreadable": ({"node_list_text": None, "node_list_why": "does not exist"}, (),
                             ["config_invalid_value"], []),
    "node_list_not_this_node": ({"node_list_text": "192.0.2.99\n"}, (),
                                ["imex_no_local_interface"], []),
    "node_list_garbage": ({"node_list_text": "not an address!\n"}, (),
                          ["config_invalid_value"], []),
    "imex_binary_missing": ({"executables": {"/usr/bin/nvidia-imex": False,
                                             "/usr/bin/nvidia-imex-ctl": True}}, (),
                            ["binary_missing"], []),
}


@pytest.mark.parametrize("case", sorted(IMEX_CASES))
def test_imex_prepare_case(tray: tuple, case: str) -> None:
    _, facts, p, opts = tray
    change, running, refusals, warnings = IMEX_CASES[case]
    prepared = mnnvl.prepare(replace(_with(facts, **change), running=running), p, opts)
    assert _codes(prepared) == (refusals, warnings)
    # a refused start still shows what it would start (the dry run lists it)
    assert [s.name for s in prepared.processes] == ["imex"]


def test_missing_channel0_is_made_first(tray: tuple) -> None:
    root, facts, p, opts = tray
    prepared = mnnvl.prepare(_with(facts, channels=MISSING), p, opts)
    target = str(root) + CHANNEL0
    assert _codes(prepared) == ([], [])  # made by the run: no imex_channel_missing warning
    assert prepared.actions() == [f"mknod {target} c 234 0 && chmod 0666 {target}"]


def test_channel_path_that_leaves_the_root_is_exit_2(tray: tuple) -> None:
    _, facts, p, opts = tray
    bad = _with(facts, channels=MISSING, channel_escape="IMEX channel: leaves the root")
    with pytest.raises(NvfabricError) as err:
        mnnvl.prepare(bad, p, opts)
    assert err.value.exit_code == 2
    # present channel0: the link is never followed, so nothing to refuse
    assert mnnvl.prepare(_with(facts, channel_escape="x"), p, opts).refusals == ()


def test_shipped_config_that_is_a_link_is_exit_2(tray: tuple) -> None:
    _, facts, p, opts = tray
    with pytest.raises(NvfabricError) as err:
        mnnvl.prepare(_with(facts, shipped=None, shipped_problem="is a symbolic link (to "
                                                                 "'/etc/passwd')"), p, opts)
    assert err.value.exit_code == 2 and "/etc/passwd" in str(err.value)


def test_no_shipped_config_uses_the_minimal_one(tray: tuple) -> None:
    _, facts, p, opts = tray
    prepared = mnnvl.prepare(_with(facts, shipped=None), p, opts)
    assert any("nvfabric's minimal config" in n for n in prepared.notes)
    assert "IMEX_NODE_CONFIG_FILE=" in prepared.files[1].content


def test_dra_tray_reads_no_start_facts_and_starts_nothing(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    (root / DRA_DIR / "checkpoint.json").parent.mkdir(parents=True)
    (root / DRA_DIR / "checkpoint.json").write_text("{}")
    inv = inventory.collect(str(root))
    opts = mnnvl.ImexRunOptions(root=str(root))
    facts = collect.imex(str(root), inv, collect.ImexRequest(
        None, opts.paths.binary, opts.paths.ctl, opts.paths.shipped_config))
    assert facts.imex is not None and facts.imex.evidence.dra
    # the decision needs no more: the config, the node list, the interfaces are not read
    assert (facts.imex.shipped, facts.imex.addresses, facts.running) == (None, (), ())
    prepared = mnnvl.prepare(facts, plan(inv), opts)
    assert prepared.imex is not None and prepared.imex.ownership.owner == "dra"
    assert (prepared.processes, prepared.files, prepared.refusals) == ((), (), ())


def test_requested_host_owner_on_a_dra_tray_is_a_conflict(tray: tuple) -> None:
    _, facts, p, opts = tray
    dra = _with(facts, evidence=OwnerEvidence(dra=(f"/{DRA_DIR} exists",)))
    prepared = mnnvl.prepare(dra, p, replace(opts, owner="host"))
    assert _codes(prepared) == (["imex_owner_conflict"], [])
    assert prepared.processes == ()


def test_applier_makes_channel0_then_writes_the_files(tmp_path: Path) -> None:
    root, facts, p, opts = _tray(tmp_path)
    (root / CHANNEL0.lstrip("/")).unlink()
    prepared = mnnvl.prepare(_with(facts, channels=MISSING), p, opts)
    said: list[str] = []
    assert apply(prepared, str(root), said.append) == []
    st = os.lstat(str(root) + CHANNEL0)
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (234, 0)
    for f in prepared.files:
        assert Path(f.path).read_text() == f.content
    assert said[0].startswith(f"created IMEX channel {root}{CHANNEL0} (c 234,0, mode 0666)")
    assert said[-3:] == [f"wrote {f.path}" for f in prepared.files]


def test_applier_refuses_a_channel_it_cannot_make_and_writes_nothing(tmp_path: Path) -> None:
    root, facts, p, opts = _tray(tmp_path)
    (root / CHANNEL0.lstrip("/")).unlink()
    (root / "dev/nvidia-caps-imex-channels").rmdir()
    (root / "dev/nvidia-caps-imex-channels").write_text("a file where the directory goes")
    prepared = mnnvl.prepare(_with(facts, channels=MISSING), p, opts)
    failed = apply(prepared, str(root), lambda line: None)
    assert [f.code for f in failed] == ["imex_channel_missing"]
    assert not any(Path(f.path).exists() for f in prepared.files)


def _fm(tmp_path: Path, profile: str) -> tuple[Path, Prepared]:
    root = sim(tmp_path, profile)
    inv = inventory.collect(str(root))
    cfg = fm.RunConfig(root=str(root))
    shipped = read_shipped(cfg.resolve(cfg.fm.shipped_config))
    return root, fm.prepare(inv, plan(inv), cfg, shipped)


def test_b200_prepares_nvlsm_then_fabric_manager_and_asks_for_its_checks(
        tmp_path: Path) -> None:
    root, prepared = _fm(tmp_path, "hgx-b200-4lpf")
    assert [s.name for s in prepared.processes] == ["nvlsm", "fabricmanager"]
    assert prepared.needs_reset  # Blackwell: RESTART_NEEDS_RESET
    checks = prepared.checks()
    assert checks.services == ("fabricmanager",)
    assert checks.executables == (str(root / "opt/nvidia/nvlsm/sbin/nvlsm"),
                                  str(root / "usr/bin/nv-fabricmanager"))
    assert checks.sockets == (str(root / "var/run/nvidia-fabricmanager/fm_sm_ipc.socket"),)
    assert checks.fm_binaries == (str(root / "usr/bin/nv-fabricmanager"),)
    assert checks.gpus and len(checks.fm_configs) == 1
    assert "FM_SM_MGMT_PORT_GUID=0x" in checks.fm_configs[0]
    facts = collect.probes(str(root), None, checks)
    assert facts.fm_versions[str(root / "usr/bin/nv-fabricmanager")].version == "570.172.08"
    assert facts.sockets == {checks.sockets[0]: False} and facts.running == ()
    assert facts.gpus is not None and len(facts.gpus) == 8


def test_a100_needs_no_gpu_reset_so_its_gpus_are_not_read(tmp_path: Path) -> None:
    _, prepared = _fm(tmp_path, "dgx-a100")
    assert [s.name for s in prepared.processes] == ["fabricmanager"]
    assert not prepared.needs_reset and not prepared.checks().gpus
    assert prepared.checks().sockets == ()


INSTALLED = "/opt/nvfabric/fabricmanager/570.172.08/share/nvidia/nvswitch"
FROM_INSTALL = vendor.Resolved({"topology": INSTALLED},
                               {"topology": "install record /opt/nvfabric/installed.json"})


@pytest.mark.parametrize("resolved, sets, shipped, want", [
    # the vendor directory is missing, the shipped config names it: both keys to the install
    (FROM_INSTALL, {}, {"TOPOLOGY_FILE_PATH": vendor.TOPOLOGY_DIR,
                        "DATABASE_PATH": vendor.TOPOLOGY_DIR},
     {"TOPOLOGY_FILE_PATH": INSTALLED, "DATABASE_PATH": INSTALLED}),
    # keys unset in the shipped config default to the vendor directory: set both
    (FROM_INSTALL, {}, {}, {"TOPOLOGY_FILE_PATH": INSTALLED, "DATABASE_PATH": INSTALLED}),
    # the operator's --fm-set wins
    (FROM_INSTALL, {"DATABASE_PATH": "/srv/db"}, {}, {"TOPOLOGY_FILE_PATH": INSTALLED}),
    # DATABASE_PATH elsewhere than the missing directory is left alone
    (FROM_INSTALL, {}, {"DATABASE_PATH": "/var/lib/fm"}, {"TOPOLOGY_FILE_PATH": INSTALLED}),
    # the vendor's own directory: nothing to add
    (vendor.Resolved({"topology": vendor.TOPOLOGY_DIR}, {"topology": "vendor"}), {}, {}, {}),
])
def test_install_topology_keys(resolved: vendor.Resolved, sets: dict[str, str],
                               shipped: dict[str, str], want: dict[str, str]) -> None:
    assert vendor.install_topology_keys(resolved, sets, shipped) == want


def test_one_dry_run_renderer_lists_a_tray(tray: tuple, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    from nvfabric.cli.run import dry_run

    root, facts, p, opts = tray
    prepared = mnnvl.prepare(_with(facts, channels=MISSING), p, opts)
    dry_run(prepared, refused=False)
    lines = capsys.readouterr().out.splitlines()
    target = str(root) + CHANNEL0
    assert lines[0] == "fabric mnnvl: IMEX owner host (run by nvfabric), detected"
    assert lines[1].startswith("  why: ")
    assert f"  imex: {root}/usr/bin/nvidia-imex -c {root}/run/nvfabric/imex/config.cfg" in lines
    ctl, cfg = f"{root}/usr/bin/nvidia-imex-ctl", f"{root}/run/nvfabric/imex/config.cfg"
    assert f"    ready when `{ctl} -c {cfg} -q` prints READY" in lines
    assert f"  action: mknod {target} c 234 0 && chmod 0666 {target}" in lines
    assert f"file {root}/run/nvfabric/imex/nodes_config.cfg (mode 644):" in lines
    assert f"  | {LOCAL}" in lines
    dry_run(prepared, refused=True)
    refused = capsys.readouterr().out.splitlines()
    assert "refused: nothing would be created, written or started" in refused
    assert not any(line.startswith(("file ", "  action: ")) for line in refused)


def test_one_dry_run_renderer_lists_a_b200(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from nvfabric.cli.run import dry_run

    root, prepared = _fm(tmp_path, "hgx-b200-4lpf")
    dry_run(prepared, refused=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "fabric nvlink5: 2 processes, in start order"
    assert lines[1].startswith(f"  nvlsm: {root}/opt/nvidia/nvlsm/sbin/nvlsm ")
    assert lines[2] == ("    ready when the socket "
                        f"{root}/var/run/nvidia-fabricmanager/fm_sm_ipc.socket listens")
    assert lines[3].startswith(f"  fabricmanager: {root}/usr/bin/nv-fabricmanager -c ")
    assert lines[4] == "    ready when every GPU's fabric state is completed"
    assert f"file {root}/run/nvfabric/fabricmanager.cfg (mode 644):" in lines
    dry_run(prepared, refused=True)
    refused = capsys.readouterr().out.splitlines()
    assert refused[-1] == "refused: nothing would be written or started"


def _present(*files: vendor.VendorFile) -> dict[tuple[str, str], PathSeen]:
    return {(vf.vendor_path, vf.kind): PathSeen(True) for vf in files}


FM_BIN, FM_CFG, TOPO = vendor.FM_FILES
SM_BIN, SM_CFG = vendor.NVLSM_FILES
RECORD = "/opt/nvfabric/fabricmanager-570.172.08/.nvfabric-install.json"


def test_vendor_layout_present_is_used_as_is() -> None:
    seen = VendorFacts(_present(FM_BIN, FM_CFG, TOPO))
    got = vendor.resolve(seen, "/", "nvswitch", {}, "570.172.08")
    assert (dict(got.paths), set(got.sources.values()), got.findings) == (
        {"--fm-bin": FM_BIN.vendor_path, "--fm-config": FM_CFG.vendor_path,
         "topology": TOPO.vendor_path}, {"vendor"}, ())


def test_missing_nvlsm_without_an_install_is_one_finding_per_file() -> None:
    seen = VendorFacts(_present(FM_BIN, FM_CFG, TOPO), {"--nvlsm-bin": None,
                                                        "--nvlsm-config": None})
    got = vendor.resolve(seen, "/node", "nvlink5", {}, "570.172.08")
    assert [(f.code, f.fields["file"]) for f in got.findings] == [
        ("nvlsm_missing", "--nvlsm-bin"), ("package_file_missing", "--nvlsm-config")]
    assert "nvfabric install --root /node --components nvlsm" in got.findings[0].hint


def test_installed_topology_is_taken_from_its_record() -> None:
    seen = VendorFacts(_present(FM_BIN, FM_CFG), {"topology": InstallSeen(
        INSTALLED, None, RECORD, "/opt/nvfabric/fabricmanager-570.172.08")})
    got = vendor.resolve(seen, "/", "nvswitch", {}, "570.172.08")
    assert (got.paths["topology"], got.sources["topology"]) == (INSTALLED,
                                                                f"install record {RECORD}")
    assert got.notes() == [f"topology: {INSTALLED} (from the install record {RECORD})"]


def test_damaged_install_says_why_it_cannot_be_used() -> None:
    why = f"its install record {RECORD} is damaged ('files' is not a list)"
    seen = VendorFacts(_present(FM_CFG, TOPO), {"--fm-bin": InstallSeen(
        None, why, RECORD, "/opt/nvfabric/fabricmanager-570.172.08")})
    (f,) = vendor.resolve(seen, "/", "nvswitch", {}, "570.172.08").findings
    assert f.code == "binary_missing" and why in f.message
    assert f.fields["install_record"] == RECORD


def test_typed_path_leading_out_of_the_root_is_the_operators_mistake() -> None:
    seen = VendorFacts({("/srv/fm", "exec"): PathSeen(False, "/usr/local/bin/fm"),
                        **_present(FM_CFG, TOPO)})
    with pytest.raises(vendor.TypedPathMissing) as err:
        vendor.resolve(seen, "/node", "nvswitch", {"--fm-bin": "/srv/fm"}, None)
    assert str(err.value) == ("--fm-bin /srv/fm: leads out of the root (to /usr/local/bin/fm) "
                              "under --root /node")


def test_vendor_seen_reads_no_install_record_when_the_vendor_files_are_there(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    seen = collect.vendor_seen(str(root), "nvswitch", {}, "570.172.08", None)
    assert all(s.present for s in seen.paths.values()) and seen.installs == {}
    (root / FM_BIN.vendor_path.lstrip("/")).unlink()
    seen = collect.vendor_seen(str(root), "nvswitch", {}, "570.172.08", None)
    assert seen.paths[(FM_BIN.vendor_path, "exec")] == PathSeen(False)
    assert seen.installs == {"--fm-bin": None}  # no nvfabric install on the node

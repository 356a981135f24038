"""The commands nvfabric prints for the operator to type (a next step, the fix in a hint) do,
typed as printed, what the command that printed them meant: on the same root, with the same
state directory, config and download directory (nvfabric.model.commandline). Each case names
the command that prints one; the first is the field report: ``fetch --root DIR`` printed
``nvfabric install --from ...`` without ``--root``, which installed into the host's
/opt/nvfabric."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nvfabric.app.lock import already_running
from nvfabric.artifacts import debinstall
from nvfabric.bringup import mnnvl
from nvfabric.model.commandline import HintContext, command_line
from nvfabric.model.health import GpuFabric
from nvfabric.model.services import ServiceState
from nvfabric.rules.imex import channels
from nvfabric.rules.nodefacts import RunningService
from nvfabric.rules.preflight import service_running
from nvfabric.rules.verdict import Inputs, verdict
from tests.artifacts.test_debinstall import NVML, dpkg_tree, put
from tests.cli.test_fetch_mirror import Mirror, deb_stanza, mirror  # noqa: F401 - fixture
from tests.cli.test_install_from import make_deb
from tests.conftest import run_cli, run_json
from tests.runkit import sim


def test_command_line_quotes_for_the_shell_and_keeps_placeholders() -> None:
    assert command_line("status") == "nvfabric status"
    assert command_line("status", root="/srv/img 2") == "nvfabric status --root '/srv/img 2'"
    assert command_line("run", root="/", state_dir="/run/nvfabric") == "nvfabric run"
    assert command_line("run", root="/r", state_dir="/run/x") == (
        "nvfabric run --root /r --state-dir /run/x")
    assert command_line("imex", "config", options=(("--config", None), ("--peers", "FILE"))
                        ) == "nvfabric imex config --peers FILE"
    # systemctl's and dpkg's --root come before the action
    assert command_line("-s", "PACKAGE", root="/r", program="dpkg") == "dpkg --root /r -s PACKAGE"


def test_fetch_into_a_root_prints_the_install_that_installs_into_that_root(
    mirror: Mirror, node: Callable[..., Path], tmp_path: Path  # noqa: F811
) -> None:
    root = node("gb200-tray")
    dpkg_tree(root, {"libc6": ["/usr/lib/aarch64-linux-gnu/libc.so.6"]})
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    version = "580.126.20-1ubuntu1"
    deb = make_deb(f"Package: nvidia-imex\nVersion: {version}\nArchitecture: arm64\n"
                   "Maintainer: t <t@example.invalid>\nDepends: nvidia-modprobe\n"
                   "Description: IMEX\n", ("/usr/bin/nvidia-imex",))
    mirror.add(f"nvidia-imex_{version}_arm64.deb", deb)
    mirror.add("Packages", deb_stanza("nvidia-imex", version, deb, "arm64").encode())
    dest = tmp_path / "cache dir"
    args = ("fetch", "--root", str(root), "--source", "apt", "--mirror", mirror.url,
            "--components", "imex", "--arch", "aarch64", "--dest", str(dest), "--retries", "0")
    out, rc = run_json(*args)
    assert rc == 0, out
    line = out["next"]
    assert line == (f"nvfabric install --from {shlex.quote(str(dest))} --root {root} "
                    "--arch aarch64")
    text = run_cli(*args)
    assert f"offline install (at boot, e.g. on a runfile-driver image): {line}" in text.stdout
    # typed as printed (a dry run here), it installs into the root, not into the host
    argv = shlex.split(line)
    assert argv[0] == "nvfabric"
    done, rc = run_json(*argv[1:], "--dry-run")
    assert rc == 0, done
    assert done["commands"][0][:3] == ["dpkg", "--root", str(root)]


def test_the_run_lock_and_ready_hints_name_the_root_and_state_dir(
        node: Callable[..., Path]) -> None:
    assert "`nvfabric status --root /srv/node` shows" in already_running(7, "/l", "/srv/node").hint
    assert "`nvfabric status` shows" in already_running(7, "/l").hint
    root = node("dgx-b200")
    out, rc = run_json("ready", "--root", str(root), "--state-dir", "/run/other")
    assert rc == 1
    assert f"start `nvfabric run --root {root} --state-dir /run/other`" in (
        out["findings"][0]["hint"])


def test_the_preflight_names_the_root_in_its_status_command() -> None:
    running = (RunningService("fabricmanager", 42, "/usr/bin/nv-fabricmanager"),)
    [finding] = service_running(running, ("fabricmanager",), "/host")
    assert "`nvfabric status --root /host` shows it" in finding.hint


def test_the_channel_fix_creates_the_channel_under_the_root() -> None:
    assert "`nvfabric imex channel --root /host --create 3`" in channels.fixes(
        3, 234, HintContext("/host"))
    facts = channels.ChannelFacts(234, root="/host")
    [finding] = channels.check(facts)
    assert "`nvfabric imex channel --root /host --create 0`" in finding.hint


def test_the_missing_node_list_hint_writes_it_where_run_reads_it(tmp_path: Path) -> None:
    from nvfabric.bringup.mnnvl import ImexPaths
    from nvfabric.rules.imex.owner import OwnerEvidence
    from nvfabric.rules.nodefacts import ImexFacts

    imex = ImexFacts(OwnerEvidence(), channels.ChannelFacts(234),
                     node_list_path="/etc/x/nodes.cfg", node_list_text=None,
                     node_list_why="does not exist")
    opts = mnnvl.ImexRunOptions(root="/host", paths=ImexPaths(shipped_config="/etc/x/imex.cfg"))
    _, _, finding = mnnvl._node_list(imex, opts)
    assert finding is not None
    assert ("`nvfabric imex config --root /host --config /etc/x/imex.cfg --peers FILE`"
            in finding.hint)


@pytest.mark.parametrize("root", ["/", "/srv/image"])
def test_the_dpkg_and_systemctl_fixes_of_install_from_name_the_root(root: str) -> None:
    failed = debinstall._failed(root, ["dpkg"], "exit status 1", "", [], ["nvidia-imex"])
    where = "" if root == "/" else f" --root {root}"
    assert f"`dpkg{where} --audit`" in failed.finding.message
    assert f"`dpkg{where} -s PACKAGE`" in failed.finding.hint


# -- hints that type a command or a host path name the node asked about: its --root, the
# unit or run that runs the daemon there (nvfabric.model.commandline.HintContext)

ROOT = "/srv/node"


def _spans(text: str) -> list[str]:
    """The commands a hint types (its backtick spans)."""
    return text.split("`")[1::2]


def _typed_on(hint: str, root: str) -> None:
    """Every nvfabric command of ``hint`` carries ``--root root``; every ``--log`` file and
    every absolute path an nvfabric command takes lies under ``root``."""
    for span in _spans(hint):
        for part in span.split("|"):
            argv = shlex.split(part)
            if argv and argv[0] == "nvfabric":
                assert ["--root", root] == argv[argv.index("--root"):argv.index("--root") + 2], \
                    (span, hint)
                paths = [w for w in argv[1:] if w.startswith("/") and w != root]
                assert all(p.startswith(root + "/") for p in paths), (span, hint)


def _gpu(index: int, state: str, status: str | None = None, **more: Any) -> GpuFabric:
    return GpuFabric(index, f"GPU-{index}", f"00000000:{0x18 + index:02X}:00.0", state,  # type: ignore[arg-type]
                     status, **more)


def _verdict_hints(ctx: HintContext) -> dict[str, str]:
    """One finding per rule whose hint types a command, judged with ``ctx``: ``{label: hint}``."""
    reg = _gpu(0, "in_progress")
    done = _gpu(0, "completed", "success")
    fm_up = (ServiceState("fabricmanager", True, age_s=900.0),)
    fm_down = (ServiceState("fabricmanager", False),)
    cases = {
        "registration_stuck nvswitch": Inputs((reg,), "nvswitch", fm_down),
        "registration_stuck nvlink5": Inputs((reg,), "nvlink5", (
            ServiceState("nvlsm", True, age_s=900.0), *fm_up)),
        "partial_registration left out": Inputs((done, _gpu(1, "not_started")),
                                                "nvswitch", fm_up),
        "registration_error": Inputs((_gpu(0, "completed", "NVML_ERROR_UNKNOWN"),), "nvswitch",
                                     fm_up),
        "registration_error nvlink5": Inputs((_gpu(0, "completed", "NVML_ERROR_UNKNOWN"),),
                                             "nvlink5", fm_up),
        "fabric_unhealthy": Inputs((_gpu(0, "completed", "success",
                                         health_summary="unhealthy"),), "nvswitch", fm_up),
        "fm_inactive": Inputs((done,), "nvswitch", fm_down),
        "fm_inactive before Hopper": Inputs((_gpu(0, "not_supported"),), "nvswitch", fm_down),
        "nvlsm_missing": Inputs((done,), "nvlink5", (ServiceState("nvlsm", False), *fm_up)),
        "imex_not_ready": Inputs((_gpu(0, "completed", "success", clique_id=1,
                                       cluster_uuid="1fa25eba-abfb-58b7-bfcd-4ac6101528a8"),),
                                 "mnnvl",
                                 (ServiceState("imex", False),), imex_owner="host"),
    }
    out = {}
    for label, inp in cases.items():
        found = verdict(replace(inp, hints=ctx)).findings
        code = label.split()[0]
        (f,) = [f for f in found if f.code == code]
        out[label] = f.hint
    return out


@pytest.mark.parametrize("label", sorted(_verdict_hints(HintContext()).keys()))
def test_every_verdict_hint_types_commands_for_the_root_it_was_asked_about(label: str) -> None:
    hint = _verdict_hints(HintContext(ROOT, fm_runner="nvfabric"))[label]
    assert any(s.startswith(("nvfabric ", "systemctl ")) for s in _spans(hint)), hint
    _typed_on(hint, ROOT)
    # nvfabric runs fabric manager here: the vendor unit is no command to type
    assert "nvidia-fabricmanager" not in hint, hint
    # on the node itself, the same hints carry no --root
    assert "--root" not in _verdict_hints(HintContext("/", fm_runner="nvfabric"))[label]


@pytest.mark.parametrize(("runner", "ours", "typed", "not_typed"), [
    # nvfabric runs fabric manager by hand (or a live run): its run, never a unit
    ("nvfabric", False, f"`nvfabric run --root {ROOT}`", "systemctl"),
    # nvfabric.service runs it: nvfabric's unit, not the vendor's
    ("nvfabric", True, "`systemctl status nvfabric.service`", "nvidia-fabricmanager.service`"),
    # the vendor unit owns it: that unit
    ("unit", False, "`systemctl status nvidia-fabricmanager.service`", "nvfabric.service`"),
    # the node was read and nothing runs it: nvfabric run starts it
    ("none", False, f"start it with `nvfabric run --root {ROOT}`", "systemctl"),
    # not known (a bug report, a capture): both ways, no claim that nothing runs it
    (None, False, "`journalctl -u nvidia-fabricmanager.service` on the host whose root "
     f"{ROOT} is where the vendor unit runs it", "nothing runs"),
])
def test_registration_stuck_names_whoever_runs_fabric_manager(
        runner: str | None, ours: bool, typed: str, not_typed: str) -> None:
    ctx = HintContext(ROOT, fm_runner=runner, nvfabric_unit=ours)
    hint = _verdict_hints(ctx)["registration_stuck nvswitch"]
    assert typed in hint and not_typed not in hint, hint
    assert f"`nvfabric doctor --root {ROOT} --log {ROOT}/var/log/fabricmanager.log`" in hint
    if "systemctl" in typed:  # another root: systemctl asks the host that root belongs to
        assert f"on the host whose root {ROOT} is" in hint


def test_a_fabric_manager_logging_to_stderr_is_explained_from_its_unit_journal() -> None:
    hint = _verdict_hints(HintContext(ROOT, fm_runner="unit", fm_log=""))[
        "registration_stuck nvswitch"]
    assert (f"`journalctl -u nvidia-fabricmanager.service -o cat | nvfabric doctor --root {ROOT} "
            "--log -`") in hint


@pytest.mark.parametrize(("owner", "runner", "typed", "not_typed"), [
    ("host", "unit", "`systemctl restart nvidia-imex.service`", "nvfabric run"),
    ("dra-host", "unit", "`journalctl -u nvidia-imex.service`", "nvfabric run"),
    ("slurm", "unit", "the job's Slurm prolog restarts it", "nvfabric run"),
    ("slurm", "prolog", "the job's Slurm prolog starts it", "systemctl"),
    ("dra", None, "`kubectl get computedomains -A`", "systemctl"),
    ("nvfabric", "nvfabric", f"`nvfabric run --root {ROOT}`", "nvidia-imex.service"),
    ("dra-host", None, f"`nvfabric run --root {ROOT} --imex-owner dra-host`", "systemctl"),
    ("none", None, f"`nvfabric run --root {ROOT}` becomes its owner", "systemctl"),
])
def test_the_imex_hint_follows_the_imex_owner(owner: str, runner: str | None, typed: str,
                                              not_typed: str) -> None:
    said = HintContext(ROOT, imex_owner=owner, imex_runner=runner).imex_start()
    assert typed in said and not_typed not in said, said
    _typed_on(said, ROOT)


def test_imex_not_ready_where_the_host_unit_owns_imex_names_the_unit_not_run() -> None:
    hint = _verdict_hints(HintContext(ROOT, imex_owner="host", imex_runner="unit"))[
        "imex_not_ready"]
    assert "`systemctl restart nvidia-imex.service`" in hint and "nvfabric run" not in hint
    assert f"`nvfabric imex domain --root {ROOT}`" in hint
    hint = _verdict_hints(HintContext(ROOT, imex_owner="nvfabric", imex_runner="nvfabric",
                                      imex_config="/run/nvfabric/imex/config.cfg"))[
        "imex_not_ready"]
    assert (f"`nvfabric imex domain --root {ROOT} --config /run/nvfabric/imex/config.cfg`"
            in hint)


def _enable(root: Path, unit: str) -> None:
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / unit).symlink_to(f"/usr/lib/systemd/system/{unit}")


def _finding(out: dict[str, Any], code: str) -> dict[str, Any]:
    (f,) = [f for f in out["findings"] if f["code"] == code]
    return f


def test_status_on_a_simulated_node_names_its_root_and_who_runs_fabric_manager(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    # nothing runs fabric manager: nvfabric run starts it; doctor reads the node's log
    hint = _finding(run_json("status", "--root", str(root))[0], "registration_stuck")["hint"]
    assert f"start it with `nvfabric run --root {root}`" in hint
    assert f"`nvfabric doctor --root {root} --log {root}/var/log/fabricmanager.log`" in hint
    assert "systemctl" not in hint
    _typed_on(hint, str(root))
    # nvfabric runs it (its pid file): nvfabric's run, never the vendor unit
    (root / "run/nvfabric").mkdir(parents=True)
    (root / "run/nvfabric/fabricmanager.pid").write_text(f"{os.getpid()}\n")
    hint = _finding(run_json("status", "--root", str(root))[0], "registration_stuck")["hint"]
    assert f"`nvfabric run --root {root}`" in hint and "nvidia-fabricmanager" not in hint
    # the vendor unit owns it (enabled, its process gone): that unit
    (root / "run/nvfabric/fabricmanager.pid").unlink()
    _enable(root, "nvidia-fabricmanager.service")
    hint = _finding(run_json("status", "--root", str(root))[0], "registration_stuck")["hint"]
    assert "`systemctl status nvidia-fabricmanager.service`" in hint
    assert "nvfabric run" not in hint


def test_status_on_a_tray_whose_host_unit_owns_imex_names_that_unit(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    _enable(root, "nvidia-imex.service")
    out, _ = run_json("status", "--root", str(root))
    hint = _finding(out, "imex_not_ready")["hint"]
    assert "`systemctl restart nvidia-imex.service`" in hint and "nvfabric run" not in hint
    assert f"`nvfabric imex domain --root {root}`" in hint


def test_the_runs_stuck_hints_name_the_root(tmp_path: Path) -> None:
    from tests.bringup.test_prepare import _fm, _tray

    root, prepared = _fm(tmp_path, "hgx-h100")
    (fm_spec,) = prepared.processes
    hint = fm_spec.ready_probe.stuck_hint
    assert f"`nvfabric status --root {root}`" in hint
    assert f"`nvfabric doctor --root {root} --log {root}/var/log/fabricmanager.log`" in hint
    troot, facts, p, opts = _tray(tmp_path)
    (imex,) = mnnvl.prepare(facts, p, opts).processes
    assert (f"`nvfabric imex domain --root {troot} --config /run/nvfabric/imex/config.cfg`"
            in imex.ready_probe.stuck_hint)


@pytest.mark.parametrize("profile", ["hgx-h100", "dgx-b200", "gb200-tray"])
def test_a_dry_run_says_which_files_of_its_argv_the_run_writes(
        tmp_path: Path, profile: str) -> None:
    root = sim(tmp_path, profile)
    out, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 0, out
    planned = {f["path"] for f in out["files"]}
    text = run_cli("run", "--root", str(root), "--dry-run").stdout
    assert any(w in planned for proc in out["processes"] for w in proc["argv"])
    for proc in out["processes"]:
        named = [w for w in proc["argv"] if w in planned]  # NVLSM's: shipped files only
        assert proc["written_by_run"] == named, proc
        for path in named:
            assert (f"    note: {path} is written by the run before it starts {proc['service']} "
                    "(content below); typed by hand before that, this command finds no such "
                    "file") in text.splitlines()


def test_the_trays_dry_run_names_the_node_list_under_the_root(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    text = run_cli("run", "--root", str(root), "--dry-run").stdout
    assert f"  note: IMEX node list: 1 entry from {root}/etc/nvidia-imex/nodes_config.cfg (" \
        in text


def test_status_on_sxm_gpus_without_their_nvswitches_says_the_plan_and_asks_for_nothing_given(
        tmp_path: Path) -> None:
    # 8 H100 SXM with a loaded driver and no NVSwitch on PCI (a guest given the GPUs alone):
    # the plan is `none` with sxm_gpus_without_nvswitch; status said `registration_stuck`
    # with "pass --root or --fabric", both given, and not the plan's warning
    spec = tmp_path / "guest.yaml"
    spec.write_text('driver_version: "570.148.08"\nmodules: [nvidia]\n'
                    'gpus:\n  - device_id: "2330"\n    count: 8\n')
    root = tmp_path / "node"
    assert run_cli("simulate", "--spec", str(spec), str(root)).returncode == 0
    out, _ = run_json("status", "--root", str(root))
    by_code = {f["code"]: f for f in out["findings"]}
    assert by_code["sxm_gpus_without_nvswitch"]["severity"] == "warning"
    hint = by_code["registration_stuck"]["hint"]
    assert "pass --root" not in hint and "this node's plan starts nothing" in hint
    assert f"`nvfabric plan --root {root}`" in hint


def test_status_on_a_node_whose_plan_is_blocked_names_the_blocker(tmp_path: Path) -> None:
    # a DGX B200 without the IB stack: plan blocks with ib_stack_missing; status said only
    # registration_stuck and "start it with nvfabric run", which the same blocker refuses
    root = sim(tmp_path, "dgx-b200")
    for gone in ("sys/module/mlx5_ib", "sys/module/ib_umad", "sys/class/infiniband",
                 "sys/class/infiniband_mad"):
        shutil.rmtree(root / gone, ignore_errors=True)
    out, rc = run_json("status", "--root", str(root))
    assert (rc, out["verdict"]) == (1, "unhealthy")
    by_code = {f["code"]: f for f in out["findings"]}
    assert by_code["ib_stack_missing"]["severity"] == "error"

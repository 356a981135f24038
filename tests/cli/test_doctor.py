"""`nvfabric doctor` through the real CLI: several files, stdin, journalctl -o cat, --fabric,
--root, exit codes, unreadable input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from tests.cases import CASES, CORPUS
from tests.conftest import run_cli, run_json

LOGS = CORPUS / "logs"
RTX = LOGS / "rtx4090-start-sh-pre-nvl5-nothing-to-do-cubestudio29.txt"


def test_several_files_aggregate_into_one_list() -> None:
    out, rc = run_json("doctor", "--log", str(LOGS / "fm-version-mismatch-530-gpuop544.txt"),
                       "--log", str(LOGS / "talos-fm-config-invalid-value-ext511.txt"))
    assert rc == 1
    assert [f["code"] for f in out["findings"]] == ["version_mismatch", "config_invalid_value"]
    assert out["lines"] == 2


def test_journalctl_o_cat_from_stdin() -> None:
    # `journalctl -o cat` drops the date/host/ident prefix: bare messages.
    cat = "\n".join(line.split(": ", 1)[1] for line in RTX.read_text().splitlines()) + "\n"
    out, rc = run_json("doctor", "--fabric", "none", "--log", "-", stdin=cat)
    assert rc == 0
    assert {(f["code"], f["severity"]) for f in out["findings"]} == {
        ("fm_not_applicable", "info"), ("service_exited", "info")}
    assert all("first_seen" not in f for f in out["findings"])  # no timestamps in -o cat


def test_same_log_on_an_nvlink5_node_is_an_error(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    out, rc = run_json("doctor", "--root", str(root), "--log", str(RTX))
    assert (out["fabric"], rc) == ("nvlink5", 1)
    assert "nvlsm_missing" in {f["code"] for f in out["findings"]}


def test_with_root_the_hints_type_their_commands_and_paths_for_that_node(
        node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    umad = LOGS / "hgx-b200-start-sh-nvl5-ib_umad-not-loaded-canvos700.txt"
    out, _ = run_json("doctor", "--root", str(root), "--log", str(umad), "--log", str(RTX))
    hints = {f["code"]: f["hint"] for f in out["findings"]}
    on_host = f"on the host whose root {root} is"
    assert hints["missing_kernel_module"] == (
        f"`modprobe ib_umad` {on_host} now, and add `ib_umad` to {root}/etc/modules-load.d/ "
        "so it is loaded at boot")
    assert f"`nvfabric plan --root {root}` for the management port" in hints["nvlsm_missing"]
    assert f"(`nvfabric run --root {root}`)" in hints["nvlsm_missing"]
    assert (f"`journalctl --root {root} -u nvidia-fabricmanager -o cat | nvfabric doctor --log - "
            f"--root {root}`") in hints["service_exited"]
    # the same logs without --root: the commands of the node itself, as typed there
    out, _ = run_json("doctor", "--fabric", "nvlink5", "--log", str(umad), "--log", str(RTX))
    hints = {f["code"]: f["hint"] for f in out["findings"]}
    assert hints["missing_kernel_module"] == (
        "`modprobe ib_umad` now, and add `ib_umad` to /etc/modules-load.d/ so it is loaded at "
        "boot")
    assert "`nvfabric plan` for the management port" in hints["nvlsm_missing"]
    assert not any("--root" in h or "on the host" in h for h in hints.values())


def test_with_root_on_a_tray_the_imex_hint_names_the_unit_that_runs_imex(
        node: Callable[..., Path], tmp_path: Path) -> None:
    root = node("gb200-tray")
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "nvidia-imex.service").symlink_to("/usr/lib/systemd/system/nvidia-imex.service")
    # the IMEX daemon's start-up log of a node list without this node's address (case D07)
    case = yaml.safe_load((CASES / "D07-imex-no-interface.yaml").read_text(encoding="utf-8"))
    (tmp_path / "imex.log").write_text(case["input"], encoding="utf-8")
    out, _ = run_json("doctor", "--root", str(root), "--log", str(tmp_path / "imex.log"))
    hint = next(f["hint"] for f in out["findings"] if f["code"] == "imex_no_local_interface")
    assert hint.endswith(
        f"then start IMEX again: nvidia-imex.service runs it: `systemctl restart "
        f"nvidia-imex.service` on the host whose root {root} is; `systemctl status "
        f"nvidia-imex.service` and `journalctl -u nvidia-imex.service` on the host whose root "
        f"{root} is say why it stopped")
    assert "nvfabric run" not in hint
    # NCCL's MNNVL self-test (the catalogue's line): the channel device under the root
    log = tmp_path / "nccl.log"
    log.write_text("gb200-t07:2231:2231 [0] mnnvl.cc:74 NCCL WARN MNNVL (cliqueSize 72) is "
                   "available but not working on this system. Check the IMEX channel "
                   "configuration (/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to "
                   "ignore this issue.\n")
    out, _ = run_json("doctor", "--root", str(root), "--log", str(log))
    (f,) = out["findings"]
    assert f"`ls -l {root}/dev/nvidia-caps-imex-channels`" in f["hint"]
    assert f"`nvfabric imex owner --root {root}`" in f["hint"]
    assert f"({root}/dev/nvidia-caps-imex-channels/channel0)" in f["hint"]


def test_unknown_platform_says_both_meanings() -> None:
    out, rc = run_json("doctor", "--log", str(RTX))
    f = next(f for f in out["findings"] if f["code"] == "fm_not_applicable")
    assert f["severity"] == "warning" and "--fabric" in f["hint"] and "NVLSM" in f["hint"]
    assert out["fabric"] is None


def test_clean_log_exits_0_with_no_findings() -> None:
    out, rc = run_json("doctor", "--log", str(LOGS / "fm-590.48.01-systemctl-status-pre-nvl5-"
                                                      "node-02.txt"))
    assert (rc, out["findings"]) == (0, [])


def test_human_output_lists_hints() -> None:
    proc = run_cli("doctor", "--log", str(LOGS / "hgx-b200-start-sh-nvl5-ib_umad-not-loaded-"
                                                 "canvos700.txt"))
    assert proc.returncode == 1
    assert "missing_kernel_module" in proc.stdout and "modprobe ib_umad" in proc.stdout


def test_unreadable_log_is_exit_2(tmp_path: Path) -> None:
    proc = run_cli("doctor", "--log", str(tmp_path / "missing.log"))
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_log_is_required() -> None:
    assert run_cli("doctor").returncode == 2


def test_unreadable_log_under_json_carries_a_hint(tmp_path: Path) -> None:
    # Tester report 14: JSON errors carried "hint": "".
    out, rc = run_json("doctor", "--log", str(tmp_path / "missing.log"))
    assert (rc, out["error"]["code"]) == (2, "input_unreadable")
    assert out["error"]["hint"]


def test_human_output_says_how_often_a_line_repeated(tmp_path: Path) -> None:
    """The driver's ImexSessionApi line by the thousand: the text output gives the count and
    the first/last time as --json does (before: one line, no count)."""
    log = tmp_path / "kern.log"
    log.write_text("".join(
        f"[{1000 + i}.5] NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi\n"
        for i in range(12000)), encoding="utf-8")
    proc = run_cli("doctor", "--log", str(log))
    assert proc.returncode == 0
    assert "seen 12000 times, first 1000.5, last 12999.5" in proc.stdout


def test_human_output_counts_repeats_of_lines_without_a_timestamp(tmp_path: Path) -> None:
    # field report: `--json` said count 2, the text output said nothing of it
    log = tmp_path / "fm.log"
    log.write_text("request to start failed [NV_WARN_NOTHING_TO_DO]\n" * 2, encoding="utf-8")
    proc = run_cli("doctor", "--log", str(log))
    assert proc.returncode == 0
    assert "seen 2 times" in proc.stdout and ", first" not in proc.stdout

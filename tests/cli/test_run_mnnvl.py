"""`nvfabric run` on simulated GB200 trays with the fake nvidia-imex / nvidia-imex-ctl (RUN.md
R07): host ownership brings IMEX up (channel0 made, configs written, ready on `-q` READY);
waiting for peers, a hanging ctl and a daemon that finds no local interface (D07); DRA
ownership with the host unit enabled is refused; DRA, Slurm and `none` owners start nothing."""

from __future__ import annotations

import json
import os
import shlex
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvfabric.model import keyvalue
from tests.cases import CASES, CORPUS, check_expect
from tests.conftest import run_cli, run_json
from tests.runkit import Run, codes, crash, events, finding, sim

LOCAL = "192.0.2.10"  # the simulated tray's address (nvfabric.simulate.fakes.SIM_LOCAL_IP)
#: /proc/net/fib_trie of the simulated tray (shape: Linux fib_trie_seq_show).
FIB_TRIE = f"""\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
     |-- {LOCAL}
        /32 host LOCAL
     |-- 192.0.2.255
        /32 link BROADCAST
"""


def tray(tmp_path: Path, faults: dict[str, Any] | None = None,
         channel0: str = "device") -> Path:
    """A simulated GB200 tray; ``channel0="file"`` puts an empty regular file where the
    channel device belongs (what a `touch`, or a simulator without mknod, leaves)."""
    root = sim(tmp_path, "gb200-tray", faults)
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/fib_trie").write_text(FIB_TRIE)
    if channel0 == "file":
        path = root / "dev/nvidia-caps-imex-channels/channel0"
        path.unlink()
        path.write_bytes(b"")
    return root


def peers(tmp_path: Path, *entries: str) -> str:
    path = tmp_path / "peers.cfg"
    path.write_text("".join(e + "\n" for e in entries))
    return str(path)


def test_gb200_tray_comes_up_with_host_ownership(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = tray(tmp_path, channel0="file")
    run = start(root, "--json")
    run.wait_line(r"nvfabric: fabric ready in")
    channel = os.lstat(root / "dev/nvidia-caps-imex-channels/channel0")
    assert stat.S_ISCHR(channel.st_mode) and stat.S_IMODE(channel.st_mode) == 0o666
    assert os.major(channel.st_rdev) == 234
    cfg_path = root / "run/nvfabric/imex/config.cfg"
    cfg = keyvalue.parse(cfg_path.read_text()).items()
    assert cfg["DAEMONIZE"] == "0" and cfg["LOG_FILE_NAME"] == ""
    assert cfg["IMEX_NODE_CONFIG_FILE"] == str(root / "run/nvfabric/imex/nodes_config.cfg")
    assert (root / "run/nvfabric/imex/nodes_config.cfg").read_text() == LOCAL + "\n"
    (exec_,) = events(root, "imex", "exec")
    assert exec_["argv"] == ["-c", str(cfg_path)]
    assert (root / "run/nvfabric/ready").exists()
    assert events(root, "fabricmanager") == []
    run.signal()
    assert run.wait() == 0
    out = run.result()
    assert (out["result"], out["fabric"], out["imex"]["owner"]) == ("stopped", "mnnvl", "host")
    assert out["imex"]["channels"]["channels"][0]["kind"] == "char"
    assert "IMEX: READY, domain UP (1 node)" in run.log


def test_waiting_for_peers_is_not_ready_and_names_them(
    tmp_path: Path, start: Callable[..., Run],
) -> None:
    root = tray(tmp_path, {"imex": {"peers": "down"}})
    run = start(root, "--imex-peers", peers(tmp_path, "198.51.100.1", LOCAL, "198.51.100.3"))
    # Until the daemon has read its node list, nvidia-imex-ctl knows no peers ("domain DOWN");
    # the run's probes after that name the two it waits for.
    line = run.wait_line(r"IMEX not READY yet: .*waiting for")
    assert line.endswith(", waiting for 198.51.100.1 (node 0), 198.51.100.3 (node 2)")
    run.signal()
    assert run.wait() == 0
    assert "fabric ready" not in run.log


def test_imex_still_not_ready_after_the_timeout_is_imex_not_ready(
    tmp_path: Path, start: Callable[..., Run],
) -> None:
    root = tray(tmp_path, {"imex": {"peers": "down"}})
    run = start(root, "--json", "--ready-timeout", "1",
              "--imex-peers", peers(tmp_path, LOCAL, "198.51.100.3"))
    run.wait_line(r"nvfabric: IMEX not READY yet: .*198\.51\.100\.3")
    line = run.wait_line(r"imex_not_ready")
    assert "(last answer: domain DEGRADED, waiting for 198.51.100.3" in line
    assert "IMEX peers of its node list" in line  # the hint
    run.signal()
    assert run.wait() == 0
    out = run.result()
    (stuck,) = [f for f in out["findings"] if f["code"] == "imex_not_ready"]
    assert (stuck["service"], stuck["severity"]) == ("imex", "warning")
    assert "198.51.100.3" in stuck["last_probe"] and "nvfabric imex domain" in stuck["hint"]
    assert "registration_stuck" not in run.log and "GPU fabric state" not in run.log
    assert "fabric ready" not in run.log


def test_hanging_ctl_is_cut_off_and_run_stays_up(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = tray(tmp_path, {"imex-ctl": {"hang": True}})
    run = start(root, "--imex-ctl-timeout", "0.3")
    run.wait_line(r"nvidia-imex-ctl -q did not answer within 0.3 s \(killed")
    run.signal()
    assert run.wait() == 0
    assert "fabric ready" not in run.log


def test_d07_daemon_without_local_interface_fails_the_run(
    tmp_path: Path, start: Callable[..., Run],
) -> None:
    with open(CASES / "D07-imex-no-interface.yaml", encoding="utf-8") as fh:
        case = yaml.safe_load(fh)
    # nvfabric believes the tray is 192.0.2.10; the daemon sees other interfaces.
    root = tray(tmp_path, {"imex": {"local_ips": ["198.51.100.99"]}})
    run = start(root, "--json")
    assert run.wait() == 1
    out = run.result()
    exited = finding(out, "service_exited")
    assert check_expect({"codes": case["expect"]["codes"]},
                        {"findings": out["findings"]}, 1) == []
    assert "imex_no_local_interface" in exited["diagnosis"]
    assert "No matching network interface" in "\n".join(exited["last_lines"])
    assert "fabric ready" not in run.log


def test_d07_node_list_without_this_host_is_refused_before_start(tmp_path: Path) -> None:
    root = tray(tmp_path)
    echoed = (CORPUS / "imex/imex-570.124.06-nodes-config-echo-and-startup-dra298.log")
    entries = echoed.read_text().split("nodes_config.cfg:\n", 1)[1].splitlines()[:2]
    out, rc = run_json("run", "--root", str(root), "--imex-peers", peers(tmp_path, *entries))
    assert (rc, out["result"], codes(out)) == (1, "refused", ["imex_no_local_interface"])
    assert events(root, "imex") == []
    assert not (root / "run/nvfabric/imex").exists()


def test_dra_owner_with_host_unit_enabled_is_refused(tmp_path: Path) -> None:
    root = tray(tmp_path, channel0="file")
    (root / "var/lib/kubelet/plugins/compute-domain.nvidia.com").mkdir(parents=True)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    os.symlink("/usr/lib/systemd/system/nvidia-imex.service", wants / "nvidia-imex.service")
    out, rc = run_json("run", "--root", str(root))
    assert (rc, out["result"], codes(out)) == (1, "refused", ["imex_owner_conflict"])
    assert "systemctl mask nvidia-imex.service" in out["findings"][0]["hint"]
    assert events(root, "imex") == []
    assert stat.S_ISREG(os.lstat(root / "dev/nvidia-caps-imex-channels/channel0").st_mode)


def test_dra_owner_starts_nothing_and_run_and_status_agree_no_host_channel_is_needed(
        tmp_path: Path) -> None:
    # The DRA driver creates a channel per claim: a tray without channel0 is no error for run
    # (which used to log imex_channel_missing) nor for status.
    root = tray(tmp_path, channel0="file")
    (root / "var/lib/kubelet/plugins/compute-domain.nvidia.com").mkdir(parents=True)
    out, rc = run_json("run", "--root", str(root))
    assert (rc, out["result"], out["imex"]["owner"]) == (0, "not_started", "dra")
    assert out["imex"]["channel_owner"] == "dra"
    assert "imex_channel_missing" not in codes(out)
    status, _ = run_json("status", "--root", str(root))
    assert "imex_channel_missing" not in codes(status)
    assert status["imex"]["channel_findings"] == []
    assert events(root, "imex") == []


def test_host_unit_owner_without_channel0_is_an_error_for_run_and_status_alike(
        tmp_path: Path) -> None:
    root = tray(tmp_path, channel0="file")
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    os.symlink("/usr/lib/systemd/system/nvidia-imex.service", wants / "nvidia-imex.service")
    out, rc = run_json("run", "--root", str(root))
    assert (rc, out["result"], out["imex"]["runner"]) == (0, "not_started", "unit")
    assert codes(out) == ["imex_channel_missing"]
    status, _ = run_json("status", "--root", str(root))
    assert "imex_channel_missing" in codes(status)
    assert status["verdict"] in ("degraded", "unhealthy")


def test_slurm_and_none_owners_start_nothing(tmp_path: Path) -> None:
    root = tray(tmp_path)
    (root / "etc/slurm/prolog.d").mkdir(parents=True)
    (root / "etc/slurm/slurm.conf").write_text("Prolog=/etc/slurm/prolog.d/*\n")
    (root / "etc/slurm/prolog.d/50-imex.sh").write_text(
        "#!/bin/sh\nnvidia-imex -c /etc/nvidia-imex/config.cfg\n")
    out, rc = run_json("run", "--root", str(root))
    assert (rc, out["result"], out["imex"]["owner"]) == (0, "not_started", "slurm")
    assert out["imex"]["runner"] == "prolog"
    out, rc = run_json("run", "--root", str(root), "--imex-owner", "none")
    assert (rc, out["result"], out["imex"]["owner"]) == (0, "not_started", "none")
    assert events(root, "imex") == []


def test_crash_after_ready_stops_the_run(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = tray(tmp_path, {"imex": {"crash_on_sigusr1": True, "exit_code": 3}})
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    crash(root, "imex")
    assert run.wait() == 1
    f = finding(run.result(), "service_exited")
    assert (f["service"], f["exit_code"], f["phase"]) == ("imex", 3,
                                                        "after the fabric was ready")


def test_dry_run_shows_argv_files_and_mknod_and_changes_nothing(tmp_path: Path) -> None:
    root = tray(tmp_path, channel0="file")
    out, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 0
    cfg = str(root / "run/nvfabric/imex/config.cfg")
    assert out["processes"] == [{"service": "imex", "argv": [
        str(root / "usr/bin/nvidia-imex"), "-c", cfg], "written_by_run": [cfg]}]
    assert [f["path"] for f in out["files"]] == [str(root / "run/nvfabric/imex/nodes_config.cfg"),
                                                str(root / "run/nvfabric/imex/config.cfg"),
                                                str(root / "run/nvfabric/imex/owner.json")]
    assert out["imex"]["ready_query"] == [str(root / "usr/bin/nvidia-imex-ctl"), "-c",
                                          str(root / "run/nvfabric/imex/config.cfg"), "-q"]
    channel = root / "dev/nvidia-caps-imex-channels/channel0"  # under the root (issue 10)
    assert out["actions"] == [f"mknod {channel} c 234 0 && chmod 0666 {channel}"]
    assert not (root / "run/nvfabric").exists()
    assert stat.S_ISREG(os.lstat(root / "dev/nvidia-caps-imex-channels/channel0").st_mode)


@pytest.mark.parametrize(("owner", "query"), [
    ([], ["-c", "{root}/run/nvfabric/imex/config.cfg", "-q"]),
    (["--imex-owner", "dra-host"], ["-q", "--u={root}/etc/nvidia-imex/imex_ctrl.sock"]),
])
def test_the_readiness_query_printed_is_the_one_run_asks(
        tmp_path: Path, start: Callable[..., Run], owner: list[str], query: list[str]) -> None:
    """The dry run prints the readiness query (dra-host: over the DRA driver's command socket,
    as its kubelet plugin asks it), `run --json` lists it, and the run asks exactly that."""
    root = tray(tmp_path)
    ctl = str(root / "usr/bin/nvidia-imex-ctl")
    argv = [ctl, *(q.format(root=root) for q in query)]
    text = run_cli("run", "--root", str(root), "--dry-run", *owner)
    assert text.returncode == 0, text.stderr
    assert f"    ready when `{shlex.join(argv)}` prints READY" in text.stdout.splitlines()
    out, rc = run_json("run", "--root", str(root), "--dry-run", *owner)
    assert (rc, out["imex"]["ready_query"]) == (0, argv)
    run = start(root, *owner)
    run.wait_line(r"nvfabric: fabric ready in")
    asked = [e["argv"] for e in events(root, "imex-ctl", "call") if "-q" in e["argv"]]
    assert asked and all(a == argv[1:] for a in asked)
    run.close()


def test_missing_imex_binary_is_refused(tmp_path: Path) -> None:
    root = tray(tmp_path)
    (root / "usr/bin/nvidia-imex").unlink()
    out, rc = run_json("run", "--root", str(root))
    assert (rc, codes(out)) == (1, ["binary_missing"])


@pytest.mark.parametrize(("os_release", "source"), [
    ('ID=ubuntu\nVERSION_ID="24.04"\n', "apt"), ('ID="rhel"\nVERSION_ID="9.4"\n', "rpm")])
def test_missing_imex_package_names_the_install_line_for_this_node(
        tmp_path: Path, os_release: str, source: str) -> None:
    """RUN.md R08 on a GB200 tray: each missing IMEX file has the `nvfabric install` line that
    fixes it, for this node (--root) and its package family (before: no line at all)."""
    root = tray(tmp_path)
    (root / "etc/os-release").write_text(os_release, encoding="utf-8")
    (root / "usr/bin/nvidia-imex").unlink()
    (root / "usr/bin/nvidia-imex-ctl").unlink()
    out, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 1 and codes(out) == ["binary_missing", "binary_missing"]
    line = f"nvfabric install --root {root} --source {source} --components imex --driver-version"
    assert [f["file"] for f in out["findings"]] == ["--imex-bin", "--imex-ctl"]
    assert all(f["install"].startswith(line) and f["install"] in f["hint"]
               for f in out["findings"])


def test_hanging_ctl_past_the_ready_timeout_is_imex_not_ready_never_fabric_manager(
    tmp_path: Path, start: Callable[..., Run],
) -> None:
    root = tray(tmp_path, {"imex-ctl": {"hang": True}})
    run = start(root, "--json", "--imex-ctl-timeout", "0.3", "--ready-timeout", "1")
    run.wait_line(r"imex_not_ready")
    run.signal()
    assert run.wait() == 0
    out = run.result()
    (stuck,) = [f for f in out["findings"] if f["code"] == "imex_not_ready"]
    assert "did not answer within 0.3 s" in stuck["last_probe"]
    assert "IMEX daemon has not reported READY" in stuck["message"]
    assert "(last answer: nvidia-imex-ctl -q did not answer within 0.3 s" in stuck["message"]
    assert "No answer: nvidia-imex-ctl hangs" in stuck["hint"]
    text = run.log + json.dumps(out["findings"])  # (the plan's reasons say "never FM")
    assert "fabric manager" not in text and "registration_stuck" not in text


def test_one_run_per_tray_and_sigkill_takes_imex_with_it(tmp_path: Path) -> None:
    from tests.runkit import alive, until

    root = tray(tmp_path)
    first = Run(root)
    try:
        first.wait_line(r"nvfabric: fabric ready in")
        for args in ((), ("--dry-run",)):
            out, rc = run_json("run", "--root", str(root), *args)
            assert (rc, out["result"], codes(out)) == (1, "refused", ["already_running"])
            assert out["findings"][0]["pid"] == first.proc.pid
        (imex,) = [e["pid"] for e in events(root, "imex", "exec")]
        first.signal(9)
        first.wait()
        until(lambda: not alive(imex), "nvidia-imex is gone with the run")
    finally:
        first.close()
        for e in events(root, "imex", "exec"):
            if alive(e["pid"]):
                os.kill(e["pid"], 9)


def test_mnnvl_run_json_has_the_one_run_shape(tmp_path: Path) -> None:
    """GB200 outcomes carry every key of supervisor.run_result, plus the IMEX section."""
    from nvfabric.supervisor.outcome import run_result
    from tests.conftest import run_cli

    root = tmp_path / "tray"
    assert run_cli("simulate", "gb200-tray", str(root)).returncode == 0
    proc = run_cli("run", "--root", str(root), "--dry-run", "--json",
                   "--imex-local-address", "192.0.2.10")
    out = json.loads(proc.stdout)
    assert set(run_result("would_start", 0, "mnnvl", [])) <= set(out)
    assert out["dry_run"] is True and out["fabric"] == "mnnvl" and "imex" in out
    assert [p["service"] for p in out["processes"]] == ["imex"]


@pytest.mark.parametrize("kind", ["link-out", "link-in", "empty", "comments-only"])
def test_shipped_imex_config_that_is_a_link_or_empty_is_refused(tmp_path: Path, kind: str) -> None:
    """Like fabric manager's shipped file (issue 10 section 2): a config.cfg that is a link
    (to /etc/passwd, or even to a copy inside the tree) or has no KEY=VALUE line is exit 2
    naming it; before the fix the link was read as missing and nvfabric's minimal config was
    written instead, and an empty file gave a config of nvfabric's keys alone."""
    root = tray(tmp_path)
    cfg = root / "etc/nvidia-imex/config.cfg"
    if kind == "link-out":
        cfg.unlink()
        cfg.symlink_to("/etc/passwd")
    elif kind == "link-in":
        (root / "etc/nvidia-imex/config.cfg.real").write_text(cfg.read_text())
        cfg.unlink()
        cfg.symlink_to("config.cfg.real")
    elif kind == "empty":
        cfg.write_text("")
    else:
        cfg.write_text("# LOG_LEVEL=4\n\n")
    for extra in (["--dry-run"], []):
        out, rc = run_json("run", "--root", str(root), *extra)
        assert rc == 2, out
        assert out["error"]["code"] == "input_unreadable"
        assert str(cfg) in out["error"]["message"]
        assert ("symbolic link" if kind.startswith("link") else "no KEY=VALUE") \
            in out["error"]["message"]
        assert not (root / "run/nvfabric/imex").exists()


def test_missing_shipped_imex_config_still_uses_the_minimal_config(tmp_path: Path) -> None:
    root = tray(tmp_path)
    (root / "etc/nvidia-imex/config.cfg").unlink()
    out, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 0, out
    cfg = [f["content"] for f in out["files"] if f["path"].endswith("imex/config.cfg")][0]
    assert "no shipped config.cfg was found" in cfg


@pytest.mark.parametrize("kind", ["missing", "link-out", "dangling", "directory"])
def test_unread_node_list_says_why(tmp_path: Path, kind: str) -> None:
    """A nodes_config.cfg that links out of the root is read as missing (never followed), but
    the message said 'does not exist' of a file that is there: it names the link now."""
    root = tray(tmp_path)
    path = root / "etc/nvidia-imex/nodes_config.cfg"
    path.unlink()
    if kind == "link-out":
        path.symlink_to("/etc/passwd")
    elif kind == "dangling":
        path.symlink_to("nowhere.cfg")
    elif kind == "directory":
        path.mkdir()
    out, rc = run_json("run", "--root", str(root), "--dry-run")
    assert (rc, codes(out)) == (1, ["config_invalid_value"])
    message = finding(out, "config_invalid_value")["message"]
    assert str(path) in message
    assert {"missing": "does not exist", "link-out": "symbolic link to '/etc/passwd'",
            "dangling": "symbolic link to 'nowhere.cfg'",
            "directory": "is not a regular file"}[kind] in message

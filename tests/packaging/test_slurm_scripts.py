"""packaging/slurm/nvfabric-imex-prolog run directly (as slurmd would, with Slurm's variables
and nothing else in the environment): validation of every value before it reaches an argv,
the settings file read as data, the drain call's exact argv, and an epilog that never signals
a process that is not the run its prolog started. The live Slurm test is
tests/integration/test_slurm_imex.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import runkit
from tests.conftest import REPO
from tests.runkit import sim, stop_pids

PROLOG = REPO / "packaging/slurm/nvfabric-imex-prolog"
EPILOG = REPO / "packaging/slurm/nvfabric-imex-epilog"
NVFABRIC = Path(sys.executable).parent / "nvfabric"


@pytest.fixture
def scontrol(tmp_path: Path) -> Path:
    """A stand-in scontrol that records its argv, one JSON list per call."""
    log = tmp_path / "scontrol.calls"
    path = tmp_path / "scontrol"
    path.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    path.chmod(0o755)
    return path


def drains(scontrol: Path) -> list[list[str]]:
    log = scontrol.parent / "scontrol.calls"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def script(path: Path, env: dict[str, str],
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return runkit.run([str(path)], env=env, timeout=timeout)


def slurm_env(root: Path, scontrol: Path, **extra: str) -> dict[str, str]:
    # NVFABRIC_IMEX_WAIT: a bound, not a duration: a ready tray returns in 1-3 s, but a loaded
    # 2-core machine (seven test suites at once) has taken over 10 s for fake daemon starts.
    # NVFABRIC_IMEX_POLL: the domain is checked every 0.2 s instead of every second (a ready
    # tray is seen ready sooner); the tests that wait their whole bound keep 1 s (each check is
    # an nvfabric process).
    return {"SLURM_JOB_ID": "41", "SLURMD_NODENAME": "gb-07", "SLURM_NODELIST": "gb-07",
            "NVFABRIC": str(NVFABRIC), "NVFABRIC_ROOT": str(root),
            "NVFABRIC_SCONTROL": str(scontrol), "NVFABRIC_IMEX_WAIT": "40",
            "NVFABRIC_IMEX_POLL": "0.2",
            "NVFABRIC_SLURM_DEFAULTS": str(root.parent / "no-such-defaults"), **extra}


def processes_naming(root: Path) -> list[int]:
    """Pids of the processes whose command line names ``root`` (the run a prolog started in
    its own session, nvidia-imex, a ctl call)."""
    mark = str(root).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture
def tray(tmp_path: Path) -> Iterator[Path]:
    """A simulated GB200 tray named gb-07; afterwards nothing naming it is left running, also
    when the test failed before its epilog (the prolog's run lives in its own session: only
    its pid stops it)."""
    root = sim(tmp_path, "gb200-tray")
    (root / "etc/hostname").write_text("gb-07\n")
    yield root
    stop_pids(lambda: processes_naming(root))


@pytest.mark.parametrize("name,value", [
    ("SLURM_NODELIST", "gb-07;touch /tmp/nvfabric-pwned"),
    ("SLURM_NODELIST", "$(touch /tmp/nvfabric-pwned)"),
    ("SLURM_NODELIST", "-gb-07"),
    ("SLURM_NODELIST", ""),
    ("SLURM_JOB_ID", "41 42"),
    ("SLURMD_NODENAME", "gb-07 State=RESUME"),
])
def test_a_bad_slurm_value_is_refused_before_any_command(
        tray: Path, scontrol: Path, name: str, value: str) -> None:
    env = slurm_env(tray, scontrol, **{name: value})
    done = script(PROLOG, env)
    assert done.returncode == 1
    shown = name.replace("SLURM_NODELIST", "SLURM_JOB_NODELIST")
    assert "config_invalid_value" in done.stderr and shown in done.stderr
    assert not Path("/tmp/nvfabric-pwned").exists()
    assert (tray / "etc/nvidia-imex/nodes_config.cfg").read_text() == "192.0.2.10\n"
    if name == "SLURMD_NODENAME":
        assert drains(scontrol) == []  # no node to drain by a name that is not one
    else:
        assert drains(scontrol)[0][:3] == ["update", "NodeName=gb-07", "State=DRAIN"]


def test_the_settings_file_is_data_with_known_keys_and_the_environment_wins(
        tray: Path, scontrol: Path, tmp_path: Path) -> None:
    defaults = tmp_path / "nvfabric-slurm"
    defaults.write_text("# comment\nNVFABRIC_IMEX_START=none\nNVFABRIC_ROOT=$(touch "
                        f"{tmp_path}/ran)\n")
    env = slurm_env(tray, scontrol, NVFABRIC_SLURM_DEFAULTS=str(defaults))
    env.pop("NVFABRIC_ROOT")
    done = script(PROLOG, env)
    assert done.returncode == 1 and not (tmp_path / "ran").exists()
    assert "NVFABRIC_ROOT must be a plain absolute path" in done.stderr
    defaults.write_text("NVFABRIC_IMEX_STRAT=none\n")
    done = script(PROLOG, slurm_env(tray, scontrol, NVFABRIC_SLURM_DEFAULTS=str(defaults)))
    assert done.returncode == 1 and "line 1: not KEY=VALUE with a known key" in done.stderr
    # The environment wins over the file: its valid NVFABRIC_IMEX_WAIT over the file's
    # "forever" (else refused), its NVFABRIC_DRAIN=no over the file's yes (no drain call).
    defaults.write_text("NVFABRIC_DRAIN=yes\nNVFABRIC_IMEX_WAIT=forever\n")
    (scontrol.parent / "scontrol.calls").unlink()  # the two refusals above drained
    done = script(PROLOG, slurm_env(tray, scontrol, NVFABRIC_SLURM_DEFAULTS=str(defaults),
                                    NVFABRIC_DRAIN="no", SLURM_NODELIST="gb-[01-03]"))
    assert done.returncode == 1 and "imex_no_local_interface" in done.stderr, done.stderr
    assert drains(scontrol) == []


@pytest.mark.parametrize("value", ["0", "0.05", "1.25", "61", ".5", "1e1",
                                   "$(touch /tmp/nvfabric-pwned)"])
def test_a_poll_interval_that_is_not_tenths_of_a_second_up_to_60_is_refused(
        tray: Path, scontrol: Path, value: str) -> None:
    done = script(PROLOG, slurm_env(tray, scontrol, NVFABRIC_IMEX_POLL=value))
    assert done.returncode == 1
    assert "config_invalid_value: NVFABRIC_IMEX_POLL must be seconds, 0.1 to 60" in done.stderr
    assert not Path("/tmp/nvfabric-pwned").exists()
    assert not (tray / "run/nvfabric-slurm/slurm-job").exists()  # nothing started


def test_a_node_list_without_this_tray_drains_with_the_code_and_no_hint(
        tray: Path, scontrol: Path) -> None:
    done = script(PROLOG, slurm_env(tray, scontrol, SLURM_NODELIST="gb-[01-03]"))
    assert done.returncode == 1
    assert "job 41: imex_no_local_interface: " in done.stderr
    assert "hint:" in done.stderr  # the operator's stderr keeps the hint
    [call] = drains(scontrol)
    assert call[:3] == ["update", "NodeName=gb-07", "State=DRAIN"]
    assert call[3].startswith("Reason=nvfabric imex_no_local_interface: ")
    assert "hint" not in call[3] and len(call[3]) <= len("Reason=") + 200
    assert not (tray / "run/nvfabric-slurm/slurm-job").exists()


def test_prolog_then_epilog_on_a_tray(tray: Path, scontrol: Path) -> None:
    env = slurm_env(tray, scontrol)
    done = script(PROLOG, env)
    assert done.returncode == 0, done.stderr
    assert "IMEX domain UP" in done.stdout
    job, kind, pid = (tray / "run/nvfabric-slurm/slurm-job").read_text().split()
    assert (job, kind) == ("41", "nvfabric")
    assert (tray / "etc/nvidia-imex/nodes_config.cfg").read_text() == "gb-07\n"
    done = script(EPILOG, env)
    assert done.returncode == 0, done.stderr
    assert f"stopping nvfabric run (pid {pid}, started for job 41)" in done.stdout
    assert not Path(f"/proc/{pid}").exists() or _zombie(int(pid))
    assert not (tray / "run/nvfabric-slurm/slurm-job").exists()
    assert drains(scontrol) == []


def test_with_the_switch_plugin_the_prolog_makes_no_channel_and_imex_owner_names_both(
        tray: Path, scontrol: Path) -> None:
    # slurm.conf sets SwitchType=switch/nvidia_imex: slurmstepd makes each job's channel in
    # its own namespace (and slurmd empties the host's directory), so the prolog creates none
    (tray / "etc/slurm").mkdir(parents=True)
    (tray / "etc/slurm/slurm.conf").write_text("SwitchType=switch/nvidia_imex\n")
    (tray / "dev/nvidia-caps-imex-channels/channel0").unlink()
    env = slurm_env(tray, scontrol)
    done = script(PROLOG, env)
    assert done.returncode == 0, done.stderr
    assert "slurmstepd creates the job's own (switch/nvidia_imex)" in done.stdout
    assert not (tray / "dev/nvidia-caps-imex-channels/channel0").exists()
    out = json.loads(subprocess.run(
        [str(NVFABRIC), "imex", "owner", "--root", str(tray), "--json"], capture_output=True,
        text=True, timeout=120, check=False).stdout)
    # the daemon: nvfabric run started by the prolog; the channels: the switch plugin
    assert (out["owner"], out["runner"], out["channel_owner"]) == ("slurm", "prolog", "slurm")
    assert out["run"]["state_dir"] == "/run/nvfabric-slurm" and out["run"]["slurm_prolog"]
    assert script(EPILOG, env).returncode == 0
    # NVFABRIC_IMEX_CHANNEL=0 names the channel whatever slurm.conf says; a bad value is refused
    done = script(PROLOG, slurm_env(tray, scontrol, NVFABRIC_IMEX_CHANNEL="0"))
    assert done.returncode == 0, done.stderr
    assert (tray / "dev/nvidia-caps-imex-channels/channel0").exists()
    assert script(EPILOG, env).returncode == 0
    done = script(PROLOG, slurm_env(tray, scontrol, NVFABRIC_IMEX_CHANNEL="jobs"))
    assert done.returncode == 1 and "NVFABRIC_IMEX_CHANNEL must be job, auto" in done.stderr


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_epilog_never_signals_a_pid_that_is_not_the_recorded_run(
        tray: Path, scontrol: Path) -> None:
    other = runkit.Child(["sleep", "60"])
    try:
        state = tray / "run/nvfabric-slurm"
        state.mkdir(parents=True)
        (state / "slurm-job").write_text(f"40 nvfabric {other.pid}\n")
        done = script(EPILOG, slurm_env(tray, scontrol))
        assert done.returncode == 0, done.stderr
        time.sleep(0.2)
        assert other.proc.poll() is None  # still running: not the nvfabric run it claims to be
        assert not (state / "slurm-job").exists()
    finally:
        other.close()


def test_a_recorded_run_that_is_gone_says_nothing_on_slurmds_stderr(
        tray: Path, scontrol: Path) -> None:
    # The record names a pid whose process has exited: its /proc/PID/cmdline cannot be opened.
    # A redirection of stderr written after the input's ("< FILE 2>/dev/null") comes too late
    # for the shell's own "cannot open" message, which went to slurmd's stderr.
    gone = subprocess.Popen(["true"])
    gone.wait()
    state = tray / "run/nvfabric-slurm"
    state.mkdir(parents=True)
    (state / "slurm-job").write_text(f"40 nvfabric {gone.pid}\n")
    done = script(EPILOG, slurm_env(tray, scontrol))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert not (state / "slurm-job").exists()


def test_no_input_redirection_of_the_scripts_can_leak_the_shells_cannot_open() -> None:
    # The kind, in the text: a command whose input file may fail to open has its stderr
    # redirected around the whole command ({ ...; } 2>/dev/null), never after the "<".
    text = PROLOG.read_text()
    leaks = [line.strip() for line in text.splitlines()
             if re.search(r'<\s*"[^"]*"\s*2>', line)]
    assert leaks == []


def test_on_a_hgx_node_prolog_and_epilog_do_nothing(tmp_path: Path, scontrol: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    env = slurm_env(root, scontrol)
    done = script(PROLOG, env)
    assert done.returncode == 0 and "nothing to do" in done.stdout, done.stderr
    assert not (root / "run/nvfabric-slurm").exists()
    done = script(EPILOG, env)
    assert done.returncode == 0 and "started nothing" in done.stdout


def test_unit_mode_restarts_the_vendor_unit_and_stops_it_when_the_domain_stays_down(
        tray: Path, scontrol: Path, tmp_path: Path) -> None:
    # A stand-in systemctl that records its argv and starts nothing: the domain never comes
    # up, so the prolog restarts nvidia-imex.service, waits its bound, stops the unit again
    # and drains the node with what nvfabric imex domain says.
    log = tmp_path / "systemctl.calls"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(f"#!{sys.executable}\nimport json, sys\n"
                         f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    systemctl.chmod(0o755)
    env = slurm_env(tray, scontrol, NVFABRIC_IMEX_START="unit", NVFABRIC_IMEX_WAIT="1",
                    NVFABRIC_IMEX_POLL="1", NVFABRIC_SYSTEMCTL=str(systemctl))
    done = script(PROLOG, env)
    assert done.returncode == 1
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [["restart", "nvidia-imex.service"], ["stop", "nvidia-imex.service"]]
    [call] = drains(scontrol)
    assert call[3].startswith("Reason=nvfabric imex_domain_degraded: "), call
    assert (tray / "etc/nvidia-imex/nodes_config.cfg").read_text() == "gb-07\n"
    assert not (tray / "run/nvfabric-slurm/slurm-job").exists()
    done = script(EPILOG, env)  # nothing recorded any more: the epilog stops nothing
    assert done.returncode == 0 and len(log.read_text().splitlines()) == 2


@pytest.mark.parametrize("drop,bad", [
    (("SLURM_NODELIST",), {}),
    ((), {"SLURM_NODELIST": "gb-07;reboot"}),
    (("SLURM_JOB_ID",), {}),
    ((), {"SLURM_JOB_ID": "41 42"}),
])
def test_the_epilog_stops_the_recorded_run_whatever_the_job_values_say(
        tray: Path, scontrol: Path, drop: tuple[str, ...], bad: dict[str, str]) -> None:
    # The epilog needs no node list and no job number to stop what the prolog recorded: a
    # missing or odd value must not leave IMEX running on the node (it did: the epilog
    # validated the prolog's values first, failed, drained the node and stopped nothing).
    done = script(PROLOG, slurm_env(tray, scontrol))
    assert done.returncode == 0, done.stderr
    pid = (tray / "run/nvfabric-slurm/slurm-job").read_text().split()[2]
    env = slurm_env(tray, scontrol, **bad)
    for name in drop:
        env.pop(name)
    done = script(EPILOG, env)
    assert done.returncode == 0, done.stderr
    assert f"stopping nvfabric run (pid {pid}, started for job 41)" in done.stdout
    assert not Path(f"/proc/{pid}").exists() or _zombie(int(pid))
    assert not (tray / "run/nvfabric-slurm/slurm-job").exists()
    assert drains(scontrol) == []
    # A job number the epilog cannot use is said on stderr and never reaches an argv.
    if "SLURM_JOB_ID" in drop or "SLURM_JOB_ID" in bad:
        assert "SLURM_JOB_ID is not a job number: ignored" in done.stderr
        assert "41 42" not in done.stdout


def test_the_prolog_returns_only_once_its_nvfabric_run_declared_ready(
        tray: Path, scontrol: Path) -> None:
    # The job starts when the prolog exits 0: by then the run the prolog started must have
    # said ready itself (its ready file, "fabric ready in"), not only nvidia-imex-ctl's domain
    # UP; it raced: the run's first probe came before nvidia-imex was READY, the prolog saw
    # the domain UP and returned, and the epilog stopped a run that never declared ready
    # (tests/integration/test_slurm_imex.py, under load). The fault makes that lag 4 s.
    (tray / "var/lib/nvfabric-sim/faults.json").write_text(
        json.dumps({"imex-ctl": {"ready_delay_s": 4}}))
    state = tray / "run/nvfabric-slurm"
    state.mkdir(parents=True)
    (state / "ready").write_text("{}\n")  # a stale one, left by a SIGKILLed run, counts not
    env = slurm_env(tray, scontrol, NVFABRIC_IMEX_POLL="0.5")
    try:
        done = script(PROLOG, env)
        assert done.returncode == 0, done.stderr
        assert json.loads((state / "ready").read_text())["services"], "not the run's ready file"
        assert "fabric ready in" in (state / "run.log").read_text()
    finally:
        script(EPILOG, env)


def test_a_run_that_never_reports_ready_fails_the_prolog_with_imex_not_ready(
        tray: Path, scontrol: Path) -> None:
    (tray / "var/lib/nvfabric-sim/faults.json").write_text(
        json.dumps({"imex-ctl": {"ready_delay_s": 600}}))
    done = script(PROLOG, slurm_env(tray, scontrol, NVFABRIC_IMEX_WAIT="4", NVFABRIC_IMEX_POLL="1"))
    assert done.returncode == 1
    assert "job 41: imex_not_ready: IMEX domain UP but nvfabric run has not reported ready" \
        in done.stderr, done.stderr
    [call] = drains(scontrol)
    assert call[3].startswith("Reason=nvfabric imex_not_ready: "), call
    assert not (tray / "run/nvfabric-slurm/slurm-job").exists()  # the run it started stopped


def test_a_run_refused_by_its_preflight_drains_with_the_runs_finding(
        tray: Path, scontrol: Path) -> None:
    # the run's refusal is logged as every run line is, time first; the prolog still reads
    # the finding out of it (not the fallback "nvfabric run failed")
    (tray / "usr/bin/nvidia-imex").unlink()
    done = script(PROLOG, slurm_env(tray, scontrol))
    assert done.returncode == 1
    [call] = drains(scontrol)
    assert call[3].startswith("Reason=nvfabric binary_missing: "), (call, done.stderr)
    log = (tray / "run/nvfabric-slurm/run.log").read_text()
    assert all(re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z ", line) for line in log.splitlines()), log

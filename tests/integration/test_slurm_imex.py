"""packaging/slurm: the IMEX prolog and epilog under a real single-node Slurm (slurmctld,
slurmd, munged as this test's children), on a simulated GB200 tray whose fake nvidia-imex and
nvidia-imex-ctl are run by a PyInstaller build, as on a host without Python: the directory
build, which the Debian package installs as /usr/bin/nvfabric (its run execs into the lean
supervisor, same pid, another command line), and for the bring-up also the single-file
binary (which supervises in place)."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import runkit
from tests.integration.debroot import REPO
from tests.integration.distbin import dist_binary, dist_dir
from tests.integration.slurmkit import Slurm
from tests.runkit import alive, stop_pids

SCRIPTS = REPO / "packaging/slurm"
STATE_DIR = "run/nvfabric-slurm"
#: The builds the scripts are run with (NVFABRIC=).
BUILDS = {"one-dir": dist_dir, "one-file": dist_binary}


def calls(root: Path) -> list[dict[str, object]]:
    path = root / "var/lib/nvfabric-sim/calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def processes_of(root: Path) -> list[str]:
    """Command lines of the processes that name ``root`` (the tray's daemons, ctl calls, a
    background nvfabric run): none may be left once the epilog (or a failed prolog) is done."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or not alive(int(pid)):
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(root) + "/" in cmdline or cmdline.endswith(str(root) + " "):
            out.append(f"{pid}: {cmdline}")
    return out


def until(predicate: object, what: str, bound: float = 60) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + bound
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} after {bound} s"
        time.sleep(0.2)


class Site:
    """The running cluster plus the settings file its prolog and epilog read."""

    def __init__(self, slurm: Slurm, defaults: Path, workdir: Path) -> None:
        self.slurm = slurm
        self.defaults = defaults
        self.workdir = workdir
        self.count = 0

    def node_root(self, profile: str, faults: dict[str, object] | None = None,
                  build: str = "one-dir") -> Path:
        """A simulated node written by ``build`` (:data:`BUILDS`), named like this Slurm
        node, and the settings pointing the scripts at it and at that build."""
        nvfabric = BUILDS[build]()
        self.count += 1
        # Each test starts on an idle node: one that failed after a drain (before its own
        # resume) must not time out every test after it (measured: 4 x 120 s srun timeouts).
        if self.slurm.state() != "idle":
            self.slurm.resume()
        root = self.workdir / f"{profile}-{self.count}"
        done = runkit.run([str(nvfabric), "simulate", profile, str(root)], timeout=120)
        assert done.returncode == 0, done.stderr
        (root / "etc/hostname").write_text(self.slurm.node + "\n")
        if faults:
            (root / "var/lib/nvfabric-sim/faults.json").write_text(json.dumps(faults))
        self.defaults.write_text(
            "# nvfabric Slurm IMEX settings of the test\n"
            f"NVFABRIC={nvfabric}\n"
            f"NVFABRIC_ROOT={root}\n"
            "NVFABRIC_IMEX_WAIT=8\n"
            "NVFABRIC_IMEX_CTL_TIMEOUT=1\n")
        return root


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    for build in BUILDS.values():
        build()
    work = tmp_path_factory.mktemp("slurm")
    defaults = work / "nvfabric-slurm"
    # Slurm gives its scripts none of slurmd's environment: these wrappers name the settings
    # file (as /etc/default/nvfabric-slurm would be read on a real node) and exec the scripts.
    wrappers = []
    for part in ("prolog", "epilog"):
        wrapper = work / f"{part}.sh"
        wrapper.write_text("#!/bin/sh\n"
                           f"NVFABRIC_SLURM_DEFAULTS={defaults}\n"
                           "export NVFABRIC_SLURM_DEFAULTS\n"
                           f"exec {SCRIPTS}/nvfabric-imex-{part}\n")
        wrapper.chmod(0o755)
        wrappers.append(wrapper)
    try:
        with Slurm(work, wrappers[0], wrappers[1]) as slurm:
            yield Site(slurm, defaults, work)
    finally:
        stop_what_names(work)


def stop_what_names(work: Path) -> None:
    """Stop, by pid, what is left of the trays under ``work`` once Slurm is down: a test that
    failed before its epilog leaves the prolog's nvfabric run (its own session, outside
    slurmd's reach) and nvidia-imex running. SIGTERM, SIGKILL after 15 s."""
    stop_pids(lambda: [int(line.split(":", 1)[0]) for line in processes_of(work)])


def test_scripts_are_executable_posix_sh() -> None:
    prolog = SCRIPTS / "nvfabric-imex-prolog"
    assert prolog.read_text().startswith("#!/bin/sh\n")
    assert prolog.stat().st_mode & stat.S_IXUSR
    assert os.readlink(SCRIPTS / "nvfabric-imex-epilog") == "nvfabric-imex-prolog"
    assert runkit.run(["sh", "-n", str(prolog)], text=False).returncode == 0


@pytest.mark.parametrize("build", list(BUILDS))
def test_srun_runs_the_prolog_that_brings_imex_up_and_the_epilog_that_stops_it(
        site: Site, build: str) -> None:
    root = site.node_root("gb200-tray", build=build)
    done = site.slurm.run("srun", "-N1", "true")
    assert done.returncode == 0, done.stdout + done.stderr + site.slurm.logs()
    # The prolog wrote the job's node list, and nvidia-imex ran with it until the epilog.
    assert (root / "etc/nvidia-imex/nodes_config.cfg").read_text() == site.slurm.node + "\n"
    imex = [c for c in calls(root) if c["prog"] == "imex" and c["event"] == "exec"]
    assert len(imex) == 1, calls(root)
    log = (root / STATE_DIR / "run.log").read_text()
    assert "fabric ready in" in log, log
    site.slurm.idle()
    until(lambda: not (root / STATE_DIR / "slurm-job").exists(), "epilog removing its record")
    until(lambda: "all services stopped" in (root / STATE_DIR / "run.log").read_text(),
          "nvfabric run stopping nvidia-imex")
    assert not alive(int(imex[0]["pid"]))  # type: ignore[call-overload]
    until(lambda: processes_of(root) == [], "no process of the tray left")
    ctl = runkit.run([str(root / "usr/bin/nvidia-imex-ctl"), "-q"])
    assert ctl.returncode == 1  # no daemon left: NOT READY
    fields = site.slurm.node_fields()
    assert "DRAIN" not in fields["State"], fields


def test_a_prolog_whose_imex_never_gets_ready_drains_the_node_with_the_finding(
        site: Site) -> None:
    # nvidia-imex-ctl never answers: the daemon is never seen READY within the bound.
    root = site.node_root("gb200-tray", {"imex-ctl": {"hang": True}})
    t0 = time.monotonic()
    done = site.slurm.run("srun", "-N1", "true")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Prolog failure" in done.stderr or "prolog" in done.stderr.lower(), done.stderr
    assert time.monotonic() - t0 < 60
    until(lambda: "DRAIN" in site.slurm.node_fields().get("State", ""), "drained node")
    reason = site.slurm.node_fields()["Reason"]
    assert reason.startswith("nvfabric imex_ctl_timeout: "), reason
    # The prolog stopped what it had started: no nvfabric run, no nvidia-imex, no record.
    assert not (root / STATE_DIR / "slurm-job").exists()
    imex = [c for c in calls(root) if c["prog"] == "imex" and c["event"] == "exec"]
    assert len(imex) == 1 and not alive(int(imex[0]["pid"]))  # type: ignore[call-overload]
    # Nothing of the tray left either, not even the hung nvidia-imex-ctl of the last probe.
    until(lambda: processes_of(root) == [], "no process of the tray left", bound=15)
    slurmd_log = (site.workdir / "slurmd.log").read_text()
    assert "imex_ctl_timeout" in slurmd_log  # the finding on the prolog's stderr
    site.slurm.resume()


def test_a_node_list_without_this_tray_is_refused_before_imex_starts(site: Site) -> None:
    root = site.node_root("gb200-tray")
    # This tray's name is not the Slurm node's: nvfabric imex config refuses the list.
    (root / "etc/hostname").write_text("gb-99\n")
    done = site.slurm.run("srun", "-N1", "true")
    assert done.returncode != 0
    until(lambda: "DRAIN" in site.slurm.node_fields().get("State", ""), "drained node")
    reason = site.slurm.node_fields()["Reason"]
    assert reason.startswith("nvfabric imex_no_local_interface: "), reason
    assert not [c for c in calls(root) if c["prog"] == "imex"]
    site.slurm.resume()


def test_on_a_hgx_node_the_prolog_does_nothing(site: Site) -> None:
    root = site.node_root("dgx-b200")
    done = site.slurm.run("srun", "-N1", "true")
    assert done.returncode == 0, done.stdout + done.stderr + site.slurm.logs()
    assert not (root / STATE_DIR).exists()
    assert calls(root) == []
    site.slurm.idle()


#: Slurm's IMEX channel plugin, where the distribution builds it (slurm-wlm's plugin directory).
SWITCH_PLUGIN = "/usr/lib/*/slurm-wlm/switch_nvidia_imex.so"


def slurm_version() -> tuple[int, int]:
    done = runkit.run(["slurmd", "-V"], timeout=60, check=True)
    major, minor = done.stdout.split()[1].split(".")[:2]  # "slurm-wlm 22.05.8"
    return int(major), int(minor)


def test_nvfabric_finds_the_slurm_conf_of_the_running_slurmd_and_its_prolog(
        site: Site) -> None:
    """The configuration as the real slurmd reads it: its SLURM_CONF (from its process
    environment, where this test's Slurm got it), the Prolog= of that file (compared with what
    the real parser, scontrol, reports), and the hand-off the wrapper makes to nvfabric's own
    prolog (whose settings file the wrapper names) recognised as a prolog that runs the
    daemon."""
    from nvfabric.facts import procs
    from nvfabric.facts import slurm as slurm_facts

    (slurmd,) = [pid for name, proc in site.slurm.procs if name == "slurmd"
                 for pid in (proc.pid,)]
    named = slurm_facts.named_confs("/")
    how = f"SLURM_CONF of slurmd (pid {slurmd})"
    assert (str(site.slurm.conf), how) in named, named
    assert any(p.pid == slurmd for p in procs.by_name("/", ("slurmd",)))
    facts = slurm_facts.read_conf("/", str(site.slurm.conf), how)
    shown = site.slurm.run("scontrol", "show", "config").stdout
    prolog = next(line.split("=", 1)[1].strip() for line in shown.splitlines()
                  if line.split("=", 1)[0].strip() == "Prolog")
    (script,) = [s for s in facts.scripts if s.key == "Prolog"]
    assert script.chain[0].endswith(f"Prolog={prolog}")  # the value slurmd itself has
    assert script.chain[1] == prolog
    assert script.chain[-1] == str(SCRIPTS / "nvfabric-imex-prolog")
    assert script.nvfabric and facts.runner == "prolog"
    assert facts.switch is None  # SwitchType=switch/none


def test_the_switch_plugin_where_this_slurm_has_it(site: Site, tmp_path: Path) -> None:
    """Debian 12's slurm-wlm (22.05) has no switch/nvidia_imex (it came with Slurm 24.05): then
    only the configuration reading is tested (SwitchType read from slurm.conf, the channels
    Slurm's, none made), and this test says so by asserting the version that decides it.
    Where the plugin exists, a Slurm with SwitchType=switch/nvidia_imex must start and
    scontrol must report it."""
    import glob

    plugins = glob.glob(SWITCH_PLUGIN)
    if not plugins:
        assert slurm_version() < (24, 5), "no switch_nvidia_imex.so on a Slurm that has it?"
    else:
        assert slurm_version() >= (24, 5)
        text = site.slurm.conf.read_text().replace("SwitchType=switch/none",
                                                   "SwitchType=switch/nvidia_imex")
        site.slurm.conf.write_text(text)
        try:
            site.slurm.run("scontrol", "reconfigure")
            shown = site.slurm.run("scontrol", "show", "config").stdout
            assert "switch/nvidia_imex" in shown, shown
        finally:
            site.slurm.conf.write_text(text.replace("SwitchType=switch/nvidia_imex",
                                                    "SwitchType=switch/none"))
            site.slurm.run("scontrol", "reconfigure")
    root = site.node_root("gb200-tray")
    (root / "etc/slurm").mkdir(parents=True, exist_ok=True)
    (root / "etc/slurm/slurm.conf").write_text(
        site.slurm.conf.read_text().replace("SwitchType=switch/none",
                                            "SwitchType=switch/nvidia_imex"))
    done = runkit.run([str(dist_binary()), "imex", "owner", "--root", str(root), "--json"])
    out = json.loads(done.stdout)
    assert out["channel_owner"] == "slurm", out
    assert out["slurm_conf"]["path"] == "/etc/slurm/slurm.conf"

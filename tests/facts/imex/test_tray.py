"""IMEX ownership on simulated GB200 trays whose files copy real layouts: AWS ParallelCluster
(/opt/slurm, a prolog that drives nvidia-imex.service), slurm-gcp's ``slurm_mux`` dispatcher
with links into another tree, a Slurm source build found through slurmd's unit and process,
a configless cache, the ``switch/nvidia_imex`` plugin, NVIDIA's DRA driver in both IMEX modes,
and a live ``nvfabric run`` that owns IMEX while another owner's evidence appears. Every
layout ends with exactly one owner of the daemon (or a conflict naming both)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.facts import slurm as slurm_facts
from nvfabric.facts.imex import tray as imex_facts
from nvfabric.rules.imex import script as script_rules
from nvfabric.rules.imex import slurm as slurm_rules
from nvfabric.rules.imex.owner import decide
from tests.cli.test_run_mnnvl import tray as run_tray
from tests.conftest import run_cli, run_json
from tests.runkit import Run, codes, events

WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-imex.service"
DRA_DIR = "var/lib/kubelet/plugins/compute-domain.nvidia.com"
PROLOG = Path(__file__).resolve().parents[3] / "packaging/slurm/nvfabric-imex-prolog"

#: AWS ParallelCluster's IMEX prolog, reduced (tests/data/cases/I01: the project's
#: 91_nvidia_imex_prolog.sh): it restarts the host unit with the job's node list.
PCLUSTER_PROLOG = """\
#!/usr/bin/env bash
IMEX_SERVICE="nvidia-imex"
IMEX_NODES_CONFIG="/opt/parallelcluster/shared/nvidia-imex/nodes_config_${LAUNCH_TEMPLATE_ID}.cfg"
function reload_imex() {
  timeout ${IMEX_STOP_TIMEOUT} systemctl stop ${IMEX_SERVICE}
  pkill -9 ${IMEX_SERVICE}
  timeout ${IMEX_START_TIMEOUT} systemctl start ${IMEX_SERVICE}
}
if ! systemctl is-enabled ${IMEX_SERVICE} &>/dev/null; then exit 0; fi
reload_imex
"""

#: slurm-gcp's dispatcher (Cluster Toolkit schedmd-slurm-gcp-v6-controller, slurm_mux): the
#: scriptlets of ``<its directory>/<context>.d`` and of the job's partition (the second loop
#: split with a backslash here, to fit the line).
SLURM_MUX = """\
#!/bin/bash
set -e
CMD="${0##*/}"
BASE=$(readlink -f $0)
BASE=${BASE%/*}
export CLUSTER_ADM_BASE=${BASE}
SLURM_MUX_CONF=${CLUSTER_ADM_BASE}/etc/slurm_mux.conf
if [[ -r ${SLURM_MUX_CONF} ]]; then
\tsource ${SLURM_MUX_CONF}
fi
for SCRIPTLET in ${BASE}/${SLURM_SCRIPT_CONTEXT}.d/*.${SLURM_SCRIPT_CONTEXT}; do
\tif [[ -x ${SCRIPTLET} ]]; then
\t\techo "Running ${SCRIPTLET}"
\t\t${SCRIPTLET} $@ >>${LOGFILE} 2>&1
\tfi
done
for SCRIPTLET in \\
    ${BASE}/partition-${SLURM_JOB_PARTITION}-${SLURM_SCRIPT_CONTEXT}.d/*.${SLURM_SCRIPT_CONTEXT}; do
\tif [[ -x ${SCRIPTLET} ]]; then
\t\t${SCRIPTLET} $@ >>${LOGFILE} 2>&1
\tfi
done
"""

#: A site prolog that writes the job's node list and runs the daemon itself (the shape of the
#: NVIDIA IMEX guide's "Deployment Models", job launcher: fill nodes_config.cfg, then start).
OWN_DAEMON_PROLOG = """\
#!/bin/bash
scontrol show hostnames "$SLURM_JOB_NODELIST" > /etc/nvidia-imex/nodes_config.cfg
/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg
"""


def put(root: Path, path: str, text: str, mode: int = 0o755) -> Path:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    target.chmod(mode)
    return target


def link(root: Path, path: str, target: str) -> None:
    where = root / path
    where.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, where)


def enable_unit(root: Path) -> None:
    link(root, WANTS, "/usr/lib/systemd/system/nvidia-imex.service")


def process(root: Path, pid: int, argv: list[str], env: dict[str, str]) -> None:
    """A process of the tree's own process table (proc/<pid>/comm, cmdline, environ)."""
    base = root / f"proc/{pid}"
    base.mkdir(parents=True)
    (base / "comm").write_text(os.path.basename(argv[0])[:15] + "\n")
    (base / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (base / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0"
                                            for k, v in env.items()))


def owner(root: Path, *args: str) -> tuple[dict[str, object], int]:
    return run_json("imex", "owner", "--root", str(root), *args)


@pytest.fixture
def tray(node: Callable[..., Path]) -> Path:
    return node("gb200-tray")


# -- ParallelCluster ------------------------------------------------------------------------

def test_parallelcluster_prolog_drives_the_unit_which_stays_enabled(tray: Path) -> None:
    put(tray, "opt/slurm/etc/slurm.conf", "ClusterName=pcluster\n"
        "Prolog=/opt/slurm/etc/scripts/prolog.d/*\nEpilog=/opt/slurm/etc/scripts/epilog.d/*\n")
    put(tray, "opt/slurm/etc/scripts/prolog.d/91_nvidia_imex_prolog.sh", PCLUSTER_PROLOG)
    put(tray, "opt/slurm/etc/scripts/prolog.d/10_other.sh", "#!/bin/sh\necho hi\n")
    enable_unit(tray)
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], out["channel_owner"], rc) == ("slurm", "unit", "host", 0)
    assert out["slurm_conf"] == {"path": "/opt/slurm/etc/slurm.conf",
                                 "found_by": "compiled-in default of AWS ParallelCluster "
                                             "(--prefix=/opt/slurm)"}
    ev = imex_facts.gather_evidence(str(tray))
    (script,) = ev.slurm.scripts
    assert script.chain[-1] == "/opt/slurm/etc/scripts/prolog.d/91_nvidia_imex_prolog.sh"
    assert script.actions.unit_verbs == ("stop", "start", "is-enabled")
    # run starts nothing: the unit is the daemon's runner
    assert decide(ev, for_run=True).nvfabric_starts_imex is False


# -- slurm-gcp's mux, links into another tree ------------------------------------------------

def mux_tray(tray: Path, scriptlet: str) -> None:
    put(tray, "etc/slurm/slurm.conf", "SlurmctldHost=ctl\n"
        "Prolog=/opt/apps/adm/slurm/slurm_prolog\nEpilog=/opt/apps/adm/slurm/slurm_epilog\n")
    put(tray, "opt/apps/adm/slurm/slurm_mux", SLURM_MUX)
    link(tray, "opt/apps/adm/slurm/slurm_prolog", "slurm_mux")
    link(tray, "opt/apps/adm/slurm/slurm_epilog", "slurm_mux")
    put(tray, "opt/apps/adm/slurm/etc/slurm_mux.conf", "DEBUG_SLURM_MUX_ENABLE_LOG=no\n", 0o644)
    put(tray, "opt/apps/adm/slurm/scripts/imex", scriptlet)
    link(tray, "opt/apps/adm/slurm/partition-gb200-prolog_slurmd.d/imex.prolog_slurmd",
         "../scripts/imex")


def test_slurm_gcp_mux_scriptlet_that_runs_the_daemon_makes_the_unit_masked(
        tray: Path, tmp_path: Path) -> None:
    mux_tray(tray, OWN_DAEMON_PROLOG)
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], rc) == ("slurm", "prolog", 0)
    ev = imex_facts.gather_evidence(str(tray))
    (script,) = ev.slurm.scripts
    assert script.chain[1:] == (
        "/opt/apps/adm/slurm/slurm_prolog -> /opt/apps/adm/slurm/slurm_mux",
        "/opt/apps/adm/slurm/partition-gb200-prolog_slurmd.d/imex.prolog_slurmd -> "
        "/opt/apps/adm/slurm/scripts/imex")
    assert (script.actions.daemon, script.actions.node_list) == (True, True)
    # with the host unit enabled, the unit's daemon and the job's would be two owners
    enable_unit(tray)
    out, rc = owner(tray)
    assert rc == 1 and out["conflict"]["owners"] == ["slurm", "host"]
    assert "systemctl mask nvidia-imex.service" in out["conflict"]["hint"]


def test_a_scriptlet_link_with_an_absolute_target_is_read_under_the_root(
        tray: Path, tmp_path: Path) -> None:
    """The link's absolute target is resolved as slurmd on the node resolves it, from the
    root: the file of that name outside the tree (here, the reader's own) is never read."""
    mux_tray(tray, "#!/bin/sh\necho nothing\n")
    outside = tmp_path / "elsewhere.sh"
    outside.write_text(OWN_DAEMON_PROLOG)
    link(tray, "opt/apps/adm/slurm/prolog_slurmd.d/x.prolog_slurmd", str(outside))
    ev = imex_facts.gather_evidence(str(tray))
    assert (ev.slurm.scripts, ev.slurm.unread) == ((), ())
    assert decide(ev).owner == "none"  # the node has no such file: slurmd runs nothing
    put(tray, str(outside).lstrip("/"), OWN_DAEMON_PROLOG)  # the node's file of that name
    ev = imex_facts.gather_evidence(str(tray))
    (script,) = ev.slurm.scripts
    assert script.chain[-1] == (f"/opt/apps/adm/slurm/prolog_slurmd.d/x.prolog_slurmd -> "
                                f"{outside}")
    assert decide(ev).owner == "slurm"


def test_hand_offs_are_followed_to_a_bound_and_loops_end(tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/p0\n")
    for i in range(12):  # a chain deeper than the bound, and one that loops back to itself
        put(tray, f"etc/slurm/p{i}", f"#!/bin/sh\nexec /etc/slurm/p{i + 1}\n")
    put(tray, "etc/slurm/p12", "#!/bin/sh\nexec /etc/slurm/p0\n")
    facts = slurm_facts.read(str(tray))
    assert facts.scripts == ()
    assert any("deeper than" in n for n in facts.unread)


# -- a Slurm source build, found the way slurmd finds its file --------------------------------

def test_source_build_conf_named_by_slurmd_unit_environment_file(tray: Path) -> None:
    put(tray, "usr/local/etc/slurm/slurm.conf", "Include /usr/local/etc/slurm/prolog.conf\n",
        0o644)
    put(tray, "usr/local/etc/slurm/prolog.conf", "Prolog=imex-prolog\n", 0o644)
    put(tray, "usr/local/etc/slurm/imex-prolog", PCLUSTER_PROLOG)
    put(tray, "etc/slurm/slurm.conf", "ClusterName=stale-package-copy\n", 0o644)
    put(tray, "etc/systemd/system/slurmd.service",
        "[Service]\nEnvironmentFile=-/etc/sysconfig/slurmd\n"
        "ExecStart=/usr/local/sbin/slurmd -D -s $SLURMD_OPTIONS\n", 0o644)
    put(tray, "etc/sysconfig/slurmd", 'SLURMD_OPTIONS="-f /usr/local/etc/slurm/slurm.conf"\n',
        0o644)
    conf, how = slurm_facts.find_conf(str(tray))
    assert (conf, how) == ("/usr/local/etc/slurm/slurm.conf",
                           "-f of /etc/sysconfig/slurmd (/etc/systemd/system/slurmd.service)")
    enable_unit(tray)
    out, _ = owner(tray)
    assert (out["owner"], out["runner"]) == ("slurm", "unit")


def test_slurm_conf_of_the_running_slurmd_wins(tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "ClusterName=package\n", 0o644)
    put(tray, "srv/slurm/slurm.conf", "ClusterName=site\n", 0o644)
    process(tray, 812, ["/usr/sbin/slurmd", "-D"], {"SLURM_CONF": "/srv/slurm/slurm.conf"})
    assert slurm_facts.find_conf(str(tray)) == ("/srv/slurm/slurm.conf",
                                                "SLURM_CONF of slurmd (pid 812)")


def test_configless_slurmd_reads_its_cache(tray: Path) -> None:
    put(tray, "var/spool/slurmd/conf-cache/slurm.conf", "Prolog=imex.sh\n", 0o644)
    put(tray, "var/spool/slurmd/conf-cache/imex.sh", OWN_DAEMON_PROLOG)
    process(tray, 900, ["/usr/sbin/slurmd", "--conf-server", "ctl:6817"], {})
    conf, how = slurm_facts.find_conf(str(tray))
    assert conf == "/var/spool/slurmd/conf-cache/slurm.conf"
    assert how == "configless cache (--conf-server of slurmd (pid 900))"
    out, _ = owner(tray)
    assert (out["owner"], out["runner"]) == ("slurm", "prolog")


# -- the switch/nvidia_imex plugin ------------------------------------------------------------

def switch_conf(root: Path, extra: str = "") -> None:
    put(root, "etc/slurm/slurm.conf", "SwitchType=switch/nvidia_imex\n"
        "SwitchParameters=imex_channel_count=2048\n" + extra, 0o644)


def test_switch_plugin_with_nvfabric_prolog_names_both_duties(tray: Path) -> None:
    switch_conf(tray, "Prolog=/etc/slurm/prolog.d/*\n")
    put(tray, "etc/slurm/prolog.d/60-nvfabric-imex", PROLOG.read_text())
    put(tray, "etc/default/nvfabric-slurm", "NVFABRIC_IMEX_CHANNEL=job\n", 0o644)
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], out["channel_owner"], rc) == (
        "slurm", "prolog", "slurm", 0)
    assert any("switch/nvidia_imex" in r and "nvfabric creates none" in r
               for r in out["reasons"])


def test_switch_plugin_alone_leaves_the_daemon_to_nvfabric_run_which_makes_no_channel(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = run_tray(tmp_path)
    switch_conf(root)
    (root / "dev/nvidia-caps-imex-channels/channel0").unlink()  # as slurmd leaves the dir
    run = start(root)
    run.wait_line(r"nvfabric: fabric ready in")
    assert not (root / "dev/nvidia-caps-imex-channels/channel0").exists()
    assert len(events(root, "imex", "exec")) == 1
    out, rc = owner(root)
    assert (out["owner"], out["channel_owner"], rc) == ("nvfabric", "slurm", 0)
    status, _ = run_json("status", "--root", str(root))
    assert "imex_channel_missing" not in codes(status)
    run.close()


# -- the DRA driver, both modes ------------------------------------------------------------

def kubelet_plugin(root: Path, mode: str, socket_path: str | None = None) -> None:
    (root / DRA_DIR).mkdir(parents=True, exist_ok=True)
    env = {"IMEX_MODE": mode, "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"}
    if socket_path:
        env["IMEX_HOST_SOCKET_PATH"] = socket_path
    process(root, 77, ["/usr/bin/compute-domain-kubelet-plugin", "-v", "4"], env)


def test_dra_driver_managed_mode_owns_the_daemon_and_the_channels(tray: Path) -> None:
    kubelet_plugin(tray, "driverManaged")
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], out["channel_owner"], rc) == ("dra", None, "dra", 0)
    out, rc = owner(tray, "--imex-owner", "dra-host")
    assert rc == 1 and out["conflict"]["owners"] == ["dra-host", "dra"]


def test_dra_host_managed_mode_is_detected_with_its_socket(tray: Path) -> None:
    kubelet_plugin(tray, "hostManaged", "/var/run/nvidia-imex-ctrl.sock")
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], out["channel_owner"], rc) == (
        "dra-host", None, "dra", 0)
    assert out["socket"] == "/run/nvidia/driver/var/run/nvidia-imex-ctrl.sock"
    # the unit may be that host daemon: no conflict with the driver in this mode
    enable_unit(tray)
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], rc) == ("dra-host", "unit", 0)


def test_nvfabric_serves_the_dra_host_managed_socket_and_says_so(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = run_tray(tmp_path)
    (root / DRA_DIR).mkdir(parents=True)
    (root / "dev/nvidia-caps-imex-channels/channel0").unlink()
    run = start(root, "--imex-owner", "dra-host")
    run.wait_line(r"nvfabric: fabric ready in")
    cfg = (root / "run/nvfabric/imex/config.cfg").read_text()
    sock = root / "etc/nvidia-imex/imex_ctrl.sock"
    assert f"IMEX_CMD_UNIX_DOMAIN_PATH={sock}" in cfg and "IMEX_CMD_ENABLED=1" in cfg
    # what the kubelet plugin asks at claim prepare answers READY over that socket
    probe = subprocess_ctl(root, f"--u={sock}")
    assert probe == (0, "READY")
    assert not (root / "dev/nvidia-caps-imex-channels/channel0").exists()  # per claim
    out, rc = owner(root)
    assert (out["owner"], out["run"]["serves"], rc) == ("nvfabric", "dra-host", 0)
    # run, `imex owner` and status agree: channels per claim, the driver's socket
    assert (out["channel_owner"], out["socket"]) == ("dra", "/etc/nvidia-imex/imex_ctrl.sock")
    status, rc = run_json("status", "--root", str(root))
    assert (status["verdict"], codes(status), rc) == ("healthy", [], 0)
    assert (status["imex"]["channel_owner"], status["imex"]["channel_findings"]) == ("dra", [])
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert subprocess_ctl(root, f"--u={sock}")[0] == 1  # nobody serves the socket any more


def test_a_dra_host_run_not_ready_yet_already_answers_as_dra_host(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    """While its daemon is not READY (no ready file yet), `imex owner` and status answer what
    the run decided from its owner record: channels per claim, no channel0 wanted."""
    root = run_tray(tmp_path, {"imex-ctl": {"ready_delay_s": 3600}})
    (root / "dev/nvidia-caps-imex-channels/channel0").unlink()
    run = start(root, "--imex-owner", "dra-host")
    run.wait_line(r"IMEX not READY yet")
    assert not (root / "run/nvfabric/ready").exists()
    out, rc = owner(root)
    assert (out["owner"], out["run"]["serves"], out["run"]["ready"]) == (
        "nvfabric", "dra-host", False)
    assert (out["channel_owner"], out["socket"], rc) == (
        "dra", "/etc/nvidia-imex/imex_ctrl.sock", 0)
    status, _ = run_json("status", "--root", str(root))
    assert "imex_channel_missing" not in codes(status)
    assert status["imex"]["channel_owner"] == "dra"
    run.close()


def subprocess_ctl(root: Path, *args: str) -> tuple[int, str]:
    import subprocess

    done = subprocess.run([str(root / "usr/bin/nvidia-imex-ctl"), "-q", *args],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout.strip()


# -- a live nvfabric run owns IMEX; another owner appearing is a conflict ----------------------

def test_a_live_run_is_the_owner_and_a_second_owner_appearing_is_an_error(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = run_tray(tmp_path)
    run = start(root)
    run.wait_line(r"nvfabric: fabric ready in")
    out, rc = owner(root)
    assert (out["owner"], out["runner"], rc) == ("nvfabric", "nvfabric", 0)
    assert out["run"]["pid"] == run.proc.pid and out["run"]["state_dir"] == "/run/nvfabric"
    assert out["run"]["imex_pid"] == events(root, "imex", "exec")[0]["pid"]
    status, _ = run_json("status", "--root", str(root))
    assert (status["imex"]["owner"], status["imex"]["run"]["pid"]) == ("nvfabric", run.proc.pid)
    human = run_cli("status", "--root", str(root)).stdout
    assert (f"IMEX owner nvfabric (run by nvfabric), nvfabric run pid {run.proc.pid}, state dir "
            "/run/nvfabric") in human
    # the DRA driver's plugin state appears while nvfabric runs IMEX
    (root / DRA_DIR).mkdir(parents=True)
    out, rc = owner(root)
    assert rc == 1 and out["conflict"]["owners"] == ["nvfabric", "dra"]
    status, rc = run_json("status", "--root", str(root))
    conflict = [f for f in status["findings"] if f["code"] == "imex_owner_conflict"]
    assert conflict and conflict[0]["severity"] == "error"
    assert f"pid {run.proc.pid}" in conflict[0]["message"] and "DRA" in conflict[0]["message"]
    # an error finding: status unhealthy (exit 1) and ready not ready (exit 1), with it
    assert (status["verdict"], rc) == ("unhealthy", 1)
    ready, rc = run_json("ready", "--root", str(root))
    assert (ready["ready"], rc, codes(ready)) == (False, 1, ["imex_owner_conflict"])
    assert ready["run"]["pid"] == run.proc.pid
    text = run_cli("ready", "--root", str(root))
    assert text.returncode == 1 and text.stderr.startswith("not ready: nvfabric run (pid ")
    (root / DRA_DIR).rmdir()  # the second owner gone: ready again
    ready, rc = run_json("ready", "--root", str(root))
    assert (ready["ready"], rc, ready["findings"]) == (True, 0, [])
    run.close()


# -- the script reader ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "verbs", "daemon", "nodes", "chans"), [
    ("systemctl restart nvidia-imex.service\n", ("restart",), False, False, False),
    ('S=nvidia-imex; timeout 30 systemctl stop "$S"\n', ("stop",), False, False, False),
    ("service nvidia-imex start\n", ("start",), False, False, False),
    ("exec setsid /usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg &\n", (), True, False,
     False),
    ("pkill -9 nvidia-imex; nvidia-imex-ctl -q\n", (), False, False, False),
    ("getent hosts a | awk '{print $1}' > /etc/nvidia-imex/nodes_config.cfg\n", (), False, True,
     False),
    ("mknod -m 666 /dev/nvidia-caps-imex-channels/channel0 c 234 0\n", (), False, False, True),
    ("# systemctl start nvidia-imex\necho 'systemctl start nvidia-imex'\n", (), False, False,
     False),
    ("nvfabric imex channel --create 0 && nvfabric run --imex-owner host\n", (), True, False,
     True),
])
def test_what_a_script_does_to_imex(text: str, verbs: tuple[str, ...], daemon: bool,
                                    nodes: bool, chans: bool) -> None:
    a = script_rules.analyse("#!/bin/bash\n" + text, "/p", "/p", {}).actions
    assert (a.unit_verbs, a.daemon, a.node_list, a.channels) == (verbs, daemon, nodes, chans)


def test_hand_offs_a_script_names() -> None:
    text = ("#!/bin/sh\n. /etc/slurm/common.sh\nrun-parts /etc/slurm/prolog.d\n"
            "for f in /opt/site/imex/*.sh; do \"$f\"; done\nbash /opt/x.sh\n")
    found = script_rules.analyse(text, "/p", "/p", {}).follow
    assert found == ("/etc/slurm/common.sh", "/etc/slurm/prolog.d/*", "/opt/site/imex/*.sh",
                     "/opt/x.sh")


def test_nvfabric_prolog_settings_decide_what_it_does() -> None:
    unit = slurm_rules.nvfabric_prolog_actions({"NVFABRIC_IMEX_START": "unit"}, "/p")
    assert (unit.unit_verbs, unit.daemon, unit.channels) == (("restart", "stop"), False, True)
    default = slurm_rules.nvfabric_prolog_actions({}, "/p")
    assert (default.daemon, default.node_list, default.channels) == (True, True, True)
    job = slurm_rules.nvfabric_prolog_actions({"NVFABRIC_IMEX_CHANNEL": "job"}, "/p")
    assert job.channels is False

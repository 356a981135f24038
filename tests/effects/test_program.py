"""Every child whose output nvfabric reads is bounded (nvfabric.effects.program, the one door):
bytes on stdout and stderr, time, the child's group killed at a cap, the result a finding
naming the program and the cap; a program joined under a root that is a link out of it is not
run. Before, `yes "Fabric Manager version is : 550.90.07"` as `--fm-bin` made `status` take
70 s and 18.6 GB, and under a 3 GB memory limit `run --dry-run` and `imex domain` ended with
MemoryError (exit 3).

The memory check: each command runs with its address space limited to :data:`MEMORY_LIMIT`
(RLIMIT_AS, set in the child before the CLI starts), far below what an unbounded read of a
flooding child reaches; the floods never end by themselves, so only a cap ends the command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nvfabric.effects import program
from nvfabric.effects.program import Limit
from nvfabric.model.hostpath import PathEscape, under
from tests.conftest import run_json
from tests.runkit import alive, sim, until

#: The address space each flooded command may use: the CLI needs ~150 MiB of it; reading a
#: flood without a bound passes 512 MiB within a second.
MEMORY_LIMIT = 512 << 20

#: ``yes``-like children: each prints its line forever (stdout, or stderr).
FLOOD_VERSION = '#!/bin/sh\nexec yes "Fabric Manager version is : 550.90.07"\n'
FLOOD_XML = '#!/bin/sh\nexec yes "<nvidia_smi_log>"\n'
FLOOD_STDERR = '#!/bin/sh\nexec yes "NVIDIA-SMI has failed" >&2\n'
FLOOD_JSON = '#!/bin/sh\nexec yes \'{"nodes": {}, \'\n'


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(text)
    path.chmod(0o755)
    return path


def _limited(*args: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> tuple[dict[str, Any], int]:
    """``nvfabric ARGS --json`` exec'd with RLIMIT_AS = :data:`MEMORY_LIMIT`: (its JSON
    object, exit code); the test fails with its stderr when the output is not one object."""
    boot = ("import resource, runpy, sys; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT})); "
            "sys.argv = ['nvfabric', *sys.argv[1:]]; "
            "runpy.run_module('nvfabric', run_name='__main__', alter_sys=True)")
    full_env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", boot, *args, "--json"], capture_output=True,
                          text=True, timeout=timeout, env=full_env, check=False)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"not one JSON object (rc={proc.returncode}): {proc.stdout[-2000:]!r} "
                    f"stderr: {proc.stderr[-4000:]}")
    assert isinstance(out, dict)
    return out, proc.returncode


# -- the door itself ----------------------------------------------------------------------


def test_a_flood_on_stdout_is_killed_at_the_byte_cap_with_its_group(tmp_path: Path) -> None:
    flood = _script(tmp_path / "flood", '#!/bin/sh\nyes x &\necho $! > "$0.pid"\nexec yes y\n')
    ran = program.run([str(flood)], 60, 1 << 16)
    assert ran.rc is None and ran.limit == Limit("stdout", 1 << 16)
    assert len(ran.stdout) == 1 << 16
    assert ran.limit_text() == f"{flood} printed more than 64 KiB on stdout (killed)"
    f = ran.finding("hint")
    assert f is not None and f.code == "probe_limit"
    assert (f.fields["program"], f.fields["limit"], f.fields["limit_value"]) == (
        str(flood), "stdout", 1 << 16)
    grandchild = int((tmp_path / "flood.pid").read_text())
    until(lambda: not alive(grandchild), "the flood's whole group is killed", bound=10)


def test_a_flood_on_stderr_is_killed_at_its_own_cap(tmp_path: Path) -> None:
    flood = _script(tmp_path / "flood", FLOOD_STDERR)
    ran = program.run([str(flood)], 60, 1 << 20, stderr_cap=4096)
    assert ran.rc is None and ran.limit == Limit("stderr", 4096) and len(ran.stderr) == 4096


def test_a_child_whose_grandchild_holds_the_pipes_is_bounded_by_the_time_cap(
        tmp_path: Path) -> None:
    # The child exits at once; its grandchild keeps stdout open and says nothing.
    hold = _script(tmp_path / "hold", '#!/bin/sh\nsleep 300 &\necho $! > "$0.pid"\necho hi\n')
    ran = program.run([str(hold)], 0.5, 1 << 16)
    assert ran.timed_out and ran.rc is None and ran.stdout == b"hi\n"
    grandchild = int((tmp_path / "hold.pid").read_text())
    until(lambda: not alive(grandchild), "the grandchild is killed with the group", bound=10)


def test_a_program_that_changes_the_node_keeps_the_tail_and_its_exit_status(
        tmp_path: Path) -> None:
    # dpkg and systemctl enable are never killed for talking: the tail is kept, memory bounded
    talker = _script(tmp_path / "talker",
                     "#!/bin/sh\nhead -c 50000000 /dev/zero | tr '\\0' x\necho\necho last line\n"
                     "exit 3\n")
    ran = program.run([str(talker)], 120, 4096, keep="tail")
    assert ran.rc == 3 and ran.limit == Limit("stdout", 4096)
    assert len(ran.stdout) == 4096 and ran.stdout.endswith(b"x\nlast line\n")
    assert ran.limit_text().endswith("printed more than 4 KiB on stdout (the rest was dropped)")


def test_a_program_under_a_root_that_links_out_of_it_is_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    outside = _script(tmp_path / "outside" / "nvidia-smi", f"#!/bin/sh\ntouch '{marker}'\n")
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvidia-smi").symlink_to(outside)
    with pytest.raises(PathEscape, match="is a link out of the root"):
        program.run([under(str(root), "/bin/nvidia-smi"), "-q", "-x"], 10, 1 << 16)
    assert not marker.exists()
    inside = _script(root / "sbin" / "real", f"#!/bin/sh\ntouch '{marker}'\n")
    (root / "bin" / "relative").symlink_to("../sbin/real")
    assert program.run([under(str(root), "/bin/relative")], 10, 1 << 16).rc == 0
    assert marker.exists() and inside.exists()  # a link inside the tree is followed


# -- each probe, through the CLI, with its memory limited ------------------------------------


def test_fabric_manager_version_flood_is_a_probe_limit_finding_in_run_dry_run(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    fm = _script(root / "usr" / "bin" / "nv-fabricmanager", FLOOD_VERSION)
    out, rc = _limited("run", "--dry-run", "--root", str(root))
    assert (rc, out["result"]) == (1, "refused"), out
    (f,) = [f for f in out["findings"] if f["code"] == "probe_limit"]
    assert f["program"] == str(fm) and (f["limit"], f["limit_value"]) == ("stdout", 65536)
    assert f"{fm} --version printed more than 64 KiB on stdout (killed)" == f["message"]


@pytest.mark.parametrize("flood", [FLOOD_XML, FLOOD_STDERR], ids=["stdout", "stderr"])
def test_nvidia_smi_flood_is_nvml_unavailable_naming_the_program_and_the_cap(
        tmp_path: Path, flood: str) -> None:
    root = sim(tmp_path, "hgx-h100")
    smi = _script(root / "bin" / "nvidia-smi", flood)
    out, rc = _limited("status", "--root", str(root))
    assert rc == 1 and out["verdict"] != "healthy", out
    (f,) = [f for f in out["findings"] if f["code"] == "nvml_unavailable"]
    stream = "stderr" if flood is FLOOD_STDERR else "stdout"
    cap = 16 << 20 if stream == "stdout" else 1 << 20
    assert (f["reason"], f["program"], f["limit"], f["limit_value"]) == (
        "output_limit", str(smi), stream, cap)
    assert f"printed more than {cap >> 20} MiB on {stream} (killed)" in f["message"]


def test_nvidia_imex_ctl_flood_is_a_probe_limit_error_in_imex_domain(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    ctl = _script(root / "usr" / "bin" / "nvidia-imex-ctl", FLOOD_JSON)
    out, rc = _limited("imex", "domain", "--root", str(root), "--timeout", "60")
    assert rc == 1, out
    assert out["error"]["code"] == "probe_limit", out
    assert out["error"]["program"] == str(ctl) and out["error"]["limit"] == "stdout"
    assert "printed more than 16 MiB on stdout (killed)" in out["error"]["message"]


def test_systemctl_flood_is_an_unknown_unit_state(tmp_path: Path) -> None:
    bindir = tmp_path / "path"
    _script(bindir / "systemctl", '#!/bin/sh\nexec yes "enabled"\n')
    code = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))
        from nvfabric.facts.imex.tray import unit_state
        print(unit_state({str(tmp_path)!r}, live=True))
    """)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (0, "unknown\n"), proc.stderr


def test_status_does_not_run_a_trees_nvidia_smi_that_links_out_of_the_root(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    marker = tmp_path / "ran"
    outside = _script(tmp_path / "elsewhere" / "nvidia-smi", f"#!/bin/sh\ntouch '{marker}'\n")
    smi = root / "bin" / "nvidia-smi"
    smi.unlink()
    smi.symlink_to(outside)
    out, rc = run_json("status", "--root", str(root))
    assert rc == 1 and not marker.exists(), out
    (f,) = [f for f in out["findings"] if f["code"] == "nvml_unavailable"]
    assert f["reason"] == "outside_root"
    assert f"{smi} is a link out of the root (to {outside})" in f["message"]


def test_a_stop_signal_ends_a_probe_wait_and_kills_the_probe(tmp_path: Path) -> None:
    """The door's wait ends on a stop signal (nvfabric.effects.stop): Stopped, the group
    killed; the signal is sent by the probe itself once it runs, so no timing is assumed."""
    pidfile = tmp_path / "probe.pid"
    probe = _script(tmp_path / "probe", f"#!/bin/sh\necho $$ > '{pidfile}'\n"
                    "kill -TERM $PPID\nexec sleep 300\n")
    code = textwrap.dedent(f"""
        from nvfabric.effects import program, stop
        with stop.watching():
            try:
                program.run([{str(probe)!r}], 120, 1 << 16)
            except stop.Stopped as got:
                print("stopped", got.signum or stop.received())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (0, f"stopped {int(signal.SIGTERM)}\n"), \
        proc.stderr
    until(lambda: not alive(int(pidfile.read_text())), "the probe is killed", bound=10)

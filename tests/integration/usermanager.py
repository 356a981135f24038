"""A real systemd service manager for tests: ``/lib/systemd/systemd --user`` in a private
mount namespace with its own cgroup, controlled with ``nsenter -t PID -m systemctl --user``.

Why each piece (systemd 252, this machine: PID 1 is not systemd, cgroup v1 hybrid with the
unified hierarchy at /sys/fs/cgroup/unified):

- ``unshare -m --propagation private``: a mount namespace whose mounts never reach the host.
  In it a tmpfs on ``/run/systemd`` holds an empty ``system/`` directory, which is how
  sd_booted(3) (and so systemctl) tells that systemd runs, and the ``inaccessible/`` nodes
  PID 1 makes at boot, which a sandboxed service's mount namespace needs (see LAUNCHER); the
  host's /run/systemd is hidden, not changed. systemctl must run in the same namespace to
  see it: ``nsenter -t PID -m``.
- its own cgroup: a directory ``nvfabric-test-<pid>-<n>`` created in each hierarchy systemd
  tracks processes in (the unified one; on a hybrid host also ``name=systemd``). The launcher
  writes its OWN pid into them and then execs the manager (same pid), so the manager and the
  units it starts are the only processes in it; no other process is moved. Removed (depth
  first) after the manager is stopped.
- ``XDG_RUNTIME_DIR`` (short, under /tmp: socket paths are limited to 108 bytes) holds the
  manager's private socket (what ``systemctl --user`` talks to) and its notify socket;
  ``HOME``/``XDG_CONFIG_HOME`` are private too, so no unit of the host user is loaded and the
  test's units go in ``$XDG_CONFIG_HOME/systemd/user``.
- stopped by its pid: SIGTERM (the manager stops its units and exits), SIGKILL after a bound;
  and by the kernel when the test process dies without stopping it (PR_SET_PDEATHSIG:
  SIGTERM; the thread that calls ``start()`` must outlive the manager, as pytest's does).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MANAGER = "/lib/systemd/systemd"
UNIT = "nvfabric.service"
NVFABRIC = Path(sys.executable).with_name("nvfabric")  # the entry point, as /usr/bin/nvfabric
HOMES = ("/root/", "/home/", "/run/user/")
#: The test's interpreter (the venv's, and the fakes' shebang) may live in a home directory
#: (pyenv under /root here), which the unit's ProtectHome=yes hides: then, and only then, the
#: drop-in relaxes it to read-only. /usr/bin/nvfabric of the package is not under a home.
PROTECT_HOME = "ProtectHome=read-only\n" if os.path.realpath(sys.executable).startswith(
    HOMES) else ""

TOOLS = ("unshare", "nsenter", "systemctl", "mount")
_counter = itertools.count()

#: Runs in the new mount namespace (argv: the test's pid, cgroup.procs files, "--", the
#: manager's argv): the manager is to get SIGTERM when the test process dies, however it dies
#: (PR_SET_PDEATHSIG, kept across execve; a CI timeout's SIGTERM or a SIGKILL runs no
#: finally: and would leave the manager and its units running), then the tmpfs on
#: /run/systemd with an empty system/ and the inaccessible/ nodes, then this very process
#: joins the test's cgroup and becomes the manager (exec: same pid).
LAUNCHER = r"""
import ctypes, os, signal, stat, subprocess, sys
cut = sys.argv.index("--")
parent, procs, argv = int(sys.argv[1]), sys.argv[2:cut], sys.argv[cut + 1:]
PR_SET_PDEATHSIG = 1
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
    sys.exit("prctl(PR_SET_PDEATHSIG) failed")
if os.getppid() != parent:  # the test died before prctl: no manager
    sys.exit("the test process is gone")
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run/systemd"], check=True)
os.mkdir("/run/systemd/system")
# What PID 1 makes at boot (make_inaccessible_nodes): a service's ProtectHome=,
# ProtectKernelTunables=, ProtectKernelLogs=, InaccessiblePaths= bind-mount these over what
# they hide, even under a user manager (systemd 252: without them the service fails with
# 226/NAMESPACE, mount("/run/systemd/inaccessible/dir", ...) = ENOENT).
base = "/run/systemd/inaccessible"
os.mkdir(base, 0o755)
os.mkdir(base + "/dir", 0)
os.mknod(base + "/reg", stat.S_IFREG)
os.mknod(base + "/fifo", stat.S_IFIFO)
os.mknod(base + "/sock", stat.S_IFSOCK)
os.mknod(base + "/chr", stat.S_IFCHR, os.makedev(0, 0))
os.mknod(base + "/blk", stat.S_IFBLK, os.makedev(0, 0))
for name in ("dir", "reg", "fifo", "sock", "chr", "blk"):
    os.chmod(base + "/" + name, 0)
for path in procs:
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
os.execv(argv[0], argv)
"""


def cgroup_roots() -> list[Path]:
    """The hierarchies where a test cgroup must be made: the unified one first (pure v2:
    /sys/fs/cgroup; hybrid: /sys/fs/cgroup/unified), then, on a hybrid host, systemd's
    named v1 hierarchy. AssertionError when neither is mounted."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").is_file():
        return [base]
    roots = []
    if (base / "unified" / "cgroup.controllers").is_file():
        roots.append(base / "unified")
    if (base / "systemd" / "cgroup.procs").is_file():
        roots.append(base / "systemd")
    if not roots or roots[0].name != "unified":
        raise AssertionError("no unified cgroup hierarchy at /sys/fs/cgroup(/unified): the "
                             "systemd user manager cannot track its units")
    return roots


class UserManager:
    """One ``systemd --user`` (see the module docstring). ``start()`` returns once it is
    running; ``systemctl(*args)`` runs in its namespace; ``stop()`` ends it by pid and removes
    its cgroups and runtime directory."""

    def __init__(self) -> None:
        # what can fail first: nothing is made yet, so nothing is left behind
        self.name = f"nvfabric-test-{os.getpid()}-{next(_counter)}"
        self.cgroups = [root / self.name for root in cgroup_roots()]
        self.base = Path(tempfile.mkdtemp(prefix="nvf-sd-", dir="/tmp"))
        self.runtime = self.base / "xdg"
        self.home = self.base / "home"
        self.units = self.home / ".config" / "systemd" / "user"
        self.log = self.base / "manager.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.home),
                "XDG_RUNTIME_DIR": str(self.runtime),
                "XDG_CONFIG_HOME": str(self.home / ".config"), "LANG": "C.UTF-8",
                "SYSTEMD_LOG_LEVEL": "info", "SYSTEMD_LOG_TARGET": "console"}

    def start(self, bound_s: float = 60.0) -> None:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing or not os.access(MANAGER, os.X_OK):
            raise AssertionError(f"the systemd live test needs {', '.join(missing or [MANAGER])}"
                                 " (Debian: systemd, util-linux, mount; installed by .ci/run)")
        self.runtime.mkdir(mode=0o700)
        self.units.mkdir(parents=True)
        for cg in self.cgroups:
            cg.mkdir()
        argv = ["unshare", "-m", "--propagation", "private", "--", sys.executable, "-c",
                LAUNCHER, str(os.getpid()), *(str(cg / "cgroup.procs") for cg in self.cgroups),
                "--", MANAGER, "--user"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + bound_s
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"systemd --user exited with {self.proc.returncode}: "
                                     f"{self.log.read_text(errors='replace')[-2000:]}")
            state = self.systemctl("is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"systemd --user not running after {bound_s} s ({state})")
            time.sleep(0.05)

    def systemctl(self, *args: str, check: bool = True, timeout: float = 120.0
                  ) -> subprocess.CompletedProcess[str]:
        """``systemctl --user ARGS`` inside the manager's mount namespace."""
        proc = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "--", "systemctl",
                               "--user", *args], env=self.env(), capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"systemctl --user {' '.join(args)}: exit {proc.returncode}: "
                                 f"{proc.stdout}{proc.stderr}")
        return proc

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """Properties of ``unit`` (``systemctl show -p``), as text."""
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def unit_pids(self, unit: str) -> list[int]:
        """The pids in ``unit``'s cgroup (its ControlGroup under the test's cgroup)."""
        group = self.show(unit, "ControlGroup")["ControlGroup"]
        if not group:
            return []
        path = self.cgroups[0].parent / group.lstrip("/") / "cgroup.procs"
        try:
            return [int(x) for x in path.read_text().split()]
        except FileNotFoundError:
            return []

    def stop(self, bound_s: float = 30.0) -> None:
        """SIGTERM the manager by pid, SIGKILL after ``bound_s``; then kill, by pid, anything
        left in the test's cgroups (only processes the manager started can be there), and
        remove them and the runtime directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(bound_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for cg in self.cgroups:
            remove_cgroup(cg)
        shutil.rmtree(self.base, ignore_errors=True)


def remove_cgroup(cg: Path) -> None:
    """Kill, by pid, what is left in the test's cgroup ``cg`` (only processes its manager
    started can be there), then remove it and its children, depth first."""
    if not cg.is_dir():
        return
    for _ in range(100):
        pids = []
        for procs in cg.rglob("cgroup.procs"):
            pids += [int(x) for x in procs.read_text().split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    for directory in sorted((p for p in cg.rglob("*") if p.is_dir()),
                            key=lambda p: len(p.parts), reverse=True):
        directory.rmdir()
    cg.rmdir()


def _nvfabric(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nvfabric", *args], capture_output=True,
                          text=True, timeout=120, check=False)


@dataclass(frozen=True)
class Install:
    """How nvfabric is installed for a :class:`Node`: the program ExecStart runs and the unit
    file as that installation has it."""

    name: str
    command: Path
    unit: Path


def venv_install(tmp_path: Path) -> Install:
    """The test's virtual environment: its entry point and the unit its ``nvfabric unit
    install`` writes."""
    staging = tmp_path / "staging-venv"
    staging.mkdir()
    proc = _nvfabric("unit", "install", "--root", str(staging))
    assert proc.returncode == 0, proc.stderr
    return Install("venv", NVFABRIC, staging / "etc/systemd/system" / UNIT)


class Node:
    """A simulated DGX B200 with nvfabric.service pointed at it in ``manager``, nvfabric as
    ``install`` has it (default: :func:`venv_install`)."""

    def __init__(self, manager: UserManager, tmp_path: Path, extra: str = "",
                 profile: str = "dgx-b200", install: Install | None = None) -> None:
        self.m = manager
        self.root = tmp_path / "node"
        self.log = tmp_path / "nvfabric.log"
        proc = _nvfabric("simulate", profile, str(self.root))
        assert proc.returncode == 0, proc.stderr
        self.install = install or venv_install(tmp_path)
        shutil.copyfile(self.install.unit, manager.units / UNIT)
        command = self.install.command
        for value in (str(self.root), str(self.log), str(command)):
            assert not set(value) & set("%$\"\\ \n"), value  # no unit-file specifiers/quoting
        dropin = manager.units / f"{UNIT}.d"
        dropin.mkdir(exist_ok=True)
        (dropin / "zz-test.conf").write_text(
            "[Service]\nExecStart=\n"
            f"ExecStart={command} run --root {self.root} "
            f"--gpu-reset-command \"{self.root}/bin/nvidia-smi -r\"\n"
            f"StandardOutput=append:{self.log}\nStandardError=append:{self.log}\n"
            + PROTECT_HOME + extra)
        manager.systemctl("daemon-reload")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def ready(self) -> dict[str, object]:
        data = json.loads((self.root / "run/nvfabric/ready").read_text())
        assert isinstance(data, dict)
        return data

    def gpu_states(self) -> set[str]:
        data = json.loads((self.root / "var/lib/nvfabric-sim/gpus.json").read_text())
        return {g["state"] for g in data["gpus"]}

    def props(self, *names: str) -> dict[str, str]:
        return self.m.show(UNIT, *names)

    def start(self) -> float:
        t0 = time.perf_counter()
        self.m.systemctl("start", UNIT)
        return time.perf_counter() - t0

    def stop(self) -> float:
        t0 = time.perf_counter()
        self.m.systemctl("stop", UNIT)
        return time.perf_counter() - t0

    def cleanup(self) -> None:
        self.m.systemctl("stop", UNIT, check=False)
        self.m.systemctl("reset-failed", UNIT, check=False)
        shutil.rmtree(self.m.units / f"{UNIT}.d", ignore_errors=True)

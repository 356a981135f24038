"""A real single-node Slurm (Debian slurm-wlm 22.05 and munge) for the integration tests,
started as the test's own children and stopped by pid.

- ``munged`` runs as user ``munge`` with its own key, socket, pid, log and seed files in a
  private directory (``mkdtemp`` under /tmp, owned by munge, mode 0755: munged refuses a socket
  directory its clients cannot traverse, and the pytest temp tree is root-only).
- ``slurmctld -D`` and ``slurmd -D`` run as root (SlurmUser=root) from a minimal slurm.conf on
  127.0.0.1 with free ports: ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``
  (no cgroup plugin, so no cgroup of this machine is touched), state and spool directories
  under the test's directory, no accounting. The node is this host (its short host name, as
  slurmd finds itself) with the CPUs and memory ``slurmd -C`` reports, ``NodeAddr=127.0.0.1``.
- Every command gets ``SLURM_CONF``; nothing under /etc is read or written.

What Slurm 22.05 gives a prolog (measured here): ``SLURM_JOB_ID``, ``SLURMD_NODENAME``,
``SLURM_NODELIST`` (not yet ``SLURM_JOB_NODELIST``), ``SLURM_CONF``, and no ``PATH`` or other
variable of slurmd's environment. A failing prolog drains the node with the reason
"Prolog error" unless the node was drained already (then the reason set first stays).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from tests.integration.debroot import require

BOUND_S = 60.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM one daemon by its pid, SIGKILL after 20 s; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Slurm:
    """munged + slurmctld + slurmd for one node; ``prolog``/``epilog`` are the scripts
    slurm.conf names (``PrologFlags=Alloc``). Use as a context manager."""

    def __init__(self, workdir: Path, prolog: Path, epilog: Path) -> None:
        require("munged", "slurmctld", "slurmd", "srun", "scontrol", "sinfo")
        self.workdir = workdir
        self.node = socket.gethostname().split(".")[0]
        self.conf = workdir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.munge_dir = Path(tempfile.mkdtemp(prefix="nvfabric-munge-"))
        self._munge_err: IO[bytes] | None = None
        self._write_conf(prolog, epilog)

    def _write_conf(self, prolog: Path, epilog: Path) -> None:
        w = self.workdir
        for d in ("state", "spool"):
            (w / d).mkdir(parents=True, exist_ok=True)
        ctld_port, slurmd_port = free_ports(2)
        hw = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True,
                            timeout=60, env=self.env).stdout.splitlines()[0]
        assert hw.startswith(f"NodeName={self.node} "), hw
        self.conf.write_text(f"""\
ClusterName=nvfabrictest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_dir}/munge.socket
StateSaveLocation={w}/state
SlurmdSpoolDir={w}/spool
SlurmctldPidFile={w}/slurmctld.pid
SlurmdPidFile={w}/slurmd.pid
SlurmctldLogFile={w}/slurmctld.log
SlurmdLogFile={w}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
Prolog={prolog}
Epilog={epilog}
PrologFlags=Alloc
{hw} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""", encoding="utf-8")

    def _start_munge(self) -> None:
        munge = pwd.getpwnam("munge")
        d = self.munge_dir
        os.chown(d, munge.pw_uid, munge.pw_gid)
        os.chmod(d, 0o755)
        key = d / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        self._munge_err = open(self.workdir / "munged.err", "wb")  # noqa: SIM115 - closed in close()
        proc = subprocess.Popen(
            ["munged", "--foreground", f"--socket={d}/munge.socket", f"--key-file={key}",
             f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
             f"--seed-file={d}/munged.seed"],
            user=munge.pw_uid, group=munge.pw_gid, extra_groups=[],
            stdout=subprocess.DEVNULL, stderr=self._munge_err)
        self.procs.append(("munged", proc))
        self._until(lambda: (d / "munge.socket").exists(), "munged's socket", proc)

    def _until(self, predicate: object, what: str, proc: subprocess.Popen[bytes] | None = None,
               bound: float = BOUND_S) -> None:
        assert callable(predicate)
        deadline = time.monotonic() + bound
        while not predicate():
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{what}: the daemon exited ({proc.returncode}); "
                                     + self.logs())
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {bound} s; " + self.logs())
            time.sleep(0.2)

    def logs(self) -> str:
        out = []
        for name in ("munged.err", "slurmctld.log", "slurmd.log"):
            path = self.workdir / name
            if path.exists():
                out.append(f"--- {name}:\n" + "\n".join(
                    path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(out)

    def __enter__(self) -> Slurm:
        try:
            self._start_munge()
            for daemon in ("slurmctld", "slurmd"):
                proc = subprocess.Popen([daemon, "-D"], env=self.env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                self.procs.append((daemon, proc))
            self._until(lambda: self.state() == "idle", "idle node in sinfo", self.procs[-1][1])
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop slurmd, slurmctld, munged (in that order), each by its pid."""
        for _name, proc in reversed(self.procs):
            _stop(proc)
        self.procs.clear()
        if self._munge_err is not None:
            self._munge_err.close()
        shutil.rmtree(self.munge_dir, ignore_errors=True)

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A Slurm client command (srun, scontrol, sinfo) against this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=self.env, check=False)

    def state(self) -> str:
        """The node's state as sinfo prints it (idle, drain, alloc, ...), "" if none yet."""
        out = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=30)
        return out.stdout.strip() if out.returncode == 0 else ""

    def node_fields(self) -> dict[str, str]:
        """``scontrol show node`` of the node as {key: value} (State, Reason, ...)."""
        text = self.run("scontrol", "show", "node", self.node, timeout=30).stdout
        fields: dict[str, str] = {}
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("Reason="):
                fields["Reason"] = stripped[len("Reason="):]
                continue
            for part in stripped.split():
                key, eq, value = part.partition("=")
                if eq:
                    fields[key] = value
        return fields

    def resume(self) -> None:
        """Return a drained node to service and wait until it is idle."""
        self.run("scontrol", "update", f"NodeName={self.node}", "State=RESUME", timeout=30)
        self._until(lambda: self.state() == "idle", "idle node after resume")

    def idle(self) -> None:
        """Wait until the node is idle again (the epilog of the last job has finished)."""
        self._until(lambda: self.state() == "idle", "idle node (epilog done)")

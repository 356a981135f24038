"""The unit state machine (nvfabric.supervisor.machine) on a fake clock and a fake host: no
process is started and no time passes, so the restart policy (back-off doubling to the cap and
its reset, the start limit), the R04 gate with R09's check, the stop order and its grace
timers, and R05's second signal are tested in milliseconds. The wiring to real processes is
tested by tests/supervisor/test_supervise.py and tests/cli/test_run_*.py."""

from __future__ import annotations

import io
import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from nvfabric.bringup import fabricmanager
from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects.log import Log
from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.supervisor.host import Proc
from nvfabric.supervisor.machine import Unit
from nvfabric.supervisor.policy import REPEATED_STOP_WINDOW_S, Policy

EXIT_3 = 3 << 8  # a wait status: exited with code 3
KILLED = signal.SIGKILL  # a wait status: killed by SIGKILL
OK = 0


class Lines(Log):
    """A log that keeps its lines."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class FakeHost:
    """A host that starts nothing: spawns get pids from 100 up, signals and notifications
    are recorded, exits are what the test says (:meth:`exit`), time is :attr:`clock`."""

    clock: float = 1000.0
    next_pid: int = 100
    spawned: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    kills: list[tuple[int, int]] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    probe: Callable[[], GpuCheck] | None = None
    probes_asked: int = 0
    reset_answer: tuple[int | None, bytes, str | None] = (0, b"GPUs reset\n", None)
    resets: list[tuple[str, ...]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    sockets: set[str] = field(default_factory=set)
    #: sockets whose file exists (bind) that do not listen yet
    bound_only: set[str] = field(default_factory=set)
    #: the kernel's table of Unix sockets can be read
    table: bool = True
    #: for each watch closed: how many services had been spawned by then
    unwatched: list[int] = field(default_factory=list)

    def now(self) -> float:
        return self.clock

    def pid(self) -> int:
        return 4242

    def spawn(self, argv: Sequence[str], env: dict[str, str]) -> tuple[int, int]:
        if argv[0] in self.missing:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        self.next_pid += 1
        self.spawned.append((self.next_pid, tuple(argv)))
        return self.next_pid, -self.next_pid  # a fake descriptor nobody reads

    def kill(self, pid: int, sig: int) -> None:
        self.kills.append((pid, sig))

    def reap(self, pid: int) -> int | None:
        return self.statuses.pop(pid, None)

    def wait(self, pid: int) -> None:
        self.statuses.pop(pid, None)

    def watch_output(self, fd: int, on_readable: Callable[[], None]) -> None:
        pass

    def read(self, fd: int) -> bytes | None:
        return b""

    def close_output(self, fd: int) -> None:
        pass

    def watch_dir(self, directory: str, on_change: Callable[[], None]) -> object:
        return directory

    def drain_watch(self, handle: object) -> None:
        pass

    def unwatch(self, handle: object) -> None:
        self.unwatched.append(len(self.spawned))

    def is_socket(self, path: str) -> bool:
        return path in self.sockets

    def socket_listening(self, path: str) -> bool:
        return False

    def socket_listens(self, path: str) -> bool | None:
        return path in self.sockets and path not in self.bound_only if self.table else None

    def unlink(self, path: str) -> None:
        self.sockets.discard(path)

    def ensure_dir(self, path: str) -> bool:
        return False

    def executable(self, path: str) -> bool:
        return path not in self.missing

    def notify(self, message: str) -> bool:
        self.notified.append(message)
        return True

    def write_file(self, path: str, text: str) -> None:
        self.files[path] = text

    def remove_file(self, path: str) -> None:
        self.files.pop(path, None)

    def read_small(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(2, "No such file", path)
        return self.files[path][:64]

    def request_probe(self) -> bool:
        self.probes_asked += 1
        return self.probe is not None

    def probe_now(self) -> GpuCheck | None:
        return None if self.probe is None else self.probe()

    def run_reset(self, argv: Sequence[str], timeout_s: float, tick: Callable[[], float]
                  ) -> tuple[int | None, bytes, str | None]:
        self.resets.append(tuple(argv))
        return self.reset_answer

    # ------------------------------------------------------------- what a test does

    def pids(self) -> list[int]:
        return [pid for pid, _ in self.spawned]


def machine(specs: Sequence[ServiceSpec], policy: Policy | None = None,
            host: FakeHost | None = None, **kw: object) -> tuple[Unit, FakeHost, Lines]:
    host = host or FakeHost()
    log = Lines()
    unit = Unit(specs, policy or Policy(), host, log, env={}, **kw)  # type: ignore[arg-type]
    return unit, host, log


def advance(unit: Unit, host: FakeHost, seconds: float) -> None:
    """Move the fake clock, firing the timers on the way in order (as the loop would)."""
    end = host.clock + seconds
    while unit.outcome is None:
        wait = unit.timers.next_timeout()
        if wait is None or host.clock + wait > end:
            break
        host.clock += wait
        unit.timers.fire_due(lambda: unit.outcome is not None)
    host.clock = max(host.clock, end)


def restart_due(unit: Unit, host: FakeHost) -> None:
    """Move the fake clock to exactly when the pending restart is due, and restart."""
    assert "restart" in unit.timers
    advance(unit, host, unit.timers.left("restart"))


def exit_(unit: Unit, host: FakeHost, pid: int, status: int) -> None:
    """Child ``pid`` exits with wait status ``status`` (SIGCHLD)."""
    host.statuses[pid] = status
    unit.reap()


def proc(unit: Unit, name: str) -> Proc:
    return next(p for p in unit.procs if p.spec.name == name)


def spec(name: str, **kw: object) -> ServiceSpec:
    return ServiceSpec(name, (f"/usr/bin/{name}",), **kw)  # type: ignore[arg-type]


def delays(log: Lines) -> list[float]:
    return [float(d) for d in re.findall(r"restarting the unit in ([\d.]+) s", log.text)]


# ---------------------------------------------------------------- R03 restart policy


def test_restart_backoff_doubles_up_to_the_cap() -> None:
    unit, host, log = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=0.1,
                                                   backoff_cap_s=0.4))
    unit.start()
    for _ in range(5):
        exit_(unit, host, host.pids()[-1], EXIT_3)  # dies at once, never ready for the cap
        restart_due(unit, host)
    assert delays(log) == [0.1, 0.2, 0.4, 0.4, 0.4]
    assert log.text.count("exited with code 3") == 5 and len(host.spawned) == 6
    assert unit.restarts == 5 and unit.outcome is None
    # each restart came exactly after its delay
    unit.on_signal(signal.SIGTERM)
    exit_(unit, host, host.pids()[-1], OK)
    assert unit.outcome is not None and (unit.outcome.exit_code, unit.outcome.restarts) == (0, 5)


def test_the_restart_comes_after_the_delay_not_before() -> None:
    unit, host, _ = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=1.0))
    unit.start()
    exit_(unit, host, host.pids()[-1], EXIT_3)
    advance(unit, host, 0.999)
    assert len(host.spawned) == 1 and unit.phase == "waiting"
    advance(unit, host, 0.002)
    assert len(host.spawned) == 2 and unit.phase == "ready"


def test_backoff_starts_again_once_the_unit_stayed_ready_for_the_cap() -> None:
    unit, host, log = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=0.15,
                                                   backoff_cap_s=0.6))
    unit.start()
    for up_s in (0.0, 0.0, 0.0, 0.59, 0.6, 0.0):
        advance(unit, host, up_s)
        exit_(unit, host, host.pids()[-1], EXIT_3)
        restart_due(unit, host)
    # ready 0.59 s < cap: doubling goes on; ready 0.6 s: the first delay again
    assert delays(log) == [0.15, 0.3, 0.6, 0.6, 0.15, 0.3]


def test_r03_a100_fabric_manager_restarts_on_its_success_line_with_backoff() -> None:
    # DGX A100: NVML has no fabric state, so the success line is readiness; no GPU reset
    fm = fabricmanager.spec("/usr/bin/nv-fabricmanager", "/etc/fm.cfg", None, needs_reset=False)
    host = FakeHost(probe=lambda: GpuCheck(False, False, "8 GPUs: not_supported x8",
                                           supported=False))
    unit, host, log = machine([fm], Policy(restart="on-failure", backoff_base_s=0.15,
                                           backoff_cap_s=0.6), host)
    unit.start()
    for _ in range(4):
        unit.on_probe(host.probe())  # type: ignore[misc]
        unit.take(proc(unit, "fabricmanager"), f"{fabricmanager.SUCCESS_LINE}\n".encode())
        assert unit.phase == "ready"
        advance(unit, host, 0.2)  # the fake's crash 0.2 s after its success line
        exit_(unit, host, host.pids()[-1], EXIT_3)
        advance(unit, host, 10)
    assert delays(log) == [0.15, 0.3, 0.6, 0.6]
    assert len(host.spawned) == 5
    assert "taking fabricmanager's success line as readiness" in log.text


def test_without_restart_a_failure_ends_the_run() -> None:
    unit, host, _ = machine([spec("nvlsm", ready_socket="/run/sm.sock"), spec("fm")])
    unit.start()
    assert len(host.spawned) == 1  # fabric manager waits for the socket
    host.sockets.add("/run/sm.sock")
    unit.on_socket_event(proc(unit, "nvlsm"))
    exit_(unit, host, host.pids()[0], KILLED)
    assert host.kills == [(host.pids()[1], signal.SIGTERM)]  # the other one is stopped
    exit_(unit, host, host.pids()[1], OK)
    assert unit.outcome is not None and (unit.outcome.exit_code, unit.outcome.reason) == (
        1, "failed")
    f = unit.outcome.findings[0]
    assert (f.code, f.fields["service"], f.fields["signal"], f.fields["phase"]) == (
        "service_exited", "nvlsm", signal.SIGKILL, "after the fabric was ready")
    assert "`nvfabric doctor --log FILE` explains a saved log" in f.hint


def test_a_failure_s_hint_types_doctor_for_the_run_s_root() -> None:
    unit, host, _ = machine([spec("fm")], hints=HintContext("/srv/node 2"))
    unit.start()
    exit_(unit, host, host.pids()[0], KILLED)
    assert unit.outcome is not None
    f = unit.outcome.findings[0]
    assert f.code == "service_exited"
    assert "`nvfabric doctor --root '/srv/node 2' --log FILE` explains a saved log" in f.hint


# ---------------------------------------------------------------- NVLSM's socket listens


def test_nvlsm_is_ready_when_its_socket_listens_not_when_its_file_exists() -> None:
    # bind(2) makes the file (inotify sees it), listen(2) makes it accept connections: fabric
    # manager started in between was refused (`Connection refused`)
    unit, host, log = machine([spec("nvlsm", ready_socket="/run/sm.sock"), spec("fm")])
    unit.start()
    host.sockets.add("/run/sm.sock")
    host.bound_only.add("/run/sm.sock")
    unit.on_socket_event(proc(unit, "nvlsm"))
    assert len(host.spawned) == 1 and "exists but does not listen yet" in log.text
    advance(unit, host, 0.5)  # looked at again and again: still not listening
    assert len(host.spawned) == 1 and unit.outcome is None
    assert host.notified[-1] == "STATUS=waiting for nvlsm to listen on /run/sm.sock"
    host.bound_only.clear()  # listen(2): no inotify event; the next look sees it
    advance(unit, host, 0.01)
    assert [argv for _, argv in host.spawned] == [("/usr/bin/nvlsm",), ("/usr/bin/fm",)]
    assert "nvlsm IPC socket /run/sm.sock is up after" in log.text


def test_a_socket_that_never_listens_is_a_socket_timeout_naming_the_listen() -> None:
    unit, host, _ = machine([spec("nvlsm", ready_socket="/run/sm.sock"), spec("fm")],
                            Policy(socket_timeout_s=2.0))
    unit.start()
    host.sockets.add("/run/sm.sock")
    host.bound_only.add("/run/sm.sock")
    unit.on_socket_event(proc(unit, "nvlsm"))
    advance(unit, host, 2.0)
    exit_(unit, host, host.pids()[0], OK)
    assert unit.outcome is not None and len(host.spawned) == 1
    f = unit.outcome.findings[0]
    assert f.code == "socket_timeout" and "did not listen on its IPC socket" in f.message


def test_without_the_kernels_table_the_socket_file_is_the_readiness_as_before() -> None:
    unit, host, log = machine([spec("nvlsm", ready_socket="/run/sm.sock"), spec("fm")],
                              host=FakeHost(table=False))
    unit.start()
    host.sockets.add("/run/sm.sock")
    unit.on_socket_event(proc(unit, "nvlsm"))
    assert len(host.spawned) == 2
    assert "the kernel's table of Unix sockets cannot be read" in log.text


# ---------------------------------------------------------------- start limit


def test_a_crash_loop_ends_at_the_start_limit() -> None:
    policy = Policy(restart="on-failure", backoff_base_s=0.05, backoff_cap_s=0.05,
                    start_limit_burst=3, start_limit_interval_s=120)
    unit, host, log = machine([spec("fm")], policy)
    unit.start()
    for _ in range(3):
        advance(unit, host, 0.1)
        exit_(unit, host, host.pids()[-1], EXIT_3)
        advance(unit, host, 1)
    assert unit.outcome is not None and unit.outcome.exit_code == 1
    assert [f.code for f in unit.outcome.findings][-2:] == ["service_exited", "restart_limit"]
    limit = unit.outcome.findings[-1]
    assert (limit.fields["starts"], limit.fields["burst"], limit.fields["interval_s"]) == (
        3, 3, 120)
    assert unit.outcome.restarts == 2 and len(host.spawned) == 3
    assert "restart_limit: the unit was started 3 times within 120 s" in log.text


def test_starts_older_than_the_interval_do_not_count_to_the_limit() -> None:
    policy = Policy(restart="on-failure", backoff_base_s=1, backoff_cap_s=1,
                    start_limit_burst=3, start_limit_interval_s=10)
    unit, host, _ = machine([spec("fm")], policy)
    unit.start()
    for _ in range(6):  # a crash every 6 s: never 3 starts within 10 s
        advance(unit, host, 5)
        exit_(unit, host, host.pids()[-1], EXIT_3)
        advance(unit, host, 1)
    assert unit.outcome is None and unit.restarts == 6


def test_a_binary_removed_before_the_restart_ends_the_loop() -> None:
    unit, host, _ = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=0.05))
    unit.start()
    host.missing.add("/usr/bin/fm")
    exit_(unit, host, host.pids()[-1], EXIT_3)
    advance(unit, host, 1)
    assert unit.outcome is not None and unit.outcome.restarts == 0
    assert [f.code for f in unit.outcome.findings] == ["service_exited", "binary_missing"]
    assert len(host.spawned) == 1


def test_the_restart_preflight_refuses_with_its_own_finding() -> None:
    mismatch = Finding("version_mismatch", "error", "fabric manager 570 does not match 550")
    checks: list[int] = []

    def preflight() -> list[Finding]:
        checks.append(1)
        return [Finding("version_mismatch", "info", "fine"), mismatch]

    unit, host, _ = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=0.05),
                            preflight=preflight)
    unit.start()
    exit_(unit, host, host.pids()[-1], EXIT_3)
    assert not checks  # checked when the restart is due, not at the exit
    advance(unit, host, 1)
    assert unit.outcome is not None
    assert list(unit.outcome.findings)[-1] is mismatch and len(host.spawned) == 1


# ---------------------------------------------------------------- R04 / R09


def _fm(**kw: object) -> ServiceSpec:
    return spec("fabricmanager", ready_gpus=True, restart_needs_gpu_reset=True, **kw)


REGISTERED = GpuCheck(True, True, "8 GPUs: completed x8", progress=(8, 8))


def _ready_then_crash(unit: Unit, host: FakeHost) -> None:
    advance(unit, host, 0.1)  # the probe timer asks
    assert host.probes_asked >= 1
    unit.on_probe(REGISTERED)
    assert unit.phase == "ready"
    advance(unit, host, 0.3)
    exit_(unit, host, host.pids()[-1], 1 << 8)


def test_r04_restart_after_registration_is_refused_without_a_reset_command() -> None:
    host = FakeHost(probe=lambda: REGISTERED)
    unit, host, log = machine([_fm()], Policy(restart="on-failure", backoff_base_s=0.01), host)
    unit.start()
    _ready_then_crash(unit, host)
    advance(unit, host, 1)
    assert unit.outcome is not None
    assert (unit.outcome.exit_code, unit.outcome.restarts) == (1, 0)
    assert [f.code for f in unit.outcome.findings] == ["service_exited",
                                                       "restart_needs_gpu_reset"]
    assert unit.outcome.findings[0].fields["exit_code"] == 1
    assert len(host.spawned) == 1 and not host.resets
    assert "error restart_needs_gpu_reset" in log.text and "(hint: stop CUDA clients" in log.text


def test_r04_registered_before_the_first_start_needs_the_reset_too() -> None:
    host = FakeHost(probe=lambda: REGISTERED)
    unit, host, _ = machine([_fm()], Policy(registered_at_start=True), host)
    unit.start()
    assert unit.outcome is not None and unit.outcome.findings[0].code == (
        "restart_needs_gpu_reset")
    assert not host.spawned


def test_r04_reset_command_runs_before_the_restart_and_r09_checks_it() -> None:
    # registered when the unit was ready; read again after the reset: reset (R09)
    host = FakeHost(probe=lambda: GpuCheck(False, False, "8 GPUs: not_started x8"))
    policy = Policy(restart="on-failure", backoff_base_s=0.01, gpu_reset_argv=("/r", "-r"))
    unit, host, log = machine([_fm()], policy, host)
    unit.start()
    _ready_then_crash(unit, host)
    assert not host.resets  # not at the exit: when the restart is due
    advance(unit, host, 0.01)
    assert host.resets == [("/r", "-r")] and len(host.spawned) == 2 and unit.restarts == 1
    text = log.text
    assert text.index("gpu-reset: GPUs reset") < text.rindex("started fabricmanager")
    assert text.index("GPU reset checked: 8 GPUs: not_started x8") < text.rindex(
        "started fabricmanager")


def test_r09_a_reset_that_leaves_gpus_registered_is_refused() -> None:
    registered = GpuCheck(True, True, "2 GPUs: completed x2",
                          registered_gpus=("GPU 0 (0000:18:00.0)", "GPU 1 (0000:2a:00.0)"))
    host = FakeHost(probe=lambda: registered)
    policy = Policy(restart="on-failure", backoff_base_s=0.01, gpu_reset_argv=("/r",))
    unit, host, _ = machine([_fm()], policy, host)
    unit.start()
    _ready_then_crash(unit, host)
    advance(unit, host, 1)
    assert unit.outcome is not None
    assert (unit.outcome.exit_code, unit.outcome.restarts) == (1, 0)
    assert [f.code for f in unit.outcome.findings] == ["service_exited",
                                                       "restart_needs_gpu_reset"]
    refusal = unit.outcome.findings[1]
    assert refusal.fields["gpus"] == ["GPU 0 (0000:18:00.0)", "GPU 1 (0000:2a:00.0)"]
    assert "GPU 0 (0000:18:00.0), GPU 1 (0000:2a:00.0)" in refusal.message
    assert len(host.spawned) == 1


@pytest.mark.parametrize(("answer", "says"), [
    ((3, b"", None), "exited with code 3"),
    ((None, b"", None), "did not finish within 300 s"),
])
def test_r04_a_reset_command_that_fails_starts_nothing(
        answer: tuple[int | None, bytes, str | None], says: str) -> None:
    host = FakeHost(probe=lambda: REGISTERED, reset_answer=answer)
    policy = Policy(restart="on-failure", backoff_base_s=0.01, gpu_reset_argv=("/r",))
    unit, host, _ = machine([_fm()], policy, host)
    unit.start()
    _ready_then_crash(unit, host)
    advance(unit, host, 1)
    assert unit.outcome is not None and says in unit.outcome.findings[-1].message
    assert len(host.spawned) == 1


def test_r04_a_stop_signal_during_the_reset_is_an_orderly_stop() -> None:
    host = FakeHost(probe=lambda: REGISTERED, reset_answer=(None, b"", "SIGTERM"))
    unit, host, log = machine([_fm()], Policy(registered_at_start=True,
                                              gpu_reset_argv=("/r",)), host)
    unit.start()
    assert unit.outcome is not None and (unit.outcome.exit_code, unit.outcome.reason) == (
        0, "stopped")
    assert not host.spawned and "received SIGTERM during the GPU reset" in log.text


def test_r04_a_stop_during_the_reset_before_a_restart_keeps_the_crash_that_caused_it() -> None:
    # The crash asked for the restart, the reset ran, SIGTERM came during it: `stopped`,
    # exit 0, and the service_exited that led there is still in the findings (it was dropped)
    host = FakeHost(probe=lambda: REGISTERED, reset_answer=(None, b"", "SIGTERM"))
    policy = Policy(restart="on-failure", backoff_base_s=0.01, gpu_reset_argv=("/r",))
    unit, host, _ = machine([_fm()], policy, host)
    unit.start()
    _ready_then_crash(unit, host)
    advance(unit, host, 1)
    assert host.resets == [("/r",)] and len(host.spawned) == 1
    assert unit.outcome is not None and (unit.outcome.exit_code, unit.outcome.reason) == (
        0, "stopped")
    (crash,) = unit.outcome.findings
    assert (crash.code, crash.severity, crash.fields["exit_code"]) == (
        "service_exited", "error", 1)
    assert crash.fields["restarted"] is False
    assert crash.message.endswith("the run was stopped during the GPU reset before its restart")


def test_r04_no_gpu_reset_needed_where_the_spec_does_not_ask() -> None:
    host = FakeHost(probe=lambda: REGISTERED)
    unit, host, log = machine([spec("fabricmanager", ready_gpus=True)],
                              Policy(restart="on-failure", backoff_base_s=0.01), host)
    unit.start()
    _ready_then_crash(unit, host)
    advance(unit, host, 1)
    assert unit.outcome is None and unit.restarts == 1 and len(host.spawned) == 2
    assert not host.resets and "gpu-reset" not in log.text


# ---------------------------------------------------------------- stop order and R05


def _up(unit: Unit, host: FakeHost) -> tuple[int, int]:
    unit.start()
    host.sockets.add("/run/sm.sock")
    unit.on_socket_event(proc(unit, "nvlsm"))
    assert unit.phase == "ready"
    sm, fm = host.pids()
    return sm, fm


def _pair(grace_s: float = 10.0) -> list[ServiceSpec]:
    return [spec("nvlsm", ready_socket="/run/sm.sock", grace_s=grace_s),
            spec("fabricmanager", grace_s=grace_s)]


def test_stop_in_reverse_start_order_each_after_the_other_is_gone() -> None:
    unit, host, log = machine(_pair())
    sm, fm = _up(unit, host)
    unit.on_signal(signal.SIGTERM)
    assert host.kills == [(fm, signal.SIGTERM)]  # NVLSM only once fabric manager is gone
    exit_(unit, host, fm, OK)
    assert host.kills == [(fm, signal.SIGTERM), (sm, signal.SIGTERM)]
    exit_(unit, host, sm, OK)
    assert unit.outcome is not None and (unit.outcome.exit_code, unit.outcome.reason) == (
        0, "stopped")
    assert host.notified[-3:] == ["STOPPING=1", "STATUS=stopping fabricmanager",
                                  "STATUS=stopping nvlsm"]
    assert "all services stopped" in log.text


def test_r05_a_child_ignoring_sigterm_is_killed_after_exactly_its_grace() -> None:
    unit, host, log = machine(_pair(grace_s=0.3))
    sm, fm = _up(unit, host)
    unit.on_signal(signal.SIGTERM)
    advance(unit, host, 0.299)
    assert (fm, signal.SIGKILL) not in host.kills
    advance(unit, host, 0.002)
    assert host.kills[-1] == (fm, signal.SIGKILL)
    assert "fabricmanager (pid 102) ignored SIGTERM for 0.3 s: SIGKILL" in log.text
    exit_(unit, host, fm, KILLED)
    assert host.kills[-1] == (sm, signal.SIGTERM)
    assert "fabricmanager stopped (killed by SIGKILL)" in log.text


def test_r05_a_second_signal_within_the_window_is_the_same_request() -> None:
    unit, host, log = machine(_pair())
    _, fm = _up(unit, host)
    unit.on_signal(signal.SIGTERM)
    advance(unit, host, REPEATED_STOP_WINDOW_S - 0.01)
    unit.on_signal(signal.SIGTERM)
    assert (fm, signal.SIGKILL) not in host.kills
    assert "the same stop request, still stopping in order" in log.text
    assert "killing what is left" not in log.text


def test_r05_a_second_signal_after_the_window_kills_at_once() -> None:
    unit, host, log = machine(_pair(grace_s=30))
    sm, fm = _up(unit, host)
    unit.on_signal(signal.SIGTERM)
    advance(unit, host, REPEATED_STOP_WINDOW_S + 0.2)
    unit.on_signal(signal.SIGTERM)
    assert host.kills[-1] == (fm, signal.SIGKILL)  # long before its 30 s grace
    assert "received SIGTERM again: killing what is left" in log.text
    exit_(unit, host, fm, KILLED)
    exit_(unit, host, sm, OK)
    assert unit.outcome is not None and unit.outcome.exit_code == 0


def test_r05_a_stop_while_waiting_for_the_restart_ends_at_once() -> None:
    unit, host, _ = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=5))
    unit.start()
    exit_(unit, host, host.pids()[-1], EXIT_3)
    unit.on_signal(signal.SIGINT)
    assert unit.outcome is not None and (unit.outcome.exit_code, unit.outcome.reason) == (
        0, "stopped")
    exited = unit.outcome.findings[0]
    assert exited.code == "service_exited" and exited.fields["restarted"] is False
    assert len(host.spawned) == 1


def test_socket_timeout_fails_the_start_before_fabric_manager() -> None:
    unit, host, _ = machine(_pair(grace_s=0.2), Policy(socket_timeout_s=60))
    unit.start()
    advance(unit, host, 59.9)
    assert unit.phase == "starting"
    advance(unit, host, 0.2)
    assert unit.outcome is None and host.kills == [(host.pids()[0], signal.SIGTERM)]
    exit_(unit, host, host.pids()[0], OK)
    assert unit.outcome is not None and unit.outcome.findings[0].code == "socket_timeout"
    assert len(host.spawned) == 1


def test_fabric_manager_starts_before_the_socket_watch_is_closed() -> None:
    # closing an inotify descriptor can take milliseconds (an SRCU grace period): it comes
    # after fabric manager's spawn, not between the socket and it
    unit, host, log = machine(_pair())
    unit.start()
    assert host.unwatched == [] and len(host.spawned) == 1
    host.sockets.add("/run/sm.sock")
    unit.on_socket_event(proc(unit, "nvlsm"))
    assert unit.phase == "ready" and host.unwatched == [2]
    assert "socket-timeout" not in unit.timers
    assert log.text.index("IPC socket /run/sm.sock is up") < log.text.index(
        "started fabricmanager")


def test_snapshot_names_each_service_state_pid_restarts_and_exits() -> None:
    unit, host, _ = machine(_pair(), Policy(restart="on-failure", backoff_base_s=1))
    assert [s["state"] for s in unit.snapshot()] == ["not_started", "not_started"]
    sm, fm = _up(unit, host)
    assert unit.snapshot() == [
        {"service": "nvlsm", "state": "ready", "pid": sm, "restarts": 0, "exits": {},
         "ready": True},
        {"service": "fabricmanager", "state": "ready", "pid": fm, "restarts": 0, "exits": {},
         "ready": True}]
    exit_(unit, host, fm, EXIT_3)
    snap = unit.snapshot()
    assert [(s["state"], s["pid"]) for s in snap] == [("stopping", sm), ("exited", None)]
    exit_(unit, host, sm, OK)
    snap = unit.snapshot()
    assert [s["state"] for s in snap] == ["waiting", "waiting"]
    assert [s["exits"] for s in snap] == [{"stopped": 1}, {"exit_code": 1}]
    advance(unit, host, 1)
    assert [s["restarts"] for s in unit.snapshot()] == [1, 1]


def test_the_watchdog_pings_every_half_interval_on_time() -> None:
    unit, host, _ = machine([spec("fm")])
    unit.start(watchdog_s=0.1)
    assert host.notified[0] == "WATCHDOG=1"  # at once
    advance(unit, host, 0.099)
    assert host.notified.count("WATCHDOG=1") == 1
    advance(unit, host, 0.902)
    assert host.notified.count("WATCHDOG=1") == 11  # at 0.1, 0.2, ... 1.0 s
    unit.on_signal(signal.SIGTERM)
    advance(unit, host, 0.1)  # still pinging while stopping
    assert host.notified.count("WATCHDOG=1") == 12


def test_the_other_service_gets_its_sigterm_before_the_failure_is_logged() -> None:
    # a dying NVLSM: fabric manager's own shutdown starts while the lines are written
    unit, host, log = machine(_pair())
    sm, fm = _up(unit, host)
    kills_when_logged: list[int] = []
    log.line = lambda text: (kills_when_logged.append(len(host.kills))  # type: ignore[method-assign]
                             if "error service_exited" in text else None)
    exit_(unit, host, sm, KILLED)
    assert kills_when_logged == [1] and host.kills == [(fm, signal.SIGTERM)]  # once
    exit_(unit, host, fm, OK)
    assert unit.outcome is not None and unit.outcome.findings[0].fields["service"] == "nvlsm"


def test_status_counts_down_the_wait_before_a_restart_and_says_the_restart() -> None:
    # a STATUS= said once ("restarting the unit in 3 s") is what `systemctl status` shows for
    # the whole wait: stale after a second; it is said again each second
    unit, host, _ = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=3.0))
    unit.start()
    exit_(unit, host, host.pids()[-1], EXIT_3)
    seen = [m for m in host.notified if m.startswith("STATUS=")]
    assert seen[-1] == "STATUS=restarting the unit in 3 s (restart 1)"
    advance(unit, host, 2.5)
    assert [m for m in host.notified if m.startswith("STATUS=restarting")][-3:] == [
        "STATUS=restarting the unit in 3 s (restart 1)",
        "STATUS=restarting the unit in 2 s (restart 1)",
        "STATUS=restarting the unit in 1 s (restart 1)"]
    restart_due(unit, host)
    assert "STATUS=starting the unit again (restart 1)" in host.notified
    assert "restart-status" not in unit.timers


def test_a_stop_during_the_restart_wait_ends_the_countdown() -> None:
    unit, host, _ = machine([spec("fm")], Policy(restart="on-failure", backoff_base_s=5.0))
    unit.start()
    exit_(unit, host, host.pids()[-1], EXIT_3)
    unit.on_signal(signal.SIGTERM)
    assert unit.outcome is not None and "restart-status" not in unit.timers

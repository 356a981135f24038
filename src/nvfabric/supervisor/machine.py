"""The unit state machine: the services of a unit started in order, each once the one before
it is ready (RUN.md R01); one unit (a service that exits stops the others, in reverse start
order); the restart policy (:mod:`nvfabric.supervisor.restart`); an orderly stop on
SIGTERM/SIGINT (R05).

Phases: ``idle`` -> ``starting`` -> ``ready`` -> ``stopping`` -> (``waiting`` for a restart
-> ``starting`` ...) -> ``done`` (:attr:`Unit.outcome` set). The machine acts only through its
:class:`~nvfabric.supervisor.host.Host` and reads time only from it, so a test drives it with a
fake host and a fake clock (tests/supervisor/test_machine.py).

Readiness, of each service and of the unit:

- NVLSM's IPC socket, seen through a directory watch (inotify; a 10 ms poll where there is
  none), then confirmed listening in the kernel's table of Unix sockets (polled from 1 ms:
  listen(2) makes no inotify event), bounded by ``socket_timeout_s``;
- the readiness probe (every GPU's fabric state completed; IMEX READY), asked for at a growing
  interval and reported as ``registration_stuck``/``imex_not_ready`` after
  ``ready_timeout_s``;
- a success line of the daemon's output (``ready_line``), and the live diagnosis of each line;
- the unit ready: the readiness file, ``READY=1`` and ``STATUS=`` to systemd, one log line.
"""

from __future__ import annotations

import errno
import functools
import json
import re
import signal
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects.log import Log
from nvfabric.effects.notify import status_text
from nvfabric.effects.process import describe_status
from nvfabric.effects.stop import SIGHUP_IGNORED
from nvfabric.facts.execinfo import INTERPRETER_HINT, exec_error, missing_interpreter
from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.words import seconds
from nvfabric.supervisor.host import Host, Proc
from nvfabric.supervisor.outcome import Outcome
from nvfabric.supervisor.policy import REPEATED_STOP_WINDOW_S, Classifier, Policy
from nvfabric.supervisor.restart import (
    backoff_delay,
    backoff_resets,
    gpu_reset,
    start_limit,
)
from nvfabric.supervisor.timers import Timers

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
POLL_FALLBACK_S = 0.01
#: The first look again at a socket file that exists but does not listen yet (doubling up to
#: POLL_FALLBACK_S): a real NVLSM listens microseconds after its bind.
LISTEN_POLL_FIRST_S = 0.001
MAX_LINE = 65536
#: How often STATUS= says the time left before a restart (seconds).
RESTART_STATUS_EVERY_S = 1.0


class Unit:
    """Runs ``specs`` as one unit under ``policy`` through ``host``. Drive it with
    :meth:`start`, then the ``on_*`` events and :attr:`timers`, until :attr:`outcome` is set.
    ``classifier(name)`` makes the live diagnosis of a service's lines; ``preflight()`` is
    checked again before a restart; ``env`` is the environment every daemon starts with (its
    spec's variables added); ``history`` is the event history's append
    (:meth:`nvfabric.effects.history.History.append`: the unit ready, a restart); ``hints``
    the node its findings' hints type commands for (a service's exit: ``doctor --root``)."""

    def __init__(self, specs: Sequence[ServiceSpec], policy: Policy, host: Host, log: Log, *,
                 env: dict[str, str], classifier: Callable[[str], Classifier] | None = None,
                 ready_file: str | None = None, ready_info: dict[str, object] | None = None,
                 pid_dir: str | None = None,
                 preflight: Callable[[], Sequence[Finding]] | None = None,
                 history: Callable[[str, dict[str, Any]], None] | None = None,
                 hints: HintContext | None = None) -> None:
        if not specs:
            raise ValueError("a unit needs at least one service")
        self.specs = tuple(specs)
        self.policy = policy
        self.host = host
        self.log = log
        self.ready_file = ready_file
        self.ready_info = dict(ready_info or {})
        self.timers = Timers(host.now)
        self.procs: list[Proc] = []
        self.phase = "idle"  # starting | ready | stopping | waiting | done
        self.failure: list[Finding] = []
        self.notes: list[Finding] = []
        self.registered = policy.registered_at_start
        self.restarts = 0
        self.outcome: Outcome | None = None
        self.ready_at: float | None = None
        self.ready_after: float | None = None
        self._unit_started = 0.0
        self._probe_interval = policy.probe_interval_s
        self._gpus_unsupported = False
        self._stuck_reported = False
        self._probe_error_logged: str | None = None
        self._last_probe: str | None = None  # the waiting service's last probe answer
        self._status = ""  # the last STATUS= sent
        self.history = history
        self.hints = hints if hints is not None else HintContext()

        self.env = env
        self.pid_dir = pid_dir
        self._make_classifier = classifier
        self._preflight_fn = preflight
        self._starts: deque[float] = deque()  # the host clock's times of the unit's starts
        self._stop_reason = ""
        self._shutdown = False
        self._stop_signal_at: float | None = None
        self._past_exits: list[Finding] = []  # service_exited of failures handled by a restart
        self._backoff_n = 0
        self._restart_due = 0.0  # the host clock's time of the pending restart
        self._watchdog_s: float | None = None
        self._termed: int | None = None  # pid sent SIGTERM ahead of its stop line
        #: exits per service by reason: ``exit_code`` (it exited), ``signal`` (killed by
        #: one), ``stopped`` (it ended while the unit was being stopped)
        self.exits: dict[str, dict[str, int]] = {s.name: {} for s in self.specs}

    # ----------------------------------------------------------------- start

    def start(self, watchdog_s: float | None = None) -> None:
        """The first start (after the R04 gate); ``watchdog_s``: seconds between
        ``WATCHDOG=1`` pings (half of systemd's interval), None without a watchdog."""
        self._watchdog_s = watchdog_s
        if watchdog_s is not None:
            self._on_watchdog()
        if self._reset_gate():
            self._start_unit()

    def _on_watchdog(self) -> None:
        """Tell systemd the loop still turns, and ping again half an interval later."""
        self.host.notify("WATCHDOG=1")
        assert self._watchdog_s is not None
        self.timers.at("watchdog", self._watchdog_s, self._on_watchdog)

    def _watchdog_tick(self) -> float:
        """The watchdog from a loop of its own (the GPU reset command's): ping when due;
        seconds until the next ping (inf without a watchdog)."""
        if "watchdog" in self.timers and self.timers.left("watchdog") <= 0:
            self._on_watchdog()
        return self.timers.left("watchdog")

    def _start_unit(self) -> None:
        self._starts.append(self.host.now())
        self.phase = "starting"
        self.procs = []
        self._begin_readiness()
        self._spawn_next()

    def _reset_gate(self) -> bool:
        """R04, before every start: once GPUs registered, a service that needs a GPU reset
        before it starts again gets one (the operator's command) or the unit is not started
        (outcome set, False)."""
        if not (self.registered and any(s.restart_needs_gpu_reset for s in self.specs)):
            return True
        names = ", ".join(s.name for s in self.specs if s.restart_needs_gpu_reset)
        result, refusal = gpu_reset(names, self.policy, self.host, self.log, self._say_status,
                                    self._watchdog_tick)
        if result == "stopped":  # the crash that asked for the restart stays in the outcome
            self._shutdown = True
            self._keep_exits("the run was stopped during the GPU reset before its restart")
            self.failure = []
            self._finish(0, "stopped", [])
            return False
        if refusal is not None:
            self._refuse(refusal)
            return False
        self.registered = False
        return True

    def _spawn_next(self) -> None:
        spec = self.specs[len(self.procs)]
        try:
            if not self._clear_socket(spec):
                return
            env = dict(self.env)
            env.update(spec.env)
            # Before the spawn: the first classifier loads the diagnosis catalogue (tens of
            # ms), which must not delay noticing this service's readiness.
            classifier = self._make_classifier(spec.name) if self._make_classifier else None
            pid, fd = self.host.spawn(spec.argv, env)
        except OSError as err:
            self._fail(Finding(
                "binary_missing" if err.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC)
                else "service_exited", "error",
                f"cannot start {spec.name} ({spec.argv[0]}): {exec_error(spec.argv[0], err)}",
                INTERPRETER_HINT if missing_interpreter(spec.argv[0]) else
                f"check that {spec.argv[0]} is installed and executable",
                {"service": spec.name}))
            return
        proc = Proc(spec, pid, fd, self.host.now(), classifier,
                    deque(maxlen=self.policy.last_lines))
        self.procs.append(proc)
        self.host.watch_output(fd, lambda: self.on_output(proc))
        self.log.say(f"started {spec.name} (pid {pid}): {' '.join(spec.argv)}")
        self._write_pid_file(proc)
        self._await_ready(proc)

    def _clear_socket(self, spec: ServiceSpec) -> bool:
        """Before a start: the runtime directories (0700, R06); a stale socket at the ready
        socket's path removed; one that someone serves is a failure (False)."""
        for directory in spec.runtime_dirs:
            if self.host.ensure_dir(directory):
                self.log.say(f"created {directory} (mode 0700)")
        if spec.ready_socket and self.host.is_socket(spec.ready_socket):
            if self.host.socket_listening(spec.ready_socket):
                self._fail(Finding(
                    "sm_already_running", "error",
                    f"something already listens on {spec.ready_socket}: another "
                    f"{spec.name} owns the management port",
                    "stop the other subnet manager (a hand-made nvlsm/opensm unit or the "
                    "vendor start script); one owner per management port"))
                return False
            self.host.unlink(spec.ready_socket)
            self.log.say(f"removed stale socket {spec.ready_socket}")
        return True

    def _write_pid_file(self, proc: Proc) -> None:
        if self.pid_dir:
            path = f"{self.pid_dir.rstrip('/')}/{proc.spec.name}.pid"
            try:
                self.host.write_file(path, f"{proc.pid}\n")
            except OSError as err:
                self.log.say(f"cannot write the pid file of {proc.spec.name}: {err}")

    # ----------------------------------------------------------------- output

    def on_output(self, proc: Proc) -> None:
        """``proc``'s output is readable: log its complete lines."""
        self._read(proc)

    def _read(self, proc: Proc) -> bool:
        """Read one block of ``proc``'s output and log its complete lines. False when there
        is nothing more for now (would block) or ever (end of output: closed)."""
        if proc.fd is None:
            return False
        data = self.host.read(proc.fd)
        if data is None:
            return False
        if not data:
            self._close_output(proc)
            return False
        self.take(proc, data)
        return True

    def _drain(self, proc: Proc) -> None:
        """Everything ``proc`` has written so far, its last unterminated line included."""
        while self._read(proc):
            pass
        if proc.buf:
            text = bytes(proc.buf).decode("utf-8", "replace").rstrip("\r")
            proc.buf.clear()
            self._line(proc, text)

    def _close_output(self, proc: Proc) -> None:
        if proc.fd is not None:
            self.host.close_output(proc.fd)
            proc.fd = None

    def _close_proc(self, proc: Proc) -> None:
        self._close_output(proc)
        if self.pid_dir and proc.status is not None:
            path = f"{self.pid_dir.rstrip('/')}/{proc.spec.name}.pid"
            try:
                if self.host.read_small(path).strip() == str(proc.pid):
                    self.host.remove_file(path)
            except OSError:
                pass
        self._unwatch(proc)

    # ----------------------------------------------------------------- signals and exits

    def on_signal(self, signum: int) -> None:
        """A stop signal (SIGTERM, SIGINT) or SIGHUP arrived (SIGCHLD: :meth:`reap`)."""
        if signum in STOP_SIGNALS:
            self._on_stop_signal(signal.Signals(signum).name)
        elif signum == signal.SIGHUP:
            self.log.say(SIGHUP_IGNORED)

    def reap(self) -> None:
        """SIGCHLD: collect every service that exited."""
        for proc in list(self.procs):
            if proc.status is None:
                status = self.host.reap(proc.pid)
                if status is not None:
                    self.on_exit(proc, status)
                    if self.outcome is not None:
                        return

    def on_pid_exit(self, pid: int, status: int) -> None:
        """A child ``pid`` was collected elsewhere (as PID 1, reaping orphans): one of ours?"""
        for proc in self.procs:
            if proc.pid == pid and proc.status is None:
                self.on_exit(proc, status)
                return

    def on_exit(self, proc: Proc, status: int) -> None:
        """``proc`` exited with wait status ``status``."""
        proc.status = status
        if self.phase in ("starting", "ready"):
            self._term_next_early()
        self._drain(proc)
        self._close_proc(proc)
        text, code, sig = describe_status(status)
        reason = "stopped" if self.phase == "stopping" else "signal" if sig else \
            "clean" if code == 0 else "exit_code"
        counts = self.exits.setdefault(proc.spec.name, {})
        counts[reason] = counts.get(reason, 0) + 1
        if proc.spec.ready_socket:
            self.timers.cancel("socket-timeout", "socket-poll")
        if self.phase == "stopping":
            self.log.say(f"{proc.spec.name} stopped ({text})")
            self.timers.cancel(f"kill:{proc.spec.name}")
            self._stop_next()
            return
        phase = "during start" if self.phase == "starting" else "after the fabric was ready"
        diagnosis = proc.classifier.findings() if proc.classifier is not None else []
        fields: dict[str, object] = {
            "service": proc.spec.name, "exit_code": code, "signal": sig, "phase": phase,
            "last_lines": list(proc.last), "diagnosis": [f.code for f in diagnosis]}
        cause = f"; diagnosis: {diagnosis[0].code}: {diagnosis[0].message}" if diagnosis else ""
        hint = diagnosis[0].hint if diagnosis and diagnosis[0].hint else (
            "read the service's last lines above; "
            f"`{self.hints.nvfabric('doctor', options=(('--log', 'FILE'),))}` explains a "
            "saved log")
        self._fail(Finding("service_exited", "error",
                           f"{proc.spec.name} (pid {proc.pid}) {text} {phase}{cause}", hint,
                           fields), proc, diagnosis)

    def _term_next_early(self) -> None:
        """A service died: the one the stop begins with (the last started still running)
        gets its SIGTERM now, before the failure is logged, so that its own shutdown runs
        while the lines are written; :meth:`_stop_next` logs it and arms its grace timer."""
        for other in reversed(self.procs):
            if other.status is None:
                self.host.kill(other.pid, signal.SIGTERM)
                self._termed = other.pid
                return

    def _on_stop_signal(self, name: str) -> None:
        now = self.host.now()
        if self.phase == "stopping" and self._shutdown:
            first = self._stop_signal_at
            if first is not None and now - first < REPEATED_STOP_WINDOW_S:
                self.log.say(f"received {name} again {now - first:.3f} s after the first: "
                             "the same stop request, still stopping in order")
                return
            self.log.say(f"received {name} again: killing what is left")
            for proc in self.procs:
                if proc.status is None:
                    self.host.kill(proc.pid, signal.SIGKILL)
            return
        self._shutdown = True
        if self._stop_signal_at is None:
            self._stop_signal_at = now
        if self.policy.restart == "on-failure":
            self._keep_exits("the run was stopped before its restart")
            self.failure = []  # failures are ours to handle; the operator asked for a stop
        self.log.say(f"received {name}: stopping in reverse start order")
        if self.phase == "waiting" or not any(p.status is None for p in self.procs):
            self.timers.cancel("restart", "restart-status")
            self._finish(1 if self.failure else 0, "failed" if self.failure else "stopped",
                         self.failure)
            return
        if self.phase != "stopping":
            self._begin_stop("shutdown")

    # ----------------------------------------------------------------- failing and stopping

    def _fail(self, finding: Finding, proc: Proc | None = None,
              diagnosis: list[Finding] | None = None) -> None:
        self.log.finding(finding)
        if proc is not None and finding.code == "service_exited":
            self.log.say(f"last lines of {proc.spec.name}:")
            for text in proc.last:
                self.log.line(f"  | {text}")
        for f in diagnosis or []:
            self.log.finding(f)
        self.failure = [finding, *[f for f in (diagnosis or []) if f.code != finding.code]]
        if self.phase != "stopping":
            self._begin_stop("failure")

    def _begin_stop(self, reason: str) -> None:
        self.phase = "stopping"
        self._stop_reason = reason
        self.timers.cancel_all_but(lambda tag: tag.startswith(("kill:", "kernel-", "watchdog")))
        for proc in self.procs:
            self._unwatch(proc)
        self._remove_ready_file()
        if reason == "shutdown":
            self.host.notify("STOPPING=1")
        self._stop_next()

    def _stop_next(self) -> None:
        for proc in reversed(self.procs):
            if proc.status is None:
                if f"kill:{proc.spec.name}" in self.timers:
                    return  # already asked, waiting for it
                self.log.say(f"stopping {proc.spec.name} (pid {proc.pid}): SIGTERM, SIGKILL "
                             f"after {seconds(proc.spec.grace_s)} s")
                self._say_status(f"stopping {proc.spec.name}")
                if self._termed != proc.pid:
                    self.host.kill(proc.pid, signal.SIGTERM)
                self._termed = None
                self.timers.at(f"kill:{proc.spec.name}", proc.spec.grace_s,
                               functools.partial(self._on_grace_over, proc))
                return
        self._stopped_all()

    def _on_grace_over(self, proc: Proc) -> None:
        if proc.status is None:
            self.log.say(f"{proc.spec.name} (pid {proc.pid}) ignored SIGTERM for "
                         f"{seconds(proc.spec.grace_s)} s: SIGKILL")
            self.host.kill(proc.pid, signal.SIGKILL)

    def _stopped_all(self) -> None:
        if self._stop_reason == "shutdown" or self._shutdown:
            if self.failure:
                self._finish(1, "failed", self.failure)
            else:
                self.log.say("all services stopped")
                self._finish(0, "stopped", [])
            return
        if self.policy.restart != "on-failure":
            self._finish(1, "failed", self.failure)
            return
        limit = start_limit(self.policy, self._starts, self.host.now())
        if limit is not None:
            self._refuse(limit)
            return
        if backoff_resets(self.policy, self.ready_at, self.host.now()):
            self._backoff_n = 0
        delay = backoff_delay(self.policy, self._backoff_n)
        self._backoff_n += 1
        self.phase = "waiting"
        self.log.say(f"restarting the unit in {seconds(delay)} s (restart {self.restarts + 1})")
        self._restart_due = self.host.now() + delay
        self._restart_status()
        self.timers.at("restart", delay, self._restart)

    def _restart_status(self) -> None:
        """STATUS= while the unit waits to restart: the time left, said again every
        :data:`RESTART_STATUS_EVERY_S` (said once, "in 30 s" goes stale in systemctl status)."""
        if self.phase != "waiting":
            return
        left = max(0.0, self._restart_due - self.host.now())
        self._say_status(f"restarting the unit in {seconds(round(left, 1))} s (restart "
                         f"{self.restarts + 1})")
        if left > RESTART_STATUS_EVERY_S:
            self.timers.at("restart-status", RESTART_STATUS_EVERY_S, self._restart_status)

    def _restart_preflight(self) -> bool:
        """Before a restart, what would refuse a first start refuses it too (a binary removed
        or replaced while the unit ran: missing, not executable, another version): the run
        ends with that finding (False) instead of restarting forever."""
        problems: list[Finding] = []
        for spec in self.specs:
            binary = spec.argv[0]
            if not self.host.executable(binary):
                problems.append(Finding(
                    "binary_missing", "error",
                    f"{spec.name} is no longer installed at {binary} (or not executable): the "
                    "unit is not restarted", f"reinstall {spec.name}, then start nvfabric run "
                    "again", {"service": spec.name, "path": binary}))
        if not problems and self._preflight_fn is not None:
            problems += [f for f in self._preflight_fn() if f.severity == "error"]
        if not problems:
            return True
        for f in problems[1:]:
            self.log.finding(f)
        self._refuse(problems[0])
        return False

    def _restart(self) -> None:
        if not self._restart_preflight() or not self._reset_gate():
            return  # not restarted: not counted, the failure is kept
        self.restarts += 1
        self._record("restart", {"restart": self.restarts})  # the event history
        self._say_status(f"starting the unit again (restart {self.restarts})")
        self._keep_exits(f"the unit was restarted (restart {self.restarts})")
        self.failure = []
        self._start_unit()

    def _keep_exits(self, what: str) -> None:
        """Keep the ``service_exited`` finding of a failure that ``restart="on-failure"``
        handled, for the outcome: with the severity it was logged with (an error stays an
        error) and ``restarted`` (True: the unit went on)."""
        for f in self.failure:
            if f.code == "service_exited":
                self._past_exits.append(Finding(
                    f.code, f.severity, f"{f.message}; {what}", f.hint,
                    {**f.fields, "restarted": "restarted" in what}))

    def _refuse(self, finding: Finding) -> None:
        """End the run because the unit may not be (re)started: the refusal is logged (with
        its hint) and comes after the failure that led to the restart, which is kept."""
        self.log.finding(finding)
        self._finish(1, "failed", [*self.failure, finding])

    def _finish(self, code: int, reason: str, findings: Sequence[Finding]) -> None:
        self.phase = "done"
        self._remove_ready_file()
        ready_after = None if self.ready_after is None else round(self.ready_after, 3)
        self.outcome = Outcome(code, reason, (*self._past_exits, *findings, *self.notes),
                               ready_after, self.restarts)

    def fault(self) -> Finding | None:
        """The error that keeps the unit from being ready now, for publishing (read from any
        thread: plain attributes): the failure being handled (a service exited; while the
        unit waits and starts again after it, that exit), or the last error of a failed end
        (a refused restart); None while ready, before a first failure and after an orderly
        stop."""
        outcome = self.outcome
        if outcome is not None:
            errors = [f for f in outcome.findings if f.severity == "error"]
            return errors[-1] if outcome.exit_code and errors else None
        if self.phase == "ready":
            return None
        if self.failure:
            return self.failure[0]
        past = self._past_exits
        return past[-1] if self.phase == "starting" and self.restarts and past else None

    def snapshot(self) -> list[dict[str, object]]:
        """The unit's state now, for a status endpoint or metrics: one dict per service in
        start order with ``service``, ``state`` (``not_started``, ``starting``, ``ready``,
        ``stopping``, ``exited``, ``waiting`` for a restart), ``pid`` (None when not
        running), ``restarts`` (of the unit), ``exits`` (by reason: ``exit_code``, ``clean``
        (exit 0 while it should run on), ``signal``, ``stopped``) and ``ready`` (the unit is
        ready). Plain values, a new list each call: safe to read from
        another thread between two events of the loop."""
        running = {p.spec.name: p for p in self.procs}
        out: list[dict[str, object]] = []
        for spec in self.specs:
            proc = running.get(spec.name)
            alive = proc is not None and proc.status is None
            if self.phase == "waiting":
                state = "waiting"
            elif proc is None:
                state = "not_started"
            elif not alive:
                state = "exited"
            elif self.phase == "stopping":
                state = "stopping"
            else:
                state = "ready" if proc.ready else "starting"
            out.append({"service": spec.name, "state": state,
                        "pid": proc.pid if proc is not None and alive else None,
                        "restarts": self.restarts, "exits": dict(self.exits.get(spec.name, {})),
                        "ready": self.phase == "ready"})
        return out

    def kill_all(self) -> None:
        """The end of a run however it ends: SIGKILL to every service still running, each
        reaped, outputs closed (teardown of the loop; nothing is logged)."""
        for proc in self.procs:
            if proc.status is None:
                self.host.kill(proc.pid, signal.SIGKILL)
                self.host.wait(proc.pid)
                proc.status = -1
            self._close_proc(proc)

    # ----------------------------------------------------------------- readiness

    def _record(self, kind: str, fields: dict[str, Any]) -> None:
        """One record of the event history (the unit ready, a restart)."""
        if self.history is not None:
            self.history(kind, fields)

    def on_kernel_finding(self, finding: Finding, level: str) -> None:
        """The kernel watch (:mod:`nvfabric.supervisor.kernelwatch`) found a line that makes
        the node ``level`` (unhealthy, degraded): kept in the outcome's findings (the latest
        per code and device) and said in systemd's STATUS=. The unit keeps running: its
        services are not what failed, and stopping them would reset no GPU."""
        key = (finding.code, finding.fields.get("pci"))
        self.notes = [n for n in self.notes if (n.code, n.fields.get("pci")) != key]
        self.notes.append(finding)
        self._say_status(f"{level}: {finding.message}")

    def _say_status(self, text: str) -> None:
        """systemd's ``STATUS=`` (what ``systemctl status`` shows), sent when it changes.
        Control characters are escaped and the length bounded (:func:`status_text`): a
        probe's answer with a newline would otherwise be a second assignment (``READY=1``) in
        the datagram, and a datagram over 4096 bytes is dropped by systemd."""
        text = status_text(text)
        if text != self._status:
            self._status = text
            self.host.notify("STATUS=" + text)

    def _begin_readiness(self) -> None:
        """A (re)start of the unit: nothing is ready."""
        self._unit_started = self.host.now()
        self.ready_at = None
        self._probe_interval = self.policy.probe_interval_s
        self._stuck_reported = False
        self._last_probe = None
        self._remove_ready_file()

    def _await_ready(self, proc: Proc) -> None:
        """What makes the just started ``proc`` ready, armed."""
        spec = proc.spec
        if spec.ready_socket:
            self._watch_socket(proc)
        elif spec.ready_gpus:
            self._say_status(f"{spec.name} started; waiting for {spec.ready_probe.label}")
            self.timers.at("ready-timeout", self.policy.ready_timeout_s, self._on_ready_timeout)
            self.timers.at("probe", self._probe_interval, self._request_probe)
        elif not spec.ready_line:
            self._mark_ready(proc)

    # ----------------------------------------------------------------- the socket

    def _watch_socket(self, proc: Proc) -> None:
        path = proc.spec.ready_socket
        assert path is not None
        directory = path.rpartition("/")[0] or "/"
        try:
            proc.watch = self.host.watch_dir(directory, lambda: self.on_socket_event(proc))
        except OSError as err:
            self.log.say(f"inotify unavailable ({err.strerror or err}); polling {path} every "
                         f"{POLL_FALLBACK_S * 1000:.0f} ms")
            self.timers.at("socket-poll", POLL_FALLBACK_S, lambda: self.on_socket_event(proc))
        self.timers.at("socket-timeout", self.policy.socket_timeout_s,
                       lambda: self._on_socket_timeout(proc))
        self._say_status(f"waiting for {proc.spec.name} IPC socket {path}")
        self.on_socket_event(proc)  # it may exist already

    def on_socket_event(self, proc: Proc) -> None:
        """The directory of ``proc``'s socket changed (or the poll timer came): is it up?"""
        if proc.watch is not None:
            self.host.drain_watch(proc.watch)
        if proc.ready or proc.status is not None or self.phase != "starting":
            return
        path = proc.spec.ready_socket
        assert path is not None
        if self.host.is_socket(path) and self._listening(proc, path):
            # the next service (fabric manager) is started before the watch is closed:
            # closing an inotify descriptor waits for the kernel's SRCU grace period,
            # 0.1-19 ms here, which must not stand between the socket and fabric manager
            watch, proc.watch = proc.watch, None
            self.timers.cancel("socket-timeout", "socket-poll")
            self.log.say(f"{proc.spec.name} IPC socket {path} is up after "
                         f"{self.host.now() - proc.started:.3f} s")
            self._mark_ready(proc)
            if watch is not None:
                self.host.unwatch(watch)
        elif proc.listen_poll is not None:  # bound, not listening: listen(2) makes no event
            self.timers.at("socket-poll", proc.listen_poll, lambda: self.on_socket_event(proc))
            proc.listen_poll = min(proc.listen_poll * 2, POLL_FALLBACK_S)
        elif proc.watch is None:
            self.timers.at("socket-poll", POLL_FALLBACK_S, lambda: self.on_socket_event(proc))

    def _listening(self, proc: Proc, path: str) -> bool:
        """The socket file of ``proc`` exists: is it listening (NVLSM is ready when it accepts
        connections, not when bind(2) made the file)? Read from the kernel's table without
        connecting (:func:`nvfabric.effects.sockets.listens`); a table that cannot be read
        leaves the file as the sign, said once."""
        listening = self.host.socket_listens(path)
        if listening is None:
            self.log.say(f"the kernel's table of Unix sockets cannot be read; taking {path} "
                         f"as {proc.spec.name}'s readiness")
            return True
        if not listening and proc.listen_poll is None:
            self.log.say(f"{proc.spec.name} IPC socket {path} exists but does not listen yet; "
                         "waiting for it to listen")
            self._say_status(f"waiting for {proc.spec.name} to listen on {path}")
            proc.listen_poll = LISTEN_POLL_FIRST_S
        return listening

    def _unwatch(self, proc: Proc) -> None:
        if proc.spec.ready_socket:
            self.timers.cancel("socket-timeout", "socket-poll")
        if proc.watch is not None:
            self.host.unwatch(proc.watch)
            proc.watch = None

    def _on_socket_timeout(self, proc: Proc) -> None:
        self._unwatch(proc)
        path = proc.spec.ready_socket
        did = "listen on" if proc.listen_poll is not None else "create"
        self._fail(Finding(
            "socket_timeout", "error",
            f"{proc.spec.name} did not {did} its IPC socket {path} within "
            f"{seconds(self.policy.socket_timeout_s)} s; fabric manager was not started",
            "look at the service's last lines below (is ib_umad loaded? is the GUID the one of "
            "an LPF port with the SM enabled?), or raise --socket-timeout",
            {"service": proc.spec.name, "socket": path,
             "last_lines": list(proc.last)}), proc)

    # ----------------------------------------------------------------- ready

    def _mark_ready(self, proc: Proc) -> None:
        proc.ready = True
        if len(self.procs) < len(self.specs):
            self._spawn_next()
            return
        self.timers.cancel("probe", "ready-timeout")
        self.phase = "ready"
        self.ready_at = self.host.now()
        self.ready_after = self.ready_at - self._unit_started
        self._write_ready_file(self.ready_after)
        # from the value the outcome and the readiness file carry (ms), so that they agree
        self._status = f"fabric ready in {round(self.ready_after, 3):.1f} s"
        notified = self.host.notify(f"READY=1\nSTATUS={self._status}")
        pids = ", ".join(f"{p.spec.name} pid {p.pid}" for p in self.procs)
        self.log.say(f"fabric ready in {self.ready_after:.3f} s ({pids})"
                     + ("; READY=1 sent to $NOTIFY_SOCKET" if notified else ""))
        self._record("ready", {"ready_after_s": round(self.ready_after, 3),
                               "restarts": self.restarts,
                               "services": [{"service": p.spec.name, "pid": p.pid}
                                            for p in self.procs]})

    def _write_ready_file(self, ready_after: float) -> None:
        if not self.ready_file:
            return
        info = dict(self.ready_info)
        info.update({"pid": self.host.pid(), "ready_after_s": round(ready_after, 3),
                     "restarts": self.restarts,
                     "services": [{"service": p.spec.name, "pid": p.pid} for p in self.procs]})
        try:
            self.host.write_file(self.ready_file, json.dumps(info) + "\n")
        except OSError as err:
            self.log.say(f"cannot write readiness file {self.ready_file}: {err}")

    def _remove_ready_file(self) -> None:
        if self.ready_file:
            try:
                self.host.remove_file(self.ready_file)
            except OSError as err:
                self.log.say(f"cannot remove readiness file {self.ready_file}: {err}")

    # ----------------------------------------------------------------- the GPU probe

    def _request_probe(self) -> None:
        if self.host.request_probe():
            return
        self.log.say("no GPU probe available; taking the success line as readiness")
        proc = self._waiting_gpus()
        if proc is not None:
            self._mark_ready(proc)

    def _waiting_gpus(self) -> Proc | None:
        if self.phase != "starting" or not self.procs:
            return None
        proc = self.procs[-1]
        if proc.spec.ready_gpus and not proc.ready and proc.status is None:
            return proc
        return None

    def on_probe(self, result: GpuCheck) -> None:
        """The answer of a probe asked for with ``host.request_probe()``."""
        if result.registered or result.ready:
            self.registered = True
        proc = self._waiting_gpus()
        if proc is None:
            return
        words = proc.spec.ready_probe
        self._last_probe = result.error or result.summary
        if not result.ready:
            if result.progress is not None:
                done, total = result.progress
                self._say_status(f"waiting for GPU fabric registration: {done}/{total} GPUs "
                                 "completed")
            else:
                self._say_status(f"waiting for {words.label}: {self._last_probe}")
        if result.error and result.error != self._probe_error_logged:
            self.log.say(f"{words.label} {words.waiting}: {result.error}")
            self._probe_error_logged = result.error
        if result.ready:
            self.log.say(f"{words.label}: {result.summary}")
            for f in result.findings:
                self.notes.append(f)
                self.log.finding(f)
            self._mark_ready(proc)
            return
        if not result.supported:
            self._gpus_unsupported = True
            if proc.line_seen:
                self.log.say(f"GPU fabric state: {result.summary}; taking {proc.spec.name}'s "
                             "success line as readiness")
                self._mark_ready(proc)
            return  # the success line decides from now on
        self._probe_interval = min(self._probe_interval * 1.5, self.policy.probe_max_interval_s)
        self.timers.at("probe", self._probe_interval, self._request_probe)

    def _on_ready_timeout(self) -> None:
        proc = self._waiting_gpus()
        if proc is None or self._stuck_reported:
            return
        self._stuck_reported = True
        f = proc.spec.ready_probe.stuck(proc.spec.name, self.policy.ready_timeout_s,
                                        self._last_probe)
        self.notes.append(f)
        self.log.finding(f)

    # ----------------------------------------------------------------- output lines

    def take(self, proc: Proc, data: bytes) -> None:
        """``data`` read from ``proc``'s output: each complete line logged and classified (a
        line longer than :data:`MAX_LINE` bytes is cut into pieces of that size)."""
        proc.buf += data
        while True:
            cut = proc.buf.find(b"\n")
            if cut < 0:
                if len(proc.buf) > MAX_LINE:
                    cut = MAX_LINE
                else:
                    break
            raw = bytes(proc.buf[:cut])
            del proc.buf[: cut + 1]
            self._line(proc, raw.decode("utf-8", "replace").rstrip("\r"))

    def _line(self, proc: Proc, text: str) -> None:
        self.log.line(f"{proc.spec.name}: {text}")
        proc.last.append(text)
        if proc.classifier is not None:
            try:
                new = proc.classifier.feed(text)
            except Exception as err:  # noqa: BLE001 - diagnosis must never stop supervision
                new = []
                self.log.say(f"diagnosis failed on a line: {type(err).__name__}: {err}")
            for f in new:
                self.log.finding(f)
        if (proc.spec.ready_line and not proc.ready and self.phase == "starting"
                and re.search(proc.spec.ready_line, text)):
            proc.line_seen = True
            if proc.spec.ready_gpus and self._gpus_unsupported:
                self.log.say("GPU fabric state is not supported on these GPUs; taking "
                             f"{proc.spec.name}'s success line as readiness")
                self._mark_ready(proc)
            elif proc.spec.ready_gpus:
                self.timers.cancel("probe")
                self._request_probe()
            else:
                self._mark_ready(proc)

"""Readiness of a unit's services (RUN.md R01) and of the unit: the state every part of the
unit state machine shares, plus

- NVLSM's IPC socket, seen through a directory watch (inotify; a 10 ms poll where there is
  none), then confirmed listening in the kernel's table of Unix sockets (polled from 1 ms:
  listen(2) makes no inotify event), bounded by ``socket_timeout_s``;
- the GPU probe (every GPU's fabric state completed), asked for at a growing interval and
  reported as ``registration_stuck``/``imex_not_ready`` after ``ready_timeout_s``;
- a success line of the daemon's output (``ready_line``), and the live diagnosis of each line;
- the unit ready: the readiness file, ``READY=1`` and ``STATUS=`` to systemd, one log line.

:class:`Readiness` is the base of :class:`nvfabric.supervisor.unit.Unit`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects.log import Log
from nvfabric.effects.notify import status_text
from nvfabric.model.findings import Finding
from nvfabric.model.words import seconds
from nvfabric.supervisor.host import Host, Proc
from nvfabric.supervisor.outcome import Outcome
from nvfabric.supervisor.policy import GpuCheck, Policy
from nvfabric.supervisor.timers import Timers

POLL_FALLBACK_S = 0.01
#: The first look again at a socket file that exists but does not listen yet (doubling up to
#: POLL_FALLBACK_S): a real NVLSM listens microseconds after its bind.
LISTEN_POLL_FIRST_S = 0.001
MAX_LINE = 65536


class Readiness:
    """The unit's shared state and its readiness logic (see the module docstring)."""

    def __init__(self, specs: tuple[ServiceSpec, ...], policy: Policy, host: Host, log: Log,
                 ready_file: str | None, ready_info: dict[str, object]) -> None:
        self.specs = specs
        self.policy = policy
        self.host = host
        self.log = log
        self.ready_file = ready_file
        self.ready_info = ready_info
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
        #: the event history's append (nvfabric.observe.history.History.append), None without
        self.history: Callable[[str, dict[str, Any]], None] | None = None

    def _record(self, kind: str, fields: dict[str, Any]) -> None:
        """One record of the event history (the unit ready, a restart)."""
        if self.history is not None:
            self.history(kind, fields)

    def on_kernel_finding(self, finding: Finding, level: str) -> None:
        """The kernel watch (:mod:`nvfabric.observe.kernelwatch`) found a line that makes the
        node ``level`` (unhealthy, degraded): kept in the outcome's findings (the latest per
        code and device) and said in systemd's STATUS=. The unit keeps running: its services
        are not what failed, and stopping them would reset no GPU."""
        key = (finding.code, finding.fields.get("pci"))
        self.notes = [n for n in self.notes if (n.code, n.fields.get("pci")) != key]
        self.notes.append(finding)
        self._say_status(f"{level}: {finding.message}")

    # the parts of the unit that readiness calls into (nvfabric.supervisor.unit.Unit)
    def _fail(self, finding: Finding, proc: Proc | None = None,
              diagnosis: list[Finding] | None = None) -> None:
        raise NotImplementedError

    def _spawn_next(self) -> None:
        raise NotImplementedError

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

"""The HTTP endpoint of ``nvfabric run --listen HOST:PORT``: ``/metrics``, ``/healthz``,
``/readyz`` and ``/status``, served from a snapshot, never from a read of the host per request.

- ``/metrics``: Prometheus text format (:func:`nvfabric.observe.metrics.render`) of the last
  reading and the unit's state now.
- ``/healthz``: 200 while the run is alive (its supervisor has not finished), else 503.
- ``/readyz``: 200 while the unit is ready, the rule of ``READY=1`` (every service ready, GPUs
  registered: :class:`nvfabric.observe.unitstate.UnitSnapshot`) and the last reading names no
  second IMEX owner (``imex_owner_conflict``, as ``nvfabric ready``), else 503 with the phase
  or that finding.
- ``/status``: the JSON object of ``nvfabric status --json`` from the last reading (503 until
  the first reading is done), with the live kernel events on top
  (:func:`nvfabric.rules.live.overlay`: a fatal SXid shows at once, not at the next reading)
  and ``kube_publish`` (the Node, the last success, the counts by result) under ``run
  --publish``.

Threads: the server (:class:`http.server.ThreadingHTTPServer`, one daemon thread per request)
and one reader thread that re-reads the fabric every ``interval_s`` seconds through the
injected ``read`` function. The supervisor's event loop is never called into: the unit state
is a frozen snapshot read from it (:func:`nvfabric.observe.unitstate.of_supervisor`).
:mod:`http.server` is imported when the endpoint binds (:func:`bind`): a run without
``--listen`` does not pay for it (~40 ms here) before its first daemon starts.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nvfabric.observe.metrics import CONTENT_TYPE, KubePublish, Reading, render, with_kernel
from nvfabric.observe.unitstate import UnitSnapshot
from nvfabric.rules.live import overlay

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from nvfabric.supervisor.kernelwatch import KernelEvents

#: The reader: given the IMEX daemon to ask (``(nvidia-imex-ctl, config.cfg)`` full paths, or
#: None), the reading for the metrics and the ``status --json`` object.
Read = Callable[[tuple[str, str] | None], tuple[Reading, dict[str, Any]]]

#: Seconds a client may take to send its request before the connection is closed (a stalled
#: client holds one thread, never the supervisor).
REQUEST_TIMEOUT_S = 5.0


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port). HOST is an IPv4 address, ``[IPv6]`` or ``localhost``;
    PORT 1-65535. ValueError naming the problem otherwise (a host name other than localhost
    would be a DNS lookup at start: give the address)."""
    import ipaddress  # with --listen only

    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen {text!r}: give HOST:PORT, e.g. 127.0.0.1:9464")
    if not re.fullmatch(r"[0-9]{1,5}", port_text) or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"--listen {text!r}: the port must be a number from 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"--listen {text!r}: {host!r} is not an IPv6 address") from None
    elif host != "localhost":
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"--listen {text!r}: {host!r} is not an IPv4 address (an IPv6 "
                             "address goes in brackets: [::1]:9464)") from None
    return host, int(port_text)


@dataclass(frozen=True)
class Snapshot:
    """What a request is answered from: the last reading (None before the first) with its
    ``status --json`` object, the unit's state and the kernel log's events (None: not
    watched); ``read_phase``: the unit's phase when that reading was taken (a reading from
    another phase is about to be renewed)."""

    reading: Reading | None
    status: dict[str, Any] | None
    unit: UnitSnapshot
    read_phase: str | None = None
    kernel: KernelEvents | None = None

    def live_status(self) -> dict[str, Any] | None:
        """The ``status --json`` object with the kernel log's events on top
        (:func:`nvfabric.rules.live.overlay`: a fatal SXid counts at once, not at the next
        reading); None before the first reading. What ``/status`` serves and
        ``--publish`` tells."""
        if self.status is None or self.kernel is None:
            return self.status
        return overlay(self.status, self.kernel.to_json())


#: Seconds between two looks at the unit's phase by the reader thread (:meth:`Watch.start_reader`).
PHASE_POLL_S = 1.0


class Watch:
    """The run's published state. ``unit`` is a function returning the unit's snapshot now
    (:meth:`attach` sets it once the supervisor exists); the reading is replaced by the reader
    thread every ``interval_s`` seconds (:meth:`start_reader`). Reads are lock-free: each
    attribute holds an immutable value, replaced whole."""

    def __init__(self, read: Read | None, interval_s: float) -> None:
        self._read = read
        self.interval_s = interval_s
        self.unit: Callable[[], UnitSnapshot] = lambda: UnitSnapshot(phase="idle")
        self.imex: tuple[str, str] | None = None
        self.phase: Callable[[], str] | None = None  # the phase alone, when cheaper than unit()
        self.kube: Callable[[], KubePublish] | None = None  # run --publish: its tally
        self.kernel: Callable[[], KernelEvents | None] | None = None  # the kernel log's events
        self._last: tuple[Reading, dict[str, Any]] | None = None
        self._read_phase: str | None = None
        self._stop = threading.Event()
        self.read_error: str | None = None

    def snapshot(self) -> Snapshot:
        last, phase = self._last, self._read_phase
        kernel = self.kernel() if self.kernel is not None else None
        return Snapshot(None if last is None else last[0], None if last is None else last[1],
                        self.unit(), phase, kernel)

    def read_once(self) -> None:
        """One reading through ``read``; a failure keeps the previous reading and is kept in
        ``read_error`` (the probe's own findings carry NVML errors: this is for bugs)."""
        if self._read is None:
            return
        phase = self.phase() if self.phase is not None else self.unit().phase
        try:
            self._last = self._read(self.imex)
            self._read_phase = phase
            self.read_error = None
        except Exception as err:  # noqa: BLE001 - the reader thread must outlive a bad read
            self.read_error = f"{type(err).__name__}: {err}"

    def start_reader(self) -> None:
        """Read now, then every ``interval_s`` seconds, and at once whenever the unit's phase
        changes (it became ready, a daemon went down, a restart began): a scrape never shows
        the unit ready beside a reading taken before it started. The phase is looked at every
        :data:`PHASE_POLL_S` seconds (a snapshot of plain values, no I/O)."""

        def loop() -> None:
            phase: str | None = None
            due = 0.0
            while True:
                now_phase = self.phase() if self.phase is not None else self.unit().phase
                if now_phase != phase or time.monotonic() >= due:
                    phase = now_phase
                    self.read_once()
                    due = time.monotonic() + self.interval_s
                if self._stop.wait(min(PHASE_POLL_S, max(0.0, due - time.monotonic()))):
                    return

        threading.Thread(target=loop, name="nvfabric-observe-reader", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def _answer(watch: Watch, path: str) -> tuple[int, str, bytes]:
    """(HTTP status, content type, body) for ``path``; pure given the watch's snapshot."""
    snap = watch.snapshot()
    text = "text/plain; charset=utf-8"
    kube = watch.kube() if watch.kube is not None else None
    if path == "/metrics":
        reading = snap.reading
        if reading is not None and snap.kernel is not None:
            reading = with_kernel(reading, snap.kernel)
        return 200, CONTENT_TYPE, render(reading, snap.unit, kube, snap.kernel)
    if path == "/healthz":
        return (200, text, b"ok\n") if snap.unit.alive else (503, text, b"run has ended\n")
    if path == "/readyz":
        contested = _owner_conflict(snap.status)
        if snap.unit.ready and contested is None:
            return 200, text, b"ready\n"
        why = f"imex_owner_conflict: {contested}" if contested else snap.unit.phase
        return 503, text, f"not ready: {why}\n".encode()
    if path == "/status":
        if snap.status is None:
            return 503, text, b"no reading yet\n"
        status = snap.live_status() or {}
        shown = status if kube is None else {**status, "kube_publish": kube.to_json()}
        return 200, "application/json", (json.dumps(shown, indent=2) + "\n").encode()
    return 404, text, b"not found: /metrics, /healthz, /readyz, /status\n"


def _owner_conflict(status: dict[str, Any] | None) -> str | None:
    """The message of the last reading's ``imex_owner_conflict``, None without one: another
    IMEX owner beside the run takes the same IMEX session, so the run is not ready whatever
    its unit says (the rule of ``nvfabric ready``: :mod:`nvfabric.app.ready`)."""
    for f in (status or {}).get("findings") or ():
        if isinstance(f, dict) and f.get("code") == "imex_owner_conflict":
            return str(f.get("message", ""))
    return None


def _handler(watch: Watch) -> type[BaseHTTPRequestHandler]:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S
        server_version = "nvfabric"
        sys_version = ""

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._reply(with_body=True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._reply(with_body=False)

        def _reply(self, with_body: bool) -> None:
            status, ctype, body = _answer(watch, self.path.split("?", 1)[0])
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # no per-request log lines

    return Handler


def bind(watch: Watch, host: str, port: int) -> ThreadingHTTPServer:
    """Bind ``host:port`` now (OSError when it cannot: in use, no such address) for serving
    ``watch``; nothing is served before :func:`start` (``server_close()`` gives the port
    back)."""
    import socket
    from http.server import ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    return Server((host, port), _handler(watch))


def start(server: ThreadingHTTPServer) -> ThreadingHTTPServer:
    """Serve a bound ``server`` (:func:`bind`) from a daemon thread; returns it
    (``shutdown()`` stops it)."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 5.0},
                     name="nvfabric-http", daemon=True).start()
    return server


def serve(watch: Watch, host: str, port: int) -> ThreadingHTTPServer:
    """:func:`bind` and :func:`start` at once."""
    return start(bind(watch, host, port))

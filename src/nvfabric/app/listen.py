"""What watches ``nvfabric run`` from outside: the log format (``--log-format``,
:mod:`nvfabric.effects.log`) and the HTTP endpoint of ``--listen HOST:PORT``
(:mod:`nvfabric.observe.serve`), whose reading of the fabric is renewed every
``--health-interval`` seconds; ``--publish`` reads the same watch (:func:`watch`).

The reading served is the one of ``nvfabric status`` (:func:`nvfabric.app.status.evaluate`:
the GPUs' fabric state by NVML, or the node's nvidia-smi on a simulated root, the plan and the
services), plus on mnnvl trays the IMEX domain state (``nvidia-imex-ctl -N -j`` of the daemon
the run supervises).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nvfabric.app.status import evaluate
from nvfabric.effects.log import Log, set_format
from nvfabric.facts.imex.ctl import domain_state
from nvfabric.model.errors import usage_error
from nvfabric.model.words import seconds
from nvfabric.observe import hook, serve
from nvfabric.observe.metrics import reading_of

if TYPE_CHECKING:  # the HTTP server is imported only when --listen binds (serve.bind)
    from http.server import ThreadingHTTPServer


def check(listen: str | None, log_format: str) -> tuple[str, int] | None:
    """Before anything else: the log format takes effect, and ``--listen`` is parsed (exit 2,
    one line, when it is not HOST:PORT)."""
    set_format("json" if log_format == "json" else "text")
    if listen is None:
        return None
    try:
        return serve.parse_listen(listen)
    except ValueError as err:
        raise usage_error(str(err), "e.g. --listen 127.0.0.1:9464, --listen 0.0.0.0:9464 or "
                          "--listen [::1]:9464") from None


@dataclass(frozen=True)
class Bound:
    """``--listen``'s port, bound and not served yet (:func:`bind`), with the watch it will
    serve."""

    server: ThreadingHTTPServer
    watch: serve.Watch
    address: tuple[str, int]
    interval_s: float

    def close(self) -> None:
        """Give the port back (the run ends before it serves)."""
        self.server.server_close()


def bind(address: tuple[str, int], root: str, interval_s: float) -> Bound:
    """Bind ``address`` (:func:`nvfabric.observe.serve.bind`) for the watch of ``root``,
    serving nothing yet: a port that cannot be bound (in use, no such address) is exit 2
    with one line, before the run writes anything (its state directory, the lock)."""
    host, port = address
    watch = serve.Watch(reader(root), interval_s)
    try:
        server = serve.bind(watch, host, port)
    except OSError as err:
        raise usage_error(f"--listen {host}:{port}: cannot listen: {err.strerror or err}",
                          "choose a free port, or an address of this host") from None
    return Bound(server, watch, address, interval_s)


def start(bound: Bound) -> None:
    """Serve the bound port (:func:`bind`) and start the watch's reader thread."""
    host, port = bound.address
    watch = bound.watch
    serve.start(bound.server)
    hook.activate(watch)
    watch.start_reader()
    shown = f"[{host}]" if ":" in host else host
    Log().say(f"serving /metrics, /healthz, /readyz, /status on http://{shown}:{port} "
              f"(fabric read every {seconds(bound.interval_s)} s)")


def watch(root: str, interval_s: float) -> serve.Watch:
    """The watch :func:`start` serves, else one made now without HTTP, its reader thread
    started (``run --publish`` without ``--listen``)."""
    active = hook.active()
    if active is not None:
        return active
    made = serve.Watch(reader(root), interval_s)
    hook.activate(made)
    made.start_reader()
    return made


def reader(root: str) -> Callable[[tuple[str, str] | None], tuple[Any, dict[str, Any]]]:
    """The reading function of the watch: ``status``'s report as a metrics reading and as its
    JSON object, with the IMEX domain state when an IMEX daemon is given (the full paths of
    its nvidia-imex-ctl and the config it runs with)."""

    def read(imex: tuple[str, str] | None) -> tuple[Any, dict[str, Any]]:
        report = evaluate(root)
        reading = reading_of(report)
        if imex is not None:
            reading = replace(reading, imex_domain=domain_state(*imex))
        return reading, report.to_json()

    return read

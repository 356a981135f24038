"""What watches ``nvfabric run`` from outside: the log format (``--log-format``,
:mod:`nvfabric.effects.log`) and the HTTP endpoint of ``--listen HOST:PORT``
(:mod:`nvfabric.observe.serve`), whose reading of the fabric is renewed every
``--health-interval`` seconds.

The reading served is the one of ``nvfabric status`` (:func:`nvfabric.app.status.evaluate`:
the GPUs' fabric state by NVML, or the node's nvidia-smi on a simulated root, the plan and the
services), plus on mnnvl trays the IMEX domain state (``nvidia-imex-ctl -N -j`` of the daemon
the run supervises).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from nvfabric.app.status import evaluate
from nvfabric.effects.log import Log, set_format
from nvfabric.facts.imex.ctl import domain_state
from nvfabric.model.errors import usage_error
from nvfabric.model.words import seconds
from nvfabric.observe import hook, serve
from nvfabric.observe.metrics import reading_of


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


def start(address: tuple[str, int] | None, root: str, interval_s: float) -> None:
    """Bind and serve (:func:`nvfabric.observe.serve.serve`) when ``address`` is given, and
    start the reader thread. A port that cannot be bound (in use, no such address) is
    exit 2 with one line; nothing has been started yet."""
    if address is None:
        return
    host, port = address
    watch = serve.Watch(reader(root), interval_s)
    try:
        serve.serve(watch, host, port)
    except OSError as err:
        raise usage_error(f"--listen {host}:{port}: cannot listen: {err.strerror or err}",
                          "choose a free port, or an address of this host") from None
    hook.activate(watch)
    watch.start_reader()
    shown = f"[{host}]" if ":" in host else host
    Log().say(f"serving /metrics, /healthz, /readyz, /status on http://{shown}:{port} "
              f"(fabric read every {seconds(interval_s)} s)")


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

"""The options of ``nvfabric run`` that watch the run from outside: ``--listen HOST:PORT``
(the HTTP endpoint, :mod:`nvfabric.observe.serve`), ``--health-interval`` (how often its
reading of the fabric is renewed) and ``--log-format`` (:mod:`nvfabric.effects.log`).

The reading served is the one of ``nvfabric status`` (:func:`nvfabric.cli.status.evaluate`:
the GPUs' fabric state by NVML, or the node's nvidia-smi on a simulated root, the plan and the
services), plus on mnnvl trays the IMEX domain state (``nvidia-imex-ctl -N -j``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from nvfabric.cli.render import Seconds
from nvfabric.model.errors import usage_error
from nvfabric.model.words import seconds

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds between two readings of the fabric by ``run --listen`` (GPU fabric state, services).
DEFAULT_HEALTH_INTERVAL_S = 30.0


def options(fn: F) -> F:
    """The three click options, in the order ``run --help`` shows them."""
    fn = click.option(
        "--log-format", type=click.Choice(["text", "json"]), default="text",
        show_default=True, help="Log lines as text (RFC 3339 time first) or one JSON object "
        "per line (time, level, source, message, code).")(fn)
    fn = click.option(
        "--health-interval", type=Seconds(min=1), default=DEFAULT_HEALTH_INTERVAL_S,
        show_default=True, help="With --listen: seconds between readings of the GPUs' fabric "
        "state (never read per request).")(fn)
    return click.option(
        "--listen", "listen_at", metavar="HOST:PORT", default=None,
        help="Serve /metrics, /healthz, /readyz, /status over HTTP [default: off; the "
        "DaemonSet listens on 0.0.0.0:9464].")(fn)


def check(listen: str | None, log_format: str) -> tuple[str, int] | None:
    """Before anything else: the log format takes effect, and ``--listen`` is parsed (exit 2,
    one line, when it is not HOST:PORT)."""
    from nvfabric.effects import log as logs

    logs.set_format("json" if log_format == "json" else "text")
    if listen is None:  # http.server and prometheus_client stay unimported
        return None
    from nvfabric.observe.serve import parse_listen

    try:
        return parse_listen(listen)
    except ValueError as err:
        raise usage_error(str(err), "e.g. --listen 127.0.0.1:9464, --listen 0.0.0.0:9464 or "
                          "--listen [::1]:9464") from None


def start(address: tuple[str, int] | None, root: str, interval_s: float) -> None:
    """Bind and serve (:func:`nvfabric.observe.serve.serve`) when ``address`` is given, and
    start the reader thread. A port that cannot be bound (in use, no such address) is
    exit 2 with one line; nothing has been started yet."""
    if address is None:
        return
    from nvfabric.effects.log import Log
    from nvfabric.observe import hook, serve

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
    JSON object, with the IMEX domain state when an IMEX daemon is given."""

    def read(imex: tuple[str, str] | None) -> tuple[Any, dict[str, Any]]:
        from dataclasses import replace

        from nvfabric.cli.status import evaluate
        from nvfabric.observe.metrics import reading_of

        report = evaluate(root)
        reading = reading_of(report)
        if imex is not None:
            reading = replace(reading, imex_domain=imex_domain(*imex))
        return reading, report.to_json()

    return read


def imex_domain(ctl: str, config: str) -> str | None:
    """The IMEX domain state (``UP``, ``DEGRADED``, ``DOWN``) as ``nvidia-imex-ctl -N -j``
    prints it (full paths of the binary and the config the daemon runs with), None when it
    cannot be asked (not running, not installed, timed out after 5 s)."""
    from nvfabric.facts.imex import ctl as imexctl

    try:
        result = imexctl.run_ctl(imexctl.domain_argv(ctl, config), 5.0)
        return imexctl.parse_domain(result.stdout).state if result.rc == 0 else None
    except (OSError, ValueError):
        return None

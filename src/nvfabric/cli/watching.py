"""The options of ``nvfabric run`` that watch the kernel log after bring-up
(:mod:`nvfabric.observe.kernelwatch`; docs/watching.md): where it is read from, the boot
window of link-training notices, how often repeats are said, and the flood bound. The event
history needs no option: it is ``events`` in the state directory
(:mod:`nvfabric.observe.history`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from nvfabric.cli.render import Seconds
from nvfabric.rules.live import DEFAULT_BOOT_WINDOW_S

F = TypeVar("F", bound=Callable[..., Any])

#: The defaults of :mod:`nvfabric.observe.kernelwatch` (not imported here: the run command's
#: import stays free of the watch, which only the supervisor process needs).
DEFAULT_INTERVAL_S = 60.0
DEFAULT_MAX_LINES_PER_S = 20_000


def options(fn: F) -> F:
    """The four click options, in the order ``run --help`` shows them."""
    fn = click.option(
        "--kernel-max-lines", type=click.IntRange(100), default=DEFAULT_MAX_LINES_PER_S,
        show_default=True, help="Kernel log lines a second beyond which the rest of the "
        "second is skipped and counted (a flood).")(fn)
    fn = click.option(
        "--kernel-interval", type=Seconds(1.0), default=DEFAULT_INTERVAL_S,
        show_default=True, help="Seconds within which the repeats of a kernel finding on "
        "one device are one log line with their count.")(fn)
    fn = click.option(
        "--link-training-window", type=Seconds(0.0), default=DEFAULT_BOOT_WINDOW_S,
        show_default=True, help="Seconds after the NVIDIA driver loaded during which "
        "link-training notices are counted, not raised (NVSentinel's boot grace period).")(fn)
    return click.option(
        "--kernel-log", type=click.Choice(["auto", "kmsg", "journal", "off"]), default="auto",
        show_default=True, help="Watch the kernel log for fabric events while supervising: "
        "/dev/kmsg under --root, else the journal's kernel stream (auto).")(fn)


def spec(root: str, use: str, window_s: float, interval_s: float, max_lines: int
         ) -> dict[str, Any] | None:
    """The watch's part of the job (:attr:`nvfabric.supervisor.job.Job.kernel_watch`), None
    when ``--kernel-log off``."""
    if use == "off":
        return None
    return {"root": root, "use": use, "boot_window_s": window_s, "interval_s": interval_s,
            "max_lines_per_s": max_lines}

"""The restart policy of a unit (RUN.md R03, R04, R09), as functions of values:

- back-off: ``backoff_base_s * 2**n`` seconds, capped at ``backoff_cap_s``; n starts again at
  0 once the unit stayed ready for the cap (:func:`backoff_delay`);
- start limit: ``start_limit_burst`` starts within ``start_limit_interval_s`` end a crash loop
  (systemd's StartLimitBurst/StartLimitIntervalSec, :func:`start_limit`);
- R04: once GPUs registered with the NVLink fabric, a service that needs a GPU reset before it
  starts again (fabric manager on H100 and later) is not restarted silently: the operator's
  reset command runs first (:func:`gpu_reset`), and R09 checks that it did reset the GPUs.

Nothing here reads a clock or the host itself: times and the host's answers come in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from nvfabric.effects.log import Log
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.words import seconds
from nvfabric.supervisor.policy import Policy


def backoff_delay(policy: Policy, n: int) -> float:
    """Seconds before restart number ``n`` (0-based since the last reset of the back-off)."""
    return float(min(policy.backoff_cap_s, policy.backoff_base_s * 2 ** n))


def backoff_resets(policy: Policy, ready_at: float | None, now: float) -> bool:
    """True when the unit stayed ready for the cap (``ready_at`` to ``now``, seconds): the
    next delay is the first one again."""
    return ready_at is not None and now - ready_at >= policy.backoff_cap_s


def start_limit(policy: Policy, starts: deque[float], now: float) -> Finding | None:
    """The ``restart_limit`` finding when the unit's starts (times, oldest first; those older
    than the interval are dropped from ``starts``) reach the burst, else None."""
    burst, interval = policy.start_limit_burst, policy.start_limit_interval_s
    while starts and now - starts[0] > interval:
        starts.popleft()
    if burst <= 0 or len(starts) < burst:
        return None
    return Finding(
        "restart_limit", "error",
        f"the unit was started {len(starts)} times within {seconds(interval)} s and failed "
        f"each time: not restarted again (limit {burst} starts in {seconds(interval)} s)",
        "read the failures above (the first one says why); fix the cause and start "
        "nvfabric run again, or change --restart-limit-burst/--restart-limit-interval",
        {"starts": len(starts), "burst": burst, "interval_s": interval})


class ResetHost(Protocol):
    """What :func:`gpu_reset` needs of the host."""

    def run_reset(self, argv: Sequence[str], timeout_s: float, tick: Callable[[], float]
                  ) -> tuple[int | None, bytes, str | None]: ...

    def probe_now(self) -> GpuCheck | None: ...


#: How a GPU reset before a start ended: ``ok`` (start), ``refused`` (the finding says why),
#: ``stopped`` (a stop signal came during the reset: nothing starts, an orderly stop).
ResetResult = tuple[Literal["ok", "refused", "stopped"], Finding | None]


def _refusal(message: str, hint: str, fields: dict[str, object]) -> ResetResult:
    return "refused", Finding("restart_needs_gpu_reset", "error", message, hint, fields)


def gpu_reset(names: str, policy: Policy, host: ResetHost, log: Log,
              say_status: Callable[[str], None], tick: Callable[[], float]) -> ResetResult:
    """R04: run the operator's reset command (``policy.gpu_reset_argv``) before (re)starting
    ``names`` once GPUs registered; without one, or when it fails, times out or leaves GPUs
    registered (R09), the refusal. ``tick`` keeps the watchdog pinged while it runs."""
    argv = policy.gpu_reset_argv
    if not argv:
        return _refusal(
            f"{names} would be restarted after GPUs registered with the NVLink fabric; on "
            "H100 and later that breaks NVLink SHARP (NCCL 'invalid argument') until the "
            "GPUs are reset, so nvfabric does not do it silently",
            "stop CUDA clients, then rerun with --gpu-reset-command 'nvidia-smi -r' (or your "
            "reset procedure), or reboot the node", {"services": names})
    log.say(f"resetting GPUs before starting {names}: {' '.join(argv)}")
    say_status(f"resetting GPUs before starting {names}")
    try:
        returncode, output, stopped_by = host.run_reset(argv, policy.gpu_reset_timeout_s, tick)
    except OSError as err:
        return _refusal(f"the GPU reset command failed: {err}", "check --gpu-reset-command; "
                        "the GPUs must be reset before fabric manager starts",
                        {"services": names})
    for raw in output.decode("utf-8", "replace").splitlines():
        log.line(f"gpu-reset: {raw}")
    if stopped_by is not None:  # an orderly stop: nothing starts after the reset
        log.say(f"received {stopped_by} during the GPU reset: the reset command was "
                "stopped (SIGTERM to its process group); nothing is started")
        return "stopped", None
    if returncode is None:
        timeout = policy.gpu_reset_timeout_s
        return _refusal(
            f"the GPU reset command did not finish within {seconds(timeout)} s and was killed; "
            f"{names} was not started",
            "find what holds the GPUs (CUDA clients, nvidia-persistenced), or raise "
            "--gpu-reset-timeout; the GPUs must be reset before fabric manager starts",
            {"services": names, "timeout_s": timeout})
    if returncode != 0:
        return _refusal(f"the GPU reset command exited with code {returncode}",
                        "stop every CUDA client first (a GPU in use cannot be reset), or reboot",
                        {"services": names})
    return reset_verified(names, argv, host.probe_now(), log)


def reset_verified(names: str, argv: Sequence[str], check: GpuCheck | None,
                   log: Log) -> ResetResult:
    """R09: after the reset command returned 0, the GPUs' fabric state read again (``check``;
    None: nothing to read it with, the command is trusted): a GPU still registered (the
    command did nothing, or reset other GPUs), or a state that cannot be read, is not a reset:
    the refusal names the GPUs."""
    if check is None:
        return "ok", None
    command = " ".join(argv)
    if check.registered:
        gpus = list(check.registered_gpus)
        shown = ", ".join(gpus) if gpus else check.summary
        return _refusal(
            f"`{command}` returned 0 but GPUs are still registered with the NVLink fabric "
            f"({shown}; {check.summary}): {names} was not started",
            "the reset command did not reset these GPUs (wrong GPUs, or it does nothing): "
            "stop CUDA clients and reset them (nvidia-smi -r), or reboot the node",
            {"services": names, "gpus": gpus, "summary": check.summary})
    if check.error is not None:
        return _refusal(
            f"`{command}` returned 0 but the GPUs' fabric state cannot be read to check "
            f"it ({check.error}): {names} was not started",
            "check the driver and nvidia-smi, then run again; the reset must be seen "
            "before fabric manager starts",
            {"services": names, "gpus": [], "summary": check.summary})
    log.say(f"GPU reset checked: {check.summary}")
    return "ok", None

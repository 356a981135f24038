"""Is IMEX ready? The supervisor's readiness probe for ``nvidia-imex`` on a GB200/GB300 tray:
``nvidia-imex-ctl -q`` under a hard timeout (:func:`nvfabric.facts.imex.ctl.run_ctl`, argv
only); when not READY, ``nvidia-imex-ctl -N -j`` names the peers it waits for (IMEX user
guide, "nvidia-imex-ctl"; parsers in :mod:`nvfabric.facts.imex.ctl`).
"""

from __future__ import annotations

from collections.abc import Callable

from nvfabric.facts.execinfo import exec_error
from nvfabric.facts.imex import ctl
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.hostpath import PathEscape
from nvfabric.model.words import plural, seconds


def readiness_probe(query: tuple[str, ...], ctl_binary: str, cfg_path: str,
                    timeout_s: float) -> Callable[[], GpuCheck]:
    """The supervisor's readiness probe for IMEX: ``query``, the readiness query the run
    prepared and ``--dry-run`` printed (:func:`nvfabric.bringup.mnnvl.ready_argv`:
    ``nvidia-imex-ctl -c <cfg> -q``, or ``-q --u=<socket>`` over the command socket the DRA
    driver's host-managed mode asks), under a hard timeout; when not READY, ``ctl_binary -c
    cfg_path -N -j`` names the peers it waits for. ``error`` says why it is not READY; the
    supervisor logs it as ``IMEX not READY yet: <why>`` and gives ``imex_not_ready`` after
    the readiness timeout (the spec's :data:`nvfabric.bringup.mnnvl.IMEX_READY`)."""

    def probe() -> GpuCheck:
        try:
            result = ctl.run_ctl(query, timeout_s)
        except (OSError, PathEscape) as err:
            why = exec_error(ctl_binary, err) if isinstance(err, OSError) else str(err)
            return GpuCheck(False, False, "not queried", f"cannot run {ctl_binary}: {why}")
        if result.timed_out:
            return GpuCheck(False, False, "not answering",
                            f"nvidia-imex-ctl -q did not answer within {seconds(timeout_s)} s "
                            "(killed; it hangs while the daemon does not answer)")
        if result.rc is None and result.limit is not None:
            return GpuCheck(False, False, "not answering",
                            f"nvidia-imex-ctl -q {result.limit.words()} (killed)")
        domain = _domain(ctl_binary, cfg_path, timeout_s)
        if ctl.parse_query(result.stdout):
            where = f", domain {domain.state} ({plural(len(domain.nodes), 'node')})" \
                if domain else ""
            return GpuCheck(True, False, f"READY{where}")
        if domain is not None and domain.unreachable:
            why = f"domain {domain.state}, waiting for " + ", ".join(domain.unreachable[:6])
        elif domain is not None:
            why = f"domain {domain.state}"
        else:
            why = (result.stdout.strip() or result.stderr.strip() or "no answer")[:200]
        return GpuCheck(False, False, "not ready", why)

    return probe


def _domain(ctl_binary: str, cfg_path: str, timeout_s: float) -> ctl.DomainStatus | None:
    try:
        result = ctl.run_ctl(ctl.domain_argv(ctl_binary, cfg_path), timeout_s)
        return ctl.parse_domain(result.stdout) if result.rc == 0 else None
    except (OSError, ValueError):
        return None

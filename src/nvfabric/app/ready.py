"""``nvfabric ready``: is a live ``nvfabric run`` ready on this node? The readiness probe of a
run (Kubernetes ``readinessProbe``, a health check) that cannot be fooled by a stale file.

1. The run's readiness file: ``<state-dir>/ready`` counts only while the pid inside is the
   ``nvfabric run`` holding the run lock (:func:`nvfabric.effects.runlock.live_ready`, RUN.md
   R10): after ``kill -9`` of the run the file is still there, but nobody holds the lock.
2. On a GB200/GB300 tray, nobody else claims IMEX beside it: two owners take the same IMEX
   session (NV_ERR_IN_USE), so a second one appearing after the run became ready
   (``imex_owner_conflict``, an error that makes ``status`` unhealthy) makes it not ready, as
   ``run --listen``'s ``/readyz`` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvfabric.effects.runlock import live_ready
from nvfabric.facts.imex import tray
from nvfabric.model.commandline import command_line
from nvfabric.model.findings import Finding
from nvfabric.rules.imex import owner


@dataclass(frozen=True)
class Readiness:
    """The answer: ``run`` the live run's readiness file (None: no live run is ready),
    ``findings`` why it is not ready (``run_not_ready``, ``imex_owner_conflict``)."""

    run: dict[str, Any] | None
    findings: tuple[Finding, ...] = ()

    @property
    def ready(self) -> bool:
        return self.run is not None and not self.findings


def check(root: str, state_dir: str, state: str) -> Readiness:
    """The readiness of the run whose state directory is ``state_dir`` (host path, for the
    hint) at ``state`` (under ``root``, already confined): its ready file, then on a tray the
    IMEX owner decision of the node (:func:`nvfabric.rules.imex.owner.decide`)."""
    info, why = live_ready(state)
    if info is None:
        return Readiness(None, (Finding(
            "run_not_ready", "error", why,
            f"start `{command_line('run', root=root, state_dir=state_dir)}` (or wait for it to "
            "report ready); a file left by a run that is gone is removed by the next run",
            {"state_dir": state}),))
    if info.get("fabric") == "mnnvl":
        conflict = owner.decide(tray.gather_evidence(root)).conflict
        if conflict is not None:
            return Readiness(info, (conflict,))
    return Readiness(info)

"""The node a hint speaks of (:class:`nvfabric.model.commandline.HintContext`), read from the
node under a root: who runs fabric manager there and where it logs, whether nvfabric.service
is enabled, and on a tray the IMEX decision. ``status`` reads it beside its verdict (with the
services it has read already: :func:`hint_context`); ``doctor --root`` reads it to type the
catalogue's hints for that node (:func:`of_node`)."""

from __future__ import annotations

import os

from nvfabric.bringup.mnnvl import EFFECTIVE_CFG
from nvfabric.effects.runlock import run_lock_holder
from nvfabric.facts import services
from nvfabric.facts.imex import tray
from nvfabric.model.commandline import DEFAULT_STATE_DIR, FM_UNIT, NVFABRIC_UNIT, HintContext
from nvfabric.model.hostpath import under
from nvfabric.model.services import ServiceState
from nvfabric.model.vocab import FabricKind
from nvfabric.rules.imex import owner
from nvfabric.rules.imex.owner import Ownership
from nvfabric.rules.plan import SERVICES_BY_FABRIC

#: Fabric manager's log when its config does not name one (NVIDIA Fabric Manager User Guide,
#: "Fabric Manager Config Options": LOG_FILE_NAME).
FM_LOG = "/var/log/fabricmanager.log"


def hint_context(root: str, found: tuple[ServiceState, ...],
                 decision: Ownership | None = None) -> HintContext:
    """The node the hints speak of: ``root``, who runs fabric manager there
    (:func:`nvfabric.facts.services.fm_runner`: the pid file of the process found, a live
    ``nvfabric run``, the unit enabled), fabric manager's log (its config's
    ``LOG_FILE_NAME``; ``""`` when it logs to stderr or syslog) and, on a tray, the IMEX
    decision (owner, runner, and a live run's effective config)."""
    fm = next((s for s in found if s.name == "fabricmanager"), None)
    ours = services.unit_enabled(root, NVFABRIC_UNIT)
    try:
        run_live = run_lock_holder(under(root, DEFAULT_STATE_DIR)) is not None
    except OSError:
        run_live = False
    cfg = services.fm_config(root) if fm is not None else {}
    log = "" if cfg.get("LOG_USE_SYSLOG") == "1" else cfg.get("LOG_FILE_NAME", FM_LOG)
    run = decision.run if decision is not None else None
    return HintContext(
        root, services.fm_runner(fm, run_live, ours, services.unit_enabled(root, FM_UNIT)),
        ours, log,
        decision.owner if decision is not None else None,
        decision.runner if decision is not None else None,
        os.path.join(run.state_dir, EFFECTIVE_CFG) if run is not None else None)


def of_node(root: str, kind: FabricKind) -> HintContext:
    """The hint context of the node under ``root`` judged as ``kind``: the services of that
    kind read (:data:`nvfabric.rules.plan.SERVICES_BY_FABRIC`) and, on an mnnvl tray, who
    owns and runs IMEX (:func:`nvfabric.rules.imex.owner.decide`, the rule ``status`` and
    ``run`` decide by)."""
    found = services.read(root, SERVICES_BY_FABRIC[kind])
    decision = owner.decide(tray.gather_evidence(root)) if kind == "mnnvl" else None
    return hint_context(root, found, decision)

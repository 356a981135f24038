"""``nvfabric status`` and ``nvfabric wait``: is this node's NVLink fabric usable by CUDA?

The procedure reads everything first, then judges: the node under the root (its plan's fabric
kind, the services' liveness, FABRIC_MODE, on an mnnvl tray who owns IMEX and the channels
that owner needs), the fabric state (NVML on the node, the node's nvidia-smi on a simulated
root, or a saved capture), the node's identity for ``nvfabric domain check`` (host name, and on
a tray its addresses and IMEX section) and, for a metrics reading, the IMEX domain state and
the readiness of a live ``nvfabric run``; then the verdict
(:func:`nvfabric.rules.verdict.verdict`, pure) and one :class:`Report`, which ``--publish``
and ``--npd`` then tell the cluster (:func:`tell`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

from nvfabric.app import kube
from nvfabric.app.hints import hint_context
from nvfabric.app.kube import KubeRequest
from nvfabric.effects import stop
from nvfabric.effects.runlock import live_ready, run_lock_holder
from nvfabric.facts import gpu, inventory, services
from nvfabric.facts.imex import ctl, tray
from nvfabric.facts.smi import SmiFormatError, missing_columns_error, parse
from nvfabric.facts.textfile import read_capped
from nvfabric.model.commandline import DEFAULT_STATE_DIR, HintContext
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.health import FabricHealth
from nvfabric.model.hostpath import under
from nvfabric.model.services import ServiceState
from nvfabric.model.vocab import FabricKind
from nvfabric.observe.metrics import Reading, reading_of
from nvfabric.rules.imex import channels, owner
from nvfabric.rules.imex.owner import Ownership
from nvfabric.rules.logtext import LogEncodingError, detect_encoding
from nvfabric.rules.plan import SERVICES_BY_FABRIC, plan
from nvfabric.rules.verdict import (
    DEFAULT_GRACE_S,
    Inputs,
    Verdict,
    columns_needed,
    infer_fabric,
    kind_untold,
    verdict,
)

OK_VERDICTS = ("healthy", "not_applicable")


@dataclass(frozen=True)
class Report:
    """One evaluation: the verdict, what it was computed from, and where the fabric kind came
    from (``option``, ``plan``, ``inferred`` from a capture's product names, or ``unknown``
    for a capture that names none: ``fabric`` None); ``node``: the
    node's identity (:func:`node_identity`), ``reading``: the metrics reading, when asked."""

    verdict: Verdict
    health: FabricHealth
    fabric: FabricKind | None
    fabric_source: str
    services: tuple[ServiceState, ...] | None
    node: tuple[tuple[str, Any], ...] = ()
    reading: Reading | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.verdict in OK_VERDICTS else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.verdict,
            "fabric": self.fabric,
            "fabric_source": self.fabric_source,
            "source": self.health.source,
            "driver_version": self.health.driver_version,
            "gpus": [g.to_json() for g in self.health.gpus],
            "services": None if self.services is None else [s.to_json() for s in self.services],
            "findings": [f.to_json() for f in self.verdict.findings],
            "reasons": list(self.verdict.reasons),
            **dict(self.node),
        }


# -- the procedure ------------------------------------------------------------------------------


def evaluate(
    root: str,
    capture: str | None = None,
    fabric_option: FabricKind | None = None,
    root_given: bool = True,
    grace_s: float | None = None,
    probe_timeout_s: float | None = None,
    metrics: bool = False,
) -> Report:
    """Read, then judge. With a capture, the node (``root``) is consulted only when it was
    given explicitly, for its fabric kind; services are then unknown. Only the services of
    the fabric kind judged (the plan's, or ``--fabric``'s) are read and listed.
    ``probe_timeout_s`` bounds the fabric-state probe (NVML or the node's nvidia-smi; default
    :data:`nvfabric.facts.gpu.SMI_TIMEOUT_S`). ``metrics``: also read what the metrics reading
    adds (:func:`reading`)."""
    grace = DEFAULT_GRACE_S if grace_s is None else grace_s
    consult = capture is None or root_given
    # 1. the node: its plan's fabric kind; for a live verdict its services and IMEX owner
    node = _read_node(root, fabric_option, live=capture is None) if consult else _Node(None)
    # 2. the fabric state of every GPU: a capture, or the probe
    health = read_capture(capture) if capture is not None else gpu.read_health(
        root, gpu.SMI_TIMEOUT_S if probe_timeout_s is None else probe_timeout_s)
    fabric: FabricKind | None
    if fabric_option:
        fabric, source = fabric_option, "option"
    elif node.fabric is not None:
        fabric, source = node.fabric, "plan"
    else:
        fabric = infer_fabric(health.gpus, health.findings)
        source = "inferred" if fabric is not None else "unknown"
    _refuse_unread(capture, health, fabric)
    # 3. who the node is, for a fleet's node list; what a metrics reading adds
    identity = node_identity(root, fabric, node.imex) if consult else ()
    domain = _imex_domain(root) if metrics and any(
        s.name == "imex" and s.running for s in node.services or ()) else None
    ready = _run_ready(root) if metrics and capture is None else None
    # 4. the verdict (pure)
    result = verdict(Inputs(
        gpus=health.gpus, fabric=fabric, services=node.services,
        pci_gpu_count=node.pci_gpu_count, grace_s=grace, fabric_mode=node.fabric_mode,
        reader_findings=health.findings, imex_owner=node.imex_owner,
        unread_columns=health.unread,
        imex_findings=node.imex_findings, plan_findings=node.plan_findings, hints=node.hints,
    ))
    result = _told(result, fabric, source, health.source)
    report = Report(result, health, fabric, source, node.services, identity)
    if not metrics:
        return report
    shown = reading_of(report)
    if domain is not None:
        shown = replace(shown, imex_domain=domain.state)
    if ready is not None:
        shown = replace(shown, run_ready=ready.ready, ready_after_s=ready.after_s)
    return replace(report, reading=shown)


def _told(result: Verdict, fabric: FabricKind | None, source: str, form: str) -> Verdict:
    """``result`` saying where a capture's fabric kind came from when no plan or option gave
    it: ``inferred`` from its GPU names, or ``unknown`` (it names none: no guess, and the
    ``capture_column_missing`` finding of :func:`kind_untold`)."""
    if source == "inferred":
        return replace(result, reasons=(
            f"fabric kind {fabric} inferred from the capture's GPU names and states "
            "(pass --root or --fabric to state it)", *result.reasons))
    if source == "unknown":
        return replace(result, findings=(kind_untold(form), *result.findings), reasons=(
            "fabric kind unknown: the capture names no GPU product (pass --root or --fabric "
            "to state it)", *result.reasons))
    return result


#: The hint of a refused capture.
CAPTURE_HINT = ("save `nvidia-smi -q > FILE` (or `nvidia-smi -q -x`, or `nvidia-smi --query-gpu="
                "index,uuid,pci.bus_id,fabric.state,fabric.status,fabric.cliqueId,"
                "fabric.clusterUuid --format=csv`)")


def read_capture(path: str) -> FabricHealth:
    """A saved nvidia-smi capture (``-`` for stdin), at most
    :data:`nvfabric.facts.gpu.SMI_MAX_BYTES` (16 MiB: `nvidia-smi -q -x` of an 8-GPU node is
    ~250 KB; `/dev/zero` or a 500 MB file is refused instead of filling memory), the same
    bound as the node's nvidia-smi output. Unreadable or unrecognised -> exit 2."""
    data = read_capped(path, gpu.SMI_MAX_BYTES, "an nvidia-smi capture",
                       "give a file saved from `nvidia-smi -q` (or -q -x)")
    try:
        return parse(_decode(data))
    except SmiFormatError as err:
        raise usage_error(f"{path}: {err}", CAPTURE_HINT) from None


def _decode(data: bytes) -> str:
    """A capture's text: UTF-8, or UTF-16/UTF-32 with or without a BOM (PowerShell's ``>`` and
    Windows editors save UTF-16 LE), detected as ``doctor`` detects a log's encoding
    (:func:`nvfabric.rules.logtext.detect_encoding`).
    SmiFormatError for other data with NUL bytes."""
    try:
        name, skip = detect_encoding(data)
    except LogEncodingError as err:
        raise SmiFormatError(
            str(err).replace("not a log file", "not an nvidia-smi capture")) from None
    text = data[skip:].decode(name, "replace")
    return text.replace("\0", "") if name == "utf-8" else text  # NUL padding


def _refuse_unread(capture: str | None, health: FabricHealth, fabric: FabricKind | None) -> None:
    """Exit 2 (S08) when the capture lacks a column the verdict of its rows needs
    (:func:`nvfabric.rules.verdict.columns_needed`; ``fabric`` None when only guessed from
    states), naming every column it lacks and which rows need which."""
    needed = columns_needed(health.gpus, fabric)
    lacking = [c for c in health.unread if c in needed]
    if not lacking:
        return
    by_rows: dict[str, list[str]] = {}
    for column in lacking:  # columns needed by the same rows are named together
        by_rows.setdefault(needed[column], []).append(column)
    why = "the verdict needs " + "; ".join(f"{', '.join(cs)} ({rows})"
                                           for rows, cs in by_rows.items())
    raise usage_error(f"{capture}: {missing_columns_error(health.unread, why)}",
                      CAPTURE_HINT) from None


@dataclass(frozen=True)
class _Node:
    """What :func:`evaluate` reads of the node under ``root``: its plan's fabric kind (None:
    the node is not consulted), and for a live verdict (else None) the GPUs on PCI, the
    services' liveness, FABRIC_MODE and, on an mnnvl tray, the IMEX decision and what is wrong
    with it (two owners, a channel the owner needs that is missing); ``plan_findings``: the
    plan's warnings (said, raising nothing); ``hints``: the node the
    hints' commands act on (:func:`nvfabric.app.hints.hint_context`)."""

    fabric: FabricKind | None
    pci_gpu_count: int | None = None
    services: tuple[ServiceState, ...] | None = None
    fabric_mode: int | None = None
    imex: Ownership | None = None
    imex_findings: tuple[Finding, ...] = ()
    hints: HintContext = HintContext()
    plan_findings: tuple[Finding, ...] = ()

    @property
    def imex_owner(self) -> str | None:
        return self.imex.owner if self.imex is not None else None


def _read_node(root: str, fabric_option: FabricKind | None, live: bool) -> _Node:
    """The node's plan; when ``live``, also the services of the fabric kind judged
    (``--fabric``'s or the plan's), FABRIC_MODE and, on an mnnvl tray, who owns IMEX."""
    p = plan(inventory.collect(root))
    if not live:
        return _Node(p.fabric, hints=HintContext(root), plan_findings=(*p.blockers, *p.findings))
    kind = fabric_option or p.fabric
    found = services.read(root, SERVICES_BY_FABRIC.get(kind, p.services))
    mode = services.fabric_mode(root)
    if kind != "mnnvl":
        return _Node(p.fabric, p.gpu_count, found, mode, hints=hint_context(root, found),
                     plan_findings=(*p.blockers, *p.findings))
    # Who owns IMEX now (a live nvfabric run included) and the channels that owner needs:
    # the same rule as run's check (Ownership.required_channels).
    decision = owner.decide(tray.gather_evidence(root))
    needed = decision.required_channels if decision.owner != "none" else ()
    seen = channels.check(tray.read_channels(root), needed) if needed else ()
    problems = tuple(f for f in (decision.conflict, decision.unknown) if f) + tuple(
        f for f in seen if f.code == "imex_channel_missing")
    return _Node(p.fabric, p.gpu_count, found, mode, decision, problems,
                 hint_context(root, found, decision), (*p.blockers, *p.findings))


def node_identity(root: str, fabric: FabricKind | None,
                  decision: Ownership | None = None) -> tuple[tuple[str, Any], ...]:
    """What ``nvfabric domain check`` needs to place this report in a node list: the host
    name, and on mnnvl trays the node's addresses and its IMEX section (owner, node list,
    channels; :func:`nvfabric.facts.imex.tray.section`, with the IMEX ``decision`` already
    made when given)."""
    names = tray.local_names(root)
    out: list[tuple[str, Any]] = [("hostname", names[0] if names else None)]
    if fabric == "mnnvl":
        out += [("addresses", list(tray.node_addresses(root))),
                ("imex", tray.section(root, decision=decision))]
    return tuple(out)


#: The IMEX control tool and config of a host-run nvidia-imex (the package's paths), asked for
#: the domain state by ``status --prometheus`` on mnnvl trays where an IMEX daemon runs (where
#: none runs, e.g. between the DRA driver's jobs, a DOWN domain is no fault: no series).
IMEX_CTL, IMEX_CONFIG = "/usr/bin/nvidia-imex-ctl", "/etc/nvidia-imex/config.cfg"


@dataclass(frozen=True)
class _Domain:
    state: str | None


def _imex_domain(root: str) -> _Domain:
    """The IMEX domain state as the node's ``nvidia-imex-ctl -N -j`` reports it (None when
    the daemon cannot be asked: not installed, not running, timed out)."""
    return _Domain(ctl.domain_state(under(root, IMEX_CTL), under(root, IMEX_CONFIG)))


@dataclass(frozen=True)
class _Ready:
    ready: bool
    after_s: float | None


def _run_ready(root: str) -> _Ready | None:
    """The readiness of a live ``nvfabric run`` on the node (RUN.md R10: its ready file, valid
    only while its pid holds the run lock in :data:`DEFAULT_STATE_DIR`); None when no run holds
    the lock or the state cannot be read."""
    state = under(root, DEFAULT_STATE_DIR)
    try:
        if run_lock_holder(state) is None:
            return None
    except OSError:
        return None
    info, _ = live_ready(state)
    after = info.get("ready_after_s") if info else None
    seconds = (float(after) if isinstance(after, (int, float)) and not isinstance(after, bool)
               and after >= 0 else None)  # a damaged file's true, -1 or string is no time
    return _Ready(info is not None, seconds)


# -- telling the cluster ------------------------------------------------------------------------


@dataclass(frozen=True)
class Told:
    """What ``status --publish`` and ``--npd`` gave: ``publish_error`` the failure's one line
    (None: published, or not asked); ``npd`` node-problem-detector's (exit code, line), None
    when not asked; ``publish_skipped`` why nothing was published (a live ``run --publish``
    is the Node's writer: :func:`nvfabric.app.kube.beside_run`)."""

    publish_error: str | None = None
    npd: tuple[int, str] | None = None
    publish_skipped: str | None = None

    def exit_code(self, report: Report) -> int:
        """The command's exit: a failed publish is :data:`nvfabric.app.kube.
        PUBLISH_FAILED_EXIT`; else ``--npd``'s answer, else the report's."""
        if self.publish_error is not None:
            return kube.PUBLISH_FAILED_EXIT
        return self.npd[0] if self.npd is not None else report.exit_code


def tell(report: Report, root: str, req: KubeRequest) -> Told:
    """The report's view written to the Node once (``req.publish``:
    :func:`nvfabric.app.kube.publish_once`; exit 2 for a Node name or a configuration that
    cannot be used), then node-problem-detector's answer (``req.npd``). Nothing is written
    beside a live ``run --publish`` (``Told.publish_skipped`` says so)."""
    status = report.to_json()
    skipped = kube.beside_run(root, under(root, DEFAULT_STATE_DIR)) if req.publish else None
    error = kube.publish_once(req, root, status) if req.publish and not skipped else None
    return Told(error, kube.npd(req, status), skipped)


# -- wait ---------------------------------------------------------------------------------------


#: The shortest fabric-state probe ``wait`` makes, even when its time is (nearly) up, so that
#: the last answer is a reading rather than a timeout; it bounds the overrun of --timeout.
MIN_PROBE_S = 0.5


def probe_budget(left_s: float) -> float:
    """Seconds the next fabric-state probe of ``wait`` may take: the time left before the
    deadline in whole tenths (a bound a message can say: 2.9, not 2.99997), at least
    :data:`MIN_PROBE_S`, at most the usual probe timeout."""
    return min(gpu.SMI_TIMEOUT_S, max(MIN_PROBE_S, math.floor(left_s * 10) / 10))


def wait(root: str, fabric: FabricKind | None, grace_s: float | None, timeout_s: float,
         interval_s: float) -> Report:
    """:func:`evaluate` every ``interval_s`` seconds until the verdict is healthy (or not
    applicable) or ``timeout_s`` passed: the last report. A stop signal ends the wait
    (Stopped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        report = evaluate(root, None, fabric, True, grace_s, probe_timeout_s=probe_budget(left))
        stop.check()  # one that came during a read that waits on nothing
        if report.exit_code == 0 or time.monotonic() >= deadline:
            return report
        stop.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))

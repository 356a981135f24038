"""The cluster's view of the fabric: what nvfabric tells Kubernetes about a node, as pure
functions of one :class:`FabricView` (the verdict and what the run knows).

- Two node conditions, node-problem-detector style (True means the problem is present):
  ``NVLinkFabricUnhealthy`` and ``NVLinkFabricDegraded`` (:func:`conditions`). The reason is
  the CamelCase of the deciding finding's code (:func:`camel`: ``partial_registration`` ->
  ``PartialRegistration``), the message one line with the hint.
- Labels that say what applies (:func:`labels`): ``nvfabric.io/fabric``,
  ``nvfabric.io/imex-owner`` on trays, ``nvfabric.io/clique`` and, opt-in,
  ``nvidia.com/gpu.clique`` in the format of NVIDIA's GPU feature discovery
  (``<ClusterUUID>.<CliqueId>`` of the fabric-attached GPUs when all agree:
  k8s-device-plugin ``internal/lm/imex.go``).
- The opt-in taint ``nvfabric.io/fabric-unhealthy=<Reason>:NoSchedule`` (:func:`taint`).
- Events: one per verdict transition (:func:`transition_event`) and per error finding or
  run fault (:func:`finding_events`), Warning for errors.
- node-problem-detector's custom plugin answer (:func:`npd_answer`: exit 0 OK, 1 problem,
  3 unknown; one short line).

No I/O, no clock: the API writes are :mod:`nvfabric.publish`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FabricKind, VerdictWord

ConditionStatus = Literal["True", "False", "Unknown"]
EventType = Literal["Normal", "Warning"]

UNHEALTHY = "NVLinkFabricUnhealthy"
DEGRADED = "NVLinkFabricDegraded"
CONDITION_TYPES = (UNHEALTHY, DEGRADED)

FABRIC_LABEL = "nvfabric.io/fabric"
IMEX_OWNER_LABEL = "nvfabric.io/imex-owner"
CLIQUE_LABEL = "nvfabric.io/clique"
#: The label NVIDIA's GPU feature discovery writes and the DRA driver reads.
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"
TAINT_KEY = "nvfabric.io/fabric-unhealthy"
#: The annotation that keeps the last published verdict (a restarted run or the next
#: ``status --publish`` knows the transition it makes).
VERDICT_ANNOTATION = "nvfabric.io/verdict"

#: A condition message is cut here (one line; the API sets no limit, readers do).
MESSAGE_MAX = 1024
#: node-problem-detector's default ``max_output_length`` of a custom plugin.
NPD_LINE_MAX = 80
#: The exit codes of node-problem-detector's custom plugin protocol (its ``types.Status``: OK
#: 0, NonOK 1, anything else Unknown); 3, not 2: nvfabric's exit 2 is bad input.
NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 3

#: The IMEX owners a tray's label may say (``dra-host`` is the DRA driver's host-managed mode).
IMEX_OWNERS = ("host", "dra", "slurm", "nvfabric", "none")
#: The verdict code of a fabric service that is not running, per service (what a
#: ``service_exited`` fault of the run is named after).
SERVICE_DOWN_CODE = {"nvlsm": "nvlsm_missing", "fabricmanager": "fm_inactive",
                     "imex": "imex_not_ready"}
#: An all-zero ClusterUUID: the GPU is in no multi-node NVLink domain (single-node NVSwitch).
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
#: A Kubernetes label value: at most 63 characters, alphanumeric at both ends, ``-_.`` inside.
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_DIGITS = re.compile(r"[0-9]{1,10}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class FabricView:
    """What the cluster is told, in one value. ``verdict`` None: no reading (yet, or it
    failed: ``read_error``). ``cliques``: ``<ClusterUUID>.<CliqueId>`` of each GPU registered
    with success (may repeat). ``fault``: the run's error that keeps its unit down now (a
    service exited, a restart refused); ``stopped``: the run ended in an orderly stop;
    ``starting``: the run is bringing its services up for the first time."""

    verdict: VerdictWord | None
    findings: tuple[Finding, ...] = ()
    fabric: FabricKind | None = None
    imex_owner: str | None = None
    cliques: tuple[str, ...] = ()
    fault: Finding | None = None
    stopped: bool = False
    read_error: str | None = None
    starting: bool = False


@dataclass(frozen=True)
class Condition:
    """One node condition as the API stores it (timestamps are the publisher's)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class EventSpec:
    """One Event on the Node: ``reason`` (CamelCase), one-line ``message``, ``type``."""

    reason: str
    message: str
    type: EventType


def camel(code: str) -> str:
    """``partial_registration`` -> ``PartialRegistration``, ``nvlsm_missing`` ->
    ``NvlsmMissing``: a finding code as a Kubernetes reason."""
    return "".join(part[:1].upper() + part[1:] for part in code.split("_") if part)


def one_line(text: str, limit: int = MESSAGE_MAX) -> str:
    """``text`` on one line (every run of white space, newlines included, one space), cut to
    ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1].rstrip() + "\u2026"


def _said(f: Finding) -> str:
    return one_line(f"{f.message} (hint: {f.hint})" if f.hint else f.message)


def _first(findings: tuple[Finding, ...], severity: str) -> Finding | None:
    return next((f for f in findings if f.severity == severity), None)


def fault_reason(f: Finding) -> str:
    """The reason a run fault is published under: a service that exited is named by the
    verdict's code for that service not running (``nvlsm`` -> ``NvlsmMissing``), any other
    fault by its own code (``restart_needs_gpu_reset`` -> ``RestartNeedsGpuReset``)."""
    service = f.fields.get("service")
    if f.code == "service_exited" and isinstance(service, str) and service in SERVICE_DOWN_CODE:
        return camel(SERVICE_DOWN_CODE[service])
    return camel(f.code)


def _unknown(view: FabricView, kind: str) -> Condition:
    """The condition ``kind`` when nvfabric cannot tell: stopped, no reading, pending."""
    if view.stopped:
        return Condition(kind, "Unknown", "NvfabricStopped", "nvfabric run stopped: the fabric "
                         "services it ran are stopped and nothing watches the fabric")
    if view.starting:
        return Condition(kind, "Unknown", "FabricStarting", "nvfabric run is starting the "
                         "fabric services; the GPUs register once they run")
    if view.verdict is None:
        return Condition(kind, "Unknown", "NoReading", one_line(
            f"the fabric could not be read: {view.read_error}" if view.read_error
            else "no reading of the fabric yet"))
    pending = _first(view.findings, "info") or (view.findings[0] if view.findings else None)
    return Condition(kind, "Unknown", "FabricPending", _said(pending) if pending else
                     "GPU fabric registration is still in progress")


def conditions(view: FabricView) -> tuple[Condition, Condition]:
    """``(NVLinkFabricUnhealthy, NVLinkFabricDegraded)`` of ``view``.

    Unhealthy: True on a run fault (its reason: :func:`fault_reason`) or an ``unhealthy``
    verdict (the first error finding decides); False when healthy, degraded or not applicable
    (reason ``FabricHealthy``, ``FabricDegraded``, ``FabricNotApplicable``); Unknown when
    pending (registration within its grace; past it the verdict is unhealthy), with no reading,
    or after the run stopped. Degraded: True on a ``degraded`` verdict (the first warning
    decides), False when healthy, not applicable or unhealthy (that is the other condition),
    Unknown as Unhealthy is."""
    v = view.verdict
    if view.fault is not None:
        bad = Condition(UNHEALTHY, "True", fault_reason(view.fault), _said(view.fault))
        return bad, Condition(DEGRADED, "False", "FabricUnhealthy",
                              f"unhealthy, beyond degraded: see {UNHEALTHY}")
    if view.stopped or view.starting or v is None or v == "pending":
        return _unknown(view, UNHEALTHY), _unknown(view, DEGRADED)
    if v == "unhealthy":
        deciding = _first(view.findings, "error") or (view.findings[0] if view.findings else None)
        bad = Condition(UNHEALTHY, "True", camel(deciding.code) if deciding else "FabricUnhealthy",
                        _said(deciding) if deciding else "the NVLink fabric is unhealthy")
        return bad, Condition(DEGRADED, "False", "FabricUnhealthy",
                              f"unhealthy, beyond degraded: see {UNHEALTHY}")
    if v == "degraded":
        deciding = _first(view.findings, "warning") or (view.findings[0] if view.findings
                                                        else None)
        return (Condition(UNHEALTHY, "False", "FabricDegraded",
                          f"degraded, not unhealthy: see {DEGRADED}"),
                Condition(DEGRADED, "True", camel(deciding.code) if deciding else "FabricDegraded",
                          _said(deciding) if deciding else "the NVLink fabric is degraded"))
    kind = view.fabric or "unknown"
    if v == "not_applicable":
        text = f"no NVLink fabric to manage on this node (fabric {kind})"
        return (Condition(UNHEALTHY, "False", "FabricNotApplicable", text),
                Condition(DEGRADED, "False", "FabricNotApplicable", text))
    text = f"the NVLink fabric is healthy (fabric {kind})"
    return (Condition(UNHEALTHY, "False", "FabricHealthy", text),
            Condition(DEGRADED, "False", "FabricHealthy", text))


def clique(view: FabricView) -> str | None:
    """``<ClusterUUID>.<CliqueId>`` when every GPU registered with success agrees on one and
    its ClusterUUID is not all-zero (GPU feature discovery's rule: one value, else none), a
    valid label value; else None."""
    values = set(view.cliques)
    if len(values) != 1:
        return None
    (value,) = values
    uuid, _, clique_id = value.partition(".")
    if uuid == ZERO_UUID or not _UUID.fullmatch(uuid) or not _DIGITS.fullmatch(clique_id) \
            or not LABEL_VALUE.fullmatch(value):
        return None
    return value


def labels(view: FabricView, gpu_clique: bool = False) -> dict[str, str | None]:
    """The labels nvfabric owns, as they should be (None: absent); nothing without a reading
    (a failed read changes no label). ``gpu_clique``: also ``nvidia.com/gpu.clique`` (the
    publisher writes it only where no other writer set it)."""
    if view.verdict is None or view.fabric is None:
        return {}
    owner = view.imex_owner
    if owner == "dra-host":  # the DRA driver, in its host-managed mode
        owner = "dra"
    out: dict[str, str | None] = {
        FABRIC_LABEL: view.fabric,
        IMEX_OWNER_LABEL: owner if view.fabric == "mnnvl" and owner in IMEX_OWNERS else None,
        CLIQUE_LABEL: clique(view),
    }
    if gpu_clique:
        out[GPU_CLIQUE_LABEL] = out[CLIQUE_LABEL]
    return out


def taint(unhealthy: Condition) -> str | None:
    """The value of nvfabric's taint (its reason, a valid label value of at most 63
    characters) while ``NVLinkFabricUnhealthy`` is True, else None (no taint)."""
    if unhealthy.status != "True":
        return None
    value = re.sub(r"[^-A-Za-z0-9_.]", "", unhealthy.reason)[:63].strip("-_.")
    return value or "FabricUnhealthy"


def transition_event(before: str | None, view: FabricView,
                     unhealthy: Condition) -> EventSpec | None:
    """The Event of a verdict transition from ``before`` (the last published verdict word;
    None: never published) to ``view``'s, or None when it did not change. A run fault counts
    as ``unhealthy``; Warning when the new verdict is unhealthy or degraded."""
    after = verdict_word(view)
    if after is None or after == before:
        return None
    why = unhealthy.message if unhealthy.status == "True" else ""
    if after == "degraded":
        why = next((_said(f) for f in view.findings if f.severity == "warning"), "")
    text = f"NVLink fabric verdict {before or 'unknown'} -> {after}" + (f": {why}" if why else "")
    return EventSpec("Fabric" + camel(after), one_line(text),
                     "Warning" if after in ("unhealthy", "degraded") else "Normal")


def verdict_word(view: FabricView) -> str | None:
    """The verdict the cluster is told: ``unhealthy`` on a run fault, ``stopped`` after an
    orderly stop, the verdict otherwise (None: no reading)."""
    if view.fault is not None:
        return "unhealthy"
    if view.stopped:
        return "stopped"
    return view.verdict


def finding_event(f: Finding) -> EventSpec:
    """The Warning Event of an error finding: its code in CamelCase, message with hint."""
    return EventSpec(camel(f.code), _said(f), "Warning")


def fault_event(f: Finding) -> EventSpec:
    """The Warning Event of a run fault, under :func:`fault_reason`."""
    return EventSpec(fault_reason(f), _said(f), "Warning")


def finding_events(view: FabricView) -> list[EventSpec]:
    """The Events of every error finding of ``view`` and of its run fault."""
    out = [finding_event(f) for f in view.findings if f.severity == "error"]
    return out + ([fault_event(view.fault)] if view.fault is not None else [])


def npd_answer(view: FabricView, condition: str = UNHEALTHY) -> tuple[int, str]:
    """node-problem-detector's custom plugin answer for ``condition``: (exit code, one line
    of at most :data:`NPD_LINE_MAX` characters, ``Reason: message``). True -> 1, False -> 0,
    Unknown -> 3."""
    unhealthy, degraded = conditions(view)
    c = degraded if condition == DEGRADED else unhealthy
    code = {"True": NPD_PROBLEM, "False": NPD_OK}.get(c.status, NPD_UNKNOWN)
    return code, one_line(f"{c.reason}: {c.message}", NPD_LINE_MAX)

"""One Node's publisher: turns each :class:`nvfabric.rules.cluster.FabricView` into the fewest
API writes that make the Node say it (:meth:`NodePublisher.publish`).

- Conditions (``nodes/NAME/status``, strategic merge: the list merges by ``type``, other
  writers' conditions stay): written when status, reason or message change, and every
  ``heartbeat_s`` (node-problem-detector's ``--k8s-exporter-heartbeat-period``, 5 minutes);
  ``lastTransitionTime`` moves only when the status changes (the stored one is kept).
- Labels, the verdict annotation and the opt-in taint (the Node): one strategic merge patch
  carrying the ``resourceVersion`` the decision was made on, so the server refuses it (409)
  when the Node changed since; then the Node is read again and the patch made again, up to
  :data:`CONFLICT_TRIES` times. Taints are a list without merge key, replaced whole: the
  list written is the one read with only nvfabric's own taint changed, every other party's
  kept as it was. ``nvidia.com/gpu.clique`` is written only where no other writer set it
  (the value nvfabric wrote is kept in an annotation and compared).
- Events (namespace ``default``, as client-go's recorder files a Node's): one per verdict
  transition, per error finding that appears, per run fault; aggregated as Kubernetes events
  aggregate: the same reason, message and type on the same Node is one Event whose ``count``
  and ``lastTimestamp`` grow (its name is derived from them). Pending Events wait in a queue
  of at most :data:`EVENTS_QUEUED` (the oldest dropped), so a long outage queues nothing
  without bound.

Each step records what it wrote, so a failed call (:class:`nvfabric.publish.api.PublishError`)
is retried from where it stopped, with the newest view.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nvfabric.model.findings import Finding
from nvfabric.publish.api import COMPONENT, EVENT_NAMESPACE, Api, PublishError
from nvfabric.rules import cluster
from nvfabric.rules.cluster import Condition, EventSpec, FabricView

if TYPE_CHECKING:
    from lightkube.resources.core_v1 import Node

#: node-problem-detector's default heartbeat (``--k8s-exporter-heartbeat-period``: 5 min).
DEFAULT_HEARTBEAT_S = 300.0
CONFLICT_TRIES = 5
EVENTS_QUEUED = 64
#: The aggregated Events remembered (their names and counts), least recently used dropped.
EVENTS_REMEMBERED = 256
#: The annotation that says which ``nvidia.com/gpu.clique`` value nvfabric wrote.
GPU_CLIQUE_WRITTEN = "nvfabric.io/gpu-clique-written"


@dataclass(frozen=True)
class Options:
    """``gpu_clique``: also write ``nvidia.com/gpu.clique`` (``--label-gpu-clique``);
    ``taint``: the taint while unhealthy (``--taint-unhealthy``); ``heartbeat_s``: seconds
    between two writes of unchanged conditions (``--heartbeat-period``)."""

    gpu_clique: bool = False
    taint: bool = False
    heartbeat_s: float = DEFAULT_HEARTBEAT_S


def rfc3339(t: float) -> str:
    """``2026-01-05T10:11:12Z`` (seconds: the precision of ``metav1.Time``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _fault_key(f: Finding | None) -> tuple[Any, ...] | None:
    """One run fault, the same while it lasts (its message gains a suffix once restarted)."""
    if f is None:
        return None
    g = f.fields
    return f.code, g.get("service"), g.get("phase"), g.get("exit_code"), g.get("signal")


class NodePublisher:
    """The publisher of Node ``name`` through ``api``. ``wall``: the clock of the timestamps
    written; ``mono``: that of the heartbeat. Not thread-safe: one caller."""

    def __init__(self, api: Api, name: str, options: Options = Options(), *,
                 wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic,
                 notice: Callable[[str], None] | None = None) -> None:
        self.api = api
        self.name = name
        self.options = options
        self._wall = wall
        self._mono = mono
        self._notice = notice or (lambda text: None)
        self._node: Node | None = None
        self._heartbeat_due = 0.0
        self._announced: str | None = None  # the verdict word the Events last said
        self._seen: tuple[frozenset[tuple[str, str]], tuple[Any, ...] | None] | None = None
        self._queue: deque[EventSpec] = deque(maxlen=EVENTS_QUEUED)
        self._events: OrderedDict[tuple[str, str, str], tuple[str, int]] = OrderedDict()
        self._said_foreign: str | None = None
        self.calls = 0  # API calls made by the last publish()

    # ---------------------------------------------------------------- the one entry point

    def publish(self, view: FabricView) -> int:
        """Make the Node say ``view``; the API calls it took (0: nothing changed). Raises
        PublishError (what was written before stays written)."""
        self.calls = 0
        if self._node is None:
            self._read()
            assert self._node is not None
            notes = self._node.metadata.annotations if self._node.metadata else None
            self._announced = (notes or {}).get(cluster.VERDICT_ANNOTATION)
        unhealthy, degraded = cluster.conditions(view)
        self._observe(view, unhealthy)
        self._conditions((unhealthy, degraded))
        self._metadata(view, unhealthy)
        self._send_events()
        return self.calls

    def _read(self) -> None:
        self.calls += 1
        self._node = self.api.get_node(self.name)

    # ---------------------------------------------------------------- conditions

    def _stored(self) -> dict[str, Any]:
        """Our condition types as the Node last seen stores them."""
        status = self._node.status if self._node is not None else None
        return {c.type: c for c in (status.conditions or []) if c.type in
                cluster.CONDITION_TYPES} if status is not None else {}

    def _conditions(self, wanted: tuple[Condition, Condition]) -> None:
        stored = self._stored()
        changed = any(c.type not in stored or (stored[c.type].status, stored[c.type].reason,
                      stored[c.type].message) != (c.status, c.reason, c.message)
                      for c in wanted)
        if not changed and self._mono() < self._heartbeat_due:
            return
        now = rfc3339(self._wall())
        body = []
        for c in wanted:
            old = stored.get(c.type)
            since = old.lastTransitionTime if old is not None and old.status == c.status \
                else None
            body.append({"type": c.type, "status": c.status, "reason": c.reason,
                         "message": c.message, "lastHeartbeatTime": now,
                         "lastTransitionTime": rfc3339(since.timestamp()) if since else now})
        self.calls += 1
        self._node = self.api.patch_node_status(self.name, {"status": {"conditions": body}})
        self._heartbeat_due = self._mono() + self.options.heartbeat_s

    # ---------------------------------------------------------------- labels and taint

    def _metadata(self, view: FabricView, unhealthy: Condition) -> None:
        for _ in range(CONFLICT_TRIES):
            body = self._metadata_patch(view, unhealthy)
            if body is None:
                return
            try:
                self.calls += 1
                self._node = self.api.patch_node(self.name, body)
                return
            except PublishError as err:
                if err.kind != "conflict":
                    raise
                self._read()  # another writer changed the Node: decide again on the new one
        raise PublishError("conflict", f"node {self.name} changed under each of "
                           f"{CONFLICT_TRIES} writes of its labels and taints")

    def _metadata_patch(self, view: FabricView, unhealthy: Condition) -> dict[str, Any] | None:
        """The Node patch that makes labels, annotations and taint as they should be, on the
        Node as last seen; None when it already says so."""
        assert self._node is not None and self._node.metadata is not None
        meta = self._node.metadata
        have = dict(meta.labels or {})
        notes = dict(meta.annotations or {})
        want = cluster.labels(view, self.options.gpu_clique)
        labels: dict[str, str | None] = {}
        annotations: dict[str, str | None] = {}
        gpu = want.pop(cluster.GPU_CLIQUE_LABEL, None) if self.options.gpu_clique else None
        if self.options.gpu_clique and cluster.CLIQUE_LABEL in want:
            labels.update(self._gpu_clique(gpu, have, notes, annotations))
        for key, value in want.items():
            if have.get(key) != value:
                labels[key] = value
        word = cluster.verdict_word(view)
        if word is not None and notes.get(cluster.VERDICT_ANNOTATION) != word:
            annotations[cluster.VERDICT_ANNOTATION] = word
        patch: dict[str, Any] = {}
        taints = self._taints(unhealthy) if self.options.taint else None
        if taints is not None:
            patch["spec"] = {"taints": taints}
        if labels or annotations:
            patch["metadata"] = {k: v for k, v in (("labels", labels),
                                                   ("annotations", annotations)) if v}
        if not patch:
            return None
        patch.setdefault("metadata", {})["resourceVersion"] = meta.resourceVersion
        return patch

    def _gpu_clique(self, value: str | None, have: dict[str, str], notes: dict[str, str],
                    annotations: dict[str, str | None]) -> dict[str, str | None]:
        """``nvidia.com/gpu.clique``: set, changed or removed only while no other writer
        holds it (absent, or the value nvfabric wrote, per :data:`GPU_CLIQUE_WRITTEN`)."""
        current = have.get(cluster.GPU_CLIQUE_LABEL)
        ours = notes.get(GPU_CLIQUE_WRITTEN)
        if current is not None and current != ours:
            if self._said_foreign != current:
                self._said_foreign = current
                self._notice(f"{cluster.GPU_CLIQUE_LABEL}={current} was set by another writer "
                             "(GPU feature discovery?): left as it is")
            return {}
        if current == value:
            if value is not None and ours != value:
                annotations[GPU_CLIQUE_WRITTEN] = value
            return {}
        annotations[GPU_CLIQUE_WRITTEN] = value
        return {cluster.GPU_CLIQUE_LABEL: value}

    def _taints(self, unhealthy: Condition) -> list[dict[str, Any]] | None:
        """The whole taint list with only nvfabric's own taint made as ``unhealthy`` says
        (every other taint as read, ``timeAdded`` included); None when it already is."""
        assert self._node is not None
        spec = self._node.spec
        taints = list((spec.taints if spec is not None else None) or [])
        value = cluster.taint(unhealthy)
        mine = [t for t in taints if t.key == cluster.TAINT_KEY]
        if value is None and not mine:
            return None
        if value is not None and len(mine) == 1 and mine[0].value == value \
                and mine[0].effect == "NoSchedule":
            return None
        kept: list[dict[str, Any]] = [
            t.to_dict() for t in taints  # type: ignore[no-untyped-call]
            if t.key != cluster.TAINT_KEY]
        if value is not None:
            kept.append({"key": cluster.TAINT_KEY, "value": value, "effect": "NoSchedule",
                         "timeAdded": rfc3339(self._wall())})
        return kept

    # ---------------------------------------------------------------- events

    def _observe(self, view: FabricView, unhealthy: Condition) -> None:
        """Queue the Events of what is new in ``view``: a verdict transition (against the
        verdict last announced), error findings not in the view before, a new run fault."""
        event = cluster.transition_event(self._announced, view, unhealthy)
        if event is not None:
            self._queue.append(event)
            self._announced = cluster.verdict_word(view)
        errors = [f for f in view.findings if f.severity == "error"]
        fault = _fault_key(view.fault)
        before_errors, before_fault = self._seen or (frozenset(), None)
        self._queue.extend(cluster.finding_event(f) for f in errors
                           if (f.code, f.message) not in before_errors)
        if view.fault is not None and fault != before_fault:
            self._queue.append(cluster.fault_event(view.fault))
        self._seen = (frozenset((f.code, f.message) for f in errors), fault)

    def _send_events(self) -> None:
        while self._queue:
            self._event(self._queue[0])
            self._queue.popleft()

    def _event_name(self, spec: EventSpec) -> str:
        import hashlib  # not on run's start-up path (tests/meta/test_run_imports.py)

        digest = hashlib.sha256(f"{spec.type}\0{spec.reason}\0{spec.message}".encode())
        return f"{self.name[:200]}.nvfabric.{digest.hexdigest()[:16]}"

    def _event(self, spec: EventSpec) -> None:
        """Create the Event, or count one more of the same (``count`` + 1, ``lastTimestamp``):
        the aggregation of client-go's event recorder, by reason, message and type."""
        key = (spec.type, spec.reason, spec.message)
        name = self._event_name(spec)
        now = rfc3339(self._wall())
        known = self._events.get(key)
        if known is not None:
            try:
                self.calls += 1
                self.api.patch_event(name, {"count": known[1] + 1, "lastTimestamp": now})
                self._remember(key, name, known[1] + 1)
                return
            except PublishError as err:
                if err.kind != "not_found":  # expired (the API server's event TTL): anew
                    raise
        assert self._node is not None and self._node.metadata is not None
        body = {
            "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
            "involvedObject": {"kind": "Node", "apiVersion": "v1", "name": self.name,
                               "uid": self._node.metadata.uid},
            "reason": spec.reason, "message": spec.message, "type": spec.type,
            "source": {"component": COMPONENT, "host": self.name},
            "reportingComponent": COMPONENT, "reportingInstance": self.name,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.calls += 1
            self.api.create_event(body)
            self._remember(key, name, 1)
        except PublishError as err:
            if err.kind != "conflict":
                raise
            # one of the same exists (an earlier run, another status --publish): count it
            self.calls += 1
            seen = self.api.patch_event(name, {"lastTimestamp": now})
            count = (seen.count or 1) + 1
            self.calls += 1
            self.api.patch_event(name, {"count": count})
            self._remember(key, name, count)

    def _remember(self, key: tuple[str, str, str], name: str, count: int) -> None:
        self._events[key] = (name, count)
        self._events.move_to_end(key)
        while len(self._events) > EVENTS_REMEMBERED:
            self._events.popitem(last=False)

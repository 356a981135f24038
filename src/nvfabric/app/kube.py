"""Telling the cluster: what ``run --publish`` and ``status --publish`` / ``--npd`` ask
(:class:`KubeRequest`, parsed by :mod:`nvfabric.cli.kube`), the Node they publish to, and the
two ways of publishing (:mod:`nvfabric.publish`):

- ``run --publish``: :func:`start_beside`, a thread beside the supervisor fed by the watch
  ``--listen`` serves (:class:`nvfabric.observe.serve.Watch`; made without HTTP when
  ``--listen`` is not given), its last publish when the run ends;
- ``status --publish``: :func:`publish_once`, the report's view written once; ``--npd``:
  :func:`npd`, node-problem-detector's answer.

The Kubernetes client (lightkube) is imported by :mod:`nvfabric.publish.api` only when a
configuration is loaded or a connection made: ``run`` and ``status`` without ``--publish`` pay
for no Kubernetes client import.
"""

from __future__ import annotations

import atexit
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from nvfabric.effects.log import Log
from nvfabric.effects.runlock import live_publisher, mark_publisher
from nvfabric.facts.imex.tray import local_names
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.observe.serve import Watch
from nvfabric.publish.api import Api, PublishError, Target, load_config
from nvfabric.publish.beside import Beside, once
from nvfabric.publish.node import Options
from nvfabric.publish.view import view_of
from nvfabric.rules.cluster import FabricView, npd_answer
from nvfabric.supervisor import running

#: ``status --publish``: the exit code when the verdict was made but could not be published
#: (the report is still printed).
PUBLISH_FAILED_EXIT = 4
#: A Node's name: an RFC 1123 subdomain (what the kubelet registers: the host name, lower case).
NODE_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class KubeRequest:
    """What was asked: ``publish`` (``--publish``), ``npd`` the condition to answer for
    (``status --npd``; None: not asked), and the publishing options: ``kubeconfig`` (None:
    in-cluster), ``node_name`` (None: the host name), ``gpu_clique``
    (``--label-gpu-clique``), ``taint`` (``--taint-unhealthy``), ``heartbeat_s`` (seconds,
    ``--heartbeat-period``)."""

    publish: bool
    kubeconfig: str | None = None
    node_name: str | None = None
    gpu_clique: bool = False
    taint: bool = False
    heartbeat_s: float = 300.0
    npd: str | None = None

    @property
    def options(self) -> Options:
        return Options(self.gpu_clique, self.taint, self.heartbeat_s)


def publishing(req: KubeRequest | None) -> TypeGuard[KubeRequest]:
    """Whether ``req`` asks to publish."""
    return req is not None and req.publish


def checked_node_name(name: str, what: str) -> str:
    """``name`` when it is a Node name (RFC 1123 subdomain, at most 253 characters); exit 2
    naming ``what`` gave it."""
    if len(name) > 253 or not NODE_NAME.fullmatch(name):
        raise usage_error(f"{what} {name!r}: not a Kubernetes node name",
                          "lower-case letters, digits, '-' and '.', as `kubectl get nodes` "
                          "shows it")
    return name


def node_of(req: KubeRequest, root: str, status: dict[str, Any] | None) -> str:
    """The Node: the option or $NODE_NAME (``req.node_name``), else the host name of ``root``
    (as ``status`` read it, or read now), lower case as the kubelet registers it; exit 2 when
    that is no Node name."""
    if req.node_name is not None:
        return req.node_name
    name = (status or {}).get("hostname")
    if not isinstance(name, str) or not name:
        names = local_names(root)
        name = names[0] if names else ""
    if not name.strip():
        raise usage_error(f"no Node name: no host name under the root {root} "
                          "(etc/hostname missing or empty) and no NODE_NAME",
                          "give --node-name NAME (the node as `kubectl get nodes` shows it)")
    return checked_node_name(name.strip().lower(), "the host name")


def target_of(req: KubeRequest, node: str, strict: bool) -> Target:
    """The publishing target, its configuration checked now: exit 2, one line, when a given
    ``--kubeconfig`` cannot be used, or (``strict``: ``status``) in-cluster configuration
    either; ``run`` does not stop its fabric for a missing in-cluster configuration: its
    publisher says so and tries again with back-off (a token mounted later is taken)."""
    target = Target(node, req.kubeconfig)
    try:
        load_config(target)
    except PublishError as err:
        if strict or req.kubeconfig is not None:
            raise usage_error(f"--publish: {err.message}", "give --kubeconfig FILE, or run in "
                              "a pod whose service account token is mounted") from None
    return target


def run_target(req: KubeRequest, root: str) -> Target | str:
    """``run --publish``: the target, checked before the run reads the node or writes
    anything on it (a usage error must leave the host as it was): exit 2, one line, for a
    ``--kubeconfig`` that cannot be used, also when there is no Node to publish to (a typed
    file is the operator's); a missing in-cluster configuration is left to the publisher
    (:func:`target_of`). No Node name (none given, no host name under ``root``) is the reason,
    a str, which :func:`start_beside` says: the fabric comes up unpublished."""
    try:
        node = node_of(req, root, None)
    except NvfabricError as err:
        if req.kubeconfig is not None:
            target_of(req, "", strict=False)
        return err.finding.message
    return target_of(req, node, strict=False)


def start_beside(req: KubeRequest, target: Target | str, watch: Watch, state: str) -> None:
    """``run --publish``: publish to ``target`` (:func:`run_target`) beside the supervisor
    from now on, from the snapshot ``watch`` holds (the last reading and the unit now), marked
    in the run's state directory ``state`` (:func:`nvfabric.effects.runlock.mark_publisher`:
    the Node's one writer while the run lives). The last view is published when the run ends
    (:func:`nvfabric.supervisor.running.at_end`, and at exit). No Node name to publish under
    (``target`` the reason) is said in one line, and the fabric comes up all the same."""
    if isinstance(target, str):
        Log().say(f"kube publish: not publishing: {target} (hint: give --node-name or "
                  "NODE_NAME)")
        return
    node = target.node
    try:
        mark_publisher(state, node)
    except OSError as err:  # the run still publishes; a status --publish may then write too
        Log().say(f"kube publish: cannot mark the state directory {state}: "
                  f"{err.strerror or err}")
    beside = Beside(lambda: Api(target), target.node, req.options, _source(watch))
    watch.kube = beside.tally.value
    beside.start()
    running.at_end(beside.stop)
    atexit.register(beside.stop)


def _source(watch: Watch) -> Callable[[], FabricView | None]:
    """The newest view of ``watch``: None (nothing to say yet) until a reading taken in the
    unit's present phase, unless the unit has a fault or has ended (said without a new
    reading)."""

    def source() -> FabricView | None:
        snap = watch.snapshot()
        fresh = snap.read_phase == snap.unit.phase  # else the reader renews it within 1 s
        ended = snap.unit.phase == "done"
        if snap.unit.fault is None and not ended and (snap.status is None or not fresh):
            return None
        return view_of(snap.live_status(), snap.unit, watch.read_error)

    return source


def beside_run(root: str, state: str) -> str | None:
    """Why ``status --publish`` writes nothing: a live ``run --publish`` on this node
    publishes it (its mark in ``state``, :func:`nvfabric.effects.runlock.live_publisher`), and
    the run sees what a one-shot reading cannot (the kernel log's live findings, the unit's
    faults); None when no such run lives."""
    live = live_publisher(state)
    if live is None:
        return None
    pid, node = live
    return (f"not published: the live `nvfabric run --publish` (pid {pid}) publishes Node "
            f"{node}; one writer per Node")


def publish_once(req: KubeRequest, root: str, status: dict[str, Any]) -> str | None:
    """``status --publish``: the view of ``status`` (a ``status --json`` object) written to
    the Node once; the failure's one line, or None when it was published. Exit 2 for a Node
    name or a configuration that cannot be used (nothing was written)."""
    target = target_of(req, node_of(req, root, status), strict=True)
    try:
        once(target, req.options, view_of(status))
    except PublishError as err:
        return err.message
    return None



def npd(req: KubeRequest, status: dict[str, Any]) -> tuple[int, str] | None:
    """``status --npd``: node-problem-detector's (exit code, line) for the condition asked
    (:func:`nvfabric.rules.cluster.npd_answer`); None when not asked."""
    return None if req.npd is None else npd_answer(view_of(status), req.npd)

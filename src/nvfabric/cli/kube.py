"""The options that tell the cluster, shared by ``nvfabric run`` and ``nvfabric status``:
``--publish`` (node conditions, events, labels and the opt-in taint, through
:mod:`nvfabric.publish`; ``status --publish``: exit 4 when it failed, the report still
printed), ``--kubeconfig``, ``--node-name``, ``--label-gpu-clique``,
``--taint-unhealthy``, ``--heartbeat-period``; and ``status --npd`` (node-problem-detector's
custom plugin protocol).

:func:`options` bundles them into one keyword argument, ``kube`` (a :class:`KubeRequest`,
None without ``--publish`` and ``--npd``), so a command takes one value. The Kubernetes client
(lightkube) and the publishing code are imported only when publishing (README "Kubernetes":
``run`` without ``--publish`` pays for no HTTP client import).

Call sites: ``run`` starts :func:`start_beside` where it starts serving (beside the supervisor,
fed by the same snapshot as ``--listen``); ``status`` calls :func:`status_door` once with its
report.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from nvfabric.cli.render import Seconds
from nvfabric.effects.log import Log
from nvfabric.model.errors import NvfabricError, usage_error

F = TypeVar("F", bound=Callable[..., Any])

#: ``status --publish``: the exit code when the verdict was made but could not be published
#: (the report is still printed).
PUBLISH_FAILED_EXIT = 4
#: A Node's name: an RFC 1123 subdomain (what the kubelet registers: the host name, lower case).
NODE_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
CONDITIONS = ("NVLinkFabricUnhealthy", "NVLinkFabricDegraded")
_META = "nvfabric.kube"


@dataclass(frozen=True)
class KubeRequest:
    """What was asked: ``publish`` (``--publish``), ``npd`` the condition to answer for
    (``--npd``; None: not asked), and the publishing options."""

    publish: bool
    kubeconfig: str | None = None
    node_name: str | None = None
    gpu_clique: bool = False
    taint: bool = False
    heartbeat_s: float = 300.0
    npd: str | None = None


def options(fn: F, *, npd: bool = False) -> F:
    """The click options (and ``--npd``, ``--npd-condition`` when ``npd``), passed to ``fn``
    as ``kube``."""
    names = ("publish", "kubeconfig", "node_name", "label_gpu_clique", "taint_unhealthy",
             "heartbeat_period", *(("npd", "npd_condition") if npd else ()))

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        got = {name: kw.pop(name, None) for name in names}
        req = request(got)
        if npd:  # status: its door finds the request in the command's context
            click.get_current_context().meta[_META] = req
        else:
            kw["kube"] = req
        return fn(*args, **kw)

    if npd:
        wrapper = click.option(
            "--npd-condition", type=click.Choice(CONDITIONS), default=None,
            help="With --npd: the condition answered for [default: NVLinkFabricUnhealthy].")(
            wrapper)
        wrapper = click.option(
            "--npd", is_flag=True, help="Answer as a node-problem-detector custom plugin: one "
            "short line; exit 0 OK, 1 problem, 3 unknown (deploy/node-problem-detector).")(wrapper)
    for decorate in (
        click.option("--heartbeat-period", type=Seconds(min=1), default=None,
                     help="With --publish: seconds between writes of unchanged conditions "
                     "[default: 300, node-problem-detector's]."),
        click.option("--taint-unhealthy", is_flag=True, default=None,
                     help="With --publish: taint the node nvfabric.io/fabric-unhealthy="
                     "<Reason>:NoSchedule while NVLinkFabricUnhealthy is True."),
        click.option("--label-gpu-clique", is_flag=True, default=None,
                     help="With --publish: also write nvidia.com/gpu.clique (GPU feature "
                     "discovery's label) where no other writer set it."),
        click.option("--node-name", metavar="NAME", default=None,
                     help="With --publish: the Node to publish to [default: $NODE_NAME, else "
                     "the host name]."),
        click.option("--kubeconfig", metavar="FILE", default=None,
                     help="With --publish: the kubeconfig to use [default: in-cluster: the "
                     "pod's service account]."),
        click.option("--publish", is_flag=True, help="Tell Kubernetes: node conditions "
                     "NVLinkFabricUnhealthy/NVLinkFabricDegraded, events, nvfabric.io/ "
                     "labels (docs/kubernetes-publish.md)" + (
                         "; exit 4 when publishing failed." if npd else ".")),
    ):
        wrapper = decorate(wrapper)
    return wrapper  # type: ignore[return-value]


def status_options(fn: F) -> F:
    """:func:`options` with ``--npd``: those of ``nvfabric status``."""
    return options(fn, npd=True)


def request(got: dict[str, Any]) -> KubeRequest | None:
    """The request of the options' values; exit 2 for an option of publishing given without
    ``--publish``, or a node name that is no Node name."""
    publish = bool(got.get("publish"))
    npd = got.get("npd_condition") or ("NVLinkFabricUnhealthy" if got.get("npd") else None)
    if got.get("npd_condition") and not got.get("npd"):
        raise usage_error("--npd-condition needs --npd", "add --npd")
    if not publish:
        given = [f"--{n.replace('_', '-')}" for n in ("kubeconfig", "node_name",
                 "label_gpu_clique", "taint_unhealthy", "heartbeat_period") if got.get(n)]
        if given:
            raise usage_error(f"{', '.join(given)} only apply with --publish",
                              "add --publish, or leave them out")
        return KubeRequest(False, npd=npd) if npd else None
    name = got.get("node_name") or os.environ.get("NODE_NAME") or None
    if name is not None:
        name = checked_node_name(name, "--node-name" if got.get("node_name") else "NODE_NAME")
    period = got.get("heartbeat_period")
    return KubeRequest(True, got.get("kubeconfig"), name, bool(got.get("label_gpu_clique")),
                       bool(got.get("taint_unhealthy")), 300.0 if period is None else period,
                       npd)


def checked_node_name(name: str, what: str) -> str:
    """``name`` when it is a Node name (RFC 1123 subdomain, at most 253 characters); exit 2."""
    if len(name) > 253 or not NODE_NAME.fullmatch(name):
        raise usage_error(f"{what} {name!r}: not a Kubernetes node name",
                          "lower-case letters, digits, '-' and '.', as `kubectl get nodes` "
                          "shows it")
    return name


def _node(req: KubeRequest, root: str, status: dict[str, Any] | None) -> str:
    """The Node: the option or $NODE_NAME, else the host name of ``root`` (as ``status``
    reads it), lower case as the kubelet registers it."""
    if req.node_name is not None:
        return req.node_name
    name = (status or {}).get("hostname")
    if not isinstance(name, str) or not name:
        from nvfabric.facts.imexhost import local_names

        names = local_names(root)
        name = names[0] if names else ""
    return checked_node_name(name.strip().lower(), "the host name")


def _target(req: KubeRequest, node: str, strict: bool) -> Any:
    """The publishing target, its configuration checked now: exit 2, one line, when a given
    ``--kubeconfig`` cannot be used, or (``strict``: ``status``) in-cluster configuration
    either; ``run`` does not stop its fabric for a missing in-cluster configuration: its
    publisher says so and tries again with back-off (a token mounted later is taken)."""
    from nvfabric.publish.api import PublishError, Target, load_config

    target = Target(node, req.kubeconfig)
    try:
        load_config(target)
    except PublishError as err:
        if strict or req.kubeconfig is not None:
            raise usage_error(f"--publish: {err.message}", "give --kubeconfig FILE, or run in "
                              "a pod whose service account token is mounted") from None
    return target


def start_beside(req: KubeRequest | None, root: str, interval_s: float) -> None:
    """``run --publish``: publish beside the supervisor from now on. The snapshot it reads is
    the one ``--listen`` serves (the same :class:`nvfabric.observe.serve.Watch`, made here
    without HTTP when ``--listen`` is not given). The last view is published when the run
    ends (:func:`nvfabric.observe.hook.at_end`, and at exit)."""
    if req is None or not req.publish:
        return
    from nvfabric.cli.listen import reader
    from nvfabric.observe import hook, serve
    from nvfabric.publish.api import Api
    from nvfabric.publish.beside import Beside
    from nvfabric.publish.node import Options
    from nvfabric.publish.view import view_of

    try:
        node = _node(req, root, None)
    except NvfabricError as err:  # no name to publish under: said, and the fabric comes up
        Log().say(f"kube publish: not publishing: {err.finding.message} (hint: give "
                  "--node-name or NODE_NAME)")
        return
    target = _target(req, node, strict=False)
    watch = hook.active()
    if watch is None:
        watch = serve.Watch(reader(root), interval_s)
        hook.activate(watch)
        watch.start_reader()

    def source() -> Any:
        snap = watch.snapshot()
        fresh = snap.read_phase == snap.unit.phase  # else the reader renews it within 1 s
        ended = snap.unit.phase == "done"  # stopped or failed: said without a new reading
        if snap.unit.fault is None and not ended and (snap.status is None or not fresh):
            return None  # nothing to say until a reading of this phase
        return view_of(snap.status, snap.unit, watch.read_error)

    beside = Beside(lambda: Api(target), target.node,
                    Options(req.gpu_clique, req.taint, req.heartbeat_s), source)
    watch.kube = beside.tally.value
    beside.start()
    hook.at_end(beside.stop)
    atexit.register(beside.stop)


def status_door(status: dict[str, Any], root: str) -> int | None:
    """``status --publish`` and ``--npd`` (the request :func:`status_options` left in the
    command's context) with the report's JSON object: publish it once (a failure: one line on
    stderr, :data:`PUBLISH_FAILED_EXIT`), then the ``--npd`` answer (printed; the process exits
    with its code). None: nothing changes the exit."""
    req = click.get_current_context().meta.get(_META)
    if not isinstance(req, KubeRequest):
        return None
    code: int | None = None
    if req.publish:
        from nvfabric.publish.api import PublishError
        from nvfabric.publish.beside import once
        from nvfabric.publish.node import Options
        from nvfabric.publish.view import view_of

        target = _target(req, _node(req, root, status), strict=True)
        try:
            once(target, Options(req.gpu_clique, req.taint, req.heartbeat_s), view_of(status))
        except PublishError as err:
            sys.stderr.write(f"nvfabric: kube publish: {err.message}\n")
            code = PUBLISH_FAILED_EXIT
    if req.npd is not None:
        from nvfabric.publish.view import view_of
        from nvfabric.rules.cluster import npd_answer

        answer, line = npd_answer(view_of(status), req.npd)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        sys.exit(code or answer)
    return code

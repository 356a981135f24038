"""The options that tell the cluster, shared by ``nvfabric run`` and ``nvfabric status`` (no
command of their own): ``--publish`` (node conditions, events, labels and the opt-in taint,
:mod:`nvfabric.app.kube`; ``status --publish``: exit 4 when it failed, the report still
printed), ``--kubeconfig``, ``--node-name``, ``--label-gpu-clique``, ``--taint-unhealthy``,
``--heartbeat-period``; and ``status --npd``, ``--npd-condition`` (node-problem-detector's
custom plugin protocol).

:func:`options` bundles them into one keyword argument of the command, ``kube`` (a
:class:`nvfabric.app.kube.KubeRequest`, None without ``--publish`` and ``--npd``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from nvfabric.app.kube import KubeRequest, checked_node_name
from nvfabric.cli.render import Seconds
from nvfabric.model.errors import usage_error
from nvfabric.rules.cluster import CONDITION_TYPES, UNHEALTHY

F = TypeVar("F", bound=Callable[..., Any])

#: The options that apply only with ``--publish`` (click's parameter names).
_WITH_PUBLISH = ("kubeconfig", "node_name", "label_gpu_clique", "taint_unhealthy",
                 "heartbeat_period")


def options(fn: F, *, npd: bool = False) -> F:
    """The click options (and ``--npd``, ``--npd-condition`` when ``npd``), passed to ``fn``
    as ``kube``, in the order ``--help`` shows them."""
    names = ("publish", *_WITH_PUBLISH, *(("npd", "npd_condition") if npd else ()))

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        kw["kube"] = request({name: kw.pop(name, None) for name in names})
        return fn(*args, **kw)

    if npd:
        wrapper = click.option(
            "--npd-condition", type=click.Choice(CONDITION_TYPES), default=None,
            help=f"With --npd: the condition answered for [default: {UNHEALTHY}].")(wrapper)
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
    ``--publish``, ``--npd-condition`` without ``--npd``, or a node name (``--node-name``,
    else ``$NODE_NAME``) that is no Node name."""
    publish = bool(got.get("publish"))
    npd = got.get("npd_condition") or (UNHEALTHY if got.get("npd") else None)
    if got.get("npd_condition") and not got.get("npd"):
        raise usage_error("--npd-condition needs --npd", "add --npd")
    if not publish:
        given = [f"--{n.replace('_', '-')}" for n in _WITH_PUBLISH if got.get(n)]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise usage_error(f"{', '.join(given)} only {verb} with --publish",
                              "add --publish, or leave them out")
        return KubeRequest(False, npd=npd) if npd else None
    given_name = got.get("node_name")
    name = given_name if given_name is not None else os.environ.get("NODE_NAME") or None
    if name is not None:
        name = checked_node_name(name, "--node-name" if given_name is not None else "NODE_NAME")
    period = got.get("heartbeat_period")
    return KubeRequest(True, got.get("kubeconfig"), name, bool(got.get("label_gpu_clique")),
                       bool(got.get("taint_unhealthy")), 300.0 if period is None else period,
                       npd)

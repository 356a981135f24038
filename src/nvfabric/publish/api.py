"""The Kubernetes API as publishing uses it: five calls on one Node and its Events, through
lightkube (typed models on httpx), and every failure as one :class:`PublishError` with a kind.

Where the API server is: ``--kubeconfig FILE`` (its current context; at most
:data:`KUBECONFIG_MAX` bytes), else in-cluster (``KUBERNETES_SERVICE_HOST``/``_PORT`` and the
service account directory the kubelet mounts). The service account token is re-read when its
file changes (the kubelet rotates a projected token by replacing the file) and, by lightkube,
after a 401. Every request has a :data:`TIMEOUT_S` bound: a slow server is a failure to retry,
never a hang. lightkube (and its httpx: some 0.6 s of imports on a test machine) is imported
when a configuration is first loaded: a run that does not publish never imports it.

Errors (``PublishError.kind``, also the ``result`` label of ``nvfabric_kube_publish_total``)::

    unreachable  connect, TLS or timeout failure, or a 5xx: retried with back-off
    forbidden    403: RBAC lacks ``permission`` (verb and resource), one clear line
    unauthorized 401: the credentials are not accepted (a token that expired and no new one)
    conflict     409: the object changed since it was read (resourceVersion): read again
    not_found    404: no Node of that name (or an Event that expired)
    invalid      422 or another 4xx: the request was refused as written (a bug of ours)
    config       the kubeconfig or the service account directory cannot be used
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from nvfabric.facts.textfile import read_capped
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding
from nvfabric.model.strict import decode_text, load_yaml

if TYPE_CHECKING:
    from lightkube import ApiError, Client, KubeConfig
    from lightkube.resources.core_v1 import Event, Node

ErrorKind = Literal["unreachable", "forbidden", "unauthorized", "conflict", "not_found",
                    "invalid", "config"]
#: Every ``result`` of ``nvfabric_kube_publish_total`` (``ok`` and the error kinds).
RESULTS: tuple[str, ...] = ("ok", "unreachable", "forbidden", "unauthorized", "conflict",
                            "not_found", "invalid", "config")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Seconds one request may take (connect, send, wait, read).
TIMEOUT_S = 5.0
#: The largest kubeconfig read (kubeadm's admin.conf with embedded certificates: ~6 KB).
KUBECONFIG_MAX = 1 << 20
#: The field manager and Event source nvfabric writes as.
COMPONENT = "nvfabric"
#: The namespace of the Events of a cluster-scoped object (client-go's recorder puts them in
#: ``default``, as ``kubectl describe node`` shows them).
EVENT_NAMESPACE = "default"

T = TypeVar("T")

_HINTS: dict[ErrorKind, str] = {
    "unreachable": "nvfabric retries with back-off; check the API server and the network "
                   "path to it (NetworkPolicy nvfabric-allow-apiserver)",
    "forbidden": "bind the ClusterRole of deploy/kubernetes/base/rbac.yaml to this identity",
    "unauthorized": "the token or certificate is not accepted: a new service account token, "
                    "or a kubeconfig with valid credentials",
    "conflict": "another writer changed the Node each time; nvfabric reads it again and "
                "retries",
    "not_found": "create or register the Node first, or give --node-name as `kubectl get "
                 "nodes` shows it",
    "invalid": "this is a bug in nvfabric: report it with the line above",
    "config": "give --kubeconfig FILE, or run in a pod whose service account token is mounted",
}


class PublishError(NvfabricError):
    """A failed API call: ``kind`` (module docstring), a one-line ``message``, the
    ``permission`` a 403 names (``patch nodes/status``); its finding ``kube_publish_failed``
    (exit 1; a ``config`` error is bad input, exit 2)."""

    def __init__(self, kind: ErrorKind, message: str, permission: str | None = None) -> None:
        super().__init__(Finding("kube_publish_failed", "error", message, _HINTS[kind],
                                 {"kind": kind, "permission": permission}),
                         2 if kind == "config" else 1)
        self.kind: ErrorKind = kind
        self.message = message
        self.permission = permission


@dataclass(frozen=True)
class Target:
    """Where to publish: ``kubeconfig`` a file (None: in-cluster) and the Node's name."""

    node: str
    kubeconfig: str | None = None
    service_account_dir: str = SERVICE_ACCOUNT_DIR


def load_config(target: Target) -> KubeConfig:
    """The client configuration of ``target``; PublishError ``config`` naming what is wrong
    (a kubeconfig that is unreadable, too large, not YAML or without a context; in-cluster
    without ``KUBERNETES_SERVICE_HOST`` or the service account files)."""
    from lightkube import ConfigError, KubeConfig  # the client: only when publishing

    try:
        if target.kubeconfig is not None:
            data = load_yaml(decode_text(read_capped(target.kubeconfig, KUBECONFIG_MAX,
                                                     "a kubeconfig"), target.kubeconfig),
                             target.kubeconfig)
            if not isinstance(data, dict):
                raise PublishError("config", f"{target.kubeconfig}: not a kubeconfig (YAML "
                                   "with clusters, users and contexts)")
            return KubeConfig.from_dict(data, fname=target.kubeconfig)
        if not os.environ.get("KUBERNETES_SERVICE_HOST") \
                or not os.environ.get("KUBERNETES_SERVICE_PORT"):
            raise PublishError("config", "not in a cluster (KUBERNETES_SERVICE_HOST and "
                               "KUBERNETES_SERVICE_PORT unset) and no --kubeconfig given")
        return KubeConfig.from_service_account(target.service_account_dir)
    except PublishError:
        raise
    except NvfabricError as err:  # unreadable, too large, a directory, not YAML
        raise PublishError("config", " ".join(err.finding.message.split())) from None
    except (ConfigError, OSError, ValueError, KeyError, TypeError) as err:
        where = target.kubeconfig or target.service_account_dir
        raise PublishError("config", f"{where}: cannot be used to reach the API server: "
                           f"{' '.join(str(err).split()) or type(err).__name__}") from None


def _token_stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Api:
    """The calls publishing makes, on one API server. Not thread-safe: one publisher each."""

    def __init__(self, target: Target, timeout_s: float = TIMEOUT_S) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._token = None if target.kubeconfig is not None else os.path.join(
            target.service_account_dir, "token")
        self._stamp = _token_stamp(self._token) if self._token else None
        self._client = self._connect()

    def _connect(self) -> Client:
        import httpx
        from lightkube import Client

        return Client(config=load_config(self.target), timeout=httpx.Timeout(self.timeout_s),
                      field_manager=COMPONENT, trust_env=False)

    def _fresh(self) -> Client:
        """The client, made again when the service account token file changed."""
        if self._token is not None:
            stamp = _token_stamp(self._token)
            if stamp != self._stamp:
                self._stamp = stamp
                self._client.close()
                self._client = self._connect()
        return self._client

    def close(self) -> None:
        self._client.close()

    def _call(self, permission: str, call: Callable[[Client], T]) -> T:
        import httpx
        from lightkube import ApiError, ConfigError

        try:
            return call(self._fresh())
        except ApiError as err:
            raise _api_error(err, permission) from None
        except httpx.HTTPError as err:  # connect, TLS, timeouts, protocol
            raise PublishError("unreachable", f"API server unreachable ({permission}): "
                               f"{type(err).__name__}: {' '.join(str(err).split())}") from None
        except (ConfigError, OSError) as err:  # a token file gone, a CA file unreadable
            raise PublishError("config", f"{permission}: {' '.join(str(err).split())}") \
                from None

    def get_node(self, name: str) -> Node:
        from lightkube.resources.core_v1 import Node

        return self._call("get nodes", lambda c: c.get(Node, name))

    def patch_node_status(self, name: str, body: dict[str, Any]) -> Node:
        """A strategic merge patch of ``nodes/NAME/status`` (conditions merge by type)."""
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        return self._call("patch nodes/status", lambda c: c.patch(
            Node.Status, name, body, patch_type=PatchType.STRATEGIC))  # type: ignore[return-value]

    def patch_node(self, name: str, body: dict[str, Any]) -> Node:
        """A strategic merge patch of the Node (labels, annotations, ``spec.taints``, the last
        replaced whole: taints have no merge key); with ``metadata.resourceVersion`` in the
        body the server refuses it with 409 when the Node changed since that version."""
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        return self._call("patch nodes", lambda c: c.patch(
            Node, name, body, patch_type=PatchType.STRATEGIC))

    def create_event(self, body: dict[str, Any]) -> Event:
        from lightkube.resources.core_v1 import Event

        event: Event = Event.from_dict(body)  # type: ignore[no-untyped-call]
        return self._call("create events", lambda c: c.create(event, namespace=EVENT_NAMESPACE))

    def patch_event(self, name: str, body: dict[str, Any]) -> Event:
        from lightkube.resources.core_v1 import Event
        from lightkube.types import PatchType

        return self._call("patch events", lambda c: c.patch(
            Event, name, body, namespace=EVENT_NAMESPACE, patch_type=PatchType.MERGE))


def _api_error(err: ApiError, permission: str) -> PublishError:
    """A PublishError of an API answer: the kind by status code, the server's one line."""
    code = err.status.code or err.response.status_code
    text = " ".join(str(err.status.message or err).split())
    if code == 403:
        return PublishError("forbidden", f"forbidden: the identity may not {permission}: "
                            f"{text}", permission)
    if code == 401:
        return PublishError("unauthorized", f"unauthorized ({permission}): the API server "
                            f"does not accept the credentials: {text}")
    if code == 409:
        return PublishError("conflict", f"conflict ({permission}): {text}")
    if code == 404:
        return PublishError("not_found", f"not found ({permission}): {text}")
    if code >= 500 or code == 429:
        return PublishError("unreachable", f"API server error {code} ({permission}): {text}")
    return PublishError("invalid", f"refused with {code} ({permission}): {text}")

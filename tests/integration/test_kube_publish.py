"""Publishing against a real kube-apiserver (v1.20.2 + etcd, TLS, RBAC; tests/integration/
kubekit.py): ``nvfabric run --publish`` on a simulated DGX B200 whose NVLSM is killed (the
condition, its reason, the Event, the opt-in taint, all as the server stores them, and their
recovery), ``status --publish`` on a simulated GB200 tray (labels mnnvl, owner, clique),
the shipped ClusterRole as the only grant of a restricted identity, other parties' taints and
labels kept, and the faults: 403, 409 under a concurrent writer, the server stopped mid-run,
a rotated service account token, Events that repeat counted, not multiplied."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvfabric.model.findings import Finding
from nvfabric.publish.api import Api, PublishError, Target
from nvfabric.publish.node import NodePublisher, Options
from nvfabric.rules.cluster import FabricView
from tests.conftest import run_cli
from tests.httpkit import free_port, get
from tests.integration.kubekit import REPO, ApiServer, build, condition, wait_node
from tests.runkit import Run, events, poll, sim

OTHER_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoExecute"}
OTHER_LABEL = {"example.com/rack": "r12"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    build()
    server = ApiServer(tmp_path_factory.mktemp("apiserver")).start()
    try:
        yield server
    finally:
        server.stop()


def _taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in t.items() if k != "timeAdded"}
            for t in node["spec"].get("taints") or []]


def _status(node: dict[str, Any], kind: str = "NVLinkFabricUnhealthy") -> tuple[str, str] | None:
    c = condition(node, kind)
    return None if c is None else (c["status"], c["reason"])


def _publish_run(root: Path, api: ApiServer, node: str, *more: str) -> tuple[str, ...]:
    return ("--restart", "on-failure", "--gpu-reset-command", f"{root}/bin/nvidia-smi -r",
            "--publish", "--kubeconfig", str(api.admin_kubeconfig), "--node-name", node,
            "--health-interval", "2", *more)


def test_b200_nvlsm_killed_turns_unhealthy_with_its_reason_event_and_taint_then_recovers(
        tmp_path: Path, api: ApiServer, start: Callable[..., Run]) -> None:
    name = "dgx-b200-1"
    api.create_node(name, OTHER_LABEL, [OTHER_TAINT])
    root = sim(tmp_path, "dgx-b200")
    port = free_port()
    run = start(root, *_publish_run(root, api, name, "--taint-unhealthy", "--heartbeat-period",
                                    "1", "--listen", f"127.0.0.1:{port}"))
    run.wait_line(r"fabric ready in")
    healthy = wait_node(api, name, lambda n: _status(n) == ("False", "FabricHealthy"),
                        "published healthy")
    assert healthy["metadata"]["labels"]["nvfabric.io/fabric"] == "nvlink5"
    assert _status(healthy, "NVLinkFabricDegraded") == ("False", "FabricHealthy")
    since = condition(healthy, "NVLinkFabricUnhealthy")["lastTransitionTime"]  # type: ignore[index]
    # heartbeats move lastHeartbeatTime only
    beat = wait_node(api, name, lambda n: condition(n, "NVLinkFabricUnhealthy")[  # type: ignore[index]
        "lastHeartbeatTime"] > since, "a heartbeat later")
    assert condition(beat, "NVLinkFabricUnhealthy")["lastTransitionTime"] == since  # type: ignore[index]

    pid = int(events(root, "nvlsm", "exec")[-1]["pid"])
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    bad = wait_node(api, name, lambda n: _status(n) == ("True", "NvlsmMissing"),
                    "unhealthy with reason NvlsmMissing")
    took = time.monotonic() - killed
    bad = wait_node(api, name, lambda n: "nvfabric.io/fabric-unhealthy" in {
        t["key"] for t in _taints(n)} or _status(n) != ("True", "NvlsmMissing"),
        "tainted (the next write)")
    message = condition(bad, "NVLinkFabricUnhealthy")["message"]  # type: ignore[index]
    assert f"nvlsm (pid {pid}) killed by SIGKILL" in message and "(hint: " in message
    assert {"key": "nvfabric.io/fabric-unhealthy", "value": "NvlsmMissing",
            "effect": "NoSchedule"} in _taints(bad)
    assert OTHER_TAINT in _taints(bad) and bad["metadata"]["labels"]["example.com/rack"] == "r12"
    reasons = {e["reason"]: e for e in api.events(name)}
    assert reasons["NvlsmMissing"]["type"] == "Warning"
    assert f"nvlsm (pid {pid})" in reasons["NvlsmMissing"]["message"]
    assert reasons["FabricUnhealthy"]["message"].startswith(
        "NVLink fabric verdict healthy -> unhealthy")
    assert reasons["NvlsmMissing"]["source"]["component"] == "nvfabric"
    print(f"NVLSM killed -> stored NVLinkFabricUnhealthy=True in {took:.2f} s")

    # the unit restarts (GPU reset, NVLSM, fabric manager): the taint goes, theirs stays
    back = wait_node(api, name, lambda n: _status(n) == ("False", "FabricHealthy")
                     and not any(t["key"] == "nvfabric.io/fabric-unhealthy"
                                 for t in _taints(n)), "recovered", bound=60)
    assert OTHER_TAINT in _taints(back)
    assert {e["reason"] for e in api.events(name)} >= {"FabricHealthy", "FabricUnhealthy"}
    status = json.loads(get(port, "/status")[2])
    assert status["kube_publish"]["node"] == name and status["kube_publish"]["last_success"]
    metrics = get(port, "/metrics")[2]
    assert 'nvfabric_kube_publish_total{result="ok"}' in metrics
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    # the orderly stop is said: nothing watches the fabric any more
    wait_node(api, name, lambda n: _status(n) == ("Unknown", "NvfabricStopped"), "stopped")


def _dra_tray(tmp_path: Path, name: str) -> Path:
    root = sim(tmp_path, "gb200-tray", name=name)
    (root / "var/lib/kubelet/plugins/compute-domain.nvidia.com").mkdir(parents=True)
    return root


def test_gb200_tray_labels_say_mnnvl_the_owner_and_the_clique(
        tmp_path: Path, api: ApiServer) -> None:
    root = _dra_tray(tmp_path, "tray")
    status = json.loads(run_cli("status", "--root", str(root), "--json").stdout)
    value = {f"{g['cluster_uuid']}.{g['clique_id']}" for g in status["gpus"]}
    (clique,) = value
    api.create_node("gb200-tray-1", OTHER_LABEL)
    out = run_cli("status", "--root", str(root), "--publish", "--label-gpu-clique",
                  "--kubeconfig", str(api.admin_kubeconfig), "--node-name", "gb200-tray-1")
    assert out.returncode == 0, out.stderr
    labels = api.node("gb200-tray-1")["metadata"]["labels"]
    assert labels == {**OTHER_LABEL, "nvfabric.io/fabric": "mnnvl",
                      "nvfabric.io/imex-owner": "dra", "nvfabric.io/clique": clique,
                      "nvidia.com/gpu.clique": clique}
    # where GPU feature discovery wrote the label first, its value stays
    api.create_node("gb200-tray-2", {"nvidia.com/gpu.clique": "gfd-wrote-this"})
    out = run_cli("status", "--root", str(root), "--publish", "--label-gpu-clique",
                  "--kubeconfig", str(api.admin_kubeconfig), "--node-name", "gb200-tray-2")
    assert out.returncode == 0, out.stderr
    labels = api.node("gb200-tray-2")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.clique"] == "gfd-wrote-this"
    assert labels["nvfabric.io/clique"] == clique


def test_status_publish_twice_counts_one_event_instead_of_two(
        tmp_path: Path, api: ApiServer) -> None:
    root = sim(tmp_path, "dgx-b200")  # services never started: registration_stuck
    api.create_node("b200-cron")
    for _ in range(2):
        out = run_cli("status", "--root", str(root), "--publish", "--kubeconfig",
                      str(api.admin_kubeconfig), "--node-name", "b200-cron")
        assert out.returncode == 1, out.stderr  # the verdict's exit, published
    node = api.node("b200-cron")
    assert _status(node) == ("True", "RegistrationStuck")
    stuck = [e for e in api.events("b200-cron") if e["reason"] == "RegistrationStuck"]
    assert len(stuck) == 1 and stuck[0]["count"] == 2
    assert node["metadata"]["annotations"]["nvfabric.io/verdict"] == "unhealthy"


def _shipped_role(api: ApiServer, user: str, name: str) -> None:
    """deploy/kubernetes/base/rbac.yaml's ClusterRole, bound to ``user`` only."""
    role = next(d for d in yaml.safe_load_all(
        (REPO / "deploy/kubernetes/base/rbac.yaml").read_text()) if d["kind"] == "ClusterRole")
    role["metadata"]["name"] = name
    api.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
    api.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    api.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}")
    api.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]})


def test_the_shipped_clusterrole_lets_an_identity_publish_and_nothing_else(
        tmp_path: Path, api: ApiServer) -> None:
    token = api.env["REPORTER_TOKEN"]
    root = sim(tmp_path, "dgx-b200")
    api.create_node("rbac-node", OTHER_LABEL, [OTHER_TAINT])
    # unbound: refused with one line naming the permission, the verdict still printed
    out = run_cli("status", "--root", str(root), "--publish", "--taint-unhealthy",
                  "--kubeconfig", str(api.reporter_kubeconfig), "--node-name", "rbac-node")
    assert out.returncode == 4, out.stderr
    (line,) = [x for x in out.stderr.splitlines() if "kube publish" in x]
    assert "forbidden: the identity may not get nodes" in line and "node-reporter" in line
    _shipped_role(api, api.env["REPORTER_USER"], "nvfabric-publisher-test")
    out = poll(lambda: run_cli("status", "--root", str(root), "--publish", "--taint-unhealthy",
                               "--kubeconfig", str(api.reporter_kubeconfig), "--node-name",
                               "rbac-node"), lambda o: o.returncode == 1,
               "published once RBAC took the binding", every=0.5)
    node = api.node("rbac-node")
    assert _status(node) == ("True", "RegistrationStuck")
    assert OTHER_TAINT in _taints(node) and "nvfabric.io/fabric-unhealthy" in {
        t["key"] for t in _taints(node)}
    assert node["metadata"]["labels"]["example.com/rack"] == "r12"
    # and nothing else: each refused with 403
    event = api.events("rbac-node")[0]["metadata"]["name"]
    for method, path, body in (
            ("GET", "/api/v1/nodes", None),
            ("DELETE", "/api/v1/nodes/rbac-node", None),
            ("POST", "/api/v1/nodes", {"metadata": {"name": "x"}}),
            ("PUT", "/api/v1/nodes/rbac-node", node),
            ("GET", "/api/v1/namespaces/default/events", None),
            ("DELETE", f"/api/v1/namespaces/default/events/{event}", None),
            ("GET", "/api/v1/namespaces/kube-system/secrets", None),
            ("GET", "/api/v1/namespaces/default/pods", None)):
        got = api.request(method, path, body, token=token).status_code
        assert got == 403, (method, path, got)


class _Racing(Api):
    """An Api whose first Node patch is preceded by another party's change (a taint added by
    read-modify-write, as kubectl taint does): the patch carries a stale resourceVersion."""

    def __init__(self, target: Target, server: ApiServer) -> None:
        super().__init__(target)
        self.server = server
        self.raced = 0

    def patch_node(self, name: str, body: dict[str, Any]) -> Any:
        if not self.raced:
            self.raced += 1
            node = self.server.node(name)
            taints = [*(node["spec"].get("taints") or []),
                      {"key": "example.com/raced", "effect": "NoSchedule"}]
            self.server.ok("PATCH", f"/api/v1/nodes/{name}", {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": taints}}, content_type="application/strategic-merge-patch+json")
        return super().patch_node(name, body)


def test_a_concurrent_writer_makes_a_409_which_is_read_again_and_loses_no_taint(
        api: ApiServer) -> None:
    api.create_node("race-node", taints=[OTHER_TAINT])
    target = Target("race-node", str(api.admin_kubeconfig))
    racing = _Racing(target, api)
    bad = FabricView("unhealthy", (Finding("partial_registration", "error", "GPU 3 is off"),),
                     "nvlink5")
    calls = NodePublisher(racing, "race-node", Options(taint=True)).publish(bad)
    assert racing.raced == 1 and calls >= 4  # read, status, refused patch, read, patch, event
    keys = [t["key"] for t in _taints(api.node("race-node"))]
    assert {"example.com/maintenance", "example.com/raced",
            "nvfabric.io/fabric-unhealthy"} <= set(keys)
    # a stale resourceVersion is refused by the server itself: what the retry relies on
    with pytest.raises(PublishError) as err:
        Api(target).patch_node("race-node", {"metadata": {"resourceVersion": "1"},
                                             "spec": {"taints": []}})
    assert err.value.kind == "conflict"
    assert len(_taints(api.node("race-node"))) == len(keys)


def test_run_survives_a_403_then_publishes_once_granted(
        tmp_path: Path, api: ApiServer, start: Callable[..., Run]) -> None:
    name = "grant-later"
    api.create_node(name)
    root = sim(tmp_path, "dgx-b200")
    nobody = tmp_path / "nobody.kubeconfig"
    kc = yaml.safe_load(api.reporter_kubeconfig.read_text())
    kc["users"][0]["user"] = {"token": api.env["NOBODY_TOKEN"]}
    nobody.write_text(yaml.safe_dump(kc))
    args = list(_publish_run(root, api, name))
    args[args.index("--kubeconfig") + 1] = str(nobody)
    run = start(root, *args)
    run.wait_line(r"fabric ready in")
    line = run.wait_line(r"kube publish: forbidden")
    assert "may not get nodes" in line and "nobody" in line and "ClusterRole" in line
    _shipped_role(api, api.env["NOBODY_USER"], "nvfabric-publisher-later")
    wait_node(api, name, lambda n: _status(n) == ("False", "FabricHealthy"),
              "published after the grant", bound=60)
    assert len([x for x in run.log.splitlines() if "kube publish: forbidden" in x]) == 1
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_the_api_server_stopped_mid_run_stops_nothing_and_the_newest_state_wins(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    build()
    own = ApiServer(tmp_path / "apiserver").start()
    try:
        own.create_node("outage")
        root = sim(tmp_path, "dgx-b200")
        port = free_port()
        run = start(root, *_publish_run(root, own, "outage", "--taint-unhealthy", "--listen",
                                        f"127.0.0.1:{port}"))
        run.wait_line(r"fabric ready in")
        wait_node(own, "outage", lambda n: _status(n) == ("False", "FabricHealthy"), "healthy")
        own.stop()
        # the fabric changes while nobody listens: NVLSM dies, the unit restarts
        pid = int(events(root, "nvlsm", "exec")[-1]["pid"])
        os.kill(pid, signal.SIGKILL)
        run.wait_line(r"kube publish: API server unreachable")
        run.wait_count(r"fabric ready in", 2, bound=60)
        assert run.proc.poll() is None  # supervision went on
        metrics = poll(lambda: get(port, "/metrics")[2],
                       lambda m: 'nvfabric_kube_publish_total{result="unreachable"} 0' not in m,
                       "an unreachable publish counted")
        assert 'result="unreachable"' in metrics
        own.start()
        # the newest state (healthy again), not the crash in between, once it is back
        node = wait_node(own, "outage", lambda n: condition(n, "NVLinkFabricUnhealthy")[  # type: ignore[index]
            "lastHeartbeatTime"] and "published again" in run.log, "published again", bound=90)
        assert _status(node) == ("False", "FabricHealthy")
        assert not any(t["key"] == "nvfabric.io/fabric-unhealthy" for t in _taints(node))
        run.signal(signal.SIGTERM)
        assert run.wait() == 0
    finally:
        own.stop()


def _token(api: ApiServer, secret: str) -> str:
    """A service account token bound to Secret ``secret`` (TokenRequest): deleting the Secret
    revokes it, as the kubelet's rotation retires an old token."""
    ns = "kube-system"
    api.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                {"metadata": {"name": "nvfabric-rot"}})
    made = api.ok("POST", f"/api/v1/namespaces/{ns}/secrets", {
        "metadata": {"name": secret}, "type": "Opaque"})
    req = api.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/nvfabric-rot/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [api.env["API_AUDIENCE"]], "expirationSeconds": 3600,
                 "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": secret,
                                    "uid": made["metadata"]["uid"]}}})
    return str(req["status"]["token"])


def test_in_cluster_token_rotated_is_read_again(
        tmp_path: Path, api: ApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    api.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": f"rot-{time.monotonic_ns()}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "nvfabric-rot",
                      "namespace": "kube-system"}]})
    first = _token(api, f"rot-a-{os.getpid()}")
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "ca.crt").write_bytes(Path(api.env["CA_FILE"]).read_bytes())
    (sa / "namespace").write_text("kube-system")
    (sa / "token").write_text(first)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
    api.create_node("in-cluster")
    rot = Api(Target("in-cluster", None, str(sa)))
    assert rot.get_node("in-cluster").metadata.name == "in-cluster"  # type: ignore[union-attr]
    # the kubelet writes a new token (a new file, renamed in) and the old one is retired
    second = _token(api, f"rot-b-{os.getpid()}")
    (sa / "token.new").write_text(second)
    os.replace(sa / "token.new", sa / "token")
    api.ok("DELETE", f"/api/v1/namespaces/kube-system/secrets/rot-a-{os.getpid()}")
    poll(lambda: api.request("GET", "/api/v1/nodes/in-cluster", token=first).status_code,
         lambda code: code == 401, "the first token revoked")
    assert rot.get_node("in-cluster").metadata.name == "in-cluster"  # type: ignore[union-attr]

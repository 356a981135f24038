"""The Kubernetes overlays select nodes by gpu-feature-discovery's ``nvidia.com/gpu.product``
label: NVML's product name with spaces as ``-`` (NVML names data-centre GPUs ``NVIDIA <name>``
since R470, ``Tesla <name>`` before: ``Tesla V100-SXM3-32GB``). Each overlay must list exactly
the GPUs of its fabric kind in nvfabric's own product table (src/nvfabric/rules/products.py,
matched by PCI ID), so that no such node is left without the pod and no other node gets it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nvfabric.rules.products import PRODUCTS

REPO = Path(__file__).resolve().parents[1]
#: product table role -> the overlay that brings up that fabric kind
OVERLAY_OF_ROLE = {"nvswitch_gpu": "nvswitch", "nvlink5_gpu": "nvlink5", "mnnvl_gpu": "mnnvl-dra"}


def gfd_label(name: str) -> str:
    """The ``nvidia.com/gpu.product`` value of an NVML product name of the table."""
    full = name if name.startswith("Tesla ") else f"NVIDIA {name}"
    return full.replace(" ", "-")


def overlay_products(overlay: str) -> set[str]:
    doc = yaml.safe_load(
        (REPO / "deploy/kubernetes/overlays" / overlay / "daemonset.yaml").read_text())
    terms = doc["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    values: set[str] = set()
    for term in terms:
        for expr in term["matchExpressions"]:
            assert expr["key"] == "nvidia.com/gpu.product" and expr["operator"] == "In"
            values.update(expr["values"])
    return values


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

"""The readiness probe of fabric manager (RUN.md R01, R04): every GPU's fabric state read and
summarised as a :class:`~nvfabric.supervisor.policy.GpuCheck`. Used by ``nvfabric run``'s
preflight (GPUs registered before the start) and by the supervisor (ready once all are
completed; R09's check after a GPU reset)."""

from __future__ import annotations

from nvfabric.supervisor.policy import GpuCheck


def gpu_check(root: str) -> GpuCheck:
    """Read the GPUs' fabric state (:func:`nvfabric.facts.node.gpus`: NVML on the node itself,
    the node's nvidia-smi on a simulated root) and summarise it for readiness
    (:func:`nvfabric.rules.preflight.summarise_gpus`, the rule the preflight uses too)."""
    from nvfabric.facts.node import gpus
    from nvfabric.rules.preflight import summarise_gpus

    return summarise_gpus(gpus(root))

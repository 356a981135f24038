"""The readiness probe of fabric manager (RUN.md R01, R04): every GPU's fabric state read and
summarised as a :class:`~nvfabric.supervisor.policy.GpuCheck`. Used by ``nvfabric run``'s
preflight (GPUs registered before the start) and by the supervisor (ready once all are
completed; R09's check after a GPU reset)."""

from __future__ import annotations

from collections import Counter

from nvfabric.model.findings import Finding
from nvfabric.model.words import plural
from nvfabric.supervisor.policy import GpuCheck


def gpu_check(root: str) -> GpuCheck:
    """Read the GPUs' fabric state through the health module (NVML on a real host, the node's
    nvidia-smi on a simulated root) and summarise it for readiness."""
    from nvfabric.facts import gpu as live

    gpus = live.read(root)
    if not gpus:
        return GpuCheck(False, False, "no GPU fabric state", "no GPU fabric state could be read")
    counts = Counter(str(g.state) for g in gpus)
    summary = f"{plural(len(gpus), 'GPU')}: " + ", ".join(
        f"{k} x{v}" for k, v in sorted(counts.items()))
    supported = [g for g in gpus if g.state != "not_supported"]
    if not supported:
        return GpuCheck(False, False, summary, supported=False)
    done = [g for g in supported if g.state == "completed"]
    bad = [g for g in done if (g.status or "").lower() not in ("success", "")]
    findings: tuple[Finding, ...] = ()
    if bad:
        findings = (Finding(
            "registration_error", "warning",
            f"{plural(len(bad), 'GPU')} completed fabric registration with an error status: "
            + "; ".join(f"{g.label}: {g.status}" for g in bad),
            "run `nvfabric status` for the per-GPU verdict", {"count": len(bad)}),)
    return GpuCheck(len(done) == len(supported), bool(done), summary, findings=findings,
                    progress=(len(done), len(supported)),
                    registered_gpus=tuple(g.label for g in done))

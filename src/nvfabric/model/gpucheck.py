"""The answer of one readiness probe: :class:`GpuCheck`, what the supervisor waits on before
it calls fabric manager (or IMEX) ready. Its own module so that the lean supervisor process
holds this value without the health readings' tables (:mod:`nvfabric.model.health`, where
:func:`~nvfabric.model.health.summarise_gpus` makes it from a reading)."""

from __future__ import annotations

from dataclasses import dataclass

from nvfabric.model.findings import Finding


@dataclass(frozen=True)
class GpuCheck:
    """One readiness probe of the GPUs' fabric state
    (:func:`nvfabric.model.health.summarise_gpus`; the IMEX probe answers with it too:
    ``ready`` is IMEX READY there).

    ``ready``: every GPU's state is completed; ``registered``: at least one GPU is completed
    (what makes a fabric manager restart need a GPU reset, R04); ``summary``: one line for the
    log (``8 GPUs: completed x8``); ``error``: why the state could not be read, if so;
    ``supported``: False when no GPU has a fabric state (NVML "not supported", e.g. A100), so
    that the service's success line is the readiness signal; ``findings``: problems seen in
    the state (a GPU completed with an error status), logged when the unit becomes ready;
    ``progress``: (completed, total) GPUs for systemd's ``STATUS=`` line, when counted.
    ``registered_gpus``: labels of the GPUs registered (completed), for R09's refusal.
    """

    ready: bool
    registered: bool
    summary: str
    error: str | None = None
    supported: bool = True
    findings: tuple[Finding, ...] = ()
    progress: tuple[int, int] | None = None  # (GPUs completed, GPUs with a fabric state)
    registered_gpus: tuple[str, ...] = ()

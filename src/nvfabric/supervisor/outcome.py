"""How a run ended (:class:`Outcome`) and the one JSON shape of ``nvfabric run --json``
(:func:`run_result`). Pure values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvfabric.bringup.spec import written_by_run
from nvfabric.model.findings import Finding

if TYPE_CHECKING:
    from nvfabric.bringup.spec import PlannedFile, ServiceSpec


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``exit_code`` (0 orderly stop, 1 failure), ``reason`` (``stopped``,
    ``failed``), the findings (the failure first), seconds to ready of the last start (rounded
    to milliseconds; None if never ready), restarts done."""

    exit_code: int
    reason: str
    findings: tuple[Finding, ...] = ()
    ready_after_s: float | None = None
    restarts: int = 0

    def to_json(self) -> dict[str, object]:
        """The outcome as JSON: result, exit_code, ready_after_s, restarts, findings."""
        return {
            "result": self.reason,
            "exit_code": self.exit_code,
            "ready_after_s": self.ready_after_s,
            "restarts": self.restarts,
            "findings": [f.to_json() for f in self.findings],
        }


#: ``result`` of ``nvfabric run --json``: how the run ended, or (``--dry-run``) would begin.
RUN_RESULTS = ("stopped", "failed", "nothing_to_do", "not_started", "blocked", "refused",
               "would_start")


def run_result(result: str, exit_code: int, fabric: str, findings: Sequence[Finding], *,
               dry_run: bool = False, processes: Sequence[ServiceSpec] = (),
               files: Sequence[PlannedFile] = (), ready_after_s: float | None = None,
               restarts: int = 0, reasons: Sequence[str] = (),
               vendor_files: Sequence[Mapping[str, str]] = ()) -> dict[str, object]:
    """The one JSON shape of ``nvfabric run`` for every outcome, with and without
    ``--dry-run`` (docs/commands/run.md): every key always present, lists empty and
    ``ready_after_s`` null where they do not apply. ``processes``/``files``: the unit's, in
    start order (what it starts and writes, or would), empty when no unit was built (blocked,
    nothing to do, another run holds the lock); each process's ``written_by_run``: the files
    of ``files`` its argv names (they exist only once the run wrote them:
    :func:`nvfabric.bringup.spec.written_by_run`). ``reasons``: the plan's. ``vendor_files``:
    which vendor file run uses and where it came from (``{"file", "path", "source"}``,
    :mod:`nvfabric.bringup.vendor`). ValueError for a ``result`` not in :data:`RUN_RESULTS`."""
    if result not in RUN_RESULTS:
        raise ValueError(f"unknown run result {result!r}")
    return {
        "result": result,
        "exit_code": exit_code,
        "dry_run": dry_run,
        "fabric": fabric,
        "processes": [{"service": s.name, "argv": list(s.argv),
                       "written_by_run": list(written_by_run(s.argv, files))}
                      for s in processes],
        "files": [{"path": f.path, "content": f.content} for f in files],
        "ready_after_s": ready_after_s,
        "restarts": restarts,
        "findings": [f.to_json() for f in findings],
        "reasons": list(reasons),
        "vendor_files": [dict(v) for v in vendor_files],
    }


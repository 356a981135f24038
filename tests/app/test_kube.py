"""What ``run --publish`` tells (nvfabric.app.kube): the watch's last reading with the kernel
log's live events on top, as ``/status`` serves it, so a fatal SXid seen by the kernel watch
turns the Node's condition at once, not at the next reading of the node."""

from __future__ import annotations

import json
from typing import Any

from nvfabric.app import kube
from nvfabric.model.findings import Finding
from nvfabric.observe.serve import Watch, _answer
from nvfabric.observe.unitstate import UnitSnapshot
from nvfabric.rules.cluster import conditions
from nvfabric.supervisor.kernelwatch import KernelEvents

SXID = Finding("nvswitch_fatal_error", "error",
               "NVSwitch fatal error (SXid) 24007 on NVSwitch 0000:05:00.0 (physical id 0)",
               "a fatal SXid needs a reset of the NVSwitches and GPUs",
               {"error": 24007, "pci": "0000:05:00.0"})


def _watch(status: dict[str, Any], kernel: KernelEvents | None) -> Watch:
    watch = Watch(lambda _imex: (None, status), 30.0)  # type: ignore[arg-type,return-value]
    watch.unit = lambda: UnitSnapshot(ready=True, phase="ready")
    watch.kernel = lambda: kernel
    watch.read_once()
    return watch


def test_a_fatal_kernel_event_is_told_as_served() -> None:
    # the last reading of a healthy DGX B200 (the shape of `status --json`)
    status = {"verdict": "healthy", "fabric": "nvlink5", "reasons": [], "findings": [],
              "gpus": []}
    live = KernelEvents("kmsg", "/dev/kmsg", lines=1, level="unhealthy", findings=(SXID,))
    for kernel, told in ((None, "healthy"), (live, "unhealthy")):
        watch = _watch(status, kernel)
        view = kube._source(watch)()
        assert view is not None and view.verdict == told
        served = json.loads(_answer(watch, "/status")[2])
        assert served["verdict"] == told
    unhealthy = {c.type: c for c in conditions(view)}["NVLinkFabricUnhealthy"]
    assert unhealthy.status == "True"

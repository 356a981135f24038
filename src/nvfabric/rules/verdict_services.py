"""The verdict's rules on the fabric services, per fabric kind (:mod:`nvfabric.rules.verdict`):
GPUs that report no fabric state (judged by fabric manager's liveness on NVSwitch nodes,
``fabric_info_not_supported`` where the platform always reports one), and once the GPUs are
fine, fabric manager and NVLSM (nvswitch, nvlink5) or the host's IMEX daemon (mnnvl, only
where the host owns IMEX). Pure.
"""

from __future__ import annotations

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FabricKind
from nvfabric.rules.verdict import (
    Inputs,
    Verdict,
    _Acc,
    _service,
)


def no_fabric_reported(inp: Inputs, acc: _Acc) -> Verdict:
    fabric = inp.fabric
    if fabric in (None, "none"):
        acc.reasons.append(
            "no GPU reports an NVLink fabric (state N/A / not supported) and this platform has "
            "none to manage: nothing to judge"
        )
        return acc.result("not_applicable")
    if fabric == "nvswitch":
        fm = _service(inp.services, "fabricmanager")
        acc.reasons.append(
            "these GPUs do not report fabric registration (before Hopper, or an old driver): "
            "judged by fabric manager's liveness"
        )
        if fm is None:
            acc.add("degraded", Finding(
                "fabric_info_not_supported", "warning",
                "the GPUs report no fabric state and fabric manager's liveness is unknown",
                "run `nvfabric status` on the node itself (it checks the fabric manager process)",
            ))
        elif not fm.running:
            acc.add("unhealthy", Finding(
                "fm_inactive", "error",
                "fabric manager is not running on an NVSwitch node whose GPUs do not report "
                "fabric registration: CUDA cannot use NVLink peer access",
                "start fabric manager (`nvfabric run`, or `systemctl start "
                "nvidia-fabricmanager`) at exactly the driver's version",
            ))
        return acc.result()
    acc.add("unhealthy", Finding(
        "fabric_info_not_supported", "error",
        f"every GPU reports fabric State 'Not Supported' on a {fabric} platform, which always "
        "reports one: the driver gives no fabric info, so nothing is registered",
        "the driver may be too old for this platform or not fully loaded: check the driver "
        "branch supports these GPUs' NVLink fabric, `nvidia-smi -q` (Fabric section) and "
        "`dmesg`; on a GB200/GB300 tray also that it is in an NVLink partition of the rack",
        {"fabric": fabric, "gpus": [g.index for g in inp.gpus]},
    ))
    return acc.result()


def services_when_fine(inp: Inputs, acc: _Acc, fabric: FabricKind | None) -> None:
    if inp.services is None:
        return
    if fabric == "mnnvl":
        imex_when_fine(inp, acc)
        return
    if fabric not in ("nvswitch", "nvlink5"):
        return
    fm = _service(inp.services, "fabricmanager")
    if fm is None or not fm.running:
        acc.add("degraded", Finding(
            "fm_inactive", "warning",
            "the GPUs are registered but fabric manager is not running",
            "fabric manager handles NVSwitch errors, GPU resets and NVLink recovery at run "
            "time: start it again (`nvfabric run`); a restart after GPUs registered needs a GPU "
            "reset on H100 and later",
        ))
    if fabric == "nvlink5":
        sm = _service(inp.services, "nvlsm")
        if sm is None or not sm.running:
            acc.add("degraded", Finding(
                "nvlsm_missing", "warning",
                "the GPUs are registered but NVLSM is not running on the management port",
                "NVLSM keeps the NVLink 5 routes; start it with fabric manager (`nvfabric run`)",
            ))


def imex_when_fine(inp: Inputs, acc: _Acc) -> None:
    """IMEX on an mnnvl tray: judged only where the host owns it (see the module docstring)."""
    imex = _service(inp.services, "imex")
    if imex is None or imex.running:
        return
    owner = inp.imex_owner
    if owner in ("host", "dra-host"):
        acc.add("degraded", Finding(
            "imex_not_ready", "warning",
            "the GPUs are registered but the host's IMEX daemon is not running: multi-node "
            "NVLink memory sharing (IMEX channels) does not work",
            "start it (`nvfabric run`, or `systemctl start nvidia-imex`); `nvfabric imex "
            "domain` then shows the domain state",
            {"imex_owner": owner},
        ))
    elif owner == "none":
        acc.add(None, Finding(
            "imex_not_ready", "info",
            "no IMEX daemon runs and nothing on this node owns IMEX (no enabled "
            "nvidia-imex.service, no DRA driver state, no Slurm prolog)",
            "single-node work is fine; for multi-node NVLink memory sharing start IMEX "
            "(`nvfabric run` becomes its owner) or let the DRA driver or Slurm run it",
            {"imex_owner": owner},
        ))
    elif owner == "unknown":
        acc.reasons.append(
            "who owns IMEX is not known (imex_owner_unknown): the daemon not running now is "
            "not judged")
    else:
        acc.reasons.append(
            f"IMEX is owned by {owner or 'an unknown owner'}, which starts the daemon per "
            "job: it not running now is not judged"
        )

"""What a kernel log finding seen live (while ``run`` supervises) does to the run's verdict,
and how it is shown on ``/status``. Pure: findings and words in, words out.

The findings are the diagnosis catalogue's (:mod:`nvfabric.rules.diagnose`, the same as
``doctor``'s for the same line); this module says which of them change the verdict of a running
node, by fabric kind (:data:`RULES`, each with its source):

- a fatal SXid (``nvswitch_fatal_error``) on a node with NVSwitches (``nvswitch``,
  ``nvlink5``): unhealthy; fabric manager's user guide asks for an NVSwitch and GPU reset;
- an NVLink Xid whose decoded immediate action is ``RESET_GPU`` (NVIDIA's "XID 144-150
  Decode" sheet, data/xid.yaml): unhealthy; an NVLink Xid the line calls fatal without such a
  decode (Xid 74, an unknown sub-code): degraded, the operator decides;
- the driver's IMEX notify failures (``imex_not_ready``, thousands a minute on a tray whose
  IMEX session nobody holds) on ``mnnvl``: degraded, counted once however many lines.

Link-training notices (``nvlink_training_warning``) in the first :data:`DEFAULT_BOOT_WINDOW_S`
seconds after the driver loaded are counted, not raised (:func:`debounced`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FABRIC_KINDS, FabricKind, FindingCode

Level = Literal["unhealthy", "degraded"]
#: The verdict words by weight (the order of :mod:`nvfabric.rules.verdict`).
RANK: dict[str, int] = {"not_applicable": 0, "healthy": 0, "pending": 1, "degraded": 2,
                        "unhealthy": 3}

#: Seconds after the NVIDIA driver loaded during which link-training notices are counted, not
#: raised. The default is NVSentinel's boot grace period (``--boot-grace-period``, 300 s:
#: NVIDIA/NVSentinel docs/designs/049-system-services-monitor-scope.md), whose NVLink
#: watch learnt the same lesson: links train after every boot and look down meanwhile
#: (github.com/NVIDIA/NVSentinel/issues/1701).
DEFAULT_BOOT_WINDOW_S = 300.0
#: Seconds within which the repeats of one (code, device) are one log line and one record of
#: the event history (``run --kernel-interval``).
DEFAULT_INTERVAL_S = 60.0
#: Kernel lines a second beyond which the rest of the second is skipped (``run
#: --kernel-max-lines``; a flood: printk's own rate limit lets through 10 lines per 5 s per
#: call site; a node writing more than this is stuck in a loop, and reading it all would cost
#: the supervisor a core).
DEFAULT_MAX_LINES_PER_S = 20_000
#: The codes the boot window holds back: link training (gpud
#: components/accelerator/nvidia/nvlink/kmsg.go, the driver's post-RxDetect link mask).
BOOT_NOTICES: frozenset[str] = frozenset({"nvlink_training_warning"})
#: The driver's load line (corpus logs/gpud-hgx-h100-550.90.07-dmesg-nvswitch-probe-excerpt.log:
#: ``NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07 ...``); the boot window starts
#: again there (a driver reloaded without a reboot).
DRIVER_LOAD = "NVRM: loading NVIDIA UNIX"

_NVSWITCH: frozenset[FabricKind] = frozenset({"nvswitch", "nvlink5"})
_ALL: frozenset[FabricKind] = frozenset(FABRIC_KINDS)


@dataclass(frozen=True)
class Rule:
    """One code that changes a running node's verdict: on ``fabrics``, to ``level``, when the
    finding's field ``field`` is one of ``values`` (None: always) and its severity one of
    ``severities``; ``source`` says why."""

    code: FindingCode
    fabrics: frozenset[FabricKind]
    level: Level
    source: str
    field: str | None = None
    values: frozenset[object] = frozenset()
    severities: frozenset[str] = frozenset({"info", "warning", "error"})

    def applies(self, f: Finding, fabric: FabricKind | None) -> bool:
        if f.code != self.code or (fabric or "unknown") not in self.fabrics or \
                f.severity not in self.severities:
            return False
        return self.field is None or f.fields.get(self.field) in self.values


RULES: tuple[Rule, ...] = (
    Rule("nvswitch_fatal_error", _NVSWITCH, "unhealthy",
         "NVIDIA Fabric Manager User Guide, NVSwitch SXid errors: a fatal SXid leaves the "
         "fabric needing an NVSwitch and GPU reset"),
    Rule("nvlink_xid_error", _ALL, "unhealthy",
         "NVIDIA Xid catalogue, XID 144-150 Decode: immediate action RESET_GPU",
         field="immediate_action", values=frozenset({"RESET_GPU"})),
    Rule("nvlink_xid_error", _ALL, "degraded",
         "a fatal NVLink Xid without a decoded action (Xid 74, an unknown sub-code): the GPU "
         "may need a reset; the catalogue's hint says how to tell",
         field="immediate_action", values=frozenset({None}), severities=frozenset({"error"})),
    Rule("imex_not_ready", frozenset({"mnnvl"}), "degraded",
         "open-gpu-kernel-modules compute/fabric.c _fabricNotifyEvent: a fabric event no IMEX "
         "daemon received (no IMEX session); counted once"),
)


#: What each recovery action asks of the operator, and the verdict while it is pending
#: (nvml.h nvmlDeviceGpuRecoveryAction_t, cuda-bindings DeviceGpuRecoveryAction; NVIDIA
#: "Error Recovery and Response Flags": Reset, Reboot, Drain P2P, Drain and Reset).
RECOVERY: dict[str, tuple[Level, str]] = {
    "gpu_reset": ("unhealthy", "terminate the GPU's processes and reset it (`nvidia-smi -r -i "
                               "<gpu>`); new processes may then use it"),
    "node_reboot": ("unhealthy", "reboot the node: the fault may have left the operating system "
                                 "inconsistent"),
    "drain_p2p": ("degraded", "end the processes that use peer-to-peer traffic and disable UVM "
                              "persistence mode; once drained NVML names the next action"),
    "drain_and_reset": ("unhealthy", "drain the GPU's peer-to-peer traffic (end those processes), "
                                     "then reset the GPU (`nvidia-smi -r -i <gpu>`)"),
    "recover_imex_domain": ("degraded", "recover the IMEX domain: restart IMEX on its nodes (the "
                                        "owner's unit, or `nvfabric run`), then check `nvidia-"
                                        "imex-ctl -N`"),
    "bus_reset": ("unhealthy", "reset the GPU's PCIe bus (or reboot the node)"),
    "system_reboot": ("unhealthy", "reboot the whole system"),
}


def recovery_hint(action: str | None) -> str | None:
    """The words of a pending recovery action (None for none or not reported)."""
    entry = RECOVERY.get(action or "")
    return None if entry is None else f"the driver asks for {action}: {entry[1]}"


def level_of(f: Finding, fabric: FabricKind | None) -> Level | None:
    """The verdict ``f`` gives a running node of ``fabric`` (None: it does not change it)."""
    for rule in RULES:
        if rule.applies(f, fabric):
            return rule.level
    return None


def device_of(f: Finding) -> str:
    """What a finding is about, for counting it once per (code, device): the PCI address of
    the NVSwitch or GPU its line names, else ``""`` (the node)."""
    value = f.fields.get("pci")
    return str(value) if value is not None else ""


def debounced(f: Finding, usec: int | None, driver_loaded_usec: int,
              window_s: float) -> bool:
    """True when ``f`` is a link-training notice of the boot window: its record came less
    than ``window_s`` seconds after the driver loaded (both in the kernel's microseconds
    since boot). A record without a time is not held back."""
    return (f.code in BOOT_NOTICES and usec is not None
            and usec - driver_loaded_usec < window_s * 1e6)


def worst(words: Iterable[str]) -> str | None:
    """The heaviest verdict word of ``words`` (None for none)."""
    best: str | None = None
    for w in words:
        if best is None or RANK.get(w, 0) > RANK.get(best, 0):
            best = w
    return best


def overlay(status: Mapping[str, Any], events: Mapping[str, Any]) -> dict[str, Any]:
    """The ``status --json`` object of the last reading with the live kernel events on top:
    ``verdict`` raised to ``events["level"]`` when that is heavier (never lowered), the raised
    kernel findings (``events["findings"]``, JSON objects) added to ``findings`` (with the
    recovery action the reading reports for their GPU in their hint) and a reason line, and
    the events themselves under ``kernel``. A new dict; the inputs are untouched."""
    out = dict(status)
    level = events.get("level")
    found = [_with_recovery(f, status.get("gpus") or ()) for f in events.get("findings") or ()]
    if level and RANK.get(str(level), 0) > RANK.get(str(out.get("verdict")), 0):
        out["verdict"] = level
        out["reasons"] = [*out.get("reasons", ()),
                          f"the kernel log since the run started makes it {level}"]
    if found:
        out["findings"] = [*out.get("findings", ()), *found]
    out["kernel"] = dict(events)
    return out


def unreadable(why: str) -> Finding:
    """The finding of a run whose kernel log cannot be watched (``why``: what was tried)."""
    return Finding(
        "kernel_log_unreadable", "warning",
        f"the kernel log is not watched: {why}",
        "run as root (or with CAP_SYSLOG where kernel.dmesg_restrict=1), or give the container "
        "/dev/kmsg or the host's journal (/var/log/journal); until then fabric events are "
        "seen only by `journalctl -k | nvfabric doctor --log -`", {"tried": why})


def _address(pci: object) -> tuple[int, str, str] | None:
    """A PCI address as (domain, bus, device), however it is printed: the kernel's Xid line
    ``0000:1b:00``, NVML's ``00000000:1B:00.0``."""
    parts = str(pci).lower().split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), parts[1], parts[2].split(".")[0]
    except ValueError:
        return None


def _with_recovery(f: Mapping[str, Any], gpus: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``f`` (a finding's JSON) with the recovery action of the GPU it names in its hint."""
    where = _address(f.get("pci")) if f.get("pci") else None
    for g in gpus if where is not None else ():
        words = recovery_hint(g.get("recovery_action"))
        if words and _address(g.get("pci")) == where:
            return {**f, "hint": f"{words}; {f.get('hint', '')}".rstrip("; ")}
    return dict(f)

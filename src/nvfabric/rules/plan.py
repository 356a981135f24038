"""The fabric plan: which services this node needs, in which order, on which port. Pure.

Decision rules (NVIDIA Fabric Manager User Guide: "Supported platforms", "NVLink 5 / NVLSM";
IMEX guide; cases tests/data/cases/P*.yaml):

1. A GPU of a GB200/GB300 compute tray -> ``mnnvl``: IMEX only, never fabric manager.
2. A ConnectX LPF on PCI (VPD ``SMDL=SW_MNG``) or NVLink 5 baseboard GPUs -> ``nvlink5``:
   NVLSM then fabric manager on one management port. Recognised from PCI alone, so a node with
   the IB stack missing is blocked (``ib_stack_missing``), never downgraded to ``nvswitch``.
3. NVSwitch gen 1-3 on PCI (class 0x0680) -> ``nvswitch``: fabric manager alone.
4. Otherwise ``none``: PCIe cards, NVLink bridges, a lone superchip, no GPU. SXM GPUs of an
   NVSwitch baseboard, more of them than a baseboard links without NVSwitches (the product's
   ``direct_nvlink_max``: 4 for A100/A800/H100/H800/H200/H20, the HGX 4-GPU boards), with no
   NVSwitch on PCI are a VM or Kata guest that was not given the baseboard's NVSwitches: still
   nothing to start here, plus the warning ``sxm_gpus_without_nvswitch`` (P13, P14; NVIDIA
   Fabric Manager User Guide, "Virtualization Models": full passthrough puts every NVSwitch in
   the guest, the shared NVSwitch and vGPU models run fabric manager in the service VM or host).

What the GPUs and NVSwitches on PCI say of the baseboard (two products, switches missing, a
guest's part of a board) is judged by :mod:`nvfabric.rules.baseboard`.

Management port: the ports of LPF IB devices, devices in plain string order of their names
(as ``ibstat -l`` lists them), ports in number order; a port with capability mask bit 0x400
(IsSMDisabled), a zero GUID, or a capability mask or GUID that cannot be read is skipped; the
first eligible is taken. NVLink 5 GPUs without any LPF on PCI block with
``management_port_not_found`` (no port GUID to give), whatever the IB stack.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from nvfabric.model.commandline import THE_NODE, HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.inventory import MELLANOX, IbDevice, Inventory, PciFunction
from nvfabric.model.vocab import FabricKind, Service
from nvfabric.model.words import plural
from nvfabric.rules.baseboard import (
    baseboard_mixed,
    partial_nvswitches,
    sxm_gpus,
    sxm_without_nvswitch,
)
from nvfabric.rules.products import lookup

FABRICS = ("none", "nvswitch", "nvlink5", "mnnvl")
SERVICES_BY_FABRIC: dict[FabricKind, tuple[Service, ...]] = {
    "none": (),
    "nvswitch": ("fabricmanager",),
    "nvlink5": ("nvlsm", "fabricmanager"),
    "mnnvl": ("imex",),
}

#: The file that loads the IB stack at boot (modules-load.d(5)), host path.
IB_MODULES_FILE = "/etc/modules-load.d/nvlink5.conf"


def hint_ib_stack(hints: HintContext) -> str:
    """How to load the InfiniBand stack now (on the running kernel) and at every boot (a
    file under the node's root)."""
    persist = shlex.join(["printf", "mlx5_ib\\nib_umad\\n"])
    return (f"load the InfiniBand stack: `modprobe mlx5_ib ib_umad`{hints.on_host()}, and make "
            f"it persistent with `{persist} > {shlex.quote(hints.path(IB_MODULES_FILE))}`")


def hint_ib_umad(hints: HintContext) -> str:
    """How to load ib_umad now and at every boot."""
    return (f"`modprobe ib_umad`{hints.on_host()} and add `ib_umad` to "
            f"{hints.placeholder('path', '/etc/modules-load.d/')} so NVLSM and fabric manager "
            f"find {hints.path('/dev/infiniband')}/umad* after a reboot")


@dataclass(frozen=True)
class ManagementPort:
    """The LPF port whose GUID goes to NVLSM and fabric manager (``-g``)."""

    device: str
    port: int
    guid: str

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "port": self.port, "guid": self.guid}


@dataclass(frozen=True)
class Plan:
    """What to run. ``services`` in start order; ``blockers`` must be fixed before any start;
    ``findings`` are warnings that block nothing (``sxm_gpus_without_nvswitch``,
    ``management_port_unverified``); ``reasons``
    explain each decision in one line each."""

    fabric: FabricKind
    services: tuple[Service, ...]
    management_port: ManagementPort | None
    driver_version: str | None
    arch: str
    blockers: tuple[Finding, ...] = ()
    reasons: tuple[str, ...] = ()
    gpu_count: int = 0
    products: tuple[str, ...] = field(default=())
    findings: tuple[Finding, ...] = ()

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    def to_json(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric,
            "services": list(self.services),
            "management_port": self.management_port.to_json() if self.management_port else None,
            "driver_version": self.driver_version,
            "arch": self.arch,
            "gpu_count": self.gpu_count,
            "products": list(self.products),
            "blockers": [b.to_json() for b in self.blockers],
            "findings": [f.to_json() for f in self.findings],
            "reasons": list(self.reasons),
        }


def plan(inv: Inventory, hints: HintContext = THE_NODE) -> Plan:
    """Decide the fabric of a node. Pure: reads only ``inv``. ``hints``: the node the
    findings' hints type their commands and host paths for (the root the operator gave;
    the default, the node itself)."""
    reasons: list[str] = []
    blockers: list[Finding] = []
    findings: list[Finding] = []
    gpus = inv.gpus
    roles, products = _products(inv)
    if gpus:
        reasons.append("GPUs on PCI: " + ", ".join(products))
    else:
        reasons.append("no NVIDIA GPU on PCI")

    switches = inv.nvswitches
    lpfs = inv.lpfs
    port: ManagementPort | None = None
    fabric: FabricKind

    if roles.get("mnnvl_gpu"):
        fabric = "mnnvl"
        reasons.append(
            "GB200/GB300 compute tray: NVLink switches live in the switch trays; this node runs "
            "IMEX, never a local fabric manager"
        )
    elif lpfs or roles.get("nvlink5_gpu"):
        fabric = "nvlink5"
        port = _nvlink5(inv, reasons, blockers, findings, hints)
    elif switches:
        fabric = "nvswitch"
        partial = _nvswitch(inv, reasons, hints)
        if partial is not None:
            (blockers if partial.severity == "error" else findings).append(partial)
    else:
        fabric = "none"
        _no_switch(inv, reasons, findings, hints)
    mixed = baseboard_mixed(inv, bool(SERVICES_BY_FABRIC[fabric]), fabric, hints)
    if mixed is not None:
        reasons.append("no baseboard NVIDIA ships: " + mixed.message.split(": no baseboard")[0])
        (blockers if mixed.severity == "error" else findings).append(mixed)

    if fabric != "none" and inv.driver_version is None and inv.driver_unreadable:
        blockers.append(_driver_unreadable(fabric, inv.driver_unreadable, hints))
    elif fabric != "none" and (inv.driver_version is None or "nvidia" not in inv.modules):
        blockers.append(_driver_not_loaded(fabric, hints))
    return Plan(
        fabric=fabric,
        services=SERVICES_BY_FABRIC[fabric],
        management_port=port,
        driver_version=inv.driver_version,
        arch=inv.arch,
        blockers=tuple(blockers),
        reasons=tuple(reasons),
        gpu_count=len(gpus),
        products=products,
        findings=tuple(findings),
    )


def _no_switch(inv: Inventory, reasons: list[str], findings: list[Finding],
               hints: HintContext) -> None:
    """The reason of a node with nothing to manage; SXM GPUs of an NVSwitch baseboard with no
    NVSwitch on PCI get their own reason, and the ``sxm_gpus_without_nvswitch`` warning when
    there are more of them than a baseboard links without NVSwitches."""
    if not inv.gpus:
        return
    sxm = sxm_gpus(inv)
    if not sxm:
        reasons.append(
            "no NVSwitch, no LPF, no multi-node NVLink GPU: nothing to manage (PCIe, NVLink "
            "bridge or a lone superchip)"
        )
        return
    listed = ", ".join(f"{p.name} x{n}" for p, n in sxm.items())
    # one GPU of a board linked without NVSwitches loses nothing; one of a board that only
    # ships with NVSwitches (V100 SXM3: direct_nvlink_max 0) is a guest given part of it
    hidden = {p: n for p, n in sxm.items()
              if n > p.direct_nvlink_max and (n >= 2 or p.direct_nvlink_max == 0)}
    if not hidden:
        reasons.append(
            f"SXM GPUs of an NVSwitch baseboard ({listed}) and no NVSwitch on PCI: as many as "
            "a baseboard links by NVLink without NVSwitches (HGX 4-GPU), or a guest given "
            "part of a larger board; nothing to manage here"
        )
        return
    reasons.append(
        f"SXM GPUs of an NVSwitch baseboard ({listed}) and no NVSwitch on PCI: a VM or Kata "
        + ("guest or partition given part of the baseboard, never a board of its own; "
           "nothing to start here" if sum(hidden.values()) == 1 else
           "guest without the baseboard's NVSwitches; nothing to start here, NVLink needs them")
    )
    findings.append(sxm_without_nvswitch(hidden, hints))


def _nvlink5(inv: Inventory, reasons: list[str], blockers: list[Finding],
             findings: list[Finding], hints: HintContext) -> ManagementPort | None:
    """An NVLink 5 node: its LPFs and management port (:func:`_nvlink5_checks`), or the
    blocker of NVLink 5 GPUs without a visible LPF."""
    lpfs = inv.lpfs
    if lpfs:
        reasons.append(
            f"{plural(len(lpfs), 'ConnectX LPF')} with VPD SMDL=SW_MNG on PCI ("
            + ", ".join(f.address for f in lpfs)
            + "): NVLink 5 baseboard, NVLSM then fabric manager"
        )
        return _nvlink5_checks(inv, reasons, blockers, findings, hints)
    reasons.append("NVLink 5 GPUs but no LPF (VPD SMDL=SW_MNG) visible on PCI")
    reasons.append("management port: not chosen, no LPF on PCI")
    blockers.append(_no_lpf(inv, hints))
    return None


def _nvswitch(inv: Inventory, reasons: list[str], hints: HintContext) -> Finding | None:
    """An NVSwitch node: its switches, those the driver does not list, and the
    ``nvswitch_topology_mismatch`` finding when its GPUs' baseboards carry more NVSwitches
    than fabric manager would find (module docstring)."""
    switches = inv.nvswitches
    reasons.append(
        f"{len(switches)} NVSwitch(es) on PCI ("
        + ", ".join(sorted({_name(f.vendor, f.device) for f in switches}))
        + "): fabric manager alone"
    )
    listed = len(inv.nvswitch_proc_devices)
    if inv.driver_version and listed < len(switches):
        reasons.append(
            f"only {listed} of {len(switches)} NVSwitches appear in "
            "/proc/driver/nvidia-nvswitch/devices; fabric manager will see only those"
        )
    return partial_nvswitches(inv, reasons, hints)


def _products(inv: Inventory) -> tuple[dict[str, int], tuple[str, ...]]:
    """(GPU count per product role, ``"NAME xCOUNT"`` per product) of the node's GPUs
    (:mod:`nvfabric.rules.products`; an unknown one is ``unknown`` / ``10de:DEVICE``)."""
    roles: dict[str, int] = {}
    names: dict[str, int] = {}
    for gpu in inv.gpus:
        product = lookup(gpu.vendor, gpu.device)
        role = product.role if product else "unknown"
        roles[role] = roles.get(role, 0) + 1
        name = product.name if product else f"10de:{gpu.device:04x}"
        names[name] = names.get(name, 0) + 1
    return roles, tuple(f"{n} x{c}" for n, c in names.items())


def _driver_not_loaded(fabric: str, hints: HintContext) -> Finding:
    """The blocker of a node with a fabric and no NVIDIA kernel module loaded."""
    return Finding(
        "driver_not_loaded",
        "error",
        f"the NVIDIA kernel module is not loaded; a {fabric} node needs it before any "
        "fabric service",
        f"load the driver (`modprobe nvidia`{hints.on_host()}) or install it; fabric services "
        "must match its exact version",
    )


def _driver_unreadable(fabric: str, why: str, hints: HintContext) -> Finding:
    """The blocker of a node whose driver version cannot be read: not "not loaded" (the
    module's files are there), but nothing can be matched to an unknown version."""
    return Finding(
        "driver_version_unreadable",
        "error",
        f"the loaded NVIDIA driver's version cannot be read ({why}); a {fabric} node's fabric "
        "services must match it exactly, so nothing can be chosen",
        f"read it as root (`{shlex.join(['cat', hints.path('/sys/module/nvidia/version')])}`"
        "); a file that exists but cannot be "
        "read is a permission or a container mount problem, not a missing driver",
        {"reason": why},
    )


def _name(vendor: int, device: int) -> str:
    product = lookup(vendor, device)
    return product.name if product else f"{vendor:04x}:{device:04x}"


def _no_lpf(inv: Inventory, hints: HintContext) -> Finding:
    """The blocker of NVLink 5 GPUs without any LPF on PCI: there is no port GUID to give
    NVLSM and fabric manager, whatever the IB stack. Names the ConnectX functions that are on
    PCI and those whose VPD could not be read (sysfs ``vpd`` is mode 0600, root only: Linux
    drivers/pci/vpd.c), the usual reasons an LPF is not seen."""
    connectx = [f.address for f in inv.pci if f.vendor == MELLANOX]
    no_vpd = [f.address for f in inv.pci if f.vendor == MELLANOX and f.vpd is None]
    if not connectx:
        detail = "no ConnectX function on PCI at all"
    else:
        detail = f"{plural(len(connectx), 'ConnectX function')} on PCI, none with SMDL=SW_MNG"
        if no_vpd:
            detail += f"; no readable VPD on {', '.join(no_vpd)}"
    return Finding(
        "management_port_not_found",
        "error",
        "no LPF (ConnectX function whose VPD has SMDL=SW_MNG) visible on PCI (" + detail
        + "); NVLSM and fabric manager need an LPF port GUID",
        "the LPFs are the baseboard's ConnectX management functions: check that the baseboard "
        f"firmware exposes them and that `lspci -d 15b3: -vvv`, run as root{hints.on_host()}, "
        "shows SMDL=SW_MNG in their [VA] field; nvfabric reads the VPD from sysfs, which only "
        "root may read",
        {"connectx": connectx, "without_vpd": no_vpd, "candidates": []},
    )


def _nvlink5_checks(
    inv: Inventory, reasons: list[str], blockers: list[Finding], findings: list[Finding],
    hints: HintContext,
) -> ManagementPort | None:
    """IB stack checks and management port choice for an NVLink 5 node."""
    lpf_addresses = {f.address for f in inv.lpfs}
    lpf_devices = sorted(
        (d for d in inv.infiniband if d.pci in lpf_addresses), key=lambda d: d.name
    )
    if "mlx5_ib" not in inv.modules or (lpf_addresses and not lpf_devices):
        missing = [m for m in ("mlx5_ib", "ib_umad") if m not in inv.modules]
        blockers.append(
            Finding(
                "ib_stack_missing",
                "error",
                "the LPFs have no InfiniBand device ("
                + (", ".join(missing) + " not loaded" if missing else "no sys/class/infiniband")
                + "); NVLSM and fabric manager cannot reach the NVSwitches",
                hint_ib_stack(hints),
                {"missing_modules": missing},
            )
        )
        reasons.append("management port: not chosen, no InfiniBand device on the LPFs")
        return None
    if "ib_umad" not in inv.modules:
        blockers.append(
            Finding(
                "missing_kernel_module",
                "error",
                "kernel module ib_umad is not loaded; NVLSM and fabric manager need "
                "/dev/infiniband/umad* to talk to the NVSwitches",
                hint_ib_umad(hints),
                {"module": "ib_umad"},
            )
        )
    chosen, candidates, unreadable_seen = _choose_port(lpf_devices, reasons)
    unknown = [f for f in inv.pci if f.lpf_unknown]
    _not_candidates(inv, lpf_addresses, unknown, reasons)
    if chosen is None:
        blockers.append(_no_port(candidates, unreadable_seen, hints))
        return None
    # the choice is the first eligible port in order: an unreadable candidate before it
    # (a port skipped for unreadable values, an LPF that may hide behind an unreadable VPD)
    # could have been the one; never chosen around silently
    skipped = [f"{c['device']} port {c['port']}" for c in candidates
               if c["verdict"].startswith("skipped: unreadable")]
    hidden = [_function_name(inv, f.address) for f in unknown
              if (dev := inv.ib_device_for(f.address)) is None or dev.name < chosen.device]
    if skipped or hidden:
        findings.append(_port_unverified(chosen, skipped, hidden, hints))
    return chosen


def _not_candidates(inv: Inventory, lpf_addresses: set[str], unknown: list[PciFunction],
                    reasons: list[str]) -> None:
    """The reasons naming the IB devices that are not candidates: ordinary NICs (VPD read,
    no SMDL=SW_MNG) apart from the functions whose VPD could not be read."""
    unknown_pci = {f.address for f in unknown}
    others = sorted(d.name for d in inv.infiniband
                    if d.pci not in lpf_addresses and d.pci not in unknown_pci)
    if others:
        reasons.append(
            "not candidates (no SMDL=SW_MNG in VPD, ordinary NICs): " + ", ".join(others)
        )
    if unknown:
        reasons.append(
            "not candidates, VPD unreadable (whether SMDL=SW_MNG is unknown): "
            + ", ".join(_function_name(inv, f.address) for f in unknown)
        )


def _function_name(inv: Inventory, address: str) -> str:
    """``mlx5_0 (0000:05:00.0)``, or the PCI address alone when no IB device is bound."""
    dev = inv.ib_device_for(address)
    return f"{dev.name} ({address})" if dev is not None else address


def _port_unverified(chosen: ManagementPort, skipped: list[str], hidden: list[str],
                     hints: HintContext) -> Finding:
    """The warning of a management port chosen after candidates that could not be read."""
    parts = ([f"LPF port{'s' if len(skipped) > 1 else ''} {', '.join(skipped)} skipped for "
              "unreadable values"] if skipped else []) + (
        [f"ConnectX function{'s' if len(hidden) > 1 else ''} {', '.join(hidden)} with an "
         "unreadable VPD (it may be an LPF)"] if hidden else [])
    return Finding(
        "management_port_unverified",
        "warning",
        f"management port {chosen.device} port {chosen.port} (GUID {chosen.guid}) was chosen "
        f"after candidates that could not be read: {'; '.join(parts)}; if one of them is "
        "eligible, the vendor's procedure takes it instead, and NVLSM and fabric manager run "
        "on another port than it would",
        f"read them as root{hints.on_host()} (`lspci -s ADDRESS -vvv`: [VA] SMDL=SW_MNG; "
        f"`ibstat`), look for VPD or port read errors in `dmesg`{hints.on_host()}; the chosen "
        "GUID is passed to NVLSM and fabric manager as planned",
        {"chosen": chosen.to_json(), "skipped_ports": skipped, "unreadable_vpd": hidden},
    )


def _choose_port(lpf_devices: list[IbDevice], reasons: list[str]
                 ) -> tuple[ManagementPort | None, list[dict[str, Any]], bool]:
    """The management port: the first LPF port with a readable, non-zero GUID and the SM
    enabled (capability mask bit 0x400 clear), in device name then port order; one reason per
    candidate. (port or None, the candidates as JSON, whether some value was unreadable)."""
    chosen: ManagementPort | None = None
    candidates: list[dict[str, Any]] = []
    unreadable_seen = False
    for dev in lpf_devices:
        for p in dev.ports:
            guid = p.guid if p.guid is not None else "unreadable"
            mask = f"0x{p.cap_mask:08x}" if p.cap_mask is not None else "unreadable"
            where = f"{dev.name} port {p.port} (GUID {guid}, capability mask {mask})"
            if p.cap_mask is None or p.guid is None:
                unreadable_seen = True
                verdict = "skipped: " + " and ".join(
                    what for what, bad in (("unreadable capability mask", p.cap_mask is None),
                                           ("unreadable port GUID", p.guid is None)) if bad
                )
            elif p.sm_disabled:
                verdict = "skipped: SM disabled (capability mask bit 0x400 set)"
            elif p.guid_is_zero:
                verdict = "skipped: zero port GUID"
            elif chosen is not None:
                verdict = "eligible, not needed (an earlier port was taken)"
            else:
                chosen = ManagementPort(dev.name, p.port, p.guid)
                verdict = "taken: first eligible LPF port"
            reasons.append(f"candidate {where}: {verdict}")
            candidates.append(
                {"device": dev.name, "port": p.port, "guid": guid, "cap_mask": mask,
                 "verdict": verdict}
            )
    return chosen, candidates, unreadable_seen


def _no_port(candidates: list[dict[str, Any]], unreadable_seen: bool,
             hints: HintContext) -> Finding:
    """The blocker of NVLink 5 LPFs none of whose ports can host NVLSM, each candidate named."""
    listing = "; ".join(
        f"{c['device']}/{c['port']} {c['guid']} cap_mask {c['cap_mask']}: {c['verdict']}"
        for c in candidates
    )
    return Finding(
        "management_port_not_found",
        "error",
        "no LPF port can host NVLSM"
        + (f" ({listing})" if listing else " (the LPF IB devices have no ports)"),
        "an LPF port with the SM enabled (capability mask bit 0x400 clear) and a "
        f"non-zero GUID is needed: check the baseboard firmware and `ibstat` of each "
        f"LPF{hints.on_host()}"
        + ("; a port whose ports/N/cap_mask or gids/0 under "
           f"{hints.path('/sys/class/infiniband')} cannot be read is never taken"
           if unreadable_seen else ""),
        {"candidates": candidates},
    )

"""A triaged report's node as a node spec (format: tests/data/cases/README.md, "Node spec"), so
that ``nvfabric simulate --from-bug-report FILE DIR`` builds the reporter's node with the
existing builder and ``plan``, ``detect``, ``status --root`` and ``run --dry-run`` can be tried
on it. Pure: an :class:`nvfabric.model.inventory.Inventory` in, a spec mapping out (checked
by :func:`nvfabric.simulate.parse` before anything is written).

What the spec format cannot hold is left out and said in the notes: PCI addresses (the tree
hands out its own, ConnectX first, then GPUs, then NVSwitches), functions of other vendors,
ports whose GUID or capability mask the report did not give, VPD fields other than the
identifier string and the Mellanox vendor field.
"""

from __future__ import annotations

from typing import Any

from nvfabric.model.inventory import MELLANOX, IbDevice, Inventory, PciFunction
from nvfabric.simulate.spec import DRIVER, IBDEV, MAX_GPUS, MAX_MELLANOX

DEFAULT_MASK = "0xa751e84a"


def node_spec(inv: Inventory) -> tuple[dict[str, Any], list[str]]:
    """(spec mapping, notes): GPUs and NVSwitches by device ID, ConnectX functions with the
    VPD identifier string and Mellanox vendor field lspci decoded and the ports ibstat gave,
    loaded modules, driver version, architecture, IMEX major."""
    notes: list[str] = []
    spec: dict[str, Any] = {"arch": inv.arch if inv.arch in ("x86_64", "aarch64") else "x86_64"}
    if spec["arch"] != inv.arch:
        notes.append(f"architecture {inv.arch!r} not simulated: x86_64 used")
    dv = inv.driver_version
    spec["driver_version"] = dv if dv and DRIVER.fullmatch(dv) else None
    spec["modules"] = sorted(inv.modules)
    spec["gpus"] = _gpus(inv, notes)
    switches = inv.nvswitches
    if switches:
        ids = sorted({f"{s.device:04x}" for s in switches})
        spec["nvswitches"] = {"device_id": ids[0], "count": len(switches)}
        if len(ids) > 1:
            notes.append(f"NVSwitch device IDs {', '.join(ids)}: all simulated as {ids[0]}")
    mellanox = []
    connectx = _connectx(inv, notes)
    # a function ibstat gave no device for (a VF, a device ibstat missed) gets the lowest
    # mlx5_N no reported device has: its index among the functions could be a name ibstat
    # gave another function, and the spec refuses a name twice
    taken = {d.name for f in connectx if (d := inv.ib_device_for(f.address)) is not None
             and IBDEV.fullmatch(d.name)}
    spare = (f"mlx5_{n}" for n in range(1 << 20) if f"mlx5_{n}" not in taken)
    for fn in connectx:
        dev = inv.ib_device_for(fn.address)
        name = dev.name if dev and IBDEV.fullmatch(dev.name) else next(spare)
        mellanox.append(_mellanox_entry(fn, dev, name, notes))
    if mellanox:
        spec["mellanox"] = mellanox
    if inv.imex_major is not None:
        spec["imex_channels"] = {"major": inv.imex_major, "channels": []}
    others = sum(1 for f in inv.pci if not (f.is_gpu or f.is_nvswitch or f.vendor == MELLANOX))
    if others:
        notes.append(f"{others} other PCI functions not simulated")
    notes.append("PCI addresses are the simulator's own (ConnectX from 0000:05:00.0, GPUs from "
                 "0000:18:00.0)")
    return spec, notes


def _gpus(inv: Inventory, notes: list[str]) -> list[dict[str, Any]]:
    """The spec's GPUs: a count per device ID, at most :data:`MAX_GPUS` each."""
    counts: dict[str, int] = {}
    for g in inv.gpus:
        key = f"{g.device:04x}"
        counts[key] = counts.get(key, 0) + 1
    gpus = [{"device_id": k, "count": min(c, MAX_GPUS)} for k, c in counts.items()]
    total = sum(c for c in counts.values())
    if total > MAX_GPUS:
        notes.append(f"{total} GPUs: only {MAX_GPUS} simulated")
    return gpus


def _connectx(inv: Inventory, notes: list[str]) -> list[PciFunction]:
    """The ConnectX functions to simulate: all, or at most :data:`MAX_MELLANOX` of them (the
    LPFs first, then those with an InfiniBand device)."""
    connectx = [f for f in inv.pci if f.vendor == MELLANOX and (f.class_code >> 16) == 0x02]
    if len(connectx) > MAX_MELLANOX:
        # a node with SR-IOV VFs has more ConnectX functions than a spec holds: the LPFs
        # first, then the functions with an InfiniBand device, then the rest, by address
        ranked = sorted(connectx, key=lambda f: (not f.sw_mng,
                                                 inv.ib_device_for(f.address) is None))
        keep = {f.address for f in ranked[:MAX_MELLANOX]}
        notes.append(f"{len(connectx)} ConnectX functions: {MAX_MELLANOX} simulated (LPFs "
                     "and those with an InfiniBand device first), "
                     f"{len(connectx) - MAX_MELLANOX} left out")
        connectx = [f for f in connectx if f.address in keep]
    return connectx


def _mellanox_entry(fn: PciFunction, dev: IbDevice | None, name: str,
                    notes: list[str]) -> dict[str, Any]:
    """One ConnectX function of the spec: device ID, the VPD's identifier string and
    Mellanox vendor field, and the ports with a GUID (a default capability mask where the
    report has none)."""
    entry: dict[str, Any] = {"ib_device": name, "device_id": f"{fn.device:04x}"}
    if fn.vpd is not None:
        if fn.vpd.id_string:
            entry["vpd_id_string"] = fn.vpd.id_string
        vendor_field = next((f.text for f in fn.vpd.fields
                             if f.keyword.startswith("V") and f.text.startswith("MLX:")),
                            None)
        if vendor_field:
            entry["vpd_vendor_field"] = vendor_field
    ports = []
    for p in dev.ports if dev else ():
        if p.guid is None:
            notes.append(f"{name} port {p.port}: no GUID in the report, left out")
            continue
        port: dict[str, Any] = {"port": p.port, "guid": p.guid,
                                "cap_mask": DEFAULT_MASK if p.cap_mask is None
                                else f"0x{p.cap_mask:08x}"}
        if p.cap_mask is None:
            notes.append(f"{name} port {p.port}: no capability mask in the report, "
                         f"{DEFAULT_MASK} used")
        for key in ("state", "phys_state", "link_layer"):
            value = getattr(p, key)
            if value:
                port[key] = value
        ports.append(port)
    entry["ports"] = ports
    return entry


#: The fakes' version keys (``node.json`` of :mod:`nvfabric.simulate.fakes`) per component
#: whose version a report shows, and the component's name in a note.
FAKE_VERSION_KEYS = {"fabricmanager": ("fm_version", "fabric manager"),
                     "imex": ("imex_version", "IMEX")}


def fake_versions(reported: dict[str, tuple[str, ...]], driver: str | None
                  ) -> tuple[dict[str, str], list[str]]:
    """(``node.json`` keys to set, notes) so that the tree's fake fabric manager and IMEX
    print the version the report shows (``--version``; a report of a version mismatch gives
    a tree whose preflight refuses as the node did). One version per component is carried
    over; several, or none, leave the tree's the driver's and a note says so. Pure."""
    keys: dict[str, str] = {}
    notes: list[str] = []
    for component, (key, name) in FAKE_VERSION_KEYS.items():
        seen = reported.get(component, ())
        if len(seen) == 1:
            keys[key] = seen[0]
            notes.append(f"{name} version {seen[0]} from the report (the tree's "
                         f"{'nv-fabricmanager' if component == 'fabricmanager' else 'nvidia-imex'}"
                         " --version prints it)")
        elif seen:
            notes.append(f"{name}: the report shows versions {', '.join(seen)}; not carried "
                         f"over, the tree's is the driver's ({driver or 'none'})")
        elif component == "fabricmanager":
            notes.append(f"{name}: the report shows no version; the tree's is the driver's "
                         f"({driver or 'none'})")
    return keys, notes


def fabric_states(simulated: list[dict[str, Any]],
                  reported: tuple[dict[str, Any], ...]) -> tuple[list[dict[str, Any]], str]:
    """The simulated GPUs (``gpus.json`` entries of :mod:`nvfabric.simulate.fakes`) with the
    fabric state, status, CliqueId, ClusterUUID and health summary the report's ``nvidia-smi
    --query`` gave, GPU by GPU in enumeration order, so that ``status --root`` on the tree
    reads what the reporter's node said. Returns (entries, note); unchanged when the counts
    differ (the note says so)."""
    if not reported:
        return simulated, "no nvidia-smi --query in the report: simulated fabric states kept"
    if len(reported) != len(simulated):
        return simulated, (f"{len(reported)} GPUs in nvidia-smi but {len(simulated)} on PCI: "
                           "simulated fabric states kept")
    out = []
    for entry, gpu in zip(simulated, reported, strict=True):
        status = gpu.get("status")
        summary = gpu.get("health_summary")
        out.append({
            **entry,
            "state": gpu["state"],
            "status": "Success" if status == "success" else (status or "N/A"),
            "clique_id": gpu.get("clique_id"),
            "cluster_uuid": gpu.get("cluster_uuid"),
            "health": " ".join(w.capitalize() for w in str(summary).split("_"))
            if summary else "N/A",
        })
    return out, "GPU fabric states from the report's nvidia-smi --query"

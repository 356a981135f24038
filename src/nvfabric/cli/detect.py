"""``nvfabric detect``: what the node is, as read from sysfs/procfs."""

from __future__ import annotations

from typing import Any

import click

from nvfabric.cli.render import arch_option, console, guarded, json_option, root_option, safe
from nvfabric.effects.stdio import print_json
from nvfabric.facts.inventory import collect
from nvfabric.model.inventory import Inventory
from nvfabric.rules.products import name_of


def detect_json(inv: Inventory) -> dict[str, Any]:
    """The JSON of the public contract (``nvfabric detect``: the keys every version keeps)."""
    infiniband = []
    for fn in inv.pci:
        if fn.vendor != 0x15B3:
            continue
        dev = inv.ib_device_for(fn.address)
        infiniband.append(
            {
                "device": dev.name if dev else None,
                "pci": fn.address,
                "device_id": f"{fn.device:04x}",
                # unknown (null) when the VPD could not be read: not "no SMDL=SW_MNG"
                "sw_mng": None if fn.lpf_unknown else fn.sw_mng,
                "vpd_unreadable": fn.vpd_unreadable,
                "vpd_id_string": fn.vpd.id_string if fn.vpd else None,
                "vpd_checksum_ok": fn.vpd.checksum_ok if fn.vpd else None,
                "vpd_problems": list(fn.vpd.problems) if fn.vpd else [],
                "ports": [
                    {
                        "port": p.port,
                        "guid": p.guid,
                        "cap_mask": None if p.cap_mask is None else f"0x{p.cap_mask:08x}",
                        "sm_disabled": p.sm_disabled,
                        "state": p.state,
                        "phys_state": p.phys_state,
                        "link_layer": p.link_layer,
                        "umad": p.umad,
                    }
                    for p in (dev.ports if dev else ())
                ],
            }
        )
    return {
        "arch": inv.arch,
        "driver_version": inv.driver_version,
        "modules": sorted(inv.modules),
        "gpus": [
            {"pci": g.address, "device_id": f"{g.device:04x}", "name": name_of(g.vendor, g.device),
             "numa_node": g.numa_node, "driver": g.driver}
            for g in inv.gpus
        ],
        "nvswitches": [
            {"pci": s.address, "device_id": f"{s.device:04x}", "name": name_of(s.vendor, s.device)}
            for s in inv.nvswitches
        ],
        "nvswitch_proc_devices": list(inv.nvswitch_proc_devices),
        "infiniband": infiniband,
        "imex": {"major": inv.imex_major, "channels": list(inv.imex_channels)},
    }


@click.command()
@root_option
@arch_option
@json_option
@guarded
def detect(root: str, arch: str | None, as_json: bool) -> None:
    """Show what this node is: GPUs, NVSwitches, ConnectX LPFs and ports, driver, IMEX."""
    inv = collect(root, arch)
    data = detect_json(inv)
    if as_json:
        print_json(data)
        return
    from rich.table import Table

    con = console()
    con.print(f"arch {safe(data['arch'])}, driver {safe(data['driver_version'] or 'not loaded')}, "
              f"modules: {safe(', '.join(data['modules']) or 'none')}")
    if data["gpus"]:
        names: dict[str, int] = {}
        for g in data["gpus"]:
            names[g["name"]] = names.get(g["name"], 0) + 1
        con.print("GPUs: " + ", ".join(f"{safe(n)} x{c}" for n, c in names.items()))
    else:
        con.print("GPUs: none")
    if data["nvswitches"]:
        con.print(f"NVSwitches: {len(data['nvswitches'])} ({safe(data['nvswitches'][0]['name'])})")
    if data["infiniband"]:
        table = Table("PCI", "IB device", "SW_MNG", "port", "GUID", "cap mask", "SM", "state")
        for dev in data["infiniband"]:
            for p in dev["ports"] or [None]:
                table.add_row(*(safe(cell) for cell in _port_row(dev, p)))
        con.print(table)


def _port_row(dev: dict[str, Any], p: dict[str, Any] | None) -> tuple[str, ...]:
    """One row of the human table: values as read from the node (made safe by the caller)."""
    if p is None:
        return (dev["pci"], dev["device"] or "-", _sw_mng(dev["sw_mng"]),
                "-", "-", "-", "-", "-")
    sm = {True: "disabled", False: "enabled", None: "unknown"}[p["sm_disabled"]]
    return (dev["pci"], dev["device"] or "-", _sw_mng(dev["sw_mng"]), str(p["port"]),
            p["guid"] or "unreadable", p["cap_mask"] or "unreadable", sm, p["state"])


def _sw_mng(value: bool | None) -> str:
    """The SW_MNG column: yes, no, or unreadable (the VPD could not be read)."""
    return "unreadable" if value is None else "yes" if value else "no"

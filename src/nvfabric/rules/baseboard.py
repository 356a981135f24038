"""What the GPUs and NVSwitches on PCI say of a node's baseboard, for the fabric plan
(:mod:`nvfabric.rules.plan`). Pure.

What no shipped product is, and what a guest or a failed part hides (NVIDIA Fabric Manager User
Guide, "NVSwitch-Based Systems", "Full Passthrough Virtualization Model", "Shared NVSwitch
Virtualization Model"; :data:`nvfabric.rules.products.BASEBOARDS`):

- GPUs of more than one baseboard product (``H100 80GB HBM3`` beside ``H200``, an SXM4 beside an
  SXM5, B200 beside H100) or NVSwitches of another generation than the GPUs' baseboard carries:
  no baseboard NVIDIA ships, so no topology fabric manager knows. ``baseboard_mixed``, a
  blocker wherever a service would start (the fabric is still decided by the plan's rules
  1-4, and said), a warning on a node with nothing to start.
- NVSwitch GPUs with fewer NVSwitches than their baseboards carry (on PCI, or listed by the
  driver in /proc/driver/nvidia-nvswitch/devices): a full passthrough guest given part of the
  switches, or a switch that fell off the bus or that the driver did not take. Fabric manager
  must not start as if the baseboard were whole: ``nvswitch_topology_mismatch``, a blocker when
  the node has a whole baseboard's GPUs (8, 16), a warning with fewer (a partition's guest).
- A V100 SXM3 (``direct_nvlink_max`` 0: the HGX-2 is its only board) with no NVSwitch on PCI,
  one GPU included, is a guest or partition of an HGX-2, never a board of its own:
  ``sxm_gpus_without_nvswitch``.
"""

from __future__ import annotations

from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.inventory import Inventory
from nvfabric.model.words import plural
from nvfabric.rules.products import BASEBOARDS, Product, lookup, name_of


def sxm_gpus(inv: Inventory) -> dict[Product, int]:
    """The node's GPUs of role ``nvswitch_gpu`` (SXM parts of NVSwitch baseboards), counted
    by product, in PCI order."""
    out: dict[Product, int] = {}
    for gpu in inv.gpus:
        product = lookup(gpu.vendor, gpu.device)
        if product is not None and product.role == "nvswitch_gpu":
            out[product] = out.get(product, 0) + 1
    return out


def sxm_without_nvswitch(hidden: dict[Product, int], hints: HintContext
                         ) -> Finding:
    """The warning of SXM GPUs whose baseboard's NVSwitches this machine does not see. One GPU
    of such a board waits in fabric state In Progress unless NVLink is disabled in the guest
    (NVreg_NvLinkDisable=1, which the cozystack tenant GPU operator sets for single SXM GPU
    passthrough)."""
    named = [f"{p.name} x{n}" for p, n in hidden.items()]
    count = sum(hidden.values())
    if count == 1:
        what = (f"1 SXM GPU ({named[0]}) of a part NVIDIA ships only on an NVSwitch baseboard "
                "and no NVSwitch on PCI: a guest or partition given one GPU of that board, "
                "not a board of its own; its NVLinks lead to NVSwitches this machine does not "
                "see, and its fabric registration waits for a fabric manager where they are "
                "(or for NVLink disabled in this guest: NVreg_NvLinkDisable=1)")
    else:
        what = (f"{count} SXM GPUs of an NVSwitch baseboard ({', '.join(named)}) and no NVSwitch "
                "on PCI: NVLink between these GPUs needs the baseboard's NVSwitches, which this "
                "machine (a VM or Kata guest) was not given; without them GPU-to-GPU traffic "
                "goes over PCIe")
    return Finding(
        "sxm_gpus_without_nvswitch",
        "warning",
        what,
        "full passthrough: pass every NVSwitch of the baseboard (PCI class 0x0680) into this "
        f"guest with its GPUs; `{hints.nvfabric('plan')}` then plans fabric manager here. "
        "Shared NVSwitch "
        "or vGPU: fabric manager runs in the service VM or the host and must activate a "
        "partition with these GPUs: check it there (NVIDIA Fabric Manager User Guide, "
        "\"Virtualization Models\")",
        {"products": named, "gpus": count, "nvswitches": 0,
         "form_factors": sorted({p.form_factor for p in hidden})},
    )


def partial_nvswitches(inv: Inventory, reasons: list[str],
                       hints: HintContext) -> Finding | None:
    """``nvswitch_topology_mismatch`` when the GPUs of one baseboard product have fewer
    NVSwitches than their baseboards carry: on PCI, or (the driver loaded and listing some)
    in /proc/driver/nvidia-nvswitch/devices. An error with a whole baseboard's GPUs or more,
    a warning with fewer (a partition's guest may hold part of the switches)."""
    sxm = sxm_gpus(inv)
    if len(sxm) != 1:
        return None  # no GPU of a baseboard, or several products (baseboard_mixed)
    ((product, gpus),) = sxm.items()
    board = BASEBOARDS.get(product.form_factor)
    if board is None:
        return None
    boards = -(-gpus // board.gpus)
    expected = boards * board.nvswitches
    on_pci = len(inv.nvswitches)
    listed = len(inv.nvswitch_proc_devices)
    driver_view = listed if inv.driver_version and 0 < listed < on_pci else on_pci
    if driver_view >= expected:
        return None
    missing = max(expected - on_pci, 0)
    not_listed = on_pci - driver_view
    parts = ([f"{missing} not on PCI"] if missing else []) + (
        [f"{not_listed} on PCI but not listed by the driver (/proc/driver/nvidia-nvswitch/"
         "devices)"] if not_listed else [])
    whole = gpus >= board.gpus
    boards_said = f"{boards} {board.name}{'s' if boards > 1 else ''}"
    reasons.append(
        f"{plural(gpus, product.name + ' GPU')} need the {expected} NVSwitches of "
        f"{boards_said}; fabric manager would find {driver_view}"
    )
    return Finding(
        "nvswitch_topology_mismatch",
        "error" if whole else "warning",
        f"{plural(gpus, product.name + ' GPU')} and {driver_view} of the {expected} NVSwitches "
        f"of {boards_said} ({'; '.join(parts)}): "
        + ("fabric manager finds no topology for that many and aborts, or routes the fabric "
           "without the missing ones; not started as if the baseboard were whole"
           if whole else
           "fewer GPUs than a baseboard: a full passthrough guest of a partition holds the "
           "switches it was given, or a switch is missing; fabric manager manages only those"),
        "in a VM: full passthrough gives the guest every NVSwitch its GPUs link to (every "
        f"switch of the baseboard: {board.nvswitches} per {board.gpus} GPUs), the shared "
        "NVSwitch model none (fabric manager runs in the service VM): pass the missing "
        "ones (PCI class 0x0680) or none (NVIDIA Fabric Manager User Guide, \"Full "
        "Passthrough Virtualization Model\"). On bare metal a switch is off the bus or failed: "
        f"`lspci -d 10de::0680`{hints.on_host()}, NVSwitch SXid or probe errors in "
        f"`dmesg`{hints.on_host()}; reseat, or the vendor's RMA",
        {"product": product.name, "gpus": gpus, "baseboard": board.name,
         "nvswitches_expected": expected, "nvswitches_on_pci": on_pci,
         "nvswitches_listed": driver_view, "missing_from_pci": missing,
         "not_listed_by_driver": not_listed},
    )


#: The product roles of GPUs that belong to a baseboard (the plan's rules 1-3).
BASEBOARD_ROLES = frozenset({"nvswitch_gpu", "nvlink5_gpu", "mnnvl_gpu"})


def baseboard_mixed(inv: Inventory, starts: bool, fabric: str,
                    hints: HintContext) -> Finding | None:
    """``baseboard_mixed`` when the node's baseboard GPUs are of more than one product, or
    its NVSwitch GPUs sit beside NVSwitches of another generation than their baseboard
    carries; an error where the plan of fabric ``fabric`` ``starts`` a service, else a
    warning."""
    products: dict[Product, int] = {}
    for gpu in inv.gpus:
        product = lookup(gpu.vendor, gpu.device)
        if product is not None and product.role in BASEBOARD_ROLES:
            products[product] = products.get(product, 0) + 1
    named = [f"{p.name} x{n}" for p, n in products.items()]
    if len(products) > 1:
        what = f"GPUs of {len(products)} baseboard products ({', '.join(named)})"
    else:
        board = BASEBOARDS.get(next(iter(products)).form_factor) if products else None
        switches = [lookup(f.vendor, f.device) for f in inv.nvswitches]
        other = sorted({s.name for s in switches
                        if s is not None and board is not None
                        and s.generation != board.nvswitch_generation})
        if board is None or not other:
            return None
        what = (f"{named[0]} GPUs with {', '.join(other)} NVSwitches; the {board.name} "
                f"carries {board.nvswitch_generation.replace('nvswitch', 'generation ')} "
                "NVSwitches")
    return Finding(
        "baseboard_mixed",
        "error" if starts else "warning",
        f"{what}: no baseboard NVIDIA ships has them together, so no fabric topology fits "
        + (f"the {fabric} plan; nothing is started on a guess"
           if starts else "them"),
        f"check what is on PCI (`lspci -nn -d 10de:`{hints.on_host()}): a board is one product "
        "throughout; a VM "
        "given GPUs of two hosts or boards, or a misread device ID, is what shows this; fix "
        "the assignment (each baseboard's GPUs and NVSwitches together)",
        {"products": named, "nvswitches": sorted({name_of(f.vendor, f.device)
                                                  for f in inv.nvswitches})},
    )

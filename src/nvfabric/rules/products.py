"""PCI device ID -> NVIDIA product facts. Data, matched by exact ID, never by name substring.

``role`` is what the device means for the fabric plan:

- ``nvswitch_gpu``: an SXM GPU that may sit on an NVSwitch (gen 1-3) baseboard; the plan looks
  for the switches on PCI.
- ``nvlink5_gpu``: a GPU of an NVLink 5 baseboard (B100/B200/B300) whose switches sit behind
  ConnectX LPFs.
- ``mnnvl_gpu``: a GPU of a GB200/GB300 NVL72 compute tray (multi-node NVLink, IMEX).
- ``standalone``: PCIe cards, bridge pairs, C2C-only superchips: no fabric service.
- ``nvswitch``: an NVSwitch chip itself (class 0x0680).
- ``lpf_capable``: a ConnectX that can be an NVLink 5 management LPF (decided by its VPD).

``direct_nvlink_max`` (``nvswitch_gpu`` rows): the most GPUs of the product that NVIDIA links
on a baseboard without NVSwitches: 4 for A100/A800 SXM4 and H100/H800/H200/H20 SXM5 (the HGX
4-GPU boards, "connected with NVLink"; the 8-GPU boards carry NVSwitches: NVIDIA, "Introducing
NVIDIA HGX A100", and Fabric Manager User Guide, "GPU Baseboard Topologies"), 8 for V100 SXM2
(DGX-1's hybrid cube-mesh has no NVSwitch), 0 for V100 SXM3 (HGX-2 only). More of them than that
with no NVSwitch on PCI is a guest that was not given the switches (:mod:`nvfabric.rules.plan`).

:data:`BASEBOARDS`: the NVSwitch baseboard of each SXM form factor that sits on one, as NVIDIA
ships it (Fabric Manager User Guide, "NVSwitch-Based Systems"): HGX-2 / DGX-2 are two baseboards
of eight V100 SXM3 and six first generation NVSwitches; HGX A100 8-GPU (DGX A100) eight A100 SXM4
and six second generation; HGX H100/H200/H800 8-GPU eight SXM5 GPUs and four third generation.
Every GPU of a baseboard links to every NVSwitch of it, so a node with a whole baseboard's GPUs
and fewer of its NVSwitches is not that baseboard as fabric manager knows it.

Source of every row (``source``): :data:`BOTH` where NVIDIA's own list names the device ID
(the supported-GPU table of the driver README, as published with open-gpu-kernel-modules
595.45.04: product name and PCI device ID) and the PCI ID database agrees; :data:`PCI_IDS` where
only the PCI ID database (pci.ids 2026.08.22, "NVIDIA Corporation" and "Mellanox Technologies"
sections) names it, its bracketed name giving the form factor. The names are NVIDIA's (as
nvidia-smi prints them, without "NVIDIA "). Cross-checked with the device IDs in
tests/data/cases and the captures in tests/data/corpus/lspci (2901 B200, 2941 GB200, 22a3
NVSwitch, 1021 ConnectX-7). Checked for every SXM part of A100, A800, H100, H800, H200, H20,
B200 and B300; left out: 230c/230e (H20 NVL16) and 2328 (H20B), whose form factor neither
list gives.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Product:
    """One row: ``vendor``/``device_id`` as 4-digit lower-case hex strings; ``form_factor``
    ``sxm2``..``sxm6``, ``pcie``, ``superchip`` or ``baseboard``; ``source`` where the row comes
    from; ``direct_nvlink_max`` as in the module docstring."""

    vendor: str
    device_id: str
    name: str
    generation: str
    form_factor: str
    role: str
    source: str
    direct_nvlink_max: int = 0


#: The two sources of the rows (module docstring).
BOTH = "NVIDIA driver README supported GPUs (595.45.04); pci.ids 2026.08.22"
PCI_IDS = "pci.ids 2026.08.22"
#: Rows kept from the founding table that neither list names (NVSwitch gen 1, DGX-2).
UNLISTED = "in neither pci.ids 2026.08.22 nor the driver README"
#: ``direct_nvlink_max`` of the SXM4/SXM5 parts: the HGX 4-GPU baseboards.
HGX4 = 4

_ROWS: tuple[Product, ...] = (
    # Volta
    Product("10de", "1db1", "Tesla V100-SXM2-16GB", "volta", "sxm2", "nvswitch_gpu", PCI_IDS, 8),
    Product("10de", "1db5", "Tesla V100-SXM2-32GB", "volta", "sxm2", "nvswitch_gpu", PCI_IDS, 8),
    Product("10de", "1db8", "Tesla V100-SXM3-32GB", "volta", "sxm3", "nvswitch_gpu", PCI_IDS, 0),
    Product("10de", "1df6", "Tesla V100S-PCIE-32GB", "volta", "pcie", "standalone", PCI_IDS),
    Product("10de", "1db4", "Tesla V100-PCIE-16GB", "volta", "pcie", "standalone", PCI_IDS),
    Product("10de", "1db6", "Tesla V100-PCIE-32GB", "volta", "pcie", "standalone", PCI_IDS),
    # Ampere
    Product("10de", "20b0", "A100-SXM4-40GB", "ampere", "sxm4", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "20b2", "A100-SXM4-80GB", "ampere", "sxm4", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "20b3", "A100-SXM-64GB", "ampere", "sxm4", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "20bd", "A800-SXM4-40GB", "ampere", "sxm4", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "20f3", "A800-SXM4-80GB", "ampere", "sxm4", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "20f1", "A100-PCIE-40GB", "ampere", "pcie", "standalone", BOTH),
    Product("10de", "20b5", "A100 80GB PCIe", "ampere", "pcie", "standalone", BOTH),
    Product("10de", "20f5", "A800 80GB PCIe", "ampere", "pcie", "standalone", BOTH),
    Product("10de", "20f6", "A800 40GB Active", "ampere", "pcie", "standalone", BOTH),
    Product("10de", "2235", "A40", "ampere", "pcie", "standalone", BOTH),
    Product("10de", "2236", "A10", "ampere", "pcie", "standalone", BOTH),
    # Hopper
    Product("10de", "2330", "H100 80GB HBM3", "hopper", "sxm5", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "2339", "H100", "hopper", "sxm5", "nvswitch_gpu", BOTH, HGX4),  # SXM5 94GB
    Product("10de", "2337", "H100 SXM5 64GB", "hopper", "sxm5", "nvswitch_gpu", PCI_IDS, HGX4),
    Product("10de", "2338", "H100 SXM5 96GB", "hopper", "sxm5", "nvswitch_gpu", PCI_IDS, HGX4),
    Product("10de", "2331", "H100 PCIe", "hopper", "pcie", "standalone", BOTH),
    Product("10de", "2321", "H100 NVL", "hopper", "pcie", "standalone", BOTH),
    Product("10de", "2324", "H800", "hopper", "sxm5", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "2322", "H800 PCIe", "hopper", "pcie", "standalone", BOTH),
    Product("10de", "2329", "H20", "hopper", "sxm5", "nvswitch_gpu", BOTH, HGX4),
    Product("10de", "232c", "H20-3e", "hopper", "sxm5", "nvswitch_gpu", BOTH, HGX4),  # HBM3e
    Product("10de", "2335", "H200", "hopper", "sxm5", "nvswitch_gpu", BOTH, HGX4),  # SXM 141GB
    Product("10de", "233b", "H200 NVL", "hopper", "pcie", "standalone", BOTH),
    Product("10de", "2342", "GH200 480GB", "hopper", "superchip", "standalone", BOTH),
    Product("10de", "2348", "GH200 144G HBM3e", "hopper", "superchip", "standalone", BOTH),
    # Blackwell
    Product("10de", "29bc", "B100", "blackwell", "sxm6", "nvlink5_gpu", PCI_IDS),
    Product("10de", "2901", "B200", "blackwell", "sxm6", "nvlink5_gpu", BOTH),
    Product("10de", "2909", "HGX B200 168GB", "blackwell", "sxm6", "nvlink5_gpu", PCI_IDS),
    Product("10de", "3182", "B300 SXM6 AC", "blackwell", "sxm6", "nvlink5_gpu", BOTH),
    Product("10de", "2941", "GB200", "blackwell", "superchip", "mnnvl_gpu", BOTH),
    Product("10de", "31c2", "GB300", "blackwell", "superchip", "mnnvl_gpu", BOTH),
    Product("10de", "31c3", "GB300", "blackwell", "superchip", "mnnvl_gpu", PCI_IDS),
    # Ada (consumer)
    Product("10de", "2684", "GeForce RTX 4090", "ada", "pcie", "standalone", BOTH),
    Product("10de", "26b9", "L40S", "ada", "pcie", "standalone", BOTH),
    # NVSwitch chips (the plan finds NVSwitches by PCI class 0x0680; these rows name them)
    Product("10de", "1ac1", "NVSwitch (gen 1)", "nvswitch1", "baseboard", "nvswitch", UNLISTED),
    Product("10de", "1ac2", "NVSwitch (gen 1)", "nvswitch1", "baseboard", "nvswitch", UNLISTED),
    Product("10de", "1af1", "NVSwitch (gen 2)", "nvswitch2", "baseboard", "nvswitch", PCI_IDS),
    Product("10de", "22a3", "NVSwitch (gen 3)", "nvswitch3", "baseboard", "nvswitch", PCI_IDS),
    # ConnectX
    Product("15b3", "1021", "ConnectX-7", "connectx7", "pcie", "lpf_capable", PCI_IDS),
    Product("15b3", "1023", "ConnectX-8", "connectx8", "pcie", "lpf_capable", PCI_IDS),
)

PRODUCTS: dict[tuple[str, str], Product] = {(p.vendor, p.device_id): p for p in _ROWS}


@dataclass(frozen=True)
class Baseboard:
    """An NVSwitch baseboard (module docstring): ``gpus`` SXM GPUs and ``nvswitches``
    NVSwitches of ``nvswitch_generation`` (a ``generation`` of the NVSwitch rows)."""

    name: str
    gpus: int
    nvswitches: int
    nvswitch_generation: str


#: The NVSwitch baseboard of each SXM form factor shipped on one (module docstring).
BASEBOARDS: dict[str, Baseboard] = {
    "sxm3": Baseboard("HGX-2 baseboard", 8, 6, "nvswitch1"),
    "sxm4": Baseboard("HGX A100 8-GPU baseboard", 8, 6, "nvswitch2"),
    "sxm5": Baseboard("HGX H100/H200 8-GPU baseboard", 8, 4, "nvswitch3"),
}


def lookup(vendor: int, device: int) -> Product | None:
    """The product for a PCI vendor/device pair (ints), or None when not in the table."""
    return PRODUCTS.get((f"{vendor:04x}", f"{device:04x}"))


def name_of(vendor: int, device: int) -> str:
    """Product name, or ``Device <vendor>:<device>`` when unknown."""
    product = lookup(vendor, device)
    return product.name if product else f"Device {vendor:04x}:{device:04x}"

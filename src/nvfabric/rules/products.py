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

Source of every row: the PCI ID database (pci.ids, "NVIDIA Corporation" and "Mellanox
Technologies" sections), cross-checked with the device IDs in ../shared/cases and captures in
../shared/corpus/lspci (2901 B200, 2941 GB200, 22a3 NVSwitch, 1021 ConnectX-7).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Product:
    """One row: ``vendor``/``device_id`` as 4-digit lower-case hex strings."""

    vendor: str
    device_id: str
    name: str
    generation: str
    form_factor: str
    role: str
    source: str = "pci.ids"


_ROWS: tuple[Product, ...] = (
    # Volta
    Product("10de", "1db1", "Tesla V100-SXM2-16GB", "volta", "sxm2", "nvswitch_gpu"),
    Product("10de", "1db5", "Tesla V100-SXM2-32GB", "volta", "sxm2", "nvswitch_gpu"),
    Product("10de", "1db8", "Tesla V100-SXM3-32GB", "volta", "sxm3", "nvswitch_gpu"),
    Product("10de", "1df6", "Tesla V100S-PCIE-32GB", "volta", "pcie", "standalone"),
    Product("10de", "1db4", "Tesla V100-PCIE-16GB", "volta", "pcie", "standalone"),
    Product("10de", "1db6", "Tesla V100-PCIE-32GB", "volta", "pcie", "standalone"),
    # Ampere
    Product("10de", "20b0", "A100-SXM4-40GB", "ampere", "sxm4", "nvswitch_gpu"),
    Product("10de", "20b2", "A100-SXM4-80GB", "ampere", "sxm4", "nvswitch_gpu"),
    Product("10de", "20f1", "A100-PCIE-40GB", "ampere", "pcie", "standalone"),
    Product("10de", "20b5", "A100 80GB PCIe", "ampere", "pcie", "standalone"),
    Product("10de", "2235", "A40", "ampere", "pcie", "standalone"),
    Product("10de", "2236", "A10", "ampere", "pcie", "standalone"),
    # Hopper
    Product("10de", "2330", "H100 80GB HBM3", "hopper", "sxm5", "nvswitch_gpu"),
    Product("10de", "2331", "H100 PCIe", "hopper", "pcie", "standalone"),
    Product("10de", "2321", "H100 NVL", "hopper", "pcie", "standalone"),
    Product("10de", "2324", "H800", "hopper", "sxm5", "nvswitch_gpu"),
    Product("10de", "2322", "H800 PCIe", "hopper", "pcie", "standalone"),
    Product("10de", "2329", "H20", "hopper", "sxm5", "nvswitch_gpu"),
    Product("10de", "2335", "H200", "hopper", "sxm5", "nvswitch_gpu"),
    Product("10de", "233b", "H200 NVL", "hopper", "pcie", "standalone"),
    Product("10de", "2342", "GH200 480GB", "hopper", "superchip", "standalone"),
    Product("10de", "2348", "GH200 144G HBM3e", "hopper", "superchip", "standalone"),
    # Blackwell
    Product("10de", "29bc", "B100", "blackwell", "sxm6", "nvlink5_gpu"),
    Product("10de", "2901", "B200", "blackwell", "sxm6", "nvlink5_gpu"),
    Product("10de", "3182", "B300 SXM6 AC", "blackwell", "sxm6", "nvlink5_gpu"),
    Product("10de", "2941", "GB200", "blackwell", "superchip", "mnnvl_gpu"),
    Product("10de", "31c2", "GB300", "blackwell", "superchip", "mnnvl_gpu"),
    Product("10de", "31c3", "GB300", "blackwell", "superchip", "mnnvl_gpu"),
    # Ada (consumer)
    Product("10de", "2684", "GeForce RTX 4090", "ada", "pcie", "standalone"),
    Product("10de", "26b9", "L40S", "ada", "pcie", "standalone"),
    # NVSwitch chips
    Product("10de", "1ac1", "NVSwitch (gen 1)", "nvswitch1", "baseboard", "nvswitch"),
    Product("10de", "1ac2", "NVSwitch (gen 1)", "nvswitch1", "baseboard", "nvswitch"),
    Product("10de", "1af1", "NVSwitch (gen 2)", "nvswitch2", "baseboard", "nvswitch"),
    Product("10de", "22a3", "NVSwitch (gen 3)", "nvswitch3", "baseboard", "nvswitch"),
    # ConnectX
    Product("15b3", "1021", "ConnectX-7", "connectx7", "pcie", "lpf_capable"),
    Product("15b3", "1023", "ConnectX-8", "connectx8", "pcie", "lpf_capable"),
)

PRODUCTS: dict[tuple[str, str], Product] = {(p.vendor, p.device_id): p for p in _ROWS}


def lookup(vendor: int, device: int) -> Product | None:
    """The product for a PCI vendor/device pair (ints), or None when not in the table."""
    return PRODUCTS.get((f"{vendor:04x}", f"{device:04x}"))


def name_of(vendor: int, device: int) -> str:
    """Product name, or ``Device <vendor>:<device>`` when unknown."""
    product = lookup(vendor, device)
    return product.name if product else f"Device {vendor:04x}:{device:04x}"

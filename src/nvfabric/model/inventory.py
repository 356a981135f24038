"""The inventory: an immutable snapshot of what a node's sysfs/procfs say about its fabric.

Values only; :func:`nvfabric.facts.inventory.collect` builds one from a root directory and
:func:`nvfabric.rules.plan.plan` reads it without touching the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nvfabric.model.vpd import Vpd

#: PCI vendor IDs (PCI-SIG registry, pci.ids).
NVIDIA = 0x10DE
MELLANOX = 0x15B3

#: Capability mask bit IsSMDisabled (InfiniBand Architecture Specification vol. 1,
#: PortInfo.CapabilityMask bit 10; NVIDIA Fabric Manager User Guide, "NVLink 5" section:
#: an LPF port with this bit set cannot host NVLSM).
CAP_MASK_SM_DISABLED = 0x400


@dataclass(frozen=True)
class PciFunction:
    """One PCI function under ``sys/bus/pci/devices``.

    ``address`` is the full domain:bus:device.function (``0000:05:00.0``); ``class_code`` the
    24-bit class/subclass/prog-if (``0x020700``); ``numa_node`` None when the kernel writes -1;
    ``vpd`` the decoded VPD, read only for Mellanox functions (None when absent/unreadable);
    ``vpd_unreadable``: the function has a VPD that could not be read whole (the file exists
    but the read failed, as for a non-root reader of the mode-0600 attribute or a device that
    answers EIO, or the image stops before a Mellanox vendor field): whether it is an LPF is
    unknown, which is not "no SMDL=SW_MNG".
    """

    address: str
    vendor: int
    device: int
    class_code: int
    subsystem_vendor: int = 0
    subsystem_device: int = 0
    driver: str | None = None
    numa_node: int | None = None
    vpd: Vpd | None = None
    vpd_unreadable: bool = False

    @property
    def is_gpu(self) -> bool:
        """NVIDIA display (0x0300) or 3D controller (0x0302)."""
        return self.vendor == NVIDIA and (self.class_code >> 8) in (0x0300, 0x0302)

    @property
    def is_nvswitch(self) -> bool:
        """NVIDIA bridge of class 0x0680 ("Bridge: Other"), as NVSwitch gen 1-3 enumerate."""
        return self.vendor == NVIDIA and (self.class_code >> 8) == 0x0680

    @property
    def sw_mng(self) -> bool:
        """True for a ConnectX LPF: Mellanox VPD vendor field carries ``SMDL=SW_MNG``.

        Source: tests/data/corpus/lspci/dgxb200-cx7-sw_mng-lspci-vvv.txt ([VA] field).
        """
        return (
            self.vendor == MELLANOX
            and self.vpd is not None
            and self.vpd.mellanox_fields().get("SMDL") == "SW_MNG"
        )

    @property
    def lpf_unknown(self) -> bool:
        """A ConnectX function that may be an LPF: its VPD could not be read (see
        ``vpd_unreadable``) and what was read carries no ``SMDL=SW_MNG``."""
        return self.vendor == MELLANOX and self.vpd_unreadable and not self.sw_mng


@dataclass(frozen=True)
class IbPort:
    """One port of an InfiniBand device (``sys/class/infiniband/<dev>/ports/<n>``).

    ``guid`` is ``0x`` plus 16 lower-case hex digits (the last 64 bits of ``gids/0``), ``cap_mask``
    the PortInfo capability mask; each is None when its file is missing or garbled (unknown,
    which is neither a zero GUID nor an empty mask). ``state``/``phys_state`` as the kernel
    writes them (``4: ACTIVE``, ``5: LinkUp``), ``umad`` the ``umadN`` node bound to the port.
    """

    port: int
    guid: str | None
    cap_mask: int | None
    state: str = ""
    phys_state: str = ""
    link_layer: str = ""
    umad: str | None = None

    @property
    def sm_disabled(self) -> bool | None:
        """Capability mask bit 0x400 (IsSMDisabled) is set; None when the mask is unknown."""
        return None if self.cap_mask is None else bool(self.cap_mask & CAP_MASK_SM_DISABLED)

    @property
    def guid_is_zero(self) -> bool:
        """The GUID was read and is all zeros (an unknown GUID is not zero)."""
        return self.guid is not None and int(self.guid, 16) == 0


@dataclass(frozen=True)
class IbDevice:
    """An InfiniBand device (``mlx5_0``) with its PCI function address and ports."""

    name: str
    pci: str | None
    node_guid: str
    ports: tuple[IbPort, ...] = ()


@dataclass(frozen=True)
class Inventory:
    """Everything the plan needs to know about a node.

    ``arch`` is ``uname -m`` style (x86_64, aarch64); ``driver_version`` the loaded NVIDIA
    kernel module version as printed (``570.148.08``) or None when not loaded; ``modules`` the
    names under ``sys/module``; ``nvswitch_proc_devices`` the entries of
    ``proc/driver/nvidia-nvswitch/devices``; ``imex_major`` the ``nvidia-caps-imex-channels``
    major from ``proc/devices``; ``imex_channels`` the channel numbers under
    ``dev/nvidia-caps-imex-channels``; ``problems`` what could not be read (one line each);
    ``driver_unreadable``: why the driver version could not be read where the module shows
    (a version file that exists but cannot be read or holds no version), None otherwise: with
    ``driver_version`` None, unknown is then not "not loaded".
    """

    root: str
    arch: str
    driver_version: str | None
    modules: frozenset[str]
    pci: tuple[PciFunction, ...]
    infiniband: tuple[IbDevice, ...]
    nvswitch_proc_devices: tuple[str, ...] = ()
    imex_major: int | None = None
    imex_channels: tuple[int, ...] = ()
    os_release: tuple[tuple[str, str], ...] = ()
    problems: tuple[str, ...] = field(default=())
    driver_unreadable: str | None = None

    @property
    def gpus(self) -> tuple[PciFunction, ...]:
        return tuple(f for f in self.pci if f.is_gpu)

    @property
    def nvswitches(self) -> tuple[PciFunction, ...]:
        return tuple(f for f in self.pci if f.is_nvswitch)

    @property
    def lpfs(self) -> tuple[PciFunction, ...]:
        """ConnectX functions whose VPD marks them as NVSwitch management LPFs."""
        return tuple(f for f in self.pci if f.sw_mng)

    def ib_device_for(self, pci_address: str) -> IbDevice | None:
        """The IB device bound to a PCI function, or None (e.g. mlx5_ib not loaded)."""
        for dev in self.infiniband:
            if dev.pci == pci_address:
                return dev
        return None

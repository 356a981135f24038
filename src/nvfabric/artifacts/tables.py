"""Facts about where NVIDIA publishes fabric artifacts: architecture names per artifact kind,
package names per driver branch, components per fabric kind, repository directory names.

Data only, one table per fact, each row with its source. The sources are:

- ``REDIST``: NVIDIA's redistrib manifests (platform keys ``linux-x86_64`` / ``linux-sbsa``),
  tests/data/corpus/redist/cuda-redistrib_{12.8.2,13.0.2,13.1.1}-*.json.
- ``CUDA_REPO``: the CUDA network repositories, ``repos/<distro>/<x86_64|sbsa>/`` (NVIDIA CUDA
  Installation Guide for Linux, "Network Repository Installation"; NVIDIA Driver Installation
  Guide, "Package manager installation").
- ``DEB``: Debian architecture names (dpkg-architecture; Debian ports list): amd64, arm64.
- ``RPM``: RPM architecture names (``rpm --eval %_arch``, as in ``*.x86_64.rpm`` /
  ``*.aarch64.rpm`` file names in the CUDA RPM repositories).
- ``RUN``: the driver installer ``NVIDIA-Linux-<x86_64|aarch64>-<version>.run``
  (https://download.nvidia.com/XFree86/Linux-x86_64/ and Linux-aarch64/ trees).
- ``GDC``: NVIDIA/gpu-driver-container install scripts (rhel9/install.sh, ubuntu22.04/install.sh,
  sles15/Dockerfile): fabricmanager_install, nscq_install, nvsdm_install, imex_install,
  nvlink5_pkgs_install, with their branch thresholds; and its issue #585 (RPM name
  ``nvidia-fabric-manager`` up to R575, ``nvidia-fabricmanager`` from R580).
- ``YUM_PR23``: NVIDIA/yum-packaging-precompiled-kmod PR #23 (2021): RPM rename from
  ``nvidia-fabricmanager-<branch>`` to ``nvidia-fabric-manager``.
- ``APT580``: tests/data/corpus/apt/apt-r580-virtual-package-version-not-found-gdc451.txt: from
  R580 ``nvidia-fabricmanager-580`` is only a virtual package provided by
  ``nvidia-fabricmanager``; tests/data/cases/F05 (``nvidia-fabricmanager-535`` before R580).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Component keys, as the redistrib manifests spell them.
COMPONENTS: tuple[str, ...] = ("fabricmanager", "libnvidia_nscq", "libnvsdm", "nvlsm", "imex")

#: Artifact kinds that name architectures differently.
KINDS: tuple[str, ...] = ("redist", "cuda_repo", "deb", "rpm", "run")

#: (kind, canonical uname -m arch) -> the kind's name. Canonical arches: x86_64, aarch64.
ARCH_NAMES: dict[tuple[str, str], tuple[str, str]] = {
    # (kind, arch): (name, source)
    ("redist", "x86_64"): ("x86_64", "REDIST"),
    ("redist", "aarch64"): ("sbsa", "REDIST"),
    ("cuda_repo", "x86_64"): ("x86_64", "CUDA_REPO"),
    ("cuda_repo", "aarch64"): ("sbsa", "CUDA_REPO"),
    ("deb", "x86_64"): ("amd64", "DEB"),
    ("deb", "aarch64"): ("arm64", "DEB"),
    ("rpm", "x86_64"): ("x86_64", "RPM"),
    ("rpm", "aarch64"): ("aarch64", "RPM"),
    ("run", "x86_64"): ("x86_64", "RUN"),
    ("run", "aarch64"): ("aarch64", "RUN"),
}

#: Every spelling seen in the field -> canonical uname -m arch (uname -m, Docker/Go GOARCH,
#: deb, NVIDIA's sbsa, Windows-style x64).
ARCH_ALIASES: dict[str, str] = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x64": "x86_64",
    "x86-64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "sbsa": "aarch64",
    "arm64-sbsa": "aarch64",
}

#: Components each fabric kind needs (DESIGN.md plan; NVIDIA Fabric Manager User Guide:
#: NSCQ for NVSwitch systems, NVLSM and NVSDM for NVLink 5; IMEX guide for GB200 trays).
COMPONENTS_BY_FABRIC: dict[str, tuple[str, ...]] = {
    "none": (),
    "nvswitch": ("fabricmanager", "libnvidia_nscq"),
    "nvlink5": ("fabricmanager", "nvlsm", "libnvsdm", "libnvidia_nscq"),
    "mnnvl": ("imex",),
}

#: Components published for x86_64 only (REDIST: libnvsdm has no linux-sbsa entry in 13.0.2
#: and 13.1.1; GDC: "libnvsdm packages are not available for arm64").
X86_ONLY: frozenset[str] = frozenset({"libnvsdm"})

#: Components versioned on their own calendar, not the driver's (REDIST: nvlsm 2025.06.6 in
#: the 580.95.05 release, 2025.06.10 in 590.48.01).
OWN_VERSION: frozenset[str] = frozenset({"nvlsm"})


@dataclass(frozen=True)
class NameRule:
    """From driver version ``since`` (inclusive, numeric fields) on, component ``component``
    is packaged as ``pattern`` (``{branch}`` is the driver's first field) in ``kind``
    (``deb`` or ``rpm``); ``pattern`` None means not packaged from there on."""

    kind: str
    component: str
    since: tuple[int, ...]
    pattern: str | None
    source: str


#: Package naming by branch. For a kind and component, the rule with the greatest ``since``
#: not above the driver version applies.
PACKAGE_NAMES: tuple[NameRule, ...] = (
    # deb (CUDA APT repositories)
    NameRule("deb", "fabricmanager", (0,), "nvidia-fabricmanager-{branch}", "APT580, GDC"),
    NameRule("deb", "fabricmanager", (580,), "nvidia-fabricmanager", "APT580, GDC"),
    NameRule("deb", "libnvidia_nscq", (0,), "libnvidia-nscq-{branch}", "GDC"),
    NameRule("deb", "libnvidia_nscq", (580,), "libnvidia-nscq", "GDC"),
    NameRule("deb", "libnvsdm", (0,), None, "GDC"),
    NameRule("deb", "libnvsdm", (570,), "libnvsdm-{branch}", "GDC, APT580"),
    NameRule("deb", "libnvsdm", (580,), "libnvsdm", "GDC, APT580"),
    NameRule("deb", "imex", (0,), None, "GDC"),
    NameRule("deb", "imex", (550,), "nvidia-imex-{branch}", "GDC"),
    NameRule("deb", "imex", (580,), "nvidia-imex", "GDC"),
    NameRule("deb", "nvlsm", (0,), "nvlsm", "GDC"),
    # rpm (CUDA RPM repositories)
    NameRule("rpm", "fabricmanager", (0,), "nvidia-fabricmanager-{branch}", "YUM_PR23"),
    NameRule("rpm", "fabricmanager", (460, 91), "nvidia-fabric-manager", "YUM_PR23, GDC"),
    NameRule("rpm", "fabricmanager", (580,), "nvidia-fabricmanager", "GDC"),
    NameRule("rpm", "libnvidia_nscq", (0,), "libnvidia-nscq-{branch}", "GDC"),
    NameRule("rpm", "libnvidia_nscq", (580,), "libnvidia-nscq", "GDC"),
    NameRule("rpm", "libnvsdm", (0,), None, "GDC"),
    NameRule("rpm", "libnvsdm", (570,), "libnvsdm-{branch}", "GDC"),
    NameRule("rpm", "libnvsdm", (580,), "libnvsdm", "GDC"),
    NameRule("rpm", "imex", (0,), None, "GDC"),
    NameRule("rpm", "imex", (550,), "nvidia-imex-{branch}", "GDC"),
    NameRule("rpm", "imex", (580,), "nvidia-imex", "GDC"),
    NameRule("rpm", "nvlsm", (0,), "nvlsm", "GDC"),
)

#: Default base of the driver redist manifests ``redistrib_<driver version>.json``.
REDIST_BASE = "https://developer.download.nvidia.com/compute/nvidia-driver/redist/"
#: Default base of the CUDA repositories: ``<base><distro>/<cuda_repo arch>/``.
CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos/"

#: os-release ID -> (CUDA repository distro prefix, how VERSION_ID is used: "nodot" keeps
#: every field without the dots (ubuntu 24.04 -> ubuntu2404), "major" the first field
#: (rhel 9.4 -> rhel9)). Source: CUDA_REPO directory names (ubuntu2204, ubuntu2404, debian12,
#: rhel8, rhel9, rhel10, sles15, opensuse15, amzn2023, fedora41, azl3, kylin10).
DISTROS: dict[str, tuple[str, str]] = {
    "ubuntu": ("ubuntu", "nodot"),
    "debian": ("debian", "major"),
    "rhel": ("rhel", "major"),
    "rocky": ("rhel", "major"),
    "almalinux": ("rhel", "major"),
    "centos": ("rhel", "major"),
    "ol": ("rhel", "major"),
    "sles": ("sles", "major"),
    "opensuse-leap": ("opensuse", "major"),
    "amzn": ("amzn", "major"),
    "fedora": ("fedora", "major"),
    "azurelinux": ("azl", "major"),
    "kylin": ("kylin", "major"),
}

#: Components never fetched or installed on a fabric kind, whatever ``--components`` asks.
#: mnnvl (GB200/GB300 compute trays): the NVLink switches sit in the switch trays, whose own
#: fabric manager and NVLSM run on NVIDIA's NMX controller, so a compute tray runs IMEX only
#: (NVIDIA IMEX guide, "Overview"; NVIDIA Fabric Manager User Guide, "GB200 NVL": no FM on the
#: compute tray); Azure/aks-gpu never fetches or installs fabric manager on arm64 (download.sh,
#: install.sh).
NEVER_FOR_FABRIC: dict[str, frozenset[str]] = {
    "mnnvl": frozenset({"fabricmanager", "libnvidia_nscq", "libnvsdm", "nvlsm"}),
}

#: Packages whose files the runfile driver (``NVIDIA-Linux-<arch>-<version>.run``) installs as
#: plain files, owned by no package: package name -> the file that stands for it.
#: Sources: NVIDIA driver README, "Installing the NVIDIA Driver" / "What does the installer
#: install" (``/usr/bin/nvidia-modprobe`` setuid root, ``/usr/bin/nvidia-persistenced``);
#: NVIDIA/gpu-driver-container PR #899 (``nvidia-modprobe`` is a dependency of ``nvidia-imex``;
#: apt pulls a packaged one of another version); Azure/azhpc-images PR #579 (nvidia-imex depends
#: on nvidia-modprobe from 580.159.04).
RUNFILE_PROVIDES: dict[str, str] = {
    "nvidia-modprobe": "/usr/bin/nvidia-modprobe",
    "nvidia-persistenced": "/usr/bin/nvidia-persistenced",
}

#: Where the runfile puts the driver's libraries (its ``--utility-libdir`` default is the
#: distribution's multiarch directory; ``/usr/lib64`` on RPM systems) and where Azure/aks-gpu
#: relocates them (config.sh ``GPU_DEST=/usr/local/nvidia``, install.sh ``${GPU_DEST}/lib64``).
RUNFILE_LIB_DIRS: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
)

#: The library whose file name carries the driver version (``libnvidia-ml.so.580.95.05``):
#: every driver install, runfile or package, ships it (NVML; NVIDIA driver README,
#: "Installed Components").
DRIVER_VERSION_LIB = "libnvidia-ml.so."

#: Canonical arch -> Debian multiarch tuple, the library directory name of the distribution
#: the vendor's .deb packages install into (``/usr/lib/<tuple>``). Source: DEB (Debian
#: multiarch tuples, dpkg-architecture -qDEB_HOST_MULTIARCH), as RUNFILE_LIB_DIRS above.
MULTIARCH: dict[str, str] = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}

#: Where each directory of a redist archive (its top directory stripped) goes when the archive
#: is laid out at the vendor paths (``install --from DIR --layout vendor``, an image being
#: built): component -> ((archive directory, host directory), ...); ``{multiarch}`` is
#: :data:`MULTIARCH`'s tuple of the target architecture, never the build host's. Members in
#: no listed directory (``include/``, ``systemd/``, the licence and docs) are not laid out.
#: Sources: siderolabs/extensions nvidia-gpu/nvidia-fabricmanager/production/pkg.yaml
#: ("SIDERO": fabric manager's ``bin/``, ``lib/``, ``etc/fabricmanager.cfg`` and
#: ``share/nvidia/nvswitch/*`` into ``usr/bin``, ``usr/lib``, ``usr/share/nvidia/nvswitch``;
#: NVLSM's ``sbin/nvlsm``, ``lib/libgrpc_mgr.so`` and ``share/nvidia/nvlsm/*.conf`` into
#: ``opt/nvidia/nvlsm/sbin``, ``opt/nvidia/nvlsm/lib``, ``usr/share/nvidia/nvlsm``);
#: NixOS/nixpkgs pkgs/os-specific/linux/nvidia-x11/fabricmanager.nix (the fabric manager
#: archive's top directories: bin, etc, systemd, share/nvidia, include, lib); NVIDIA Fabric
#: Manager User Guide, "Installation" (the package's /usr/bin/nv-fabricmanager,
#: /usr/share/nvidia/nvswitch/fabricmanager.cfg and topology files); NVIDIA IMEX guide,
#: "Installation" (/usr/bin/nvidia-imex, /usr/bin/nvidia-imex-ctl, /etc/nvidia-imex/); the
#: NSCQ and NVSDM libraries where the distribution's .debs put libraries (DEB).
VENDOR_LAYOUT: dict[str, tuple[tuple[str, str], ...]] = {
    "fabricmanager": (("bin", "/usr/bin"), ("lib", "/usr/lib/{multiarch}"),
                      ("etc", "/usr/share/nvidia/nvswitch"),
                      ("share/nvidia/nvswitch", "/usr/share/nvidia/nvswitch")),
    "nvlsm": (("sbin", "/opt/nvidia/nvlsm/sbin"), ("lib", "/opt/nvidia/nvlsm/lib"),
              ("share/nvidia/nvlsm", "/usr/share/nvidia/nvlsm")),
    "libnvidia_nscq": (("lib", "/usr/lib/{multiarch}"),),
    "libnvsdm": (("lib", "/usr/lib/{multiarch}"),),
    "imex": (("bin", "/usr/bin"), ("etc", "/etc"), ("lib", "/usr/lib/{multiarch}")),
}

"""Facts about IMEX on multi-node NVLink trays, one place each, with the source of every row.

Paths are host paths (resolved under a root by the host layer); versions are driver versions
as the kernel module prints them.
"""

from __future__ import annotations

#: Default IMEX config and node list as the nvidia-imex package installs them.
#: Source: NVIDIA IMEX guide, "IMEX Service Config Options" (IMEX_NODE_CONFIG_FILE default);
#: tests/data/corpus/imex/k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg.
CONFIG_PATH = "/etc/nvidia-imex/config.cfg"
NODES_CONFIG_PATH = "/etc/nvidia-imex/nodes_config.cfg"

#: Binaries of the nvidia-imex package. Source: NVIDIA IMEX guide, "Getting Started with IMEX";
#: tests/data/corpus/configs/aws-parallelcluster-nvidia-imex.service.erb (ExecStart).
IMEX_BINARY = "/usr/bin/nvidia-imex"
IMEX_CTL_BINARY = "/usr/bin/nvidia-imex-ctl"

#: The exact fix for a DRA node whose host unit is enabled. Source: NVIDIA GPU Operator,
#: "NVIDIA DRA Driver for GPUs", ComputeDomain prerequisites (NVIDIA/cloud-native-docs#453).
DRA_HOST_UNIT_FIX = (
    "systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service"
)

#: The command socket the DRA driver's kubelet plugin queries in imex.mode=hostManaged
#: (``nvidia-imex-ctl -q --u=<socket>`` at claim prepare; Helm value
#: ``resources.computeDomains.imex.hostSocketPath``, plugin flag ``--imex-host-socket-path`` /
#: ``IMEX_HOST_SOCKET_PATH``, relative to its driver root). Source: kubernetes-sigs/
#: dra-driver-nvidia-gpu, cmd/compute-domain-kubelet-plugin/main.go
#: (defaultIMEXHostSocketPath) and site/content/docs/prerequisites.md, "Host-managed IMEX".
DRA_HOST_SOCKET = "/etc/nvidia-imex/imex_ctrl.sock"
#: The kubelet plugin's program name and its kernel ``comm`` (15 characters).
DRA_KUBELET_PLUGIN = "compute-domain-kubelet-plugin"

#: State directories of NVIDIA's DRA driver kubelet plugin for ComputeDomains (one IMEX
#: daemon per ComputeDomain, run by the driver). Source: NVIDIA/k8s-dra-driver-gpu,
#: cmd/compute-domain-kubelet-plugin (``/var/lib/kubelet/plugins/compute-domain.nvidia.com``,
#: its ``checkpoint.json`` and ``domains/<uid>``).
DRA_PLUGIN_DIRS = ("/var/lib/kubelet/plugins/compute-domain.nvidia.com",)

#: Where slurm.conf is when nothing names it (slurmd's ``-f``, ``SLURM_CONF`` in its
#: environment or unit): the compiled-in default (``DEFAULT_SLURM_CONF``, ``$sysconfdir/
#: slurm.conf``) of the common builds, in the order nvfabric tries them. Sources: slurm.conf(5)
#: (the file location is set at build time); SchedMD slurm.spec (``--sysconfdir=/etc/slurm``);
#: Debian slurm-wlm 22.05 (/etc/slurm) and before 20.11 (/etc/slurm-llnl); a source build's
#: default prefix /usr/local (``/usr/local/etc``) or ``--sysconfdir=/usr/local/etc/slurm``;
#: AWS ParallelCluster (``--prefix=/opt/slurm``: /opt/slurm/etc/slurm.conf, case I01).
SLURM_CONF_PATHS = (
    ("/etc/slurm/slurm.conf", "the RPM and Debian packages"),
    ("/etc/slurm-llnl/slurm.conf", "Debian and Ubuntu packages before 20.11"),
    ("/usr/local/etc/slurm.conf", "a source build with the default prefix"),
    ("/usr/local/etc/slurm/slurm.conf", "a source build with --sysconfdir=/usr/local/etc/slurm"),
    ("/opt/slurm/etc/slurm.conf", "AWS ParallelCluster (--prefix=/opt/slurm)"),
)

#: Where a configless slurmd keeps the slurm.conf it pulled: ``/run/slurm/conf``, a link
#: slurmd makes to ``<SlurmdSpoolDir>/conf-cache``, and that cache under the spool
#: directories of the common builds (Slurm's default /var/spool/slurmd; Debian's
#: /var/lib/slurm/slurmd; /var/spool/slurm/d of the SchedMD example). Source: SchedMD
#: doc/html/configless_slurm.shtml, "Initial Testing".
SLURM_CONFIGLESS_PATHS = (
    "/run/slurm/conf/slurm.conf",
    "/var/spool/slurmd/conf-cache/slurm.conf",
    "/var/lib/slurm/slurmd/conf-cache/slurm.conf",
    "/var/spool/slurm/d/conf-cache/slurm.conf",
)

#: slurmd's systemd unit and the environment files it reads (SchedMD etc/slurmd.service.in:
#: ``EnvironmentFile=-/etc/sysconfig/slurmd``, ``-/etc/default/slurmd``; ``$SLURMD_OPTIONS``).
SLURMD_UNIT = "slurmd.service"

#: The settings file of nvfabric's Slurm prolog, and the state directories of the runs it and
#: nvfabric.service start (packaging/slurm/nvfabric-imex-prolog, packaging/systemd).
NVFABRIC_SLURM_DEFAULTS = "/etc/default/nvfabric-slurm"
NVFABRIC_STATE_DIR = "/run/nvfabric"
NVFABRIC_SLURM_STATE_DIR = "/run/nvfabric-slurm"
#: What a live ``nvfabric run`` on a tray records in its state directory from its start (before
#: the ready file): the owner it runs IMEX as (``host``, ``dra-host``) and the command socket
#: its daemon serves for ``dra-host`` (JSON ``{"owner", "socket"}``), so that ``status`` and
#: ``imex owner`` answer as the run decided while its daemon is not READY yet.
RUN_OWNER_FILE = "imex/owner.json"

#: Bounds of the prolog follower: files read in all (scripts and the programs they run),
#: hand-offs deep, bytes of one script, bytes of all scripts, matches of one glob. slurmd runs
#: every file a Prolog glob lists (SchedMD src/plugins/prep/script/prep_script_slurmd.c), and
#: sites keep large prolog.d trees, so the counts are generous: reading is linear, about 1 s
#: for 4,000 small scripts here. Past a bound the rest is not read, and said: the owner is
#: then unknown, never "none".
SLURM_MAX_SCRIPTS = 4096
SLURM_MAX_DEPTH = 8
SLURM_MAX_SCRIPT_BYTES = 1 << 20
SLURM_MAX_TOTAL_BYTES = 16 << 20
SLURM_MAX_GLOB = 4096

#: Slurm's own IMEX channel plugin (slurmctld gives each job a channel, slurmstepd makes its
#: device in the job's mount namespace, slurmd empties /dev/nvidia-caps-imex-channels at
#: start). Sources: Slurm 24.05 NEWS; SchedMD src/plugins/switch/nvidia_imex (imex_device.c,
#: switch_nvidia_imex.c); slurm.conf(5) SwitchType.
SLURM_SWITCH_IMEX = "switch/nvidia_imex"

#: IMEX channel character device (its major in /proc/devices) and node directory.
#: Source: NVIDIA IMEX guide, "IMEX Channels"; tests/data/corpus/proc/
#: proc-devices-imex-channels-excerpt-dra304.txt.
CHANNEL_DEVICE_NAME = "nvidia-caps-imex-channels"
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
#: Other NVIDIA capability nodes (where a wrong IMEX major was once created).
#: Source: tests/data/corpus/proc/ls-dev-nvidia-caps-dra304.txt.
CAPS_DIR = "/dev/nvidia-caps"

#: Mode NVIDIA documents for channel nodes (``crw-rw-rw-``). Source: NVIDIA IMEX guide,
#: "IMEX Channels", default channel creation.
CHANNEL_MODE = 0o666

#: Module parameters as /proc/driver/nvidia/params prints them (``Name: value``).
#: Source: open-gpu-kernel-modules kernel-open/nvidia/nv-reg.h (NVreg_ImexChannelCount,
#: NVreg_CreateImexChannel0); CUDA Programming Guide, "IMEX channels" (the driver creates
#: channel0 itself when NVreg_CreateImexChannel0 is set).
PARAMS_PATH = "/proc/driver/nvidia/params"
PARAM_CHANNEL_COUNT = "ImexChannelCount"
PARAM_CREATE_CHANNEL0 = "CreateImexChannel0"

#: Persistent fix for channel0: the module parameter in a modprobe.d file (host path), then
#: rebuild the initramfs so it applies at the next module load. Source: CUDA Programming
#: Guide, "IMEX channels".
CHANNEL0_OPTION = "options nvidia NVreg_CreateImexChannel0=1"
CHANNEL0_MODPROBE_FILE = "/etc/modprobe.d/nvidia-imex.conf"

#: First driver whose IMEX accepts host names (not only addresses) in nodes_config.cfg.
#: Source: the operators' statement of the rule, consistent with the captures
#: tests/data/corpus/imex/imex-580.159.04-daemon-startup-hostnames-dra1465.log (580.159.04:
#: "Treating node config entry ... as a host name") and
#: imex-570.124.06-nodes-config-echo-and-startup-dra298.log (570.124.06: addresses only).
HOSTNAMES_MIN_DRIVER = "570.158.01"

#: Compute trays in one NVLink domain, by product. Source: NVIDIA GB200 NVL72 / GB300 NVL72
#: product pages (72 GPUs in 18 compute trays of 4 GPUs); P6e-GB200 capture tests/data/corpus/
#: imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt (18 nodes).
DOMAIN_SIZE_NVL72 = 18

#: Hard timeout for every nvidia-imex-ctl call: the tool is known to hang when the daemon
#: does not answer (it has no timeout of its own for -q/-N). Source: NVIDIA IMEX guide,
#: "The nvidia-imex-ctl Tool" (-t applies to -s only).
CTL_TIMEOUT_S = 5.0
#: The range every option of that timeout takes (``run --imex-ctl-timeout``, ``imex domain
#: --timeout``): one kind of timeout, one range.
CTL_TIMEOUT_RANGE_S = (0.05, 600.0)

#: The all-zero ClusterUUID: GPUs not attached to a multi-node fabric. Source: NVML
#: nvmlGpuFabricInfo_t (clusterUuid zero until registration completes).
ZERO_UUID = "00000000-0000-0000-0000-000000000000"

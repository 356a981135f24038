"""``nvidia-imex``: the IMEX daemon of a multi-node NVLink compute tray (GB200/GB300), which
lets GPUs of different trays import and export memory over the NVLink fabric.

Vendor layout (NVIDIA IMEX guide, "Getting Started with IMEX" and "IMEX Service Command
Service"; ../shared/corpus/configs/aws-parallelcluster-nvidia-imex.service.erb):
``/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg``, queried with ``/usr/bin/nvidia-imex-ctl``.

Under nvfabric the daemon runs in the foreground (DAEMONIZE=0 in the effective config, see
:mod:`nvfabric.rules.imex.config`) with its log on stderr. It is ready when
``nvidia-imex-ctl -c <cfg>
-q`` prints READY; every ctl call runs under a hard timeout (the tool is known to hang).
``nvidia-imex --version`` prints ``IMEX version is: 570.172``; the daemon checks the loaded
driver's version itself at start and aborts on a mismatch (IMEX guide, "Other NVIDIA Software
Packages"), so ``run`` does not probe it beforehand; :func:`parse_version` reads either line
(from :func:`nvfabric.bringup.spec.version_output` or the log).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvfabric.bringup.spec import ReadyProbe, ServiceSpec
from nvfabric.model.hostpath import check as check_path
from nvfabric.rules.imex.tables import CONFIG_PATH, IMEX_BINARY, IMEX_CTL_BINARY, NODES_CONFIG_PATH

BINARY = IMEX_BINARY
CTL_BINARY = IMEX_CTL_BINARY
CONFIG = CONFIG_PATH
NODES_CONFIG = NODES_CONFIG_PATH

#: ``nvidia-imex --version`` ("IMEX version is: X") and the startup banner ("IMEX version X is
#: running"): capture ../shared/corpus/imex/imex-570.00-daemon-startup-dra289.log.
_VERSION = re.compile(r"IMEX version(?: is)?:?\s+(\d+\.\d+(?:\.\d+)?)")


#: How the supervisor speaks of IMEX readiness: ``nvidia-imex-ctl -q`` prints READY once the
#: daemon has connected to the nodes of its node list (IMEX_WAIT_FOR_QUORUM; NVIDIA IMEX guide,
#: "IMEX Service Config Options" and "The nvidia-imex-ctl Tool"); until then CUDA cannot import
#: memory exported by other trays.
IMEX_READY = ReadyProbe(
    label="IMEX",
    waiting="not READY yet",
    stuck_code="imex_not_ready",
    stuck_message="the IMEX daemon has not reported READY {timeout} s after it started "
    "(last answer: {last}); CUDA cannot import memory from other trays until it does; not "
    "reporting ready",
    stuck_hint="NOT READY: it has not connected to the IMEX peers of its node list: every tray "
    "of the list (IMEX_NODE_CONFIG_FILE) must run nvidia-imex with the same list and reach the "
    "others on SERVER_PORT (50000); `nvfabric imex domain` names the unreachable peers. No "
    "answer: nvidia-imex-ctl hangs while the daemon does not answer; look at the daemon's "
    "lines above",
)


@dataclass(frozen=True)
class ImexPaths:
    """Where IMEX lives, host view. ``shipped_config`` is read, never edited by ``run``; the
    effective config and node list nvfabric writes live in its state directory."""

    binary: str = BINARY
    ctl: str = CTL_BINARY
    shipped_config: str = CONFIG
    nodes_config: str = NODES_CONFIG


def argv(binary: str, config: str) -> tuple[str, ...]:
    """``nvidia-imex -c <config>``; ValueError on a bad path."""
    return (check_path(binary, "nvidia-imex binary"), "-c", check_path(config, "IMEX config"))


def spec(binary: str, config: str, grace_s: float = 10.0) -> ServiceSpec:
    """IMEX as a service of the unit. Ready when ``nvidia-imex-ctl -q`` prints READY: the
    supervisor's readiness probe (``ready_gpus``; the probe the mnnvl path gives it is
    :func:`nvfabric.facts.imexready.readiness_probe`, each ctl call under a hard timeout), logged
    and timed out in IMEX's terms (:data:`IMEX_READY`: ``imex_not_ready``)."""
    return ServiceSpec(name="imex", argv=argv(binary, config), ready_gpus=True,
                       ready_probe=IMEX_READY, grace_s=grace_s)


def parse_version(text: str) -> str | None:
    """The version from ``nvidia-imex --version`` output or its startup banner, or None."""
    match = _VERSION.search(text)
    return match.group(1) if match else None

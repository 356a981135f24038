"""What ran on the reporter's node against what its plan says should run. Pure.

Rules (NVIDIA Fabric Manager User Guide: NVLink 5 systems run NVLSM on the LPF management
port before fabric manager, and fabric manager gets that port's GUID; GB200/GB300 compute trays
run IMEX and no local fabric manager; fabric manager and IMEX must be the driver's exact
version; two IMEX daemons on one node fail with NV_ERR_IN_USE, see nvfabric.rules.imex.owner):

- NVLink 5 node, fabric manager active, no NVLSM process in its unit and no ``-g GUID`` on
  its command line: ``nvlsm_missing`` (error); a ``-g GUID`` that is no LPF port GUID of the
  node (ibstat's): ``management_port_mismatch`` (error);
- GB200/GB300 tray (``mnnvl``), fabric manager unit active or enabled: ``fm_on_compute_tray``;
  a node whose plan is ``none`` with the unit enabled or failed: ``fm_not_applicable`` (info);
- IMEX host unit active or enabled and the catalogue's ``imex_session_in_use`` (NV_ERR_IN_USE)
  in a log of the report:
  ``imex_owner_conflict`` (error);
- fabric manager or IMEX version (from their log's ``... version X is running`` line or the
  report's versions table) not the driver's, compared per numeric field:
  ``version_mismatch`` (error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nvfabric.model.findings import Finding
from nvfabric.model.versions import same
from nvfabric.model.vocab import FabricKind
from nvfabric.rules.imex.tables import DRA_HOST_UNIT_FIX
from nvfabric.triage.units import UnitState


@dataclass(frozen=True)
class Ran:
    """Evidence of what ran, from the report. ``fm``/``imex``: unit states (None: the
    report has no ``systemctl status`` of it); ``versions``: component -> versions seen
    (``fabricmanager``, ``imex``); ``in_use``: log sections with NV_ERR_IN_USE."""

    fm: UnitState | None = None
    imex: UnitState | None = None
    versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    in_use: tuple[str, ...] = ()


GUID = re.compile(r"0x[0-9a-fA-F]{16}")
#: The finding field that carries each component's version (``fm_version`` as diagnose uses).
VERSION_KEYS = {"fabricmanager": "fm_version", "imex": "imex_version"}
FM_SECTION = "systemctl status nvidia-fabricmanager.service"
IMEX_SECTION = "systemctl status nvidia-imex.service"


def _with(f: Finding, section: str) -> Finding:
    return Finding(f.code, f.severity, f.message, f.hint, {**f.fields, "section": section})


def nvlsm_running(fm: UnitState) -> bool:
    """NVLSM runs beside fabric manager: an ``nvlsm`` process in fabric manager's unit (the
    vendor start script starts both), or fabric manager started with ``-g`` / ``--guid``."""
    for cmd in fm.processes:
        words = cmd.split()
        prog = words[0].rsplit("/", 1)[-1] if words else ""
        if prog in ("nvlsm", "opensm"):
            return True
        if prog.startswith("nv-fabricmanage") and ("-g" in words or "--guid" in words):
            return True
    return False


def fm_guids(fm: UnitState) -> list[str]:
    """The ``-g`` / ``--guid`` values of fabric manager's command lines in its unit, as
    0x + 16 lower-case hex digits (values that are no GUID are left out)."""
    out = []
    for cmd in fm.processes:
        words = cmd.split()
        prog = words[0].rsplit("/", 1)[-1] if words else ""
        if not prog.startswith("nv-fabricmanage"):
            continue
        for flag, value in zip(words, words[1:], strict=False):
            if flag in ("-g", "--guid") and GUID.fullmatch(value):
                out.append(f"0x{int(value, 16):016x}")
    return out


def check(fabric: FabricKind | None, driver_version: str | None, ran: Ran,
          lpf_guids: tuple[str, ...] | None = None) -> list[Finding]:
    """Findings of what ran against the plan's ``fabric`` (None: unknown, only the version
    rules apply). ``lpf_guids``: the port GUIDs of the node's LPFs (None: unknown, e.g. no
    ibstat in the report)."""
    out: list[Finding] = []
    fm = ran.fm
    if fm is not None and fm.installed:
        if fabric == "nvlink5" and lpf_guids is not None:
            out += _guid_findings(fm, lpf_guids)
        out += _fm_unit_findings(fabric, fm)
    out += _imex_findings(ran)
    if driver_version:
        out += _version_findings(driver_version, ran)
    return out


def _guid_findings(fm: UnitState, lpf_guids: tuple[str, ...]) -> list[Finding]:
    """NVLink 5: every ``-g`` GUID fabric manager runs with is one of the node's LPF ports."""
    out: list[Finding] = []
    for g in fm_guids(fm):
        if g not in lpf_guids:
            out.append(_with(Finding(
                "management_port_mismatch", "error",
                f"fabric manager runs with -g {g}, which is no LPF port of this node ("
                + (", ".join(lpf_guids) or "no LPF port") + ")",
                "the GUID comes from another node or an old configuration: NVLSM and "
                "fabric manager must both get the GUID of one of this node's LPF ports "
                "(`nvfabric plan` names it); fix FM_SM_MGMT_PORT_GUID or let `nvfabric "
                "run` pass it",
                {"guid": g, "lpf_guids": list(lpf_guids)}), FM_SECTION))
    return out


def _fm_unit_findings(fabric: FabricKind | None, fm: UnitState) -> list[Finding]:
    """The fabric manager unit against the fabric kind: NVLSM beside it on NVLink 5, none on
    a compute tray, nothing to manage without a fabric."""
    out: list[Finding] = []
    if fabric == "nvlink5" and fm.running and not nvlsm_running(fm):
        out.append(_with(Finding(
            "nvlsm_missing", "error",
            "fabric manager is active on an NVLink 5 baseboard without NVLSM: no nvlsm "
            "process in its unit and no -g <port GUID> on its command line",
            "on B200/B300 NVLSM must run on the LPF management port first and fabric "
            "manager needs -g <that GUID>: check `nvfabric plan` on the node (mlx5_ib and "
            "ib_umad loaded, LPF port found), then `nvfabric run`",
            {"processes": list(fm.processes)}), FM_SECTION))
    if fabric == "mnnvl" and (fm.running or fm.enabled):
        out.append(_with(Finding(
            "fm_on_compute_tray", "warning",
            "the fabric manager unit is "
            + ("active" if fm.running else "enabled")
            + " on a GB200/GB300 compute tray, which runs IMEX and no local fabric manager",
            "disable it on compute trays: `systemctl disable --now "
            "nvidia-fabricmanager.service`; the NVLink switch trays run the fabric manager",
            {"active": fm.active, "enabled": fm.enabled}), FM_SECTION))
    if fabric == "none" and (fm.enabled or fm.active == "failed"):
        out.append(_with(Finding(
            "fm_not_applicable", "info",
            f"the fabric manager unit is {fm.active or 'enabled'} on a node with no NVLink "
            "fabric to manage",
            "nothing is broken: disable the unit (`systemctl disable --now "
            "nvidia-fabricmanager`)",
            {"active": fm.active, "enabled": fm.enabled}), FM_SECTION))
    return out


def _imex_findings(ran: Ran) -> list[Finding]:
    """The host IMEX unit running while IMEX failed with NV_ERR_IN_USE: two owners."""
    out: list[Finding] = []
    imex = ran.imex
    if imex is not None and imex.installed and (imex.running or imex.enabled) and ran.in_use:
        out.append(_with(Finding(
            "imex_owner_conflict", "error",
            "nvidia-imex.service is " + ("active" if imex.running else "enabled")
            + " and IMEX failed with NV_ERR_IN_USE (in " + ", ".join(ran.in_use)
            + "): a second IMEX daemon (the DRA driver's, or another start) holds the session",
            f"one owner per node; on DRA nodes disable and mask the host unit: "
            f"{DRA_HOST_UNIT_FIX}",
            {"evidence": list(ran.in_use)}), IMEX_SECTION))
    return out


def _version_findings(driver_version: str, ran: Ran) -> list[Finding]:
    """Fabric manager and IMEX versions seen in the report against the loaded driver's."""
    out: list[Finding] = []
    for component, label in (("fabricmanager", "fabric manager"), ("imex", "IMEX")):
        for version in ran.versions.get(component, ()):
            if not same(version, driver_version):
                out.append(_with(Finding(
                    "version_mismatch", "error",
                    f"{label} {version} is not the loaded NVIDIA driver {driver_version}",
                    f"{label} must be exactly the driver's version: install {label} "
                    f"{driver_version} (or load driver {version}); `nvfabric fetch` finds "
                    "the matching package",
                    {"component": component, VERSION_KEYS[component]: version,
                     "driver_version": driver_version}),
                    "versions (fabric manager / IMEX log, versions table)"))
    return out

"""From what a report holds to one triage: the node's facts, its plan, the verdict, the
diagnosis of every log section, what ran against what should have, and what was missing.
Pure: a :class:`nvfabric.triage.collect.Collected` in, a :class:`Triage` out.

The facts are the inventory's own values (:class:`nvfabric.model.inventory.Inventory`), so the
existing :func:`nvfabric.rules.plan.plan` decides; the verdict is the existing
:func:`nvfabric.rules.verdict.verdict` on the ``nvidia-smi --query`` section read by
:mod:`nvfabric.facts.smi`; the diagnosis is the existing catalogue
(:mod:`nvfabric.rules.diagnose`). Where the report lacks a fact the live node would give, it says so
in ``reasons`` (modules inferred from bound drivers when ``/proc/modules`` is missing, IB
devices paired with PCI functions by order); rebuilding the facts is
:mod:`nvfabric.triage.rebuild`, this module judges them section by section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nvfabric.facts.imex.ctl import parse_text as parse_ctl
from nvfabric.model.findings import Finding
from nvfabric.model.inventory import IbDevice, Inventory
from nvfabric.model.services import ServiceState
from nvfabric.model.vocab import FabricKind
from nvfabric.rules.plan import SERVICES_BY_FABRIC, Plan, plan
from nvfabric.rules.verdict import Inputs, Verdict, verdict
from nvfabric.triage.checks import Ran, check, nvlsm_running
from nvfabric.triage.collect import EXPECTED, Collected
from nvfabric.triage.rebuild import Rebuilt, fm_table_version, rebuild
from nvfabric.triage.units import UnitState
from nvfabric.triage.units import parse as parse_unit

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
#: The "section" of a plan blocker that only says lspci could not read the ConnectX VPD.
VPD_UNREADABLE = "lspci -nnDvvvxxxx"


@dataclass(frozen=True)
class Missing:
    """A section triage reads that the report lacks: ``status`` ``missing`` (not written:
    an older script, a tool not installed), ``skipped``/``error`` (the script said so),
    ``absent``/``unreadable`` (a file the script could not read), ``truncated`` (kept only in
    part)."""

    name: str
    status: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class Triage:
    """One bug report judged. ``report``: script version, date, uname, gzip, bytes, complete;
    ``inventory`` the rebuilt facts; ``plan``; ``verdict`` None without an ``nvidia-smi
    --query`` section; ``findings`` every finding, errors first, each with ``section``;
    ``missing`` the sections that could not be judged; ``reasons`` how facts were rebuilt."""

    report: dict[str, Any]
    inventory: Inventory
    plan: Plan
    verdict: Verdict | None
    gpus: tuple[dict[str, Any], ...]
    findings: tuple[Finding, ...]
    missing: tuple[Missing, ...]
    reasons: tuple[str, ...]
    services: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """1 when any finding is an error (plan blockers and verdict included), else 0."""
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def node_line(self) -> str:
        """The node in one line: products, LPFs, arch, driver, fabric, services, port."""
        inv, p = self.inventory, self.plan
        if not self.extras.get("pci_known", True):
            return (f"PCI functions unknown (no lspci section); {inv.arch}; driver "
                    f"{inv.driver_version or 'unknown'} -> fabric not judged")
        parts = [", ".join(p.products) or "no NVIDIA GPU"]
        if self.extras.get("lspci_cut"):
            parts[0] += " (lspci cut short: the functions after the cut are unknown)"
        if inv.nvswitches:
            parts.append(f"{len(inv.nvswitches)} NVSwitch(es)")
        if inv.lpfs:
            parts.append(f"{len(inv.lpfs)} LPF(s)")
        parts.append(inv.arch)
        if inv.driver_version:
            parts.append(f"driver {inv.driver_version}")
        elif self.extras.get("driver_unknown"):
            parts.append("driver version unknown (no /proc/driver/nvidia/version)")
        else:
            parts.append("driver not loaded")
        line = "; ".join(parts) + f" -> fabric {p.fabric}"
        if p.services:
            line += ": " + " -> ".join(p.services)
        if p.management_port:
            mp = p.management_port
            line += f" on {mp.device} port {mp.port} ({mp.guid})"
        return line

    def to_json(self) -> dict[str, Any]:
        inv = self.inventory
        v = self.verdict
        return {
            "report": self.report,
            "node": {
                "summary": self.node_line(),
                "arch": inv.arch,
                "driver_version": inv.driver_version,
                "modules": sorted(inv.modules),
                "gpus": [{"pci": g.address, "device_id": f"{g.device:04x}",
                          "numa_node": g.numa_node, "driver": g.driver} for g in inv.gpus],
                "nvswitches": [{"pci": s.address, "device_id": f"{s.device:04x}"}
                               for s in inv.nvswitches],
                "infiniband": [_ib_json(d, inv) for d in inv.infiniband],
                "imex": {"major": inv.imex_major, **self.extras.get("imex_params", {})},
            },
            "plan": self.plan.to_json(),
            "verdict": None if v is None else v.verdict,
            "verdict_reasons": [] if v is None else list(v.reasons),
            "gpus": list(self.gpus),
            "services": self.services,
            "findings": [f.to_json() for f in self.findings],
            "missing": [m.to_json() for m in self.missing],
            "reasons": list(self.reasons),
        }


def _ib_json(d: IbDevice, inv: Inventory) -> dict[str, Any]:
    fn = next((f for f in inv.pci if f.address == d.pci), None)
    return {
        "device": d.name, "pci": d.pci, "sw_mng": bool(fn and fn.sw_mng),
        "ports": [{"port": p.port, "guid": p.guid,
                   "cap_mask": None if p.cap_mask is None else f"0x{p.cap_mask:08x}",
                   "sm_disabled": p.sm_disabled, "state": p.state,
                   "phys_state": p.phys_state, "link_layer": p.link_layer}
                  for p in d.ports],
    }


def _with_section(f: Finding, section: str) -> Finding:
    if "section" in f.fields:
        return f
    return Finding(f.code, f.severity, f.message, f.hint, {**f.fields, "section": section})


def build(c: Collected, label: str) -> Triage:
    """Judge what :func:`nvfabric.triage.collect.read` collected (``label``: the report's
    name, kept as the inventory's root): the facts (:func:`nvfabric.triage.rebuild.rebuild`),
    the plan, then one judgement per report section."""
    facts = rebuild(c, label)
    reasons = list(facts.reasons)
    inv, head, health = facts.inventory, facts.head, facts.health
    driver, modules = inv.driver_version, inv.modules
    p = plan(inv)
    fabric_known = c.lspci is not None
    kind = p.fabric if fabric_known else None

    unknown = _unknown_facts(c, modules, driver)
    hidden = c.lspci.vpd_unreadable() if c.lspci else frozenset()
    vpd_unknown = bool(hidden) and not inv.lpfs
    if vpd_unknown:
        # lspci printed the ConnectX VPD as "Not readable": which function is an LPF (SMDL=
        # SW_MNG) is not in the report, so no LPF is no fact about the node
        unknown["management_port_not_found"] = VPD_UNREADABLE
    findings = _plan_findings(p, unknown)
    findings += _log_findings(c, kind, reasons)

    fm = parse_unit(c.texts["fm_status"]) if "fm_status" in c.texts else None
    imex = parse_unit(c.texts["imex_status"]) if "imex_status" in c.texts else None
    services = _services(p.fabric, fm, imex) if fabric_known else None

    result, smi_findings = _verdict(facts, kind, services, fabric_known)
    findings += smi_findings
    gpus = tuple(g.to_json() for g in health.gpus) if health is not None else ()
    findings += _imex_ctl_findings(c.texts, reasons)
    findings += _ran_findings(c, head, inv, p, kind, fm, imex, vpd_unknown)

    damage, missing, cut = _completeness(c, hidden, reasons)
    if damage or not c.outcome.complete:
        findings.append(_truncated(c, damage))

    findings = _dedupe(findings)
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    report = {
        "file": label,
        "gzip": c.outcome.compressed,
        "bytes": c.outcome.bytes_read,
        "complete": c.outcome.complete and not damage,
        "sections": c.outcome.sections,
        "script_version": head["script_version"],
        "date": head["date"],
        "uname": head["uname"],
    }
    return Triage(
        report=report, inventory=inv, plan=p, verdict=result, gpus=gpus,
        findings=tuple(findings), missing=tuple(missing), reasons=tuple(reasons),
        services={"fabricmanager": _unit_json(fm), "imex": _unit_json(imex)},
        extras={"imex_params": facts.imex_params, "pci_known": fabric_known,
                "lspci_cut": cut is not None and c.last_key == "lspci",
                "driver_unknown": driver is None and "driver_not_loaded" in unknown,
                "versions": component_versions(c, head)},
    )


def _plan_findings(p: Plan, unknown: dict[str, str]) -> list[Finding]:
    """The plan's blockers, each either the node's (with the sections it comes from) or, where
    it only says the report lacks a section (``unknown``: code -> section), an info
    ``report_section_missing``."""
    findings: list[Finding] = []
    for b in p.blockers:
        why = unknown.get(b.code)
        if why is not None:
            findings.append(Finding(
                "report_section_missing", "info",
                f"not judged: the plan's {b.code} only says the report has no "
                + ("readable ConnectX VPD (lspci printed 'Not readable': the script was not "
                   "run as root)" if why == VPD_UNREADABLE else f"{why} section"),
                "ask for the missing section from the node (or the whole, current "
                "nvidia-bug-report.log.gz, run as root)",
                {"section": why, "plan_blocker": b.code}))
            continue
        findings.append(_with_section(b, "plan: lspci, ibstat, /proc/modules"))
    return findings


def _verdict(facts: Rebuilt, kind: FabricKind | None, services: tuple[ServiceState, ...] | None,
             fabric_known: bool) -> tuple[Verdict | None, list[Finding]]:
    """The verdict on the ``nvidia-smi --query`` section (None without one) and its findings,
    or why the section cannot be read."""
    result: Verdict | None = None
    findings: list[Finding] = []
    health = facts.health
    if health is not None:
        result = verdict(Inputs(
            gpus=health.gpus, fabric=kind, services=services,
            pci_gpu_count=len(facts.inventory.gpus) if fabric_known else None,
            reader_findings=health.findings,
        ))
        for f in result.findings:
            findings.append(_with_section(f, "nvidia-smi --query"))
    if facts.smi_problem:
        findings.append(Finding(
            "report_section_missing", "warning",
            f"the nvidia-smi --query section cannot be read: {facts.smi_problem}",
            "the fabric state of the GPUs is not judged; ask for `nvidia-smi -q` from the node",
            {"section": "nvidia-smi --query"}))
    return result, findings


def _log_findings(c: Collected, kind: FabricKind | None, reasons: list[str]) -> list[Finding]:
    """The diagnosis of every log section, for the node's fabric kind."""
    findings: list[Finding] = []
    for log in c.logs:
        for f in log.by_fabric.get(kind, []):
            findings.append(_with_section(f, log.name))
        if log.skipped:
            reasons.append(f"{log.name}: {log.skipped} line(s) the diagnosis catalogue could "
                           "not classify (a value it cannot convert) were left out")
    return findings


def _imex_ctl_findings(texts: dict[str, str], reasons: list[str]) -> list[Finding]:
    """The IMEX domain's finding from the ``nvidia-imex-ctl -N`` section, when it has one."""
    findings: list[Finding] = []
    if "imex_ctl" in texts:
        try:
            domain = parse_ctl(texts["imex_ctl"])
            df = domain.finding()
            if df is not None:
                findings.append(_with_section(df, "nvidia-imex-ctl -N"))
        except ValueError as err:
            reasons.append(f"nvidia-imex-ctl -N section not readable: {err}")
    return findings


def component_versions(c: Collected, head: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """``component -> versions`` the report shows for fabric manager and IMEX (their logs'
    running-version lines, and fabric manager's row of the versions table), sorted."""
    versions = {k: tuple(sorted(v)) for k, v in c.versions.items()}
    table_fm = fm_table_version(head)
    if table_fm:
        versions["fabricmanager"] = tuple(sorted({*versions.get("fabricmanager", ()),
                                                  table_fm}))
    return versions


def _ran_findings(c: Collected, head: dict[str, Any], inv: Inventory, p: Plan,
                  kind: FabricKind | None, fm: UnitState | None, imex: UnitState | None,
                  vpd_unknown: bool) -> list[Finding]:
    """What ran against what should have (:func:`nvfabric.triage.checks.check`): the
    services' units, the versions the report shows, the LPF port GUIDs when ibstat and the
    VPD are readable."""
    ran = Ran(fm=fm, imex=imex, versions=component_versions(c, head),
              in_use=tuple(c.in_use_sections))
    lpf_guids = None
    if c.seen.get("ibstat") == "ok" and not vpd_unknown:
        lpf = {f.address for f in inv.lpfs}
        lpf_guids = tuple(port.guid for d in inv.infiniband if d.pci in lpf for port in d.ports
                          if port.guid is not None)
    return check(kind, inv.driver_version, ran, lpf_guids)


def _completeness(c: Collected, hidden: frozenset[str],
                  reasons: list[str]) -> tuple[str | None, list[Missing], Missing | None]:
    """(damage past the report's end, the sections missing, the section the report is cut
    in): damage after a whole report's epilogue is ignored (said in ``reasons``)."""
    damage = c.outcome.damage
    if damage and c.outcome.complete:
        # the epilogue was read: the report is whole; what follows it (text appended to the
        # .gz, a broken member after the end) is no part of it
        reasons.append(f"after the report's last block: {damage}; ignored")
        damage = None
    missing = _missing(c)
    if hidden:
        missing.append(Missing("ConnectX VPD in lspci", "unreadable",
                               f"'Not readable' on {len(hidden)} Mellanox function(s): "
                               "which are LPFs is unknown"))
    cut = _cut_section(c, damage)
    if cut is not None:
        missing.append(cut)
    return damage, missing, cut


def _truncated(c: Collected, damage: str | None) -> Finding:
    """``report_truncated``: the report ends before its last block."""
    last = c.sections[-1].header.strip() if c.sections else "nothing"
    return Finding(
        "report_truncated", "warning",
        "the report ends before its last block ("
        + (damage or "no 'End of NVIDIA bug report log file.' line")
        + f"); last block read: {last[:120]}",
        "what follows that block was not judged: ask for the whole nvidia-bug-report.log.gz "
        "(the script may have hung: `nvidia-bug-report.sh --safe-mode` skips the parts "
        "that hang)",
        {"section": last[:120], "damage": damage})


def _unknown_facts(c: Collected, modules: frozenset[str],
                   driver: str | None) -> dict[str, str]:
    """Plan blockers that only say the report lacks a section, by code -> that section:
    no IB devices because there is no ibstat output (while mlx5_ib is loaded or the modules
    are unknown), no ib_umad because /proc/modules is missing, no driver because neither
    /proc/driver/nvidia/version nor nvidia-smi nor /proc/modules is in the report."""
    out: dict[str, str] = {}
    have_modules = c.seen.get("modules") == "ok"
    if c.seen.get("ibstat") != "ok" and (not have_modules or "mlx5_ib" in modules):
        out["ib_stack_missing"] = "ibstat"
        out["management_port_not_found"] = "ibstat"
    if not have_modules:
        out["missing_kernel_module"] = "/proc/modules"
    if driver is None and c.seen.get("version") != "ok" and (
            not have_modules or "nvidia" in modules):
        # /proc/modules lists nvidia (or is missing): the module may well be loaded, only its
        # version is not in the report (the plan's driver_not_loaded is about the version)
        out["driver_not_loaded"] = "/proc/driver/nvidia/version"
    return out


def _unit_json(u: UnitState | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {"installed": u.installed, "enabled": u.enabled, "active": u.active, "sub": u.sub,
            "age_s": u.age_s, "processes": list(u.processes)}


def _services(fabric: FabricKind, fm: UnitState | None,
              imex: UnitState | None) -> tuple[ServiceState, ...] | None:
    """Liveness for the verdict, from ``systemctl status`` (None where the report has no
    status of the services this fabric kind needs)."""
    needed = SERVICES_BY_FABRIC.get(fabric, ())
    out: list[ServiceState] = []
    for name in needed:
        if name in ("fabricmanager", "nvlsm"):
            if fm is None:
                return None
            if name == "fabricmanager":
                out.append(ServiceState("fabricmanager", fm.running, fm.age_s,
                                        detail=f"systemctl: {fm.active} ({fm.sub})"))
            else:
                out.append(ServiceState("nvlsm", fm.running and nvlsm_running(fm), fm.age_s,
                                        detail="nvlsm in fabric manager's unit or -g on its "
                                        "command line"))
        elif name == "imex":
            if imex is None:
                return None
            out.append(ServiceState("imex", imex.running, imex.age_s,
                                    detail=f"systemctl: {imex.active} ({imex.sub})"))
    return tuple(out)


def _missing(c: Collected) -> list[Missing]:
    out = []
    for key, label in EXPECTED:
        status = c.seen.get(key)
        if status == "ok":
            if key in c.text_truncated:
                out.append(Missing(label, "truncated", "kept only in part (size bound)"))
            continue
        if status in ("absent", "unreadable"):
            out.append(Missing(label, status, f"the script found the file {status}"))
        elif key in c.skipped:
            out.append(Missing(label, "skipped", c.skipped[key]))
        else:
            out.append(Missing(label, "missing", "not in the report"))
    return out


def _cut_section(c: Collected, damage: str | None) -> Missing | None:
    """The section a report cut short ends in, when it is one triage reads: what it holds
    was read, what the node printed after the cut was not (an lspci cut after two of eight
    GPUs lists two)."""
    if c.outcome.complete and not damage or c.last_key is None:
        return None
    label = dict(EXPECTED).get(c.last_key)
    if label is None:
        return None
    return Missing(label, "truncated", "the report ends inside this section: only its "
                   "first part was read")


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per (code, message, section), and one ``version_mismatch`` per pair of
    versions (a log line and the versions check say the same thing)."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for f in findings:
        key: tuple[str, ...] = (f.code, f.message, str(f.fields.get("section", "")))
        if f.code == "version_mismatch":
            key = (f.code, str(f.fields.get("fm_version", f.fields.get("imex_version"))),
                   str(f.fields.get("driver_version")))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


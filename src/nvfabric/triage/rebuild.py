"""The node's facts rebuilt from a report's sections, as the live readers would give them: the
architecture from uname, the driver version (/proc/driver/nvidia/version, else nvidia-smi
--query, else the versions table), the loaded modules (/proc/modules, else inferred from the
drivers lspci shows bound and ibstat's devices), the IB devices paired with their PCI functions,
the IMEX channel major and module parameters. Pure: a
:class:`nvfabric.triage.collect.Collected` in, a :class:`Rebuilt` out; every fact that had to
be inferred is said in ``reasons``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nvfabric.facts.inventory import normalise_arch
from nvfabric.facts.nvidia import MODULES, parse_proc_devices, parse_proc_version
from nvfabric.facts.smi import SmiFormatError, parse_text
from nvfabric.model.health import FabricHealth
from nvfabric.model.inventory import IbDevice, Inventory, PciFunction
from nvfabric.triage import ibstat as ibstat_mod
from nvfabric.triage.collect import Collected
from nvfabric.triage.lspci import MAX_VPD_BYTES

_UNAME_ARCH = re.compile(r"\b(x86_64|aarch64|arm64|ppc64le|s390x|riscv64)\b")
_SCRIPT_VERSION = re.compile(r"^nvidia-bug-report\.sh Version: (\S+)", re.M)
_DATE = re.compile(r"^Date: (.*)$", re.M)
_UNAME = re.compile(r"^uname: (.*)$", re.M)
_VERSION = re.compile(r"\b([0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)\b")
_PARAM = re.compile(r"^(?P<key>[A-Za-z0-9_]+): (?P<value>.*)$", re.M)
_TABLE_ROW = re.compile(
    r"^(?P<comp>[A-Za-z][^|\n]{0,80}?)[ \t]*\| (?P<details>[^\n]*)$", re.M)


@dataclass(frozen=True)
class Rebuilt:
    """The facts of one report: ``head`` (:func:`prologue`), ``inventory``, the parsed
    ``nvidia-smi --query`` section (``health``; None without one, ``smi_problem`` the reason
    when it cannot be read), the IMEX module parameters, and the ``reasons`` of every fact
    that had to be inferred."""

    head: dict[str, Any]
    inventory: Inventory
    health: FabricHealth | None
    smi_problem: str | None
    imex_params: dict[str, str]
    reasons: tuple[str, ...]


def rebuild(c: Collected, label: str) -> Rebuilt:
    """The facts of the report ``c`` (``label``: its name, kept as the inventory's root)."""
    reasons: list[str] = []
    texts = c.texts
    head = prologue(texts.get("prologue", ""))
    arch = _arch(head, reasons)
    functions = c.lspci.functions() if c.lspci else ()
    _lspci_reasons(c, reasons)
    health, smi_problem = _smi(texts)
    driver = _driver(texts, health, head, reasons)
    modules = _modules(c, functions, reasons)
    devices = _ib_devices(c, functions, reasons)
    params = dict((mm.group("key"), mm.group("value").strip())
                  for mm in _PARAM.finditer(texts.get("params", "")))
    imex_params = {k: params[k] for k in ("ImexChannelCount", "CreateImexChannel0")
                   if k in params}
    inv = Inventory(
        root=label, arch=arch, driver_version=driver, modules=modules, pci=functions,
        infiniband=devices,
        imex_major=parse_proc_devices(texts.get("devices", ""), "nvidia-caps-imex-channels"),
    )
    return Rebuilt(head, inv, health, smi_problem, imex_params, tuple(reasons))


def prologue(text: str) -> dict[str, Any]:
    """Script version, date, uname, arch and the versions table of the first block."""
    out: dict[str, Any] = {}
    for key, pattern in (("script_version", _SCRIPT_VERSION), ("date", _DATE),
                         ("uname", _UNAME)):
        m = pattern.search(text)
        out[key] = m.group(1).strip() if m else None
    table: dict[str, str] = {}
    for m in _TABLE_ROW.finditer(text):
        comp = m.group("comp").strip()
        if comp not in ("Component", "Skipped Component", "Error Component"):
            table.setdefault(comp, m.group("details").strip())
    out["versions_table"] = table
    return out


def modules_from(text: str) -> frozenset[str]:
    """Names of :data:`MODULES` in ``/proc/modules`` text (first word of each line), the
    same set :func:`nvfabric.facts.nvidia.loaded_modules` reads from ``sys/module``."""
    names = {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}
    return frozenset(m for m in MODULES if m in names)


def fm_table_version(head: dict[str, Any]) -> str | None:
    """The fabric manager version of the report's versions table, when it prints one."""
    table_fm = head["versions_table"].get("NVIDIA Fabric Manager", "")
    tm = _VERSION.search(table_fm) if "version" in table_fm.lower() else None
    return tm.group(1) if tm else None


def _arch(head: dict[str, Any], reasons: list[str]) -> str:
    """The architecture from the prologue's uname line; ``unknown`` without one."""
    uname = head.get("uname") or ""
    m = _UNAME_ARCH.search(uname)
    arch = normalise_arch(m.group(1)) if m else "unknown"
    if not m:
        reasons.append("architecture unknown: no uname line in the report's prologue")
    return arch


def _lspci_reasons(c: Collected, reasons: list[str]) -> None:
    """What of lspci's output was left out (entries without IDs, VPD past the bound,
    repeated addresses)."""
    if c.lspci and c.lspci.without_ids:
        reasons.append(f"{c.lspci.without_ids} lspci entries without vendor:device IDs (lspci "
                       "run without -nn and without -x) were left out")
    if c.lspci and c.lspci.vpd_dropped:
        reasons.append(f"{c.lspci.vpd_dropped} VPD fields past the {MAX_VPD_BYTES >> 20} MiB "
                       "kept of lspci's VPD were left out (each function's Mellanox vendor "
                       "field, which holds SMDL, is always kept)")
    if c.lspci and c.lspci.duplicates:
        reasons.append(f"{c.lspci.duplicates} lspci entries repeat a PCI address already "
                       "listed (the lspci output appears twice): the first entry counts")


def _smi(texts: dict[str, str]) -> tuple[FabricHealth | None, str | None]:
    """The ``nvidia-smi --query`` section parsed, or why it cannot be read."""
    health = None
    smi_problem = None
    if "smi" in texts:
        try:
            health = parse_text(texts["smi"])
        except SmiFormatError as err:
            smi_problem = str(err)
    return health, smi_problem


def _driver(texts: dict[str, str], health: FabricHealth | None, head: dict[str, Any],
            reasons: list[str]) -> str | None:
    """The driver version: /proc/driver/nvidia/version, else nvidia-smi's, else the versions
    table's; None when none of them says."""
    driver = parse_proc_version(texts.get("version", "")) if "version" in texts else None
    if driver is None and health is not None and health.driver_version:
        driver = health.driver_version
        reasons.append("driver version from nvidia-smi --query (no /proc/driver/nvidia/version)")
    if driver is None:
        details = head["versions_table"].get("NVIDIA GPU Details", "")
        vm = _VERSION.search(details.split(",", 1)[1] if "," in details else "")
        if vm:
            driver = vm.group(1)
            reasons.append("driver version from the report's versions table")
    return driver


def _modules(c: Collected, functions: tuple[PciFunction, ...],
             reasons: list[str]) -> frozenset[str]:
    """The loaded modules of :data:`MODULES`: /proc/modules, else inferred from the drivers
    bound in lspci and ibstat's mlx5 devices."""
    texts = c.texts
    if "modules" in texts:
        modules = modules_from(texts["modules"])
    else:
        inferred = {f.driver for f in functions if f.driver in MODULES}
        devices = c.ibstat.devices() if c.ibstat else ()
        if any(d.name.startswith("mlx5") for d in devices):
            inferred.add("mlx5_ib")
        modules = frozenset(m for m in inferred if m is not None)
        reasons.append("no /proc/modules in the report: modules inferred from the drivers "
                       "bound in lspci and ibstat's devices (" + (", ".join(sorted(modules))
                       or "none") + "); ib_umad cannot be known")
    return modules


def _ib_devices(c: Collected, functions: tuple[PciFunction, ...],
                reasons: list[str]) -> tuple[IbDevice, ...]:
    """ibstat's devices, each attached to its PCI function (mst pairs, else by order)."""
    texts = c.texts
    devices = c.ibstat.devices() if c.ibstat else ()
    if c.ibstat and c.ibstat.duplicates:
        reasons.append(f"{c.ibstat.duplicates} ibstat devices printed again (the ibstat output "
                       "appears twice): the first one counts")
    if devices:
        att = ibstat_mod.attach(devices, functions, ibstat_mod.mst_pairs(texts.get("mst", "")),
                                c.lspci.virtual_functions() if c.lspci else frozenset())
        devices = att.devices
        reasons.append(att.reason)
    return tuple(devices)

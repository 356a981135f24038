"""Offline fabric state from saved nvidia-smi output, format detected from the text:

- ``nvidia-smi -q`` text: indentation-structured ``Key : Value`` rows; GPU blocks start with
  ``GPU 00000000:18:00.0``; the key column is 34 characters wide up to driver 560 and wider
  from 580 (tests/data/corpus/nvidia-smi/fabric-in-progress-580-wide-columns-gpuop2511.txt), so
  nothing here depends on columns. Excerpts without a GPU header (a bare ``Fabric`` block,
  ``grep -C3`` output with ``--`` separators, dedented blocks pasted into an issue) still parse:
  each ``Fabric`` block without its own GPU header becomes the next GPU.
- ``nvidia-smi -q -x`` XML (DTD nvsmi_device_v13, tests/data/corpus/nvidia-smi/*.xml).
- ``nvidia-smi --query-gpu=index,uuid,fabric.state,fabric.status,fabric.cliqueId,
  fabric.clusterUuid --format=csv`` (with or without the header line; ``[N/A]`` allowed). A
  header without ``fabric.state`` is refused: no verdict can be told without it. The other
  columns of :data:`CSV_REQUIRED` a header lacks are listed in ``FabricHealth.unread`` (their
  values None on every GPU): whether the capture is judged or refused is the verdict's to say
  (:func:`nvfabric.rules.verdict.columns_needed`, S08 and the GB300 In Progress CSV: a query
  that did not ask for fabric.status cannot tell Completed/Success from a failed registration,
  while no verdict of In Progress rows reads it).

N/A anywhere is a value (None / ``not_supported``), never an error; an NVML error string
printed as the fabric State (``GPU requires reset``) is the GPU's read failure, reported as the
NVML reader reports it (``nvml_unavailable``, reason ``fabric_info_error``). Other nvidia-smi
outputs (``nvlink --status``, ``topo --matrix``, ``-L``, the default table) carry no fabric state:
:func:`parse` raises :class:`SmiFormatError` naming what the text is. Pure: text in, values out.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

from nvfabric.model.errors import InputError
from nvfabric.model.findings import Finding
from nvfabric.model.health import (
    Clique,
    FabricHealth,
    GpuFabric,
    Source,
    state_from_smi,
    status_from_smi,
)
from nvfabric.model.mask import HealthField, decode_smi, summary_from_smi
from nvfabric.model.strict import BadValue, int_or_none, is_uint, to_int
from nvfabric.model.vocab import CLIQUE_TYPES, CliqueType, RecoveryAction


class SmiFormatError(InputError):
    """Text that is not a readable nvidia-smi capture; the message says what it looks like."""


GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
UUID_RE = re.compile(r"^[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")
#: The longest line of a text or CSV capture: nvidia-smi's rows are under 200 characters (the
#: widest, 580's key column, ~90); a longer line is not nvidia-smi output.
MAX_LINE = 4096
CSV_FIELDS = ("index", "uuid", "fabric.state", "fabric.status", "fabric.cliqueId",
              "fabric.clusterUuid")
#: The --query-gpu columns a verdict may read: the state (every verdict), the status that
#: tells a completed registration's success from its failure, and the clique and ClusterUUID
#: that say which NVLink domain the GPU is in (rules.verdict.columns_needed).
CSV_REQUIRED = ("fabric.state", "fabric.status", "fabric.cliqueId", "fabric.clusterUuid")
#: The one capture line that has them all (docs/commands/status.md).
CSV_QUERY = ("nvidia-smi --query-gpu=index,uuid,pci.bus_id,fabric.state,fabric.status,"
             "fabric.cliqueId,fabric.clusterUuid --format=csv")

#: The columns of :data:`CSV_QUERY`: a ``--format=csv,noheader`` capture of that line has
#: these, in this order (7 fields; 6 fields are :data:`CSV_FIELDS`).
QUERY_FIELDS = tuple(CSV_QUERY.split("=", 1)[1].split(" ", 1)[0].split(","))

#: Other nvidia-smi outputs, recognised only to say what they are (regex, what it is).
OTHER_OUTPUTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?m)^\s+Link \d+: "), "nvidia-smi nvlink --status"),
    (re.compile(r"(?m)^\s+NVLE: "), "nvidia-smi nvlink -info"),
    (re.compile(r"(?m)^GPU0\s.*\n.*\bX\b"), "nvidia-smi topo --matrix"),
    (re.compile(r"(?m)^GPU \d+: .*\(UUID: GPU-"), "nvidia-smi --list-gpus"),
    (re.compile(r"\| NVIDIA-SMI \d"), "nvidia-smi (the default table)"),
)


def detect(text: str) -> str:
    """``"xml"``, ``"csv"`` or ``"text"``; SmiFormatError for anything else."""
    head = text.lstrip("\ufeff \t\r\n")[:4096]
    if head.startswith("<?xml") or "<nvidia_smi_log" in head:
        return "xml"
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    low = first.lower()
    if "," in first and ("fabric." in low or low.replace(" ", "").startswith("index,")):
        return "csv"
    if low.strip() == "fabric.state":  # --query-gpu=fabric.state: a header of one column
        return "csv"
    if "NVSMI LOG" in head or any(ln.strip() == "Fabric" for ln in text.splitlines()) or any(
        GPU_HEADER.match(ln) for ln in head.splitlines()
    ):
        return "text"
    if _headerless_csv(text):
        return "csv"
    for pattern, what in OTHER_OUTPUTS:
        if pattern.search(head):
            raise SmiFormatError(
                f"this is the output of `{what}`, which carries no fabric state"
            )
    raise SmiFormatError("not an nvidia-smi -q, -q -x or --query-gpu capture")


def parse(text: str) -> FabricHealth:
    """Parse a capture of any of the three formats (see the module docstring). Text and CSV
    lines longer than :data:`MAX_LINE` are refused (SmiFormatError naming the line)."""
    kind = detect(text)
    if kind == "xml":
        health = parse_xml(text)
    else:
        _check_lines(text)
        health = parse_csv(text) if kind == "csv" else parse_text(text)
    if not health.gpus:
        # nvidia-smi on a node without GPUs prints "No devices were found", never an empty
        # listing: a capture of no GPU was cut or emptied, and certifies nothing.
        raise SmiFormatError(
            f"the {'CSV' if kind == 'csv' else kind} capture lists no GPU (a header, or a "
            "log header without GPU sections): nothing to judge")
    return health


@dataclass
class _Gpu:
    """Mutable builder while reading text."""

    pci: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    health: list[HealthField] = field(default_factory=list)
    summary: str | None = None
    has_fabric: bool = False
    cliques: list[Clique] = field(default_factory=list)

    def build(self, index: int, where: str = "",
              findings: list[Finding] | None = None) -> GpuFabric:
        """The GpuFabric; SmiFormatError naming the GPU (``where``, else its index and bus id)
        and the value when the fabric state, status, CliqueId or ClusterUUID is not one
        nvidia-smi prints."""
        v = self.values
        failed = _read_error(v.get("state"))
        if failed is not None:
            # As the NVML reader reports a failed fabric query (health/nvml.py fabric_of):
            # the GPU is listed without a fabric state and the reading has an error.
            label = f"GPU {index}" + (f" ({self.pci})" if self.pci else "")
            if findings is not None:
                findings.append(Finding(
                    "nvml_unavailable", "error",
                    f"{label}: nvidia-smi could not read its fabric state: it printed "
                    f"{v['state'].strip()!r} ({failed})",
                    "check `nvidia-smi -q -i " + str(index) + "` and dmesg for Xid errors; "
                    "'GPU requires reset' or 'GPU is lost': reset the GPU "
                    "(`nvidia-smi -r`) or reboot, then restart fabric manager",
                    {"reason": "fabric_info_error", "gpu": index, "pci": self.pci,
                     "nvml_error": failed},
                ))
            return GpuFabric(index=index, uuid=_na(v.get("uuid")), pci=self.pci,
                             name=_na(v.get("name")), state="not_supported", status=None)
        try:
            return GpuFabric(
                index=index,
                uuid=_na(v.get("uuid")),
                pci=self.pci,
                name=_na(v.get("name")),
                state=state_from_smi(v.get("state", "N/A")),
                status=status_from_smi(v.get("status", "N/A")),
                clique_id=_clique(v.get("clique_id")),
                cluster_uuid=_uuid(v.get("cluster_uuid")),
                health_summary=self.summary,
                health=tuple(self.health),
                cliques=tuple(self.cliques),
                recovery_action=RECOVERY_WORDS.get((_na(v.get("recovery_action")) or "").lower()),
            )
        except ValueError as err:
            label = where or f"GPU {index}" + (f" ({self.pci})" if self.pci else "")
            raise SmiFormatError(f"{label}: {err}") from None


def _read_error(state: str | None) -> str | None:
    """The NVML error name when nvidia-smi printed an error in place of the fabric State
    (``Unknown Error``, ``GPU requires reset``, ``GPU is lost``, ``Insufficient
    Permissions``; ``[...]`` in CSV: nvmlErrorString of the failed query), else None."""
    if state is None:
        return None
    word = state.strip().strip("[]").strip().lower()
    if word in ("n/a", "", "not supported", "unknown") or word in _STATE_WORDS:
        return None
    try:
        name = status_from_smi(state)
    except ValueError:
        return None
    return name if name not in (None, "success") else None


_STATE_WORDS = frozenset({"completed", "in progress", "not started"})


def _na(value: str | None) -> str | None:
    if value is None or value.strip().strip("[]").lower() in ("n/a", "", "not supported"):
        return None
    return value.strip()


def _int(value: str | None) -> int | None:
    text = _na(value)
    if text is None:
        return None
    try:
        return to_int(text, base=0)
    except BadValue:
        return None


def _clique(value: str | None) -> int | None:
    """A CliqueId: N/A -> None, else a non-negative integer (decimal, or hex with ``0x``: a
    32-bit value in nvml.h); ValueError otherwise."""
    text = _na(value)
    if text is None:
        return None
    try:
        return to_int(text, base=0, high=0xFFFFFFFF)
    except BadValue:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"unrecognised CliqueId {shown!r}") from None


def _uuid(value: str | None) -> str | None:
    """A ClusterUUID: N/A -> None, else canonical lower-case 8-4-4-4-12 hex; ValueError for
    anything else."""
    text = _na(value)
    if text is None:
        return None
    if not UUID_RE.match(text):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"unrecognised ClusterUUID {shown!r}")
    return text.lower()


_FABRIC_KEYS = {"state": "state", "status": "status", "cliqueid": "clique_id",
                "clusteruuid": "cluster_uuid"}
_GPU_KEYS = {"gpu uuid": "uuid", "product name": "name", "gpu recovery action": "recovery_action"}
#: ``GPU Recovery Action`` (``<gpu_recovery_action>``) as nvidia-smi prints it, lower case ->
#: the vocabulary. Printed in public captures: None (corpus nvidia-smi/*.xml), Reset, Reboot,
#: Drain P2P, Drain and Reset; the others (and GPU_RESET, seen once) are nvfabric's
#: assumption after nvml.h's names, as the simulator prints them.
RECOVERY_WORDS: dict[str, RecoveryAction] = {
    "none": "none", "reset": "gpu_reset", "gpu reset": "gpu_reset", "gpu_reset": "gpu_reset",
    "reboot": "node_reboot", "node reboot": "node_reboot", "drain p2p": "drain_p2p",
    "drain and reset": "drain_and_reset", "recover imex domain": "recover_imex_domain",
    "bus reset": "bus_reset", "system reboot": "system_reboot"}
#: A clique's type as the simulator prints it under ``Fabric / Cliques`` (``<cliques>``): no
#: capture of an NVML 615 nvidia-smi is public, so this layout is nvfabric's assumption.
CLIQUE_WORDS: dict[str, CliqueType] = {t.replace("_", " "): t for t in CLIQUE_TYPES}


def _clique_of(word: str, value: str) -> Clique | None:
    """One ``<Type words> : <id>`` row of a Cliques block; None for a type nvfabric does not
    know or an id that is N/A; SmiFormatError for an id that is no number (as a CliqueId)."""
    kind = CLIQUE_WORDS.get(word.strip().lower())
    try:
        number = _clique(value)
    except ValueError as err:
        raise SmiFormatError(f"Fabric / Cliques: {err}") from None
    return None if kind is None or number is None else Clique(kind, number)


def _check_lines(text: str) -> None:
    """SmiFormatError naming the first line over :data:`MAX_LINE` characters."""
    if len(text) <= MAX_LINE:
        return
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE:
            raise SmiFormatError(f"line {number} has {len(line)} characters, more than the "
                                 f"{MAX_LINE} of any nvidia-smi line")


def _key_value(stripped: str) -> tuple[str, str] | None:
    """``Key : Value`` of a stripped row (key up to the first colon, value without the blanks
    around it), None for a row without a colon (a section name). Plain string operations: a
    regular expression here backtracked for seconds on a long row with a blank run and no
    colon (tests/data/fuzz/smi-text-100k-line.txt)."""
    key, sep, value = stripped.partition(":")
    if not sep:
        return None
    return key.strip(), value.strip()


def parse_text(text: str) -> FabricHealth:
    """``nvidia-smi -q`` text (whole, or excerpts of it). Linear in the text."""
    gpus: list[_Gpu] = []
    cur: _Gpu | None = None
    stack: list[tuple[int, str]] = []
    driver: str | None = None
    attached: int | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped or stripped == "--" or stripped.startswith("#") or "NVSMI LOG" in line:
            continue
        header = GPU_HEADER.match(line)
        if header:
            cur = _Gpu(pci=header.group(1))
            gpus.append(cur)
            stack = []
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        kv = _key_value(stripped)
        if kv is None:
            name = stripped.lower()
            stack.append((indent, name))
            if name == "fabric" and len(stack) == 1:
                if cur is None or cur.has_fabric:
                    cur = _Gpu()
                    gpus.append(cur)
                cur.has_fabric = True
            continue
        key, value = kv[0].lower(), kv[1]
        path = [name for _, name in stack]
        if cur is None:
            if not path and key == "driver version":
                driver = _na(value)
            elif not path and key == "attached gpus":
                attached = _int_or_none(value)
            continue
        if not path and key in _GPU_KEYS:
            cur.values[_GPU_KEYS[key]] = value
        elif path == ["fabric"] and key in _FABRIC_KEYS:
            cur.values[_FABRIC_KEYS[key]] = value
        elif path == ["fabric", "cliques"]:
            clique = _clique_of(key, value)
            cur.cliques += [clique] if clique is not None else []
        elif path == ["fabric", "health"]:
            if key == "summary":
                cur.summary = summary_from_smi(value)
            else:
                decoded = decode_smi(key, value)
                if decoded is not None:
                    cur.health.append(decoded)
    _incomplete(gpus, attached)
    errors: list[Finding] = []
    built = tuple(g.build(i, findings=errors) for i, g in enumerate(gpus))
    _cut(attached, len(built), errors)
    return FabricHealth("nvidia-smi-text", built, driver, tuple(errors))


def _incomplete(gpus: list[_Gpu], attached: int | None) -> None:
    """SmiFormatError for a GPU section of ``nvidia-smi -q`` (one that starts with its ``GPU
    <bus id>`` header) whose fabric state was not read because the capture was cut or chose
    other sections: it has neither its Product Name nor a Fabric section (the capture ends
    inside its header rows; ``-d MEMORY``), or it has no Fabric section while another GPU of
    the capture has one or the capture lists fewer GPUs than ``Attached GPUs`` says (cut
    inside it). nvidia-smi prints the same sections for every GPU of one run, and Product
    Name first (every ``-q`` capture in tests/data/corpus/nvidia-smi); ``-q -d FABRIC``
    prints the Fabric section without the name. A GPU without a Fabric section in a whole
    capture of a driver that prints none stays ``not_supported``."""
    some_fabric = any(g.has_fabric for g in gpus)
    cut = attached is not None and 0 < len(gpus) < attached
    for index, g in enumerate(gpus):
        if g.pci is None or g.has_fabric:
            continue  # a Fabric block of an excerpt, or a GPU whose fabric was read
        label = f"GPU {index} ({g.pci})"
        if "name" not in g.values:
            raise SmiFormatError(
                f"{label}: the capture has its header but neither its Product Name nor its "
                "Fabric section (cut short, or `-d` chose other sections): its fabric state "
                "was not read")
        if some_fabric or cut:
            why = ("other GPUs of the capture have one" if some_fabric else
                   f"the capture lists {len(gpus)} of the {attached} attached GPUs")
            raise SmiFormatError(
                f"{label}: no Fabric section where {why}: the capture was cut inside this "
                "GPU's section and its fabric state was not read")


def _int_or_none(value: str) -> int | None:
    """A small count or index (``Attached GPUs``, ``index``): ASCII digits only, at most six
    (:func:`nvfabric.model.strict.int_or_none`; ``²`` is no number); None otherwise."""
    return int_or_none(value.strip(), max_digits=6)


def _cut(attached: int | None, listed: int, findings: list[Finding]) -> None:
    """A capture that says more GPUs are attached (``Attached GPUs : 8``,
    ``<attached_gpus>``) than it lists was cut: the others were not read, so nothing is
    certified about them (``fabric_value_missing``, warning: at best degraded)."""
    if attached is None or not 0 < listed < attached:
        return
    findings.append(Finding(
        "fabric_value_missing", "warning",
        f"the capture lists {listed} of the {attached} GPUs it says are attached (Attached "
        f"GPUs: {attached}): the fabric state of the other {attached - listed} was not read",
        "capture every GPU: `nvidia-smi -q > FILE` whole (not an excerpt), or the CSV line "
        f"`{CSV_QUERY}`",
        {"attached_gpus": attached, "listed_gpus": listed},
    ))


def load_xml_parser() -> None:
    """Import the XML parser (:mod:`xml.etree.ElementTree`, several ms): a capture of another
    format never needs it, and the GPU probe loads it while the node's nvidia-smi runs."""
    import xml.etree.ElementTree  # noqa: F401


def parse_xml(text: str) -> FabricHealth:
    """``nvidia-smi -q -x``: ``<nvidia_smi_log><gpu id="..."><fabric>...``."""
    import xml.etree.ElementTree as ET  # the XML format's own parser (load_xml_parser)

    try:
        root = ET.fromstring(text)
    except (ET.ParseError, LookupError, ValueError, RecursionError) as err:
        # expat's own errors; LookupError: an encoding= Python does not know
        raise SmiFormatError(f"malformed nvidia-smi XML: {err}") from None
    if root.tag != "nvidia_smi_log":
        raise SmiFormatError(f"XML root is <{root.tag}>, not <nvidia_smi_log>")
    gpus: list[GpuFabric] = []
    errors: list[Finding] = []
    for index, gpu in enumerate(root.findall("gpu")):
        fab = gpu.find("fabric")
        values = {
            "uuid": gpu.findtext("uuid") or "N/A",
            "name": gpu.findtext("product_name") or "N/A",
            "recovery_action": gpu.findtext("gpu_recovery_action") or "N/A",
        }
        health: list[HealthField] = []
        summary: str | None = None
        cliques: list[Clique] = []
        if fab is not None:
            for c in fab.findall("cliques/clique"):
                clique = _clique_of(c.findtext("type") or "", c.findtext("id") or "N/A")
                cliques += [clique] if clique is not None else []
            for tag, key in (("state", "state"), ("status", "status"),
                             ("cliqueId", "clique_id"), ("clusterUuid", "cluster_uuid")):
                values[key] = (fab.findtext(tag) or "N/A").strip()
            hl = fab.find("health")
            for child in hl if hl is not None else ():
                word = (child.text or "").strip()
                if child.tag == "summary":
                    summary = summary_from_smi(word)
                else:
                    decoded = decode_smi(child.tag, word)
                    if decoded is not None:
                        health.append(decoded)
        builder = _Gpu(pci=gpu.get("id"), values=values, health=health, summary=summary,
                       cliques=cliques)
        gpus.append(builder.build(index, findings=errors))
    _cut(_int_or_none(root.findtext("attached_gpus") or ""), len(gpus), errors)
    return FabricHealth("nvidia-smi-xml", tuple(gpus), _na(root.findtext("driver_version")),
                        tuple(errors))


def _csv_rows(text: str) -> list[list[str]]:
    """CSV rows; SmiFormatError for what the csv module refuses (a field over its 131,072
    character limit, a NUL)."""
    try:
        return list(csv.reader(text.splitlines(), skipinitialspace=True))
    except csv.Error as err:
        raise SmiFormatError(f"unreadable CSV: {err}") from None


def _headerless_csv(text: str) -> bool:
    rows = [r for r in _csv_rows(text) if r]
    widths = {len(r) for r in rows}
    return bool(rows) and len(widths) == 1 and widths <= {len(CSV_FIELDS), len(QUERY_FIELDS)} \
        and all(is_uint(r[0].strip()) for r in rows)


_CSV_COLUMNS = {
    "index": "index",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "name": "name",
    "gpu_name": "name",
    "pci.bus_id": "pci",
    "gpu_bus_id": "pci",
    "fabric.state": "state",
    "fabric.status": "status",
    "fabric.cliqueid": "clique_id",
    "fabric.clusteruuid": "cluster_uuid",
    "driver_version": "driver",
}


def parse_csv(text: str) -> FabricHealth:
    """``--query-gpu=... --format=csv`` (header optional: without it, the column order of
    :data:`QUERY_FIELDS` for 7 fields, of :data:`CSV_FIELDS` for 6). Unknown columns are
    ignored; a header without ``fabric.state`` is a SmiFormatError naming the missing columns,
    the others of :data:`CSV_REQUIRED` it lacks are ``FabricHealth.unread``; a row with
    another number of fields, or with a value nvidia-smi does not print, is a SmiFormatError
    naming the row."""
    rows = [[c.strip() for c in r] for r in _csv_rows(text) if any(r)]
    if not rows:
        raise SmiFormatError("empty CSV")
    first = [c.lower() for c in rows[0]]
    if first and not is_uint(first[0]):
        columns = [_CSV_COLUMNS.get(c.split(" [")[0].strip(), "") for c in first]
        twice = sorted({c for c, n in zip(first, columns, strict=True)
                        if n and columns.count(n) > 1})
        if twice:  # which of the two would the verdict read? neither is certain
            raise SmiFormatError(f"CSV names a column more than once: {', '.join(twice)}")
        rows = rows[1:]
    else:
        layout = QUERY_FIELDS if len(rows[0]) == len(QUERY_FIELDS) else CSV_FIELDS
        columns = [_CSV_COLUMNS[c.lower()] for c in layout]
    missing = [name for name in CSV_REQUIRED if _CSV_COLUMNS[name.lower()] not in columns]
    if "fabric.state" in missing:
        have = ", ".join(c.strip() for c in first if c.strip()) or "none"
        raise missing_columns_error(missing, f"it has: {have}; every verdict needs fabric.state")
    gpus: list[GpuFabric] = []
    errors: list[Finding] = []
    driver: str | None = None
    for n, row in enumerate(rows):
        where = f"CSV row {n + 1}"
        if len(row) != len(columns):
            raise SmiFormatError(
                f"{where}: {len(row)} fields where {len(columns)} columns are expected: "
                f"{', '.join(row)!r}")
        values = {col: val for col, val in zip(columns, row, strict=True) if col}
        raw_index = _na(values.get("index"))
        index = None if raw_index is None else _int_or_none(raw_index)
        if raw_index is not None and index is None:
            # nvidia-smi prints the index as a small decimal number: anything else was not
            # written by it (and used to become the row number, silently)
            raise SmiFormatError(f"{where}: unrecognised GPU index {raw_index!r}")
        driver = driver or _na(values.get("driver"))
        builder = _Gpu(pci=_na(values.get("pci")), values=values)
        gpus.append(builder.build(index if index is not None else n, where, errors))
    return FabricHealth("nvidia-smi-csv", tuple(gpus), driver, tuple(errors), tuple(missing))


def missing_columns_error(missing: tuple[str, ...] | list[str], detail: str) -> SmiFormatError:
    """The refusal of a CSV that lacks a column its verdict needs (S08): ``CSV lacks the
    columns A, B (DETAIL); capture with `LINE```, the line that has them all."""
    plural_s = "s" if len(missing) > 1 else ""
    return SmiFormatError(
        f"CSV lacks the column{plural_s} {', '.join(missing)} ({detail}); capture with "
        f"`{CSV_QUERY}`")


SOURCES: tuple[Source, ...] = ("nvidia-smi-text", "nvidia-smi-xml", "nvidia-smi-csv")

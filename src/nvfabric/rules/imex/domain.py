"""The fleet check: many nodes' ``nvfabric status --json`` reports, one NVLink domain per node
list. Pure: takes parsed reports, returns findings.

A node list (the IMEX nodes_config.cfg shared by its nodes) is usable only when its nodes are
trays of one multi-node NVLink domain: their GPUs share one ClusterUUID and one CliqueId, every
GPU has completed fabric registration, and the list is no larger than the domain (18 compute
trays for GB200/GB300 NVL72). HGX/DGX baseboard nodes (fabric ``nvswitch``/``nvlink5``, and
``none``) are each their own single-node NVLink domain: without a node list each is a domain of
its own (grouped by ``node``; its zero ClusterUUID is normal, the NVL72 size does not apply,
only its GPUs' registration is checked), and two of them in one node list is an error, not a
domain. Sources: NVIDIA IMEX guide, "Deployment
Models"; NVML ``nvmlGpuFabricInfo_t`` (clusterUuid, cliqueId); DESIGN.md status contract.

Report keys read: ``gpus[].{index, uuid, state, status, clique_id, cluster_uuid}`` (required
shape of ``nvfabric status --json``) and, when present, ``hostname``, ``addresses``,
``fabric`` (or ``plan.fabric``), ``imex.node_list`` / ``imex.node_list_id``; each must have the
JSON type that command writes. Reports with the same GPU UUIDs are one node, counted once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FindingCode
from nvfabric.model.words import plural
from nvfabric.rules.imex.nodes import node_list_id
from nvfabric.rules.imex.tables import DOMAIN_SIZE_NVL72, ZERO_UUID


@dataclass(frozen=True)
class Gpu:
    """One GPU's fabric registration as a status report gives it."""

    index: int | None
    state: str | None
    status: str | None
    clique_id: int | None
    cluster_uuid: str | None
    uuid: str | None = None

    @property
    def attached(self) -> bool:
        """Registered with a multi-node fabric: completed, success, a non-zero ClusterUUID."""
        return (self.state == "completed" and self.status in ("success", None)
                and self.cluster_uuid is not None and self.cluster_uuid != ZERO_UUID)

    def why_not(self) -> str:
        if self.state != "completed":
            return f"state {self.state or 'unknown'}"
        if self.status not in ("success", None):
            return f"status {self.status}"
        return "ClusterUUID " + ("missing" if self.cluster_uuid is None else "all zero")


@dataclass(frozen=True)
class NodeReport:
    """One node's report. ``name``: its host name or, failing that, where it came from;
    ``node_list``: the entries of its IMEX node list, when the report carries them."""

    name: str
    source: str
    gpus: tuple[Gpu, ...]
    fabric: str | None = None
    addresses: tuple[str, ...] = ()
    node_list: tuple[str, ...] = ()
    node_list_id: str | None = None

    @property
    def identities(self) -> set[str]:
        """What a node list entry may call this node: host name (and short name), addresses."""
        out = {self.name.lower(), self.name.lower().split(".", 1)[0]}
        out |= {a.lower() for a in self.addresses}
        return out

    def uuids(self) -> Counter[str]:
        return Counter(g.cluster_uuid.lower() for g in self.gpus
                       if g.cluster_uuid and g.cluster_uuid != ZERO_UUID)

    def cliques(self) -> Counter[int]:
        return Counter(g.clique_id for g in self.gpus
                       if g.clique_id is not None and g.attached)


def _typed(value: object, kind: type | tuple[type, ...], key: str, what: str) -> Any:
    """``value`` when it is None or of ``kind``; ValueError naming ``key`` otherwise (a report
    of another shape must not be read character by character or as a number it is not)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise _shape_error(key, what, value)
    return value


def _shape_error(key: str, what: str, value: object) -> ValueError:
    """``KEY: missing, expected WHAT`` for a null, else ``KEY: expected WHAT, got TYPE VALUE``
    (never Python's ``NoneType``)."""
    if value is None:
        return ValueError(f"{key}: missing (null), expected {what}")
    return ValueError(f"{key}: expected {what}, got {type(value).__name__} {value!r:.60}")


def _strings(value: object, key: str) -> tuple[str, ...]:
    items = _typed(value, list, key, "a list of strings") or []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _shape_error(f"{key}[{i}]", "a string", item)
    return tuple(items)


def node_from_status(data: Mapping[str, Any], source: str) -> NodeReport:
    """A NodeReport from one ``nvfabric status --json`` object. ValueError, naming the report
    (``source``) and the key, when it is not one: no ``gpus`` list, or a key of the contract
    holding another JSON type (``"node_list": "notalist"``)."""
    gpus_raw = data.get("gpus")
    if not isinstance(gpus_raw, list):
        raise ValueError(f"{source}: not an nvfabric status report (no \"gpus\" list)")
    try:
        return _node(data, gpus_raw, source)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None


def _node(data: Mapping[str, Any], gpus_raw: list[Any], source: str) -> NodeReport:
    gpus = []
    for n, g in enumerate(gpus_raw):
        key = f"gpus[{n}]"
        if not isinstance(g, dict):
            raise _shape_error(key, "an object", g)
        text = {k: _typed(g.get(k), str, f"{key}.{k}", "a string or null")
                for k in ("state", "status", "cluster_uuid", "uuid")}
        index = _typed(g.get("index"), int, f"{key}.index", "an integer or null")
        clique = _typed(g.get("clique_id"), int, f"{key}.clique_id", "an integer or null")
        uuid = text["cluster_uuid"] or None
        gpus.append(Gpu(index, text["state"] or None, text["status"] or None, clique,
                        uuid.lower() if uuid else None, text["uuid"] or None))
    plan = _typed(data.get("plan"), dict, "plan", "an object") or {}
    fabric = (_typed(data.get("fabric"), str, "fabric", "a string or null")
              or _typed(plan.get("fabric"), str, "plan.fabric", "a string or null") or None)
    imex = _typed(data.get("imex"), dict, "imex", "an object") or {}
    entries = _strings(imex.get("node_list"), "imex.node_list")
    list_id = (_typed(imex.get("node_list_id"), str, "imex.node_list_id", "a string or null")
               or (node_list_id(entries) if entries else None))
    addresses = _strings(data.get("addresses"), "addresses")
    name = _typed(data.get("hostname"), str, "hostname", "a string or null") or source
    return NodeReport(name, source, tuple(gpus), fabric, addresses, entries, list_id)


@dataclass(frozen=True)
class Domain:
    """One checked group of nodes. ``grouped_by``: ``node list`` (from the reports or a
    ``--node-list`` file) or ``ClusterUUID`` (no node list known)."""

    key: str
    grouped_by: str
    nodes: tuple[str, ...]
    expected_size: int
    entries: int | None = None
    cluster_uuid: str | None = None
    clique_id: int | None = None
    missing: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.key, "grouped_by": self.grouped_by, "count": len(self.nodes),
            "entries": self.entries, "expected_size": self.expected_size,
            "cluster_uuid": self.cluster_uuid, "clique_id": self.clique_id,
            "nodes": list(self.nodes), "missing_reports": list(self.missing), "ok": self.ok,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class FleetResult:
    """The fleet check's answer. ``inputs``: reports read; ``duplicates``: those dropped as
    the same node again (same GPU UUIDs); ``reports``: the nodes checked (inputs less
    duplicates)."""

    domains: tuple[Domain, ...]
    findings: tuple[Finding, ...] = field(default=())
    reports: int = 0
    inputs: int = 0
    duplicates: int = 0

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.domains) and not any(
            f.severity == "error" for f in self.findings)

    def all_findings(self) -> tuple[Finding, ...]:
        return self.findings + tuple(f for d in self.domains for f in d.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reports": self.reports,
            "inputs": self.inputs,
            "duplicates": self.duplicates,
            "domains": [d.to_json() for d in self.domains],
            "findings": [f.to_json() for f in self.all_findings()],
        }


#: One group to check: (key, how it was grouped, members, node list entries without a report).
Group = tuple[str, str, list[NodeReport], "tuple[str, ...] | None"]


def check(nodes: Sequence[NodeReport], domain_size: int = DOMAIN_SIZE_NVL72,
          node_lists: Mapping[str, Sequence[str]] | None = None) -> FleetResult:
    """Group the reports by node list and check each group.

    ``node_lists``: name -> entries (``--node-list`` files); they win over the lists carried in
    the reports. Without any node list, nodes are grouped by their ClusterUUID. Raises
    ValueError when ``domain_size`` < 1.
    """
    if domain_size < 1:
        raise ValueError("domain size must be at least 1")
    inputs = len(nodes)
    nodes, repeated = unique_reports(nodes)
    fleet = _duplicates(nodes, repeated)
    if node_lists:
        groups, stray = _groups_by_given_lists(nodes, node_lists)
        fleet += stray
    else:
        groups = _groups_by_reports(nodes)
    domains = [
        _check_group(key, how, members, missing, domain_size, node_lists)
        for key, how, members, missing in groups
    ]
    return FleetResult(tuple(domains), tuple(fleet), len(nodes), inputs, len(repeated))


def _duplicates(nodes: Sequence[NodeReport], repeated: list[tuple[str, str]]) -> list[Finding]:
    """``domain_report_duplicate`` warnings: reports of the same GPUs (``repeated``, already
    dropped), and one node name on reports of different GPUs."""
    out: list[Finding] = []
    if repeated:
        out.append(Finding(
            "domain_report_duplicate", "warning",
            f"{plural(len(repeated), 'report')} {'repeats' if len(repeated) == 1 else 'repeat'} "
            "the GPUs (same GPU UUIDs) of another, each node counted once: "
            + ", ".join(f"{a} = {b}" for a, b in repeated[:5])
            + (", ..." if len(repeated) > 5 else ""),
            "give each node's report once (a report collected twice, or one node under two "
            "names)", {"duplicates": dict(repeated[:200])}))
    names = Counter(n.name for n in nodes)
    dup = sorted(n for n, c in names.items() if c > 1)
    if dup:
        out.append(Finding(
            "domain_report_duplicate", "warning",
            f"{len(dup)} node name(s) appear in reports of different GPUs: "
            f"{', '.join(dup[:5])}",
            "give each node's report once, and each node its own host name",
            {"nodes": dup[:50]}))
    return out


def _groups_by_given_lists(nodes: Sequence[NodeReport], node_lists: Mapping[str, Sequence[str]]
                           ) -> tuple[list[Group], list[Finding]]:
    """One group per given node list (its entries matched to the reports' identities), and a
    ``domain_report_missing`` warning for reports that match no entry."""
    index: dict[str, NodeReport] = {}
    for n in nodes:
        for ident in n.identities:
            index.setdefault(ident, n)
    groups: list[Group] = []
    assigned: set[int] = set()
    for list_name, entries in node_lists.items():
        members: list[NodeReport] = []
        missing: list[str] = []
        for e in entries:
            found = index.get(e.strip().lower())
            if found is None:
                missing.append(e)
            elif id(found) not in {id(m) for m in members}:
                members.append(found)
                assigned.add(id(found))
        groups.append((list_name, "node list", members, tuple(missing)))
    rest = [n for n in nodes if id(n) not in assigned]
    if not rest:
        return groups, []
    return groups, [Finding(
        "domain_report_missing", "warning",
        f"{len(rest)} report(s) match no entry of the node lists given: "
        + ", ".join(n.name for n in rest[:10]) + (", ..." if len(rest) > 10 else ""),
        "check the host names/addresses in the node lists",
        {"nodes": [n.name for n in rest[:200]]})]


def _groups_by_reports(nodes: Sequence[NodeReport]) -> list[Group]:
    """Groups without given node lists: by the node list the reports carry, else (mnnvl or
    unknown fabric) by the ClusterUUID most of a node's GPUs report; a baseboard node alone."""
    by_list: dict[str, list[NodeReport]] = {}
    by_uuid: dict[str, list[NodeReport]] = {}
    alone: list[NodeReport] = []
    for n in nodes:
        if n.node_list_id:
            by_list.setdefault(n.node_list_id, []).append(n)
        elif n.fabric is not None and n.fabric != "mnnvl":
            alone.append(n)  # an HGX/DGX baseboard: its own NVLink domain
        else:
            common = n.uuids().most_common(1)
            by_uuid.setdefault(common[0][0] if common else "unattached", []).append(n)
    groups: list[Group] = []
    for key, members in by_list.items():
        entries = members[0].node_list
        absent: tuple[str, ...] | None = None
        if entries:
            present = set().union(*(m.identities for m in members))
            absent = tuple(e for e in entries if e.lower() not in present)
        groups.append((key, "node list", members, absent))
    for key, members in by_uuid.items():
        groups.append((key, "ClusterUUID", members, None))
    for n in alone:
        groups.append((n.name, "node", [n], None))
    return groups


def unique_reports(nodes: Sequence[NodeReport]
            ) -> tuple[list[NodeReport], list[tuple[str, str]]]:
    """The reports with each node once: a report whose GPU UUIDs (all of them, at least one)
    are those of an earlier report is the same node again. Returns (unique reports,
    [(repeat's source, first report's name)])."""
    seen: dict[frozenset[str], NodeReport] = {}
    out: list[NodeReport] = []
    repeated: list[tuple[str, str]] = []
    for n in nodes:
        key = frozenset(g.uuid.lower() for g in n.gpus if g.uuid)
        if key and len(key) == len(n.gpus) and key in seen:
            repeated.append((n.source if n.source != n.name else n.name, seen[key].name))
            continue
        if key and len(key) == len(n.gpus):
            seen[key] = n
        out.append(n)
    return out, repeated


def _majority(members: Sequence[NodeReport], values: Callable[[NodeReport], Counter[Any]],
              where: str, what: str, code: FindingCode, field_name: str,
              hint: str) -> tuple[Any, Finding | None]:
    """The value most GPUs of ``members`` report (ClusterUUID or CliqueId, by ``values``;
    None when none reports one) and, when they report more than one, the ``code`` error
    naming the nodes whose GPUs differ from it (``field_name``: the majority value)."""
    votes: Counter[Any] = Counter()
    for m in members:
        votes.update(values(m))
    main = votes.most_common(1)[0][0] if votes else None
    if len(votes) <= 1:
        return main, None
    odd = {m.name: sorted(values(m)) for m in members
           if values(m) and set(values(m)) != {main}}
    return main, Finding(
        code, "error",
        f"{where}: GPUs report {len(votes)} {what}; {len(odd)} node(s) differ from {main}: "
        + ", ".join(list(odd)[:8]) + (", ..." if len(odd) > 8 else ""),
        hint, {field_name: main, "nodes": odd})


def _single_node(node: NodeReport) -> Domain:
    """An HGX/DGX baseboard node as its own NVLink domain (domain size 1): healthy when each
    GPU that reports a fabric state completed registration with success; a zero ClusterUUID is
    what such a node reports (NVML: no multi-node domain), never a fault here."""
    bad = [f"GPU {g.index}: " + (f"state {g.state or 'unknown'}" if g.state != "completed"
                                 else f"status {g.status}")
           for g in node.gpus
           if g.state not in ("completed", "not_supported")
           or (g.state == "completed" and g.status not in ("success", None))]
    findings: list[Finding] = []
    if bad:
        findings.append(Finding(
            "domain_gpus_not_attached", "error",
            f"node {node.name} ({node.fabric}, its own NVLink domain): GPUs not registered with "
            "its NVLink fabric: " + ", ".join(bad[:4]) + (", ..." if len(bad) > 4 else ""),
            "run `nvfabric status` on the node: registration in progress or failed means "
            "fabric manager (and NVLSM on B200/B300) must be checked there",
            {"nodes": {node.name: bad}}))
    uuids = sorted({g.cluster_uuid for g in node.gpus if g.cluster_uuid})
    cliques = sorted({g.clique_id for g in node.gpus if g.clique_id is not None})
    return Domain(node.name, "node", (node.name,), 1, None,
                  uuids[0] if len(uuids) == 1 else None,
                  cliques[0] if len(cliques) == 1 else None, (), tuple(findings))


def _check_group(key: str, how: str, members: list[NodeReport],
                 missing: tuple[str, ...] | None, size: int,
                 node_lists: Mapping[str, Sequence[str]] | None) -> Domain:
    """One group as a domain: baseboard nodes mixed in, ClusterUUID and CliqueId splits, GPUs
    not attached, the size against ``size`` trays, node list entries without a report."""
    if how == "node":
        return _single_node(members[0])
    names = tuple(m.name for m in members)
    where = f"{how} {key}"
    entries: int | None = None
    if node_lists and key in node_lists:
        entries = len(node_lists[key])
    elif members and members[0].node_list:
        entries = len(members[0].node_list)
    single = [m for m in members if m.fabric is not None and m.fabric != "mnnvl"]
    findings = _mixed(where, members, single)
    main_uuid, split = _majority(
        members, NodeReport.uuids, where, "ClusterUUIDs", "domain_cluster_uuid_split",
        "cluster_uuid",
        "a node list must hold trays of one NVLink domain: move these nodes to the node "
        "list of their own domain (or check the NVLink switch trays' fabric manager)")
    if split is not None and not single:
        findings.append(split)
    main_clique, split = _majority(
        members, NodeReport.cliques, where, "CliqueIds", "domain_clique_split", "clique_id",
        "GPUs of one IMEX domain must share a clique (one NVLink partition): check the "
        "partition the NVLink switch trays assigned")
    if split is not None and not single:
        findings.append(split)
    findings += _unattached(where, members)
    if not single:
        findings += _size(where, how, entries if entries is not None else len(members), size)
    if missing:
        findings.append(Finding(
            "domain_report_missing", "warning",
            f"{where}: no report from {plural(len(missing), 'node list entry')}: "
            + ", ".join(missing[:8])
            + (", ..." if len(missing) > 8 else ""),
            "collect `nvfabric status --json` from every node of the list",
            {"entries": list(missing)}))
    return Domain(key, how, names, size, entries, main_uuid, main_clique,
                  tuple(missing or ()), tuple(findings))


def _mixed(where: str, members: list[NodeReport], single: list[NodeReport]) -> list[Finding]:
    """``domain_not_nvlink_domain`` when a group of two or more holds baseboard nodes
    (``single``: their NVLink domain is the node itself)."""
    if len(members) < 2 or not single:
        return []
    kinds = Counter(m.fabric for m in single)
    return [Finding(
        "domain_not_nvlink_domain", "error",
        f"{where} holds {len(single)} node(s) whose NVLink domain is the node itself ("
        + ", ".join(f"{k} x{c}" for k, c in kinds.items()) + "): "
        + ", ".join(m.name for m in single[:8])
        + "; IMEX cannot share memory between separate NVLink domains",
        "put only trays of one multi-node NVLink domain (GB200/GB300 NVL) in a node list; "
        "HGX/DGX baseboard nodes need no IMEX node list across nodes",
        {"nodes": [m.name for m in single[:200]], "fabrics": dict(kinds)})]


def _unattached(where: str, members: list[NodeReport]) -> list[Finding]:
    """``domain_gpus_not_attached`` naming the trays (mnnvl or unknown fabric) with a GPU not
    attached to the NVLink fabric, or no GPU at all."""
    unattached: dict[str, list[str]] = {}
    for m in members:
        if m.fabric is not None and m.fabric != "mnnvl":
            continue
        if not m.gpus:
            unattached[m.name] = ["no GPU in the report"]
            continue
        bad = [f"GPU {g.index}: {g.why_not()}" for g in m.gpus if not g.attached]
        if bad:
            unattached[m.name] = bad
    if not unattached:
        return []
    first = list(unattached.items())[:5]
    return [Finding(
        "domain_gpus_not_attached", "error",
        f"{where}: {len(unattached)} node(s) have GPUs not attached to the NVLink fabric: "
        + "; ".join(f"{n} ({', '.join(v[:2])}{', ...' if len(v) > 2 else ''})"
                    for n, v in first)
        + ("; ..." if len(unattached) > 5 else ""),
        "run `nvfabric status` on each: registration still in progress, an error status or "
        "an all-zero ClusterUUID point at the NVLink switch trays or the tray's cabling",
        {"nodes": unattached})]


def _size(where: str, how: str, count: int, size: int) -> list[Finding]:
    """``domain_size_mismatch``: more than ``size`` trays (error), fewer (warning)."""
    if count > size:
        return [Finding(
            "domain_size_mismatch", "error",
            f"{where} has {plural(count, 'node')}; one NVLink domain has {size} compute trays",
            f"split it: one node list per NVLink domain of {size} trays (group the nodes "
            "by ClusterUUID)",
            {"count": count, "expected_size": size})]
    if count < size:
        return [Finding(
            "domain_size_mismatch", "warning",
            f"{where} has {count} of the {size} trays of an NVLink domain"
            + (" (a partial list, as for one job)" if how == "node list" else
               " reporting"),
            "fine for a per-job node list; for a whole-rack list add the missing trays",
            {"count": count, "expected_size": size})]
    return []

"""The Slurm topology of a fleet's NVLink domains: ``topology.conf`` for Slurm's
``topology/block`` plugin, from the same ``nvfabric status --json`` reports ``domain check``
reads. Pure.

One block per NVLink domain (the ClusterUUID and CliqueId every GPU of its trays reports, NVML
``nvmlGpuFabricInfo_t``), its nodes as a Slurm hostlist (python-hostlist), then a
``BlockSizes`` line. topology.conf(5), "topology/block": ``BlockName=`` (arbitrary, unique),
``Nodes=`` (a hostlist), ``BlockSizes=`` (the planning base block size, then higher levels,
each a power of two times the one before; every block holds at least the base size). Without
``--block-sizes`` the sizes are inferred as NVIDIA Topograph does for its Slurm engine ("Topograph
with SLURM", automatic block-size inference): the smallest block's node count D and the
doubling sequence D, 2D, ... up to the largest power of two of blocks (2^floor(log2 N) x D).

A node whose fabric is not registered (a GPU not completed, an error status, an all-zero
ClusterUUID), whose GPUs report two domains, or whose name is no Slurm node name is left out
with a ``domain_node_left_out`` warning naming it and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvfabric.model.findings import Finding
from nvfabric.rules.imex.domain import NodeReport, unique_reports

#: A Slurm node name as a hostlist element may carry it (letters, digits, ``.``, ``_``, ``-``).
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Block:
    """One NVLink domain: its ``name`` in topology.conf, the ``cluster_uuid`` and
    ``clique_id`` its GPUs report, its ``nodes`` (sorted)."""

    name: str
    cluster_uuid: str
    clique_id: int
    nodes: tuple[str, ...]

    @property
    def hostlist(self) -> str:
        import hostlist  # type: ignore[import-untyped]

        return str(hostlist.collect_hostlist(list(self.nodes)))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cluster_uuid": self.cluster_uuid,
                "clique_id": self.clique_id, "nodes": list(self.nodes),
                "hostlist": self.hostlist}


@dataclass(frozen=True)
class Topology:
    """``blocks`` in order, ``block_sizes`` (given or inferred), ``findings`` (the nodes left
    out, a block smaller than the base size)."""

    blocks: tuple[Block, ...]
    block_sizes: tuple[int, ...]
    findings: tuple[Finding, ...]

    def slurm_conf(self) -> str:
        """The topology.conf text: a comment naming each block's domain, its ``BlockName``
        line, then ``BlockSizes``."""
        lines = ["# topology.conf for Slurm's topology/block plugin, written by nvfabric "
                 "domain topology:", "# one block per NVLink domain (ClusterUUID, CliqueId)."]
        for b in self.blocks:
            lines.append(f"# ClusterUUID {b.cluster_uuid} CliqueId {b.clique_id}: "
                         f"{len(b.nodes)} node(s)")
            lines.append(f"BlockName={b.name} Nodes={b.hostlist}")
        if self.block_sizes:
            lines.append("BlockSizes=" + ",".join(map(str, self.block_sizes)))
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"format": "slurm", "blocks": [b.to_json() for b in self.blocks],
                "block_sizes": list(self.block_sizes), "text": self.slurm_conf(),
                "findings": [f.to_json() for f in self.findings]}


def inferred_sizes(block_nodes: Sequence[int]) -> tuple[int, ...]:
    """D, 2D, ... 2^floor(log2 N) x D for N blocks, the smallest of D nodes (Topograph's
    inference); () for no block."""
    if not block_nodes:
        return ()
    base = min(block_nodes)
    out = [base]
    while len(out) < 64 and 2 ** len(out) <= len(block_nodes):
        out.append(base * 2 ** len(out))
    return tuple(out)


def check_sizes(sizes: Sequence[int]) -> str | None:
    """Why ``sizes`` is no BlockSizes value (positive, each a power of two times the one
    before), None when it is."""
    if not sizes or any(s < 1 for s in sizes):
        return "block sizes must be positive whole numbers"
    for low, high in zip(sizes, sizes[1:], strict=False):
        ratio, rest = divmod(high, low)
        if rest or ratio < 2 or ratio & (ratio - 1):
            return f"{high} is not a power of two times {low} (topology.conf(5), BlockSizes)"
    return None


def slurm_blocks(nodes: Sequence[NodeReport],
                 block_sizes: Sequence[int] | None = None) -> Topology:
    """The blocks of ``nodes`` (reports of the same node counted once). ValueError for
    ``block_sizes`` that :func:`check_sizes` refuses."""
    if block_sizes is not None and (why := check_sizes(block_sizes)):
        raise ValueError(why)
    unique, _ = unique_reports(nodes)
    domains: dict[tuple[str, int], list[str]] = {}
    left: dict[str, str] = {}
    for n in unique:
        if n.fabric not in (None, "mnnvl"):
            left[n.name] = f"fabric {n.fabric}: not a multi-node NVLink tray"
            continue
        why = _why_left_out(n)
        if why:
            left[n.name] = why
            continue
        key = (next(iter(n.uuids())), next(iter(n.cliques())))
        if n.name not in domains.setdefault(key, []):
            domains[key].append(n.name)
    blocks = tuple(Block(f"block{i}", uuid, clique, tuple(sorted(names)))
                   for i, ((uuid, clique), names) in enumerate(sorted(domains.items()), 1))
    sizes = tuple(block_sizes) if block_sizes is not None else inferred_sizes(
        [len(b.nodes) for b in blocks])
    findings: list[Finding] = []
    if left:
        shown = "; ".join(f"{k} ({v})" for k, v in list(left.items())[:8])
        findings.append(Finding(
            "domain_node_left_out", "warning",
            f"{len(left)} node(s) left out of topology.conf: {shown}"
            + ("; ..." if len(left) > 8 else ""),
            "run `nvfabric status` on each: a node joins its block once every GPU completed "
            "fabric registration with one ClusterUUID and CliqueId; then write the file again",
            {"nodes": left}))
    if sizes and blocks:
        small = [b.name for b in blocks if len(b.nodes) < sizes[0]]
        if small:
            findings.append(Finding(
                "domain_node_left_out", "warning",
                f"{', '.join(small)} hold(s) fewer nodes than the base block size {sizes[0]}: "
                "Slurm cannot place a base block there",
                "give --block-sizes with a base no larger than the smallest block, or bring "
                "its missing nodes up", {"blocks": small, "base": sizes[0]}))
    if not blocks:
        findings.append(Finding(
            "domain_node_left_out", "error",
            "no node has a registered NVLink fabric: topology.conf would hold no block",
            "run `nvfabric status` on the trays; give the reports of registered ones",
            {"nodes": left}))
    return Topology(blocks, sizes, tuple(findings))


def _why_left_out(n: NodeReport) -> str | None:
    if not NODE_NAME.fullmatch(n.name):
        return "its name is not a Slurm node name (the report has no hostname?)"
    if not n.gpus:
        return "no GPU in the report"
    bad = [g for g in n.gpus if not g.attached]
    if bad:
        return f"GPU {bad[0].index}: {bad[0].why_not()}: fabric not registered"
    if len(n.uuids()) != 1 or len(n.cliques()) != 1:
        return "its GPUs report more than one ClusterUUID or CliqueId"
    return None

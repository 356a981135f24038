"""``nvfabric domain check REPORT...``: the fleet check over many nodes' ``nvfabric status
--json`` reports (collected any way: pdsh, a Slurm job, a Kubernetes Job).

A REPORT is a file holding one JSON object or JSON Lines (one report per line), a directory
(its ``*.json`` files), or ``-`` (stdin, JSON Lines or one object).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import click

from ..errors import usage_error
from ..imex import domain as fleet
from ..imex import nodes
from ..imex.facts import DOMAIN_SIZE_NVL72
from ..output import console, guarded, json_option, print_findings, print_json


@click.group("domain")
def domain() -> None:
    """Checks across the nodes of multi-node NVLink domains."""


def _objects(text: str, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    stripped = text.strip()
    if not stripped:
        raise usage_error(f"{where}: empty report")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield where, whole
        return
    if isinstance(whole, list):
        for i, obj in enumerate(whole):
            if not isinstance(obj, dict):
                raise usage_error(f"{where}[{i}]: not a JSON object")
            yield f"{where}[{i}]", obj
        return
    # A stream of objects: JSON Lines, concatenated (indented) objects, or lines with a prefix
    # before the object (`pdsh`'s "host: ", `kubectl logs --prefix`'s "[pod/...] ").
    decoder = json.JSONDecoder()
    pos = 0
    number = 1
    while True:
        start = stripped.find("{", pos)
        if start < 0:
            break
        number += stripped.count("\n", pos, start)
        try:
            obj, pos = decoder.raw_decode(stripped, start)
        except json.JSONDecodeError as err:
            raise usage_error(f"{where}:{number}: bad JSON: {err.msg}") from None
        if not isinstance(obj, dict):
            raise usage_error(f"{where}:{number}: not a JSON object")
        yield f"{where}:{number}", obj
        number += stripped.count("\n", start, pos)
    if pos == 0:
        raise usage_error(f"{where}: no JSON object")


def read_reports(paths: tuple[str, ...]) -> list[fleet.NodeReport]:
    """Every report under ``paths``; usage error (exit 2) on anything unreadable."""
    out: list[fleet.NodeReport] = []
    for path in paths:
        if path == "-":
            sources = [("-", sys.stdin.read())]
        elif os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(".json"))
            if not names:
                raise usage_error(f"{path}: no *.json report in this directory")
            sources = [(os.path.join(path, n), _read(os.path.join(path, n))) for n in names]
        else:
            sources = [(path, _read(path))]
        for where, text in sources:
            for label, obj in _objects(text, where):
                if "error" in obj and "gpus" not in obj:
                    err = obj["error"]
                    msg = err.get("message") if isinstance(err, dict) else err
                    obj = {**{k: v for k, v in obj.items() if k != "error"}, "gpus": [],
                           "status_error": msg}
                name = os.path.splitext(os.path.basename(label))[0] if label != "-" else label
                try:
                    out.append(fleet.node_from_status(obj, name))
                except ValueError as err2:
                    raise usage_error(str(err2), "give `nvfabric status --json` output") \
                        from None
    if not out:
        raise usage_error("no reports given")
    return out


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(64 << 20)
    except OSError as err:
        raise usage_error(f"cannot read {path}: {err.strerror or err}") from None


def read_node_lists(paths: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for path in paths:
        try:
            peers = nodes.parse_nodes_config(_read(path))
        except nodes.PeerError as err:
            raise usage_error(f"{path}: {err}") from None
        out[path] = tuple(p.text for p in peers)
    return out


@domain.command("check")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT...")
@click.option("--domain-size", type=click.IntRange(1, 4096), default=DOMAIN_SIZE_NVL72,
              show_default=True, help="Compute trays per NVLink domain (18 for NVL72).")
@click.option("--node-list", "node_lists", multiple=True, metavar="FILE",
              help="A nodes_config.cfg defining one domain (repeat); default: the node lists "
                   "the reports carry, else ClusterUUID.")
@json_option
@guarded
def check(reports: tuple[str, ...], domain_size: int, node_lists: tuple[str, ...],
          as_json: bool) -> None:
    """Check that the nodes of each node list share one ClusterUUID and CliqueId, that the
    list fits the NVLink domain, and name the nodes whose GPUs are not attached; exit 1 on
    any error."""
    nodes_ = read_reports(reports)
    result = fleet.check(nodes_, domain_size, read_node_lists(node_lists) or None)
    if as_json:
        print_json(result.to_json())
    else:
        con = console()
        con.print(f"[bold]{result.reports} reports, {len(result.domains)} domain(s)[/bold]")
        for d in result.domains:
            mark = "[green]ok[/]" if d.ok else "[bold red]bad[/]"
            con.print(f"  {mark} {d.grouped_by} {d.key}: {len(d.nodes)} nodes"
                      f" (size {d.expected_size}), ClusterUUID {d.cluster_uuid}, "
                      f"CliqueId {d.clique_id}")
        print_findings(con, list(result.all_findings()), "findings")
    if not result.ok:
        sys.exit(1)

"""``nvfabric domain check REPORT...``: the fleet check over many nodes' ``nvfabric status
--json`` reports (collected any way: pdsh, a Slurm job, a Kubernetes Job); ``nvfabric domain
topology --format slurm REPORT...``: Slurm's topology.conf (topology/block) from the same
reports, one block per NVLink domain.

A REPORT is a file holding one JSON object or JSON Lines (one report per line), a directory
(its ``*.json`` files), or ``-`` (stdin, JSON Lines or one object).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import click

from nvfabric.cli.render import console, guarded, json_option, print_findings, safe
from nvfabric.effects.atomic import write_atomic
from nvfabric.effects.stdio import print_json
from nvfabric.facts.textfile import read_capped
from nvfabric.model import strict
from nvfabric.model.errors import usage_error
from nvfabric.model.words import plural
from nvfabric.rules.imex import domain as fleet
from nvfabric.rules.imex import nodes
from nvfabric.rules.imex import topology as slurm_topology
from nvfabric.rules.imex.tables import DOMAIN_SIZE_NVL72


@click.group("domain")
def domain() -> None:
    """Checks across the nodes of multi-node NVLink domains."""


#: A collector's line prefix: `kubectl logs --prefix`'s ``[pod/NAME/CONTAINER] `` or pdsh's
#: ``host: `` (a name starting with a letter or digit, then ``: ``). JSON text never starts a
#: line that way: its lines start with a brace, bracket, quote or indentation.
LINE_PREFIX = re.compile(r"^(?:\[(?P<bracket>[^\]\n]+)\] ?|(?P<host>[A-Za-z0-9][\w.@-]*): )")


def _split_prefixes(text: str) -> list[tuple[str | None, str]]:
    """The text as (prefix, text) groups: the lines of each collector prefix joined (a
    multi-line report through pdsh has the prefix on every line), lines without one in the
    group ``None``; groups in order of first appearance."""
    groups: dict[str | None, list[str]] = {}
    for line in text.splitlines():
        m = LINE_PREFIX.match(line)
        key = (m.group("bracket") or m.group("host")) if m else None
        groups.setdefault(key, []).append(line[m.end():] if m else line)
    return [(k, "\n".join(v)) for k, v in groups.items() if "".join(v).strip()]


def _objects(text: str, where: str) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(label, object, collector prefix or None) of every report in one input's text."""
    stripped = text.strip()
    if not stripped:
        raise usage_error(f"{where}: empty report", "give `nvfabric status --json` output")
    try:
        whole = strict.parse_json(stripped)
    except strict.NotJson:
        whole = None  # JSON Lines, concatenated objects or prefixed lines: read below
    except strict.BadValue as err:
        raise usage_error(f"{where}: {err}", "give `nvfabric status --json` output") from None
    if isinstance(whole, dict):
        yield where, whole, None
        return
    if isinstance(whole, list):
        for i, obj in enumerate(whole):
            if not isinstance(obj, dict):
                raise usage_error(f"{where}[{i}]: not a JSON object",
                                  "give `nvfabric status --json` objects")
            yield f"{where}[{i}]", obj, None
        return
    found = False
    for prefix, body in _split_prefixes(stripped):
        label = where if prefix is None else f"{where} [{prefix}]"
        for sub, obj in _stream(body, label):
            found = True
            yield sub, obj, prefix
    if not found:
        raise usage_error(f"{where}: no JSON object", "give `nvfabric status --json` output")


def _stream(text: str, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A stream of objects: JSON Lines or concatenated (indented) objects; text between them
    is skipped."""
    pos = 0
    number = 1
    while True:
        start = text.find("{", pos)
        if start < 0:
            break
        number += text.count("\n", pos, start)
        try:
            obj, pos = strict.raw_decode(text, start)
        except strict.NotJson as err:
            raise usage_error(f"{where}:{number}: bad JSON: {err}",
                              "give `nvfabric status --json` output, whole") from None
        except strict.BadValue as err:
            raise usage_error(f"{where}:{number}: {err}",
                              "give `nvfabric status --json` output") from None
        if not isinstance(obj, dict):
            raise usage_error(f"{where}:{number}: not a JSON object",
                              "give `nvfabric status --json` objects")
        yield f"{where}:{number}", obj
        number += text.count("\n", start, pos)


def read_reports(paths: tuple[str, ...]) -> list[fleet.NodeReport]:
    """Every report under ``paths``; usage error (exit 2) on anything unreadable. A report
    without ``hostname`` is named by its collector's line prefix (pdsh ``host: ``, kubectl
    ``[pod/NAME/CONTAINER] ``), else by where it came from: the file's name, and its line or
    position when the file holds several reports (``fleet:3``, ``fleet[2]``)."""
    out: list[fleet.NodeReport] = []
    for path in paths:
        if path == "-":
            sources = [("-", _read("-"))]
        elif os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(".json"))
            if not names:
                raise usage_error(f"{path}: no *.json report in this directory",
                                  "give the directory the reports were saved in")
            sources = [(os.path.join(path, n), _read(os.path.join(path, n))) for n in names]
        else:
            sources = [(path, _read(path))]
        for where, text in sources:
            objects = list(_objects(text, where))
            for label, obj, prefix in objects:
                if "error" in obj and "gpus" not in obj:
                    err = obj["error"]
                    msg = err.get("message") if isinstance(err, dict) else err
                    obj = {**{k: v for k, v in obj.items() if k != "error"}, "gpus": [],
                           "status_error": msg}
                if prefix is not None:
                    name = prefix
                elif where != "-":
                    # The file's name without its extension (a compression's too:
                    # fleet.jsonl.gz is "fleet" as fleet.jsonl is); with several reports in
                    # one file (JSON Lines, an array) also the line or position: "fleet:3",
                    # "fleet[2]".
                    base = os.path.basename(where)
                    base = re.sub(r"\.(gz|xz|bz2|zst)$", "", base)
                    name = os.path.splitext(base)[0]
                    if len(objects) > 1:
                        name += label[len(where):]
                else:
                    name = label
                try:
                    out.append(fleet.node_from_status(obj, name))
                except ValueError as err2:
                    why = str(err2).removeprefix(f"{name}: ")
                    raise usage_error(f"{label}: {why}",
                                      "give `nvfabric status --json` output") from None
    if not out:
        raise usage_error("no reports given", "give report files, directories or -")
    return out


#: The most a report input may hold: 64 MiB is tens of thousands of nodes' reports.
MAX_REPORT_BYTES = 64 << 20


def _read(path: str, holds: str = "`nvfabric status --json` output") -> str:
    """A report file (``-``: stdin), refused over :data:`MAX_REPORT_BYTES` (never cut), and
    refused when it is not text (a binary file is not "bad JSON at line 8"); ``holds`` what
    it should hold, for the hint."""
    data = read_capped(path, MAX_REPORT_BYTES, "domain reports",
                              "give a readable file or directory")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise usage_error(f"{path} is not a text file (byte 0x{data[err.start]:02x} at offset "
                          f"{err.start} is not UTF-8)", f"give {holds}") from None
    if "\x00" in text:
        raise usage_error(f"{path} is not a text file (it holds NUL bytes)", f"give {holds}")
    return text


def read_node_lists(paths: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for path in paths:
        try:
            peers = nodes.parse_nodes_config(_read(path, "a node list: one address or host "
                                                       "name per line"))
        except nodes.PeerError as err:
            raise usage_error(f"{path}: {err}", "one address or host name per line") from None
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
        dups = f", {plural(result.duplicates, 'duplicate')}" if result.duplicates else ""
        con.print(f"[bold]{plural(result.inputs, 'report')} read{dups}, "
                  f"{plural(len(result.domains), 'domain')}[/bold]")
        for d in result.domains:
            mark = "[green]ok[/]" if d.ok else "[bold red]bad[/]"
            uuid = "none" if d.cluster_uuid is None else d.cluster_uuid
            clique = "none" if d.clique_id is None else d.clique_id
            con.print(f"  {mark} {d.grouped_by} {safe(d.key)}: "
                      f"{plural(len(d.nodes), 'node')} (size {d.expected_size}), "
                      f"ClusterUUID {safe(uuid)}, "
                      f"CliqueId {safe(clique)}", emoji=False)
        print_findings(con, list(result.all_findings()), "findings")
    if not result.ok:
        sys.exit(1)


@domain.command("topology")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT...")
@click.option("--format", "fmt", type=click.Choice(["slurm"]), default="slurm",
              show_default=True, help="slurm: topology.conf of the topology/block plugin.")
@click.option("--block-sizes", default=None, metavar="N[,N...]",
              help="BlockSizes (base, then each a power of two times the one before); "
                   "default: inferred from the blocks (smallest block, doubled while the "
                   "blocks allow).")
@click.option("--output", default=None, metavar="FILE",
              help="Write topology.conf there (atomically) instead of to stdout.")
@json_option
@guarded
def topology(reports: tuple[str, ...], fmt: str, block_sizes: str | None, output: str | None,
             as_json: bool) -> None:
    """Slurm's topology.conf for topology/block from nvfabric status reports: one block per
    NVLink domain (ClusterUUID + CliqueId), its nodes as a hostlist, and BlockSizes; nodes
    whose fabric is not registered are left out with a warning. Exit 1 when no block is left."""
    sizes = None
    if block_sizes is not None:
        try:
            sizes = [int(v) for v in block_sizes.split(",")]
        except ValueError:
            raise usage_error(f"--block-sizes {block_sizes!r}: not a comma list of numbers",
                              "e.g. --block-sizes 18 or 16,32") from None
    try:
        result = slurm_topology.slurm_blocks(read_reports(reports), sizes)
    except ValueError as err:
        raise usage_error(f"--block-sizes {block_sizes}: {err}", "e.g. 18, or 16,32") from None
    text = result.slurm_conf()
    if output is not None and not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise usage_error(f"--output {output}: its directory does not exist",
                          "give a file in an existing directory")
    if output is not None and result.blocks:
        try:
            write_atomic(os.path.abspath(output), text, mode=0o644)
        except OSError as err:
            raise usage_error(f"cannot write {output}: {err.strerror or err}",
                              "give a writable path") from None
    written = output if result.blocks else None
    if as_json:
        print_json({**result.to_json(), "output": written})
    else:
        if output is None:
            sys.stdout.write(text)
        elif written is None:
            console().print(f"nothing written to {safe(output)}: no block")
        else:
            console().print(f"wrote {safe(output)}: {len(result.blocks)} block(s)")
        print_findings(console(stderr=True) if output is None else console(),
                       list(result.findings), "findings")
    if not result.blocks:
        sys.exit(1)

"""A GPU's fabric cliques by type in ``nvfabric status --json`` (``gpus[].cliques``: NVML
615's ``nvmlGpuFabricInfo_v4``, up to 64 (type, id) pairs), and the fleet check's rule for
them (:mod:`nvfabric.rules.imex.domain`). Pure.

Without cliques by type a domain's GPUs must share one CliqueId. With them, each type must be
one id across the domain; where the GPUs report a unicast logical endpoint clique (the reach
of memory shared by handle, what IMEX exports), a split of a pointer clique is a warning only:
a pointer's reach may be narrower than the domain (NVML's reference: the legacy CliqueId is
the first unicast pointer clique; Hopper reports the pointer types, Blackwell and Rubin the
logical endpoint types too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import CLIQUE_TYPES

HINT = ("GPUs of one IMEX domain must share a clique (one NVLink partition): check the "
        "partition the NVLink switch trays assigned")


def _shape(key: str, what: str, value: object) -> ValueError:
    return ValueError(f"{key}: expected {what}, got {type(value).__name__} {value!r:.60}")


def parse(value: object, key: str) -> tuple[tuple[str, int], ...]:
    """``gpus[].cliques``: a list of ``{"type": str, "id": int}``; absent or null: none.
    ValueError naming ``key`` for another shape."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _shape(key, "a list of cliques", value)
    out = []
    for i, c in enumerate(value):
        kind, number = (c.get("type"), c.get("id")) if isinstance(c, dict) else (None, None)
        if not isinstance(kind, str) or not isinstance(number, int) or isinstance(number, bool):
            raise _shape(f"{key}[{i}]", 'an object {"type": string, "id": integer}', c)
        out.append((kind, number))
    return tuple(out)


def _ids(member: Any, kind: str) -> Counter[int]:
    """The ids of the ``kind`` cliques of a node report's attached GPUs."""
    return Counter(i for g in member.gpus if g.attached for t, i in g.cliques if t == kind)


def splits(where: str, members: Sequence[Any], legacy: Finding | None) -> list[Finding]:
    """The clique findings of a group of node reports (:class:`NodeReport`): ``legacy`` (the
    CliqueId split, or None) when no GPU reports cliques by type; else one
    ``domain_clique_split`` per type whose ids differ (see the module docstring)."""
    kinds = [k for k in CLIQUE_TYPES if any(_ids(m, k) for m in members)]
    if not kinds:
        return [] if legacy is None else [legacy]
    out = []
    for kind in kinds:
        votes: Counter[int] = Counter()
        for m in members:
            votes.update(_ids(m, kind))
        if len(votes) <= 1:
            continue
        main = votes.most_common(1)[0][0]
        odd = {m.name: sorted(_ids(m, kind)) for m in members
               if _ids(m, kind) and set(_ids(m, kind)) != {main}}
        narrower = "unicast_logical_endpoint" in kinds and kind.endswith("_pointer")
        out.append(Finding(
            "domain_clique_split", "warning" if narrower else "error",
            f"{where}: GPUs report {len(votes)} {kind} cliques; {len(odd)} node(s) differ from "
            f"{main}: " + ", ".join(list(odd)[:8]) + (", ..." if len(odd) > 8 else ""),
            HINT + ("; a pointer clique narrower than the domain is expected across racks"
                    if narrower else ""),
            {"clique_id": main, "clique_type": kind, "nodes": odd}))
    return out

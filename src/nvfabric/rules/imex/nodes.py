"""The IMEX node list (nodes_config.cfg): parse, expand, validate, check locality. Pure.

Every IMEX daemon of a domain reads the same list, one entry per line: an IPv4/IPv6 address,
or (from driver 570.158.01, :data:`~nvfabric.rules.imex.tables.HOSTNAMES_MIN_DRIVER`) a host name.
The daemon finds itself by matching the entries against its interfaces; with no match it
logs "No matching network interface found for any IP addresses in the node configuration
file" and is useless while other probes stay green (case tests/data/cases/D07). Sources:
NVIDIA IMEX guide, "Deployment Models"; captures tests/data/corpus/imex/
aws-parallelcluster-nvidia-imex-nodes.erb and imex-570.124.06-nodes-config-echo-and-
startup-dra298.log.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nvfabric.model.errors import InputError
from nvfabric.model.findings import Finding
from nvfabric.model.strict import is_uint, to_int
from nvfabric.rules.imex.tables import HOSTNAMES_MIN_DRIVER

#: RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")



#: Characters of a Slurm hostlist expression (SLURM_JOB_NODELIST of a very large job fits).
MAX_HOSTLIST = 1 << 16
#: Hosts one expression may name: an IMEX domain is a rack or a few (NVL72: 18 trays); 4,096
#: is far past any, and keeps the expansion well under a second.
MAX_SLURM_HOSTS = 4096


class PeerError(InputError):
    """An entry that may not go into nodes_config.cfg (names the entry)."""


@dataclass(frozen=True)
class Peer:
    """One node list entry as written; ``kind`` ``ipv4``, ``ipv6`` or ``hostname``."""

    text: str
    kind: str

    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        return ipaddress.ip_address(self.text) if self.kind != "hostname" else None


def parse_entry(text: str) -> Peer:
    """One entry; raises PeerError for anything that is not an address or a host name
    (spaces, shell characters, URLs, a port)."""
    entry = text.strip()
    if not entry:
        raise PeerError("empty node list entry")
    try:
        addr = ipaddress.ip_address(entry)
    except ValueError:
        if len(entry) <= 253 and _HOSTNAME.fullmatch(entry) and not _looks_numeric(entry):
            return Peer(entry, "hostname")
        raise PeerError(f"{entry!r} is neither an IP address nor a host name") from None
    return Peer(str(addr) if addr.version == 6 else entry, f"ipv{addr.version}")


def _looks_numeric(entry: str) -> bool:
    """``10.0.0.256`` is a broken address, not a host name."""
    return is_uint(entry.replace(".", ""))


def parse_nodes_config(text: str) -> tuple[Peer, ...]:
    """nodes_config.cfg text (``#`` comments and blank lines skipped); raises PeerError."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            out.append(parse_entry(stripped))
        except PeerError as err:
            raise PeerError(f"line {number}: {err}") from None
    return tuple(out)


def expand_slurm(expression: str) -> tuple[Peer, ...]:
    """A Slurm hostlist expression (``gb-[01-18]``, ``a[1-2],b3``) as host name entries, in
    Slurm's order. Expansion by python-hostlist; raises PeerError on a bad expression."""
    import hostlist  # type: ignore[import-untyped]

    shown = expression if len(expression) <= 80 else expression[:80] + "..."
    if len(expression) > MAX_HOSTLIST:
        raise PeerError(f"Slurm hostlist {shown!r} is longer than {MAX_HOSTLIST} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in expression.strip()):
        raise PeerError(f"bad Slurm hostlist {shown!r}: it holds control characters (a "
                        "newline, a tab)")
    limit = hostlist.MAX_SIZE
    hostlist.MAX_SIZE = MAX_SLURM_HOSTS  # its own size guard, at nvfabric's bound (no 100,000
    try:                                 # names built and parsed first: seconds of CPU)
        names: list[str] = hostlist.expand_hostlist(expression.strip())
    except hostlist.BadHostlist as err:
        raise PeerError(f"bad Slurm hostlist {shown!r}: {err}") from None
    except (RecursionError, ValueError, IndexError, TypeError) as err:
        # python-hostlist's own failures on hostile input: it recurses once per bracket
        # (``[][`` + newline + ``]``: RecursionError, tests/data/fuzz)
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise PeerError(f"bad Slurm hostlist {shown!r}: {why}") from None
    finally:
        hostlist.MAX_SIZE = limit
    if len(names) > MAX_SLURM_HOSTS:
        raise PeerError(f"Slurm hostlist {shown!r} names more than {MAX_SLURM_HOSTS} hosts")
    if not names:
        raise PeerError(f"Slurm hostlist {expression!r} is empty")
    return tuple(parse_entry(n) for n in names)


def version_tuple(version: str) -> tuple[int, ...]:
    """``570.158.01`` -> (570, 158, 1); ValueError when not dotted digits."""
    return tuple(to_int(p, what="version field", max_digits=12) for p in version.split("."))


def hostnames_supported(driver_version: str | None) -> bool:
    """True when the loaded driver's IMEX accepts host names in the node list."""
    if not driver_version:
        return False
    try:
        return version_tuple(driver_version) >= version_tuple(HOSTNAMES_MIN_DRIVER)
    except ValueError:
        return False


def validate(peers: tuple[Peer, ...], driver_version: str | None) -> tuple[Finding, ...]:
    """``config_invalid_value`` findings: an empty list, duplicates, host names on a driver
    older than 570.158.01."""
    out: list[Finding] = []
    if not peers:
        out.append(Finding("config_invalid_value", "error", "the IMEX node list is empty",
                           "give the addresses of every tray of the domain", {"key": "nodes"}))
    seen: dict[str, int] = {}
    for p in peers:
        key = p.text.lower()
        seen[key] = seen.get(key, 0) + 1
    dups = sorted(k for k, c in seen.items() if c > 1)
    if dups:
        out.append(Finding(
            "config_invalid_value", "error",
            "the IMEX node list repeats " + ", ".join(dups),
            "list every node once; every daemon of the domain must read the same list",
            {"key": "nodes", "duplicates": dups},
        ))
    names = [p.text for p in peers if p.kind == "hostname"]
    if names and not hostnames_supported(driver_version):
        out.append(Finding(
            "config_invalid_value", "error",
            f"host names in the IMEX node list ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}) need driver >= {HOSTNAMES_MIN_DRIVER}; "
            f"driver {driver_version or 'not loaded'} reads addresses only",
            "write IP addresses (resolve the names first), or upgrade the driver and IMEX",
            {"key": "nodes", "driver_version": driver_version,
             "min_driver_version": HOSTNAMES_MIN_DRIVER},
        ))
    return tuple(out)


def _norm(address: str) -> str:
    """An address without its IPv6 scope (``fe80::1%eth0``), normalised."""
    bare = address.split("%", 1)[0]
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return bare.lower()


def local_entries(peers: Iterable[Peer], local_addresses: Iterable[str],
                  local_names: Iterable[str] = (),
                  resolved: Mapping[str, Iterable[str]] | None = None) -> tuple[Peer, ...]:
    """The entries that name this host: an address of one of its interfaces, or a host name
    that is its own (short or fully qualified, case-insensitive) or that resolves
    (``resolved``: lower-case name -> addresses, :func:`nvfabric.facts.imex.tray.resolve_names`)
    to one of its addresses, as IMEX itself resolves the names of a Slurm host list."""
    addrs = {_norm(a) for a in local_addresses}
    names = {n.lower() for n in local_names if n}
    names |= {n.split(".", 1)[0] for n in names}
    resolved = resolved or {}
    out = []
    for p in peers:
        if p.kind == "hostname":
            name = p.text.lower()
            if name in names or any(_norm(a) in addrs for a in resolved.get(name, ())):
                out.append(p)
        elif _norm(p.text) in addrs:
            out.append(p)
    return tuple(out)


def check_local(peers: tuple[Peer, ...], local_addresses: Iterable[str],
                local_names: Iterable[str] = (),
                resolved: Mapping[str, Iterable[str]] | None = None) -> Finding | None:
    """``imex_no_local_interface`` unless exactly one entry names this host
    (:func:`local_entries`)."""
    addrs = sorted({_norm(a) for a in local_addresses})
    mine = local_entries(peers, addrs, local_names, resolved)
    if len(mine) == 1:
        return None
    fields: dict[str, Any] = {"local_addresses": addrs, "entries": [p.text for p in peers]}
    if not mine:
        return Finding(
            "imex_no_local_interface", "error",
            ("the only IMEX node list entry is not" if len(peers) == 1 else
             f"none of the {len(peers)} IMEX node list entries is")
            + " an address of this host: "
            "nvidia-imex would find no matching network interface and serve nothing",
            "put this node's address on the IMEX network in the list (its interfaces: "
            + (", ".join(addrs) or "none") + "), the same list on every node",
            fields,
        )
    return Finding(
        "imex_no_local_interface", "error",
        f"{len(mine)} IMEX node list entries name this host ({', '.join(p.text for p in mine)}): "
        "exactly one must",
        "keep one entry per node (its address on the IMEX network)",
        {**fields, "local_entries": [p.text for p in mine]},
    )


def render(peers: Iterable[Peer]) -> str:
    """nodes_config.cfg text: one entry per line, newline-terminated."""
    return "".join(p.text + "\n" for p in peers)


def node_list_id(entries: Iterable[str]) -> str:
    """Identity of a node list: ``sha256:`` + 16 hex digits of its entries, one per line, in
    order (every daemon of a domain must read the same list in the same order)."""
    text = "\n".join(e.strip().lower() for e in entries)
    import hashlib  # OpenSSL: ~7 ms to load, and only an id needs it

    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]

"""Which dependencies of a cached ``.deb`` may be forced: the only ones are those the node
satisfies outside dpkg (the runfile driver's ``nvidia-modprobe`` and kin, :mod:`.runfile`);
any other unmet dependency refuses the install. Pure.

A ``Depends``/``Pre-Depends`` clause (alternatives ``a | b``, versions ``(>= 580.95.05)``,
parsed by python-debian) is, in this order:

- ``satisfied``: a package installed in the dpkg database (``Status: install ok installed``)
  or one being installed by the same ``dpkg -i`` has the name, or ``Provides`` it, at a version
  the relation accepts (Debian version ordering, python-debian);
- ``forced``: not satisfied, but an alternative is a package the runfile put on disk at a
  version the relation accepts: it goes to ``dpkg --ignore-depends`` and is named in the output;
- ``missing``: neither. The install is refused.

Source: dpkg(1) ``--ignore-depends=package,...`` (checked with dpkg 1.21: it names the
dependency's target, so only that dependency is forgiven); deb-control(5) relation syntax;
Azure/aks-gpu (it installs nvidia-imex with ``dpkg -i --force-depends`` because
the runfile provides nvidia-modprobe outside dpkg).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nvfabric.artifacts.runfile import OnDisk

RELATION_FIELDS = ("Pre-Depends", "Depends")


@dataclass(frozen=True)
class Known:
    """A package dpkg has (or is about to have): name, version, and its ``Provides`` as
    (name, version or None) pairs."""

    name: str
    version: str
    provides: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class Forced:
    """One forced dependency: the clause as written, the package that satisfies it on disk."""

    relation: str
    by: OnDisk

    def to_json(self) -> dict[str, Any]:
        """``{"dependency", "package", "version", "path", "evidence"}``."""
        return {"dependency": self.relation, "package": self.by.name,
                "version": self.by.version, "path": self.by.path,
                "evidence": self.by.evidence()}


@dataclass(frozen=True)
class Decision:
    """The verdict for one ``.deb`` (``package`` ``version``): clauses satisfied in dpkg,
    forced, and missing (each missing one with why)."""

    package: str
    version: str
    satisfied: tuple[str, ...] = ()
    forced: tuple[Forced, ...] = ()
    missing: tuple[str, ...] = field(default=())

    @property
    def ignore(self) -> tuple[str, ...]:
        """The package names for ``dpkg --ignore-depends`` (sorted, unique)."""
        return tuple(sorted({f.by.name for f in self.forced}))


def relations(control: Mapping[str, str]) -> list[list[dict[str, Any]]]:
    """The clauses of ``Pre-Depends`` then ``Depends`` of a control paragraph, as python-debian
    parses them (a list of alternatives per clause). ValueError on text python-debian cannot
    read (it is then not a Debian relation field)."""
    from debian.deb822 import PkgRelation

    out: list[list[dict[str, Any]]] = []
    for name in RELATION_FIELDS:
        text = control.get(name, "")
        if text.strip():
            out += [[dict(alt) for alt in clause]
                    for clause in PkgRelation.parse_relations(text)]
    for clause in out:
        for alt in clause:
            if not alt.get("name"):
                raise ValueError(f"unreadable relation in {dict(control).get('Package')!r}")
    return out


def provides(text: str) -> tuple[tuple[str, str | None], ...]:
    """A ``Provides`` field as (name, version) pairs; the version only for ``(= V)``, the one
    form a Provides may carry (deb-control(5)); an empty field is no pairs."""
    from debian.deb822 import PkgRelation

    if not text.strip():
        return ()
    out: list[tuple[str, str | None]] = []
    for clause in PkgRelation.parse_relations(text):
        for alt in clause:
            ver = alt.get("version")
            out.append((alt["name"], ver[1] if ver and ver[0] == "=" else None))
    return tuple(out)


def accepts(version: str | None, relation: tuple[str, str] | None) -> bool:
    """Whether a package at ``version`` (None: unknown) meets a relation's version part
    (``(">=", "580.95.05")``; None: any version). Debian ordering."""
    if relation is None:
        return True
    if version is None:
        return False
    from debian.debian_support import version_compare

    op, want = relation
    cmp = version_compare(version, want)
    return {
        "<<": cmp < 0, "<=": cmp <= 0, "=": cmp == 0, ">=": cmp >= 0, ">>": cmp > 0,
        "<": cmp <= 0, ">": cmp >= 0,  # obsolete spellings, deb-control(5)
    }.get(op, False)


def clause_text(clause: Sequence[Mapping[str, Any]]) -> str:
    """A clause as a control file writes it: ``nvidia-modprobe (>= 580) | foo``."""
    parts = []
    for alt in clause:
        name = str(alt["name"]) + (f":{alt['archqual']}" if alt.get("archqual") else "")
        ver = alt.get("version")
        parts.append(f"{name} ({ver[0]} {ver[1]})" if ver else name)
    return " | ".join(parts)


def _in_dpkg(alt: Mapping[str, Any], known: Iterable[Known]) -> bool:
    name, rel = alt["name"], alt.get("version")
    for pkg in known:
        if pkg.name == name and accepts(pkg.version, rel):
            return True
        for prov, prov_version in pkg.provides:
            # An unversioned Provides satisfies only unversioned relations (Debian Policy 7.5).
            if prov == name and accepts(prov_version, rel):
                return True
    return False


def decide(
    control: Mapping[str, str], known: Sequence[Known], on_disk: Sequence[OnDisk]
) -> Decision:
    """Classify every dependency clause of ``control`` (see module doc). ``known``: installed
    packages plus the ones installed by the same call; ``on_disk``: the runfile's packages.
    ValueError when the relation fields cannot be parsed."""
    satisfied: list[str] = []
    forced: list[Forced] = []
    missing: list[str] = []
    disk = {d.name: d for d in on_disk}
    for clause in relations(control):
        text = clause_text(clause)
        if any(_in_dpkg(alt, known) for alt in clause):
            satisfied.append(text)
            continue
        by = next((disk[a["name"]] for a in clause
                   if a["name"] in disk and accepts(disk[a["name"]].version, a.get("version"))),
                  None)
        if by is not None:
            forced.append(Forced(text, by))
            continue
        near = [disk[a["name"]] for a in clause if a["name"] in disk]
        if near:
            missing.append(f"{text}: not installed as a package, and {near[0].evidence()} "
                           "does not meet the version")
        else:
            missing.append(f"{text}: not installed, and not provided by the runfile driver")
    return Decision(control.get("Package", ""), control.get("Version", ""),
                    tuple(satisfied), tuple(forced), tuple(missing))

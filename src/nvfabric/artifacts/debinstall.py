"""Install cached ``.deb`` files with the real ``dpkg --root ROOT -i`` (the GB200/GB300 boot
step of the image flow), forcing only the dependencies the runfile driver satisfies on disk.

Read first, decide second, act third:

1. every file of the fetch record is checked against its published SHA-256, and its control
   paragraph against the record (package, version, architecture), and its architecture
   against the root's dpkg architecture (:func:`check_architecture`: a foreign architecture of
   a multiarch root is refused, dpkg would leave the package unconfigured);
2. every place dpkg would write (its database, each directory of each package's files) is
   proven to resolve under the root with links followed (:func:`confine`); the dpkg database
   under the root and the driver's origin (:mod:`.runfile`) are read once;
3. every dependency is classified (:func:`.debdeps.decide`): any ``missing`` one refuses the
   whole install with ``dependency_unsatisfied`` before dpkg runs (``dpkg -i`` unpacks a
   package even when its dependencies are unmet, so refusing afterwards would be too late);
4. a package already installed under the root as its file would install it (same version,
   same files by dpkg's own md5sums) is left alone: dpkg is not run for it, so its maintainer
   scripts do not run again (:func:`same_as_installed`);
5. ``dpkg --root ROOT [--ignore-depends=NAME,...] -i FILE...``: only the forced names are
   ignored (each one a ``dependency_forced`` finding); the status database is re-read to prove
   every package is ``install ok installed`` at its version. A failed dpkg run purges the
   packages it newly added, so the root is left as it was (an upgrade cannot be undone that
   way: the finding says so).

argv lists only; the root, every file path and every package name are checked before they
reach a command line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvfabric.artifacts.apt import upstream, valid_name
from nvfabric.artifacts.cachefile import Cached
from nvfabric.artifacts.debdeps import Decision, Known, decide, provides
from nvfabric.artifacts.dpkgdb import (
    Database,
    content_md5sums,
    control,
    data_paths,
    dpkg_architecture,
    driver_origin,
    installed_md5sums,
    read,
    same_md5sums,
    status_of,
)
from nvfabric.artifacts.naming import arch_name, package_name
from nvfabric.artifacts.runfile import DriverOrigin
from nvfabric.artifacts.tables import OWN_VERSION
from nvfabric.effects import program
from nvfabric.facts.fs import sha256_file
from nvfabric.model import hostpath
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import confined as confined_path
from nvfabric.model.versions import same
from nvfabric.model.words import seconds

DPKG_TIMEOUT_S = 900.0
#: The most of dpkg's stdout and stderr kept each (the tail: the failure names its last
#: lines); maintainer scripts may print a lot, which is read on and dropped.
DPKG_OUTPUT_BYTES = 1 << 20
DPKG_LOG = "/var/log/dpkg.log"
#: What dpkg --root writes of its database (dpkg(1) FILES: the admin directory and its parts).
ADMIN_PATHS = ("/var/lib/dpkg", "/var/lib/dpkg/status", "/var/lib/dpkg/info",
               "/var/lib/dpkg/updates", "/var/lib/dpkg/triggers")


@dataclass(frozen=True)
class Prepared:
    """Everything decided before dpkg runs: the files (absolute paths) and their control
    paragraphs in install order, the dependency decisions of the packages to install, the
    driver origin, the argv (empty when nothing is to install), and ``unchanged``: the
    packages already installed under the root as these files would install them (same
    version, same files by dpkg's md5sums: :func:`same_as_installed`), which dpkg is not run
    for (no unpack, no maintainer scripts)."""

    entries: tuple[Cached, ...]
    paths: tuple[str, ...]
    controls: tuple[dict[str, str], ...]
    decisions: tuple[Decision, ...]
    origin: DriverOrigin
    argv: tuple[str, ...]
    unchanged: tuple[str, ...] = ()

    @property
    def to_install(self) -> list[dict[str, str]]:
        """The control paragraphs of the packages dpkg installs (not :attr:`unchanged`)."""
        return [k for k in self.controls if k["Package"] not in self.unchanged]

    @property
    def forced(self) -> list[Finding]:
        """One ``dependency_forced`` info finding per forced dependency."""
        out = []
        for d in self.decisions:
            for f in d.forced:
                out.append(Finding(
                    "dependency_forced", "info",
                    f"{d.package} {d.version}: dependency {f.relation} forced: {f.by.evidence()}",
                    "the runfile driver provides it outside dpkg; dpkg is told to ignore only "
                    "this dependency (--ignore-depends)",
                    {"package": d.package, **f.to_json()},
                ))
        return out


def _unreadable(message: str, hint: str) -> NvfabricError:
    return NvfabricError(Finding("input_unreadable", "error", message, hint), exit_code=2)


def verify_files(directory: str, entries: Sequence[Cached]) -> tuple[str, ...]:
    """The absolute path of each entry's file, each proven to hash to the recorded SHA-256.
    Raises ``input_unreadable`` (exit 2) for a missing file, ``checksum_mismatch`` (exit 1) for
    changed bytes."""
    paths = []
    for c in entries:
        path = os.path.join(os.path.abspath(directory), c.file)
        if os.path.islink(path):
            # What is installed must be the file fetch verified into this directory, not
            # whatever a link leads to (it may change after the check).
            raise _unreadable(f"{path}: a symbolic link, not the file fetch wrote",
                              "copy the directory with its files (cp -L, or fetch again into "
                              "it: nvfabric fetch --dest DIR)")
        if not os.path.isfile(path):
            raise _unreadable(f"{path}: listed in the fetch record but not in the directory",
                              "fetch again into that directory (nvfabric fetch --dest DIR)")
        actual = sha256_file(path)
        if actual != c.artifact.sha256:
            # Not a download: the file was fetched and verified once and changed since; the
            # fetch's own message (nothing kept, refresh the mirror) does not fit.
            raise NvfabricError(Finding(
                "checksum_mismatch", "error",
                f"{path}: sha256 {actual} does not match {c.artifact.sha256}, the one the fetch "
                "record names; the file changed after it was fetched; nothing was installed",
                "fetch again into that directory at image build time (nvfabric fetch --dest "
                "DIR); the file is left as it is for inspection",
                {"url": path, "expected_sha256": c.artifact.sha256, "actual_sha256": actual},
            ), exit_code=1)
        paths.append(path)
    return tuple(paths)


def check_version(c: Cached, driver_version: str) -> None:
    """A driver-versioned component must be of exactly ``driver_version`` (numeric per field;
    the Debian revision is free). Raises ``version_mismatch`` (exit 1)."""
    if c.artifact.component in OWN_VERSION:
        return
    have = upstream(c.artifact.version) if c.artifact.source == "apt" else c.artifact.version
    have = have.rsplit("-", 1)[0] if c.artifact.source == "rpm" else have
    if not same(have, driver_version):
        raise NvfabricError(
            Finding(
                "version_mismatch", "error",
                f"cached {c.artifact.component} {c.artifact.version} is not for the loaded "
                f"driver {driver_version}",
                "IMEX and fabric manager must match the driver exactly: fetch the driver's "
                "version at image build time (nvfabric fetch --driver-version "
                f"{driver_version})",
                {"component": c.artifact.component, "cached_version": c.artifact.version,
                 "driver_version": driver_version},
            ),
            exit_code=1,
        )


def _controls(entries: Sequence[Cached], paths: Sequence[str], arch: str
              ) -> list[dict[str, str]]:
    """The control paragraph of each verified file, checked against its record entry
    (package, version, architecture ``arch`` or ``all``) and the component's package name.
    Raises ``input_unreadable`` (exit 2)."""
    deb_arch = arch_name("deb", arch)
    controls = []
    for c, path in zip(entries, paths, strict=True):
        carrier = package_name("deb", c.artifact.component, c.driver_version)
        if c.artifact.package != carrier:
            # The component decides the version rule and the unit rule (imex): a record that
            # calls nvidia-imex "nvlsm" would install it unchecked and leave its unit as is.
            raise _unreadable(
                f"{path}: the fetch record says {c.artifact.component} is package "
                f"{c.artifact.package!r}, but {c.artifact.component} of driver "
                f"{c.driver_version} is package {carrier!r}",
                "the record was edited or damaged: fetch again")
        ctrl = control(path)
        if not valid_name(ctrl.get("Package", "")):
            # The name reaches dpkg's argv (the status check, the purge of a failed run): a
            # value like "--instdir=/" would be read as an option there.
            raise _unreadable(
                f"{path}: control names package {ctrl.get('Package', '')!r}, not a Debian "
                "package name", "the directory holds a damaged or foreign file: fetch again")
        if ctrl.get("Package") != c.artifact.package or ctrl.get("Version") != c.artifact.version \
                or ctrl.get("Architecture") not in (deb_arch, "all"):
            raise _unreadable(
                f"{path}: control says {ctrl.get('Package')} {ctrl.get('Version')} "
                f"{ctrl.get('Architecture')}, the fetch record {c.artifact.package} "
                f"{c.artifact.version} for {deb_arch}",
                "the directory holds another file than was fetched: fetch again",
            )
        controls.append(ctrl)
    return controls


def prepare(root: str, directory: str, entries: Sequence[Cached], arch: str) -> Prepared:
    """Steps 1-3 of the module doc for the ``.deb`` entries (all ``source == "apt"``) for
    ``arch`` (canonical). Raises ``input_unreadable`` (exit 2: also a write that would leave the
    root), ``checksum_mismatch`` or ``dependency_unsatisfied`` (exit 1, nothing run)."""
    paths = verify_files(directory, entries)
    controls = _controls(entries, paths, arch)
    db: Database = read(root)
    # a database that names no architecture: dpkg installs its own native one there
    native = db.native_arch or dpkg_architecture(root)
    for path, ctrl in zip(paths, controls, strict=True):
        check_architecture(path, ctrl, db, native)
    confine(root, paths, controls)
    origin = driver_origin(root)
    before = status_of(root, [k["Package"] for k in controls])
    unchanged = tuple(k["Package"] for k, path in zip(controls, paths, strict=True)
                      if same_as_installed(root, k, path, before))
    todo = [(k, path) for k, path in zip(controls, paths, strict=True)
            if k["Package"] not in unchanged]
    same_call = [Known(k["Package"], k["Version"], provides(k.get("Provides", "")))
                 for k in controls]
    known = [*db.installed, *same_call]
    try:
        decisions = tuple(decide(k, known, origin.provides) for k, _ in todo)
    except ValueError as err:
        raise _unreadable(f"unreadable Depends in a cached package: {err}",
                          "the package is damaged: fetch again") from None
    missing = [(d, m) for d in decisions for m in d.missing]
    if missing:
        raise NvfabricError(unsatisfied(missing, origin), exit_code=1)
    ignore = sorted({n for d in decisions for n in d.ignore})
    try:
        argv = dpkg_argv(root, ignore, [path for _, path in todo]) if todo else []
    except ValueError as err:
        raise _unreadable(f"refusing to build the dpkg command line: {err}",
                          "use plain absolute paths (no newline, no '..') for --root and "
                          "--from") from None
    return Prepared(tuple(entries), paths, tuple(controls), decisions, origin, tuple(argv),
                    unchanged)


def same_as_installed(root: str, ctrl: dict[str, str], path: str,
                      status: dict[str, tuple[str, str]]) -> bool:
    """True when the package of ``path`` (control paragraph ``ctrl``) is installed under
    ``root`` as this file would install it: ``install ok installed`` at the same version, and
    every file it holds has the md5 dpkg recorded at its install
    (``info/<package>.md5sums``, :func:`nvfabric.artifacts.dpkgdb.installed_md5sums`): the
    same package, not merely the same version string. False when anything is unknown."""
    name = ctrl["Package"]
    if status.get(name) != ("install ok installed", ctrl.get("Version")):
        return False
    recorded = installed_md5sums(root, name, ctrl.get("Architecture", ""))
    return recorded is not None and same_md5sums(recorded, *content_md5sums(path))


def check_architecture(path: str, ctrl: dict[str, str], db: Database, native: str) -> None:
    """A package must be of the architecture dpkg installs into the root, ``native`` (the
    database's own, :attr:`~nvfabric.artifacts.dpkgdb.Database.native_arch`; where it names
    none, the running dpkg's: :func:`~nvfabric.artifacts.dpkgdb.dpkg_architecture`), or
    ``all``. One of a foreign architecture of a multiarch root (``dpkg --add-architecture``)
    is unpacked by dpkg and then left unconfigured: its dependencies are looked for in that
    architecture, which the root does not have (libc6 is ``Multi-Arch: same``), and the
    install fails half-way; any other dpkg refuses (``package architecture (arm64) does not
    match system (amd64)``). Raises ``architecture_mismatch`` (exit 1), before dpkg runs: the
    same on a dry run."""
    arch = ctrl.get("Architecture", "")
    if arch in (native, "all"):
        return
    stated = db.native_arch is not None
    if arch in db.foreign_archs:
        why = (f"{arch} is only a foreign architecture of the root (dpkg --add-architecture): "
               "dpkg would unpack the package and leave it unconfigured, its dependencies "
               f"being looked for as :{arch} packages the root does not have")
    elif stated:
        why = f"dpkg under the root installs {native} packages, not {arch}"
    else:
        why = (f"the root's dpkg database names no architecture (no dpkg package, no "
               f"var/lib/dpkg/arch), so dpkg installs its own, {native}, and refuses {arch} "
               "('package architecture does not match system')")
    other = (f"install from a root of architecture {arch}" if stated else
             f"run install --from on a machine of architecture {arch} (dpkg's own "
             "architecture is built into it)")
    raise NvfabricError(Finding(
        "architecture_mismatch", "error",
        f"refusing to install {ctrl.get('Package')} {ctrl.get('Version')} ({arch}) into a "
        f"root whose dpkg architecture is {native}: {why}; nothing was installed",
        f"fetch the {native} package (nvfabric fetch --arch {native}), or {other}",
        {"file": path, "package_arch": arch, "root_arch": native,
         "root_arch_from": "dpkg database" if stated else "dpkg --print-architecture",
         "foreign_archs": list(db.foreign_archs)},
    ), exit_code=1)


def confine(root: str, paths: Sequence[str], controls: Sequence[dict[str, str]]) -> None:
    """Prove that dpkg writes nothing outside ``root``: its database (:data:`ADMIN_PATHS`)
    and every directory a package's files go into resolve under the root with every link
    followed. dpkg follows a link it finds on the way (a ``var/run -> /run`` of a
    debootstrapped root, a ``var/lib/dpkg`` linked elsewhere): checked on this machine, such
    an install wrote the host's /run and a database outside the root. Raises
    ``input_unreadable`` (exit 2) naming the path, before anything runs."""
    if os.path.realpath(root) == "/":
        return
    try:
        for admin in ADMIN_PATHS:
            confined_path(root, admin, "the dpkg database path")
    except ValueError as err:
        raise _unreadable(f"refusing to run dpkg: {err}",
                          "dpkg would write there: make the link relative to the root or "
                          "replace it by the directory") from None
    for path, ctrl in zip(paths, controls, strict=True):
        seen: set[str] = set()
        for member, is_dir in data_paths(path):
            where = member if is_dir else os.path.dirname(member)
            if where in seen:
                continue
            seen.add(where)
            try:
                confined_path(root, where, "directory")
            except ValueError as err:
                raise _unreadable(
                    f"refusing to install {ctrl.get('Package')}: it writes {member}, and "
                    f"{err}",
                    "dpkg would follow that link out of the root: make it relative (e.g. "
                    "var/run -> ../run) or install on the live node (--root /)") from None


def unsatisfied(missing: Sequence[tuple[Decision, str]], origin: DriverOrigin) -> Finding:
    """``dependency_unsatisfied``: the install is refused; names every missing dependency and
    the driver's origin."""
    lines = [f"{d.package} {d.version} depends on {m}" for d, m in missing]
    hint = ("install those packages first (they are not the driver's), or fetch them into the "
            "same directory; nothing was installed")
    if origin.kind == "unknown":
        hint = ("no driver is on disk under the root (no libnvidia-ml.so.<version>): install "
                "the driver first (at boot, after the runfile), then install --from; nothing "
                "was installed")
    if origin.kind == "package":
        hint = ("the driver came from packages: install with the package manager "
                "(nvfabric install --source apt --execute), which resolves them at the "
                "driver's version; nothing was installed")
    return Finding(
        "dependency_unsatisfied", "error",
        "refusing to install: " + "; ".join(lines), hint,
        {"missing": [m for _, m in missing], "driver_origin": origin.kind},
    )


def dpkg_base(root: str) -> list[str]:
    """``dpkg --root ROOT [--log=ROOT/var/log/dpkg.log]``: dpkg 1.21's log stays
    ``/var/log/dpkg.log`` of the host whatever ``--root`` says (dpkg(1) ``--log``; checked on
    this machine: ``dpkg --root IMAGE -i`` appended to the host's log), so an image root gets
    its own log, confined to the root. The live host (``/``) keeps dpkg's own setting
    (dpkg.cfg may name another log). ValueError when the root is not a plain absolute path or
    its log path leads out of it."""
    base = hostpath.check(os.path.abspath(root), "--root")
    argv = ["dpkg", "--root", base]
    if base != "/":
        argv.append("--log=" + confined_path(base, DPKG_LOG, "dpkg log"))
    return argv


def dpkg_argv(root: str, ignore: Sequence[str], paths: Sequence[str]) -> list[str]:
    """``dpkg --root ROOT [--log=...] [--ignore-depends=a,b] -i FILE...`` (:func:`dpkg_base`).
    ValueError when the root or a path is not a plain absolute path, or a name is not a Debian
    package name."""
    for name in ignore:
        if not valid_name(name):
            raise ValueError(f"not a Debian package name: {name!r}")
    for p in paths:
        hostpath.check(p, "package file")
    argv = dpkg_base(root)
    if ignore:
        argv.append("--ignore-depends=" + ",".join(ignore))
    return [*argv, "-i", *paths]


def apply(root: str, prepared: Prepared) -> list[dict[str, Any]]:
    """Step 4: run dpkg, then prove each package installed. Returns one ``{"package",
    "version", "status"}`` per package. Raises ``install_failed`` (exit 1) after purging what
    a failed run newly added."""
    if not prepared.argv:
        # every package is installed already as these files would install it: no dpkg
        return [{"package": k["Package"], "version": k["Version"],
                 "status": "install ok installed", "changed": False}
                for k in prepared.controls]
    todo = prepared.to_install
    names = [k["Package"] for k in todo]
    before = {n: s for n, s in status_of(root, names).items() if s[0].endswith(" installed")}
    try:
        ran = _dpkg(prepared.argv)
        rc, out = (124, f"timed out after {seconds(DPKG_TIMEOUT_S)} s") if ran.rc is None else \
            (ran.rc, (ran.stdout + ran.stderr).decode("utf-8", "replace").strip())
    except OSError as err:
        raise _failed(root, prepared.argv, f"cannot run: {err.strerror}", "", [], []) from None
    after = status_of(root, names)
    bad = [n for n, k in zip(names, todo, strict=True)
           if after.get(n) != ("install ok installed", k["Version"])]
    if rc != 0 or bad:
        # Only what this run added to the database: a package dpkg refused before unpacking
        # (another architecture, a bad archive) is not there, and was not "purged again".
        rolled = _roll_back(root, [n for n in names if n not in before and n in after])
        why = f"exit status {rc}" if rc else f"not installed afterwards: {', '.join(bad)}"
        raise _failed(root, prepared.argv, why, out, rolled, [n for n in names if n in before])
    return [{"package": k["Package"], "version": k["Version"], "status": "install ok installed",
             "changed": k["Package"] not in prepared.unchanged} for k in prepared.controls]


def _dpkg(argv: Sequence[str]) -> program.Ran:
    """One dpkg call through the door of every child whose output is read
    (:func:`nvfabric.effects.program.run`): bounded by :data:`DPKG_TIMEOUT_S` (then its
    process group, maintainer scripts included, is killed), the last :data:`DPKG_OUTPUT_BYTES`
    of each stream kept; never killed for its output (it changes the node). OSError when it
    cannot be run."""
    return program.run(argv, DPKG_TIMEOUT_S, DPKG_OUTPUT_BYTES, DPKG_OUTPUT_BYTES, keep="tail")


def newly_added(root: str, prepared: Prepared) -> list[str]:
    """The packages of ``prepared`` that are not installed under ``root`` now (read before
    dpkg runs): what a failure after dpkg may purge again."""
    names = [k["Package"] for k in prepared.to_install]
    have = {n for n, s in status_of(root, names).items() if s[0].endswith(" installed")}
    return [n for n in names if n not in have]


def unit_failed(root: str, prepared: Prepared, added: Sequence[str], argv: Sequence[str],
                status: int, text: str, action: str) -> NvfabricError:
    """``install_failed`` for a unit step (``systemctl ... nvidia-imex.service``) that failed
    after dpkg installed the packages: the newly added ones are purged again, so that the unit
    is not left as the package's postinst set it (enabled, on a node whose IMEX owner is the
    DRA driver: two daemons, NV_ERR_IN_USE). An upgrade cannot be undone that way: named."""
    rolled = _roll_back(root, added)
    upgraded = [k["Package"] for k in prepared.controls if k["Package"] not in added]
    undo = f"; purged again: {', '.join(rolled)}" if rolled else ""
    hint = "make systemctl work under the root, then run install --from again"
    if upgraded:
        undo += f"; {', '.join(upgraded)} was installed before and stays"
        by_hand = command_line(action, "nvidia-imex.service", root=root, program="systemctl")
        hint += f"; until then set the unit by hand: {by_hand}"
    return NvfabricError(
        Finding("install_failed", "error",
                f"`{' '.join(argv)}` failed (exit status {status}): {text}{undo}", hint,
                {"argv": list(argv), "rolled_back": rolled}),
        exit_code=1,
    )


def _roll_back(root: str, added: Sequence[str]) -> list[str]:
    """Purge the packages a failed run newly added (``dpkg --root ROOT --purge``)."""
    if not added:
        return []
    names = [n for n in added if valid_name(n)]
    if not names:
        return []
    try:
        argv = [*dpkg_base(root), "--purge", "--", *names]
        _dpkg(argv)
    except (OSError, ValueError):
        return []
    still = status_of(root, added)
    return [n for n in names if n not in still or still[n][0].endswith("not-installed")]


def _failed(root: str, argv: Sequence[str], why: str, output: str, rolled: list[str],
            upgraded: list[str]) -> NvfabricError:
    query = command_line("-s", "PACKAGE", root=root, program="dpkg")
    tail = " | ".join(output.splitlines()[-3:])
    undo = f"; purged again: {', '.join(rolled)}" if rolled else ""
    if upgraded:
        undo += (f"; {', '.join(upgraded)} was an upgrade of an installed version, which a "
                 f"purge cannot undo: check `{command_line('--audit', root=root, program='dpkg')}`")
    return NvfabricError(
        Finding(
            "install_failed", "error",
            f"`{' '.join(argv)}` failed: {why}" + (f" ({tail})" if tail else "") + undo,
            "read dpkg's words above; a dependency dpkg still refuses is one nvfabric judged "
            f"satisfied: report it with `{query}`",
            {"argv": list(argv), "rolled_back": rolled},
        ),
        exit_code=1,
    )

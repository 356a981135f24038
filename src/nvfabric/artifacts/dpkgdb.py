"""Read the dpkg database of the node under ``--root`` as ``dpkg --root`` would: its
``var/lib/dpkg/status`` (installed packages) and ``var/lib/dpkg/info/*.list`` (which package
owns which path), and the control paragraph of a ``.deb``. Read-only host access; parsing by
python-debian.

Source: dpkg(1) ``--root`` (admin directory ``<root>/var/lib/dpkg``), deb-control(5),
dpkg-query(1) ``-S`` (a path is owned when a package's file list names it). On a merged-/usr
root (``/bin -> usr/bin``, Debian 12) a list may name ``/bin/x`` or ``/usr/bin/x`` for the same
file: both spellings are checked.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from nvfabric.artifacts.debdeps import Known, provides
from nvfabric.artifacts.runfile import DiskFile, DriverOrigin, classify
from nvfabric.artifacts.tables import DRIVER_VERSION_LIB, RUNFILE_LIB_DIRS, RUNFILE_PROVIDES
from nvfabric.effects import program
from nvfabric.facts.fs import read_bytes, read_text
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import under

ADMIN_DIR = "/var/lib/dpkg"
#: The most bytes read of ``var/lib/dpkg/arch`` (one architecture name a line; a few dozen).
ARCH_FILE_MAX = 4096
_MERGED = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class Database:
    """The installed packages of a root's dpkg database (``Status: ... installed``) and its
    architectures: ``native_arch`` the root's own (the Architecture of its installed ``dpkg``
    package; without one, the first line of ``var/lib/dpkg/arch``, which dpkg writes native
    first), None when neither says; ``foreign_archs`` those added with ``dpkg
    --add-architecture`` (the other lines of ``var/lib/dpkg/arch``; dpkg(1) "Multiarch")."""

    installed: tuple[Known, ...]
    native_arch: str | None = None
    foreign_archs: tuple[str, ...] = ()


def aliases(path: str) -> tuple[str, ...]:
    """``path`` and its other merged-/usr spelling: ``/usr/bin/x`` <-> ``/bin/x``."""
    for top in _MERGED:
        if path.startswith("/usr" + top + "/"):
            return (path, path[4:])
        if path.startswith(top + "/"):
            return (path, "/usr" + path)
    return (path,)


def _unreadable(path: str, why: str) -> NvfabricError:
    return NvfabricError(
        Finding("input_unreadable", "error", f"{path}: {why}",
                "point --root at the image or node root whose dpkg database to use"),
        exit_code=2,
    )


def _damaged(path: str, err: ValueError) -> NvfabricError:
    """A status file python-debian refuses (``each line must start with whitespace``)."""
    why = (str(err).splitlines() or [type(err).__name__])[0][:200]
    return _unreadable(path, f"not a dpkg status database ({why})")


def read(root: str) -> Database:
    """The dpkg database under ``root``. Raises ``input_unreadable`` (exit 2) when the root
    has no ``var/lib/dpkg/status``: not a Debian-family root."""
    from debian.deb822 import Packages

    status_path = under(root, ADMIN_DIR + "/status")
    try:
        with open(status_path, encoding="utf-8", errors="replace") as fh:
            paragraphs = list(Packages.iter_paragraphs(fh, use_apt_pkg=False))
    except OSError as err:
        raise _unreadable(status_path, f"cannot read the dpkg status database "
                          f"({err.strerror})") from None
    except ValueError as err:  # python-debian's own refusal (a line that is no field)
        raise _damaged(status_path, err) from None
    installed = []
    native = None
    for para in paragraphs:
        words = para.get("Status", "").split()
        if len(words) != 3 or words[2] != "installed":
            continue
        installed.append(Known(para.get("Package", ""), para.get("Version", ""),
                               provides(para.get("Provides", ""))))
        if para.get("Package") == "dpkg":
            native = para.get("Architecture") or None
    listed = (read_text(under(root, ADMIN_DIR + "/arch"), ARCH_FILE_MAX) or "").split()
    native = native or (listed[0] if listed else None)
    foreign = tuple(dict.fromkeys(a for a in listed if a != native))
    return Database(tuple(installed), native, foreign)


#: Seconds ``dpkg --print-architecture`` may take, and the most of its answer kept (one word).
PRINT_ARCH_TIMEOUT_S = 30.0
PRINT_ARCH_MAX = 4096


def dpkg_architecture(root: str) -> str:
    """The native architecture of the dpkg that ``install --from`` runs (``dpkg --root ROOT
    --print-architecture``): it is built into that dpkg, whatever the root holds (checked on
    this machine: an empty root, or one whose ``var/lib/dpkg/arch`` says only arm64, prints
    amd64 with dpkg 1.21 of amd64), so it is what dpkg installs into a root whose database
    names no architecture. Raises ``install_failed`` (exit 1) when dpkg cannot be run or does
    not answer with one architecture name: the install could not run it either."""
    try:
        argv = ["dpkg", "--root", check_path(os.path.abspath(root), "--root"),
                "--print-architecture"]
    except ValueError as err:
        raise _unreadable(root, str(err)) from None
    why = ""
    try:
        ran = program.run(argv, PRINT_ARCH_TIMEOUT_S, PRINT_ARCH_MAX)
        word = ran.stdout.decode("ascii", "replace").strip()
        if ran.rc == 0 and re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", word):
            return word
        why = (f"it answered {word[:40]!r} (exit status {ran.rc})" if ran.rc is not None
               else "it did not answer in time")
    except OSError as err:
        why = f"cannot run it: {err.strerror or err}"
    raise NvfabricError(Finding(
        "install_failed", "error",
        f"the dpkg database under {root} names no architecture and `{' '.join(argv)}` gives "
        f"none: {why}; nothing was installed",
        "install --from runs dpkg: install it (apt-get install dpkg) or run nvfabric where "
        "dpkg is, on a machine of the packages' architecture",
        {"argv": argv}), exit_code=1)


def owners(root: str, paths: Iterable[str]) -> dict[str, str]:
    """``path -> package`` for each of ``paths`` (host view) that a file list of the dpkg
    database under ``root`` names, in either merged-/usr spelling (dpkg-query -S). Only the
    wanted lines are kept, so a node with thousands of packages costs one pass over the lists,
    not a table of every path."""
    wanted: dict[str, str] = {}
    for path in paths:
        for alias in aliases(path):
            wanted[alias] = path
    found: dict[str, str] = {}
    if not wanted:
        return found
    for lst in sorted(glob.glob(glob.escape(under(root, ADMIN_DIR + "/info")) + "/*.list")):
        name = os.path.basename(lst)[: -len(".list")].split(":", 1)[0]
        try:
            with open(lst, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    hit = wanted.get(line.rstrip("\n"))
                    if hit is not None:
                        found.setdefault(hit, name)
        except OSError:
            continue
    return found


def driver_origin(root: str) -> DriverOrigin:
    """Runfile or packages (:func:`.runfile.classify`) from the NVML library files and the
    runfile's binaries found under ``root``, with their owners in its dpkg file lists."""
    libs = []
    current = []
    for d in RUNFILE_LIB_DIRS:
        full = under(root, d)
        if os.path.islink(full):
            continue  # /usr/lib64 -> lib on some roots: the real directory is listed anyway
        for path in sorted(glob.glob(glob.escape(full) + "/" + DRIVER_VERSION_LIB + "*")):
            if os.path.isfile(path) and not os.path.islink(path):
                libs.append(d + "/" + os.path.basename(path))
        try:
            target = os.readlink(os.path.join(full, DRIVER_VERSION_LIB + "1"))
        except OSError:
            continue
        if "/" not in target:  # the installer's link is a bare name in the same directory
            current.append(d + "/" + target)
    bins = [(name, host) for name, host in RUNFILE_PROVIDES.items()
            if os.path.isfile(under(root, host))]
    owner = owners(root, [*libs, *(host for _, host in bins)])
    return classify([DiskFile(p, owner.get(p)) for p in libs],
                    [(name, DiskFile(host, owner.get(host))) for name, host in bins], current)


def control(deb: str) -> dict[str, str]:
    """The control paragraph of the ``.deb`` at ``deb`` (python-debian reads the ar archive;
    nothing is run). Raises ``input_unreadable`` (exit 2) when it is not a Debian package (not
    an ar archive at all included: python-debian's ArError)."""
    from debian.arfile import ArError
    from debian.debfile import DebError, DebFile

    try:
        with DebFile(deb) as pkg:
            return {k: str(v) for k, v in pkg.debcontrol().items()}
    except (ArError, DebError, OSError, ValueError, KeyError) as err:
        raise _unreadable(deb, f"not a readable Debian package ({err})") from None


def data_paths(deb: str) -> list[tuple[str, bool]]:
    """The paths the ``.deb`` at ``deb`` installs (host view, ``/usr/bin/nvidia-imex``), each
    with whether it is a directory, in archive order (python-debian reads the data member;
    nothing is run). Raises ``input_unreadable`` (exit 2) when the data cannot be read."""
    from debian.arfile import ArError
    from debian.debfile import DebError, DebFile

    try:
        with DebFile(deb) as pkg:
            members = pkg.data.tgz().getmembers()
    except (ArError, DebError, OSError, ValueError, KeyError, EOFError) as err:
        raise _unreadable(deb, f"the package's data cannot be read ({err})") from None
    out = []
    for m in members:
        name = m.name[2:] if m.name.startswith("./") else m.name
        name = name.strip("/")
        if name and name != ".":
            out.append(("/" + name, m.isdir()))
    return out


def content_md5sums(deb: str) -> tuple[dict[str, str], frozenset[str]]:
    """(``path -> md5`` (hex) of every regular file the ``.deb`` at ``deb`` installs, its
    conffiles), paths without the leading ``/``: the shape of dpkg's
    ``info/<package>.md5sums``. Computed from the data member, not taken from the package's own
    ``md5sums`` (optional; it leaves conffiles out, while the file dpkg writes at unpack for a
    package that ships none lists them too). Raises ``input_unreadable`` (exit 2) when the
    package cannot be read."""
    import hashlib

    from debian.arfile import ArError
    from debian.debfile import DebError, DebFile

    out: dict[str, str] = {}
    try:
        with DebFile(deb) as pkg:
            conf = (pkg.control.get_content("conffiles", encoding="utf-8") or ""
                    if pkg.control.has_file("conffiles") else "")
            conffiles = frozenset(line.strip().lstrip("/") for line in conf.splitlines()
                                  if line.strip())
            tar = pkg.data.tgz()
            for m in tar.getmembers():
                name = (m.name[2:] if m.name.startswith("./") else m.name).strip("/")
                fh = tar.extractfile(m) if m.isfile() and name else None
                if fh is None:
                    continue
                digest = hashlib.md5(usedforsecurity=False)
                for chunk in iter(lambda: fh.read(1 << 20), b""):  # noqa: B023
                    digest.update(chunk)
                out[name] = digest.hexdigest()
    except (ArError, DebError, OSError, ValueError, KeyError, EOFError) as err:
        raise _unreadable(deb, f"the package's data cannot be read ({err})") from None
    return out, conffiles


def same_md5sums(recorded: dict[str, str], content: dict[str, str],
                 conffiles: frozenset[str]) -> bool:
    """True when dpkg's record of an installed package (``recorded``) lists the files of a
    ``.deb`` (``content``) with the same md5s and nothing else; a conffile may be missing from
    the record (a package's own md5sums leaves them out) but, if listed, must match. Pure."""
    if {p for p in recorded if p not in conffiles} != {p for p in content if p not in conffiles}:
        return False
    return all(content.get(p) == md5 for p, md5 in recorded.items())


#: The most bytes read of one package's ``info/<package>.md5sums`` (one line a file; the
#: largest packages list tens of thousands of files, a few MiB).
MD5SUMS_MAX = 16 << 20


def installed_md5sums(root: str, package: str, arch: str) -> dict[str, str] | None:
    """``path -> md5`` of ``package`` as dpkg recorded it at install under ``root``
    (``info/<package>.md5sums``, or ``info/<package>:<arch>.md5sums`` for a ``Multi-Arch:
    same`` package), None when there is none or it cannot be read whole."""
    for name in (f"{package}.md5sums", f"{package}:{arch}.md5sums"):
        data = read_bytes(under(root, f"{ADMIN_DIR}/info/{name}"), MD5SUMS_MAX + 1)
        if data is None:
            continue
        if len(data) > MD5SUMS_MAX:
            return None
        out = {}
        for line in data.decode("utf-8", "replace").splitlines():
            digest, _, path = line.partition("  ")
            if path:
                out[path.lstrip("/")] = digest.strip().lower()
        return out
    return None


def status_of(root: str, names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``name -> (Status, Version)`` for each of ``names`` found in the status file (every
    state, not only installed), re-read now."""
    from debian.deb822 import Packages

    wanted = set(names)
    out: dict[str, tuple[str, str]] = {}
    path = under(root, ADMIN_DIR + "/status")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for para in Packages.iter_paragraphs(fh, use_apt_pkg=False):
                if para.get("Package") in wanted:
                    out[para["Package"]] = (para.get("Status", ""), para.get("Version", ""))
    except OSError as err:
        raise _unreadable(path, f"cannot read the dpkg status database ({err.strerror})") from None
    except ValueError as err:
        raise _damaged(path, err) from None
    return out

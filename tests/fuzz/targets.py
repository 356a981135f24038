"""The fuzz targets: one per reader of nvfabric, each with its seeds (real captures from the
corpus, else real-shaped values from a simulated node), the call the CLI makes, and the
exceptions the CLI documents for it (turned into exit 1 or 2 with one line). Anything else a
target raises is a defect (the CLI would exit 3).

Corpus: tests/data/corpus when present (issue 9 copies it there), else ../shared/corpus.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvfabric.model.errors import NvfabricError

REPO = Path(__file__).resolve().parents[2]


def corpus_dir() -> Path:
    """tests/data/corpus (issue 9), else the shared field data next to the worktree."""
    local = REPO / "tests" / "data" / "corpus"
    return local if local.is_dir() else REPO.parent / "shared" / "corpus"


def cases_dir() -> Path:
    local = REPO / "tests" / "data" / "cases"
    return local if local.is_dir() else REPO.parent / "shared" / "cases"


def _files(*patterns: str) -> list[bytes]:
    out: list[bytes] = []
    base = corpus_dir()
    for pattern in patterns:
        out += [p.read_bytes() for p in sorted(base.glob(pattern)) if p.is_file()]
    return out


class Broken(AssertionError):
    """An invariant of a reader that did not hold (not an exception the reader raised)."""


@dataclass
class Target:
    """One reader: ``run(data)`` feeds it one input; ``documented`` are the exceptions the CLI
    turns into a clear error; ``limit`` bounds the mutants' size."""

    name: str
    seeds: Callable[[], list[bytes]]
    run: Callable[[bytes], None]
    documented: tuple[type[BaseException], ...] = ()
    limit: int = 300_000
    setup: Callable[[], None] | None = None
    teardown: Callable[[], None] | None = None
    state: dict[str, object] = field(default_factory=dict)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _nvfabric_error(err: BaseException) -> None:
    """A documented NvfabricError still has to be a clear one: exit 1 or 2, one line."""
    if isinstance(err, NvfabricError):
        if err.exit_code not in (1, 2):
            raise Broken(f"exit code {err.exit_code}: {err.finding.message}")


# --- numbers and JSON --------------------------------------------------------------------

def _numbers(data: bytes) -> None:
    from nvfabric.model import strict

    text = _text(data)[:300]
    for base, signed in ((10, False), (10, True), (16, False), (0, False)):
        try:
            value = strict.to_int(text, base=base, signed=signed)
        except strict.BadValue:
            continue
        str(value)  # never past the digit limit
        body = text[1:] if signed and text.startswith("-") else text
        if not body or not all(c in "0123456789abcdefABCDEFxX" for c in body):
            raise Broken(f"to_int accepted {text!r}")
        if base == 10 and int(text) != value:
            raise Broken(f"to_int({text!r}) = {value}")
    strict.is_uint(text)
    try:
        strict.to_float(text)
    except strict.BadValue:
        pass


def _json(data: bytes) -> None:
    from nvfabric.model import strict

    doc = strict.parse_json(data)
    json.dumps(doc)  # whatever was accepted can be written back (no 4,300-digit number)


# --- inventory ---------------------------------------------------------------------------

def _vpd_seeds() -> list[bytes]:
    from nvfabric.simulate import profile_spec
    from nvfabric.simulate.tree import mellanox_vpd

    out = []
    for name in ("dgx-b200", "hgx-b200-4lpf", "hgx-h100"):
        for m in profile_spec(name).mellanox:
            out.append(mellanox_vpd(m, "0xe09d730300e400e8"))
    return out


def _vpd(data: bytes) -> None:
    from nvfabric.facts import vpd

    decoded = vpd.decode(data)
    json.dumps(decoded.to_json() if hasattr(decoded, "to_json") else repr(decoded))


#: Attribute files of the sysfs/procfs target, under a simulated dgx-b200 (host paths; the
#: PCI ones through the bus links the simulator writes).
SYSFS_ATTRS = (
    "sys/bus/pci/devices/0000:18:00.0/numa_node",
    "sys/bus/pci/devices/0000:18:00.0/config",
    "sys/bus/pci/devices/0000:05:00.0/vpd",
    "sys/bus/pci/devices/0000:05:00.0/numa_node",
    "sys/class/infiniband/mlx5_0/ports/1/cap_mask",
    "sys/class/infiniband/mlx5_0/ports/1/gids/0",
    "sys/class/infiniband/mlx5_0/node_guid",
    "sys/class/infiniband/mlx5_0/ports/1/state",
    "sys/class/infiniband_mad/umad0/port",
    "sys/class/infiniband_mad/umad0/ibdev",
    "sys/module/nvidia/version",
    "proc/driver/nvidia/version",
    "proc/devices",
    "proc/sys/kernel/arch",
    "etc/os-release",
)


class _Tree:
    """One simulated node, built once per run; each input replaces one attribute and the
    original is put back after the call."""

    def __init__(self, profile: str, attrs: tuple[str, ...]) -> None:
        self.profile, self.attrs = profile, attrs
        self.root = ""
        self.originals: dict[str, bytes | None] = {}

    def setup(self) -> None:
        from nvfabric.simulate import build, profile_spec

        self.root = tempfile.mkdtemp(prefix="nvfabric-fuzz-")
        node = os.path.join(self.root, "n")
        build(profile_spec(self.profile), node)
        self.root = node
        for rel in self.attrs:
            path = os.path.realpath(os.path.join(node, rel))
            try:
                with open(path, "rb") as fh:
                    self.originals[rel] = fh.read()
            except OSError:
                self.originals[rel] = None

    def teardown(self) -> None:
        if self.root:
            shutil.rmtree(os.path.dirname(self.root), ignore_errors=True)

    def seeds(self) -> list[bytes]:
        if not self.root:
            self.setup()
        return [bytes([i]) + (content or b"") for i, (_, content) in
                enumerate(self.originals.items())]

    def put(self, data: bytes) -> str:
        rel = self.attrs[data[0] % len(self.attrs)] if data else self.attrs[0]
        path = os.path.realpath(os.path.join(self.root, rel))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data[1:])
        return rel

    def restore(self, rel: str) -> None:
        path = os.path.realpath(os.path.join(self.root, rel))
        original = self.originals.get(rel)
        if original is None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        else:
            with open(path, "wb") as fh:
                fh.write(original)


_SYSFS = _Tree("dgx-b200", SYSFS_ATTRS)


def _sysfs(data: bytes) -> None:
    from nvfabric.cli.detect import detect_json
    from nvfabric.facts.inventory import collect
    from nvfabric.rules.plan import plan

    rel = _SYSFS.put(data)
    try:
        inv = collect(_SYSFS.root)
        json.dumps(detect_json(inv))
        result = plan(inv)
        json.dumps(result.to_json() if hasattr(result, "to_json") else repr(result))
    finally:
        _SYSFS.restore(rel)


#: The files the service-liveness reader and the IMEX owner evidence read (pid files,
#: fabric manager's config, /proc tables, slurm.conf).
SERVICE_ATTRS = (
    "run/nvfabric/fabricmanager.pid",
    "var/run/nvidia-fabricmanager/nv-fabricmanager.pid",
    "usr/share/nvidia/nvswitch/fabricmanager.cfg",
    "proc/uptime",
    "proc/net/tcp",
    "proc/net/unix",
    "etc/slurm/slurm.conf",
    "proc/driver/nvidia/params",
)

_SERVICES = _Tree("gb200-tray", SERVICE_ATTRS)


def _services(data: bytes) -> None:
    from nvfabric.facts import services
    from nvfabric.facts.imex import tray as host

    rel = _SERVICES.put(data)
    try:
        for state in services.read(_SERVICES.root, ("nvlsm", "fabricmanager", "imex")):
            json.dumps(state.to_json())
        services.fabric_mode(_SERVICES.root)
        host.gather_evidence(_SERVICES.root)
        host.read_channels(_SERVICES.root)
    finally:
        _SERVICES.restore(rel)


def _procfs_text(data: bytes) -> None:
    from nvfabric.facts import infiniband, nvidia
    from nvfabric.facts.imex import tray as host
    from nvfabric.rules.imex import channels

    text = _text(data)
    nvidia.parse_proc_version(text)
    nvidia.parse_proc_devices(text, "nvidia-caps-imex-channels")
    host.parse_fib_trie(text)
    host.parse_if_inet6(text)
    channels.parse_params(text)
    first = text.strip().split("\n", 1)[0]
    infiniband.guid_from_gid(first)
    infiniband.parse_cap_mask(first)
    infiniband.format_guid(first)


# --- nvidia-smi, logs --------------------------------------------------------------------

def _smi(data: bytes) -> None:
    from nvfabric.facts import smi

    health = smi.parse(data.decode("utf-8", "replace"))
    json.dumps([g.to_json() for g in health.gpus])


def _log(data: bytes) -> None:
    from nvfabric.rules.diagnose import Classifier, classify_stream

    for fabric in (None, "nvlink5"):
        c = Classifier(fabric)
        classify_stream(c, io.BytesIO(data))
        json.dumps([f.to_json() for f in c.findings()])


_WATCH: list[Any] = []


def _kmsg(data: bytes) -> None:
    """Bytes as a simulated node's dev/kmsg gives them, through the run's kernel watch."""
    from nvfabric.effects.log import Log
    from nvfabric.facts.kmsg import KernelLog
    from nvfabric.supervisor.kernelwatch import KernelWatch, Settings

    chunks = [data]

    def read(fd: int, size: int) -> bytes:
        if not chunks:
            raise BlockingIOError
        return chunks.pop()

    klog = KernelLog(-1, "fifo", "fuzz", read=read)
    if not _WATCH:
        _WATCH.append(KernelWatch(klog, "nvswitch", Log(io.StringIO()), Settings()))
    watch = _WATCH[0]
    watch.klog = klog
    watch.take(klog.read(1 << 20))
    json.dumps(watch.snapshot().to_json())
    for line in data.decode("utf-8", "replace").splitlines()[:50]:
        klog.parse(line)
        KernelLog(-1, "journal", "fuzz").parse(line)


def _history(data: bytes) -> None:
    from nvfabric.effects import history

    reading = history.parse(data)
    history.for_diagnosis(reading.records)
    json.dumps(reading.records, default=str)


def _history_seeds() -> list[bytes]:
    from nvfabric.effects.history import encode

    return [b"".join(encode({"time": 1.5 + i, "kind": k, "code": "nvswitch_fatal_error",
                             "severity": "error", "message": "m", "line": "[ 1.0] SXid"})
                     for i, k in enumerate(("run", "kernel", "exit", "verdict")))]


# --- artifacts ---------------------------------------------------------------------------

def _request(version: str, source: str, components: tuple[str, ...]) -> object:
    from nvfabric.artifacts.model import Request

    return Request(version, "x86_64", components, source)


def _redist(data: bytes) -> None:
    from nvfabric.artifacts import redist

    url = "https://example.invalid/redistrib_580.95.05.json"
    manifest = redist.parse_manifest(data, url)
    comp = manifest.components.get("fabricmanager")
    version = comp.version if comp is not None else "580.95.05"
    from nvfabric.model.versions import is_version

    if not is_version(version):
        version = "580.95.05"
    for arch in ("x86_64", "aarch64"):
        from nvfabric.artifacts.model import Request

        req = Request(version, arch, ("fabricmanager", "imex"), "redist")
        try:
            arts = redist.resolve(manifest, url, "https://example.invalid", req)
        except NvfabricError as err:
            _nvfabric_error(err)
            continue
        json.dumps([a.to_json() if hasattr(a, "to_json") else repr(a) for a in arts])


_DEB = (
    b"Package: nvidia-fabricmanager\nVersion: 580.95.05-1\nArchitecture: amd64\n"
    b"Filename: ./nvidia-fabricmanager_580.95.05-1_amd64.deb\nSize: 5931872\n"
    b"SHA256: " + b"ab" * 32 + b"\nDescription: Fabric Manager for NVSwitch based systems.\n\n"
    b"Package: nvidia-fabricmanager-535\nVersion: 535.216.01-1\nArchitecture: amd64\n"
    b"Filename: ./nvidia-fabricmanager-535_535.216.01-1_amd64.deb\nSize: 1234\n"
    b"SHA256: " + b"cd" * 32 + b"\nDescription: Fabric Manager\n"
)


def _apt_seeds() -> list[bytes]:
    return [_DEB] + _files("apt/packages-stanza*") + [s + b"\n" + _DEB for s in
                                                      _files("apt/packages-stanza*")]


def _apt(data: bytes) -> None:
    from nvfabric.artifacts import apt
    from nvfabric.artifacts.model import Request

    for version in ("580.95.05", "535.216.01"):
        req = Request(version, "x86_64", ("fabricmanager",), "apt")
        try:
            arts = apt.resolve(data, ("file:///m/Packages",), "file:///m", req)
            apt.commands(arts)
        except NvfabricError as err:
            _nvfabric_error(err)


_PRIMARY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<metadata xmlns="http://linux.duke.edu/metadata/common" '
    b'xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="1">\n'
    b'<package type="rpm"><name>nvidia-fabricmanager</name><arch>x86_64</arch>'
    b'<version epoch="0" ver="580.95.05" rel="1"/><checksum type="sha256" pkgid="YES">'
    + b"ef" * 32 + b'</checksum><size package="4096" installed="1" archive="1"/>'
    b'<location href="nvidia-fabricmanager-580.95.05-1.x86_64.rpm"/></package>\n'
    b'<package type="rpm"><name>nvidia-fabricmanager</name><arch>x86_64</arch>'
    b'<version epoch="0" ver="580.95.05" rel="2.el9"/><checksum type="sha256">'
    + b"01" * 32 + b'</checksum><size package="4097"/>'
    b'<location href="nvidia-fabricmanager-580.95.05-2.el9.x86_64.rpm"/></package>\n'
    b"</metadata>\n"
)
_REPOMD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<repomd xmlns="http://linux.duke.edu/metadata/'
    b'repo"><data type="primary"><checksum type="sha256">' + b"00" * 32 +
    b'</checksum><location href="repodata/primary.xml.gz"/></data></repomd>\n'
)


def _rpm(data: bytes) -> None:
    from nvfabric.artifacts import rpm
    from nvfabric.artifacts.model import Request

    if b"repomd" in data[:400]:
        rpm.parse_repomd(data, "file:///m/repodata/repomd.xml")
        return
    req = Request("580.95.05", "x86_64", ("fabricmanager",), "rpm")
    arts = rpm.resolve(data, ("file:///m/repodata/primary.xml",), "file:///m", req)
    rpm.commands(arts)


# --- IMEX --------------------------------------------------------------------------------

def _nodes(data: bytes) -> None:
    from nvfabric.rules.imex import nodes

    nodes.parse_nodes_config(_text(data))


def _slurm(data: bytes) -> None:
    from nvfabric.rules.imex import nodes

    nodes.expand_slurm(_text(data)[:70_000])


def _ctl(data: bytes) -> None:
    from nvfabric.facts.imex import ctl

    status = ctl.parse_domain(_text(data))
    json.dumps(status.to_json())


def _report_seeds() -> list[bytes]:
    report = {
        "verdict": "healthy", "fabric": "mnnvl", "hostname": "gb-01",
        "addresses": ["192.0.2.10"],
        "imex": {"owner": "host", "node_list": ["192.0.2.10", "192.0.2.11"],
                 "node_list_id": None, "channels": [0]},
        "gpus": [{"index": i, "uuid": f"GPU-{i}", "state": "completed", "status": "success",
                  "clique_id": 32766, "cluster_uuid": "1fa25eba-abfb-58b7-bfcd-4ac6101528a8",
                  "health_summary": "healthy"} for i in range(4)],
        "findings": [], "reasons": [],
    }
    one = json.dumps(report).encode()
    other = json.dumps({**report, "hostname": "gb-02"}).encode()
    return [one, one + b"\n" + other + b"\n", b"gb-01: " + one + b"\ngb-02: " + other,
            b"[" + one + b"," + other + b"]"]


def _reports(data: bytes) -> None:
    from nvfabric.cli import domain as cmd
    from nvfabric.rules.imex import domain as fleet

    found = []
    for label, obj, _prefix in cmd._objects(_text(data), "report"):
        try:
            found.append(fleet.node_from_status(obj, label))
        except ValueError:
            continue  # the CLI: usage error naming the report and key (exit 2)
    if found:
        json.dumps(fleet.check(found).to_json())


# --- node specs, configs -----------------------------------------------------------------

def _spec_seeds() -> list[bytes]:
    return [p.read_bytes() for p in sorted(cases_dir().glob("*.yaml"))]


def _spec(data: bytes) -> None:
    from nvfabric.cli.simulate import node_of
    from nvfabric.model import strict
    from nvfabric.simulate import parse
    from nvfabric.simulate.tree import layout

    text = data.decode("utf-8", "replace")
    spec = parse(node_of(strict.load_yaml(text, "spec"), "spec"))
    layout(spec)


def _fm_config(data: bytes) -> None:
    from nvfabric.bringup import fmconfig as fm
    from nvfabric.model import fmkeys, keyvalue

    text = _text(data)
    lines = text.splitlines()
    value = lines[len(lines) // 2].partition("=")[2] if lines else ""
    for sets in ({}, {"LOG_FILE_NAME": value}, {"FM_CMD_PORT_NUMBER": value},
                 {"FABRIC_MODE": value}):
        try:
            eff = fm.effective(text, root="/nonexistent-root", guid="0xe09d730300e400e8",
                               sets=sets)
        except fmkeys.ConfigError:
            continue
        back = keyvalue.parse(eff.text).items()
        if back != eff.cfg.items():
            raise Broken("effective config does not read back as written")
        for key, want in sets.items():
            if key in fmkeys.PATH_KEYS:
                continue  # resolved under the root, by design
            if back.get(key) != want:
                raise Broken(f"{key}={want!r} read back as {back.get(key)!r}")


def _prolog_seeds() -> list[bytes]:
    """nvfabric's Slurm prolog and epilog, and the prologs of the I cases (ParallelCluster's,
    a site's that runs the daemon), as slurmd would run them."""
    import yaml

    out = [p.read_bytes() for p in sorted((REPO / "packaging" / "slurm").glob("*"))]
    for case in sorted(cases_dir().glob("I*.yaml")):
        files = (yaml.safe_load(case.read_text(encoding="utf-8")).get("node") or {}).get(
            "files") or {}
        out += [text.encode() for path, text in files.items()
                if ("prolog" in path or "epilog" in path) and isinstance(text, str)
                and text.startswith("#!")]
    return list(dict.fromkeys(out))  # the epilog is the prolog's copy


def _prolog(data: bytes) -> None:
    """The Slurm script reader (:func:`nvfabric.rules.imex.script.analyse`) on one prolog, as
    a shell script and as another language: what it found stays bounded (its evidence lines,
    its hand-offs) and JSON-able."""
    from nvfabric.rules.imex import script

    text = _text(data)
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
    for shell in (True, False):
        found = script.analyse(text, "/etc/slurm/prolog.d/p", "/etc/slurm/prolog.d/p", env,
                               shell=shell)
        a = found.actions
        if len(a.lines) > script.MAX_EVIDENCE + 1 or len(found.follow) > script.MAX_FOLLOW:
            raise Broken(f"{len(a.lines)} evidence lines, {len(found.follow)} hand-offs")
        json.dumps([a.unit_verbs, a.daemon, a.lines, a.summary(), list(found.follow),
                    dict(found.exported), list(found.unread)])


def _imex_config(data: bytes) -> None:
    from nvfabric.model import keyvalue
    from nvfabric.rules.imex import config

    text = _text(data)
    lines = text.splitlines()
    value = lines[-1].partition("=")[2] if lines else ""
    config.node_config_path(text, "/etc/nvidia-imex/nodes_config.cfg")
    for changes in ({}, {"IMEX_NODE_CONFIG_FILE": value}, {"SERVER_PORT": value},
                    {"DAEMONIZE": "0", "LOG_FILE_NAME": value}):
        try:
            written = config.effective(text, changes)
        except keyvalue.ConfigValueError:
            continue
        back = keyvalue.parse(written).items()
        for key, want in changes.items():
            if back.get(key) != want:
                raise Broken(f"{key}={want!r} read back as {back.get(key)!r}")


_RECORD_DIR: list[str] = []


def _record_seeds() -> list[bytes]:
    record = {"component": "fabricmanager", "version": "580.95.05", "arch": "x86_64",
              "url": "https://example.invalid/fm.tar.xz", "archive_sha256": "ab" * 32,
              "files": [{"path": "bin/nv-fabricmanager", "sha256": "cd" * 32, "size": 10,
                         "mode": "0755"},
                        {"path": "share/nvidia/nvswitch/fabricmanager.cfg",
                         "sha256": "ef" * 32, "size": 3, "mode": "0644"}],
              "links": [{"path": "lib/libnvfm.so", "target": "libnvfm.so.1"}]}
    return [json.dumps(record, indent=1).encode()]


def _install_record(data: bytes) -> None:
    """``.nvfabric-install.json`` as ``run`` reads it back (artifacts/installed.py)."""
    from nvfabric.artifacts import installed

    if not _RECORD_DIR:
        _RECORD_DIR.append(tempfile.mkdtemp(prefix="nvfabric-fuzz-rec-"))
    root = _RECORD_DIR[0]
    tree = os.path.join(root, "opt/nvfabric/fabricmanager-580.95.05")
    os.makedirs(tree, exist_ok=True)
    with open(os.path.join(tree, ".nvfabric-install.json"), "wb") as fh:
        fh.write(data)
    found = installed.installed(root, "fabricmanager")
    if found is not None:
        found.find("nv-fabricmanager", executable=True)
        found.find_dir("_topology")


# --- install --from: the fetch record and the root's dpkg status database ------------------

_FETCH_RECORD = {
    "format": 1,
    "artifacts": [
        {"component": "fabricmanager", "version": "580.95.05", "arch": "x86_64",
         "url": "https://example.invalid/nvidia-fabricmanager_580.95.05-1_amd64.deb",
         "sha256": "ab" * 32, "size": 5931872, "source": "apt",
         "package": "nvidia-fabricmanager", "file": "nvidia-fabricmanager_580.95.05-1_amd64.deb",
         "driver_version": "580.95.05"},
        {"component": "imex", "version": "580.95.05", "arch": "sbsa",
         "url": "https://example.invalid/nvidia-imex-linux-sbsa-580.95.05-archive.tar.xz",
         "sha256": "cd" * 32, "size": None, "source": "redist", "package": None,
         "file": "nvidia-imex-linux-sbsa-580.95.05-archive.tar.xz",
         "driver_version": "580.95.05"},
    ],
}
_DPKG_STATUS = (
    b"Package: nvidia-fabricmanager\nStatus: install ok installed\nPriority: optional\n"
    b"Architecture: amd64\nVersion: 580.95.05-1\nProvides: nvidia-fabricmanager-580\n"
    b"Description: Fabric Manager\n\n"
    b"Package: libnvidia-nscq\nStatus: deinstall ok config-files\nVersion: 580.95.05-1\n"
)
#: The files ``install --from`` reads before it acts (first byte of an input chooses one).
INSTALL_FROM_FILES = ("from/nvfabric-artifacts.json", "root/var/lib/dpkg/status")


class _InstallFrom:
    """A fetch directory and an image root, made once; each input replaces one file."""

    def __init__(self) -> None:
        self.base = ""

    def seeds(self) -> list[bytes]:
        if not self.base:
            import logging

            # python-debian warns of each Provides it cannot parse (and keeps it raw)
            logging.getLogger("debian.deb822").setLevel(logging.ERROR)
            self.base = tempfile.mkdtemp(prefix="nvfabric-fuzz-from-")
            for rel in INSTALL_FROM_FILES:
                os.makedirs(os.path.dirname(os.path.join(self.base, rel)), exist_ok=True)
        record = json.dumps(_FETCH_RECORD, indent=2).encode()
        return [b"\x00" + record, b"\x01" + _DPKG_STATUS]

    def teardown(self) -> None:
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = ""

    def run(self, data: bytes) -> None:
        from nvfabric.artifacts import cachefile, dpkgdb

        rel = INSTALL_FROM_FILES[data[0] % len(INSTALL_FROM_FILES)] if data else \
            INSTALL_FROM_FILES[0]
        with open(os.path.join(self.base, rel), "wb") as fh:
            fh.write(data[1:])
        directory, root = os.path.join(self.base, "from"), os.path.join(self.base, "root")
        if rel.startswith("root/"):
            db = dpkgdb.read(root)
            json.dumps([repr(k) for k in db.installed])
            dpkgdb.status_of(root, ("nvidia-fabricmanager", "libnvidia-nscq"))
            return
        record = cachefile.read(directory)
        for arch in (None, "x86_64", "aarch64"):
            comps = cachefile.components_for(record, arch)
            try:
                cachefile.driver_for(record, None, None, root)
                if comps and arch is not None:
                    cachefile.pick(record, comps, arch)
            except NvfabricError as err:
                _nvfabric_error(err)
        json.dumps([c.to_json() for c in record])


_INSTALL_FROM = _InstallFrom()


# --- nvfabric's own state files ------------------------------------------------------------

#: The state files ``run``, ``ready`` and ``status`` read back (first byte chooses one): the
#: readiness file and the run lock in the state directory.
STATE_FILES = ("ready", "run.lock")


class _StateDir:
    """A state directory whose run lock this process holds (so the ready file's pid is a live
    holder and the whole check runs), made once; each input replaces one file."""

    def __init__(self) -> None:
        self.dir = ""
        self.lock_fd = -1

    def seeds(self) -> list[bytes]:
        if not self.dir:
            self.dir = tempfile.mkdtemp(prefix="nvfabric-fuzz-state-")
        ready = {"pid": os.getpid(), "fabric": "nvlink5", "ready_after_s": 3.217,
                 "restarts": 0, "services": [{"service": "nvlsm", "pid": 4711},
                                             {"service": "fabricmanager", "pid": 4712}]}
        return [b"\x00" + json.dumps(ready).encode() + b"\n",
                b"\x01" + f"{os.getpid()}\n".encode()]

    def teardown(self) -> None:
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""

    def run(self, data: bytes) -> None:
        import fcntl

        from nvfabric.effects import runlock

        name = STATE_FILES[data[0] % len(STATE_FILES)] if data else STATE_FILES[0]
        path = os.path.join(self.dir, name)
        if name == "run.lock":
            if self.lock_fd >= 0:
                os.close(self.lock_fd)
                self.lock_fd = -1
            with open(path, "wb") as fh:
                fh.write(data[1:])
            holder = runlock.run_lock_holder(self.dir)
            if holder is not None:
                raise Broken(f"nobody holds the lock, yet the holder is {holder}")
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.lock_fd = fd
            holder = runlock.run_lock_holder(self.dir)
            if holder is None or holder < 0:
                raise Broken(f"the lock is held, yet the holder is {holder!r}")
            return
        if self.lock_fd < 0:
            self.lock_fd = os.open(os.path.join(self.dir, "run.lock"),
                                   os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            os.ftruncate(self.lock_fd, 0)
            os.pwrite(self.lock_fd, f"{os.getpid()}\n".encode(), 0)
        with open(path, "wb") as fh:
            fh.write(data[1:])
        info, why = runlock.live_ready(self.dir)
        if info is None and not why:
            raise Broken("not ready without a reason")
        if info is not None:
            json.dumps(info)
            after = info.get("ready_after_s")
            from nvfabric.observe.metrics import Reading, render

            render(Reading("healthy", "nvlink5", None, (), run_ready=True,
                           ready_after_s=after if isinstance(after, float) else None))
        with open(path, "wb") as fh:
            fh.write(data[1:])
        pid = runlock.clear_stale_ready(self.dir)
        if pid is None or os.path.exists(path):
            raise Broken("the stale readiness file was not removed")


_STATE = _StateDir()


def _job_seeds() -> list[bytes]:
    from nvfabric.bringup.spec import GPU_REGISTRATION, ServiceSpec
    from nvfabric.supervisor.job import Job, Report
    from nvfabric.supervisor.policy import Policy

    specs = (
        ServiceSpec("nvlsm", ("/opt/nvidia/nvlsm/sbin/nvlsm", "-F",
                              "/usr/share/nvidia/nvlsm/nvlsm.conf", "-g", "0xe09d730300e400e8"),
                    ready_socket="/var/run/nvidia-fabricmanager/fm_sm_ipc.socket"),
        ServiceSpec("fabricmanager", ("/usr/bin/nv-fabricmanager", "-c",
                                      "/run/nvfabric/fabricmanager.cfg"),
                    ready_gpus=True, ready_probe=GPU_REGISTRATION),
    )
    job = Job(specs, Policy(restart="on-failure", start_limit_burst=5),
              Report(True, {"fabric": "nvlink5"}, ({"code": "x", "severity": "info",
                                                    "message": "m", "hint": ""},)),
              ready_file="/run/nvfabric/ready", ready_info={"fabric": "nvlink5"},
              pid_dir="/run/nvfabric", fabric="nvlink5", probe_root="/",
              fm_check=("/usr/bin/nv-fabricmanager", "580.95.05"), state_dir="/run/nvfabric",
              lock_fd=3)
    return [json.dumps(job.to_json()).encode()]


def _job(data: bytes) -> None:
    """The supervisor's job as the lean supervisor reads it from its memory file."""
    from nvfabric.supervisor.lean import read_job

    fd = os.memfd_create("nvfabric-fuzz-job", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    job = read_job(fd)
    json.dumps(job.to_json())


def _probe_answer_seeds() -> list[bytes]:
    from nvfabric.model.findings import Finding
    from nvfabric.model.gpucheck import GpuCheck
    from nvfabric.supervisor.gpuprobe import check_to_json

    done = GpuCheck(True, True, "8 GPUs: completed x8", None, True, (), (8, 8),
                    tuple(f"GPU-{i}" for i in range(8)))
    waiting = GpuCheck(False, False, "8 GPUs: in_progress x8", "not yet", True,
                       (Finding("registration_stuck", "warning", "m", "h", {"n": 1}),),
                       (0, 8), ())
    return [json.dumps(check_to_json(c)).encode() for c in (done, waiting)]


def _probe_answer(data: bytes) -> None:
    """The GPU probe child's answer as the supervisor reads it back (supervisor/gpuprobe)."""
    from nvfabric.model import strict
    from nvfabric.supervisor.gpuprobe import check_from_json, check_to_json

    check = check_from_json(strict.parse_json(data))
    json.dumps(check_to_json(check))


# --- triage: nvidia-bug-report.log(.gz) ------------------------------------------------------

def _report_files() -> list[bytes]:
    import zlib

    base = REPO / "tests" / "data" / "bugreports"
    out = []
    for p in sorted(base.glob("*.log*")):
        data = p.read_bytes()
        if p.name.endswith(".gz"):  # as far as it goes (one of them is cut short)
            data = zlib.decompressobj(wbits=31).decompress(data)
        out.append(data)
    small = min((p for p in base.glob("*.log.gz")), key=lambda p: p.stat().st_size, default=None)
    if small is not None:
        out.append(small.read_bytes())  # one compressed: the gzip reader meets damage too
    return out


def _triage(data: bytes) -> None:
    """``triage FILE --json`` and ``simulate --from-bug-report FILE DIR`` up to the tree's
    layout (nothing written)."""
    from nvfabric.simulate import parse
    from nvfabric.simulate.tree import layout
    from nvfabric.triage import triage_stream
    from nvfabric.triage.spec import node_spec

    t = triage_stream(io.BytesIO(data), "report")
    json.dumps(t.to_json())
    t.node_line()
    if t.extras.get("pci_known"):
        raw, _notes = node_spec(t.inventory)
        layout(parse(raw))


# --- what nvfabric writes: metrics, run's log lines ---------------------------------------

_CAPTURE: list[str] = []


def _prometheus(data: bytes) -> None:
    """``status --from-nvidia-smi FILE --prometheus``: the reading rendered by
    prometheus_client and parsed back by its own parser; every GPU's labels read back as the
    reading has them."""
    from prometheus_client.parser import text_string_to_metric_families

    from nvfabric.app.status import evaluate
    from nvfabric.observe.metrics import reading_of, render

    if not _CAPTURE:
        fd, path = tempfile.mkstemp(prefix="nvfabric-fuzz-smi-")
        os.close(fd)
        _CAPTURE.append(path)
    with open(_CAPTURE[0], "wb") as fh:
        fh.write(data)
    reading = reading_of(evaluate("/", _CAPTURE[0], root_given=False))
    text = render(reading).decode("utf-8")
    # the one family whose labels come from the capture, parsed back by the client's parser
    info = "\n".join(line for line in text.splitlines()
                     if "nvfabric_gpu_fabric_info" in line.split(" ", 3)[:3] or
                     line.startswith("nvfabric_gpu_fabric_info{")) + "\n"
    seen = {}
    for fam in text_string_to_metric_families(info):
        if fam.name == "nvfabric_gpu_fabric_info":
            for sample in fam.samples:
                seen[sample.labels["gpu"]] = (sample.labels["UUID"],
                                              sample.labels["pci_bus_id"])
    want = {str(g.index): (g.uuid or "", g.pci or "") for g in reading.gpus}
    if seen != want:
        raise Broken(f"GPU labels read back as {seen!r}, not {want!r}")


def _log_seeds() -> list[bytes]:
    return _files("logs/*", "imex/*.log")


_LOG_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_LOG_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


class _LogHost:
    """The one thing of a host that reading a daemon's output asks for: the clock."""

    def now(self) -> float:
        return 1000.0


def _run_log(data: bytes) -> None:
    """A daemon's output as ``run`` logs it: cut into lines (over-long ones into pieces),
    each written as one log line (text with its timestamp, or JSON) with control characters
    escaped, and fed to the live diagnosis."""
    from collections import deque

    from nvfabric.bringup.spec import ServiceSpec
    from nvfabric.effects import log as logs
    from nvfabric.effects.log import Log
    from nvfabric.rules.diagnose import Classifier
    from nvfabric.supervisor.host import Proc
    from nvfabric.supervisor.machine import MAX_LINE, Unit
    from nvfabric.supervisor.policy import Policy

    spec = ServiceSpec("fabricmanager", ("/usr/bin/nv-fabricmanager",),
                       ready_line="Successfully configured all the available NVSwitches")
    pieces = 0
    rest = data
    while True:
        cut = rest.find(b"\n")
        if cut < 0:
            if len(rest) > MAX_LINE:
                cut = MAX_LINE
            else:
                break
        pieces += 1
        rest = rest[cut + 1:]
    for fmt in logs.FORMATS:
        out = io.StringIO()
        logs.set_format(fmt)
        try:
            unit = Unit((spec,), Policy(), _LogHost(), Log(out), env={})  # type: ignore[arg-type]
            proc = Proc(spec, 1, None, 0.0, Classifier("nvswitch"), deque(maxlen=20))
            unit.take(proc, data)
        finally:
            logs.set_format("text")
        written = out.getvalue()
        written.encode("utf-8")  # every line encodes: surrogates and bad bytes escaped
        lines = written.split("\n")
        if lines.pop() != "":
            raise Broken("the log does not end with a newline")
        if _LOG_CONTROL.search(written.replace("\n", "")):
            raise Broken("a control character reached the log")
        if fmt == "json":
            sources = [json.loads(line)["source"] for line in lines]
        else:
            if not all(_LOG_STAMP.match(line) for line in lines):
                raise Broken("a text line without its timestamp")
            sources = [line.split(" ", 1)[1].partition(": ")[0] for line in lines]
        mine = sources.count("fabricmanager")
        if mine != pieces:
            raise Broken(f"{pieces} lines of output became {mine} log lines ({fmt})")


def _number_seeds() -> list[bytes]:
    return [b"0", b"-1", b"0xa751e84a", b"570.148.08", b"32766", b"4096", b"65535",
            b"00000000", b"1.5", b"12345.67"]


def _seed_text(*extra: bytes) -> Callable[[], list[bytes]]:
    return lambda: list(extra)


def targets() -> list[Target]:
    """Every reader, in the order the report prints them."""
    from nvfabric.facts.smi import SmiFormatError
    from nvfabric.model.fmkeys import ConfigError
    from nvfabric.rules.imex.nodes import PeerError
    from nvfabric.simulate import SpecError

    try:
        from nvfabric.rules.logtext import LogInputError
        log_errors: tuple[type[BaseException], ...] = (LogInputError,)
    except ImportError:  # older trees: doctor refused nothing
        log_errors = ()
    try:
        from nvfabric.model.strict import BadValue
    except ImportError:  # a tree without nvfabric.model.strict (fuzzing an older commit)
        BadValue = ValueError  # type: ignore[misc,assignment]  # noqa: N806
    return [
        Target("numbers", _number_seeds, _numbers, limit=6000),
        Target("json", lambda: _files("redist/*.json", "imex/*.json"), _json, (BadValue,)),
        Target("vpd", _vpd_seeds, _vpd, limit=40_000),
        Target("sysfs-procfs-tree", _SYSFS.seeds, _sysfs, (NvfabricError,), limit=70_000,
               teardown=_SYSFS.teardown),
        Target("procfs-text", lambda: _files("proc/*.txt", "ibstat/*"), _procfs_text),
        Target("services-pidfiles-slurm", _SERVICES.seeds, _services, (NvfabricError,),
               limit=70_000, teardown=_SERVICES.teardown),
        Target("nvidia-smi", lambda: _files("nvidia-smi/*"), _smi, (SmiFormatError,)),
        Target("logs", lambda: _files("logs/*", "imex/*.log", "imex/*.txt"), _log,
               log_errors),
        Target("kmsg", lambda: _files("logs/*kmsg*", "logs/*dmesg*"), _kmsg, limit=200_000),
        Target("event-history", _history_seeds, _history, limit=100_000),
        Target("redist", lambda: _files("redist/*.json"), _redist, (NvfabricError,)),
        Target("apt", _apt_seeds, _apt, (NvfabricError,)),
        Target("rpm", _seed_text(_PRIMARY, _REPOMD), _rpm, (NvfabricError,)),
        Target("imex-nodes", lambda: _files("imex/*nodes*") + [b"192.0.2.10\n192.0.2.11\n"],
               _nodes, (PeerError,)),
        Target("slurm-hostlist", _seed_text(b"gb-[01-18]", b"a[1-2],b3", b"n[001-004,010]",
                                            b"gb200-rack1-[01-18]"), _slurm, (PeerError,)),
        Target("imex-ctl", lambda: _files("imex/*imex-ctl*"), _ctl, (ValueError,)),
        Target("domain-reports", _report_seeds, _reports, (NvfabricError,)),
        Target("node-spec", _spec_seeds, _spec, (NvfabricError, SpecError), limit=100_000),
        Target("install-record", _record_seeds, _install_record, limit=100_000,
               teardown=lambda: [shutil.rmtree(d, ignore_errors=True) for d in _RECORD_DIR]
               and None),
        Target("install-from", _INSTALL_FROM.seeds, _INSTALL_FROM.run, (NvfabricError,),
               limit=100_000, teardown=_INSTALL_FROM.teardown),
        Target("state-files", _STATE.seeds, _STATE.run, limit=70_000, teardown=_STATE.teardown),
        Target("supervisor-job", _job_seeds, _job, (ValueError,), limit=100_000),
        Target("gpu-probe-answer", _probe_answer_seeds, _probe_answer,
               (ValueError, TypeError, KeyError), limit=100_000),
        Target("triage", _report_files, _triage, (NvfabricError,), limit=200_000),
        # 64 KB: up to ~6,000 GPUs' series (the capture reader itself has its own target at
        # full size); prometheus_client's rendering costs ~40 us a series
        Target("prometheus", lambda: _files("nvidia-smi/*"), _prometheus, (NvfabricError,),
               limit=64_000, teardown=lambda: [os.unlink(p) for p in _CAPTURE] and None),
        Target("run-log-lines", _log_seeds, _run_log, limit=100_000),
        Target("fm-config", lambda: _files("configs/*.cfg"), _fm_config, (ConfigError,)),
        Target("imex-config", lambda: _files("imex/*config*"), _imex_config),
        Target("slurm-prolog", _prolog_seeds, _prolog, limit=200_000),
    ]

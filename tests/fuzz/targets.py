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
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
    from nvfabric import strict

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
    from nvfabric import strict

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
    from nvfabric.facts import imex as host
    from nvfabric.facts import services

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
    from nvfabric.facts import imex as host
    from nvfabric.facts import infiniband, nvidia
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
    from nvfabric.artifacts.versions import is_version

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
    from nvfabric.facts import imexctl as ctl

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
    from nvfabric import strict
    from nvfabric.cli.simulate import node_of
    from nvfabric.simulate import parse
    from nvfabric.simulate.tree import layout

    text = data.decode("utf-8", "replace")
    spec = parse(node_of(strict.load_yaml(text, "spec"), "spec"))
    layout(spec)


def _fm_config(data: bytes) -> None:
    from nvfabric.bringup import fmconfig as fm
    from nvfabric.model import keyvalue

    text = _text(data)
    lines = text.splitlines()
    value = lines[len(lines) // 2].partition("=")[2] if lines else ""
    for sets in ({}, {"LOG_FILE_NAME": value}, {"FM_CMD_PORT_NUMBER": value},
                 {"FABRIC_MODE": value}):
        try:
            eff = fm.effective(text, root="/nonexistent-root", guid="0xe09d730300e400e8",
                               sets=sets)
        except fm.ConfigError:
            continue
        back = keyvalue.parse(eff.text).items()
        if back != eff.cfg.items():
            raise Broken("effective config does not read back as written")
        for key, want in sets.items():
            if key in fm.PATH_KEYS:
                continue  # resolved under the root, by design
            if back.get(key) != want:
                raise Broken(f"{key}={want!r} read back as {back.get(key)!r}")


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


def _number_seeds() -> list[bytes]:
    return [b"0", b"-1", b"0xa751e84a", b"570.148.08", b"32766", b"4096", b"65535",
            b"00000000", b"1.5", b"12345.67"]


def _seed_text(*extra: bytes) -> Callable[[], list[bytes]]:
    return lambda: list(extra)


def targets() -> list[Target]:
    """Every reader, in the order the report prints them."""
    from nvfabric.bringup.fmconfig import ConfigError
    from nvfabric.facts.smi import SmiFormatError
    from nvfabric.rules.imex.nodes import PeerError
    from nvfabric.simulate import SpecError

    try:
        from nvfabric.rules.diagnose import LogInputError
        log_errors: tuple[type[BaseException], ...] = (LogInputError,)
    except ImportError:  # older trees: doctor refused nothing
        log_errors = ()
    try:
        from nvfabric.strict import BadValue
    except ImportError:  # a tree without nvfabric.strict (fuzzing an older commit)
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
        Target("fm-config", lambda: _files("configs/*.cfg"), _fm_config, (ConfigError,)),
        Target("imex-config", lambda: _files("imex/*config*"), _imex_config),
    ]

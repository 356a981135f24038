"""Every I (IMEX owner, unit, install, domain) and M (multi-node domain check) case of
tests/data/cases through the real CLI, run as tests/data/cases/README.md says: the command
gets ``--root`` for its node and each option as ``--key value`` (``_`` becomes ``-``; ``true``
a bare flag; a list comma-joined; the word ``input`` the case's input written to a file), then
``--json``. Two options are built by the runner:

- ``from: packages`` (``install``): the case's ``packages`` become stand-in .debs with a
  ``Packages`` index in a directory; ``nvfabric fetch --root NODE --source apt --components ...
  --mirror DIR --dest CACHE`` fetches them and the command gets ``--from CACHE``.
- ``reports: inputs`` (``domain check``): each of the case's ``inputs`` (report name ->
  nvidia-smi capture) becomes ``NAME.json`` from ``nvfabric status --from-nvidia-smi FILE
  [--fabric <report_fabric>] --json``; the reports are the command's arguments, in order.

``install`` runs as on the case's node, whose dpkg is of the node's architecture: a stand-in
``dpkg`` first on PATH answers ``--print-architecture`` with it (this machine's dpkg may be
another: an amd64 one refuses the arm64 packages of a GB200 tray whose dpkg database names no
architecture) and refuses any other call (a dry run makes none).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cases import check_expect, load_cases
from tests.cli.test_fetch_mirror import deb_stanza
from tests.conftest import run_json

I_CASES = load_cases("I")
M_CASES = load_cases("M")

def _params(cases: list[dict[str, Any]]) -> list[Any]:
    return [pytest.param(c, id=c["_file"].removesuffix(".yaml")) for c in cases]


@pytest.mark.parametrize("case", _params(I_CASES + M_CASES))
def test_imex_and_domain_case(case: dict[str, Any], tmp_path: Path,
                              node: Callable[..., Path]) -> None:
    output, rc = run_case(case, tmp_path, node)
    expect = dict(case["expect"])
    expect.setdefault("exit_code", 1 if expect.get("codes") else 0)
    assert check_expect(expect, output, rc) == [], output
    for finding in output.get("findings") or []:
        assert finding["hint"], f"{finding['code']} carries a hint"


def run_case(case: dict[str, Any], tmp_path: Path, node: Callable[..., Path]
             ) -> tuple[dict[str, Any], int]:
    """The case's command line (module docstring), run; (JSON output, exit code)."""
    argv = case["command"].split()
    root = node(case["node"]) if case.get("node") else None
    if root is not None:
        argv += ["--root", str(root)]
    options = dict(case.get("options") or {})
    report_fabric = options.pop("report_fabric", None)
    positional: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key == "reports" and value == "inputs":
            positional = reports(case, tmp_path, report_fabric)
            continue
        assert report_fabric is None or "reports" in options, "report_fabric goes with reports"
        if key == "from" and value == "packages":
            assert root is not None, "packages are fetched for the case's node"
            value = str(fetch_packages(case, root, tmp_path))
        elif value == "input":
            path = tmp_path / f"{case['id']}-input"
            path.write_text(case["input"], encoding="utf-8")
            value = str(path)
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    env = node_dpkg(case, tmp_path) if argv[0] == "install" and root is not None else None
    return run_json(*argv, *positional, env=env)


#: The node's ``arch`` (uname -m) -> its dpkg's architecture.
DPKG_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}


def node_dpkg(case: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    """The environment whose PATH starts with the case node's stand-in dpkg (module
    docstring)."""
    arch = DPKG_ARCH[case["node"].get("arch", "x86_64")]
    bindir = tmp_path / "node-dpkg"
    bindir.mkdir()
    (bindir / "dpkg").write_text(
        '#!/bin/sh\ncase "$*" in *--print-architecture) echo ' + arch + "; exit 0;; esac\n"
        'echo "stand-in dpkg of the case node: only --print-architecture, not: $*" >&2\n'
        "exit 9\n")
    (bindir / "dpkg").chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def reports(case: dict[str, Any], tmp_path: Path, fabric: str | None) -> list[str]:
    """``NAME.json`` for each of the case's inputs, from ``status --from-nvidia-smi``."""
    out = []
    for name, capture in case["inputs"].items():
        source = tmp_path / f"{name}.smi"
        source.write_text(capture, encoding="utf-8")
        args = ["status", "--from-nvidia-smi", str(source)]
        if fabric:
            args += ["--fabric", fabric]
        report, rc = run_json(*args)
        assert "error" not in report, report
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report), encoding="utf-8")
        out.append(str(path))
    return out


def fetch_packages(case: dict[str, Any], root: Path, tmp_path: Path) -> Path:
    """The case's ``packages`` as stand-in .debs with a ``Packages`` index in a mirror
    directory, fetched for the node by ``nvfabric fetch``; the download cache."""
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    mirror.mkdir()
    stanzas = []
    for p in case["packages"]:
        data = stand_in_deb(p["package"], p["version"], p["arch"], p.get("files") or {})
        (mirror / f"{p['package']}_{p['version'].split(':', 1)[-1]}_{p['arch']}.deb"
         ).write_bytes(data)
        stanzas.append(deb_stanza(p["package"], p["version"], data, p["arch"]))
    (mirror / "Packages").write_text("\n".join(stanzas), encoding="utf-8")
    components = ",".join(dict.fromkeys(p["component"] for p in case["packages"]))
    out, rc = run_json("fetch", "--root", str(root), "--source", "apt", "--components",
                       components, "--mirror", str(mirror), "--dest", str(cache))
    assert rc == 0, out
    return cache


def stand_in_deb(package: str, version: str, arch: str, files: dict[str, str]) -> bytes:
    """A Debian binary package as dpkg-deb lays it out (ar: debian-binary, control.tar.gz,
    data.tar.gz; directories listed, files under ``*/bin/`` mode 0755, others 0644)."""
    control = (f"Package: {package}\nVersion: {version}\nArchitecture: {arch}\n"
               "Maintainer: nvfabric field cases <cases@example.invalid>\n"
               f"Description: stand-in {package} of a field case\n")
    dirs = sorted({"/".join(path.split("/")[:n]) for path in files
                   for n in range(1, path.count("/") + 1)})
    entries = [(d + "/", None) for d in dirs] + [(path, text.encode())
                                                 for path, text in sorted(files.items())]
    return _ar([("debian-binary", b"2.0\n"),
                ("control.tar.gz", _tgz([("control", control.encode())])),
                ("data.tar.gz", _tgz(entries))])


def _tgz(entries: list[tuple[str, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo("./" + name)
            info.uname = info.gname = "root"
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size = len(data)
            info.mode = 0o755 if "/bin/" in f"/{name}" else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return out

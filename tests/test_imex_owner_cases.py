"""The IMEX owner field cases (tests/data/cases/I*.yaml whose command is ``imex owner`` or
``install``), run through the CLI as tests/data/cases/README.md describes: the case's node
built by ``nvfabric simulate --spec``, ``imex owner --root NODE --json``; for ``install`` with
``from: packages`` the case's packages built as stand-in .debs (dpkg-deb) with a ``Packages``
index in a directory, fetched with ``nvfabric fetch --source apt --mirror DIR --dest CACHE``,
then ``install --from CACHE ... --json``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import check_expect, load_cases
from tests.conftest import run_cli, run_json
from tests.test_fetch_mirror import deb_stanza

CASES = [c for c in load_cases("I") if c["command"] in ("imex owner", "install")]


def build_node(case: dict[str, Any], tmp_path: Path) -> Path:
    spec = tmp_path / "node.yaml"
    spec.write_text(yaml.safe_dump(case["node"]), encoding="utf-8")
    root = tmp_path / "node"
    done = run_cli("simulate", "--spec", str(spec), str(root))
    assert done.returncode == 0, done.stderr
    return root


def build_debs(packages: list[dict[str, Any]], mirror: Path) -> None:
    """Each package as a .deb (dpkg-deb, files under */bin/ executable) and one Packages
    index beside them."""
    mirror.mkdir()
    stanzas = []
    for pkg in packages:
        tree = mirror / f"{pkg['package']}-tree"
        (tree / "DEBIAN").mkdir(parents=True)
        (tree / "DEBIAN/control").write_text(
            f"Package: {pkg['package']}\nVersion: {pkg['version']}\n"
            f"Architecture: {pkg['arch']}\nMaintainer: case <case@example.invalid>\n"
            "Description: stand-in built from a field case\n", encoding="utf-8")
        for path, text in (pkg.get("files") or {}).items():
            target = tree / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            target.chmod(0o755 if "/bin/" in f"/{path}" else 0o644)
        name = f"{pkg['package']}_{pkg['version'].split(':', 1)[-1]}_{pkg['arch']}.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree),
                        str(mirror / name)], check=True, capture_output=True, timeout=120)
        shutil.rmtree(tree)
        stanzas.append(deb_stanza(pkg["package"], pkg["version"],
                                  (mirror / name).read_bytes(), pkg["arch"]))
    (mirror / "Packages").write_text("\n".join(stanzas), encoding="utf-8")


def command_args(case: dict[str, Any], root: Path, tmp_path: Path) -> list[str]:
    """The case's command line: ``--root``, each option as ``--key value``, ``from:
    packages`` as the fetched cache."""
    args = case["command"].split() + ["--root", str(root)]
    for key, value in (case.get("options") or {}).items():
        flag = "--" + key.replace("_", "-")
        if key == "from" and value == "packages":
            cache = tmp_path / "cache"
            mirror = tmp_path / "mirror"
            build_debs(case["packages"], mirror)
            components = ",".join(p["component"] for p in case["packages"])
            out, rc = run_json("fetch", "--root", str(root), "--source", "apt", "--components",
                               components, "--mirror", str(mirror), "--dest", str(cache))
            assert rc == 0, out
            args += [flag, str(cache)]
        elif value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, ",".join(map(str, value))]
        else:
            args += [flag, str(value)]
    return args


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_imex_owner_case(case: dict[str, Any], tmp_path: Path) -> None:
    if case["command"] == "install" and shutil.which("dpkg-deb") is None:
        pytest.fail("dpkg-deb is needed to build the case's stand-in packages (.ci/run TOOLS)")
    root = build_node(case, tmp_path)
    out, rc = run_json(*command_args(case, root, tmp_path))
    problems = check_expect(case["expect"], out, rc)
    assert not problems, (case["id"], problems, out)


def test_the_ownership_and_unit_cases_are_all_run() -> None:
    assert {c["id"] for c in CASES} >= {"I01", "I02"}

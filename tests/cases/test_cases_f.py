"""Every F (fetch) case of tests/data/cases through the real CLI, its input served by a local
mirror on 127.0.0.1 exactly where the case says (``input (served as <mirror>/…)``). An rpm
case's input is primary metadata: served gzip-compressed there, with the case's ``modules``
text (modulemd documents) as ``repodata/modules.yaml.gz``, both listed in
``repodata/repomd.xml`` with their sha256 (tests/data/cases/README.md).

The case archives are not available (only their published checksums are), so the CLI runs
with ``--dry-run``: resolution in full (manifest or index fetched over HTTP, exact version,
platform, URL, checksum), no archive download. Downloads and their faults are tested in
test_fetch_mirror.py and test_fetch_redist.py with archives built in the test.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.cases import check_expect, load_cases
from tests.cli.test_fetch_mirror import Mirror, gz, mirror, sha256  # noqa: F401 - fixture
from tests.conftest import run_json

F_CASES = load_cases("F")

#: Where a case's input is served when its options do not say (by --source).
DEFAULT_PATH = {"redist": "redistrib_{driver_version}.json", "apt": "Packages",
                "rpm": "repodata/primary.xml.gz"}


def served_path(case: dict[str, Any]) -> str:
    """The mirror path the case names for its input, e.g. ``redistrib_580.95.05.json``."""
    for value in case["options"].values():
        if isinstance(value, str):
            found = re.match(r"input \(served as <mirror>/([^)\s]+)\)", value)
            if found:
                return found.group(1)
    opts = case["options"]
    return DEFAULT_PATH[opts["source"]].format(driver_version=opts["driver_version"])


def cli_args(case: dict[str, Any], url: str) -> list[str]:
    args = ["fetch", "--mirror", url, "--dry-run", "--retries", "0", "--timeout", "5"]
    for key, value in case["options"].items():
        if isinstance(value, str) and value.startswith("input"):
            continue
        flag = "--" + key.replace("_", "-")
        args += [flag, ",".join(value) if isinstance(value, list) else str(value)]
    return args


def serve(case: dict[str, Any], m: Mirror) -> None:
    """The case's input where it says; for rpm also its ``modules`` and a repomd.xml naming
    both (compressed as their names say, with the sha256 of what is served)."""
    path, body = served_path(case), case["input"].encode()
    if case["options"]["source"] != "rpm":
        assert "modules" not in case, "module metadata is an rpm repository's"
        m.add(path, body)
        return
    files = [("primary", path, body)]
    if case.get("modules"):
        files.append(("modules", "repodata/modules.yaml.gz", case["modules"].encode()))
    entries = []
    for kind, href, data in files:
        served = gz(data) if href.endswith(".gz") else data
        m.add(href, served)
        entries.append(f'<data type="{kind}"><checksum type="sha256">{sha256(served)}'
                       f'</checksum><location href="{href}"/><size>{len(served)}</size></data>')
    m.add("repodata/repomd.xml", (
        '<?xml version="1.0" encoding="UTF-8"?>\n<repomd xmlns="http://linux.duke.edu/'
        f'metadata/repo"><revision>1</revision>{"".join(entries)}</repomd>\n').encode())


@pytest.mark.parametrize("case", F_CASES, ids=[c["id"] for c in F_CASES])
def test_fetch_case(case: dict[str, Any], mirror: Mirror) -> None:  # noqa: F811
    assert case["command"] == "fetch"
    serve(case, mirror)
    output, rc = run_json(*cli_args(case, mirror.url))
    expect = dict(case["expect"])
    expect.setdefault("exit_code", 1 if expect.get("codes") else 0)
    assert check_expect(expect, output, rc) == [], output
    if expect.get("codes"):
        assert output["error"]["code"] in expect["codes"]
        error = output["error"]
        assert error["component"] in case["options"]["components"]
        assert error["version"] == case["options"]["driver_version"]
        assert error["sources_searched"], "the error names the sources searched"
        assert all(s.startswith(mirror.url) for s in error["sources_searched"])
        assert error["platform"] in error["message"]
    if case["options"]["source"] == "redist" and rc == 0:
        manifest = json.loads(case["input"])
        for art in output["artifacts"]:
            entry = manifest[art["component"]][f"linux-{art['arch']}"]
            assert art["url"] == f"{mirror.url}/{entry['relative_path']}"
            assert art["sha256"] == entry["sha256"]
        assert [a["component"] for a in output["artifacts"]] == case["options"]["components"]
    if case["options"]["source"] == "apt" and rc == 0:
        for art in output["artifacts"]:
            assert f"apt-get install -y --no-install-recommends {art['package']}={art['version']}" \
                in output["pins"]
            assert any(p.startswith("apt-mark hold") and art["package"] in p
                       for p in output["pins"])


"""Every F (fetch) case of tests/data/cases through the real CLI, its input served by a local
mirror on 127.0.0.1 exactly where the case says (``input (served as <mirror>/…)``).

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

from tests.cases import load_cases, matches
from tests.conftest import run_json
from tests.test_fetch_mirror import Mirror, mirror  # noqa: F401 - fixture

F_CASES = load_cases("F")

#: Where a case's input is served when its options do not say (by --source).
DEFAULT_PATH = {"redist": "redistrib_{driver_version}.json", "apt": "Packages"}


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


@pytest.mark.parametrize("case", F_CASES, ids=[c["id"] for c in F_CASES])
def test_fetch_case(case: dict[str, Any], mirror: Mirror) -> None:  # noqa: F811
    assert case["command"] == "fetch"
    mirror.add(served_path(case), case["input"].encode())
    output, rc = run_json(*cli_args(case, mirror.url))
    expect = case["expect"]
    assert rc == expect.get("exit_code", 1 if expect.get("codes") else 0), output
    if expect.get("codes"):
        assert output["error"]["code"] in expect["codes"]
        error = output["error"]
        assert error["component"] in case["options"]["components"]
        assert error["version"] == case["options"]["driver_version"]
        assert error["sources_searched"], "the error names the sources searched"
        assert all(s.startswith(mirror.url) for s in error["sources_searched"])
        assert error["platform"] in error["message"]
    for want in expect.get("artifacts", []):
        assert any(matches(want, have) for have in output["artifacts"]), (want, output)
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


"""The preflight's single reads (facts/probes.py): what ``nv-fabricmanager --version`` says."""

from __future__ import annotations

from pathlib import Path

from nvfabric.facts.probes import fm_version
from nvfabric.rules import preflight


def _binary(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nv-fabricmanager"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_version_line_is_parsed(tmp_path: Path) -> None:
    read = fm_version(_binary(tmp_path, "echo 'Fabric Manager version is : 570.148.08'\n"))
    assert (read.version, read.error, read.finding) == ("570.148.08", None, None)


def test_a_fabric_manager_whose_version_hangs_is_a_probe_limit_not_a_missing_binary(
        tmp_path: Path) -> None:
    binary = _binary(tmp_path, "exec sleep 300\n")
    read = fm_version(binary, timeout_s=0.3)
    assert read.version is None and read.finding is not None
    assert (read.finding.code, read.finding.fields["limit"]) == ("probe_limit", "time")
    assert f"`{binary} --version` by hand" in (read.finding.hint or "")
    (f,) = preflight.fm_version(binary, "570.148.08", read)
    assert f.code == "probe_limit"


def test_a_binary_that_is_not_there_is_missing(tmp_path: Path) -> None:
    read = fm_version(str(tmp_path / "nv-fabricmanager"))
    (f,) = preflight.fm_version(str(tmp_path / "nv-fabricmanager"), "570.148.08", read)
    assert f.code == "binary_missing" and "No such file" in f.message

"""The one host-path check used for daemon argv, config values and files written under a root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvfabric.model import hostpath


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("relative/x", "absolute"),
        ("/a/../b", "'..'"),
        ("/a/..", "'..'"),
        ("/a\nKEY=1", "newline"),
        ("/a\x00", "NUL"),
    ],
)
def test_bad_host_paths_are_named(path: str, why: str) -> None:
    problem = hostpath.problem(path)
    assert problem is not None and why in problem
    with pytest.raises(ValueError, match="--fm-config"):
        hostpath.check(path, "--fm-config")


def test_good_paths_pass_and_resolve_under_the_root(tmp_path: Path) -> None:
    assert hostpath.check("/var/run/x..y", "p") == "/var/run/x..y"  # '..' only as a segment
    assert hostpath.under_root("/", "/etc/x") == "/etc/x"
    assert hostpath.under_root(str(tmp_path), "/a/./b//c") == str(tmp_path / "a/b/c")
    assert hostpath.confined(str(tmp_path), "/etc/x") == str(tmp_path / "etc/x")


def test_a_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    os.symlink(str(tmp_path / "outside"), root / "etc" / "nvidia-imex")
    with pytest.raises(ValueError, match="outside the root"):
        hostpath.confined(str(root), "/etc/nvidia-imex/nodes_config.cfg")

"""The one host-path check used for daemon argv, config values and files written under a root,
and the one root-join (facts.paths.under / confined) every reader and writer uses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvfabric.facts.fs import read_text
from nvfabric.model import hostpath
from nvfabric.model import hostpath as paths


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
    assert paths.under("/", "/etc/x") == "/etc/x"
    assert paths.under("/", "/a/./b") == "/a/./b"  # the node itself: as given
    assert paths.under(str(tmp_path), "/a/./b//c") == str(tmp_path / "a/b/c")
    assert paths.under(str(tmp_path), "sys/x") == str(tmp_path / "sys/x")
    assert paths.under(str(tmp_path), "/") == str(tmp_path)
    assert paths.under(str(tmp_path), "") == ""  # an option not given stays not given
    assert paths.confined(str(tmp_path), "/etc/x") == str(tmp_path / "etc/x")


def test_a_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    os.symlink(str(tmp_path / "outside"), root / "etc" / "nvidia-imex")
    with pytest.raises(ValueError, match="outside the root"):
        paths.confined(str(root), "/etc/nvidia-imex/nodes_config.cfg")


@pytest.mark.parametrize("root", ["/", "/srv/node"])
@pytest.mark.parametrize("path", ["/etc/../../x", "..", "sys/class/../../../etc/shadow", "/a/.."])
def test_under_refuses_a_dotdot_segment_under_every_root(root: str, path: str) -> None:
    with pytest.raises(paths.PathEscape, match="'..'"):
        paths.under(root, path)


@pytest.mark.parametrize("root", ["/", "/srv/node"])
def test_under_refuses_a_nul(root: str) -> None:
    with pytest.raises(paths.PathEscape, match="NUL"):
        paths.under(root, "/etc/nvidia-imex/config.cfg\x00.bak")


def test_confined_refuses_what_under_refuses_and_a_relative_path(tmp_path: Path) -> None:
    for bad, why in (("/a/../b", "'..'"), ("/a\x00", "NUL"), ("etc/x", "absolute"),
                     ("/a\nKEY=1", "newline")):
        with pytest.raises(paths.PathEscape, match=why):
            paths.confined(str(tmp_path), bad, "--config")


def test_a_link_out_of_the_root_is_not_read_and_not_written(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/hostname").write_text("elsewhere\n")
    os.symlink(str(tmp_path / "outside"), root / "etc" / "linked")
    os.symlink("../../outside/hostname", root / "etc" / "hostname")
    assert read_text(paths.under(str(root), "/etc/hostname")) is None  # relative link out
    assert read_text(paths.under(str(root), "/etc/linked/hostname")) is None  # absolute one
    with pytest.raises(paths.PathEscape, match="outside the root"):
        paths.confined(str(root), "/etc/hostname")
    with pytest.raises(paths.PathEscape, match="outside the root"):
        paths.confined(str(root), "/etc/linked/new.cfg")  # the part that exists is followed
    os.symlink(str(root / "etc"), root / "etc-abs")  # absolute, but inside the root
    assert paths.confined(str(root), "/etc-abs/x") == str(root / "etc-abs/x")


def test_host_view_is_the_inverse_of_under(tmp_path: Path) -> None:
    for root in ("/", str(tmp_path)):
        assert paths.host_view(root, paths.under(root, "/etc/slurm/prolog.sh")) == \
            "/etc/slurm/prolog.sh"


def test_a_tree_is_not_live_and_the_running_system_is(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/self").symlink_to(str(os.getpid()))  # the reader's pid, as procfs says
    (tmp_path / "proc" / str(os.getpid())).mkdir()  # ... and a directory there: still a tree
    assert not paths.is_live(str(tmp_path))
    assert paths.is_live("/")

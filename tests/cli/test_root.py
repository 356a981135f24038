"""`--root` is made absolute once, at the CLI edge, for every command that takes it: a relative
root (a simulated node next to the working directory) reads and plans the same node as its
absolute path, and the IMEX path of `nvfabric run`, whose argv and config files take absolute
paths only, accepts it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from nvfabric.cli import COMMANDS
from nvfabric.cli.render import absolute_root
from tests.conftest import run_cli, run_json
from tests.runkit import sim


def _commands() -> Iterator[tuple[str, click.Command]]:
    for name, load in COMMANDS.items():
        stack: list[tuple[str, click.Command]] = [(name, load())]
        while stack:
            path, c = stack.pop()
            yield path, c
            if isinstance(c, click.Group):
                stack += [(f"{path} {n}", sub) for n, sub in c.commands.items()]


def test_every_root_option_is_made_absolute_at_the_cli_edge() -> None:
    with_root = {path: c for path, c in _commands()
                 if any(p.name == "root" for p in c.params)}
    assert {"detect", "plan", "run", "status", "wait", "doctor", "imex channel"} <= set(with_root)
    for path, c in with_root.items():
        (param,) = [p for p in c.params if p.name == "root"]
        assert param.callback is absolute_root, path
        assert param.default == "/", path


@pytest.mark.parametrize("args", [
    ("detect",), ("plan",), ("imex", "owner"), ("imex", "channel"), ("run", "--dry-run"),
], ids=" ".join)
def test_relative_root_is_the_same_node_as_its_absolute_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]) -> None:
    root = sim(tmp_path, "gb200-tray", name="tray")
    monkeypatch.chdir(tmp_path)
    relative, rc_rel = run_json(*args, "--root", "tray")
    absolute, rc_abs = run_json(*args, "--root", str(root))
    assert (relative, rc_rel) == (absolute, rc_abs)


def test_imex_run_accepts_a_relative_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = sim(tmp_path, "gb200-tray", name="tray")
    monkeypatch.chdir(tmp_path)
    out, rc = run_json("run", "--root", "tray", "--dry-run")
    assert rc == 0, json.dumps(out)
    assert out["findings"] == []
    cfg = str(root / "run/nvfabric/imex/config.cfg")
    assert out["processes"] == [{"service": "imex", "argv": [
        str(root / "usr/bin/nvidia-imex"), "-c", cfg], "written_by_run": [cfg]}]


def test_an_empty_root_is_a_usage_error() -> None:
    proc = run_cli("detect", "--root", "")
    assert proc.returncode == 2
    assert "--root" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("raw", [b"node-\xff", b"node\nname", b"node\x1b[31m"])
@pytest.mark.parametrize("command", ["plan", "run --dry-run", "status", "simulate dgx-b200"])
def test_a_root_text_cannot_hold_is_refused_in_one_line(tmp_path: Path, raw: bytes,
                                                        command: str) -> None:
    # a --root (or simulate's DIR) of bytes that are not UTF-8, or with control characters,
    # would reach configs, argv and the fakes' files as text: exit 2 naming it, never exit 3
    import os

    bad = os.fsdecode(bytes(tmp_path) + b"/" + raw)
    words = command.split()
    args = [*words, bad] if words[0] == "simulate" else [*words, "--root", bad]
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "internal_error" not in proc.stderr
    assert "UTF-8" in proc.stderr or "control character" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing was written


@pytest.mark.parametrize("args", [("detect",), ("plan",), ("status",), ("ready",),
                                  ("run", "--dry-run")], ids=" ".join)
def test_a_root_that_does_not_exist_is_exit_2_for_every_reader(tmp_path: Path,
                                                               args: tuple[str, ...]) -> None:
    # field report: `ready --root /nonexistent` said "not ready" (exit 1) where the other
    # commands say the root is not a readable directory (exit 2)
    proc = run_cli(*args, "--root", str(tmp_path / "does-not-exist"))
    assert proc.returncode == 2, proc.stderr
    assert "is not a readable directory" in proc.stderr and "Traceback" not in proc.stderr


def test_a_host_path_missing_under_the_root_is_named_where_it_was_looked_for(
        tmp_path: Path) -> None:
    """``imex config --root R``: the config and node list are read under R; a message naming
    the typed path alone would point at the host's file, which may well exist."""
    root = sim(tmp_path, "gb200-tray", name="tray")
    done = run_cli("imex", "config", "--root", str(root), "--config", "/etc/nvidia-imex/x.cfg",
                   "--dry-run")
    assert done.returncode == 1
    assert (f"no IMEX config at {root}/etc/nvidia-imex/x.cfg (/etc/nvidia-imex/x.cfg under "
            f"--root {root})") in done.stderr
    (root / "etc/nvidia-imex/nodes_config.cfg").unlink()
    done = run_cli("imex", "config", "--root", str(root), "--dry-run")
    assert done.returncode == 2
    assert (f"no node list at {root}/etc/nvidia-imex/nodes_config.cfg "
            f"(/etc/nvidia-imex/nodes_config.cfg under --root {root}) and none given"
            ) in done.stderr

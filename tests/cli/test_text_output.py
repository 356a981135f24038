"""Text read from the node is printed literally by `detect` and `plan`: never taken as rich
markup (tester report item 1: `[/]` in a sysfs file crashed detect with exit 3) and never
passed to the terminal as an escape sequence (item 14)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.conftest import run_cli

MARKUP = "[/]"
STYLE = "[red]"  # a file name cannot hold "/": a tag rich would apply, eating the text
ESCAPE = "\x1b[2J"


def hostile_b200(node: Callable[..., Path]) -> Path:
    """A DGX B200 whose port state, kernel arch and IB device name carry markup and escapes."""
    root = node("dgx-b200")
    ports = "sys/devices/pci0000:00/0000:05:00.0/infiniband/mlx5_0/ports/1"
    (root / ports / "state").write_text(f"4: ACTIVE {MARKUP}{ESCAPE}\n")
    (root / "proc/sys/kernel/arch").write_text(f"x86_64{MARKUP}{ESCAPE}\n")
    ib = root / "sys/class/infiniband"
    name = f"mlx5_0{STYLE}{ESCAPE}"  # still first in string order: the port taken
    os.rename(ib / "mlx5_0", ib / name)  # umad0 still names mlx5_0: no umad, nothing else
    return root


def test_detect_prints_node_text_literally(node: Callable[..., Path]) -> None:
    proc = run_cli("detect", "--root", str(hostile_b200(node)))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert f"x86_64{MARKUP}\\x1b[2j" in proc.stdout  # the arch line (lower-cased)
    assert f"mlx5_0{STYLE}\\x1b[2J" in proc.stdout  # the device column
    assert f"4: ACTIVE {MARKUP}\\x1b[2J" in proc.stdout.replace("│\n│", "")  # the state column


def test_plan_prints_node_text_literally(node: Callable[..., Path]) -> None:
    proc = run_cli("plan", "--root", str(hostile_b200(node)))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert f"(x86_64{MARKUP}\\x1b[2j)" in proc.stdout  # the driver line
    port = [line for line in proc.stdout.splitlines() if line.startswith("port")]
    assert port == [f"port     mlx5_0{STYLE}\\x1b[2J port 1 GUID 0xe09d730300e400e8"]
    assert f"candidate mlx5_0{STYLE}\\x1b[2J port 1" in proc.stdout

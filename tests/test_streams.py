"""Issue 10, section 3: exit codes and streams a script can trust. A reader that goes away
(`nvfabric status | head -1`) or a closed stdout/stderr (`>&-`, `2>&-`) never changes the
command's own exit code and is never an internal error."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def _nvfabric(*args: str, stdout: int | None = None, close: tuple[int, ...] = (),
              broken_stdout: bool = False) -> subprocess.CompletedProcess[bytes]:
    """``python -m nvfabric ARGS`` with descriptors in ``close`` closed in the child, or
    (``broken_stdout``) stdout a pipe whose reader is already gone (each write: EPIPE)."""
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    read_end = write_end = None
    if broken_stdout:
        read_end, write_end = os.pipe()
        os.close(read_end)

    def child() -> None:
        for fd in close:
            os.close(fd)

    try:
        return subprocess.run(
            [sys.executable, "-m", "nvfabric", *args],
            stdout=write_end if broken_stdout else (stdout or subprocess.PIPE),
            stderr=subprocess.PIPE if 2 not in close else None, stdin=subprocess.DEVNULL,
            preexec_fn=child if close else None, env=env, timeout=120, check=False)
    finally:
        if write_end is not None:
            os.close(write_end)


@pytest.fixture
def unhealthy(node: Callable[..., Path]) -> Path:
    """A simulated DGX B200 before bring-up: fabric manager not running, GPUs in progress:
    ``status`` says unhealthy, exit 1."""
    return node("dgx-b200")


@pytest.mark.parametrize("json_flag", [(), ("--json",)])
def test_status_into_a_reader_that_went_away_keeps_exit_1(unhealthy: Path,
                                                          json_flag: tuple[str, ...]) -> None:
    plain = _nvfabric("status", "--root", str(unhealthy), *json_flag)
    assert plain.returncode == 1 and plain.stdout
    proc = _nvfabric("status", "--root", str(unhealthy), *json_flag, broken_stdout=True)
    assert proc.returncode == 1, proc.stderr
    assert b"internal_error" not in proc.stderr and b"Traceback" not in proc.stderr
    assert b"BrokenPipe" not in proc.stderr


def test_status_piped_into_head_exits_like_status(unhealthy: Path) -> None:
    head = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert head.stdin is not None
    proc = _nvfabric("status", "--root", str(unhealthy), stdout=head.stdin.fileno())
    head.stdin.close()
    assert head.stdout is not None
    out = head.stdout.read()
    head.wait(60)
    assert out.startswith(b"unhealthy")
    assert proc.returncode == 1


@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2)])
@pytest.mark.parametrize("json_flag", [(), ("--json",)])
def test_closed_stdout_or_stderr_is_never_an_internal_error(
        unhealthy: Path, closed: tuple[int, ...], json_flag: tuple[str, ...]) -> None:
    proc = _nvfabric("status", "--root", str(unhealthy), *json_flag, close=closed)
    assert proc.returncode == 1
    if 2 not in closed:
        assert b"internal_error" not in proc.stderr
    healthy_exit = _nvfabric("detect", "--root", str(unhealthy), *json_flag, close=closed)
    assert healthy_exit.returncode == 0
    usage = _nvfabric("status", "--from-nvidia-smi", str(unhealthy / "nonexistent"),
                      *json_flag, close=closed)
    assert usage.returncode == 2


def test_a_closed_stdout_is_not_handed_to_a_file_nvfabric_opens(tmp_path: Path) -> None:
    # with fd 1 closed, the run lock (the first file `run` opens) would become "stdout" and
    # the JSON of the refusal would be written into it
    from tests.runkit import sim

    root = sim(tmp_path, "dgx-b200")
    (root / "bin/nv-fabricmanager").unlink()  # preflight refuses, after taking the lock
    proc = _nvfabric("run", "--root", str(root), "--json", close=(1,))
    assert proc.returncode == 1, proc.stderr
    lock = root / "run/nvfabric/run.lock"
    assert lock.exists() and b"{" not in lock.read_bytes()

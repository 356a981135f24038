"""Shared fixtures: run the real CLI as a process, build simulated nodes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvfabric.simulate import build, parse, profile_spec
from tests import forkserver

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, stdin: str | None = None, timeout: float = 60,
            env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m nvfabric ARGS`` as a real process; text output. The process is forked
    from :mod:`tests.forkserver` (nvfabric already imported) unless it must be exec'd."""
    full_env = dict(os.environ)
    full_env.pop("NVFABRIC_DEBUG", None)
    # pytest names the running test here; a parameter id of a 300 KB input would pass Linux's
    # 128 KiB limit for one environment string (E2BIG at exec)
    full_env.pop("PYTEST_CURRENT_TEST", None)
    if env:
        full_env.update(env)
    return forkserver.run(list(args), input=stdin, timeout=timeout, env=full_env,
                          cwd=None if cwd is None else str(cwd))


def run_json(*args: str, **kw: Any) -> tuple[dict[str, Any], int]:
    """Run with ``--json``; return (parsed stdout, exit code). Fails the test on bad JSON."""
    proc = run_cli(*args, "--json", **kw)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"not JSON (rc={proc.returncode}): {proc.stdout!r} {proc.stderr!r}")
    assert isinstance(data, dict)
    return data, proc.returncode


@pytest.fixture
def node(tmp_path: Path) -> Callable[..., Path]:
    """``node(spec_dict)`` or ``node("dgx-b200")``: build a simulated node, return its root."""
    counter = [0]

    def make(spec: dict[str, Any] | str) -> Path:
        counter[0] += 1
        root = tmp_path / f"node{counter[0]}"
        build(profile_spec(spec) if isinstance(spec, str) else parse(spec), str(root))
        return root

    return make


@pytest.fixture
def start() -> Iterator[Callable[..., Any]]:
    """``start(root, *args)``: ``nvfabric run`` on a node as a real process
    (:class:`tests.runkit.Run`); every run still going is closed after the test."""
    from tests.runkit import Run

    runs: list[Run] = []

    def make(root: Path, *args: str, **kw: Any) -> Run:
        run = Run(root, *args, **kw)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    forkserver.shutdown()

"""NVLSM is ready when its IPC socket listens, not when its file exists: a Unix socket's file
exists from bind(2) and refuses connections until listen(2). A slow NVLSM (bind, 1 s, listen)
made fabric manager start in the gap and fail with `Connection refused`; the same race failed
`make test` on a fresh clone. The fake NVLSM's `listen_delay_s` fault is that gap."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from .runkit import Run, codes, events, sim


@pytest.mark.parametrize("gap_s", [0.5, 1.0])
def test_fabric_manager_starts_only_once_nvlsm_listens(
        tmp_path: Path, start: Callable[..., Run], gap_s: float) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 0, "listen_delay_s": gap_s}})
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    (bound,) = events(root, "nvlsm", "socket")
    (listening,) = events(root, "nvlsm", "listen")
    (fm,) = events(root, "fabricmanager", "exec")
    assert bound["t"] < listening["t"] < fm["t"]  # the fakes' own clocks: the order
    assert "exists but does not listen yet; waiting for it to listen" in run.log
    assert "failed to connect" not in run.log
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert "service_exited" not in codes(run.result())


def test_a_socket_that_is_bound_but_never_listens_is_a_socket_timeout(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 0, "listen_delay_s": 3600}})
    run = start(root, "--json", "--socket-timeout", "0.5")
    assert run.wait() == 1
    (f,) = [f for f in run.result()["findings"] if f["code"] == "socket_timeout"]
    assert "did not listen on its IPC socket" in f["message"]
    assert not events(root, "fabricmanager", "exec")

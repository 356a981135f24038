"""NVLSM is ready when its IPC socket listens, not when its file exists: a Unix socket's file
exists from bind(2) and refuses connections until listen(2). A slow NVLSM (bind, 1 s, listen)
made fabric manager start in the gap and fail with `Connection refused`; the same race failed
`make test` on a fresh clone. The fake NVLSM's `listen_delay_s` fault is that gap."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runkit import Run, codes, events, sim


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


def test_the_kernels_table_says_listening_by_flags_state_and_path(tmp_path: Path) -> None:
    """/proc/net/unix lines as net/unix/af_unix.c prints them: __SO_ACCEPTCON (0x00010000) in
    Flags and St 01 mark a listening socket; the path is matched, a name bound through a link
    by the file it leads to."""
    from nvfabric.effects.sockets import listens

    sock = tmp_path / "run" / "fm_sm_ipc.socket"
    sock.parent.mkdir()
    sock.write_text("")  # stands for the socket file: only its identity is compared
    alias = tmp_path / "short"
    alias.symlink_to(sock.parent)
    header = "Num       RefCount Protocol Flags    Type St Inode Path\n"

    def table(*rows: str) -> str:
        path = tmp_path / "unix"
        path.write_text(header + "".join(r + "\n" for r in rows))
        return str(path)

    listening = f"0000000000000000: 00000002 00000000 00010000 0001 01 4242 {sock}"
    bound = f"0000000000000000: 00000002 00000000 00000000 0001 01 4242 {sock}"
    connected = f"0000000000000000: 00000003 00000000 00000000 0001 03 4243 {sock}"
    other = "0000000000000000: 00000002 00000000 00010000 0001 01 4244 /run/other.sock"
    through = f"0000000000000000: 00000002 00000000 00010000 0001 01 4245 {alias}/{sock.name}"
    assert listens(str(sock), table(other, listening)) is True
    assert listens(str(sock), table(bound, connected, other)) is False
    assert listens(str(sock), table(through)) is True
    assert listens(str(sock), table()) is False
    assert listens(str(sock), str(tmp_path / "no-procfs")) is None

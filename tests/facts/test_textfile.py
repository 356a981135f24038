"""The readers of input files named on the command line, in process: the cap, a directory,
and a stop signal that comes while a read blocks on a pipe (it ends the read with Stopped,
naming the input, where a handler that only records let the read restart and wait on)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvfabric.effects import stop
from nvfabric.facts import textfile
from nvfabric.model.errors import NvfabricError
from tests.runkit import blocked_reading, until


def test_read_capped_refuses_past_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    assert textfile.read_capped(str(path), 11, "a test") == b"x" * 11
    with pytest.raises(NvfabricError, match="larger than 10 bytes, the limit for a test"):
        textfile.read_capped(str(path), 10, "a test")
    with pytest.raises(NvfabricError, match="is a directory"):
        textfile.read_capped(str(tmp_path), 10, "a test")


@pytest.fixture
def blocked_pipe(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A FIFO with a writer that never writes: (its path, the writer's descriptor)."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer open at once
    writer = os.open(path, os.O_WRONLY)
    os.close(reader)
    try:
        yield str(path), writer
    finally:
        os.close(writer)
        stop.unwatch()


def _signal_once_blocked(sig: int) -> Callable[[], bool]:
    """Send ``sig`` to this process once its main thread sleeps in the pipe's read
    (:func:`tests.runkit.blocked_reading`), from a helper thread; the function returned joins
    it and says whether that event came (past the bound the signal is sent all the same, so
    that a kernel naming the wait otherwise fails the test instead of hanging it)."""
    main = threading.main_thread().native_id
    seen: list[bool] = []

    def send() -> None:
        stop.block_in_thread()  # delivered to the main thread, which reads
        try:
            until(lambda: blocked_reading(os.getpid(), main), "the read blocks on the pipe")
            seen.append(True)
        except AssertionError:
            seen.append(False)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()

    def joined() -> bool:
        thread.join()
        return seen == [True]

    return joined


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("read", [
    lambda p: textfile.read_capped(p, 1 << 20, "a test"),
    lambda p: textfile.read_text_file(p, "--peers"),
    lambda p: textfile.open_input(p).read(),
], ids=["read_capped", "read_text_file", "open_input"])
def test_a_stop_signal_ends_a_read_blocked_on_a_pipe(
        blocked_pipe: tuple[str, int], sig: int, read: Callable[[str], object]) -> None:
    path, _ = blocked_pipe
    sent = _signal_once_blocked(sig)
    with pytest.raises(stop.Stopped) as got:
        read(path)
    assert sent(), "the read was not seen blocked on the pipe"
    assert (got.value.signum, got.value.during, got.value.exit_code) == (sig, path, 128 + sig)
    f = got.value.finding()
    assert (f.code, f.fields["signal"]) == ("interrupted", signal.Signals(sig).name)
    assert f"while reading {path}" in f.message

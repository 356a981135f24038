"""The HTTP endpoint in-process: HOST:PORT parsing as a table, the answers of each path from a
snapshot, a reader that fails, and a real server on 127.0.0.1 (GET and HEAD)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from nvfabric.model.health import GpuFabric
from nvfabric.observe import hook
from nvfabric.observe.metrics import Reading
from nvfabric.observe.serve import Watch, _answer, parse_listen, serve
from nvfabric.observe.unitstate import UnitSnapshot
from tests.httpkit import get
from tests.runkit import BOUND_S, until


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:1", ("0.0.0.0", 1)),
    ("localhost:65535", ("localhost", 65535)),
    ("[::1]:9464", ("::1", 9464)),
    ("[::]:9464", ("::", 9464)),
])
def test_listen_addresses_accepted(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("", "give HOST:PORT"), (":9464", "give HOST:PORT"), ("9464", "give HOST:PORT"),
    ("127.0.0.1:", "1 to 65535"), ("127.0.0.1:65536", "1 to 65535"),
    ("127.0.0.1:-1", "1 to 65535"), ("127.0.0.1:9464 ", "1 to 65535"),
    ("256.1.1.1:9464", "not an IPv4"), ("node-a.example:9464", "not an IPv4"),
    ("[fe80::zz]:9464", "not an IPv6"), ("[127.0.0.1]:9464", "not an IPv6"),
    ("127.0.0.1:\u0669\u0664\u0666\u0664", "1 to 65535"),  # Arabic-Indic digits
])
def test_listen_addresses_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_listen(text)


def _reading() -> tuple[Reading, dict[str, Any]]:
    gpu = GpuFabric(0, "GPU-a", "00000000:18:00.0", "completed", "success")
    return Reading("healthy", "nvswitch", "550.90.07", (gpu,)), {"verdict": "healthy"}


def test_answers_follow_the_unit_snapshot() -> None:
    watch = Watch(lambda imex: _reading(), 30)
    assert _answer(watch, "/healthz")[0] == 200
    assert _answer(watch, "/readyz") == (503, "text/plain; charset=utf-8", b"not ready: idle\n")
    assert _answer(watch, "/status")[0] == 503  # no reading yet
    watch.read_once()
    assert json.loads(_answer(watch, "/status")[2]) == {"verdict": "healthy"}
    watch.unit = lambda: UnitSnapshot(ready=True, phase="ready")
    assert _answer(watch, "/readyz")[:2] == (200, "text/plain; charset=utf-8")
    status, ctype, body = _answer(watch, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert b"nvfabric_fabric_ready 1.0" in body and b'UUID="GPU-a"' in body
    watch.unit = lambda: UnitSnapshot(phase="done", alive=False)
    assert _answer(watch, "/healthz")[0] == 503
    assert _answer(watch, "/readyz")[2] == b"not ready: done\n"
    assert _answer(watch, "/metrics/x")[0] == 404


def test_a_second_imex_owner_in_the_reading_makes_readyz_not_ready() -> None:
    """Another IMEX owner beside the run (imex_owner_conflict, an error: status unhealthy) is
    not ready, as `nvfabric ready` says, whatever the unit's phase."""
    conflict = {"code": "imex_owner_conflict", "severity": "error", "message": "two owners"}
    reading = _reading()[0]
    watch = Watch(lambda imex: (reading, {"verdict": "unhealthy", "findings": [conflict]}), 30)
    watch.unit = lambda: UnitSnapshot(ready=True, phase="ready")
    watch.read_once()
    assert _answer(watch, "/readyz") == (503, "text/plain; charset=utf-8",
                                         b"not ready: imex_owner_conflict: two owners\n")


def test_a_failing_reader_keeps_the_last_reading() -> None:
    calls = []

    def read(imex: tuple[str, str] | None) -> tuple[Reading, dict[str, Any]]:
        calls.append(imex)
        if len(calls) > 1:
            raise RuntimeError("boom")
        return _reading()

    watch = Watch(read, 30)
    watch.read_once()
    watch.read_once()
    assert watch.read_error == "RuntimeError: boom"
    assert json.loads(_answer(watch, "/status")[2]) == {"verdict": "healthy"}


def test_attach_feeds_the_active_watch_and_reads_with_the_imex_daemon() -> None:
    seen: list[tuple[str, str] | None] = []

    def read(imex: tuple[str, str] | None) -> tuple[Reading, dict[str, Any]]:
        seen.append(imex)
        return _reading()

    watch = Watch(read, 30)
    hook.activate(watch)
    try:
        hook.attach(lambda: UnitSnapshot(ready=True, phase="ready"), imex=("/ctl", "/cfg"))
        assert seen == [("/ctl", "/cfg")] and watch.unit().ready
    finally:
        hook.activate(None)
    hook.attach(lambda: UnitSnapshot())  # nothing active: a no-op


def test_real_server_answers_get_and_head_on_loopback() -> None:
    watch = Watch(lambda imex: _reading(), 30)
    watch.read_once()
    server = serve(watch, "127.0.0.1", 0)
    port = server.server_address[1]
    try:
        status, ctype, body = get(port, "/metrics")
        assert status == 200 and "nvfabric_gpu_fabric_state" in body
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("HEAD", "/readyz")
        resp = conn.getresponse()
        assert resp.status == 503 and resp.read() == b""
        assert int(resp.getheader("Content-Length") or 0) == len(b"not ready: idle\n")
        conn.close()
        assert get(port, "/status?x=1")[0] == 200  # a query string is ignored
    finally:
        server.shutdown()
        server.server_close()


def test_the_reading_is_renewed_when_the_unit_becomes_ready_not_only_on_the_interval() -> None:
    # field report: a scrape right after ready showed nvfabric_fabric_ready 1 beside the
    # verdict of a reading taken before the daemons started (the interval is 30 s)
    import threading

    reads: list[str] = []
    phase = ["starting"]
    renewed = threading.Event()

    def read(imex: Any) -> tuple[Reading, dict[str, Any]]:
        reads.append(phase[0])
        if phase[0] == "ready":
            renewed.set()
        return Reading("pending", None, None, ()), {"phase": phase[0]}

    watch = Watch(read, interval_s=3600)
    watch.unit = lambda: UnitSnapshot(ready=phase[0] == "ready", phase=phase[0])
    watch.start_reader()
    try:
        until(lambda: bool(reads), "the watch's first reading")
        assert reads == ["starting"]
        phase[0] = "ready"
        assert renewed.wait(BOUND_S), "no new reading after the unit became ready"
        assert watch.snapshot().status == {"phase": "ready"}
    finally:
        watch.stop()

"""HTTP helpers for the tests of ``run --listen``: a free port on 127.0.0.1, a GET with a short
timeout, and a wait until a URL answers a given status."""

from __future__ import annotations

import http.client
import socket
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(port: int, path: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """(status, content type, body) of ``GET http://127.0.0.1:PORT/PATH``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


def wait_status(port: int, path: str, status: int, bound: float = 30.0) -> str:
    """The body once ``path`` answers ``status``; AssertionError after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    last: object = None
    while time.monotonic() < deadline:
        try:
            code, _, body = get(port, path)
            if code == status:
                return body
            last = (code, body)
        except OSError as err:
            last = err
        time.sleep(0.1)
    raise AssertionError(f"{path} never answered {status}; last: {last!r}")

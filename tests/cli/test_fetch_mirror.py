"""A local mirror on 127.0.0.1 (stdlib http.server in a thread, ephemeral port) and builders
for what it serves: redist archives and manifests of the real schema, Debian ``Packages``
indexes, RPM repodata. Also the transport's fault tests: 404, 500 then success, a slow
server, a truncated body, a bad checksum.

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nvfabric.artifacts.transport import NotPublished, RetryPolicy, Transport
from nvfabric.model.errors import NvfabricError

FAST = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0, timeout_s=2.0)


@dataclass
class Route:
    """What the mirror answers for one path: ``statuses`` are answered first, one per
    request, then ``status`` with ``body``; ``delay_s`` before any answer; ``truncate_to``
    sends only that many body bytes while announcing the full length."""

    body: bytes = b""
    status: int = 200
    statuses: list[int] = field(default_factory=list)
    delay_s: float = 0.0
    truncate_to: int | None = None
    location: str | None = None  # a redirect: answered with ``status`` (3xx) and this Location
    hits: int = 0


class Mirror:
    """An HTTP mirror on 127.0.0.1 with programmable faults."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.stopping = threading.Event()
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                route = mirror.routes.get(self.path)
                if route is None:
                    self._answer(404, b"")
                    return
                route.hits += 1
                if route.delay_s:
                    mirror.stopping.wait(route.delay_s)
                status = route.statuses.pop(0) if route.statuses else route.status
                if route.location is not None:
                    self.send_response(status)
                    self.send_header("Location", route.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if status != 200:
                    self._answer(status, b"")
                    return
                if route.truncate_to is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(route.body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(route.body[: route.truncate_to])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self._answer(200, route.body)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def add(self, path: str, body: bytes = b"", **kw: Any) -> Route:
        route = Route(body=body, **kw)
        self.routes["/" + path.lstrip("/")] = route
        return route

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    """A running local mirror, stopped after the test."""
    m = Mirror()
    try:
        yield m
    finally:
        m.close()


# -- builders ------------------------------------------------------------------------------

def make_archive(top: str, files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    """A ``.tar.xz`` like NVIDIA's redist archives: everything under ``<top>/``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        info = tarfile.TarInfo(top)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mode = 0o755 if name.startswith(("bin/", "sbin/")) else 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class RedistRelease:
    """A driver release on the mirror: manifest + archives, as NVIDIA lays them out."""

    driver: str
    manifest: dict[str, Any]
    archives: dict[str, bytes]  # relative_path -> bytes


def component_archive(key: str, platform: str, version: str) -> tuple[str, bytes]:
    """(relative_path, bytes) of a small archive for component ``key``."""
    top = f"{key}-{platform}-{version}-archive"
    files = {"LICENSE.txt": f"{key} licence\n".encode(),
             f"bin/{key}": f"#!/bin/sh\necho {key} {version}\n".encode()}
    links = {}
    if key.startswith("lib"):
        files = {"LICENSE.txt": b"licence\n", f"lib/{key}.so.{version}": b"\x7fELF fake"}
        links = {f"lib/{key}.so": f"{key}.so.{version}"}
    return f"{key}/{platform}/{top}.tar.xz", make_archive(top, files, links)


def redist_release(driver: str, nvlsm: str = "2025.06.6",
                   sbsa_libnvsdm: bool = False) -> RedistRelease:
    """A manifest of the real schema (tests/data/corpus/redist) with real archives."""
    manifest: dict[str, Any] = {
        "release_date": "2025-10-09", "release_label": driver,
        "release_product": "nvidia-driver",
    }
    archives: dict[str, bytes] = {}
    for key, name in (("fabricmanager", "NVIDIA Fabric Manager"),
                      ("libnvidia_nscq", "NVIDIA NSCQ API"), ("libnvsdm", "LIBNVSDM"),
                      ("imex", "NVIDIA IMEX"), ("nvlsm", "NVLSM SM component")):
        version = nvlsm if key == "nvlsm" else driver
        entry: dict[str, Any] = {"name": name, "license": "NVIDIA Driver",
                                 "license_path": f"{key}/LICENSE.txt", "version": version}
        for platform in ("linux-x86_64", "linux-sbsa"):
            if key == "libnvsdm" and platform == "linux-sbsa" and not sbsa_libnvsdm:
                continue
            rel, data = component_archive(key, platform, version)
            archives[rel] = data
            entry[platform] = {"relative_path": rel, "sha256": sha256(data),
                               "md5": hashlib.md5(data).hexdigest(),  # noqa: S324 - schema
                               "size": str(len(data))}
        manifest[key] = entry
    return RedistRelease(driver, manifest, archives)


def serve_release(m: Mirror, rel: RedistRelease, prefix: str = "") -> None:
    base = prefix.strip("/") + "/" if prefix.strip("/") else ""
    m.add(f"{base}redistrib_{rel.driver}.json", json.dumps(rel.manifest, indent=4).encode())
    for path, data in rel.archives.items():
        m.add(base + path, data)


def write_release(directory: Path, rel: RedistRelease) -> None:
    """The same release as a mirror directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"redistrib_{rel.driver}.json").write_text(json.dumps(rel.manifest))
    for path, data in rel.archives.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(data)


def deb_stanza(package: str, version: str, data: bytes, arch: str = "amd64",
               provides: str = "", description: str = "") -> str:
    """One ``Packages`` stanza for a .deb whose bytes are ``data``."""
    lines = [f"Package: {package}", f"Architecture: {arch}", f"Version: {version}"]
    if provides:
        lines.append(f"Provides: {provides}")
    if description:
        lines.append(f"Description: {description}")
    file_version = version.split(":", 1)[-1]  # pool file names carry no epoch
    lines += [f"Filename: ./{package}_{file_version}_{arch}.deb", f"Size: {len(data)}",
              f"SHA256: {sha256(data)}"]
    return "\n".join(lines) + "\n"


def primary_xml(packages: list[dict[str, Any]]) -> bytes:
    """createrepo_c-style primary.xml for ``packages`` (name, arch, ver, rel, data)."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<metadata xmlns="http://linux.duke.edu/metadata/common" '
           'xmlns:rpm="http://linux.duke.edu/metadata/rpm" '
           f'packages="{len(packages)}">']
    for p in packages:
        out.append(
            f'<package type="rpm"><name>{p["name"]}</name><arch>{p["arch"]}</arch>'
            f'<version epoch="0" ver="{p["ver"]}" rel="{p["rel"]}"/>'
            f'<checksum type="sha256" pkgid="YES">{sha256(p["data"])}</checksum>'
            f'<summary>x</summary><size package="{len(p["data"])}" installed="1" archive="1"/>'
            f'<location href="{p["href"]}"/></package>'
        )
    out.append("</metadata>")
    return "\n".join(out).encode()


def repomd(primary_href: str, primary_gz: bytes, checksum: str | None = None) -> bytes:
    """repomd.xml naming the primary metadata and its checksum."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<repomd xmlns="http://linux.duke.edu/metadata/repo" '
        'xmlns:rpm="http://linux.duke.edu/metadata/rpm"><revision>1</revision>'
        '<data type="primary">'
        f'<checksum type="sha256">{checksum or sha256(primary_gz)}</checksum>'
        f'<location href="{primary_href}"/><size>{len(primary_gz)}</size></data></repomd>\n'
    ).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


# -- transport fault tests -----------------------------------------------------------------

def no_sleep(_s: float) -> None:
    return None


def test_download_verifies_and_renames(mirror: Mirror, tmp_path: Path) -> None:
    mirror.add("a.bin", b"payload")
    dest = tmp_path / "cache" / "a.bin"
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t:
        assert t.download(f"{mirror.url}/a.bin", str(dest), sha256(b"payload")) is True
        assert dest.read_bytes() == b"payload"
        assert t.download(f"{mirror.url}/a.bin", str(dest), sha256(b"payload")) is False
    assert mirror.routes["/a.bin"].hits == 1, "a verified cache entry is not fetched again"
    assert os.listdir(dest.parent) == ["a.bin"]


def test_404_is_not_published(mirror: Mirror, tmp_path: Path) -> None:
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t:
        assert t.get(f"{mirror.url}/nothing.json") is None
        with pytest.raises(NotPublished):
            t.download(f"{mirror.url}/nothing.tar.xz", str(tmp_path / "x"), "0" * 64)
    assert os.listdir(tmp_path) == []


def test_500_then_success_is_retried_with_backoff(mirror: Mirror, tmp_path: Path) -> None:
    route = mirror.add("a.bin", b"payload", statuses=[500, 503])
    waits: list[float] = []
    policy = RetryPolicy(attempts=4, backoff_s=0.25, max_backoff_s=8.0, timeout_s=2.0)
    with Transport(policy, mirror=mirror.url, sleep=waits.append) as t:
        t.download(f"{mirror.url}/a.bin", str(tmp_path / "a.bin"), sha256(b"payload"))
    assert route.hits == 3
    assert waits == [0.25, 0.5], "exponential backoff between attempts"
    assert (tmp_path / "a.bin").read_bytes() == b"payload"


def test_500_forever_fails_after_the_retries(mirror: Mirror, tmp_path: Path) -> None:
    route = mirror.add("a.bin", b"payload", status=500)
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        t.download(f"{mirror.url}/a.bin", str(tmp_path / "a.bin"), sha256(b"payload"))
    assert err.value.finding.code == "download_failed"
    assert "HTTP 500" in err.value.finding.message
    assert route.hits == FAST.attempts
    assert os.listdir(tmp_path) == [], "nothing kept"


def test_slow_server_times_out(mirror: Mirror, tmp_path: Path) -> None:
    route = mirror.add("slow.bin", b"payload", delay_s=5.0)
    policy = RetryPolicy(attempts=2, backoff_s=0.0, timeout_s=0.2)
    with Transport(policy, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        t.download(f"{mirror.url}/slow.bin", str(tmp_path / "slow.bin"), sha256(b"payload"))
    assert err.value.finding.code == "download_failed"
    assert "timed out" in err.value.finding.message
    assert route.hits == 2
    assert os.listdir(tmp_path) == []


def test_truncated_body_is_retried_then_refused(mirror: Mirror, tmp_path: Path) -> None:
    body = os.urandom(200_000)
    route = mirror.add("cut.bin", body, truncate_to=50_000)
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        t.download(f"{mirror.url}/cut.bin", str(tmp_path / "cut.bin"), sha256(body), len(body))
    assert err.value.finding.code == "download_failed"
    assert route.hits == FAST.attempts
    assert os.listdir(tmp_path) == [], "no partial file left"


def test_truncated_once_then_whole(mirror: Mirror, tmp_path: Path) -> None:
    body = os.urandom(100_000)
    route = mirror.add("cut.bin", body, truncate_to=10)

    def heal(_s: float) -> None:
        route.truncate_to = None

    with Transport(FAST, mirror=mirror.url, sleep=heal) as t:
        t.download(f"{mirror.url}/cut.bin", str(tmp_path / "cut.bin"), sha256(body))
    assert (tmp_path / "cut.bin").read_bytes() == body
    assert route.hits == 2


def test_bad_checksum_keeps_nothing(mirror: Mirror, tmp_path: Path) -> None:
    mirror.add("a.bin", b"tampered")
    stale = tmp_path / "a.bin"
    stale.write_bytes(b"old and wrong")
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        t.download(f"{mirror.url}/a.bin", str(stale), sha256(b"payload"))
    assert err.value.finding.code == "checksum_mismatch"
    assert err.value.exit_code == 1
    assert os.listdir(tmp_path) == [], "neither the bad download nor a stale entry is kept"


def test_plain_http_only_under_an_explicit_mirror(mirror: Mirror, tmp_path: Path) -> None:
    mirror.add("a.bin", b"x")
    with Transport(FAST, sleep=no_sleep) as t, pytest.raises(NvfabricError) as err:
        t.get(f"{mirror.url}/a.bin")
    assert err.value.exit_code == 2
    with Transport(FAST, mirror=mirror.url + "/sub", sleep=no_sleep) as t, \
            pytest.raises(NvfabricError):
        t.get(f"{mirror.url}/a.bin")
    with Transport(FAST, sleep=no_sleep) as t, pytest.raises(NvfabricError):
        t.get(f"file://{tmp_path}/x")


def test_mirror_directory_is_read_as_files(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.bin").write_bytes(b"local")
    base = f"file://{tmp_path}/m"
    with Transport(FAST, mirror=base, sleep=no_sleep) as t:
        assert t.get(f"{base}/a.bin") == b"local"
        assert t.get(f"{base}/missing") is None
        t.download(f"{base}/a.bin", str(tmp_path / "out.bin"), sha256(b"local"))
    assert (tmp_path / "out.bin").read_bytes() == b"local"


# -- redirects (issue 10): only to http(s) under the mirror's scheme policy ---------------


def test_redirect_under_the_mirror_is_followed(mirror: Mirror, tmp_path: Path) -> None:
    mirror.add("new/a.bin", b"moved")
    mirror.add("a.bin", status=301, location="/new/a.bin")
    mirror.add("b.bin", status=302, location=f"{mirror.url}/new/a.bin")
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t:
        assert t.get(f"{mirror.url}/a.bin") == b"moved"
        assert t.get(f"{mirror.url}/b.bin") == b"moved"


@pytest.mark.parametrize("location", [
    "file:///etc/passwd", "ftp://127.0.0.1/a.bin", "gopher://127.0.0.1/", "data:,hello",
    "http://192.0.2.1/a.bin",  # plain http outside the mirror
])
def test_redirect_out_of_the_scheme_policy_is_download_failed(
        mirror: Mirror, tmp_path: Path, location: str) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not read")
    mirror.add("a.bin", status=302, location=location.replace("/etc/passwd", str(secret)))
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        t.download(f"{mirror.url}/a.bin", str(tmp_path / "out.bin"), sha256(b"do not read"))
    assert err.value.exit_code == 1
    assert err.value.finding.code == "download_failed"
    message = err.value.finding.message
    assert "redirected to" in message or "invalid URL" in message  # httpx refuses data:
    assert "(after 1 attempt);" in message
    assert not (tmp_path / "out.bin").exists()


def test_a_redirect_loop_ends(mirror: Mirror) -> None:
    mirror.add("a.bin", status=302, location="/b.bin")
    mirror.add("b.bin", status=302, location="/a.bin")
    with Transport(FAST, mirror=mirror.url, sleep=no_sleep) as t, \
            pytest.raises(NvfabricError) as err:
        t.get(f"{mirror.url}/a.bin")
    assert err.value.exit_code == 1 and "redirects" in err.value.finding.message

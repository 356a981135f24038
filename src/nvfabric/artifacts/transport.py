"""The network door of nvfabric: GET small documents and download artifacts, verified.

HTTP goes through httpx (typed, streaming responses, per-phase timeouts). A download is
streamed to a temporary file next to its destination while its SHA-256 is computed, checked
against the published value, and only then renamed into place: a failed or mismatching
download leaves nothing behind. Timeouts, connection errors, truncated bodies and 408/429/5xx
answers are retried with exponential backoff; 404/410 mean "not published". ``https`` is
always allowed; plain ``http`` only under an explicit mirror URL; ``file`` only under an
explicit mirror directory. Redirects are followed by hand (at most :data:`MAX_REDIRECTS`),
each target checked before it is requested: https, or http under the mirror; a redirect to
``file://`` or any other scheme, or to plain http elsewhere, is ``download_failed`` (exit 1):
the source misbehaved, the command line did not. A progress bar is drawn on stderr only when
it is a terminal.
"""

from __future__ import annotations

import hashlib
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from nvfabric.artifacts.model import checksum_mismatch, download_failed
from nvfabric.effects.atomic import atomic_writer
from nvfabric.facts.fs import sha256_file
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.strict import int_or_none
from nvfabric.model.words import seconds

#: HTTP statuses worth retrying (RFC 9110 15.5.9, 15.6; RFC 6585 4 for 429).
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: HTTP statuses meaning the file is not published there.
MISSING_STATUS = frozenset({404, 410})
#: HTTP redirect statuses (RFC 9110 15.4) and how many are followed for one request.
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
CHUNK = 1 << 16


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; before try n+1 wait ``backoff_s * 2**n`` seconds, at most
    ``max_backoff_s``; ``timeout_s`` bounds connect and each read (seconds)."""

    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 30.0

    def delay(self, failed_attempt: int) -> float:
        """Seconds to wait after the ``failed_attempt``-th failure (0-based)."""
        return float(min(self.max_backoff_s, self.backoff_s * (2**failed_attempt)))


class _Transient(Exception):
    """One attempt failed in a way that may pass (timeout, 5xx, cut connection)."""


class NotPublished(NvfabricError):
    """The source answered that the file does not exist (404/410, no such file): an
    ``artifact_not_available`` finding naming ``url`` (the resolvers catch it and try the
    next candidate)."""

    def __init__(self, url: str) -> None:
        super().__init__(Finding(
            "artifact_not_available", "error", f"{url}: the source has no such file",
            "check the version and the mirror (--mirror), or fetch from another source",
            {"url": url}))
        self.url = url


class Transport:
    """Fetches URLs for one command run; keeps one HTTP connection pool (hence a class).

    ``mirror`` is the explicit ``--mirror`` base (URL or ``file://`` URL of a directory) under
    which plain http or file access is allowed. ``sleep`` is injectable for tests.
    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        mirror: str | None = None,
        progress: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self.mirror = mirror.rstrip("/") + "/" if mirror else None
        self.progress = progress
        self._sleep = sleep
        self._client: Any = None

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- public --------------------------------------------------------------------------

    def get(self, url: str, limit: int = 512 << 20) -> bytes | None:
        """The body of ``url`` (at most ``limit`` bytes), or None when it is not published
        (404/410, missing file). Raises ``download_failed`` after the retries."""
        self._check(url)
        chunks: list[bytes] = []

        def reset() -> Callable[[bytes], None]:
            chunks.clear()
            total = [0]

            def sink(chunk: bytes) -> None:
                total[0] += len(chunk)
                if total[0] > limit:
                    raise download_failed(url, f"larger than {limit} bytes", 1)
                chunks.append(chunk)

            return sink

        try:
            self._retrying(url, reset, None)
        except NotPublished:
            return None
        return b"".join(chunks)

    def download(self, url: str, dest: str, sha256: str, size: int | None = None) -> bool:
        """Make ``dest`` hold the file at ``url`` whose SHA-256 is ``sha256``.

        Returns False when ``dest`` already held exactly that file (nothing fetched), True
        after a verified download. Raises :class:`NotPublished` (404/410, no such file),
        ``download_failed`` (retries exhausted) or ``checksum_mismatch``; in every failure
        no partial or unverified file is left at ``dest`` or next to it.
        """
        self._check(url)
        if os.path.isfile(dest):
            if sha256_file(dest) == sha256:
                return False
            os.unlink(dest)  # a stale or damaged cache entry: never kept
        hasher = [hashlib.sha256()]
        with atomic_writer(dest, mode=0o644, suffix=".part") as fh:

            def reset() -> Callable[[bytes], None]:
                fh.seek(0)
                fh.truncate()
                hasher[0] = hashlib.sha256()

                def sink(chunk: bytes) -> None:
                    fh.write(chunk)
                    hasher[0].update(chunk)

                return sink

            self._retrying(url, reset, size)
            actual = hasher[0].hexdigest()
            if actual != sha256:
                raise checksum_mismatch(url, sha256, actual)
        return True

    # -- internals -----------------------------------------------------------------------

    def _allowed(self, url: str, schemes: tuple[str, ...] = ("http", "file")) -> bool:
        """https anywhere; a scheme of ``schemes`` only under the explicit mirror."""
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme == "https":
            return True
        return scheme in schemes and bool(self.mirror) and url.startswith(str(self.mirror))

    def _redirect(self, url: str, resp: Any) -> str:
        """Where a redirect answer of ``url`` leads (relative locations resolved), checked
        before it is requested: https, or http under the mirror; never ``file://`` or another
        scheme (``download_failed``)."""
        location = resp.headers.get("location")
        if not location:
            raise download_failed(url, f"HTTP {resp.status_code} without a Location", 1)
        target = urllib.parse.urljoin(url, str(location))
        if not self._allowed(target, ("http",)):
            shown = target if len(target) <= 200 else target[:200] + "..."
            raise download_failed(url, f"redirected to {shown!r}: a redirect is followed only "
                                  "to https, or to plain http under --mirror", 1)
        return target

    def _check(self, url: str) -> None:
        if self._allowed(url):
            return
        raise usage_error(
            f"refusing {url!r}: only https, or http/file under an explicit --mirror",
            "pass --mirror URL|DIR for a plain-http or local mirror",
        )

    def _retrying(
        self, url: str, reset: Callable[[], Callable[[bytes], None]], size: int | None
    ) -> None:
        last = ""
        for attempt in range(self.policy.attempts):
            sink = reset()
            try:
                self._attempt(url, sink, size)
                return
            except _Transient as err:
                last = str(err)
                if attempt + 1 < self.policy.attempts:
                    self._sleep(self.policy.delay(attempt))
        raise download_failed(url, last, self.policy.attempts)

    def _attempt(self, url: str, sink: Callable[[bytes], None], size: int | None) -> None:
        if url.startswith("file:"):
            self._attempt_file(url, sink)
            return
        import httpx

        if self._client is None:
            self._client = httpx.Client(
                timeout=httpx.Timeout(self.policy.timeout_s), follow_redirects=False,
                headers={"User-Agent": "nvfabric"},
            )
        try:
            self._get(url, sink, size)
        except httpx.TimeoutException as err:
            raise _Transient(
                f"timed out ({type(err).__name__}, {seconds(self.policy.timeout_s)} s)"
            ) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError) as err:
            raise _Transient(f"connection failed: {err}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as err:  # a bad URL or header from it
            raise download_failed(url, f"the source answered with an invalid URL or header "
                                  f"({type(err).__name__}: {err})", 1) from None

    def _get(self, url: str, sink: Callable[[bytes], None], size: int | None) -> None:
        """One GET of ``url``, following up to :data:`MAX_REDIRECTS` checked redirects."""
        target = url
        for _ in range(MAX_REDIRECTS + 1):
            with self._client.stream("GET", target) as resp:
                if resp.status_code in REDIRECT_STATUS:
                    target = self._redirect(target, resp)
                    continue
                if resp.status_code in MISSING_STATUS:
                    raise NotPublished(url)
                if resp.status_code in RETRY_STATUS:
                    raise _Transient(f"HTTP {resp.status_code}")
                if resp.status_code != 200:
                    raise download_failed(url, f"HTTP {resp.status_code}", 1)
                length = resp.headers.get("content-length")
                announced = int_or_none(length)  # Content-Length: ASCII digits or nothing
                # A body shorter than announced (or, with no length header, shorter than the
                # published size) was cut in transit: retry. A complete body of another size
                # is another file: the checksum check reports it.
                expected = announced if announced is not None else size
                got = 0
                with _ProgressBar(self.progress, url, expected) as advance:
                    for chunk in resp.iter_bytes(CHUNK):
                        sink(chunk)
                        got += len(chunk)
                        advance(len(chunk))
                if expected is not None and got < expected:
                    raise _Transient(f"truncated body: {got} of {expected} bytes")
                return
        raise download_failed(url, f"more than {MAX_REDIRECTS} redirects", 1)

    @staticmethod
    def _attempt_file(url: str, sink: Callable[[bytes], None]) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        try:
            with open(path, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    sink(chunk)
        except FileNotFoundError:
            raise NotPublished(url) from None
        except OSError as err:
            raise _Transient(f"cannot read {path}: {err.strerror}") from None


def mirror_base(mirror: str) -> str:
    """``--mirror`` as a base URL: an http(s) URL as given, a directory as a ``file://`` URL.
    Raises usage_error (exit 2) for anything else."""
    scheme = urllib.parse.urlsplit(mirror).scheme
    if scheme in ("http", "https"):
        if not urllib.parse.urlsplit(mirror).netloc:
            raise usage_error(f"--mirror {mirror!r} has no host",
                              "give a URL like https://mirror.example/nvidia, or a directory")
        return mirror.rstrip("/")
    if scheme == "file":
        mirror = urllib.parse.unquote(urllib.parse.urlsplit(mirror).path)
    elif scheme:
        raise usage_error(f"--mirror {mirror!r}: only http(s) URLs or directories",
                          "give a URL like https://mirror.example/nvidia, or a directory")
    if not os.path.isdir(mirror):
        raise usage_error(f"--mirror {mirror!r} is neither an http(s) URL nor a directory",
                          "give an existing directory, or a URL like https://mirror.example/nvidia")
    return "file://" + urllib.parse.quote(os.path.abspath(mirror))


class _ProgressBar:
    """A rich progress bar on stderr when ``enabled`` (stderr is a terminal), else nothing."""

    def __init__(self, enabled: bool, url: str, total: int | None) -> None:
        self.enabled = enabled
        self.url = url
        self.total = total
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[[int], None]:
        if not self.enabled:
            return lambda _n: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        # stderr is a terminal here (``enabled``): rich's own console on it
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), console=Console(stderr=True, highlight=False, emoji=False),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(self.url.rsplit("/", 1)[-1], total=self.total)
        progress, task = self._progress, self._task
        return lambda n: progress.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def stderr_is_tty(stream: IO[str] | None = None) -> bool:
    """True when progress output would reach a person (stderr is a terminal)."""
    import sys

    s = stream or sys.stderr
    return bool(getattr(s, "isatty", lambda: False)())

"""``python -m nvfabric ARGS`` as a real process, without paying Python's start-up each time.

A test that runs the CLI needs a process (its own pid, exit code, file descriptors, signals,
environment, working directory), but most of the ~90 ms CPU such a process costs here is the
interpreter starting and importing click, rich, httpx, PyYAML, python-debian and nvfabric, the
same every time. This module keeps one server process per pytest process (each xdist worker has
its own) that imported all of that once; for every command it forks a child, which takes the
test's pipes as its stdin/stdout/stderr, the test's environment, working directory and umask,
closes every other descriptor, rebuilds ``sys.std*`` the way Python's start-up does and runs
``nvfabric`` with :func:`runpy` exactly as ``-m`` does. The child ends through the
interpreter's normal exit (SystemExit, atexit, thread joins, flushing), so its exit status is the
one the real command returns.

What a forked child cannot reproduce, it does not fake: when the requested environment differs
from the server's in a variable Python reads at start-up (``PYTHON*``, ``LANG``, ``LC_*``), the
command is started with exec as before. ``NVFABRIC_TESTS_EXEC=1`` in the environment of pytest
makes every command exec'd (the whole suite must pass both ways).

Run as a script, this file is the server (standard library only; nothing of ``tests``).
"""

from __future__ import annotations

import array
import json
import os
import socket
import struct
import sys
from typing import Any

_HEADER = struct.Struct("!Q")
_MAX_FDS = 3

#: Environment variables Python's start-up reads (``PYTHON*``) or that pick its locale; a
#: command whose environment differs from the server's in one of these is exec'd instead.
STARTUP_PREFIXES = ("PYTHON", "LC_", "LANG")

#: Modules the server imports before forking: the whole of nvfabric and the libraries its
#: commands import lazily (the cost every ``python -m nvfabric`` would pay again).
_PRELOAD = ("click", "rich.console", "rich.table", "rich.markup", "rich.progress", "rich.text",
            "yaml", "httpx", "psutil", "hostlist", "debian.deb822", "debian.debfile",
            "debian.debian_support", "concurrent.futures", "ctypes", "ipaddress", "platform",
            "shlex", "xml.sax.saxutils", "json", "hashlib", "tarfile", "zipfile", "gzip",
            "lzma", "tempfile", "subprocess")


def _send(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    msg = _HEADER.pack(len(data)) + data
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
    sent = sock.sendmsg([msg], anc)
    if sent < len(msg):
        sock.sendall(msg[sent:])


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError("fork server socket closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One message and the descriptors that came with it; None at end of stream."""
    head, anc, _flags, _addr = sock.recvmsg(_HEADER.size, socket.CMSG_SPACE(_MAX_FDS * 4))
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[:len(data) - len(data) % arr.itemsize])
            fds.extend(arr)
    if not head:
        return None
    if len(head) < _HEADER.size:
        head += _recv_exact(sock, _HEADER.size - len(head))
    (size,) = _HEADER.unpack(head)
    return json.loads(_recv_exact(sock, size)), fds


# --- the server -------------------------------------------------------------------------------

def _preload() -> None:
    import importlib
    import pkgutil

    import nvfabric
    import nvfabric.cli  # noqa: F401  (what nvfabric/__main__.py imports)

    names = [m.name for m in pkgutil.walk_packages(nvfabric.__path__, "nvfabric.")
             if not m.name.endswith("__main__")]
    for name in (*names, *_PRELOAD):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S112  (a module the child imports itself, as exec would)
            continue


def _serve(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """Fork one child per request and report each child's wait status; returns only in a
    child (its request and descriptors). The client closing the socket ends the server."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    while True:
        for key, _events in sel.select():
            if key.data is None:
                got = _recv(sock)
                if got is None:
                    raise SystemExit(0)
                req, fds = got
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    sock.close()
                    return req, fds
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                sel.register(pidfd, selectors.EVENT_READ, pid)
                _send(sock, {"id": req["id"], "pid": pid}, [pidfd])
            else:
                _pid, status = os.waitpid(key.data, 0)
                sel.unregister(key.fd)
                os.close(key.fd)
                _send(sock, {"exit": key.data, "status": status})


def _stream(fd: int, template: Any) -> Any:
    """A ``sys.std*`` for descriptor ``fd`` configured as Python's start-up configures it
    (Python/pylifecycle.c create_stdio): encoding and errors from the locale and PYTHONIOENCODING
    (the server's, which are the command's), unbuffered writes under -u/PYTHONUNBUFFERED, line
    buffering on a terminal and for stderr, no newline translation."""
    import io

    reading = fd == 0
    buffered = reading or not isinstance(template.buffer, io.FileIO)
    raw_mode = "rb" if reading else "wb"
    buf = open(fd, raw_mode, buffering=-1 if buffered else 0, closefd=False)
    stream = io.TextIOWrapper(buf, encoding=template.encoding, errors=template.errors,
                              newline="\n",
                              line_buffering=buffered and (os.isatty(fd) or fd == 2),
                              write_through=not buffered)
    stream.mode = "r" if reading else "w"  # type: ignore[misc]
    return stream


def _become(req: dict[str, Any], fds: list[int]) -> None:
    """Turn this forked child into ``python -m nvfabric ARGS`` started by the client."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    keep = {0, 1, 2}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.stdin = sys.__stdin__ = _stream(0, sys.__stdin__)
    sys.stdout = sys.__stdout__ = _stream(1, sys.__stdout__)
    sys.stderr = sys.__stderr__ = _stream(2, sys.__stderr__)
    sys.path.insert(0, os.getcwd())
    sys.argv = ["-m", *req["args"]]
    sys.orig_argv = [sys.executable, "-m", "nvfabric", *req["args"]]


def _server_main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    del sys.path[0]  # this file's folder; the child puts its working directory there, as -m does
    try:
        _preload()
    except BaseException as exc:  # noqa: BLE001  (told to the client, which fails the test)
        _send(sock, {"error": f"fork server could not import nvfabric: {exc!r}"})
        raise SystemExit(1) from None
    import gc

    # What the server imported stays as it is in every child: out of the collector's sight,
    # the child's exit does not walk (and copy, page by page) all of it again.
    gc.freeze()
    _send(sock, {"ready": os.getpid()})
    req, fds = _serve(sock)
    del sock
    _become(req, fds)
    import runpy
    import types

    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        runpy._run_module_as_main("nvfabric")  # type: ignore[attr-defined]  # what -m runs
        code = 0
    except SystemExit as exc:
        code = _system_exit_code(exc)
    _exit_as_python_does(code)


def _system_exit_code(exc: SystemExit) -> int:
    """The exit status Python gives an uncaught SystemExit (Python/pythonrun.c
    _Py_HandleSystemExit): None 0, an int itself, anything else printed on stderr and 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        sys.stderr.write(f"{exc.code}\n")
    except Exception:  # noqa: S110  (Python ignores a failing stderr there too)
        pass
    return 1


def _exit_as_python_does(code: int) -> None:
    """End the child the way Py_FinalizeEx starts (Python/pylifecycle.c): wait for the
    non-daemon threads, run the atexit functions, flush stdout and stderr (a failing flush
    makes the status 120; stdout's is reported); then exit without tearing down the interpreter.
    The teardown only frees memory, but it writes to nearly every object the server imported
    and so copies their pages into this child: ~25 ms of CPU a command."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    out, err = sys.stdout, sys.stderr
    try:
        if out is not None and not out.closed:
            out.flush()
    except Exception as exc:  # noqa: BLE001
        sys.unraisablehook(_unraisable(exc, out))
        code = 120
    try:
        if err is not None and not err.closed:
            err.flush()
    except Exception:  # noqa: BLE001  (not reported, as by Python)
        code = 120
    os._exit(code)


def _unraisable(exc: BaseException, obj: Any) -> Any:
    class Unraisable:
        exc_type = type(exc)
        exc_value = exc
        exc_traceback = exc.__traceback__
        err_msg = None
        object = obj

    return Unraisable


# --- the client (in the pytest process) -------------------------------------------------------

def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


def _exec_always() -> bool:
    return os.environ.get("NVFABRIC_TESTS_EXEC", "") not in ("", "0")


class _Server:
    """One fork server, started on first use, for this pytest process."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess
        import threading

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        self.startup = _startup_env(env)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=env)
        theirs.close()
        self.lock = threading.Lock()
        self.next_id = 0
        self.started: dict[int, tuple[int, int]] = {}  # request id -> (pid, pidfd)
        self.exits: dict[int, int] = {}  # pid -> wait status
        got = _recv(self.sock)
        if got is None or "ready" not in got[0]:
            self.proc.wait(30)
            raise RuntimeError(got[0].get("error") if got else "fork server exited at start")

    def _pump(self, timeout: float | None) -> bool:
        """Read one message (False when none came in ``timeout``); the lock is held."""
        import select

        if timeout is not None and not select.select([self.sock], [], [], timeout)[0]:
            return False
        got = _recv(self.sock)
        if got is None:
            raise RuntimeError("fork server exited")
        msg, fds = got
        if "pid" in msg:
            self.started[msg["id"]] = (msg["pid"], fds[0])
        else:
            self.exits[msg["exit"]] = msg["status"]
        return True

    def spawn(self, args: list[str], env: dict[str, str], cwd: str,
              fds: list[int]) -> tuple[int, int]:
        """Fork ``python -m nvfabric ARGS`` with ``fds`` as its 0, 1, 2: (pid, pidfd)."""
        with self.lock:
            self.next_id += 1
            ident = self.next_id
            umask = os.umask(0o22)
            os.umask(umask)
            _send(self.sock, {"id": ident, "args": args, "env": env, "cwd": cwd,
                              "umask": umask}, fds)
            while ident not in self.started:
                self._pump(None)
            return self.started.pop(ident)

    def status(self, pid: int, timeout: float | None) -> int | None:
        """The wait status of ``pid`` once it ended; None if it still runs after ``timeout``
        (0: do not wait)."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while pid not in self.exits:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._pump(left) and deadline is not None \
                        and time.monotonic() >= deadline:
                    return None
            return self.exits[pid]

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(15)
        except Exception:
            self.proc.kill()
            self.proc.wait()


_server: _Server | None = None


def _server_for(env: dict[str, str]) -> _Server | None:
    """The fork server that can run a command with ``env``; None: exec it."""
    global _server
    if _exec_always():
        return None
    if _server is None or _server.proc.poll() is not None:
        _server = _Server(env)
    if _startup_env(env) != _server.startup:
        return None
    return _server


def shutdown() -> None:
    """End this process's fork server (pytest's session end)."""
    global _server
    if _server is not None:
        _server.close()
        _server = None


class Child:
    """A forked ``python -m nvfabric``: the part of :class:`subprocess.Popen` the tests use
    (``pid``, ``stdout``, ``stderr``, ``returncode``, ``poll``, ``wait``, ``send_signal``,
    ``terminate``, ``kill``). Signals go through a pidfd, never to a reused pid."""

    def __init__(self, server: _Server, args: list[str], pid: int, pidfd: int,
                 stdout: Any, stderr: Any) -> None:
        self.args = args
        self.pid = pid
        self._pidfd = pidfd
        self._server = server
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = None
        self.returncode: int | None = None

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            status = self._server.status(self.pid, timeout)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._pidfd)
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        import signal

        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


def _full_env(env: dict[str, str] | None) -> dict[str, str]:
    return dict(os.environ) if env is None else dict(env)


def _text_reader(fd: int) -> Any:
    """A reading end as :class:`subprocess.Popen` wraps it with ``text=True``."""
    import io
    import locale

    return io.TextIOWrapper(open(fd, "rb"), encoding=locale.getpreferredencoding(False))


def popen(args: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> Any:
    """``subprocess.Popen([python, -m, nvfabric, *args], stdin=DEVNULL, stdout=PIPE,
    stderr=PIPE, text=True, env=env, cwd=cwd)``, forked from the server when it can be."""
    import subprocess

    full_env = _full_env(env)
    server = _server_for(full_env)
    if server is None:
        return subprocess.Popen([sys.executable, "-m", "nvfabric", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        pid, pidfd = server.spawn(list(args), full_env, os.path.abspath(cwd or os.getcwd()),
                                  [null, out_w, err_w])
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    return Child(server, list(args), pid, pidfd, _text_reader(out_r), _text_reader(err_r))


def _decode(data: bytes) -> str:
    """Bytes as ``subprocess`` returns them with ``text=True`` (universal newlines)."""
    import locale

    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _communicate(child_fds: tuple[int | None, int, int], data: bytes | None,
                 deadline: float | None) -> tuple[bytes, bytes, bool]:
    """Write ``data`` to the stdin pipe while reading stdout and stderr to their ends:
    (stdout, stderr, timed_out)."""
    import selectors
    import time

    in_w, out_r, err_r = child_fds
    sel = selectors.DefaultSelector()
    bufs: dict[int, list[bytes]] = {out_r: [], err_r: []}
    for fd in (out_r, err_r):
        sel.register(fd, selectors.EVENT_READ)
    view = memoryview(data or b"")
    if in_w is not None:
        if view:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
        else:
            os.close(in_w)
            in_w = None
    timed_out = False
    try:
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                timed_out = True
                break
            for key, _ev in sel.select(left):
                if key.fd == in_w:
                    try:
                        view = view[os.write(in_w, view[:1 << 16]):]
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        sel.unregister(in_w)
                        os.close(in_w)
                        in_w = None
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    bufs[key.fd].append(chunk)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        if in_w is not None:
            os.close(in_w)
    return b"".join(bufs[out_r]), b"".join(bufs[err_r]), timed_out


def run(args: list[str], *, input: str | None = None, timeout: float | None = None,
        env: dict[str, str] | None = None, cwd: str | None = None) -> Any:
    """``subprocess.run([python, -m, nvfabric, *args], input=input, capture_output=True,
    text=True, timeout=timeout, env=env, cwd=cwd)``, forked from the server when it can be.
    Without ``input`` the command's stdin is this process's, as with subprocess."""
    import subprocess
    import time

    full_env = _full_env(env)
    server = _server_for(full_env)
    if server is None:
        return subprocess.run([sys.executable, "-m", "nvfabric", *args], input=input,
                              capture_output=True, text=True, timeout=timeout, env=full_env,
                              cwd=cwd, check=False)
    deadline = None if timeout is None else time.monotonic() + timeout
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (0, None)
    try:
        try:
            pid, pidfd = server.spawn(list(args), full_env,
                                      os.path.abspath(cwd or os.getcwd()), [in_r, out_w, err_w])
        finally:
            for fd in (out_w, err_w) if input is None else (in_r, out_w, err_w):
                os.close(fd)
        child = Child(server, list(args), pid, pidfd, None, None)
        data = None if input is None else input.encode(locale_encoding())
        out, err, timed_out = _communicate((in_w, out_r, err_r), data, deadline)
        in_w = None
        if not timed_out:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                code = child.wait(left)
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out:
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired([sys.executable, "-m", "nvfabric", *args],
                                            timeout or 0, _decode(out), _decode(err))
    finally:
        for fd in (out_r, err_r):
            os.close(fd)
    return subprocess.CompletedProcess([sys.executable, "-m", "nvfabric", *args], code,
                                       _decode(out), _decode(err))


def locale_encoding() -> str:
    import locale

    return locale.getpreferredencoding(False)


if __name__ == "__main__":
    _server_main()

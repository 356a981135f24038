"""Issue 10, section 3: exit codes and streams a script can trust. A reader that goes away
(`nvfabric status | head -1`) or a closed stdout/stderr (`>&-`, `2>&-`) never changes the
command's own exit code and is never an internal error."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import runkit
from tests.conftest import run_cli


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
        return runkit.run(
            [sys.executable, "-m", "nvfabric", *args],
            stdout=write_end if broken_stdout else (stdout or subprocess.PIPE),
            stderr=subprocess.PIPE if 2 not in close else None, stdin=subprocess.DEVNULL,
            preexec_fn=child if close else None, env=env, text=False)
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

    # preflight refuses after taking the lock: fabric manager of another version (a missing
    # binary is refused earlier, with the vendor files, before the lock is taken)
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"version": "570.133.20"}})
    proc = _nvfabric("run", "--root", str(root), "--json", close=(1,))
    assert proc.returncode == 1, proc.stderr
    assert b"Traceback" not in proc.stderr and b"internal_error" not in proc.stderr
    assert b"version_mismatch" not in proc.stderr  # the JSON went to /dev/null, not to stderr
    lock = root / "run/nvfabric/run.lock"
    assert lock.read_bytes().strip().isdigit()  # only the run's pid


@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2)])
def test_a_run_with_closed_streams_comes_up_and_stops_cleanly_across_the_exec(
        tmp_path: Path, closed: tuple[int, ...]) -> None:
    # the descriptor opened on /dev/null for a closed stdout/stderr must survive the exec into
    # the lean supervisor: a /dev/null that os.open gave the closed number itself was
    # close-on-exec, so the lean process started without stderr (nothing started, exit 3) or
    # without stdout (its --json report crashed after a clean stop, exit 1)
    import signal
    import time

    from tests.runkit import events, sim

    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 0},
                                      "fabricmanager": {"register_delay_s": 0}})
    env = {k: v for k, v in os.environ.items() if k not in ("NVFABRIC_DEBUG", "NOTIFY_SOCKET")}

    def child() -> None:
        for fd in closed:
            os.close(fd)

    proc = subprocess.Popen(
        [sys.executable, "-m", "nvfabric", "run", "--root", str(root), "--json"],
        stdin=subprocess.DEVNULL, stdout=None if 1 in closed else subprocess.DEVNULL,
        stderr=None if 2 in closed else subprocess.DEVNULL, preexec_fn=child, env=env)
    try:
        ready = root / "run/nvfabric/ready"
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), f"not ready; exit {proc.poll()}"
        assert [e["event"] for e in events(root, "fabricmanager")][:1] == ["exec"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- disk full and lock errors


def _run_on_a_full_state_dir(root: Path, free_pages: int) -> subprocess.CompletedProcess[str]:
    """``nvfabric run --root ROOT --json`` in a private mount namespace (``unshare -m``) where
    the state directory is a 16 KiB tmpfs filled up to ``free_pages`` pages of 4 KiB."""
    state = root / "run/nvfabric"
    state.mkdir(parents=True, exist_ok=True)
    fill = 4 - free_pages
    script = ('mount -t tmpfs -o size=16k,mode=0700 tmpfs "$1" || exit 99; '
              'if [ "$2" -gt 0 ]; then dd if=/dev/zero of="$1/fill" bs=4k count="$2" '
              '2>/dev/null; fi; shift 2; exec "$@"')
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    proc = runkit.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(state), str(fill), sys.executable,
         "-m", "nvfabric", "run", "--root", str(root), "--json"], env=env)
    assert proc.returncode != 99, "cannot mount a tmpfs in a private mount namespace"
    return proc


def test_a_full_state_dir_is_disk_full_naming_the_lock(tmp_path: Path) -> None:
    import json

    from tests.runkit import sim

    root = sim(tmp_path, "dgx-b200")
    proc = _run_on_a_full_state_dir(root, free_pages=0)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "disk_full"
    assert err["message"] == (f"cannot take the run lock {root}/run/nvfabric/run.lock: "
                              "No space left on device")
    assert "free space" in err["hint"] and "run as root" not in err["hint"]


def test_a_full_disk_while_writing_the_config_names_the_config(tmp_path: Path) -> None:
    import json

    from tests.runkit import events, sim

    root = sim(tmp_path, "dgx-b200")
    proc = _run_on_a_full_state_dir(root, free_pages=1)  # the lock's pid fits, the config not
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "disk_full"
    assert err["message"] == (f"{root}/run/nvfabric/fabricmanager.cfg: No space left on "
                              "device")
    assert not events(root, "nvlsm", "exec") and not events(root, "fabricmanager", "exec")


def test_lock_errors_say_what_they_are(tmp_path: Path) -> None:
    import errno

    from nvfabric.model.errors import os_error

    lock = str(tmp_path / "run.lock")
    denied = "runs as root already" if os.geteuid() == 0 else "run as root"
    for code, word, exit_code in ((errno.EACCES, denied, 2),
                                  (errno.EROFS, "read-only", 2),
                                  (errno.ENOLCK, "does not support locks", 2),
                                  (errno.ENOSPC, "free space", 1)):
        finding, rc = os_error(OSError(code, os.strerror(code)), "cannot take the run lock",
                               lock)
        assert rc == exit_code and word in finding.hint
        assert finding.message == f"cannot take the run lock {lock}: {os.strerror(code)}"


def test_a_full_standard_output_is_disk_full_with_a_hint_that_reads(unhealthy: Path) -> None:
    """`status > /dev/full`: the OSError names no file; the hint must not be a template filled
    with nothing ("the filesystem of the filesystem")."""
    with open("/dev/full", "wb") as full:
        proc = _nvfabric("status", "--root", str(unhealthy), stdout=full.fileno())
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.decode().splitlines()
    assert line.startswith("nvfabric: disk_full: ") and "of the filesystem" not in line
    assert "standard output" in line


# ---------------------------------------------------------------- run's inputs, run's listing


def test_run_imex_peers_binary_is_exit_2_like_imex_config(tmp_path: Path) -> None:
    import json

    from tests.cli.test_run_mnnvl import tray

    root = tray(tmp_path)
    binary = tmp_path / "peers.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00")
    config = run_cli("imex", "config", "--root", str(root), "--peers", str(binary), "--json")
    assert config.returncode == 2
    for args in (("--dry-run",), ()):
        proc = run_cli("run", "--root", str(root), "--imex-peers", str(binary), "--json", *args)
        assert proc.returncode == 2, proc.stdout
        err = json.loads(proc.stdout)["error"]
        assert err["code"] == "input_unreadable"
        assert f"--imex-peers {binary} is not a text file" in err["message"]
    assert not (root / "run/nvfabric").exists()


def test_a_refused_dry_run_lists_no_file_it_would_not_write(tmp_path: Path) -> None:
    from tests.cli.test_run_mnnvl import peers, tray
    from tests.runkit import sim

    root = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "570.133.20"}})
    proc = run_cli("run", "--root", str(root), "--dry-run")
    assert proc.returncode == 1
    assert "version_mismatch" in proc.stderr
    assert "file " not in proc.stdout and "  | " not in proc.stdout
    assert "refused: nothing would be written or started" in proc.stdout
    accepted = sim(tmp_path, "hgx-h100", name="ok")
    ok = run_cli("run", "--root", str(accepted), "--dry-run")
    assert ok.returncode == 0 and f"file {accepted}/run/nvfabric/fabricmanager.cfg" in ok.stdout
    # a tray whose node list lacks this node: refused, so no node list and no mknod shown
    (tmp_path / "t").mkdir()
    tray_root = tray(tmp_path / "t")
    (tray_root / "dev/nvidia-caps-imex-channels/channel0").unlink()
    other = peers(tmp_path, "192.0.2.77")
    refused = run_cli("run", "--root", str(tray_root), "--dry-run", "--imex-peers", other)
    assert refused.returncode == 1, refused.stderr
    assert "file " not in refused.stdout and "action: mknod" not in refused.stdout
    assert "refused: nothing would be created, written or started" in refused.stdout


def test_listings_written_with_click_into_a_gone_reader_keep_exit_1(tmp_path: Path) -> None:
    from tests.runkit import sim

    root = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "570.133.20"}})
    proc = _nvfabric("run", "--root", str(root), "--dry-run", broken_stdout=True)
    assert proc.returncode == 1, proc.stderr
    assert b"version_mismatch" in proc.stderr and b"Traceback" not in proc.stderr


def test_a_full_disk_at_the_write_boundary_names_the_target_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from nvfabric.effects import atomic

    target = tmp_path / "state/fabricmanager.cfg"
    target.parent.mkdir()
    target.write_text("OLD=1\n")

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a real fsync gives it

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as err:
        atomic.write_atomic(str(target), "NEW=1\n", backup=False)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(target))
    assert target.read_text() == "OLD=1\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["fabricmanager.cfg"]


@pytest.mark.parametrize(("code", "finding_code", "exit_code", "word"), [
    (errno.ENOSPC, "disk_full", 1, "free space"),
    (errno.EROFS, "input_unreadable", 2, "read-only"),
])
def test_imex_config_write_error_says_what_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, finding_code: str,
        exit_code: int, word: str) -> None:
    """`imex config` made every write error `config_invalid_value` with 'run as root' (a full
    disk included), exit 1 or 2 by accident; it goes through output.os_error like `run`."""
    import json

    from click.testing import CliRunner

    from nvfabric.cli import main
    from nvfabric.effects import atomic
    from tests.cli.test_run_mnnvl import tray

    root = tray(tmp_path)
    cfg = root / "etc/nvidia-imex/config.cfg"
    before = cfg.read_text()

    def failing(_fd: int) -> None:
        raise OSError(code, os.strerror(code))  # what a real fsync gives on that filesystem

    monkeypatch.setattr(atomic.os, "fsync", failing)
    result = CliRunner().invoke(main, ["imex", "config", "--root", str(root), "--peer",
                                       "192.0.2.10", "--set", "LOG_LEVEL=2", "--json"])
    assert result.exit_code == exit_code, result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == finding_code and word in error["hint"]
    assert os.strerror(code) in error["message"]
    assert "run as root" not in error["hint"]
    assert cfg.read_text() == before

"""The fakes start as cheaply as Python allows and print what they printed before: each
launcher imports only its own program's module and, on its path, nothing beyond :mod:`json`
(the state files) that it does not use (no XML library: the -q -x XML, escaped without
:mod:`xml.sax.saxutils`, is byte for byte what it printed).

Behavioural guards, no timing: each fake runs through its real launcher text in a child
``python -IS`` and the modules it left in ``sys.modules`` are compared with those of a child
that only runs the launcher's own imports and :mod:`json`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from xml.sax.saxutils import escape as sax_escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvfabric.simulate import fakes
from nvfabric.simulate.fakebin import fabricmanager as fakefm
from nvfabric.simulate.fakebin import smi
from nvfabric.simulate.fakebin import state as fakestate
from tests import runkit
from tests.runkit import events, sim

#: Runs the launcher at argv[1] as the kernel would (its own text, as ``__main__``, argv[3:]
#: after it), then writes the names in ``sys.modules`` to argv[2]; with no launcher (""),
#: only the launcher's own imports (os, sys) and json, which every fake reads its state
#: files with: the baseline.
_RUN_LAUNCHER = """
import os, sys
launcher, out = sys.argv[1], sys.argv[2]
if not launcher:
    import json
sys.argv = [launcher, *sys.argv[3:]]
status = None
try:
    if launcher:
        with open(launcher, encoding="utf-8") as fh:
            code = compile(fh.read(), launcher, "exec")
        exec(code, {"__name__": "__main__", "__file__": launcher})
except SystemExit as stop:
    status = stop.code
finally:
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(repr(status) + "\\n" + "\\n".join(sorted(sys.modules)))
"""

#: What no fake's quick path may import: what only a daemon's life needs (sockets, signal
#: handlers, the wait loop) and what the fakes never use.
HEAVY = frozenset({
    "socket", "selectors", "signal", "select", "typing", "contextlib", "xml", "xml.sax",
    "xml.sax.saxutils", "xml.etree.ElementTree", "urllib", "urllib.request", "http.client",
    "email", "datetime", "tempfile", "shutil",
})


def run_modules(tmp_path: Path, launcher: Path | None, *args: str,
                env: dict[str, str] | None = None,
                crash_at: tuple[Path, str, str] | None = None) -> tuple[object, set[str]]:
    """(exit status, modules loaded) of ``launcher ARGS`` run in a child ``python -IS``;
    ``crash_at`` (root, prog, event): once the fake recorded that event, SIGUSR1 makes it
    crash (its fault ``crash_on_sigusr1``), so that its whole life runs whatever the load."""
    out = tmp_path / "modules.txt"
    argv = [sys.executable, "-IS", "-c", _RUN_LAUNCHER, str(launcher or ""), str(out), *args]
    full_env = {**os.environ, **(env or {})}
    if crash_at is None:
        proc = runkit.run(argv, timeout=60, env=full_env)
        assert proc.returncode in (0, 1, 2), proc
    else:
        root, prog, event = crash_at
        with runkit.Child(argv, env=full_env) as child:
            runkit.until(lambda: bool(events(root, prog, event)) or child.proc.poll() is not None,
                         f"the fake {prog}'s {event} event")
            os.kill(child.pid, signal.SIGUSR1)
            assert child.wait() in (0, 1, 2), child.log
    status, *names = out.read_text(encoding="utf-8").splitlines()
    return eval(status), set(names)  # noqa: S307 - repr of an int or None written above


def fake_imports(tmp_path: Path, root: Path, prog: str, *args: str,
                 env: dict[str, str] | None = None,
                 crash_at: str | None = None) -> tuple[object, set[str], set[str]]:
    """(exit status, the package's modules, other modules beyond the baseline) of one run of
    fake ``prog`` through its launcher in ``root`` (``crash_at``: the event of its state
    after which it is made to crash, see :func:`run_modules`)."""
    _, base = run_modules(tmp_path, None)
    status, loaded = run_modules(tmp_path, root / "bin" / prog, *args, env=env,
                                 crash_at=None if crash_at is None else
                                 (root, fakes_prog(prog), crash_at))
    own = {m for m in loaded if m.split(".")[0] == fakes.FAKES_PACKAGE}
    return status, own, loaded - base - own


#: What a daemon's life adds to the quick path (socket.py's closure, signal handlers, the
#: wait loop's select).
DAEMON_LIFE = frozenset({"socket", "_socket", "selectors", "select", "array", "math", "signal",
                         "errno", "collections.abc", "stat", "_stat"})


def fakes_prog(launcher: str) -> str:
    """The name a fake records its events under (``nv-fabricmanager`` -> ``fabricmanager``)."""
    return {"nv-fabricmanager": "fabricmanager", "nvidia-imex": "imex"}.get(launcher, launcher)


def package(*modules: str) -> set[str]:
    return {fakes.FAKES_PACKAGE, *(f"{fakes.FAKES_PACKAGE}.{m}" for m in modules)}


#: The package's modules every fake's start-up uses: output, options, the state files.
CORE = ("daemon", "state")


@pytest.mark.parametrize("prog,args,module", [
    ("nv-fabricmanager", ("--version",), "fabricmanager"),
    ("nv-fabricmanager", ("-v",), "fabricmanager"),
    ("nvidia-smi", ("-q", "-x"), "smi"),
    ("nvidia-smi", ("-q",), "smi"),
    ("nvidia-smi", ("--query-gpu=index,fabric.state,fabric.cliqueId", "--format=csv"), "smi"),
    ("nvidia-smi", ("-L",), "smi"),
    ("nvidia-imex-ctl", ("-q",), "imexctl"),
    ("nvidia-imex-ctl", ("-N", "-j"), "imexctl"),
    ("nvlsm", ("--bogus",), "nvlsm"),  # its exec record, then the usage line
])
def test_a_fakes_quick_path_imports_its_module_and_no_library(
        tmp_path: Path, prog: str, args: tuple[str, ...], module: str) -> None:
    root = sim(tmp_path, "gb200-tray" if "imex" in prog else "dgx-b200")
    status, own, other = fake_imports(tmp_path, root, prog, *args)
    assert status in (0, 1)
    assert own == package(module, *CORE)
    assert other <= {"__future__"}, sorted(other)
    assert not other & HEAVY


def test_the_nvlsm_daemon_serves_its_socket_with_the_daemon_modules_only(tmp_path: Path) -> None:
    """NVLSM's whole life (banner, pid file, IPC socket, wait loop, simulated crash) takes
    :mod:`socket`, :mod:`signal` and :mod:`select` beyond the quick path, nothing else."""
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 0, "crash_on_sigusr1": True}})
    guid = fakestate.port_guids(str(root))[0]
    conf = root / "usr/share/nvidia/nvlsm/nvlsm.conf"
    status, own, other = fake_imports(tmp_path, root, "nvlsm", "-F", str(conf), "-g", guid,
                                      crash_at="socket")
    assert status == 1  # the simulated crash's exit code
    assert [e["event"] for e in events(root, "nvlsm")] == ["exec", "socket", "listen"]
    assert own == package("nvlsm", *CORE)
    assert other <= {"__future__", *DAEMON_LIFE}, sorted(other)


def test_the_fabric_manager_daemon_registers_with_the_daemon_modules_only(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100", {"fabricmanager": {"register_delay_s": 0,
                                                         "crash_on_sigusr1": True}})
    cfg = tmp_path / "fm.cfg"
    shipped = (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_text(encoding="utf-8")
    cfg.write_text(shipped.replace("DAEMONIZE=1", "DAEMONIZE=0").replace(
        "LOG_FILE_NAME=/var/log/fabricmanager.log", f"LOG_FILE_NAME={tmp_path}/fm.log").replace(
        "=/usr/share/nvidia/nvswitch", f"={root}/usr/share/nvidia/nvswitch"), encoding="utf-8")
    status, own, other = fake_imports(tmp_path, root, "nv-fabricmanager", "-c", str(cfg),
                                      crash_at="registered")
    assert status == 1
    assert [e["event"] for e in events(root, "fabricmanager")] == ["exec", "registered"]
    assert own == package("fabricmanager", *CORE)
    assert other <= {"__future__", *DAEMON_LIFE}, sorted(other)


def test_an_unknown_program_imports_no_fake(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    launcher = root / "bin/nvidia-bogus"
    launcher.write_text((root / "bin/nvlsm").read_text(encoding="utf-8").replace(
        "'nvlsm'", "'nvidia-bogus'"), encoding="utf-8")
    status, own, other = fake_imports(tmp_path, root, "nvidia-bogus")
    assert status == 2
    assert own == package("daemon", "state")  # the error line's say()
    assert not other & HEAVY


def test_short_path_names_a_long_socket_path_through_its_directory(tmp_path: Path) -> None:
    """A socket path too long for sockaddr_un is reached through ``/proc/self/fd/N``, and the
    directory's descriptor is closed when the block ends; a short path is itself."""
    import socket

    from nvfabric.simulate.fakebin.daemon import short_path

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "fm_sm_ipc.socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with short_path(path) as name:
        assert name.startswith("/proc/self/fd/") and name.endswith("/fm_sm_ipc.socket")
        fd = int(name.split("/")[4])
        listener.bind(name)
    listener.close()
    assert Path(path).exists()
    with pytest.raises(OSError):
        os.fstat(fd)
    with short_path(str(tmp_path / "s")) as name:
        assert name == str(tmp_path / "s")


def test_install_byte_compiles_the_copied_fakes(tmp_path: Path) -> None:
    """Every module of the copy has its current byte code in ``__pycache__``: the first start
    of a fake compiles nothing (a compile would rewrite the file)."""
    import importlib.util

    root = sim(tmp_path, "dgx-b200")
    pkg = root / "bin" / fakes.FAKES_PACKAGE
    cached = {}
    for source in sorted(pkg.glob("*.py")):
        pyc = Path(importlib.util.cache_from_source(str(source)))
        assert pyc.is_file(), pyc
        cached[pyc] = pyc.stat().st_mtime_ns
    runkit.run([root / "bin/nvidia-smi", "-q", "-x"], check=True)
    assert {p: p.stat().st_mtime_ns for p in cached} == cached


@pytest.mark.parametrize("profile", ["dgx-b200", "hgx-h100", "gb200-tray", "a40-bridge"])
def test_state_files_and_records_are_the_bytes_json_writes(tmp_path: Path,
                                                           profile: str) -> None:
    root = sim(tmp_path, profile)
    for name in ("node.json", "gpus.json"):
        text = (root / fakestate.STATE_DIR / name).read_text(encoding="utf-8")
        assert text == json.dumps(json.loads(text), indent=1)
        assert fakestate.load(str(root), name, None) == json.loads(text)
    fakestate.record(str(root), "nvlsm", "exec", argv=["-g", "0xé\"\\\x01", "--x=\udcff"])
    fakestate.record(str(root), "nvlsm", "orphan", ppid=1)
    lines = (root / fakestate.STATE_DIR / "calls.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.dumps(json.loads(line)) for line in lines] == lines
    assert json.loads(lines[0])["argv"] == ["-g", "0xé\"\\\x01", "--x=\udcff"]


# --- the -q -x XML is what the xml.sax.saxutils spelling printed -----------------------------

@settings(max_examples=300, deadline=None)
@given(st.text())
def test_smi_escape_is_saxutils_escape(text: str) -> None:
    assert smi.escape(text) == sax_escape(text)


@pytest.mark.parametrize("profile", ["dgx-b200", "hgx-h100", "gb200-tray", "a40-bridge",
                                     "dgx-a100", "gh200"])
@pytest.mark.parametrize("state", [None, "in_progress", "completed"])
def test_smi_xml_is_byte_identical_to_the_saxutils_rendering(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str,
        state: str | None) -> None:
    """The -q -x document of every GPU and fabric state (and of names with markup
    characters), rendered with :func:`smi.escape` and with xml.sax.saxutils' escape, is the
    same string; the fake's launcher prints that string."""
    root = sim(tmp_path, profile)
    if state is not None:
        fakefm._set_gpus(str(root), state)
    data = fakestate.load(str(root), "gpus.json", {})
    node = fakestate.load(str(root), "node.json", {})
    odd = [dict(g, name=f"{g['name']} <A&B> \"x\"", status="a<b>&c") for g in data["gpus"]]
    driver = fakestate.driver_version(str(root)) or ""
    for gpus in (data["gpus"], odd):
        with monkeypatch.context() as m:  # one second for both renderings (its timestamp)
            now = time.localtime()
            m.setattr(smi.time, "strftime",
                      lambda fmt, t=now, real=time.strftime: real(fmt, t))
            ours = smi._smi_xml(gpus, node, driver)
            m.setattr(smi, "escape", sax_escape)
            assert smi._smi_xml(gpus, node, driver) == ours
    printed = runkit.run([root / "bin/nvidia-smi", "-q", "-x"], check=True).stdout
    expected = smi._smi_xml(data["gpus"], node, driver) + "\n"
    stamp = "\t<timestamp>"
    drop = [i for i, line in enumerate(expected.splitlines()) if line.startswith(stamp)]
    assert [x for i, x in enumerate(printed.splitlines()) if i not in drop] == \
        [x for i, x in enumerate(expected.splitlines()) if i not in drop]
    assert printed.splitlines()[drop[0]].startswith(stamp)

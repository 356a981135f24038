"""execinfo: the interpreter of a script or dynamic ELF file, and the ENOENT that means it is
missing (the host's binaries in a container, a host-simulated tree mounted into one)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvfabric.facts.execinfo import HEAD_BYTES, exec_error, interpreter, missing_interpreter
from tests import runkit
from tests.conftest import run_cli

TRUE = shutil.which("true")
assert TRUE is not None


def _head(path: str | Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES)


def _loader() -> str:
    """This machine's ELF loader as ldd prints it for /bin/true (the oracle)."""
    out = runkit.run(["ldd", os.path.realpath(TRUE)], check=True).stdout
    (line,) = [ln for ln in out.splitlines() if "ld-linux" in ln]
    return line.split()[0]


def test_dynamic_elf_names_its_loader_as_ldd_does() -> None:
    found = interpreter(_head(os.path.realpath(TRUE)))
    assert found is not None and found[1] == "ELF PT_INTERP"
    assert os.path.realpath(found[0]) == os.path.realpath(_loader())
    assert missing_interpreter(TRUE) is None  # it exists here


def test_static_elf_has_no_interpreter() -> None:
    # glibc's ldconfig (Debian's libc-bin, on every glibc system) is a static-pie ELF: ldd says so
    ldconfig = Path("/sbin/ldconfig")
    assert "statically linked" in runkit.run(["ldd", str(ldconfig)]).stdout
    assert interpreter(_head(ldconfig)) is None


def test_fake_daemon_of_a_simulated_tree_names_the_simulating_python(tmp_path: Path) -> None:
    assert run_cli("simulate", "dgx-b200", str(tmp_path / "node")).returncode == 0
    found = interpreter(_head(tmp_path / "node/bin/nvlsm"))
    assert found == (sys.executable, "#! line")


@pytest.mark.parametrize("head", [b"", b"#!", b"#!   \n", b"\x7fELF", b"\x7fELF" + b"\0" * 60,
                                  b"\x7fELF\x02\x01" + b"\xff" * 200, b"MZ\x90\x00",
                                  b"plain text\n"])
def test_unknown_or_truncated_heads_give_none(head: bytes) -> None:
    assert interpreter(head) is None


def test_script_with_a_missing_interpreter_is_named(tmp_path: Path) -> None:
    script = tmp_path / "nv-fabricmanager"
    script.write_text("#!/opt/absent/bin/python -IS\nprint('x')\n")
    script.chmod(0o755)
    with pytest.raises(FileNotFoundError) as err:
        runkit.run([str(script), "--version"], text=False)
    msg = exec_error(str(script), err.value)
    assert msg == ("No such file or directory: its interpreter /opt/absent/bin/python "
                   "(#! line) does not exist here")


def test_elf_with_a_missing_loader_is_named(tmp_path: Path) -> None:
    loader = _loader().encode()
    data = _head(os.path.realpath(TRUE)) + open(os.path.realpath(TRUE), "rb").read()[HEAD_BYTES:]
    assert data.count(loader) == 1
    gone = loader[:-1] + (b"9" if loader[-1:] != b"9" else b"8")
    binary = tmp_path / "nv-fabricmanager"
    binary.write_bytes(data.replace(loader, gone))
    binary.chmod(0o755)
    with pytest.raises(FileNotFoundError) as err:
        runkit.run([str(binary)], text=False)
    assert exec_error(str(binary), err.value) == (
        f"No such file or directory: its interpreter {gone.decode()} (ELF PT_INTERP) does "
        "not exist here")


def test_other_errors_keep_the_os_words(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(FileNotFoundError) as err:
        runkit.run([str(missing)], text=False)
    assert exec_error(str(missing), err.value) == "No such file or directory"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert missing_interpreter(str(fifo)) is None  # never blocks on a FIFO


@given(st.binary(max_size=512), st.sampled_from([b"", b"\x7fELF\x01\x01", b"\x7fELF\x02\x01",
                                                 b"\x7fELF\x01\x02", b"\x7fELF\x02\x02",
                                                 b"#!"]))
def test_interpreter_never_raises_on_any_bytes(tail: bytes, prefix: bytes) -> None:
    found = interpreter(prefix + tail)
    assert found is None or (isinstance(found[0], str) and found[1] in ("#! line",
                                                                        "ELF PT_INTERP"))

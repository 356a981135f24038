"""Why an existing file cannot be executed: its interpreter is missing.

``execve(2)`` fails with ENOENT not only when the file is missing but when "a script or ELF
interpreter does not exist" (execve(2), ERRORS): a script whose ``#!`` line names an absent
interpreter, or a dynamic ELF executable whose ``PT_INTERP`` loader
(``/lib64/ld-linux-x86-64.so.2``) is not in this mount namespace. Both happen when binaries
of one root run in another: the host's fabric manager inside a container image without
glibc, or a node tree simulated on the host (its fake daemons' ``#!`` names the host's
Python) mounted into a container. Python then says "No such file or directory" for a file
that exists; :func:`exec_error` says which file is missing instead.

ELF layout: System V ABI, generic part, "ELF Header" and "Program Header" (e_ident class and
data encoding, e_phoff, e_phentsize, e_phnum; p_type PT_INTERP = 3 with p_offset, p_filesz).
"""

from __future__ import annotations

import errno
import os
import stat
import struct

#: How much of a file is read to find its interpreter: the ``#!`` line, or the ELF header, the
#: program headers and the PT_INTERP string, which linkers place at the start of the file.
HEAD_BYTES = 64 * 1024

PT_INTERP = 3

#: The hint of a finding about a missing interpreter.
INTERPRETER_HINT = ("run it where its loader exists: a container image needs the glibc (a "
                    "simulated tree's fakes: the Python) the binary was built for; simulate a "
                    "tree with the nvfabric that will run it")


def interpreter(head: bytes) -> tuple[str, str] | None:
    """The interpreter a file's first bytes name, as ``(path, where)`` with ``where``
    ``"#! line"`` or ``"ELF PT_INTERP"``; None for a static ELF, a file of another kind, or
    bytes too short or malformed to tell (never raises)."""
    if head.startswith(b"#!"):
        line = head[2:].split(b"\n", 1)[0].strip()
        if not line:
            return None
        return line.split()[0].decode("utf-8", "replace"), "#! line"
    if not head.startswith(b"\x7fELF") or len(head) < 52:
        return None
    cls, data = head[4], head[5]
    if cls not in (1, 2) or data not in (1, 2):
        return None
    end = "<" if data == 1 else ">"
    try:
        if cls == 2:
            phoff, = struct.unpack_from(end + "Q", head, 0x20)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36)
        else:
            phoff, = struct.unpack_from(end + "I", head, 0x1C)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 0x2A)
        if phentsize < (56 if cls == 2 else 32) or phoff + phnum * phentsize > len(head):
            return None  # program headers past what was read, or malformed
        for i in range(phnum):
            at = phoff + i * phentsize
            p_type, = struct.unpack_from(end + "I", head, at)
            if p_type != PT_INTERP:
                continue
            if cls == 2:
                offset, = struct.unpack_from(end + "Q", head, at + 8)
                size, = struct.unpack_from(end + "Q", head, at + 32)
            else:
                offset, = struct.unpack_from(end + "I", head, at + 4)
                size, = struct.unpack_from(end + "I", head, at + 16)
            raw = head[offset:offset + size]
            if len(raw) != size or not raw:
                return None
            return raw.rstrip(b"\0").decode("utf-8", "replace"), "ELF PT_INTERP"
    except (struct.error, OverflowError):
        return None
    return None


def missing_interpreter(path: str) -> tuple[str, str] | None:
    """``(interpreter, where)`` when ``path`` is a regular file whose interpreter does not
    exist here; None otherwise (also when ``path`` cannot be read). Host access: reads at most
    :data:`HEAD_BYTES` of ``path`` (opened non-blocking, so a FIFO there cannot hang it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, HEAD_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = interpreter(head)
    if found is None or os.path.exists(found[0]):
        return None
    return found


def exec_error(path: str, err: OSError) -> str:
    """What to say when executing ``path`` failed with ``err``: the OS's words, and for an
    ENOENT on a file that exists, which interpreter is missing, e.g. ``No such file or
    directory: its interpreter /usr/bin/python3 (#! line) does not exist here``."""
    text = err.strerror or str(err)
    if err.errno == errno.ENOENT:
        found = missing_interpreter(path)
        if found is not None:
            return f"{text}: its interpreter {found[0]} ({found[1]}) does not exist here"
    return text

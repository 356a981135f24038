"""Benchmark of the readers' time on growing hostile input (issue 10: "time linear in the
input"). Each of the kinds that were quadratic is fed at n, 4n and 16n; the figure is the time
ratio 16n/n (linear: about 16; quadratic: about 256). Kinds: nvidia-smi text rows with a blank
run and no colon (the old key/value regex), an APT index of many stanzas of the wanted package
(each stanza parsed once), a log of long lines with a needle (doctor), a log
after a hole of NUL padding (doctor, ~100 MB/s before the padding fast path), a log line that
repeats a signature's start without its end, an IMEX config.cfg with a run of blank lines,
concatenated domain reports, a fabric manager config with long values, and Slurm prologs of 1,
4 and 16 MiB: one word, many IMEX commands on one line, a line of a million ``exec`` prefixes.
In-process, best of 3.

Then the file readers of ``nvfabric.facts.fs`` on a simulated DGX B200 tree under a root
(``--root``): every attribute read and every directory listed, as detection does (the fast
path: no link leads out of the root), and the same reads through an absolute link (the slow
path: the link resolved under the root, as the node resolves it), and files that are not
there. Best of 5, microseconds a read. Before links were resolved under the root, on the
2-core machines here: 3.9-4.1 us a read and 5.9 us a listing on the fast path (the same
now), 1.1 us a missing file (now about 4.5: a failed open also asks whether a link led out
of the root, a stat and an lstat for a directory already seen inside it).

The prolog reader before its own shell splitter (shlex in punctuation mode, quadratic in a
token's length; each command's evidence a tuple copied whole; the prefixes stripped by slicing)
took, on the 2-core machines here: one word 0.95 s at 256 KiB and 22.6 s at 1 MiB; IMEX
commands 0.32 s at 256 KiB, 5.3 s at 1 MiB; prefixes 6.6 s at 256 KiB and more than 200 s at
1 MiB (4 and 16 MiB: not measured, hours by the ratio).
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import line  # noqa: E402


def _best(fn: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _smi(n: int) -> Callable[[], object]:
    from nvfabric.facts import smi

    text = "Fabric\n    State : Completed\n" + ("        a" + " " * 2000 + "b\n") * n
    return lambda: smi.parse(text)


def _apt(n: int) -> Callable[[], object]:
    from nvfabric.artifacts import apt

    stanza = (b"Package: nvidia-fabricmanager\nVersion: 580.%d.05-1\nArchitecture: amd64\n"
              b"Filename: ./x.deb\nSize: 10\nSHA256: " + b"a" * 64 + b"\n\n")
    index = b"".join(stanza.replace(b"%d", str(i).encode()) for i in range(n))
    return lambda: apt.find_stanzas(index, ["nvidia-fabricmanager"])


def _doctor(n: int) -> Callable[[], object]:
    from nvfabric.rules.diagnose import Classifier, classify_stream

    data = (b"x" * 20000 + b" Failed to get new memory reference with rc: 61\n") * n
    return lambda: classify_stream(Classifier(), io.BytesIO(data))


def _doctor_nul(n: int) -> Callable[[], object]:
    from nvfabric.rules.diagnose import Classifier, classify_stream

    # a copytruncated log: a hole of NUL padding (n MiB), then the lines written after it
    data = b"\0" * (n << 20) + b"Failed to get new memory reference with rc: 61\n"
    return lambda: classify_stream(Classifier(), io.BytesIO(data))


def _doctor_repeat(n: int) -> Callable[[], object]:
    from nvfabric.rules.diagnose import Classifier, classify_stream

    # one line repeating a signature's start without its end ('A .* B': was quadratic)
    data = b"NVRM: Xid (PCI:0000:07:00): 79, pid=1, " * n + b"\n"
    return lambda: classify_stream(Classifier(), io.BytesIO(data))


def _imexcfg(n: int) -> Callable[[], object]:
    from nvfabric.rules.imex import config

    # a run of blank lines with no key after it (the known-key check: was cubic)
    text = "SERVER_PORT=50000\n" + " \n" * n
    return lambda: config.check_known(text, {"SERVER_PORT": "1"})


def _reports(n: int) -> Callable[[], object]:
    from nvfabric.cli import domain

    one = json.dumps({"hostname": "h", "gpus": [{"index": 0, "state": "completed"}]})
    text = (one + "\n") * n
    return lambda: list(domain._objects(text, "r"))


def _fmcfg(n: int) -> Callable[[], object]:
    from nvfabric.bringup import fmconfig as fm

    text = "".join(f"KEY_{i}=" + "v" * 200 + "\n" for i in range(n))
    return lambda: fm.effective(text, root="/nonexistent", sets={"LOG_LEVEL": "4"})


def _prolog(body: Callable[[int], str]) -> Callable[[int], Callable[[], object]]:
    """A Slurm prolog of about ``n`` bytes: ``body(n)`` after its ``#!`` line."""
    from nvfabric.rules.imex import script

    def make(n: int) -> Callable[[], object]:
        text = "#!/bin/sh\n" + body(n) + "\n"
        return lambda: script.analyse(text, "/p", "/p", {})

    return make


_IMEX = "systemctl restart nvidia-imex; "


def _tree_reads(root: str) -> tuple[list[str], list[str]]:
    """(files, directories) of the simulated tree under ``root``, as paths under the root."""
    import os

    files: list[str] = []
    dirs: list[str] = []
    for top, names, entries in os.walk(root):
        dirs.append(top)
        files += [os.path.join(top, e) for e in entries
                  if os.path.isfile(os.path.join(top, e)) and not os.path.islink(
                      os.path.join(top, e))]
        names.sort()
    return files, dirs


def fs_readers() -> None:
    """The fs readers' figures on a simulated tree (module docstring)."""
    import os
    import tempfile

    from nvfabric.facts import fs
    from nvfabric.model import hostpath
    from nvfabric.simulate import build, profile_spec

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "node")
        build(profile_spec("dgx-b200"), root)
        hostpath.register(root)
        files, dirs = _tree_reads(root)

        def read_all() -> None:
            for f in files:
                fs.read_bytes(f)

        def list_all() -> None:
            for d in dirs:
                fs.listdir(d)

        per = _best(read_all, 5) / len(files) * 1e6
        line(f"fs.read_bytes, fast path: {len(files)} files", f"{per:.2f} us a read")
        per = _best(list_all, 5) / len(dirs) * 1e6
        line(f"fs.listdir, fast path: {len(dirs)} directories", f"{per:.2f} us a listing")
        missing = [f + ".absent" for f in files]  # what detection probes and does not find
        per = _best(lambda: [fs.read_bytes(m) for m in missing], 5) / len(missing) * 1e6
        line(f"fs.read_bytes, missing files: {len(missing)}", f"{per:.2f} us a read")
        # the slow path: /etc/alt -> /etc (absolute: resolved under the root by the node)
        os.makedirs(os.path.join(root, "etc"), exist_ok=True)
        with open(os.path.join(root, "etc", "slurm.conf"), "w") as fh:
            fh.write("SwitchType=switch/nvidia_imex\n")
        os.symlink("/etc", os.path.join(root, "alt"))
        through = hostpath.under(root, "/alt/slurm.conf")
        per = _best(lambda: [fs.read_bytes(through) for _ in range(1000)], 5) / 1000 * 1e6
        found = fs.read_bytes(through) is not None
        line("fs.read_bytes through an absolute link", f"{per:.2f} us a read "
             f"({'read under the root' if found else 'read as missing'})")


def main() -> int:
    kinds = {"nvidia-smi text, blank runs": (_smi, 200), "APT index, stanzas": (_apt, 2000),
             "doctor, 20 KB lines": (_doctor, 200),
             "doctor, MiB of NUL padding": (_doctor_nul, 16),
             "doctor, a line repeating an Xid start": (_doctor_repeat, 2000),
             "IMEX config.cfg, blank-line run": (_imexcfg, 2000),
             "domain reports, JSON Lines": (_reports, 2000),
             "fabricmanager.cfg, long values": (_fmcfg, 2000),
             "Slurm prolog, one word (bytes)": (_prolog(lambda n: "a" * n), 1 << 20),
             "Slurm prolog, IMEX commands on one line (bytes)": (
                 _prolog(lambda n: _IMEX * (n // len(_IMEX))), 1 << 20),
             "Slurm prolog, exec prefixes on one line (bytes)": (
                 _prolog(lambda n: "exec " * (n // 5) + "true"), 1 << 20)}
    worst = 0.0
    for name, (make, n) in kinds.items():
        times = [_best(make(n * k)) for k in (1, 4, 16)]
        ratio = times[2] / max(times[0], 1e-9)
        worst = max(worst, ratio)
        line(f"{name}: n={n}", f"{times[0] * 1000:.1f} / {times[1] * 1000:.1f} / "
             f"{times[2] * 1000:.1f} ms at n/4n/16n, ratio 16n/n {ratio:.1f} (linear ~16)")
    line("worst ratio 16n/n", f"{worst:.1f} (target < 40: linear with slack for a shared CPU)")
    fs_readers()
    return 0 if worst < 40 else 1


if __name__ == "__main__":
    sys.exit(main())

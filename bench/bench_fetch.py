"""Benchmark of artifact resolution from APT indexes (issue "Version-matched artifacts").

Figures:
- a synthetic 5 MB CUDA-style ``Packages`` index (many driver branches and versions, the
  wanted fabric manager stanza near the end): in-process resolution of fabricmanager for one
  exact driver version (target < 150 ms), and grep-dctrl on the same query;
- Debian's own full ``main`` index of this machine's release (obtained through apt:
  ``apt-get update``, then /var/lib/apt/lists/*_main_binary-amd64_Packages*, decompressed by
  ``apt-helper cat-file``): nvfabric's exact name=version resolution, in-process time and peak
  RSS of a process doing only that, side by side with ``grep-dctrl`` (dctrl-tools, installed
  with apt-get when missing) on the same query.
"""

from __future__ import annotations

import glob
import mmap
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import PY, line, median_ms, peak_rss_mb  # noqa: E402

from nvfabric.artifacts import apt
from nvfabric.artifacts.model import Request

TARGET_MS = 150.0
WANTED = ("nvidia-fabricmanager", "580.126.09")


def synthetic_index(size: int = 5 * 1024 * 1024, seed: int = 7) -> bytes:
    """A CUDA-repository-like index of about ``size`` bytes: driver packages of branches
    450..590 in many versions, the wanted fabric manager stanza among the last."""
    rnd = random.Random(seed)
    names = ["cuda-drivers", "nvidia-driver", "libnvidia-compute", "libnvidia-nscq",
             "nvidia-imex", "libnvsdm", "cuda-toolkit", "libcublas", "libcufft", "nsight-systems"]
    parts: list[str] = []
    total = 0
    n = 0
    while total < size:
        branch = rnd.choice(range(450, 600, 5))
        version = f"{branch}.{rnd.randint(10, 250)}.{rnd.randint(1, 20):02d}-1"
        base = rnd.choice(names)
        pkg = f"{base}-{branch}" if branch < 580 else base
        if n % 50 == 0:
            pkg = "nvidia-fabricmanager" if branch >= 580 else f"nvidia-fabricmanager-{branch}"
        digest = f"{rnd.getrandbits(256):064x}"
        stanza = (
            f"Package: {pkg}\nArchitecture: amd64\nVersion: {version}\nPriority: optional\n"
            f"Section: multiverse/devel\nMaintainer: cudatools <cudatools@nvidia.com>\n"
            f"Installed-Size: {rnd.randint(100, 900000)}\n"
            f"Depends: libc6 (>= 2.34), nvidia-kernel-common-{branch} (>= {version})\n"
            f"Filename: ./{pkg}_{version}_amd64.deb\nSize: {rnd.randint(1000, 9 ** 9)}\n"
            f"MD5sum: {digest[:32]}\nSHA1: {digest[:40]}\nSHA256: {digest}\n"
            f"Description: {base} for the R{branch} branch\n"
        )
        parts.append(stanza)
        total += len(stanza) + 1
        n += 1
    wanted = (
        f"Package: {WANTED[0]}\nArchitecture: amd64\nVersion: {WANTED[1]}-1\n"
        f"Filename: ./{WANTED[0]}_{WANTED[1]}-1_amd64.deb\nSize: 4520144\n"
        f"SHA256: {'3e' * 32}\n"
    )
    parts.insert(len(parts) - 3, wanted)
    return "\n".join(parts).encode()


def grep_dctrl() -> tuple[str | None, str]:
    """Path of grep-dctrl, installing dctrl-tools with apt-get when missing; or (None, why)."""
    found = shutil.which("grep-dctrl")
    if found:
        return found, "present"
    try:
        proc = subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "dctrl-tools"],
            capture_output=True, text=True, check=False, timeout=300,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"cannot run apt-get ({err})"
    found = shutil.which("grep-dctrl")
    if found:
        return found, "installed now with apt-get (dctrl-tools)"
    return None, f"apt-get install dctrl-tools failed: {proc.stderr.strip()[-200:]}"


def debian_index() -> tuple[Path | None, str]:
    """This machine's full Debian main amd64 index, decompressed into a temp file."""
    pattern = "/var/lib/apt/lists/*_dists_*_main_binary-amd64_Packages*"
    note = "apt lists present"
    try:
        proc = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True,
                              check=False, timeout=300)
        note = "apt-get update ok" if proc.returncode == 0 else (
            f"apt-get update failed (rc {proc.returncode}); using the lists present")
    except (OSError, subprocess.TimeoutExpired) as err:
        note = f"apt-get update not run ({err}); using the lists present"
    candidates = [p for p in glob.glob(pattern) if "-security_" not in p and "-updates_" not in p]
    if not candidates:
        return None, note + "; no main Packages list under /var/lib/apt/lists"
    source = max(candidates, key=os.path.getsize)
    out = Path(tempfile.mkdtemp(prefix="nvfabric-bench-")) / "Packages"
    with open(out, "wb") as fh:
        proc = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", source], stdout=fh,
                              stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        return None, note + f"; apt-helper cat-file failed: {proc.stderr.decode()[-200:]}"
    return out, note + f"; {os.path.basename(source)}"


def child(path: str, name: str, version: str) -> None:
    """Resolve name=version from an index file in a fresh process (for its peak RSS)."""
    t0 = time.perf_counter()
    chosen = resolve_file(Path(path), name, version)
    if chosen is None or chosen.version != version:
        raise SystemExit(f"not found: {name}={version}")
    print(f"{(time.perf_counter() - t0) * 1000:.1f}")


def resolve_file(path: Path, name: str, version: str) -> apt.DebStanza | None:
    """nvfabric's exact name=version resolution over an index file, mapped not read."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as index:
        return apt.pick(apt.find_stanzas(index, [name]), name, "amd64", apt.upstream(version))


def dctrl_ms(grep: str, path: Path, name: str, version: str) -> tuple[float, float, bool]:
    argv = [grep, "-X", "-F", "Package", name, "-a", "-F", "Version", version,
            "-s", "Package,Version,Filename,SHA256", str(path)]
    hit = name in subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    def once() -> None:
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)

    once()
    return median_ms(once, 5), peak_rss_mb(argv), hit


def main() -> int:
    # 1. synthetic 5 MB index, in-process
    index = synthetic_index()
    stanzas = index.count(b"\nPackage: ") + 1
    req = Request(WANTED[1], "x86_64", ("fabricmanager",), "apt")

    def resolve() -> None:
        [art] = apt.resolve(index, ("bench",), "https://r", req)
        assert art.version == f"{WANTED[1]}-1"

    resolve()
    ms = median_ms(resolve, 21)
    line(f"synthetic index ({len(index) / 1e6:.1f} MB, {stanzas} stanzas)",
         f"resolve fabricmanager {WANTED[1]}: median {ms:.1f} ms in-process "
         f"(target < {TARGET_MS:.0f} ms: {'ok' if ms < TARGET_MS else 'OVER'})")
    grep, grep_note = grep_dctrl()
    line("grep-dctrl", grep or f"not available: {grep_note}")
    if grep:
        line("grep-dctrl availability", grep_note)
    with tempfile.TemporaryDirectory() as tmp:
        synth = Path(tmp) / "Packages"
        synth.write_bytes(index)
        if grep:
            g_ms, g_rss, hit = dctrl_ms(grep, synth, WANTED[0], f"{WANTED[1]}-1")
            line("grep-dctrl, same query on the synthetic index",
                 f"median {g_ms:.1f} ms whole process, peak RSS {g_rss:.1f} MiB"
                 f"{'' if hit else ' (NO MATCH)'}")

    # 2. Debian's own index of this release
    path, note = debian_index()
    line("Debian index", note)
    if path is None:
        return 0
    data = path.read_bytes()
    count = data.count(b"\nPackage: ") + 1
    name = "bash"
    found = apt.find_stanzas(data, [name])
    version = found[-1].version
    del data

    def ours() -> None:
        assert resolve_file(path, name, version) is not None

    ours()
    our_ms = median_ms(ours, 5)
    base_rss = peak_rss_mb([PY, "-c", "import nvfabric.artifacts.apt, debian.deb822"])
    our_rss = peak_rss_mb([PY, __file__, "--child", str(path), name, version])
    line(f"Debian main index ({path.stat().st_size / 1e6:.1f} MB, {count} stanzas)",
         f"nvfabric {name}={version}: median {our_ms:.1f} ms in-process (map + resolve), "
         f"peak RSS {our_rss:.1f} MiB (interpreter + imports alone {base_rss:.1f} MiB)")
    if grep:
        g_ms, g_rss, hit = dctrl_ms(grep, path, name, version)
        line("grep-dctrl, same query on the Debian index",
             f"median {g_ms:.1f} ms whole process, peak RSS {g_rss:.1f} MiB"
             f"{'' if hit else ' (NO MATCH)'}")
    shutil.rmtree(path.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        sys.exit(0)
    sys.exit(main())

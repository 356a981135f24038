"""Stand-in fabric archives for the image and layout tests: a driver release of NVIDIA's redist
shape (manifest of the real schema, ``<component>-linux-<platform>-<version>-archive.tar.xz``
archives with one top directory) whose inner layout is the one the real archives have
(src/nvfabric/artifacts/tables.py VENDOR_LAYOUT cites it: fabric manager's ``bin/``, ``lib/``,
``etc/fabricmanager.cfg``, ``share/nvidia/nvswitch/*_topology``, ``include/``, ``systemd/``;
NVLSM's ``sbin/``, ``lib/``, ``share/nvidia/nvlsm/``), and whose daemons are the simulator's
fake daemons: each program is a launcher of the fake of its name, run by the nvfabric that
runs the test (``python``: the interpreter of this venv; ``frozen``: a PyInstaller build at
the path given, as inside an image). A launcher finds its simulated node from wherever it is
laid out (:func:`nvfabric.effects.frozen.fake_target`), so a node simulated ``--driver-only``
runs the archive's daemons, never a fake of its own.

NVIDIA's servers are not reachable here; these archives are served from a local mirror
(a directory, or tests/cli/test_fetch_mirror.py's HTTP mirror).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from nvfabric.effects.frozen import FAKE_FLAG
from nvfabric.simulate.fakes import SHIPPED_FM_CFG, SHIPPED_IMEX_CFG, SHIPPED_NVLSM_CONF
from tests.cli.test_fetch_mirror import RedistRelease, make_archive, sha256

#: The NVLSM calendar version of the stand-in release.
NVLSM_VERSION = "2025.06.6"
PLATFORMS = {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}

PYTHON_LAUNCHER = """\
#!{python}
# stand-in for NVIDIA's {prog}: the nvfabric simulator's fake of that name
import sys

from nvfabric.effects.frozen import fake_target
from nvfabric.simulate import fakebin

prog, root = fake_target(__file__)
sys.exit(fakebin.main(prog, sys.argv[1:], root=root))
"""


def launcher(prog: str, binary: str | None = None) -> bytes:
    """A stand-in daemon ``prog``: run by this venv's interpreter (``binary`` None) or by the
    nvfabric build at ``binary`` (its hidden fake flag, as ``nvfabric simulate`` writes it)."""
    if binary is None:
        return PYTHON_LAUNCHER.format(python=sys.executable, prog=prog).encode()
    return f"#!{binary} {FAKE_FLAG}\n# stand-in for NVIDIA's {prog}\n".encode()


def archive_files(component: str, version: str, binary: str | None) -> dict[str, bytes]:
    """The members of one stand-in archive (under its top directory), links excluded."""
    if component == "fabricmanager":
        return {
            "bin/nv-fabricmanager": launcher("nv-fabricmanager", binary),
            "bin/nvswitch-audit": b"#!/bin/false\n",
            "lib/libnvfm.so.1": b"\x7fELF stand-in libnvfm\n",
            "etc/fabricmanager.cfg": SHIPPED_FM_CFG.encode(),
            "share/nvidia/nvswitch/dgxb200_hgxb200_topology": b"stand-in topology\n",
            "share/nvidia/nvswitch/dgxh100_hgxh100_topology": b"stand-in topology\n",
            "include/nv_fm_agent.h": b"/* stand-in */\n",
            "systemd/nvidia-fabricmanager.service": b"[Service]\n",
            "LICENSE.txt": b"licence\n",
        }
    if component == "nvlsm":
        return {
            "sbin/nvlsm": launcher("nvlsm", binary),
            "lib/libgrpc_mgr.so": b"\x7fELF stand-in grpc_mgr\n",
            "share/nvidia/nvlsm/nvlsm.conf": SHIPPED_NVLSM_CONF.encode(),
            "share/nvidia/nvlsm/grpc_mgr.conf": b"# stand-in\n",
            "share/nvidia/nvlsm/device_configuration.conf": b"# stand-in\n",
            "LICENSE.txt": b"licence\n",
        }
    if component == "imex":
        return {
            "bin/nvidia-imex": launcher("nvidia-imex", binary),
            "bin/nvidia-imex-ctl": launcher("nvidia-imex-ctl", binary),
            "etc/nvidia-imex/config.cfg": SHIPPED_IMEX_CFG.encode(),
            "LICENSE.txt": b"licence\n",
        }
    lib = {"libnvidia_nscq": "libnvidia-nscq", "libnvsdm": "libnvsdm"}[component]
    return {f"lib/{lib}.so.{version}": f"\x7fELF stand-in {lib}\n".encode(),
            "LICENSE.txt": b"licence\n"}


def archive_links(component: str, version: str) -> dict[str, str]:
    """The symbolic links of one stand-in archive (as the real ones carry)."""
    if component == "fabricmanager":
        return {"lib/libnvfm.so": "libnvfm.so.1"}
    if component == "libnvidia_nscq":
        return {"lib/libnvidia-nscq.so.2": f"libnvidia-nscq.so.{version}"}
    return {}


def stand_in_release(driver: str, binary: str | None = None,
                     components: tuple[str, ...] = ("fabricmanager", "libnvidia_nscq",
                                                    "libnvsdm", "nvlsm", "imex"),
                     ) -> RedistRelease:
    """The driver release ``driver`` with stand-in archives of ``components`` for x86_64 and
    sbsa (libnvsdm x86_64 only, as published)."""
    manifest: dict[str, Any] = {"release_date": "2025-10-09", "release_label": driver,
                                "release_product": "nvidia-driver"}
    archives: dict[str, bytes] = {}
    for comp in components:
        version = NVLSM_VERSION if comp == "nvlsm" else driver
        entry: dict[str, Any] = {"name": comp, "license": "NVIDIA Driver",
                                 "license_path": f"{comp}/LICENSE.txt", "version": version}
        for arch, platform in PLATFORMS.items():
            if comp == "libnvsdm" and arch != "x86_64":
                continue
            prefix = "nvidia-" if comp == "imex" else ""
            top = f"{prefix}{comp}-{platform}-{version}-archive"
            data = make_archive(top, archive_files(comp, version, binary),
                                archive_links(comp, version))
            rel = f"{comp}/{platform}/{top}.tar.xz"
            archives[rel] = data
            entry[platform] = {"relative_path": rel, "sha256": sha256(data),
                               "md5": hashlib.md5(data).hexdigest(),  # noqa: S324 - schema
                               "size": str(len(data))}
        manifest[comp] = entry
    return RedistRelease(driver, manifest, archives)


def write_mirror(directory: Path, release: RedistRelease) -> Path:
    """``release`` as a mirror directory (``--mirror DIR``); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"redistrib_{release.driver}.json").write_text(json.dumps(release.manifest))
    for path, data in release.archives.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(data)
    return directory

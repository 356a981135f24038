"""packaging/systemd/nvfabric-textfile.{service,timer} under a real systemd user manager
(tests/integration/usermanager.py): the timer starts the service, which writes the fabric's
metrics where node_exporter's textfile collector reads them, and renews the file each time;
with the collector's directory missing the run is skipped, not failed. The units are the
shipped files; a drop-in points ExecStart= at a simulated DGX B200 (``--root``) and a
directory of the test, and shortens the timer's interval from 1 min to 2 s."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.debroot import REPO
from tests.integration.usermanager import NVFABRIC, PROTECT_HOME, UserManager
from tests.runkit import sim

SERVICE = "nvfabric-textfile.service"
TIMER = "nvfabric-textfile.timer"


@pytest.fixture(scope="module")
def manager() -> Iterator[UserManager]:
    m = UserManager()
    try:
        m.start()
        yield m
    finally:
        m.stop()


#: The shipped service's file, a host path (under --root in the test).
PROM = "/var/lib/node_exporter/textfile_collector/nvfabric.prom"


def _install(m: UserManager, tmp_path: Path, make_collector: bool = True) -> Path:
    """The shipped units with the test's drop-ins; the file the service writes (under the
    simulated node, as ``status --root`` resolves every host path)."""
    node = sim(tmp_path, "dgx-b200")
    prom = node / PROM.lstrip("/")
    if make_collector:
        prom.parent.mkdir(parents=True)
    for unit in (SERVICE, TIMER):
        shutil.copyfile(REPO / "packaging/systemd" / unit, m.units / unit)
    assert f"--textfile {PROM}\n" in (m.units / SERVICE).read_text()
    for value in (str(node), str(NVFABRIC)):
        assert not set(value) & set("%$\"\\ \n"), value
    (m.units / f"{SERVICE}.d").mkdir(exist_ok=True)
    (m.units / f"{SERVICE}.d/test.conf").write_text(
        "[Unit]\nConditionPathIsDirectory=\n"
        f"ConditionPathIsDirectory={prom.parent}\n"
        "[Service]\nExecStart=\n"
        f"ExecStart={NVFABRIC} status --root {node} --textfile {PROM}\n"
        f"ReadWritePaths=\nReadWritePaths={node}\n"
        # the test's files are under /tmp, which PrivateTmp= would hide
        "PrivateTmp=no\n" + PROTECT_HOME)
    (m.units / f"{TIMER}.d").mkdir(exist_ok=True)
    (m.units / f"{TIMER}.d/test.conf").write_text(
        "[Timer]\nOnBootSec=\nOnUnitActiveSec=\nOnActiveSec=0\nOnUnitActiveSec=2s\n"
        "AccuracySec=100ms\n")
    m.systemctl("daemon-reload")
    return prom


def _cleanup(m: UserManager) -> None:
    m.systemctl("stop", TIMER, SERVICE, check=False)
    m.systemctl("reset-failed", TIMER, SERVICE, check=False)
    for unit in (SERVICE, TIMER):
        (m.units / unit).unlink(missing_ok=True)
        shutil.rmtree(m.units / f"{unit}.d", ignore_errors=True)
    m.systemctl("daemon-reload")


def _until(predicate: object, what: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"after {bound_s} s still not: {what}")
        time.sleep(0.1)


def test_the_timer_renews_the_textfile_for_node_exporter(manager: UserManager,
                                                         tmp_path: Path) -> None:
    prom = _install(manager, tmp_path)
    collector = prom.parent
    try:
        manager.systemctl("start", TIMER)
        try:
            _until(prom.exists, f"{prom} written by the timer's first run")
        except AssertionError:
            raise AssertionError(str(manager.show(SERVICE, "Result", "ExecMainStatus",
                                                  "ConditionResult"))) from None
        text = prom.read_text()
        assert "nvfabric_build_info{" in text and 'nvfabric_verdict{verdict="' in text
        first = prom.stat().st_mtime_ns
        _until(lambda: prom.stat().st_mtime_ns != first, "the file renewed by the next run")
        props = manager.show(SERVICE, "Result", "ExecMainStatus")
        # a fabric manager not running here: status exits 1, which the unit counts as success
        assert props["Result"] == "success", props
        assert props["ExecMainStatus"] in ("0", "1"), props
        assert list(collector.iterdir()) == [prom], "temp file renamed away each time"
    finally:
        _cleanup(manager)


def test_without_the_collectors_directory_the_run_is_skipped(manager: UserManager,
                                                             tmp_path: Path) -> None:
    collector = _install(manager, tmp_path, make_collector=False).parent
    try:
        manager.systemctl("start", SERVICE)
        props = manager.show(SERVICE, "ActiveState", "ConditionResult")
        assert props == {"ActiveState": "inactive", "ConditionResult": "no"}, props
        assert not collector.exists()
    finally:
        _cleanup(manager)

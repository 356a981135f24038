"""What ran against what should have (nvfabric.triage.checks) and ``systemctl status`` as a
bug report shows it (nvfabric.triage.units), on the real captures of ../shared/corpus/logs."""

from __future__ import annotations

import gzip
import io

import pytest

from nvfabric.triage import triage_stream
from nvfabric.triage.checks import Ran, check, nvlsm_running
from nvfabric.triage.units import UnitState, parse, timespan
from tests.cases import CORPUS
from tests.conftest import REPO

LOGS = CORPUS / "logs"
PRE_NVL5 = (LOGS / "fm-590.48.01-systemctl-status-pre-nvl5-node-01.txt").read_text()
B200_FM = (LOGS / "bottlerocket-b200-fm-nvlsm-guid-systemctl-status-kk142.txt").read_text()


def test_unit_state_of_the_pre_nvl5_capture() -> None:
    u = parse(PRE_NVL5)
    assert (u.installed, u.enabled, u.active, u.sub, u.running) == (
        True, True, "active", "running", True)
    assert u.age_s == 3840.0  # "1h 4min ago"
    assert u.processes == ("/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/"
                           "fabricmanager.cfg",)
    assert not nvlsm_running(u)


def test_unit_state_of_the_b200_capture_with_the_port_guid() -> None:
    u = parse(B200_FM.split("\n", 1)[1])
    assert u.running and u.age_s == 780.0  # "13min ago"
    assert nvlsm_running(u)  # fabric manager was given -g <GUID>


@pytest.mark.parametrize(("text", "seconds"), [
    ("13min", 780.0), ("1h 4min", 3840.0), ("2 days", 172800.0), ("5s", 5.0),
    ("1 month 2 weeks", 2629800.0 + 1209600.0), ("nothing", None)])
def test_systemd_timespans(text: str, seconds: float | None) -> None:
    assert timespan(text) == seconds


def test_a_unit_systemctl_cannot_find() -> None:
    assert parse("Unit nvidia-imex.service could not be found.") == UnitState(installed=False)


def test_fabric_manager_without_nvlsm_on_nvlink5_is_nvlsm_missing() -> None:
    found = check("nvlink5", "590.48.01", Ran(fm=parse(PRE_NVL5)))
    assert [f.code for f in found] == ["nvlsm_missing"]
    assert found[0].fields["section"] == "systemctl status nvidia-fabricmanager.service"
    assert check("nvswitch", "590.48.01", Ran(fm=parse(PRE_NVL5))) == []


def test_fabric_manager_on_a_gb200_tray() -> None:
    found = check("mnnvl", "590.48.01", Ran(fm=parse(PRE_NVL5)))
    assert [(f.code, f.severity) for f in found] == [("fm_on_compute_tray", "warning")]


def test_fabric_manager_enabled_where_nothing_is_to_manage_is_info() -> None:
    failed = parse(PRE_NVL5.replace("active (running)", "failed (Result: exit-code)"))
    assert failed.active == "failed"
    found = check("none", None, Ran(fm=failed))
    assert [(f.code, f.severity) for f in found] == [("fm_not_applicable", "info")]


def test_imex_host_unit_with_nv_err_in_use_is_an_owner_conflict() -> None:
    active = parse(PRE_NVL5.replace("nvidia-fabricmanager", "nvidia-imex"))
    found = check("mnnvl", None, Ran(imex=active, in_use=("/var/log/nvidia-imex.log",)))
    assert [f.code for f in found] == ["imex_owner_conflict"]
    assert "systemctl mask" in found[0].hint
    assert check("mnnvl", None, Ran(imex=active)) == []


@pytest.mark.parametrize(("component", "version", "driver", "key", "mismatch"), [
    ("fabricmanager", "530.30.02", "530.41.03", "fm_version", True),
    ("fabricmanager", "550.90.7", "550.90.07", "fm_version", False),  # numeric per field
    ("imex", "580.105.08", "580.159.04", "imex_version", True),
    ("imex", "570.00", "570.00", "imex_version", False),
])
def test_versions_against_the_driver(component: str, version: str, driver: str, key: str,
                                     mismatch: bool) -> None:
    found = check("mnnvl", driver, Ran(versions={component: (version,)}))
    assert [f.code for f in found] == (["version_mismatch"] if mismatch else [])
    if mismatch:
        assert found[0].fields[key] == version
        assert found[0].fields["driver_version"] == driver


def test_nv_err_in_use_in_an_imex_log_section_of_a_report() -> None:
    """A GB200 report whose IMEX log has the NV_ERR_IN_USE failure and whose host unit is
    active: the report's own sections give the owner conflict."""
    src = gzip.decompress((REPO / "tests/data/bugreports/gb200-tray-unhealthy.log.gz")
                          .read_bytes()).decode()
    active = PRE_NVL5.replace("nvidia-fabricmanager", "nvidia-imex").replace(
        "nv-fabricmanager", "nvidia-imex")
    src = src.replace("Unit nvidia-imex.service could not be found.", active)
    src = src.replace("[Sep 18 2026 06:40:33] [INFO] [tid 77] Logging level = 4",
                      "[Sep 18 2026 06:40:33] [ERROR] [tid 77] Failed to allocate Imex session "
                      "NV_ERR_IN_USE")
    t = triage_stream(io.BytesIO(src.encode()), "edited")
    conflict = [f for f in t.findings if f.code == "imex_owner_conflict"]
    assert conflict and conflict[0].fields["evidence"] == ["/var/log/nvidia-imex.log"]
    assert t.exit_code == 1


P11_LPF_GUIDS = ("0xe09d730300e400e8", "0xe09d730300e400e9", "0xe09d730300e400ea",
                 "0xe09d730300e400eb")


def test_fabric_manager_on_a_guid_that_is_no_lpf_port_of_the_node() -> None:
    """The B200 capture's fabric manager runs with -g 0xe09d730300000001: on the P11 node
    (LPF ports …e8-…eb) that GUID is another node's."""
    fm = parse(B200_FM.split("\n", 1)[1])
    found = check("nvlink5", "570.148.08", Ran(fm=fm), P11_LPF_GUIDS)
    assert [f.code for f in found] == ["management_port_mismatch"]
    assert found[0].fields["guid"] == "0xe09d730300000001"
    own = parse(B200_FM.split("\n", 1)[1].replace("0xe09d730300000001", "0xe09d730300e400e9"))
    assert check("nvlink5", "570.148.08", Ran(fm=own), P11_LPF_GUIDS) == []
    assert check("nvlink5", "570.148.08", Ran(fm=fm), None) == []  # no ibstat: not judged

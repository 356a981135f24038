"""The rules of a live kernel finding (nvfabric.rules.live): the verdict it gives per fabric
kind, the device it is counted on, the boot window, and /status with the events on top."""

from __future__ import annotations

from nvfabric.model.findings import Finding
from nvfabric.rules.live import debounced, device_of, level_of, overlay

FATAL = Finding("nvswitch_fatal_error", "error", "SXid 24007", fields={"pci": "0000:08:00.0"})
TRAINING = Finding("nvlink_training_warning", "warning", "rx detect")


def test_a_verdict_is_raised_never_lowered() -> None:
    status = {"verdict": "degraded", "findings": [{"code": "fm_inactive"}], "reasons": ["r"]}
    events = {"level": "unhealthy", "findings": [FATAL.to_json()], "lines": 3}
    out = overlay(status, events)
    assert out["verdict"] == "unhealthy" and status["verdict"] == "degraded"  # a new dict
    assert [f["code"] for f in out["findings"]] == ["fm_inactive", "nvswitch_fatal_error"]
    assert out["reasons"][-1].startswith("the kernel log since the run started")
    assert out["kernel"]["lines"] == 3
    unhealthy = {"verdict": "unhealthy", "findings": []}
    assert overlay(unhealthy, {"level": "degraded", "findings": []})["verdict"] == "unhealthy"
    assert overlay({"verdict": "healthy"}, {"level": None})["verdict"] == "healthy"


def test_levels_by_fabric_and_the_device_counted_on() -> None:
    assert level_of(FATAL, "nvswitch") == "unhealthy"
    assert level_of(FATAL, "none") is None and level_of(FATAL, None) is None
    reset = Finding("nvlink_xid_error", "error", "x", fields={"immediate_action": "RESET_GPU"})
    evaluate = Finding("nvlink_xid_error", "warning", "x",
                       fields={"immediate_action": "XID_154_EVAL"})
    assert level_of(reset, "mnnvl") == "unhealthy" and level_of(evaluate, "mnnvl") is None
    assert device_of(FATAL) == "0000:08:00.0" and device_of(TRAINING) == ""


def test_only_link_training_in_the_window_after_the_driver_loaded_is_held_back() -> None:
    assert debounced(TRAINING, 100_000_000, 0, 300)
    assert not debounced(TRAINING, 400_000_000, 0, 300)
    assert debounced(TRAINING, 400_000_000, 200_000_000, 300)
    assert not debounced(FATAL, 1, 0, 300) and not debounced(TRAINING, None, 0, 300)

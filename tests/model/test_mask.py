"""Health mask decoding per field, as nvml.h defines NVML_GPU_FABRIC_HEALTH_MASK_*."""

from __future__ import annotations

import pytest

from nvfabric.model.mask import FIELDS, decode_mask, decode_smi, summary_from_smi


def _values(mask: int) -> dict[str, tuple[str | None, str | None]]:
    return {f.name: (f.value, f.impact) for f in decode_mask(mask)}


def test_zero_mask_is_not_supported_everywhere() -> None:
    assert {v for v, _ in _values(0).values()} == {"not_supported"}
    assert all(i is None for _, i in _values(0).values())


@pytest.mark.parametrize(
    ("mask", "field", "value", "impact"),
    [
        (1 << 0, "degraded_bandwidth", "true", "degraded"),
        (2 << 0, "degraded_bandwidth", "false", None),
        (1 << 2, "route_recovery", "true", "degraded"),
        (1 << 4, "route_unhealthy", "true", "unhealthy"),
        (2 << 4, "route_unhealthy", "false", None),
        (1 << 6, "access_timeout_recovery", "true", "degraded"),
        (1 << 8, "incorrect_configuration", "none", None),
        (2 << 8, "incorrect_configuration", "incorrect_sysguid", "unhealthy"),
        (4 << 8, "incorrect_configuration", "no_partition", "unhealthy"),
        (5 << 8, "incorrect_configuration", "insufficient_nvlinks", "unhealthy"),
        (0xF << 8, "incorrect_configuration", "other", "unhealthy"),
        (1 << 12, "partition_assigned", "true", None),
        (2 << 14, "gfm_state", "disconnected", None),
    ],
)
def test_each_field_at_its_shift(mask: int, field: str, value: str, impact: str | None) -> None:
    assert _values(mask)[field] == (value, impact)


def test_fields_do_not_overlap() -> None:
    used = 0
    for f in FIELDS:
        bits = f.width << f.shift
        assert used & bits == 0, f.name
        used |= bits


@pytest.mark.parametrize(
    ("key", "printed", "value", "impact"),
    [
        ("Bandwidth", "Full", "false", None),
        ("Bandwidth", "Degraded", "true", "degraded"),
        ("Route Recovery in progress", "False", "false", None),
        ("Route Unhealthy", "True", "true", "unhealthy"),
        ("route_unhealthy", "True", "true", "unhealthy"),
        ("Access Timeout Recovery", "N/A", None, None),
        ("Incorrect Configuration", "None", "none", None),
        ("Incorrect Configuration", "Incorrect SysGuid", "incorrect_sysguid", "unhealthy"),
        ("Partition Assigned", "False", "false", None),
    ],
)
def test_nvidia_smi_rows(key: str, printed: str, value: str | None, impact: str | None) -> None:
    f = decode_smi(key, printed)
    assert f is not None and (f.value, f.impact) == (value, impact)


def test_rows_that_are_not_mask_fields() -> None:
    assert decode_smi("Summary", "Healthy") is None
    assert summary_from_smi("Limited Capacity") == "limited_capacity"
    assert summary_from_smi("N/A") is None

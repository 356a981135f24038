"""The log formatters in-process: the parts of each kind of line nvfabric writes, RFC 3339
time, JSON objects, and Log's lines through logging (text and JSON)."""

from __future__ import annotations

import io
import json
import logging
import random
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from nvfabric.effects import log as logs
from nvfabric.effects.log import Log
from nvfabric.model.findings import Finding
from tests.runkit import TIMESTAMP


@pytest.fixture
def json_format() -> Iterator[None]:
    logs.set_format("json")
    try:
        yield
    finally:
        logs.set_format("text")


@pytest.mark.parametrize(("line", "parts"), [
    ("nvfabric: fabric ready in 0.501 s (nvlsm pid 5)",
     logs.Parts("nvfabric", "fabric ready in 0.501 s (nvlsm pid 5)")),
    ("nvfabric: error service_exited: nvlsm (pid 5) killed by SIGKILL (hint: read)",
     logs.Parts("nvfabric", "nvlsm (pid 5) killed by SIGKILL (hint: read)", logging.ERROR,
                "service_exited")),
    ("nvfabric: warning registration_error: 1 GPU ...",
     logs.Parts("nvfabric", "1 GPU ...", logging.WARNING, "registration_error")),
    # not a code of the catalogue: an ordinary line
    ("nvfabric: error no_such_code: x", logs.Parts("nvfabric", "error no_such_code: x")),
    ("fabricmanager: Connected to 1 node.", logs.Parts("fabricmanager", "Connected to 1 node.")),
    # a daemon's line that looks like a finding is the daemon's text, not a finding
    ("nvlsm: error service_exited: x", logs.Parts("nvlsm", "error service_exited: x")),
    ("gpu-reset: All done.", logs.Parts("gpu-reset", "All done.")),
    ("  | last line", logs.Parts("", "  | last line")),
    ("Fabric Manager: x", logs.Parts("", "Fabric Manager: x")),
])
def test_parts_of_each_kind_of_line(line: str, parts: logs.Parts) -> None:
    assert logs.parse(line) == parts


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert logs.rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert logs.rfc3339(1796125200.1234) == "2026-12-01T11:40:00.123Z"


def _by_datetime(created: float) -> str:
    """The stamp as the logging formatter made it before (datetime's own rounding)."""
    stamp = datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@pytest.mark.parametrize("created", [
    0.0, 0.0005, 0.0015, 0.9994999, 0.9995, 0.9999994, 0.9999995, 0.9999996, 59.9999999,
    1796125199.9999996, 1796125200.0004996, 951782399.9995, 4102444799.999, 1e9 + 0.5e-6,
    1e9 + 1.5e-6, 1e9 + 2.5e-6,
])
def test_rfc3339_is_the_text_datetime_gave_at_the_edges(created: float) -> None:
    # micro- and millisecond carries, leap day, the year 2100: the same bytes as before
    assert logs.rfc3339(created) == _by_datetime(created)


def test_rfc3339_is_the_text_datetime_gave_for_times_of_the_run() -> None:
    rng = random.Random(15)
    for _ in range(20000):
        created = rng.uniform(1.7e9, 1.9e9)
        assert logs.rfc3339(created) == _by_datetime(created), created


def test_log_text_lines_have_the_timestamp_before_the_old_text() -> None:
    out = io.StringIO()
    log = Log(out)
    log.say("started nvlsm")
    log.finding(Finding("nvlsm_missing", "error", "gone", "install it"))
    log.line("nvlsm: \x1b[2J")
    lines = out.getvalue().splitlines()
    assert [TIMESTAMP.sub("", x, count=1) for x in lines] == [
        "nvfabric: started nvlsm", "nvfabric: error nvlsm_missing: gone (hint: install it)",
        "nvlsm: \\x1b[2J"]
    assert all(TIMESTAMP.match(x) for x in lines)


def test_log_json_lines_are_objects(json_format: None) -> None:
    out = io.StringIO()
    log = Log(out)
    log.say("fabric ready in 1.000 s")
    log.finding(Finding("service_exited", "error", "nvlsm (pid 5) exited", "read"))
    log.line("fabricmanager: caf\u00e9 \x07")
    objs = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(o["level"], o["source"], o["code"], o["message"]) for o in objs] == [
        ("info", "nvfabric", None, "fabric ready in 1.000 s"),
        ("error", "nvfabric", "service_exited", "nvlsm (pid 5) exited (hint: read)"),
        ("info", "fabricmanager", None, "caf\u00e9 \\x07"),
    ]
    assert all(TIMESTAMP.match(o["time"] + " ") for o in objs)


def test_a_closed_stream_never_raises() -> None:
    out = io.StringIO()
    out.close()
    Log(out).say("nobody reads this")  # dropped, as before


def test_a_closed_stream_never_raises_in_json(json_format: None) -> None:
    out = io.StringIO()
    out.close()
    Log(out).say("nobody reads this")


def test_the_format_is_the_one_chosen_at_each_line() -> None:
    out = io.StringIO()
    log = Log(out)
    log.say("as text")
    logs.set_format("json")
    try:
        log.say("as json")
    finally:
        logs.set_format("text")
    log.say("text again")
    first, second, third = out.getvalue().splitlines()
    assert TIMESTAMP.sub("", first, count=1) == "nvfabric: as text"
    assert json.loads(second)["message"] == "as json"
    assert TIMESTAMP.sub("", third, count=1) == "nvfabric: text again"


def test_the_logging_formatters_write_the_same_lines() -> None:
    from nvfabric.effects.logformat import JsonFormatter, TextFormatter

    record = logging.LogRecord("nvfabric", logging.INFO, __file__, 1, "%s",
                               ("nvfabric: error service_exited: nvlsm exited",), None)
    record.created = 1796125200.1234
    assert TextFormatter().format(record) == (
        "2026-12-01T11:40:00.123Z nvfabric: error service_exited: nvlsm exited")
    assert json.loads(JsonFormatter().format(record)) == {
        "time": "2026-12-01T11:40:00.123Z", "level": "error", "source": "nvfabric",
        "message": "nvlsm exited", "code": "service_exited"}


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.set_format("yaml")  # type: ignore[arg-type]


def test_every_line_of_a_refused_or_blocked_run_carries_its_timestamp(tmp_path: Path) -> None:
    # the preflight's refusal and the plan's blockers were printed as a listing without a
    # time, between the run's timestamped lines
    from tests.cli.test_run_dry_checks import registered
    from tests.conftest import run_cli
    from tests.runkit import sim

    root = sim(tmp_path, "dgx-b200")
    registered(root)  # R04: a second start without a reset is refused
    refused = run_cli("run", "--root", str(root))
    blocked_root = sim(tmp_path, "dgx-b200", name="blocked")
    (blocked_root / "sys/module/ib_umad").rename(blocked_root / "sys/module/ib_umad.gone")
    blocked = run_cli("run", "--root", str(blocked_root))
    for proc, code in ((refused, "restart_needs_gpu_reset"), (blocked, "missing_kernel_module")):
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.splitlines()
        assert lines and all(TIMESTAMP.match(line) for line in lines), proc.stderr
        assert any(f"nvfabric: error {code}: " in line for line in lines), proc.stderr

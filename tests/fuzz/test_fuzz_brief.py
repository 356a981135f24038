"""The brief fuzz run of ``make test``: every reader of tests/fuzz/targets.py on its seeds and
a few hundred mutants (fixed random seed, so a failure reproduces), no exception outside the
reader's documented errors. ``make fuzz`` runs the same harness at length (1,000,000+
inputs)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.cases import FUZZ
from tests.fuzz import runner
from tests.fuzz.runner import run_target
from tests.fuzz.targets import Target, targets

TARGETS = targets()


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_reader_survives_mutants_of_its_seeds(target: Target) -> None:
    stats = run_target(target, random.Random(f"brief-{target.name}"), budget_s=60,
                       max_inputs=250, slow_s=10.0, out=None)
    assert stats.inputs == 250
    assert stats.failures == 0, stats.distinct


def test_every_reader_of_the_issue_has_a_target() -> None:
    names = {t.name for t in TARGETS}
    assert names >= {"vpd", "sysfs-procfs-tree", "procfs-text", "services-pidfiles-slurm",
                     "nvidia-smi", "logs", "redist", "apt", "rpm", "imex-nodes",
                     "slurm-hostlist", "imex-ctl", "domain-reports", "node-spec", "fm-config",
                     "imex-config", "numbers", "json",
                     # round 3: triage, install --from (its fetch record and the root's dpkg
                     # status), nvfabric's own state files, --prometheus, run's log lines
                     "triage", "install-from", "install-record", "state-files",
                     "supervisor-job", "gpu-probe-answer", "prometheus", "run-log-lines",
                     # watching after bring-up: the live kernel log, the event history
                     "kmsg", "event-history",
                     # the Slurm prolog reader of the IMEX owner
                     "slurm-prolog"}


@pytest.mark.parametrize("name,target", [
    ("ready-file-nested-brackets.json", "state-files"),  # the ready file (first byte 0)
    ("triage-lspci-hex-field-too-long.log", "triage"),
    ("smi-attached-gpus-superscript.txt", "nvidia-smi"),
    ("smi-attached-gpus-superscript.txt", "prometheus"),
    ("imex-config-blank-line-run.cfg", "imex-config"),
])
def test_round_3_inputs_are_refused_cleanly_by_their_targets(name: str, target: str) -> None:
    # each example of tests/data/fuzz is an input its target handles (it crashed them before)
    data = (FUZZ / name).read_bytes()
    if target == "state-files":
        data = b"\x00" + data
    (chosen,) = [t for t in TARGETS if t.name == target]
    chosen.seeds()  # the target's tree or directory, made once
    try:
        chosen.run(data)
    except chosen.documented:
        pass
    finally:
        if chosen.teardown is not None:
            chosen.teardown()


def _target(name: str, run: Callable[[bytes], None]) -> Target:
    return Target(name, lambda: [b"seed"], run)


def test_an_input_is_timed_in_cpu_time_not_wall_time() -> None:
    # a loaded machine makes a reader wait, not work: 50 ms asleep is no slow input, 50 ms
    # of computing is one
    asleep = run_target(_target("asleep", lambda _d: time.sleep(0.05)), random.Random(1),
                        budget_s=60, max_inputs=10, slow_s=0.04, out=None)
    assert asleep.inputs == 10 and asleep.slowest_s < 0.04

    def busy(_data: bytes) -> None:
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass

    working = run_target(_target("busy", busy), random.Random(1), budget_s=60, max_inputs=3,
                         slow_s=0.04, out=None)
    assert working.slowest_s >= 0.05


def test_the_budget_is_cpu_time() -> None:
    # 20 inputs asleep for 20 ms each: 0.4 s of wall time, almost no CPU: all of them run
    # within a budget of 0.2 CPU seconds
    stats = run_target(_target("asleep", lambda _d: time.sleep(0.02)), random.Random(1),
                       budget_s=0.2, max_inputs=20, slow_s=1.0, out=None)
    assert stats.inputs == 20


def test_an_input_that_blocks_is_cut_by_the_wall_clock_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "HANG_WALL_S", 0.3)
    stats = run_target(_target("blocked", lambda _d: time.sleep(30)), random.Random(1),
                       budget_s=60, max_inputs=1, slow_s=1.0, out=None)
    assert stats.failures == 1 and list(stats.distinct) == ["_Hang"]


def test_no_reader_takes_the_count_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # the fastest reader runs last and once took what the others left: half the count
    def slow(_data: bytes) -> None:
        end = time.process_time() + 0.002
        while time.process_time() < end:
            pass

    fake = [_target("slow-a", slow), _target("slow-b", slow), _target("trivial", len)]
    monkeypatch.setattr(runner, "targets", lambda: fake)
    report = runner.run_all(900, 0.3, 1, 1.0, None, None)
    counts = {s.name: s.inputs for s in report.stats}
    assert counts["trivial"] <= runner.SHARE_CAP * 900 / 3, counts
    assert counts["slow-a"] < 300 and counts["slow-b"] < 300, counts  # the time ran out



def test_the_mutator_reaches_the_kinds_of_bad_input() -> None:
    # the harness is only as good as what it feeds: within a few thousand mutants of one
    # seed it must produce each kind the issue lists
    from tests.fuzz.mutate import mutate

    rng = random.Random(1)
    seed = b"numa_node: 1\nPackage: nvidia-fabricmanager\nSize: 42\n"
    seen = [mutate(rng, seed, [seed], 300_000) for _ in range(3000)]
    kinds = {
        "superscript digit": lambda d: "²".encode() in d,
        "over 4,300 digits": lambda d: b"9" * 4301 in d or b"0" * 5000 in d,
        "NUL": lambda d: b"\x00" in d,
        "unicode line separator": lambda d: "\u2028".encode() in d,
        "deep nesting": lambda d: b"[" * 200 in d or b'{"a":' * 200 in d,
        "long line": lambda d: any(len(line) > 100_000 for line in d.split(b"\n")),
        "repeated line": lambda d: d.count(b"Package: nvidia-fabricmanager") > 100,
        "glued fields": lambda d: b"numa_node:1" in d or b"Size:42" in d,
    }
    missing = [k for k, hit in kinds.items() if not any(hit(d) for d in seen)]
    assert missing == []

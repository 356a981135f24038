"""The brief fuzz run of ``make test``: every reader of tests/fuzz/targets.py on its seeds and
a few hundred mutants (fixed random seed, so a failure reproduces), no exception outside the
reader's documented errors. ``make fuzz`` runs the same harness at length (1,000,000+
inputs)."""

from __future__ import annotations

import random

import pytest

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
                     "imex-config", "numbers", "json"}


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
    }
    missing = [k for k, hit in kinds.items() if not any(hit(d) for d in seen)]
    assert missing == []

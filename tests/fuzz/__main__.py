"""``python -m tests.fuzz``: the long fuzz run of ``make fuzz``.

Mutates the seeds of every reader (tests/fuzz/targets.py) in-process, feeds each mutant to its
reader and counts, per reader, the inputs, the failures (an exception outside the reader's
documented errors, or a broken invariant) and the slowest input. Exit 1 on any failure, any
input slower than ``--slow`` seconds, or fewer than ``--min-inputs`` inputs in all; failing and
slow inputs are saved under ``--out`` (one file each, named by reader and number).
"""

from __future__ import annotations

import argparse
import sys

from tests.fuzz.runner import run_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz")
    ap.add_argument("--inputs", type=int, default=1_100_000,
                    help="inputs in all, spread over the readers by their speed")
    ap.add_argument("--seconds", type=float, default=1080.0,
                    help="CPU seconds in all (the run stops at whichever comes first)")
    ap.add_argument("--min-inputs", type=int, default=1_000_000)
    ap.add_argument("--slow", type=float, default=1.0, help="an input slower than this fails")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--only", default=None, help="comma-separated reader names")
    ap.add_argument("--out", default="build/fuzz")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    report = run_all(args.inputs, args.seconds, args.seed, args.slow, only, args.out,
                     progress=sys.stderr)
    print(report.text())
    ok = report.ok(args.min_inputs if only is None else 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

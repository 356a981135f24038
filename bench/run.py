"""Run every benchmark (bench/bench_*.py) in turn and print their figures."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"=== {script.name}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, str(script)], check=False).returncode
        print(f"=== {script.name}: {'ok' if rc == 0 else f'FAILED ({rc})'} "
              f"in {time.perf_counter() - t0:.1f} s\n", flush=True)
        if rc:
            failed.append(script.name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

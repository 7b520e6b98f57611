"""Forced races on a loaded machine: every correct answer keeps its points in every run.

    .venv/bin/python benchmarks/races_under_load.py [--runs 20]

While one busy process per core spins, each race check the course forces (01's claims, 02's
transcript write inside the transaction, 06's admissions) grades the solutions through the real
judge and learner sandboxes (tests/checked_answers.py), RUNS times. It prints how many runs gave
every check its points, and the seconds a run took; it exits non-zero unless all did. The schedule
waits for nothing on the wall clock, so load only makes the runs slower.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RACES = {"01_claims.ipynb": "test_claim_race", "02_fencing.ipynb": "test_fences_inside_the_transaction",
         "06_explore.ipynb": "test_admit_generation"}


def _spin(stop: multiprocessing.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    sys.path.insert(0, str(ROOT / "tests"))
    import checked_answers

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 1)]
    for spinner in spinners:
        spinner.start()
    kept, seconds = 0, []
    try:
        for run in range(runs):
            started = time.monotonic()
            failed = {}
            for notebook, check in RACES.items():
                verdict = checked_answers.verdicts(notebook, only={check})[check]
                if not verdict["passed"]:
                    failed[check] = verdict["message"][:200]
            seconds.append(time.monotonic() - started)
            kept += not failed
            print(f"run {run + 1:2d}: {'every check kept its points' if not failed else failed} ({seconds[-1]:.1f} s)",
                  flush=True)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join(5)
    print(f"{kept} of {runs} runs gave every correct answer its points, with {len(spinners)} busy processes "
          f"({sum(seconds) / len(seconds):.1f} s a run)")
    return 0 if kept == runs else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the sandbox and the out-of-kernel checks cost, against plain nbgrader, in one run.

    .venv/bin/python benchmarks/grading_isolation_benchmark.py [--rounds 2]

Two throwaway course roots grade the same complete submission (the solutions, four notebooks):

* "plain": nbgrader's own autograde, as this course ran it before the sandbox (every test,
  hidden ones included, in the learner's kernel, with the instructor's file rights);
* "protected": this course's nbgrader_config (kernel in a bubblewrap sandbox, hidden tests
  stripped, each graded cell decided by its own sandboxed checker).

Rounds alternate plain / protected so that a noisy machine slows both alike. It prints seconds
per submission for each and the ratio protected / plain (the target is at most 1.3).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from course.grading.nbgrader import commands

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"

PLAIN_CONFIG = """\
from pathlib import Path
root = Path(__file__).resolve().parent
c.CourseDirectory.course_id = "crash-recovery"
c.CourseDirectory.root = str(root)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
"""
PROTECTED_CONFIG = """\
from pathlib import Path
from course.grading.nbgrader.config import configure
configure(c, Path(__file__).resolve().parent)
"""


def course(base: Path, name: str, config: str) -> Path:
    root = base / name
    (root / "solutions").mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(config)
    shutil.copytree(SOLUTIONS, root / "solutions" / "ch12")
    commands.run_nbgrader(root, "generate_assignment", "ch12", "--force")
    shutil.copytree(SOLUTIONS, root / "submitted" / "complete" / "ch12")
    return root


def grade(root: Path) -> float:
    start = time.monotonic()
    done = commands.run_nbgrader(root, "autograde", "ch12", "--student", "complete", "--force", check=False)
    seconds = time.monotonic() - start
    if done.returncode:
        sys.exit(f"autograde failed in {root.name}:\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as scratch:
        plain = course(Path(scratch), "plain", PLAIN_CONFIG)
        protected = course(Path(scratch), "protected", PROTECTED_CONFIG)
        times: dict[str, list[float]] = {"plain": [], "protected": []}
        for index in range(rounds):
            for name, root in (("plain", plain), ("protected", protected)):
                times[name].append(grade(root))
                print(f"round {index + 1}: {name:<9} {times[name][-1]:6.1f} s", flush=True)
    plain_s, protected_s = (statistics.median(times[k]) for k in ("plain", "protected"))
    print(f"seconds per complete submission (median of {rounds}): plain nbgrader {plain_s:.1f}, "
          f"protected {protected_s:.1f}")
    print(f"ratio protected / plain = {protected_s / plain_s:.2f} (target <= 1.3)")


if __name__ == "__main__":
    main()

"""What class-scale grading costs: plain serial nbgrader against `course autograde --jobs N`, in one run.

    .venv/bin/python benchmarks/grading_benchmark.py [--k 6] [--jobs 2] [--no-one-worker]

K complete submissions (the solutions, copied K times) are graded three times, each in a
throwaway course root with this course's nbgrader_config (sandbox, hidden tests stripped,
out-of-kernel checks):

1. "serial nbgrader": one `nbgrader autograde ch12 --student S` process per student, one after
   another (how `course autograde` graded before, and what formgrader's button runs);
2. "course --jobs N": `course autograde --jobs N`, the whole command, start-up included;
3. "course --jobs 1": the same with one worker (seconds per submission, start-up paid once).

It prints, for each, seconds per submission and the machine's busy CPU-seconds per submission
(from /proc/stat over the pass: grading's sandboxes, judges and workers are all counted, other
load on the machine too); then the ratio (2) / (1) (the target is at most 0.35), seconds per
submission with one worker (the target is at most 1.2 x 7.1-7.5 s), and the projected time for a
class of 200 here and on 16 cores. Every pass must give every submission full marks, or the run
stops: a fast wrong grader is no result.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course.grading.nbgrader import commands

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
CONFIG = "from pathlib import Path\nfrom course.grading.nbgrader.config import configure\nconfigure(c, Path(__file__).resolve().parent)\n"
CLASS_SIZE, BIG_MACHINE = 200, 16
ONE_WORKER_TARGET = 1.2 * 7.5  # seconds per complete submission, one worker (the 1.2 x 7.1-7.5 s)


class Busy:
    """The machine's busy CPU-seconds (every core, /proc/stat) between start and `seconds`."""

    def __init__(self) -> None:
        self.start = self._busy()

    @staticmethod
    def _busy() -> float:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait

    def seconds(self) -> float:
        return self._busy() - self.start


def timed(label: str, k: int, grade) -> float:
    """Run `grade()`; print its seconds and busy CPU-seconds per submission; return the seconds."""
    busy = Busy()
    seconds = grade()
    print(f"{label:<22}{seconds:7.1f} s  ({seconds / k:5.1f} s per submission, "
          f"{busy.seconds() / k:5.1f} CPU-s per submission)", flush=True)
    return seconds


def course(base: Path, name: str, k: int) -> tuple[Path, list[str]]:
    root = base / name
    root.mkdir()
    (root / "nbgrader_config.py").write_text(CONFIG)
    shutil.copytree(SOLUTIONS, root / "solutions" / "ch12")
    commands.run_nbgrader(root, "generate_assignment", "ch12", "--force")
    students = [f"student{index:03d}" for index in range(k)]
    for student in students:
        shutil.copytree(SOLUTIONS, root / "submitted" / student / "ch12")
    return root, students


def serial_nbgrader(root: Path, students: list[str]) -> float:
    start = time.monotonic()
    for student in students:
        done = commands.run_nbgrader(root, "autograde", "ch12", "--student", student, "--force", check=False)
        if done.returncode:
            sys.exit(f"nbgrader autograde failed for {student}: {commands.cause(done.stderr)}")
    return time.monotonic() - start


def course_autograde(root: Path, jobs: int) -> float:
    command = [str(Path(sys.executable).parent / "course"), "autograde", "--root", str(root), "--jobs", str(jobs), "--force"]
    start = time.monotonic()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode:
        sys.exit(f"course autograde --jobs {jobs} failed: {done.stderr[-2000:]}")
    return seconds


def all_full_marks(root: Path, students: list[str], label: str) -> None:
    """Every autograded part of every submission at its maximum, or the run stops."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        short = [(s, nb.name, g.name, g.auto_score) for s in students for nb in gb.find_submission("ch12", s).notebooks
                 for g in nb.grades if g.cell_type == "code" and g.auto_score != g.max_score]
        points = gb.find_submission("ch12", students[0]).score
    if short:
        sys.exit(f"{label}: complete submissions lost points: {short[:5]}")
    print(f"  {label}: every submission has every autograded point ({points:g})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=6, help="complete submissions (at least 6 for the target)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-one-worker", action="store_true", help="skip the one-worker pass")
    options = parser.parse_args()
    k = options.k
    print(f"{k} complete submissions, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as scratch:
        base = Path(scratch)
        serial_root, students = course(base, "serial", k)
        serial = timed("serial nbgrader:", k, lambda: serial_nbgrader(serial_root, students))
        all_full_marks(serial_root, students, "serial nbgrader")
        parallel_root, _ = course(base, "parallel", k)
        parallel = timed(f"course --jobs {options.jobs}:", k, lambda: course_autograde(parallel_root, options.jobs))
        all_full_marks(parallel_root, students, f"course --jobs {options.jobs}")
        one = None
        if not options.no_one_worker:
            one_root, _ = course(base, "one-worker", k)
            one = timed("course --jobs 1:", k, lambda: course_autograde(one_root, 1))
            all_full_marks(one_root, students, "course --jobs 1")
    ratio = parallel / serial
    print(f"ratio course --jobs {options.jobs} / serial nbgrader = {ratio:.2f} (target <= 0.35)")
    if one is not None:
        print(f"seconds per complete submission, one worker = {one / k:.1f} (target <= {ONE_WORKER_TARGET:.1f})")
    here = CLASS_SIZE * parallel / k
    per_worker = (one if one is not None else parallel * options.jobs) / k
    print(f"a class of {CLASS_SIZE}: serial nbgrader {CLASS_SIZE * serial / k / 60:.0f} min; course --jobs "
          f"{options.jobs} here {here / 60:.0f} min; on {BIG_MACHINE} cores (--jobs {BIG_MACHINE}, one worker's pace "
          f"each, if memory and disk keep up) about {CLASS_SIZE * per_worker / BIG_MACHINE / 60:.0f} min")


if __name__ == "__main__":
    main()

"""Chapter 12 checkpoint: replace a killed, a live stale, a paused and a crashed-mid-order worker.

    python checkpoints/ch12_worker_recovery_checkpoint.py                 # one line per case
    python checkpoints/ch12_worker_recovery_checkpoint.py --evidence      # + the evidence as JSON
    python checkpoints/ch12_worker_recovery_checkpoint.py --implementation notebooks/ch12
    python checkpoints/ch12_worker_recovery_checkpoint.py --lease 3 --timeline timeline.png

Every case runs real processes: an HTTP supplier with its own ledger, and an old worker that
claims with a short real lease. Nothing rewrites the clock or a ledger; the counts in the
evidence are read from the databases, the supplier's ledger file, the operating system and an
instrumented model. The exit status is non-zero when any case fails.

`runpy.run_path` on this file defines `NoNewReasoning` (and the rest) without running anything.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

try:
    from course.checkpoint import ALL, NoNewReasoning, draw_timeline, evidence_json, run_checkpoint, summary_lines
    from course.checkpoint.cases import ANSWER_LOST
except ModuleNotFoundError:  # a checkout whose package is not installed: use its src/ folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from course.checkpoint import ALL, NoNewReasoning, draw_timeline, evidence_json, run_checkpoint, summary_lines
    from course.checkpoint.cases import ANSWER_LOST

__all__ = ["NoNewReasoning", "main", "run_checkpoint"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--implementation", default="reference",
                        help="the fences: 'reference' (default) or a folder with 01_claims, 02_fencing and 04_recovery")
    parser.add_argument("--worker", default="reference",
                        help="the pass every worker runs: 'reference' (default) or a folder with 05_checkpoint")
    parser.add_argument("--lease", type=float, default=2.0, help="the old worker's lease in seconds (default 2)")
    parser.add_argument("--evidence", action="store_true", help="also print the evidence as JSON")
    parser.add_argument("--timeline", type=Path, help="draw the timeline into this PNG")
    parser.add_argument("--case", action="append", choices=[*ALL, ANSWER_LOST], dest="cases",
                        help="run only this case (repeatable; default: the four; answer_lost only by name)")
    parser.add_argument("--output-dir", type=Path, help="keep databases, ledgers and logs in a run folder here")
    parser.add_argument("--allow-unsaved", action="store_true",
                        help="judge the saved notebooks even if a JupyterLab kernel ran a graded cell they do not hold")
    args = parser.parse_args(argv)
    try:
        evidence = run_checkpoint(args.implementation, args.lease, args.cases or ALL, args.output_dir,
                                  require_saved=not args.allow_unsaved, worker=args.worker)
    except ValueError as error:
        parser.error(str(error))
    except KeyboardInterrupt:
        print("interrupted: every worker and supplier process was stopped", file=sys.stderr)
        return 130
    print("\n".join(summary_lines(evidence)))
    if args.timeline is not None:
        print(f"timeline: {draw_timeline(evidence, args.timeline, show=False)}")
    if args.evidence:
        print(evidence_json(evidence))
    return 0 if evidence.passed else 1


if __name__ == "__main__":
    # Ctrl-C always stops the run and its processes, even when a shell started this script as a
    # background job (which makes it inherit an ignored SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())

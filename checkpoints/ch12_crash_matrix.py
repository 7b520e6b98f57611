"""Chapter 12 crash matrix: every crash point in a worker pass, killed and paused, with real processes.

    python checkpoints/ch12_crash_matrix.py                        # every point x every nemesis
    python checkpoints/ch12_crash_matrix.py --evidence             # + one JSON object per trial (a line each)
    python checkpoints/ch12_crash_matrix.py --implementation notebooks/ch12
    python checkpoints/ch12_crash_matrix.py --soak 200 --seed 7    # 200 random trials
    python checkpoints/ch12_crash_matrix.py --soak 200 --seed 7 --only 42   # replay trial 42

Each trial: a real worker process runs one pass of the shop's worker and stops itself at the
crash point; the parent SIGKILLs it, or SIGSTOPs it and sends SIGCONT once the replacement has
finished; the lease really runs out; the replacement (real run_once) takes over. The invariants
are checked from the shop database, the supplier's ledger file and the process table. A failing
trial says which invariant broke, where, and which of your functions to revisit. The exit
status is non-zero when any trial fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from course.checkpoint import matrix
except ModuleNotFoundError:  # a checkout whose package is not installed: use its src/ folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from course.checkpoint import matrix

from course.checkpoint.crashpoints import POINTS
from course.checkpoint.trial import NEMESES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--implementation", default="reference",
                        help="the fences: 'reference' (default) or a folder with 01_claims, 02_fencing and 04_recovery")
    parser.add_argument("--worker", default="reference",
                        help="the pass both workers run: 'reference' (default) or a folder with 05_checkpoint")
    parser.add_argument("--lease", type=float, default=2.0, help="the old worker's lease in seconds (default 2)")
    parser.add_argument("--parallel", type=int, default=matrix.PARALLEL, help="trials at once (default %(default)s)")
    parser.add_argument("--point", action="append", choices=list(POINTS), dest="points", help="repeatable")
    parser.add_argument("--nemesis", action="append", choices=NEMESES, dest="nemeses", help="repeatable")
    parser.add_argument("--soak", type=int, metavar="N", help="draw N random trials instead of the matrix")
    parser.add_argument("--seed", type=int, default=0, help="the soak's seed (default 0)")
    parser.add_argument("--only", type=int, action="append", metavar="INDEX", help="run only these trial indexes")
    parser.add_argument("--evidence", action="store_true", help="also print the evidence as JSON")
    parser.add_argument("--output-dir", type=Path, help="keep databases, ledgers and logs in a run folder here")
    args = parser.parse_args(argv)
    if args.soak is not None:
        specs = matrix.soak_specs(args.soak, args.seed)
        replay = f"python checkpoints/ch12_crash_matrix.py --soak {args.soak} --seed {args.seed}"
    else:
        specs = matrix.matrix_specs(args.points or POINTS, args.nemeses or NEMESES)
        replay = None
    if args.only:
        specs = [spec for spec in specs if spec.index in set(args.only)]
    try:
        result = matrix.run_matrix(specs, args.implementation, lease_seconds=args.lease, parallel=args.parallel,
                                   seed=args.seed if args.soak is not None else None, output_dir=args.output_dir,
                                   worker=args.worker)
    except ValueError as error:
        parser.error(str(error))
    except KeyboardInterrupt:
        print("interrupted: every worker and supplier process was stopped", file=sys.stderr)
        return 130
    print(matrix.table(result))
    print(matrix.figures(result) + (f"; seed {args.seed}" if args.soak is not None else ""))
    print("\n".join(matrix.failure_lines(result, replay=replay)))
    if args.evidence:  # JSON Lines: one object per trial, in trial order
        print("\n".join(json.dumps(trial, sort_keys=True) for trial in result.to_json()))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())

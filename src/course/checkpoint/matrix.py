"""The crash matrix and the seeded soak: many real trials side by side, one table.

    from course.checkpoint.matrix import run_matrix, matrix_specs, soak_specs
    result = run_matrix(matrix_specs())                    # every point x every nemesis
    result = run_matrix(soak_specs(200, seed=7))           # 200 random draws, replayable

Trials mostly wait for a real lease to run out, so several run at once (threads in this
process; each trial has its own database, worker and supplier). Each trial spawns its children
from its pool thread, which lives until every trial is over: Linux ties PR_SET_PDEATHSIG to the
spawning thread. A soak draws (point, nemesis, jitter) from `random.Random(seed)`, so a failing
trial is replayed exactly with the same seed and its index.
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from course.checkpoint.crashpoints import POINTS
from course.checkpoint.invariants import experiment_failed, judge_trial
from course.checkpoint.run import TRIES, Checkpoint, Elsewhere, setting_for
from course.checkpoint.trial import NEMESES, TrialEvidence, TrialSpec, run_trial
from course.lab.learner import LearnerCodeError, NotImplementedYet, describe, load_implementation, refuse_while_loading

PARALLEL = 8
MAX_JITTER = 0.1  # seconds; well below the old worker's supplier timeout, so the crash still lands


class MatrixResult(Checkpoint):
    """TrialEvidence, one per trial in spec order, plus the run's own measurements."""

    seed: int | None = None

    @property
    def violations(self) -> int:
        return sum(not trial.passed for trial in self)

    @property
    def lease_waited_seconds(self) -> float:
        """The SUM of every trial's real lease interval [claim, expires] (they overlap in time)."""
        return sum(trial.lease_waited_seconds or 0.0 for trial in self)


def matrix_specs(points: Iterable[str] = POINTS, nemeses: Iterable[str] = NEMESES) -> list[TrialSpec]:
    specs = [(point, nemesis) for point in points for nemesis in nemeses]
    return [TrialSpec(point, nemesis, index=index) for index, (point, nemesis) in enumerate(specs)]


def soak_specs(count: int, seed: int) -> list[TrialSpec]:
    """`count` random trials; the same seed always draws the same sequence."""
    draw = random.Random(seed)
    return [TrialSpec(draw.choice(list(POINTS)), draw.choice(NEMESES), round(draw.uniform(0, MAX_JITTER), 3), index)
            for index in range(count)]


def _loaded(implementation: Any, worker: Any, result: MatrixResult) -> Any:
    """The implementation, loaded here (None when grading: the workers load it). In a learner's own
    Lab session only saved code (run_checkpoint's `require_saved`); a stub refuses at once, since
    every trial would stop at it. Why it refused is kept on `result` (`refused`, `missing`)."""
    if isinstance(implementation, Elsewhere):
        return None
    try:
        loaded = load_implementation(implementation, worker=worker,
                                     require_saved=bool(os.environ.get("JPY_SESSION_NAME")))
    except LearnerCodeError as error:
        result.refused = str(error)
        raise
    if loaded.missing:
        result.missing = list(loaded.missing)
        raise NotImplementedYet(loaded.missing[0])
    return loaded


def _not_loaded(spec: TrialSpec, label: str, lease_seconds: float, seed: int | None, error: Exception,
                on_result: Callable[[TrialEvidence], None] | None) -> TrialEvidence:
    """A trial that could not run: the learner's notebooks did not load (told once, in its words)."""
    trial = TrialEvidence(spec.name, spec.point, label, float(lease_seconds), point=spec.point,
                          nemesis=spec.nemesis, index=spec.index, seed=seed,
                          failures=[f"the learner's notebooks could not be loaded: {error}"], wall_seconds=0.0)
    judge_trial(trial)  # its invariants say it could not run, as any trial that stopped does
    if on_result is not None:
        on_result(trial)
    return trial


def run_matrix(
    specs: list[TrialSpec],
    implementation: str | Path = "reference",
    *,
    lease_seconds: float = 2.0,
    parallel: int = PARALLEL,
    seed: int | None = None,
    output_dir: str | Path | None = None,
    on_result: Callable[[TrialEvidence], None] | None = None,
    supplier_fence: Any = None,
    worker: str | Path = "reference",
) -> MatrixResult:
    """Run the trials, `parallel` at a time (in a learner's own Lab session, only saved code: see
    run_checkpoint's `require_saved`); `on_result` is called (in this thread) as each ends.
    `implementation`: the fences ("reference", a notebook folder, or an Elsewhere when grading);
    `worker`: the pass both workers of each trial run ("reference" or a folder holding 05_checkpoint).
    `supplier_fence` fences each trial's supplier (start_supplier's `fence`: "reference", or a rule)."""
    refuse_while_loading("the crash matrix")
    if not (isinstance(lease_seconds, (int, float)) and math.isfinite(lease_seconds) and 1.0 <= lease_seconds <= 60):
        raise ValueError("lease_seconds must be a number of seconds from 1 to 60")
    started, result = time.monotonic(), MatrixResult()
    result.seed = seed
    label = "your notebooks" if isinstance(implementation, Elsewhere) else describe(implementation, worker)
    try:
        loaded = _loaded(implementation, worker, result)
    except (LearnerCodeError, NotImplementedYet) as error:
        for spec in specs:
            result.append(_not_loaded(spec, label, lease_seconds, seed, error, on_result))
        result.wall_seconds = time.monotonic() - started
        return result
    temporary = None
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        folder = result.folder = Path(tempfile.mkdtemp(prefix="matrix-", dir=output_dir))
    else:
        temporary = tempfile.TemporaryDirectory(prefix="ch12-matrix-")
        folder = Path(temporary.name)
    setting = setting_for(implementation, loaded, label, float(lease_seconds), folder, worker,
                          supplier_fence=supplier_fence)
    done: dict[int, TrialEvidence] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="ch12-trial")
    try:
        _run_all(pool, specs, setting, seed, done, on_result)
    finally:
        pool.shutdown(wait=True)  # every running trial stops and reaps its processes first
        result.extend(done[spec.index] for spec in specs if spec.index in done)
        result.wall_seconds = time.monotonic() - started
        if result.folder is not None:
            (result.folder / "evidence.json").write_text(json.dumps(result.to_json(), indent=1, sort_keys=True))
        if temporary is not None:
            temporary.cleanup()
    return result


def _run_all(pool: ThreadPoolExecutor, specs: list[TrialSpec], setting: Any, seed: int | None,
             done: dict[int, TrialEvidence], on_result: Callable[[TrialEvidence], None] | None) -> None:
    """Every trial; one whose experiment itself went wrong (invariants.experiment_failed: the machine
    was too slow for the lease, say) runs again, up to TRIES runs in all, in a folder of its own:
    what the machine did must not count against the code under test."""
    pending = list(specs)
    for tries in range(1, TRIES + 1):
        again = f"try-{tries}"
        attempt = setting if tries == 1 else replace(
            setting, folder=setting.folder / again, private=setting.private and setting.private / again)
        futures = {pool.submit(run_trial, spec, attempt, seed=seed): spec for spec in pending}
        try:
            for future in as_completed(futures):
                trial = future.result()
                trial.tries = tries
                done[futures[future].index] = trial
                if on_result is not None and (tries == TRIES or not experiment_failed(trial)):
                    on_result(trial)
        except BaseException:  # KeyboardInterrupt: no new trial starts; running ones clean up
            for future in futures:
                future.cancel()
            raise
        pending = [spec for spec in pending if experiment_failed(done[spec.index])]
        if not pending:
            return


def table(result: MatrixResult) -> str:
    """Points down, nemeses across, PASS/FAIL in each cell (several trials: passed/run)."""
    cells: dict[tuple[str, str], list[bool]] = {}
    for trial in result:
        cells.setdefault((trial.point, trial.nemesis), []).append(trial.passed)
    width = max(len(point) for point in POINTS)
    lines = [f"{'crash point':<{width}}  " + "  ".join(f"{nemesis:<9}" for nemesis in NEMESES)]
    for point in POINTS:
        row = []
        for nemesis in NEMESES:
            outcomes = cells.get((point, nemesis), [])
            if not outcomes:
                row.append("-")
            elif len(outcomes) == 1:
                row.append("PASS" if outcomes[0] else "FAIL")
            else:
                row.append(f"{sum(outcomes)}/{len(outcomes)}")
        lines.append(f"{point:<{width}}  " + "  ".join(f"{cell:<9}" for cell in row))
    return "\n".join(lines)


def figures(result: MatrixResult) -> str:
    ratio = result.ratio
    return (f"{len(result) - result.violations}/{len(result)} trials passed, {result.violations} violation(s); "
            f"wall time {result.wall_seconds:.2f} s, "
            f"sum of real lease time waited {result.lease_waited_seconds:.2f} s; "
            "wall time / lease time waited = " + (f"{ratio:.2f}" if ratio is not None else "n/a"))


def failure_lines(result: MatrixResult, *, replay: str | None = None) -> list[str]:
    """One line per failing trial (its sentences), with the command that replays it."""
    lines = []
    for trial in result:
        if trial.passed:
            continue
        again = f" (replay: {replay} --only {trial.index})" if replay else ""
        lines.append(f"trial {trial.index} [{trial.point}, {trial.nemesis}, jitter {trial.jitter}]{again}:")
        lines.extend(f"    - {failure}" for failure in trial.failures)
    return lines

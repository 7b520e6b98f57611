"""run_checkpoint: load the implementation, run the chosen cases one after another, judge them.

The cases never overlap: each one's lease starts after the previous case has finished. What
does overlap is process housekeeping: as soon as a case's old worker has been told to claim,
the next case's database is created and its worker and supplier processes start in the
background (they claim nothing until told to); while the case waits for the lease to run out,
the previous case's processes, already asked to stop, are reaped.
The ratio of wall time to real lease time therefore measures the experiments rather than
interpreter start-up and shutdown. The total wall time covers everything, reaping included.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from course.checkpoint.cases import ALL, TITLES, Prepared, Setting, prepare, run_prepared
from course.checkpoint.evidence import CaseEvidence, lease_union
from course.checkpoint.verdict import experiment_failed, judge
from course.lab.learner import REFERENCE_NAME, LearnerCodeError, describe, load_implementation, refuse_while_loading
from sovereign_agent.ownership import Ownership

# A case whose experiment itself went wrong runs again, up to this many runs in all: what the
# machine did (a slow start eating the lease, a signal that landed late) must not cost points.
TRIES = 3
# Narrower than any claim allows (the runtime's check_ttl): the checkpoint waits each lease out
# on the wall clock, case after case, and below half a second a process start eats the lease.
CHECKPOINT_LEASE_SECONDS = (0.5, 60)


class Checkpoint(list):
    """The evidence (a list, one CaseEvidence per case) plus the run's own measurements."""

    wall_seconds: float = 0.0
    folder: Path | None = None
    versions: list = []  # learner.Version: which saved version of each function was judged
    missing: list = []  # the learner's graded names still holding their stub (for the report)
    refused: str | None = None  # why the learner's notebooks could not be loaded at all, if they could not

    @property
    def passed(self) -> bool:
        return bool(self) and all(case.passed for case in self)

    @property
    def lease_waited_seconds(self) -> float:
        return lease_union(self)

    @property
    def ratio(self) -> float | None:
        waited = self.lease_waited_seconds
        return self.wall_seconds / waited if waited > 0 else None

    def to_json(self) -> list[dict]:
        return [case.to_json() for case in self]


@dataclass(frozen=True)
class Elsewhere:
    """The implementation when its code may not run in this process (the grader's judge): the
    five functions as callables of a learner process, the learner's Claim class, how to start a
    worker in a learner sandbox, and a folder for the ledgers that sandbox cannot reach."""

    ownership: Ownership
    claim_class: type | None
    spawn: Callable[..., Any]
    private: Path
    fences: str = "."  # what the workers load, from their working folder (the submission's) or the runtime
    worker: str = REFERENCE_NAME


def run_checkpoint(
    implementation: str | Path | Elsewhere = REFERENCE_NAME,
    lease_seconds: float = 2.0,
    cases: Iterable[str] = ALL,
    output_dir: str | Path | None = None,
    require_saved: bool | None = None,
    worker: str | Path = REFERENCE_NAME,
) -> Checkpoint:
    """Run the worker-recovery experiments against `implementation` and return their evidence.

    `implementation`: the fences, "reference" (the runtime's own functions) or a folder holding the
    learner's 01_claims, 02_fencing and 04_recovery notebooks. `worker`: the pass that every worker
    process runs, old and replacement alike, "reference" or a folder holding 05_checkpoint. `output_dir`: keep each case's
    databases, ledgers, logs and evidence.json in a new run folder there (default: a temporary
    folder, removed afterwards). Case failures are reported in the evidence, not raised;
    KeyboardInterrupt stops the run after every process has been stopped.
    `require_saved`: refuse to judge (every case fails with "save <notebook> first") when the
    learner's JupyterLab kernel ran a graded cell the saved notebook does not hold. Default:
    when this runs in a kernel started by a Jupyter server (the learner's own session).
    """
    refuse_while_loading("the checkpoint")
    if require_saved is None:
        require_saved = bool(os.environ.get("JPY_SESSION_NAME"))
    started = time.monotonic()
    cases = tuple(cases)
    _check(cases, lease_seconds)
    label = "your notebooks" if isinstance(implementation, Elsewhere) else describe(implementation, worker)
    result = Checkpoint()
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        result.folder = Path(tempfile.mkdtemp(prefix="run-", dir=output_dir))
    try:
        loaded = None if isinstance(implementation, Elsewhere) else load_implementation(
            implementation, worker=worker, require_saved=require_saved)
    except LearnerCodeError as error:  # every case fails with the same, specific sentence
        result.refused = str(error)
        result.extend(CaseEvidence(name, TITLES[name], label, float(lease_seconds), failures=[str(error)])
                      for name in cases)
    else:
        result.versions = loaded.versions if loaded is not None else []
        result.missing = list(loaded.missing) if loaded is not None else []
        with (tempfile.TemporaryDirectory(prefix="ch12-checkpoint-") if result.folder is None
              else nullcontext(result.folder)) as folder:
            _run_cases(cases, setting_for(implementation, loaded, label, float(lease_seconds), Path(folder), worker),
                       result)
    result.wall_seconds = time.monotonic() - started
    _keep(result)
    return result


def setting_for(implementation: Any, loaded: Any, label: str, lease: float, folder: Path, worker: Any,
                **options: Any) -> Setting:
    """Where and how the workers run: children loading `implementation` and `worker` here, or (an
    Elsewhere) processes in learner sandboxes loading the notebooks of their own working folder."""
    if loaded is not None:
        return Setting(loaded.ownership, _source(implementation), label, lease, folder, worker_pass=_source(worker),
                       **options)
    ledgers = Path(tempfile.mkdtemp(prefix="ledgers-", dir=implementation.private))  # this run's own
    return Setting(implementation.ownership, implementation.fences, label, lease, folder, spawn=implementation.spawn,
                   private=ledgers, verify=True, claim_class=implementation.claim_class,
                   worker_pass=implementation.worker, **options)


def _source(where: str | Path) -> str:
    return REFERENCE_NAME if str(where) == REFERENCE_NAME else str(Path(where).expanduser().resolve())


def _check(cases: tuple[str, ...], lease_seconds: object) -> None:
    unknown = [name for name in cases if name not in TITLES]
    if unknown:
        raise ValueError(f"unknown case(s) {unknown}; choose from {list(ALL)}")
    low, high = CHECKPOINT_LEASE_SECONDS
    if not (isinstance(lease_seconds, (int, float)) and math.isfinite(lease_seconds) and low <= lease_seconds <= high):
        raise ValueError(f"lease_seconds must be a number of seconds from {low} to {high}")


def _run_cases(cases: tuple[str, ...], setting: Setting, result: Checkpoint) -> None:
    """The cases one after another; the next is prepared while the current one waits its lease out."""
    upcoming: list[Prepared] = []  # at most one: the next case, prepared during this one's wait
    finishing: list[Prepared] = []  # finished cases whose processes were asked to stop
    # One thread starts every child process and lives until all of them are reaped: Linux ties
    # PR_SET_PDEATHSIG to the spawning thread, and a long start-up (a loaded machine) then
    # never delays the parent's watch on the lease.
    spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ch12-spawner")
    try:
        for index, name in enumerate(cases):
            current = upcoming.pop() if upcoming else prepare(name, setting, spawner)
            later = cases[index + 1] if index + 1 < len(cases) else None

            def prepare_next(later: str | None = later) -> None:
                if later is not None and not upcoming:
                    upcoming.append(prepare(later, setting, spawner))

            evidence = run_prepared(current, setting, on_claim=prepare_next,
                                    while_waiting=lambda: _reap(finishing), reap_later=True)
            finishing.append(current)
            result.append(judge(evidence))
            prepare_next()  # if the case stopped before its claim
        _run_again_where_the_experiment_failed(result, setting, spawner)
    finally:
        _reap(finishing)
        _reap(upcoming)  # interrupted between preparing a case and running it
        spawner.shutdown(wait=True)


def _run_again_where_the_experiment_failed(result: Checkpoint, setting: Setting, spawner: Any) -> None:
    """A case that failed for reasons of the machine only runs again, alone, in a folder of its own."""
    for index in range(len(result)):
        while experiment_failed(result[index]) and result[index].tries < TRIES:
            tries = result[index].tries + 1
            again = replace(setting, folder=setting.folder / f"try-{tries}",
                            private=setting.private and setting.private / f"try-{tries}")
            result[index] = judge(run_prepared(prepare(result[index].case, again, spawner), again))
            result[index].tries = tries


def _reap(cases: list[Prepared]) -> None:
    """Stop and reap the processes of these cases (bounded: children.stop escalates to SIGKILL)."""
    while cases:
        cases.pop().close()


def _keep(result: Checkpoint) -> None:
    """With an output folder, keep the evidence beside the databases and ledgers it came from."""
    if result.folder is not None:
        (result.folder / "evidence.json").write_text(json.dumps(result.to_json(), indent=2, sort_keys=True))

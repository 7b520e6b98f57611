"""Claim benchmark: does taking work stay flat as finished work piles up, and what does the
ownership machinery cost on top of the two commits a claim+finish must make anyway?

For each size (1k, 10k, 100k and 1M work rows by default) a database is built with 90% of its
rows DONE and 10% READY, every row in its own session, in one executemany transaction. Then the
reference `claim` and `finish` run against it with synchronous=FULL, as a worker would: claim
(timed on its own for latency), finish DONE (timed together with the claim for throughput).

The baseline is the floor for the same durability on the same disk: a loop whose iteration is
two one-row write transactions (BEGIN IMMEDIATE; UPDATE one row; COMMIT; twice), WAL and
synchronous=FULL, in a file in the same temporary directory.

Disk speed drifts (other processes, the page cache), so the measurement is interleaved: in each
round, every size runs a chunk of claims and the baseline runs a chunk of iterations. Rows that
were claimed are put back to READY between chunks, outside the timed region, so every chunk sees
the same 90/10 mix and the same table size.

Targets, computed from this one run:
* claim latency (median) at the largest size / at the smallest size <= 1.5
* claim+finish throughput / bare two-commit loop throughput >= 0.7 (at every size)

Benchmarks inform; they are not tests: the script prints PASS or MISS per target and exits 0.

    python benchmarks/claim_benchmark.py                  # 1k, 10k, 100k, 1M
    python benchmarks/claim_benchmark.py --quick          # 1k and 10k
    python benchmarks/claim_benchmark.py --sizes 1000,50000 --claims 400
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sovereign_agent.assistant_work import _ELIGIBLE, claim, finish
from sovereign_agent.database import Database

SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
READY_EVERY = 10  # one row in ten is READY: 90% DONE
LATENCY_TARGET = 1.5
THROUGHPUT_TARGET = 0.7
OWNER = "benchmark-worker"


@dataclass
class WorkDatabase:
    rows: int
    db: Database
    build_seconds: float
    claim_seconds: list[float] = field(default_factory=list)  # one per claim: the claim alone
    query_seconds: list[float] = field(default_factory=list)  # the claim's SELECT alone, no commit
    loop_seconds: float = 0.0  # claim + finish, summed over timed iterations
    iterations: int = 0
    claimed: list[str] = field(default_factory=list)  # ids to put back to READY before the next chunk

    @property
    def ready_rows(self) -> int:
        return len(range(0, self.rows, READY_EVERY))


def _rows(count: int, now: float) -> Iterator[tuple]:
    for i in range(count):
        ready = i % READY_EVERY == 0
        yield (
            f"{i:032x}",
            f"benchmark:{i:09d}",
            f"session-{i:09d}",
            "Reorder what is short",
            "READY" if ready else "DONE",
            None if ready else OWNER,
            0 if ready else 1,
            now - count + i,  # oldest first, READY and DONE interleaved
            None if ready else "done",
        )


def build_work(path: Path, rows: int) -> WorkDatabase:
    """A fresh work database of `rows` rows, 90% DONE, distinct sessions, statistics gathered."""
    started = time.perf_counter()
    db = Database(path, synchronous="FULL")
    default_cache = db.connection.execute("PRAGMA cache_size").fetchone()[0]
    db.connection.execute("PRAGMA cache_size=-262144")  # 256 MB while building: no spilling mid-transaction
    with db.immediate() as connection:
        connection.executemany(
            "INSERT INTO assistant_work(id, origin, session, prompt, status, owner, generation, created, result) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _rows(rows, time.time()),
        )
    db.connection.execute("ANALYZE")
    db.connection.execute(f"PRAGMA cache_size={default_cache}")  # measure with the runtime's own cache
    return WorkDatabase(rows, db, time.perf_counter() - started)


def _put_back(work: WorkDatabase) -> None:
    """Untimed: the rows claimed so far become READY again, so the mix stays 90/10."""
    if work.claimed:
        with work.db.immediate() as connection:
            connection.executemany(
                "UPDATE assistant_work SET status='READY', owner=NULL, expires=NULL, result=NULL WHERE id=?",
                ((identifier,) for identifier in work.claimed),
            )
        work.claimed.clear()


def claim_chunk(work: WorkDatabase, iterations: int, *, timed: bool = True) -> None:
    """`iterations` times: claim (timed alone) then finish DONE (timed with the claim)."""
    done = 0
    while done < iterations:
        if len(work.claimed) >= work.ready_rows:
            _put_back(work)
        batch = min(iterations - done, work.ready_rows - len(work.claimed))
        latencies = []
        began = time.perf_counter()
        for _ in range(batch):
            before = time.perf_counter()
            held = claim(work.db, OWNER, ttl=60)
            after = time.perf_counter()
            if held is None:
                raise RuntimeError(f"no READY work left in the {work.rows}-row database")
            finish(work.db, held, "DONE", "done")
            latencies.append(after - before)
            work.claimed.append(held.id)
        elapsed = time.perf_counter() - began
        done += batch
        if timed:
            work.claim_seconds.extend(latencies)
            work.loop_seconds += elapsed
            work.iterations += batch
    _put_back(work)


def query_chunk(work: WorkDatabase, iterations: int) -> None:
    """Diagnostic, not a target: the claim's eligibility query alone (read-only, no fsync), so the
    plan's scaling is visible even on a disk whose fsync time swamps everything else."""
    connection = work.db.connection
    for _ in range(iterations):
        parameters = {"role": "shop", "now": time.time(), "identifier": "", "control_only": 0}
        before = time.perf_counter()
        found = connection.execute(_ELIGIBLE, parameters).fetchone()
        work.query_seconds.append(time.perf_counter() - before)
        if found is None:
            raise RuntimeError(f"the eligibility query found nothing in the {work.rows}-row database")


@dataclass
class Baseline:
    connection: sqlite3.Connection
    loop_seconds: float = 0.0
    iterations: int = 0


def build_baseline(path: Path) -> Baseline:
    """One table, one row, the same journal and durability settings as the runtime."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("CREATE TABLE IF NOT EXISTS counter(id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
    connection.execute("INSERT OR IGNORE INTO counter(id, value) VALUES (1, 0)")
    return Baseline(connection)


def baseline_chunk(baseline: Baseline, iterations: int, *, timed: bool = True) -> None:
    """Each iteration: two one-row write transactions, as many commits as a claim plus a finish."""
    connection = baseline.connection
    began = time.perf_counter()
    for _ in range(iterations):
        for _ in range(2):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("UPDATE counter SET value = value + 1 WHERE id=1")
            connection.execute("COMMIT")
    if timed:
        baseline.loop_seconds += time.perf_counter() - began
        baseline.iterations += iterations


def run_benchmark(
    sizes: list[int],
    *,
    claims: int = 200,
    rounds: int = 4,
    warmup: int = 20,
    directory: Path | None = None,
    progress=lambda message: None,
) -> dict:
    """Build, warm up, then measure in interleaved rounds; returns the figures (no printing)."""
    if not sizes or any(size < READY_EVERY for size in sizes):
        raise ValueError(f"sizes must be at least {READY_EVERY} rows")
    if claims < rounds or rounds < 1:
        raise ValueError("need at least one claim per round")
    with tempfile.TemporaryDirectory(prefix="claim-benchmark-", dir=directory) as scratch:
        folder = Path(scratch)
        works = []
        try:
            for size in sizes:
                progress(f"building {size:,} rows ...")
                works.append(build_work(folder / f"work-{size}.sqlite", size))
                progress(f"  built in {works[-1].build_seconds:.1f} s")
            baseline = build_baseline(folder / "baseline.sqlite")
            for work in works:
                claim_chunk(work, warmup, timed=False)
            baseline_chunk(baseline, warmup, timed=False)
            per_round = [claims // rounds + (1 if r < claims % rounds else 0) for r in range(rounds)]
            for number, chunk in enumerate(per_round, start=1):
                progress(f"round {number}/{rounds}: {chunk} claims per size, {chunk} baseline iterations")
                for work in works:
                    claim_chunk(work, chunk)
                    query_chunk(work, chunk)
                baseline_chunk(baseline, chunk)
            bare = baseline.iterations / baseline.loop_seconds
            results = {
                "folder": str(folder),
                "claims": claims,
                "rounds": rounds,
                "baseline": {"iterations": baseline.iterations, "throughput": bare},
                "sizes": [],
            }
            for work in works:
                latencies = sorted(work.claim_seconds)
                throughput = work.iterations / work.loop_seconds
                results["sizes"].append(
                    {
                        "rows": work.rows,
                        "build_seconds": work.build_seconds,
                        "claims": len(latencies),
                        "median_ms": 1000 * statistics.median(latencies),
                        "p90_ms": 1000 * latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))],
                        "max_ms": 1000 * latencies[-1],
                        "query_median_us": 1e6 * statistics.median(work.query_seconds),
                        "throughput": throughput,
                        "throughput_ratio": throughput / bare,
                        "file_mb": (folder / f"work-{work.rows}.sqlite").stat().st_size / 1e6,
                    }
                )
        finally:
            for work in works:
                work.db.close()
            if "baseline" in locals():
                baseline.connection.close()
    smallest, largest = results["sizes"][0], results["sizes"][-1]
    for entry in results["sizes"]:
        entry["latency_ratio"] = entry["median_ms"] / smallest["median_ms"]
    results["latency_ratio"] = largest["median_ms"] / smallest["median_ms"]
    results["latency_pass"] = results["latency_ratio"] <= LATENCY_TARGET
    results["throughput_pass"] = all(e["throughput_ratio"] >= THROUGHPUT_TARGET for e in results["sizes"])
    return results


def format_results(results: dict) -> str:
    sizes = results["sizes"]
    smallest, largest = sizes[0]["rows"], sizes[-1]["rows"]
    lines = [
        (
            f"claims per size: {results['claims']} (in {results['rounds']} interleaved rounds); "
            f"synchronous=FULL, WAL; SQLite {sqlite3.sqlite_version}, Python {platform.python_version()}"
        ),
        f"temporary folder: {results['folder']}",
        "",
        (
            f"{'rows':>10} {'build s':>8} {'file MB':>8} {'claim p50 ms':>13} {'p90 ms':>8} {'max ms':>8} "
            f"{'claim+finish/s':>15} {'vs bare':>8} {'p50 vs ' + format(smallest, ','):>14} {'query p50 us':>13}"
        ),
    ]
    for e in sizes:
        lines.append(
            f"{e['rows']:>10,} {e['build_seconds']:>8.1f} {e['file_mb']:>8.1f} {e['median_ms']:>13.3f} "
            f"{e['p90_ms']:>8.3f} {e['max_ms']:>8.3f} {e['throughput']:>15.0f} {e['throughput_ratio']:>8.2f} "
            f"{e['latency_ratio']:>14.2f} {e['query_median_us']:>13.1f}"
        )
    bare = results["baseline"]
    lines += [
        (
            f"{'bare loop':>10} {'':>8} {'':>8} {'':>13} {'':>8} {'':>8} {bare['throughput']:>15.0f} "
            f"(iterations/s; {bare['iterations']} iterations of two one-row commits)"
        ),
        "",
        (
            f"claim latency p50 at {largest:,} / at {smallest:,} rows: {results['latency_ratio']:.2f} "
            f"(target <= {LATENCY_TARGET}) {'PASS' if results['latency_pass'] else 'MISS'}"
        ),
    ]
    for e in sizes:
        lines.append(
            f"claim+finish / bare two-commit loop at {e['rows']:,} rows: {e['throughput_ratio']:.2f} "
            f"(target >= {THROUGHPUT_TARGET}) {'PASS' if e['throughput_ratio'] >= THROUGHPUT_TARGET else 'MISS'}"
        )
    lines.append("query p50 us: the claim's SELECT alone (no write, no fsync), a diagnostic of the plan, not a target")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated row counts (default 1000,10000,100000,1000000)")
    parser.add_argument("--quick", action="store_true", help="1k and 10k rows only")
    parser.add_argument("--claims", type=int, default=200, help="timed claims per size (default 200)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary folder (default: system temp)")
    args = parser.parse_args(argv)
    if args.sizes:
        try:
            sizes = sorted({int(part.replace("_", "")) for part in args.sizes.split(",") if part.strip()})
        except ValueError:
            parser.error("--sizes takes comma-separated whole numbers")
    else:
        sizes = list(QUICK_SIZES if args.quick else SIZES)
    results = run_benchmark(
        sizes,
        claims=args.claims,
        rounds=args.rounds,
        directory=args.dir,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    print(format_results(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

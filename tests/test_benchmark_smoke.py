"""The claim benchmark's functions at tiny sizes: they run and produce sane numbers.

No timing thresholds: this only checks that the benchmark measures what it says (every timed
claim got work, the mix stays 90/10, figures are positive and finite).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "claim_benchmark.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("claim_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_build_makes_ninety_percent_done_in_distinct_sessions(bench, tmp_path):
    work = bench.build_work(tmp_path / "w.sqlite", 200)
    try:
        counts = dict(
            work.db.connection.execute("SELECT status, count(*) FROM assistant_work GROUP BY status").fetchall()
        )
        sessions = work.db.connection.execute("SELECT count(DISTINCT session) FROM assistant_work").fetchone()[0]
    finally:
        work.db.close()
    assert counts == {"DONE": 180, "READY": 20}
    assert sessions == 200 and work.ready_rows == 20
    assert work.build_seconds > 0


def test_claim_chunks_go_past_the_ready_pool_and_restore_the_mix(bench, tmp_path):
    work = bench.build_work(tmp_path / "w.sqlite", 200)
    try:
        bench.claim_chunk(work, 45)  # more than the 20 READY rows: the pool is put back twice
        counts = dict(
            work.db.connection.execute("SELECT status, count(*) FROM assistant_work GROUP BY status").fetchall()
        )
        generations = work.db.connection.execute(
            "SELECT sum(generation) FROM assistant_work WHERE status='READY'"
        ).fetchone()[0]
    finally:
        work.db.close()
    assert counts == {"DONE": 180, "READY": 20}
    assert generations == 45  # every timed claim took a real row
    assert work.iterations == len(work.claim_seconds) == 45
    assert all(math.isfinite(s) and s > 0 for s in work.claim_seconds)
    assert 0 < sum(work.claim_seconds) < work.loop_seconds


def test_the_baseline_makes_two_commits_per_iteration(bench, tmp_path):
    baseline = bench.build_baseline(tmp_path / "b.sqlite")
    try:
        bench.baseline_chunk(baseline, 10)
        value = baseline.connection.execute("SELECT value FROM counter").fetchone()[0]
    finally:
        baseline.connection.close()
    assert value == 20 and baseline.iterations == 10 and baseline.loop_seconds > 0


def test_a_tiny_run_reports_finite_positive_figures(bench, tmp_path):
    results = bench.run_benchmark([200, 400], claims=12, rounds=3, warmup=2, directory=tmp_path)
    assert [e["rows"] for e in results["sizes"]] == [200, 400]
    for entry in results["sizes"]:
        assert entry["claims"] == 12
        for key in (
            "build_seconds",
            "median_ms",
            "p90_ms",
            "max_ms",
            "query_median_us",
            "throughput",
            "throughput_ratio",
            "file_mb",
        ):
            assert math.isfinite(entry[key]) and entry[key] > 0, key
        assert entry["median_ms"] <= entry["p90_ms"] <= entry["max_ms"]
    assert math.isfinite(results["baseline"]["throughput"]) and results["baseline"]["throughput"] > 0
    assert results["latency_ratio"] > 0 and isinstance(results["latency_pass"], bool)
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone
    text = bench.format_results(results)
    assert "PASS" in text or "MISS" in text
    assert "bare loop" in text


def test_main_prints_a_table_and_exits_zero(bench, tmp_path, capsys):
    assert bench.main(["--sizes", "100,200", "--claims", "4", "--rounds", "2", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "claim latency p50 at 200 / at 100 rows" in out
    assert out.count("claim+finish / bare two-commit loop") == 2

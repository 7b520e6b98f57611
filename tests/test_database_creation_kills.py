"""Creating a database survives a real SIGKILL at any moment: the next open succeeds, and the
fence admits only the epoch of the schema that open found (or made).

Two ways to land the kill: a child stopped at each named creation step (the test-only hook
`database._creation_step`), and a seeded soak of children killed at random moments.
"""

from __future__ import annotations

import os
import random
import secrets
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import fence_verdicts
from reference_organizations.children import spawn, stop
from sovereign_agent.database import AuthorityMismatch, Database, authority_marker

WAIT_SECONDS = 20.0
SOAK_TRIALS = int(os.environ.get("CREATION_SOAK_TRIALS", "200"))
SOAK_SEED = int(os.environ.get("CREATION_SOAK_SEED", "13"))
SOAK_CHILDREN = 4  # children being created and killed at once
SOAK_ROUNDS = 4  # rounds at most, until a kill lands in the window that matters (see the soak)

# Announces the step it stopped at, then waits to be killed (bounded: it dies with its parent).
STOPPING_CHILD = """
import os, sys, time
from sovereign_agent import database
def stop_at(step):
    if step == sys.argv[2]:
        os.write(1, step.encode() + b"\\n")
        time.sleep(60)
database._creation_step = stop_at
database.Database(sys.argv[1])
"""

# "r" just before creating, "d" once created; the parent kills it at a random moment in between.
CREATING_CHILD = """
import os, sys, time
from sovereign_agent.database import Database
os.write(1, b"r")
Database(sys.argv[1])
os.write(1, b"d")
time.sleep(60)
"""


def read_until(process: subprocess.Popen, wanted: bytes, timeout: float = WAIT_SECONDS) -> bytes:
    """Bytes from the child's stdout up to and including `wanted`; never waits beyond `timeout`."""
    deadline, seen = time.monotonic() + timeout, b""
    while wanted not in seen:
        readable, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(process.stdout.fileno(), 64) if readable else b""
        if not chunk:
            raise AssertionError(f"child {process.pid} said {seen!r}, not {wanted!r} (exit {process.poll()})")
        seen += chunk
    return seen


def kill(process: subprocess.Popen) -> None:
    try:
        process.send_signal(signal.SIGKILL)
        assert process.wait(WAIT_SECONDS) == -signal.SIGKILL
    finally:
        stop(process)


def left_behind(path: Path) -> dict[str, object]:
    """What a killed creation left on disk: the schema version, the marker and its temporary file."""
    marker = authority_marker(path)
    temporary = marker.with_name(marker.name + ".tmp")
    state: dict[str, object] = {
        "file": path.exists(),
        "schema": 0,
        "epoch": None,
        "marker": marker.read_text() if marker.exists() else None,
        "temporary": temporary.read_text() if temporary.exists() else None,
    }
    if path.exists():
        raw = sqlite3.connect(path)  # reads the last commit; a killed transaction is not there
        try:
            state["schema"] = raw.execute("PRAGMA user_version").fetchone()[0]
            if state["schema"]:
                state["epoch"] = raw.execute("SELECT epoch FROM assistant_control").fetchone()[0]
        finally:
            raw.close()
    return state


def open_and_check_the_fence(path: Path, before: dict[str, object]) -> str:
    """Open after the kill; the fence admits the opened epoch and nothing a killed creation held.

    A committed schema keeps its epoch; without one, the open is a new authority: a new epoch,
    and whatever the killed child had written (marker or temporary file) fails the fence.
    """
    with Database(path) as database:
        epoch = database.connection.execute("SELECT epoch FROM assistant_control").fetchone()[0]
        stale = {value for value in (before["marker"], before["temporary"]) if value} - {epoch}
        verdicts = fence_verdicts(database, {epoch, secrets.token_hex(16), *stale})
    assert verdicts == {e: e == epoch for e in verdicts}, verdicts
    if before["schema"]:
        assert epoch == before["epoch"] == before["marker"]
    else:
        assert epoch not in {before["marker"], before["temporary"]}
    marker = authority_marker(path)
    assert marker.read_text() == epoch
    assert not marker.with_name(marker.name + ".tmp").exists()  # a killed one's leftover is reused
    return epoch


@pytest.mark.parametrize("step", ["marker-written", "marker-renamed", "before-commit", "committed"])
def test_a_kill_at_each_creation_step_leaves_a_database_that_opens(tmp_path, step):
    path = tmp_path / "agent.sqlite"
    child = spawn([sys.executable, "-c", STOPPING_CHILD, path, step], stdout=subprocess.PIPE)
    try:
        assert read_until(child, b"\n") == step.encode() + b"\n"
    finally:
        kill(child)
    before = left_behind(path)
    written = before["temporary"] if step == "marker-written" else before["marker"]
    assert isinstance(written, str) and len(written) == 32
    # The kill really landed at that step: what is on disk says so.
    assert {key: before[key] is not None for key in ("marker", "temporary")} == {
        "marker": step != "marker-written",
        "temporary": step == "marker-written",
    }
    assert before["schema"] == (1 if step == "committed" else 0)
    epoch = open_and_check_the_fence(path, before)
    assert (epoch == written) == (step == "committed")


def creation_seconds(folder: Path, samples: int = 5) -> float:
    """How long creation usually takes in a child here, from its "r" to its "d" (the soak's kill
    window): the median, since one slow sample on a busy machine (74 ms against the usual 8-12 ms,
    seen in CI) would spread the kills so wide that none lands inside creation."""
    taken = []
    for sample in range(samples):
        path = folder / f"sample-{sample}" / "agent.sqlite"
        child = spawn([sys.executable, "-c", CREATING_CHILD, path], stdout=subprocess.PIPE)
        try:
            read_until(child, b"r")
            started = time.monotonic()
            read_until(child, b"d")
            taken.append(time.monotonic() - started)
        finally:
            kill(child)
    return statistics.median(taken)


def soak_trial(path: Path, delay: float) -> str:
    """Create in a child, SIGKILL it `delay` s after it starts, open in the parent. Returns the
    state the kill left ("refused" if the open failed)."""
    child = spawn([sys.executable, "-c", CREATING_CHILD, path], stdout=subprocess.PIPE)
    try:
        read_until(child, b"r")
        time.sleep(delay)
    finally:
        kill(child)
    before = left_behind(path)
    if before["schema"]:
        state = "committed"
    elif before["marker"]:
        state = "marker without schema"  # the window that used to leave the file unopenable
    elif before["temporary"]:
        state = "temporary marker only"
    else:
        state = "file, nothing else" if before["file"] else "nothing"
    try:
        open_and_check_the_fence(path, before)
    except AuthorityMismatch:
        return "refused"
    return state


def test_a_seeded_soak_of_kills_at_random_moments_never_leaves_an_unopenable_database(tmp_path):
    """SOAK_TRIALS kills at random moments of creation; no open may be refused. The kills must also
    have landed in the window that used to leave the file unopenable (marker written, schema not yet
    committed, about a millisecond of creation's ten): a round in which none did (a busy machine
    stretches the other steps, fsync above all) runs again with the window measured anew and the
    next seed, at most SOAK_ROUNDS rounds."""
    states: Counter = Counter()
    said = []
    for round_number in range(SOAK_ROUNDS):
        window = 1.5 * creation_seconds(tmp_path / f"round-{round_number}")
        rng = random.Random(SOAK_SEED + round_number)
        delays = [rng.uniform(0, window) for _ in range(SOAK_TRIALS)]
        started = time.monotonic()
        paths = [tmp_path / f"round-{round_number}" / f"trial-{n:03d}" / "agent.sqlite" for n in range(SOAK_TRIALS)]
        with ThreadPoolExecutor(SOAK_CHILDREN) as pool:
            landed = Counter(pool.map(soak_trial, paths, delays))
        said.append(f"round {round_number + 1}: {SOAK_TRIALS} kills, seed {SOAK_SEED + round_number}, window "
                    f"{window * 1000:.1f} ms, {time.monotonic() - started:.1f} s; left behind: {dict(landed)}")
        assert sum(landed.values()) == SOAK_TRIALS
        states += landed
        if landed["marker without schema"]:
            break
    print("\ncreation soak, " + "; ".join(said))
    assert states["refused"] == 0
    assert states["marker without schema"] >= 1, said  # the kills did land in the old window

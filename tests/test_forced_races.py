"""Forced races, graded at the learner process's lock calls (course.grading.judge.schedule).

The scheduler itself, with real processes that carry the filter: a correct claim keeps one winner;
a racy claim loses, whatever it fakes or sleeps, and so does one that counts its calls or times
them. Graded by `course autograde`, the same tricks on
each race the course forces are students of tests/test_hostile_submissions.py's class.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from course.grading.judge import schedule
from course.grading.lockcalls import LISTENER, LockCalls
from course.lessons.checks import fresh_shop
from sovereign_agent.assistant_work import enqueue

from test_hostile_submissions import FAKE, RACES, RACY_CLAIM, cell_of

# --- the scheduler itself, with real processes ---------------------------------------------------------

_WORKER = '''
import json, os, socket, sys
from course.grading import lockcalls
from sovereign_agent.assistant_work import Claim, append_event  # what the racy claim uses
from sovereign_agent.database import Database
import math, time
sock = socket.socket(fileno=int(sys.argv[1]))
listener = lockcalls.install()
socket.send_fds(sock, [lockcalls.LISTENER], [listener])
os.close(listener)
namespace = dict(globals())
exec(sys.argv[2], namespace)
stream = sock.makefile("rw")
for line in stream:
    path, owner = json.loads(line)
    db = Database.reopen(path)
    try:
        held = namespace["claim"](db, owner, ttl=30)
        stream.write(json.dumps(None if held is None else [held.id, held.owner, held.generation]) + "\\n")
    except Exception as error:
        stream.write(json.dumps(f"{type(error).__name__}: {error}") + "\\n")
    finally:
        db.close()
    stream.flush()
'''


class Worker:
    """A process that carries the filter and runs `claim` on request, its lock calls answered here."""

    def __init__(self, source: str) -> None:
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen([sys.executable, "-c", _WORKER, str(theirs.fileno()), source],
                                        pass_fds=[theirs.fileno()])
        theirs.close()
        message, fds, _, _ = socket.recv_fds(ours, 1, 1)
        assert message == LISTENER and len(fds) == 1
        self.locks, self.stream = LockCalls(fds[0]), ours.makefile("rw")

    def __call__(self, path: str, owner: str):
        self.stream.write(json.dumps([path, owner]) + "\n")
        self.stream.flush()
        return json.loads(self.stream.readline())

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)
        self.locks.close()


@pytest.fixture
def workers():
    made = []
    yield lambda source: made.append(Worker(source)) or made[-1]
    for worker in made:
        worker.close()
    assert all(worker.process.poll() is not None for worker in made)


def _raced(workers, source: str):
    a, b = workers(source), workers(source)
    db = fresh_shop()
    work_id = enqueue(db, "phone:first", "lucy", "Prepare the stock draft")
    trial = schedule.race(db.path, lambda: a(str(db.path), "worker-A"), lambda: b(str(db.path), "worker-B"), a.locks)
    row = tuple(db.connection.execute("SELECT owner, generation FROM assistant_work WHERE id=?", (work_id,)).fetchone())
    return trial, row


def test_a_correct_claim_is_raced_at_each_lock_call_and_one_worker_wins(workers):
    correct = cell_of("01_claims.ipynb", "claim")
    trial, row = _raced(workers, correct)
    winners = [held for held in (trial.first, trial.second) if held is not None]
    assert len(winners) == 1 and row == (winners[0][1], 1), (trial, row)
    assert trial.inside, "B ran between A's reads and its write (A waited for it there, and then found the work taken)"


READ = '    row = connection.execute(\n        "SELECT w.*'
ALONE = {"fake_read_and_write": FAKE.replace("CONN", "db.connection").format(table="assistant_work"),
         "sleep_if_later": "__import__('time').sleep(0.6) if owner.endswith('B') else None"}  # each trick alone too


@pytest.mark.parametrize("trick", ["racy", "tricked", *ALONE])
def test_a_racy_claim_is_caught_whatever_it_fakes_or_sleeps(workers, trick):
    tricks = RACES["01_claims.ipynb"][2]
    source = tricks[trick] if trick in tricks else RACY_CLAIM.replace(READ, f"    {ALONE[trick]}\n{READ}")
    started = time.monotonic()
    trial, row = _raced(workers, source)
    assert trial.first is not None and trial.second is not None, f"{trick}: {trial}"
    assert trial.inside and "lock call" in trial.schedule
    assert time.monotonic() - started < 60


COUNTING = '''
{careful}
_careful = claim
{racy}
_racy, _calls = claim, []


def claim(db, owner, **options):  # racy the first two times this process is asked, then {then}
    _calls.append(owner)
    if len(_calls) <= 2:
        return _racy(db, owner, **options)
    return {after}
'''
THEN = {"careful": ("careful", "_careful(db, owner, **options)"), "gives_up": ("it claims nothing", "None")}


@pytest.mark.parametrize("then", sorted(THEN))
def test_a_racy_claim_that_counts_its_calls_is_caught(workers, then):
    """The judge runs A alone first and B then A; a claim that is racy in those and careful (or gives
    up) once it could be held does not do, from the same database, what it did alone."""
    words, after = THEN[then]
    source = COUNTING.format(careful=cell_of("01_claims.ipynb", "claim"), racy=RACY_CLAIM, then=words, after=after)
    with pytest.raises(schedule.CheckFailed, match="took other locks than"):
        _raced(workers, source)


def test_a_racy_claim_that_gives_up_when_its_calls_took_long_is_caught(workers):
    """Held while B runs (B sleeps 0.3 s), A notices the time its read and write took and gives up, which
    B then A explains; held as long with no B, it gives up too, which nothing explains."""
    began = "    time.sleep(0.3) if owner.endswith('B') else None\n    began = time.monotonic()\n"
    source = (RACY_CLAIM.replace("    connection = db.connection\n", f"{began}    connection = db.connection\n")
              .replace("    with db.immediate() as connection:\n", "    with db.immediate() as connection:\n"
                       "        if time.monotonic() - began > 0.15:\n            return None\n"))
    with pytest.raises(schedule.CheckFailed, match="went by how long"):
        _raced(workers, source)

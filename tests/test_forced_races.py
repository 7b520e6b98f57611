"""Forced races, graded at the learner process's lock calls (course.grading.judge.schedule).

A racy answer that fakes a read and a write before its real ones and sleeps out the race (before
its read when it is the later worker, between its read and its write) scores no more than its
twin: the same racy answer without the tricks. One class of such students, graded once by
`course autograde`, for each race the course forces (01's claims, 02's transcript write, 06's
admissions). First, quickly, the scheduler itself with real processes that carry the filter.
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

from test_hostile_submissions import RACY_CLAIM, RELEASE, SOLUTIONS, notebook, released_course, scores, submit
from test_resource_fence import MISTAKES

# --- the racy answers and their tricks, one kind per race --------------------------------------------

FAKE = ('CONN.execute("SELECT count(*) FROM {table}").fetchone(); '
        'CONN.execute("BEGIN IMMEDIATE"); CONN.execute("COMMIT")')  # a read, then a write, of nothing


def _cell(notebook_name: str, grade_id: str) -> str:
    cells = json.loads((SOLUTIONS / notebook_name).read_text())["cells"]
    return next("".join(c["source"]) for c in cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _tricks(racy: str, read: str, write: str, conn: str, table: str, later: str, seconds: float) -> dict[str, str]:
    """The racy answer, and the same with every trick at once: a read and a write of nothing before its
    real ones, a sleep between its read and its write, and one before its read when it is the later worker."""
    assert racy.count(read) == 1 and racy.count(write) == 1, "the racy answer changed: find its read and write again"
    indent = read[: len(read) - len(read.lstrip())]
    sleep, fake = f"__import__('time').sleep({seconds})", FAKE.replace("CONN", conn).format(table=table)
    return {"racy": racy, "tricked": racy.replace(read, f"{indent}{fake}\n{indent}{sleep} if {later} else None\n{read}")
            .replace(write, f"{indent}{sleep}\n{write}")}


OBSERVE = _cell("02_fencing.ipynb", "observe")
CHECK_INSIDE = "    with db.immediate() as connection:\n        assert_current(connection, work)\n"
CHECK_OUTSIDE = "    assert_current(db.connection, work)\n    with db.immediate() as connection:\n"
RACY_OBSERVE = OBSERVE.replace(CHECK_INSIDE, CHECK_OUTSIDE)
RACES = {  # notebook: (answer cell, race check, the tricks), with sleeps longer than Lab's wait (0.5 s; 06: 1.5 s)
    "01_claims.ipynb": ("claim", "test_claim_race", _tricks(
        RACY_CLAIM, '    row = connection.execute(\n        "SELECT w.*', '    generation = row["generation"] + 1\n',
        "db.connection", "assistant_work", "owner.endswith('B')", 0.6)),
    "02_fencing.ipynb": ("observe", "test_fences_inside_the_transaction", _tricks(
        RACY_OBSERVE, "    assert_current(db.connection, work)\n", "    with db.immediate() as connection:\n",
        "db.connection", "assistant_work", "work.generation == 1", 0.6)),
    "06_explore.ipynb": ("admit_generation", "test_admit_generation", _tricks(
        MISTAKES["check then record, replacing"], '    row = ledger.execute("SELECT generation',
        '    ledger.execute("INSERT', "ledger", "fence", "generation == 2", 1.6)),
}
NEEDED = {"01_claims.ipynb": ("claim_dataclass",), "02_fencing.ipynb": ("assert_current",)}  # what the race calls too


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
    correct = _cell("01_claims.ipynb", "claim")
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


# --- a class of racy students with tricks, graded by `course autograde` --------------------------------

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from course.grading.classes.autograde import autograde

    root = released_course(tmp_path_factory.mktemp("races") / "course")
    students = {}
    for name, (cell, _, tricks) in RACES.items():  # each notebook: the race's answer and what it calls, no other
        needed = {grade_id: _cell(name, grade_id) for grade_id in NEEDED.get(name, ())}
        for trick, source in tricks.items():
            student = f"{name[:2]}_{trick}"
            submit(root, student, {name: notebook(name, RELEASE, {**needed, cell: source})})
            students[student] = name
    results = {r.student: r for r in autograde(root=root, jobs=2, progress=False)}
    return root, students, results


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RACES))
def test_no_trick_scores_more_than_the_racy_answer_without_it(graded, name):
    root, students, _ = graded
    by_student = scores(root)
    race_check = f"{name.removesuffix('.ipynb')}/{RACES[name][1]}"
    twin = by_student[f"{name[:2]}_racy"]
    assert twin[race_check] == 0, f"the racy answer itself kept the race's points: {twin}"
    for trick in RACES[name][2]:
        mine = by_student[f"{name[:2]}_{trick}"]
        gained = {part: (points, twin.get(part, 0)) for part, points in mine.items() if points > twin.get(part, 0)}
        assert gained == {}, f"{name} {trick} earned more than the racy answer: {gained}"
        assert mine[race_check] == 0, f"{name} {trick} kept the race's points"

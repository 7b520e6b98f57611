"""The schedule explorer (06): every interleaving of two holders' steps, checked from the database.

The numbers are what the combinatorics and the step set say; the reference breaks nothing; the
owner-only and the generation-blind fences are caught, each with a named first violating
schedule, whether they come from the runtime's module or from a learner's notebooks; runs are
deterministic and leave nothing behind.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from conftest import marked_pids
from course.lessons.interleavings import PROGRAMS, Step, explore_schedules, schedule_count, schedules
from course.lessons.schedule_view import draw_schedule, functions, show_schedules
from course.lessons.wrong_fences import generation_blind, owner_only, reference_with_fence
from sovereign_agent.ownership import REFERENCE
from test_checkpoint import ALL_BUT_GENERATION, OWNER_ONLY, RIGHT, write_learner

ROOT = Path(__file__).resolve().parents[1]
OWNER_ONLY_FIRST = ("A claims · A writes · B claims · B writes · B finishes · lease expires · A FINISHES · "
                    "operator cancels")
BLIND_FIRST = ("A claims · A writes · lease expires · B claims · A FINISHES · B writes · B finishes · "
               "operator cancels")
# 02's observe as the course asks for it: no `now`, the fence reads the wall clock itself.
OBSERVE_WITHOUT_NOW = '''
def observe(db, work, message):
    encoded = json.dumps(message, allow_nan=False)
    with db.immediate() as connection:
        assert_current(connection, work)
        connection.execute("INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)",
                           (work.id, work.generation, encoded))
'''


def test_the_schedules_are_every_order_that_keeps_each_actors_own_order_once():
    found = list(schedules())
    assert len(found) == len(set(found)) == schedule_count() == math.factorial(8) // (6 * 6) == 1120
    for schedule in found:
        for actor, steps in PROGRAMS.items():
            assert tuple(step.action for step in schedule if step.actor == actor) == steps
    small = {"A": ("claim", "write"), "B": ("claim",)}
    assert [[str(step) for step in s] for s in schedules(small)] == [
        ["A claims", "A writes", "B claims"], ["A claims", "B claims", "A writes"],
        ["B claims", "A claims", "A writes"]]
    assert schedule_count(small) == 3


def test_the_reference_breaks_no_invariant_in_any_schedule():
    found = explore_schedules(REFERENCE)
    assert (found.schedules, found.violating, found.by_invariant, found.first) == (1120, 0, {}, None)


def test_a_run_leaves_no_file_thread_or_process(tmp_path):
    threads = set(threading.enumerate())
    steps = {"A": ("claim", "write"), "clock": ("expire",), "B": ("claim", "finish")}
    found = explore_schedules(REFERENCE, steps, folder=tmp_path)
    assert found.schedules == schedule_count({"A": "12", "clock": "1", "B": "12"}) == 30 and found.violating == 0
    assert list(tmp_path.iterdir()) == [] and not marked_pids(tmp_path)
    assert set(threading.enumerate()) == threads


def test_an_owner_only_fence_is_caught_and_its_first_violating_schedule_named():
    found = explore_schedules(reference_with_fence(owner_only))
    assert found.violating == 780
    assert found.by_invariant == {"wrong result": 780, "stale write": 508, "two finished": 108}
    assert found.first.line() == OWNER_ONLY_FIRST
    assert found.first.violations == ["wrong result: the work says \"A's result\", but no holder finished while "
                                      "current: A finished when its lease had ended at +30 s (now +31 s)"]
    assert found.first.marked == 6  # A's finish, the seventh step


def test_a_generation_blind_fence_is_caught_where_a_replacement_reuses_the_label():
    found = explore_schedules(reference_with_fence(generation_blind))
    assert found.violating == 56 and found.by_invariant == {"wrong result": 34, "stale write": 36}
    assert found.first.line() == BLIND_FIRST
    assert found.first.violations == ["wrong result: the work says \"A's result\", but no holder finished while "
                                      "current: A finished when the row was at generation 2"]
    again = explore_schedules(reference_with_fence(generation_blind))
    assert (again.violating, again.by_invariant, again.first.line(), again.first.violations) == (
        found.violating, found.by_invariant, found.first.line(), found.first.violations)
    assert [o.text for o in again.first.outcomes] == [o.text for o in found.first.outcomes]


@pytest.mark.parametrize("fence, violating, first", [
    (None, 0, None), (OWNER_ONLY, 780, OWNER_ONLY_FIRST), (ALL_BUT_GENERATION, 56, BLIND_FIRST),
], ids=["right", "owner-only", "generation-blind"])
def test_a_learners_notebooks_are_explored_as_written(tmp_path, fence, violating, first):
    folder = write_learner(tmp_path / "learner", RIGHT | ({"assert_current": fence} if fence else {}))
    ownership, namespaces = functions("my functions", folder)
    found = explore_schedules(ownership, namespaces=namespaces)
    assert found.violating == violating
    assert (found.first.line() if found.first else None) == first


def test_an_observe_without_now_reads_the_injected_clock(tmp_path):
    # Its fence calls time.time() in the learner's module: after "lease expires" that must be the
    # schedule's clock, or a correct fence would accept A's write past its lease.
    folder = write_learner(tmp_path / "learner", RIGHT | {"observe": OBSERVE_WITHOUT_NOW})
    ownership, namespaces = functions("my functions", folder)
    assert explore_schedules(ownership, namespaces=namespaces).violating == 0
    assert explore_schedules(ownership).violating > 0  # the same functions on the real clock: wrongly caught


def test_a_fence_that_refuses_the_current_holder_is_caught_too():
    def refuses(connection, work, now=None):
        raise PermissionError("never")

    found = explore_schedules(reference_with_fence(refuses), {"A": ("claim", "write", "finish")})
    assert found.schedules == 1 and found.first.violations == [
        "current holder refused: A held the live lease and its write was refused",
        "current holder refused: A held the live lease and its finish was refused",
        "wrong result: the work says None; the last holder to finish while current was A"]
    assert found.first.marked == 1
    assert found.first.schedule == (Step("A", "claim"), Step("A", "write"), Step("A", "finish"))


def test_the_release_with_its_stubs_names_the_missing_function(capsys):
    assert show_schedules("my functions", ROOT / "notebooks" / "ch12") is None
    assert "not implemented yet: write `claim` in 01_claims" in capsys.readouterr().out


def test_the_first_violating_schedule_is_drawn_at_notebook_width(tmp_path):
    found = explore_schedules(reference_with_fence(generation_blind), {"A": ("claim", "write"), "clock": ("expire",),
                                                                       "B": ("claim",)})
    png = draw_schedule(found.first, tmp_path / "first.png", show=False)
    assert png.startswith(b"\x89PNG") and (tmp_path / "first.png").read_bytes() == png
    width = int.from_bytes(png[16:20], "big")
    assert width == 950

"""The wire between judge and learner: what crosses is plain data, and only that.

Both ends are real `Peer`s on a real socket pair (in one test process: the wire does not care
which process holds an end; the grading tests run it across sandboxes)."""

from __future__ import annotations

import dataclasses
import math
import socket
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.lessons import checks
from course.grading import wire
from sovereign_agent.assistant_work import Claim


@pytest.fixture
def pair():
    """(judge end, learner end): the learner end answers calls by name from `names`."""
    names: dict = {}
    left, right = socket.socketpair()
    judge = wire.Peer(left)
    learner = wire.Peer(right, resolve_name=lambda name: names[name])
    yield judge, learner, names
    judge.close()
    learner.close()


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner) | st.tuples(inner, inner) | st.frozensets(st.integers())
    | st.dictionaries(st.text() | st.integers(), inner),
    max_leaves=20,
)


@given(plain)
@settings(max_examples=200, deadline=None)
def test_plain_values_cross_as_themselves(value):
    assert wire.decode(wire.encode(value)) == value
    assert type(wire.decode(wire.encode(value))) is type(value)


def test_special_floats_cross_and_nan_stays_nan():
    back = wire.decode(wire.encode([math.inf, -math.inf, math.nan]))
    assert back[:2] == [math.inf, -math.inf] and math.isnan(back[2])


def test_a_subclass_crosses_as_its_plain_base_and_loses_its_tricks():
    class Everything(dict):
        def __eq__(self, other):
            return True

    class Loud(str):
        def __eq__(self, other):
            return True

    back = wire.decode(wire.encode(Everything(health="A")))
    assert type(back) is dict and back != {"health": "B"}
    assert type(wire.decode(wire.encode(Loud("refused")))) is str


def test_objects_that_are_not_plain_data_do_not_cross():
    for value in (object(), threading.Lock(), int, iter([1])):
        with pytest.raises(wire.NotPlainData):
            wire.encode(value)


def test_the_course_claim_crosses_as_itself_and_a_learner_dataclass_as_a_mirror():
    held = Claim("w", "s", "p", 2, "o", "e" * 32)
    back = wire.decode(wire.encode(held))
    assert type(back) is Claim and back == held

    @dataclasses.dataclass(frozen=True, slots=True)
    class Mine:
        id: str
        generation: int = 1

        def __eq__(self, other):  # never crosses: the mirror compares like a dataclass
            return True

    data = wire.encode(Mine("w"))
    mirrored = wire.decode(data)
    assert type(mirrored).__name__ == "Mine" and mirrored.generation == 1
    assert [f.name for f in dataclasses.fields(type(mirrored))] == ["id", "generation"]
    assert mirrored != wire.decode(wire.encode(Mine("other")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        mirrored.generation = 2
    assert type(wire.decode(wire.encode(Mine("x")))) is type(mirrored)  # one mirror per declaration


def test_a_declaration_cannot_smuggle_methods_or_odd_names():
    data = wire.encode(Claim("w", "s", "p", 2, "o", "e"))
    data["cls"] = {"module": "learner_01_claims", "qualname": "Claim"}
    data["schema"] = {"name": "Claim", "params": {"eq": True, "__eq__": "lambda: True"},
                      "fields": [{"name": "__eq__", "init": True, "repr": True, "compare": True, "kw_only": False}]}
    with pytest.raises(wire.NotPlainData):
        wire.decode(data)


def test_calls_cross_both_ways_while_a_call_is_in_flight(pair):
    judge, learner, names = pair
    seen = []

    def learner_function(callback, n):
        # calls back the judge, which calls the learner again, before this call returns
        return callback(n) + 1

    names["f"] = learner_function
    names["g"] = lambda n: n * 10

    def judge_callback(n):
        seen.append(n)
        return judge.call({"name": "g"}, (n,))

    assert judge.call({"name": "f"}, (judge_callback, 4)) == 41
    assert seen == [4]


def test_an_exception_crosses_as_its_nearest_known_class_with_its_message(pair):
    judge, _, names = pair

    class Refusal(PermissionError):
        pass

    def refuse():
        raise Refusal("worker claim expired or superseded")

    def stub():
        raise NotImplementedError()

    names["refuse"], names["stub"] = refuse, stub
    with pytest.raises(PermissionError) as raised:
        judge.call({"name": "refuse"})
    assert type(raised.value) is PermissionError and str(raised.value) == "worker claim expired or superseded"
    assert raised.value.remote and "Refusal" in raised.value.remote_types[0]
    with pytest.raises(NotImplementedError) as raised:
        judge.call({"name": "stub"})
    assert raised.value.stub == "stub"


def test_what_an_error_shows_crosses_as_data_and_a_name_shows_nothing(pair):
    """An OSError's errno crosses (the report's findings read it); a learner's class named like the
    grader's tripwire crosses as its nearest known base, which is not the tripwire."""
    from course.grading.findings import of_error

    judge, _, names = pair

    class CourseAnswerUsed(Exception):
        pass

    def forged():
        raise CourseAnswerUsed("your answer called the course's own `claim`")

    def full():
        raise OSError(28, "No space left on device")

    names["forged"], names["full"] = forged, full
    found = {}
    for name in ("forged", "full"):
        with pytest.raises(Exception) as raised:
            judge.call({"name": name})
        found[name] = (type(raised.value).__name__, getattr(raised.value, "errno", None), of_error(raised.value))
    assert found == {"forged": ("Exception", None, set()), "full": ("OSError", 28, {"disk_limit"})}


def _traced_call(db, sends_tracers: bool, name: str, function, argument):
    """Call `function` on the other side with `argument`, from a side that does (the learner process)
    or does not (the judge) hand out the tracer a Lab race set; the statements the hook heard."""
    left, right = socket.socketpair()
    caller = wire.Peer(left, sends_tracers=sends_tracers)
    wire.Peer(right, resolve_name={name: function}.get)  # the callee: its reader thread answers
    statements = []
    checks.trace(db.connection, statements.append)
    try:
        return caller.call({"name": name}, (argument,)), statements
    finally:
        checks.trace(db.connection, None)
        left.close()
        right.close()


def test_a_database_crosses_by_path_and_the_learner_processs_tracer_follows_it(db):
    """07: the learner's own race (Lab's, in its process) hears the approvals the judge runs for it."""
    def count_rows(other):
        rows = other.connection.execute("SELECT count(*) FROM assistant_work").fetchone()[0]
        return {"rows": rows, "same object": other is db, "path": other.path}

    reply, statements = _traced_call(db, True, "count", count_rows, db)
    assert reply == {"rows": 0, "same object": False, "path": Path(db.path)}
    assert statements == ["SELECT count(*) FROM assistant_work"]
    nothing, statements = _traced_call(db, True, "nothing", lambda connection: "ran no statement", db.connection)
    assert (nothing, statements) == ("ran no statement", []), "finding a connection's file is not traced"


def test_the_judge_hands_no_tracer_to_a_learner_process(db):
    """No race the judge runs hears a learner process: its races are scheduled at lock calls."""
    count = lambda connection: connection.execute("SELECT count(*) FROM assistant_work").fetchone()[0]  # noqa: E731
    assert _traced_call(db, False, "count", count, db.connection) == (0, [])


def test_a_database_missing_its_marker_is_reopened_as_it_is(pair, db):
    judge, _, names = pair
    names["exists"] = lambda other: Path(other.path).with_suffix(".authority").exists()
    marker = Path(db.path).with_suffix(".authority")
    marker.unlink()
    assert judge.call({"name": "exists"}, (db,)) is False
    assert not marker.exists()


def test_a_peer_that_ends_mid_call_is_reported_not_waited_for(pair):
    judge, learner, names = pair
    names["hang"] = lambda: time.sleep(30)
    threading.Timer(0.2, learner.close).start()
    started = time.monotonic()
    with pytest.raises(wire.PeerGone):
        judge.call({"name": "hang"})
    assert time.monotonic() - started < 5


def test_an_over_long_message_ends_the_conversation():
    left, right = socket.socketpair()
    try:
        left.sendall((wire.LIMIT + 1).to_bytes(4, "big") + b"{}")
        assert wire.receive_message(right) is None
    finally:
        left.close()
        right.close()

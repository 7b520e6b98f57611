"""The owned loop: a fence before every model call and every tool call, bounded turns and time."""

from __future__ import annotations

import json

import pytest

from conftest import count
from sovereign_agent.agent_loop import Limits, LoopResult, run_loop
from sovereign_agent.assistant_work import BudgetExhausted, cancel, claim, enqueue, observe, reserve_model_call
from sovereign_agent.model import ModelTurn, ToolCall


class Script:
    """A model that plays back turns and logs each call into a shared journal."""

    def __init__(self, journal: list, turns: list[ModelTurn]) -> None:
        self.journal, self.turns = journal, list(turns)

    def complete(self, messages, tools, *, timeout, max_output_tokens):
        self.journal.append(("model", len(messages)))
        return self.turns.pop(0)


class Tools:
    def __init__(self, journal: list) -> None:
        self.journal = journal
        self.specs = [{"name": "echo", "description": "echo", "parameters": {}}]

    def __call__(self, call: ToolCall):
        self.journal.append(("tool", call.name))
        return {"echo": call.arguments}


def callbacks(journal: list, *, stale_after: int | None = None):
    checks = {"n": 0}

    def check_current():
        checks["n"] += 1
        journal.append(("check",))
        if stale_after is not None and checks["n"] > stale_after:
            raise PermissionError("superseded")

    return {
        "observe": lambda message: journal.append(("observe", message["role"])),
        "check_current": check_current,
        "reserve_call": lambda: journal.append(("reserve",)),
    }


def tool_turn(*names: str) -> ModelTurn:
    return ModelTurn(calls=tuple(ToolCall(f"c{i}", name, {"i": i}) for i, name in enumerate(names)))


def test_fences_come_before_every_model_call_and_every_tool_call():
    journal: list = []
    model = Script(journal, [tool_turn("echo", "echo"), ModelTurn(content="finished")])
    messages = [{"role": "user", "content": "go"}]
    result = run_loop(model, Tools(journal), messages, limits=Limits(), **callbacks(journal))
    assert result == LoopResult("DONE", "finished", 2)
    assert journal == [
        ("check",),
        ("reserve",),
        ("model", 1),
        ("observe", "assistant"),
        ("check",),
        ("tool", "echo"),
        ("observe", "tool"),
        ("check",),
        ("tool", "echo"),
        ("observe", "tool"),
        ("check",),
        ("reserve",),
        ("model", 4),
        ("observe", "assistant"),
    ]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert json.loads(messages[2]["content"]) == {"echo": {"i": 0}}


def test_a_stale_holder_stops_before_the_next_tool_call():
    journal: list = []
    model = Script(journal, [tool_turn("echo", "echo")])
    with pytest.raises(PermissionError):
        run_loop(model, Tools(journal), [], limits=Limits(), **callbacks(journal, stale_after=2))
    assert [entry for entry in journal if entry[0] == "tool"] == [("tool", "echo")]


def test_a_stale_holder_never_reaches_the_model():
    journal: list = []
    model = Script(journal, [ModelTurn(content="x")])
    with pytest.raises(PermissionError):
        run_loop(model, Tools(journal), [], limits=Limits(), **callbacks(journal, stale_after=0))
    assert journal == [("check",)]


def test_turns_are_bounded():
    journal: list = []
    model = Script(journal, [tool_turn("echo") for _ in range(5)])
    result = run_loop(model, Tools(journal), [], limits=Limits(max_turns=3), **callbacks(journal))
    assert (result.status, result.turns) == ("TURNS_EXHAUSTED", 3)
    assert journal.count(("reserve",)) == 3


def test_time_is_bounded_on_the_loops_own_clock():
    journal: list = []
    ticks = iter([0.0, 0.0, 5.0, 11.0])
    model = Script(journal, [tool_turn("echo") for _ in range(5)])
    result = run_loop(
        model, Tools(journal), [], limits=Limits(max_seconds=10), clock=lambda: next(ticks), **callbacks(journal)
    )
    assert (result.status, result.turns) == ("TIMEOUT", 2)
    assert sum(1 for entry in journal if entry[0] == "model") == 2


def test_a_stop_request_is_honoured_between_turns():
    journal: list = []
    model = Script(journal, [tool_turn("echo") for _ in range(5)])
    stops = iter([False, True])
    result = run_loop(model, Tools(journal), [], limits=Limits(), should_stop=lambda: next(stops), **callbacks(journal))
    assert (result.status, result.turns) == ("STOPPED", 1)


@pytest.mark.parametrize("limits", [{"max_turns": 0}, {"max_turns": 101}, {"max_seconds": 0}, {"max_seconds": 3601}])
def test_limits_must_be_bounded(limits):
    with pytest.raises(ValueError):
        Limits(**limits)


def test_the_loop_with_database_fences_refuses_a_cancelled_holder_mid_turn(db):
    """The real callbacks: a cancellation while the model "thinks" keeps its answer out of the transcript."""
    identifier = enqueue(db, "o", "lucy", "p")
    work = claim(db, "worker")

    class CancelledWhileThinking:
        def complete(self, messages, tools, *, timeout, max_output_tokens):
            cancel(db, identifier)
            return ModelTurn(content="a late, fluent answer")

    with pytest.raises(PermissionError):
        run_loop(
            CancelledWhileThinking(),
            Tools([]),
            [],
            limits=Limits(),
            observe=lambda message: observe(db, work, message),
            check_current=lambda: None,
            reserve_call=lambda: reserve_model_call(db, work, 100),
        )
    assert count(db, "assistant_transcript") == 0
    assert count(db, "assistant_model_calls") == 1


def test_the_model_call_budget_ends_the_loop(db):
    enqueue(db, "o", "lucy", "p")
    work = claim(db, "worker")
    model = Script([], [tool_turn("echo") for _ in range(20)])
    with pytest.raises(BudgetExhausted):
        run_loop(
            model,
            Tools([]),
            [],
            limits=Limits(max_turns=20),
            observe=lambda message: observe(db, work, message),
            check_current=lambda: None,
            reserve_call=lambda: reserve_model_call(db, work, 100),
        )
    assert count(db, "assistant_model_calls") == 8
    assert count(db, "assistant_transcript") == 16  # 8 assistant turns, 8 tool results

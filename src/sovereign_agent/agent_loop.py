"""The owned loop: bounded turns, and a fence before every model call and every tool call.

The loop knows nothing about SQLite. The worker hands it three callbacks bound to its claim:
`check_current` (raise if the claim is stale), `reserve_call` (count a model call under the
fence) and `observe` (write a message to the transcript under the fence).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from sovereign_agent.model import Model, ToolCall


@dataclass(frozen=True)
class Limits:
    max_turns: int = 6
    max_seconds: float = 60.0
    model_timeout: float = 20.0
    max_output_tokens: int = 1024

    def __post_init__(self) -> None:
        if not 0 < self.max_turns <= 100 or not 0 < self.max_seconds <= 3600:
            raise ValueError("loop limits must be bounded")


class Dispatcher(Protocol):
    specs: list[dict[str, Any]]

    def __call__(self, call: ToolCall) -> Any: ...


@dataclass(frozen=True)
class LoopResult:
    status: str  # DONE, STOPPED, TIMEOUT or TURNS_EXHAUSTED
    content: str = ""
    turns: int = 0


def run_loop(
    model: Model,
    dispatcher: Dispatcher,
    messages: list[dict[str, Any]],
    *,
    limits: Limits,
    clock: Callable[[], float] = time.monotonic,
    observe: Callable[[dict[str, Any]], None],
    check_current: Callable[[], None],
    reserve_call: Callable[[], None],
    should_stop: Callable[[], bool] = lambda: False,
) -> LoopResult:
    started = clock()
    for turn in range(1, limits.max_turns + 1):
        if should_stop():
            return LoopResult("STOPPED", turns=turn - 1)
        if clock() - started >= limits.max_seconds:
            return LoopResult("TIMEOUT", turns=turn - 1)
        check_current()
        reserve_call()
        reply = model.complete(
            messages, dispatcher.specs, timeout=limits.model_timeout, max_output_tokens=limits.max_output_tokens
        )
        message = {
            "role": "assistant",
            "content": reply.content,
            "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.calls],
        }
        observe(message)
        messages.append(message)
        if not reply.calls:
            return LoopResult("DONE", reply.content, turn)
        for call in reply.calls:
            check_current()
            output = dispatcher(call)
            result = {"role": "tool", "id": call.id, "name": call.name, "content": json.dumps(output, sort_keys=True)}
            observe(result)
            messages.append(result)
    return LoopResult("TURNS_EXHAUSTED", turns=limits.max_turns)

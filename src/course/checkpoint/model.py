"""The recovery oracle: a model that counts how often it is asked, and fails every time.

A replacement that continues an approved order must get everything it needs from durable
records. Giving it this model makes the requirement observable: any call is counted and
raises, so a recovery that quietly asked a model to reconstruct the purchase cannot pass.
"""

from __future__ import annotations

from typing import Any

from sovereign_agent.model import ModelTurn


class NewReasoningRequested(AssertionError):
    """Raised by NoNewReasoning; an AssertionError, as the chapter's listing 7 expects."""


class NoNewReasoning:
    """An instrumented model: `calls` counts every `complete`, and every `complete` raises."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_output_tokens: int | None = None,
    ) -> ModelTurn:
        self.calls += 1
        raise NewReasoningRequested(
            f"recovery asked the model for new reasoning (call {self.calls}); it must continue "
            "the recorded, approved operation from the database instead"
        )


class CountingModel:
    """Wraps a real model for NEW work (which may reason) and counts its calls separately."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls = 0

    def complete(self, messages, tools, *, timeout, max_output_tokens) -> ModelTurn:
        self.calls += 1
        return self.model.complete(messages, tools, timeout=timeout, max_output_tokens=max_output_tokens)

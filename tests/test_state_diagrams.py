"""01_claims draws the work and order state diagrams from the runtime, and the drawing agrees with it.

The edges come from `course.lessons.state_diagrams.derive`, which drives the runtime's own functions on
scratch databases and logs every status change with triggers. These tests run the diagram cell
of 01 as written, read the drawn arrows back from its figures, and compare them with a fresh
exploration of the runtime: an edge drawn that the runtime never takes, or one it takes that is
not drawn, fails. The comparison itself is shown to fail on a mutated edge set.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pytest  # noqa: E402

from course.lessons import state_diagrams  # noqa: E402
from course.lessons.state_diagrams import START, declared_states, derive, disagreements, draw, drawn_edges  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CELL = "state_diagrams"


@pytest.fixture(scope="module")
def runtime() -> dict[str, set[tuple[str, str]]]:
    return {machine: set(edges) for machine, edges in derive().items()}


def drawn_by_01() -> dict[str, set[tuple[str, str]]]:
    """Run 01's diagram cell as written (solutions and release alike) and read its arrows back."""
    found = {}
    for folder in ("solutions", "notebooks"):
        cells = nbformat.read(ROOT / folder / "ch12" / "01_claims.ipynb", as_version=4).cells
        source = next(c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == CELL)
        plt.close("all")
        exec(compile(source, f"01_claims.ipynb:{CELL}", "exec"), {"__name__": "__main__"})
        drawn: dict[str, set[tuple[str, str]]] = {}
        for number in plt.get_fignums():
            for machine, edges in drawn_edges(plt.figure(number)).items():
                drawn.setdefault(machine, set()).update(edges)
        plt.close("all")
        found[folder] = drawn
    assert found["solutions"] == found["notebooks"], "the release draws other edges than the solutions"
    return found["solutions"]


def test_every_status_the_schema_declares_is_reached_and_left_as_the_runtime_does(runtime):
    for machine in ("work", "orders"):
        reached = {after for _, after in runtime[machine]}
        assert reached == set(declared_states(machine)), f"{machine}: no action of the explorer reaches " \
            f"{set(declared_states(machine)) - reached}; teach course.lessons.state_diagrams the function that does"
        assert {before for before, _ in runtime[machine]} - {START} <= reached
    # Facts the notebooks teach, which the exploration must find on its own.
    assert ("RUNNING", "RUNNING") in runtime["work"]  # a replacement claims an expired lease
    assert ("UNKNOWN", "SENDING") in runtime["orders"]  # the same operation id is sent again
    assert not {(s, t) for s, t in runtime["work"] if s == "DONE"}  # DONE is final
    assert not {(s, t) for s, t in runtime["orders"] if s in ("CONFIRMED", "REJECTED", "REVOKED")}


def test_01_draws_exactly_the_runtimes_transitions(runtime):
    drawn = drawn_by_01()
    assert set(drawn) == {"work", "orders"}, f"01's diagram cell drew {sorted(drawn)}; expected both machines"
    found = disagreements(runtime, drawn)
    assert found == [], "01's diagrams and the runtime disagree:\n" + "\n".join(found)


def test_draw_shows_every_declared_state_and_only_the_edges_it_is_given(runtime):
    edges = derive()
    for machine in ("work", "orders"):
        figure = draw(machine, edges)
        states = {t.get_gid().removeprefix("state:") for t in figure.axes[0].texts if (t.get_gid() or "").startswith("state:")}
        assert states == set(declared_states(machine))
        assert drawn_edges(figure)[machine] == runtime[machine]
        plt.close(figure)


def test_the_comparison_fails_on_a_mutated_edge_set(runtime):
    """The check can fail: drop a real edge and add one the runtime never takes."""
    drawn = {machine: set(edges) for machine, edges in runtime.items()}
    drawn["work"].discard(("BLOCKED", "READY"))  # approve's wake-up, forgotten
    drawn["orders"].add(("CONFIRMED", "SENDING"))  # a settled order sent again: never
    found = disagreements(runtime, drawn)
    assert found == ["orders: drawn but the runtime never does CONFIRMED -> SENDING",
                     "work: the runtime does BLOCKED -> READY but it is not drawn"]
    with pytest.raises(AssertionError):
        assert disagreements(runtime, drawn) == []


def test_a_drawing_with_a_mutated_edge_is_caught(runtime, monkeypatch):
    """The same, end to end: 01's cell drawing from a mutated exploration is caught."""
    real = state_diagrams.derive

    def mutated():
        edges = real()
        edges["orders"][("REVOKED", "APPROVED")] = {"approve"}  # a revoked order approved again
        return edges

    monkeypatch.setattr(state_diagrams, "derive", mutated)
    assert disagreements(runtime, drawn_by_01()) == [
        "orders: drawn but the runtime never does REVOKED -> APPROVED"]

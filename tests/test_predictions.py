"""Predictions bind (course.lessons.predictions): no experiment before a prediction, the prediction kept
beside what happened, and 07's calibration read from what was kept."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from course.lessons import predictions
from course.lessons.checks import STRICT


def test_an_unset_prediction_stops_the_experiment_with_one_line(monkeypatch):
    monkeypatch.delenv(STRICT, raising=False)
    for value in (None, {"observe": "refused", "finish": None}):
        with pytest.raises(predictions.PredictionUnset) as unset:
            predictions.bound("predicted_stale", {"predicted_stale": value})
        assert "\n" not in str(unset.value) and "`predicted_stale`" in str(unset.value)
    assert predictions.bound("predicted_rows", {"predicted_rows": 0}) == 0, "0 is a prediction"


def test_where_the_course_s_own_answers_run_nobody_predicts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(STRICT, "strict")
    assert predictions.bound("predicted_rows", {}) is None
    monkeypatch.chdir(tmp_path)  # the experiment ran anyway: there is no prediction to print beside it, or to keep
    assert not predictions.compared("predicted_rows", None, 1, "02_fencing")
    assert not predictions.compared("predicted_crash", {"POST": None}, {"POST": 1}, "04_recovery")
    assert capsys.readouterr().out == "" and not predictions.KEPT.exists()


def test_each_comparison_is_kept_and_the_calibration_shows_the_latest_of_each(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert "No predictions kept yet" in predictions.calibration()
    assert not predictions.compared("predicted_rows", 2, 1, "02_fencing")
    assert "not what you predicted" in capsys.readouterr().out
    assert predictions.compared("predicted_rows", 1, 1, "02_fencing")  # predicted again, after a rerun
    assert predictions.compared("predicted_calls", 1, 1, "03_leases")
    with open(predictions.KEPT, "a") as handle:
        handle.write('{"notebook": "04_recov')  # a line cut short
    kept = [json.loads(line) for line in predictions.KEPT.read_text().splitlines()[:3]]
    assert [record["held"] for record in kept] == [False, True, True] and all(record["when"] for record in kept)
    summary = predictions.calibration()
    assert summary.splitlines()[-1] == "2 of 2 predictions held.", summary
    assert summary.index("02_fencing: predicted_rows") < summary.index("03_leases: predicted_calls")


def test_a_folder_that_cannot_be_written_keeps_nothing_and_says_nothing(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "read-only"
    folder.mkdir()
    predictions.keep({"notebook": "01_claims", "name": "x"}, kept=folder / "missing" / "kept.jsonl")
    assert not (folder / "missing").exists() and capsys.readouterr().out == ""


def test_a_prediction_agrees_whatever_its_form(tmp_path, monkeypatch, capsys):
    assert predictions.agrees("1", 1) and predictions.agrees(" Refused", "refused")
    assert predictions.agrees([0, 1500], (0, 1500))
    assert predictions.agrees({"POST": "1", "first pass": "Vanilla"}, {"POST": 1, "first pass": "vanilla"})
    assert not predictions.agrees({"POST": 1}, {"POST": 1, "GET": 1}) and not predictions.agrees("2", 1)
    assert not predictions.agrees("?", (0, 1500)) and not predictions.agrees(None, 0)
    monkeypatch.chdir(tmp_path)
    assert not predictions.compared("predicted_stale", {"observe": "refused", "finish": "accepted"},
                                    {"observe": "refused", "finish": "refused"}, "04_recovery")
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("You predicted {'observe': 'refused', 'finish': 'accepted'}; the run showed") and (
        "not what you predicted (for 'finish')." in said), said


def test_a_prediction_the_cell_already_shows_is_kept_quietly(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    monkeypatch.chdir(tmp_path)
    assert predictions.recorded("predicted_rows", 1, 1, "02_fencing") and capsys.readouterr().out == ""
    killed = SimpleNamespace(case="killed", supplier_orders=1)
    paused = SimpleNamespace(case="paused", stale_attempts=[], refused_boundaries=[])  # stopped first: nothing counted
    predictions.checkpoint_kept([killed, paused], {"predicted_killed": "1", "predicted_paused": 3})
    kept = predictions.latest()
    assert [(r["notebook"], r["name"], r["happened"], r["held"]) for r in kept] == [
        ("02_fencing", "predicted_rows", 1, True), ("05b_crashes", "predicted_killed", 1, True)], kept
    assert capsys.readouterr().out == ""


# --- the notebooks: every prediction binds the experiment after it ---------------------------------

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "ch12"
# Predictions that a whole cell of several shows beside what happened without binding it, and why.
NOT_BOUND = {
    # one checkpoint run covers all four cases: it shows each prediction beside its case (course.checkpoint.report)
    # and keeps those set (checkpoint_kept); waiting for all four would hold the whole run for one blank
    *(("05b_crashes", f"predicted_{case}") for case in ("killed", "live_stale", "paused", "accepted_then_crash")),
    # one dict for two cells and a `whose` switch; show_schedules prints each figure beside its prediction
    ("06_explore", "predicted"), ("06_explore", "whose"),
}


def _tags(cell) -> list[str]:
    return cell["metadata"].get("tags", [])


def _binds(statement: ast.stmt) -> str | None:
    """The prediction `guess = bound("<name>", globals())` binds, or None."""
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Name) and call.func.id == "bound" and isinstance(call.args[0], ast.Constant):
            return call.args[0].value
    return None


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda path: path.stem)
def test_every_observation_after_a_prediction_binds_it_first_and_compares_it_last(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    for cell in (c for c in cells if "prediction" in _tags(c)):
        after = next(c for c in cells[cells.index(cell) + 1:] if "observation" in _tags(c))  # past helpers, predictions
        source = "".join(after["source"])
        for name in (target.id for node in ast.parse("".join(cell["source"])).body for target in node.targets):
            if (path.stem, name) in NOT_BOUND:
                continue
            body = ast.parse(source).body
            (entered,) = [node for node in body if isinstance(node, ast.With)][:1]
            before = body[:body.index(entered)]
            definitions = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
            assert all(isinstance(node, definitions) for node in before), (
                f"{path.stem}/{after['id']}: something runs before the prediction is bound")
            assert ast.unparse(entered.items[0].context_expr).startswith("observation("), after["id"]
            assert _binds(entered.body[0]) == name, f"{path.stem}/{after['id']}: its first statement must bind {name}"
            calls = [node for node in ast.walk(entered)
                     if isinstance(node, ast.Call) and ast.unparse(node.func) == "compared"]
            assert [ast.literal_eval(call.args[0]) for call in calls] == [name], f"{path.stem}/{after['id']}"
            assert ast.unparse(entered.body[-1]).startswith("compared("), f"{path.stem}/{after['id']} ends by comparing"
            assert f'globals().get("{name}")' not in source, f"{path.stem}/{after['id']} reads it unbound"


def test_07_shows_the_calibration_before_the_recall():
    cells = json.loads((SOLUTIONS / "07_review.ipynb").read_text())["cells"]
    ids = [c["id"] for c in cells]
    at = ids.index("calibration")
    shown, said, then = cells[at], cells[at - 1], cells[at + 1]
    assert "observation" in _tags(shown) and "".join(shown["source"]) == "print(calibration())"
    assert shown["metadata"]["nbgrader"] == {"grade": False, "grade_id": "calibration", "locked": True,
                                             "schema_version": 3, "solution": False, "task": False}
    assert said["cell_type"] == "markdown" and "surprised" in "".join(said["source"])
    assert "`07b_recall`" in "".join(then["source"]) and at + 1 == len(cells) - 1, "07's last cell: on to the recall"
    recall = ["".join(c["source"]) for c in json.loads((SOLUTIONS / "07b_recall.ipynb").read_text())["cells"]
              if c["cell_type"] == "markdown"]
    headings = [text for text in recall if text.startswith("## ")]
    assert headings[0].startswith("## Active recall"), headings

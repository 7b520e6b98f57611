"""Predictions that bind: an experiment runs only once the learner has written down what it will
show, prints that beside what happened, and keeps both (with when the prediction was made), so
that 07 can show which predictions held and which surprised.

A prediction cell binds a name to None; the learner replaces None (or each None of a dict). The
observation cell below it starts with `bound(...)`, which stops the cell with one line while the
prediction is unset (course.lessons.checks.observation prints it), and ends with `compared(...)`, which
takes a prediction in whatever form it was written (`agrees`: 1 and "1", (0, 1500) and [0, 1500]).
05's run cell covers four predictions with one checkpoint run: it shows each beside its case itself
(course.checkpoint.report) and keeps them with `checkpoint_kept`, binding none.
Where the course's own answers run (`COURSE_STATED_FACTS=strict`: CI's papermill runs of the
solutions), an unset prediction does not stop the experiment, and nothing is compared or kept:
nobody is predicting there.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from course.lessons.checks import STRICT, PredictionUnset, wrap

KEPT = Path(".predictions.jsonl")  # beside the notebooks, in the learner's working copy


def unset(value: Any) -> bool:
    return value is None or isinstance(value, dict) and any(item is None for item in value.values())


def bound(name: str, namespace: dict[str, Any]) -> Any:
    """The learner's prediction `name`; PredictionUnset while it is unset (and a learner is predicting)."""
    value = namespace.get(name)
    if unset(value) and os.environ.get(STRICT) != "strict":
        raise PredictionUnset(name)
    return value


def agrees(predicted: Any, happened: Any) -> bool:
    """Whether a prediction says what happened, whatever its form: 1 and "1", "refused" and
    "Refused", (0, 1500) and [0, 1500] agree; a dict agrees key by key."""
    if isinstance(predicted, dict) and isinstance(happened, dict):
        return predicted.keys() == happened.keys() and all(agrees(predicted[key], happened[key]) for key in happened)
    if isinstance(predicted, (list, tuple)) and isinstance(happened, (list, tuple)):
        return len(predicted) == len(happened) and all(map(agrees, predicted, happened))
    return _plain(predicted) == _plain(happened)


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return text.lower()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def compared(name: str, predicted: Any, happened: Any, notebook: str, held: bool | None = None) -> bool:
    """Print the prediction beside what happened, keep both; whether it held (`held`, when the two
    are not compared as `agrees` compares them). Unset (the course's own run: nobody predicted),
    nothing is printed or kept."""
    if unset(predicted):
        return False
    held = recorded(name, predicted, happened, notebook, held)
    differ = [key for key in happened if not agrees(predicted.get(key), happened[key])] if (
        not held and isinstance(predicted, dict) and isinstance(happened, dict)) else []
    where = f" (for {', '.join(map(repr, differ))})" if differ else ""
    print(wrap(f"You predicted {predicted!r}; the run showed {happened!r}: "
               + ("as you predicted." if held else f"not what you predicted{where}. Which step of your reasoning "
                  "differs?")))
    return held


def recorded(name: str, predicted: Any, happened: Any, notebook: str, held: bool | None = None) -> bool:
    """Keep the prediction beside what happened without printing them (where the cell shows both
    already); whether it held."""
    held = agrees(predicted, happened) if held is None else held
    keep({"notebook": notebook, "name": name, "predicted": predicted, "happened": happened, "held": held,
          "when": time.strftime("%Y-%m-%d %H:%M:%S")})
    return held


def checkpoint_kept(evidence: Any, namespace: dict[str, Any]) -> None:
    """05's predictions (`predicted_<case>`), each kept beside what its case counted, as the run
    cell's lines compare them (course.checkpoint.report); a case that counted nothing keeps nothing."""
    from course.checkpoint.report import PREDICTED, _observed

    for case in evidence:
        guess = namespace.get(f"predicted_{case.case}")
        value = _observed(case)[0] if case.case in PREDICTED else None
        if guess is not None and value is not None:
            recorded(f"predicted_{case.case}", guess, value, "05b_crashes")


def keep(record: dict[str, Any], kept: Path = KEPT) -> None:
    """Append one record; a folder that cannot be written (a read-only copy) keeps nothing."""
    try:
        with open(kept, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=repr) + "\n")
    except OSError:
        pass


def latest(kept: Path = KEPT) -> list[dict[str, Any]]:
    """The last record of each (notebook, prediction), in the order they were first made."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        lines = kept.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            record = json.loads(line)
            found[(str(record["notebook"]), str(record["name"]))] = record
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short or edited by hand
    return list(found.values())


def calibration(kept: Path = KEPT) -> str:
    """07's summary: each prediction kept, whether it held, and the count."""
    records = latest(kept)
    if not records:
        return "No predictions kept yet: each experiment keeps yours when it runs, once you have predicted."
    lines = [f"{'held' if r['held'] else 'surprised':9}  {r['notebook']}: {r['name']} (you said {r['predicted']!r}, "
             f"the run showed {r['happened']!r})" for r in records]
    held = sum(1 for r in records if r["held"])
    return "\n".join([*lines, f"{held} of {len(records)} predictions held."])

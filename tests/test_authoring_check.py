"""`course check-authoring` (course.authoring.check): clean on the course's solutions, and on a scratch copy
of them each authoring mistake planted alone is named, with its notebook and cell.

The mistakes are those an nbgrader author makes when a test passes in a kernel and fails under the
judge (issue 38): a helper in a cell the judge never runs, an argument the wire refuses, a test
without `require_written`, an answer name another cell rebinds, a guide left stale; and a check
that does not say which misconception of the guide it points to (what `course analytics` reads).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from course.authoring import check as authoring
from course.cli import main

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"


@pytest.fixture
def scratch(tmp_path):
    """A copy of the solutions to plant mistakes in."""
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    return folder


def edit(folder: Path, notebook: str, change) -> None:
    """Read `notebook` with nbformat, let `change(cells)` edit its cells in place, write it back."""
    path = folder / f"{notebook}.ipynb"
    document = nbformat.read(path, as_version=4)
    change(document.cells)
    nbformat.write(document, path)


def cell(cells, grade_id):
    return next(c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def insert_after(cells, grade_id, *new):
    index = cells.index(cell(cells, grade_id)) + 1
    cells[index:index] = new


def code(grade_id, source, *, solution=False, points=0, tags=()):
    """A code cell as nbgrader's Create Assignment toolbar makes it: an answer (`solution`), a graded
    test (`points`), or a locked course cell."""
    meta = {"grade": bool(points), "grade_id": grade_id, "locked": not solution, "schema_version": 3,
            "solution": solution, "task": False, **({"points": points} if points else {})}
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta, "tags": list(tags)})


def add_to_test(cells, grade_id, line):
    """`line` added to a test cell's visible part, right before its hidden tests."""
    test = cell(cells, grade_id)
    test.source = test.source.replace("### BEGIN HIDDEN TESTS", f"{line}\n### BEGIN HIDDEN TESTS", 1)


def findings(folder):
    return [str(finding) for finding in authoring.check(folder)]


def test_the_course_solutions_have_no_finding():
    assert findings(SOLUTIONS) == []


def test_an_untouched_scratch_copy_has_no_finding(scratch):
    assert findings(scratch) == []


# --- each mistake, planted alone ------------------------------------------------------------------

def helper_in_a_locked_cell(cells):  # issue 38: passes in a kernel, NameError at grading
    insert_after(cells, "observe_order_may_leave", code("boundary_cases", "BOUNDARY = ((1.0, 1.0), (2.0, 1.0))\n"))
    add_to_test(cells, "test_order_may_leave", "for lease_left, timeout in BOUNDARY:\n    agrees(lease_left, timeout)")


def setup_tag_removed(cells):
    cell(cells, "lost_lease_helpers").metadata["tags"] = []
    add_to_test(cells, "test_order_may_leave", "expect(LABEL == 'first-worker', 'the label')")


def simple_namespace_argument(cells):  # issue 38: passes in a kernel, NotPlainData at grading
    add_to_test(cells, "test_order_may_leave", "import types\norder_may_leave(types.SimpleNamespace(left=30.0), 1.0)")


def simple_namespace_in_a_name(cells):
    add_to_test(cells, "test_order_may_leave", "from types import SimpleNamespace\n"
                "lease = SimpleNamespace(left=30.0)\norder_may_leave(lease, supplier_timeout=1.0)")


def generator_in_a_list(cells):
    add_to_test(cells, "test_order_may_leave", "order_may_leave([(x for x in (30.0,))], 1.0)")


def require_written_removed(cells):
    test = cell(cells, "test_order_may_leave")
    test.source = test.source.replace('require_written(globals(), "order_may_leave")\n', "")


def pass_line_removed(cells):
    test = cell(cells, "test_order_to_continue")
    test.source = test.source[:test.source.rindex("passed(")].rstrip("\n")


def require_written_short_of_a_name(cells):
    test = cell(cells, "test_exercise_stale_response_experiment")
    test.source = test.source.replace(', "release_stale_response")', ")")


def lease_left_answer(cells):
    """Issue 38's exercise: a new answer `lease_left` in 03, whose observation cell already uses
    `lease_left` as a loop variable (and so does test_order_may_leave's hidden part)."""
    answer = code("lease_left", "def lease_left(db, claim, now):\n    ### BEGIN SOLUTION\n"
                  "    return max(0.0, lease_expiry(db.connection, claim.id) - now)\n    ### END SOLUTION\n",
                  solution=True, tags=["raises-exception"])
    test = code("test_lease_left", "from course.lessons.checks import passed, require_written\n"
                'require_written(globals(), "lease_left")\n'
                'db = fresh_shop()\nenqueue(db, "phone:1", "lucy", "Restock vanilla")\n'
                'held = reference.claim(db, "worker", now=1000.0, ttl=30)\n'
                'expect(lease_left(db, held, 1010.0) == 20.0, "20 s are left of a 30 s lease after 10 s")\n'
                "### BEGIN HIDDEN TESTS\n"
                'expect(lease_left(db, held, 1040.0) == 0.0, "an ended lease has no time left")\n'
                "### END HIDDEN TESTS\n"
                'passed("lease_left counts what is left of a live lease")\n', points=2, tags=["raises-exception"])
    answer.metadata["course"] = {"minutes": 10}  # a task: its minutes (the guide's "The cells.")
    test.metadata["course"] = {"misconception": None}  # a mistake of its own (the guide: "Adding or changing ...")
    insert_after(cells, "test_exercise_reuse_owner_label", answer, test)
    cell(cells, "setup").source += "from sovereign_agent.records import lease_expiry\n"


def written_answer_changed(cells):
    answer = cell(cells, "exercise_reuse_owner_label_logging")
    answer.source = answer.source.replace("**Model answer:** ", "**Model answer:** Two executions, one label. ", 1)


def misconception_unsaid(cells):  # course analytics would not know where a failure here points
    del cell(cells, "test_order_may_leave").metadata["course"]


def misconception_not_in_the_guide(cells):
    cell(cells, "test_order_may_leave").metadata["course"]["misconception"] = "Leases are locks"


MISTAKES = {  # mistake: (notebook, its change, the finding's notebook and cell, words the finding holds)
    "helper in a locked cell": ("03_leases", helper_in_a_locked_cell, "03_leases.ipynb test_order_may_leave",
                                ["`BOUNDARY`", "`boundary_cases`", "NameError at grading"]),
    "setup tag removed": ("03_leases", setup_tag_removed, "03_leases.ipynb test_order_may_leave",
                          ["`LABEL`", "`lost_lease_helpers`", "NameError at grading"]),
    "SimpleNamespace argument": ("03_leases", simple_namespace_argument, "03_leases.ipynb test_order_may_leave",
                                 ["types.SimpleNamespace(...)", "`order_may_leave`", "NotPlainData"]),
    "SimpleNamespace in a name": ("03_leases", simple_namespace_in_a_name, "03_leases.ipynb test_order_may_leave",
                                  ["`lease` (a `types.SimpleNamespace(...)`)", "NotPlainData"]),
    "generator in a list": ("03_leases", generator_in_a_list, "03_leases.ipynb test_order_may_leave",
                            ["a generator expression", "NotPlainData"]),
    "require_written removed": ("03_leases", require_written_removed, "03_leases.ipynb test_order_may_leave",
                                ['require_written(globals(), "order_may_leave")', "does not start with"]),
    "pass line removed": ("04_recovery", pass_line_removed, "04_recovery.ipynb test_order_to_continue",
                          ["does not end in `passed(", "cannot tell a pass from a cell that did not run"]),
    "require_written short of a name": ("03b_unfenced", require_written_short_of_a_name,
                                        "03b_unfenced.ipynb test_exercise_stale_response_experiment",
                                        ["does not name `release_stale_response`"]),
    "answer name is a loop variable": ("03_leases", lease_left_answer, "03_leases.ipynb observe_order_may_leave",
                                       ["binds `lease_left`", "answer of cell `lease_left`"]),
    "misconception unsaid": ("03_leases", misconception_unsaid, "03_leases.ipynb test_order_may_leave",
                             ['{"course": {"misconception": NAME}}', "or null"]),
    "misconception not in the guide": ("03_leases", misconception_not_in_the_guide,
                                       "03_leases.ipynb test_order_may_leave",
                                       ["'Leases are locks'", "does not name in bold", "Sent means done"]),
    "stale guide": ("03_leases", written_answer_changed, "instructor-guide.md written-answers",
                    ["python -m course.authoring.guide"]),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_planted_mistake_is_named(scratch, mistake):
    notebook, change, where, words = MISTAKES[mistake]
    edit(scratch, notebook, change)
    found = findings(scratch)
    named = [line for line in found if line.startswith(f"{where}: ")]
    assert named, f"{mistake} passed silently: {found}"
    assert any(all(word in line for word in words) for line in named), named


def test_the_new_lease_left_answer_is_named_in_every_cell_that_rebinds_it(scratch):
    edit(scratch, "03_leases", lease_left_answer)
    assert {finding.cell for finding in authoring.check(scratch)} == {"observe_order_may_leave", "test_order_may_leave"}


@pytest.mark.parametrize("argument", ["lambda: 30.0", "{'left': 30.0}", "[30.0, (1.0,)]", "fresh_shop()",
                                      "Path('x')", "reference.claim"])
def test_arguments_that_cross_are_not_named(scratch, argument):
    line = f"order_may_leave({argument}, 1.0)"
    edit(scratch, "03_leases", lambda cells: add_to_test(cells, "test_order_may_leave", line))
    assert findings(scratch) == []


@pytest.mark.parametrize("kind", sorted(authoring.NON_CROSSING))
def test_every_kind_the_check_names_is_one_the_wire_refuses(kind):
    assert authoring.refused(authoring.NON_CROSSING[kind]()), f"the wire carries {kind}: drop it from NON_CROSSING"


def test_unreadable_input_is_refused_before_anything_is_checked(tmp_path):
    with pytest.raises(authoring.BadInput, match="holds no notebook"):
        authoring.check(tmp_path)
    (tmp_path / "01_broken.ipynb").write_text("{not json")
    with pytest.raises(authoring.BadInput, match="01_broken.ipynb is not a readable Jupyter notebook"):
        authoring.check(tmp_path)


def test_the_command_exits_0_when_clean_and_2_on_bad_input_writing_nothing(tmp_path):
    clean = CliRunner().invoke(main, ["check-authoring", str(SOLUTIONS)])
    assert clean.exit_code == 0, clean.output
    assert clean.stdout == ""
    refused = CliRunner().invoke(main, ["check-authoring", str(tmp_path)])
    assert refused.exit_code == 2 and "holds no notebook" in refused.output
    assert list(tmp_path.iterdir()) == []


def test_the_course_command_prints_one_finding_a_line_and_exits_1(scratch):
    edit(scratch, "03_leases", simple_namespace_argument)
    edit(scratch, "03_leases", require_written_removed)
    command = Path(sys.executable).with_name("course")
    done = subprocess.run([str(command), "check-authoring", str(scratch)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("03_leases.ipynb test_order_may_leave: ") for line in lines), lines
    assert "2 finding(s)" in done.stderr

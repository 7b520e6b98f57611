"""The instructor guide's generated parts hold exactly what the course renders today."""

import pytest

from course.checkpoint.evidence import CaseEvidence
from course.checkpoint.evidence_table import rows
from course.authoring.written_answers import written_answers
from course.authoring.guide import rendered, section


def test_every_written_question_has_a_model_answer_and_rubric():
    answers = written_answers()
    assert len(answers) >= 7, [a.grade_id for a in answers]
    for item in answers:
        assert item.question, f"{item.grade_id}: no question found in the cell above it"
        assert "Rubric" in item.answer and "Model answer" in item.answer, f"{item.grade_id} lacks a model answer or rubric"


@pytest.mark.parametrize("name", sorted(rendered()))
def test_guide_matches_the_course(name):
    assert section(name) == rendered()[name](), (
        f"docs/instructor-guide.md's part {name!r} is out of date: run `.venv/bin/python -m course.authoring.guide` "
        "and commit the guide"
    )


def test_the_evidence_table_names_the_keys_of_the_evidence_json():
    keys = set(CaseEvidence("killed", "t", "reference", 1.0).to_json())
    named = {name for fields, _, _ in rows() for name in fields}
    assert named <= keys, sorted(named - keys)
    # every counted fact a verdict reads is explained (the bookkeeping fields need not be)
    counted = {"worker_exit", "generation", "work_status", "supplier_orders", "supplier_posts", "supplier_gets",
               "model_calls", "refused_boundaries", "transcript_rows", "reserved_pence", "spent_pence"}
    assert counted <= named, sorted(counted - named)

"""The instructor guide shows the written questions' model answers exactly as the solutions hold them."""

from course.grading.written_answers import guide_section, render, written_answers


def test_every_written_question_has_a_model_answer_and_rubric():
    answers = written_answers()
    assert len(answers) >= 7, [a.grade_id for a in answers]
    for item in answers:
        assert item.question, f"{item.grade_id}: no question found in the cell above it"
        assert "Rubric" in item.answer and "Model answer" in item.answer, f"{item.grade_id} lacks a model answer or rubric"


def test_guide_matches_the_solutions():
    assert guide_section() == render(written_answers()), (
        "docs/instructor-guide.md is out of date with solutions/ch12: run "
        "`.venv/bin/python -m course.grading.written_answers` and commit the guide"
    )

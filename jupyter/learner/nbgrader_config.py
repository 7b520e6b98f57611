# The learner's side of nbgrader (the Assignments tab: fetch, submit, fetch feedback): which course,
# and where its exchange is. The same folder as the instructor's (course.grading.nbgrader.config).
# Validate's failure dialog puts the check's explanation first (explanation_first, below).
import os
from pathlib import Path

c = get_config()  # noqa: F821 (traitlets provides it)
c.CourseDirectory.course_id = "crash-recovery"
c.Exchange.root = os.environ.get("COURSE_EXCHANGE") or str(Path(__file__).resolve().parents[2] / "exchange")
# Validate runs the notebook; a cell's last output may reach it well after the kernel's reply on a busy
# machine (05's checkpoint cell, under load: "Timeout waiting for IOPub output" after nbclient's 4 s).
c.Execute.iopub_timeout = 30


def explanation_first() -> None:
    """Validate's dialog shows a failing test cell's whole source (dozens of lines), then its
    traceback, whose last lines hold the check's explanation. Put the explanation first: the
    error's own message leads the error block, with the traceback after it, and the source is cut
    to the test's first lines (which name the functions it tests). Applied once per process."""
    from nbgrader.validator import Validator

    if getattr(Validator, "course_explanation_first", False):
        return
    extract_error, validate = Validator._extract_error, Validator.validate

    def _extract_error(self, cell):
        text = extract_error(self, cell)
        said = [f"{output.ename}: {output.evalue}" for output in cell.get("outputs", [])
                if output.get("output_type") == "error"]
        if not said:
            return text
        return "\n\n".join(said) + "\n\n--- where it was raised ---\n" + text

    def validate_first_lines(self, filename):
        results = validate(self, filename)
        for failed in results.get("failed", []) if isinstance(results, dict) else []:
            lines = failed.get("source", "").splitlines()
            if len(lines) > 3:
                failed["source"] = "\n".join(lines[:2] + [f"... and {len(lines) - 2} more lines of this test"])
        return results

    Validator._extract_error, Validator.validate = _extract_error, validate_first_lines
    Validator.course_explanation_first = True


explanation_first()

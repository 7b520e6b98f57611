# The learner's side of nbgrader (the Assignments tab: fetch, submit, fetch feedback): which course,
# and where its exchange is. The same folder as the instructor's (course.grading.nbgrader.config).
import os
from pathlib import Path

c = get_config()  # noqa: F821 (traitlets provides it)
c.CourseDirectory.course_id = "crash-recovery"
c.Exchange.root = os.environ.get("COURSE_EXCHANGE") or str(Path(__file__).resolve().parents[2] / "exchange")

"""Grading tooling for the ch12 nbgrader course.

commands: release, autograde, feedback, export_grades (behind the `course` CLI).
config: the nbgrader settings, built from a course root (nbgrader_config.py calls it).
feedback: the preprocessor that keeps hidden tests out of feedback HTML.
reaper: runs nbgrader so that nothing a submission starts outlives its grading.

Kept import-free: `python -m course.grading.sandbox.reaper` and the CLI's --help should not pay for
importing nbgrader (several seconds).

One thing is done here, before any grading process imports nbgrader: `rfc3987_syntax` is marked
as not importable. jsonschema imports it, when installed, only to check the "iri" string format,
and building its grammar costs 2 of the 3.4 s of CPU that importing nbgrader takes (measured:
`python -c "import nbgrader.api"`). Neither nbgrader nor nbformat checks string formats, so the
coordinator and every worker leave it out. (A plain `nbgrader` command has imported jsonschema
before it reads nbgrader_config.py, so this changes nothing there.)
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: `import` raises ImportError

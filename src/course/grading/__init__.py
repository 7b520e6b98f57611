"""Grading tooling for the ch12 nbgrader course.

commands: release, autograde, feedback, export_grades (behind the `course` CLI).
config: the nbgrader settings, built from a course root (nbgrader_config.py calls it).
feedback: the preprocessor that keeps hidden tests out of feedback HTML.
reaper: runs nbgrader so that nothing a submission starts outlives its grading.

Kept import-free: `python -m course.grading.reaper` and the CLI's --help should not pay for
importing nbgrader (several seconds).
"""

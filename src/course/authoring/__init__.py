"""The author's tools: `course check-authoring` (`check`: what in the solutions would break under
the judge), the instructor guide's generated parts (`guide`, `written_answers`) and each
notebook's time (`pacing`). Nothing here runs while a learner works or a class is graded."""

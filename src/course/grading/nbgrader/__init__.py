"""The nbgrader glue: the course's configuration, the preprocessors autograde and feedback run,
and the instructor's nbgrader steps (release, feedback, export)."""

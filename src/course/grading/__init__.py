"""Grading the ch12 course with nbgrader: the judge, the learner process, the sandbox, class
grading and the nbgrader glue, one sub-package each (see the README's map).

Kept import-free, with one exception made before any grading process imports nbgrader:
`rfc3987_syntax` is marked as not importable. jsonschema imports it only to check the "iri"
format, which neither nbgrader nor nbformat uses, and it costs 2 of the 3.4 s of CPU that
importing nbgrader takes.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: `import` raises ImportError

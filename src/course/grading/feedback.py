"""Feedback that never shows hidden tests.

nbgrader renders feedback from the autograded notebook, where the hidden tests are restored and
their failures carry tracebacks quoting the hidden lines. HideHiddenTests runs in
GenerateFeedback's preprocessor list (see course.grading.config) before the HTML is exported.
"""

import re

from nbconvert.preprocessors import Preprocessor

BEGIN = "### BEGIN HIDDEN TESTS"
PLACEHOLDER = "# hidden tests (not shown)"
_REGION = re.compile(
    r"^([ \t]*)### BEGIN HIDDEN TESTS.*?(?:^[ \t]*### END HIDDEN TESTS[^\n]*|\Z)",
    re.MULTILINE | re.DOTALL,
)


def hide_region(source):
    """Replace every hidden-test region (an unclosed one runs to the end) by one comment line."""
    return _REGION.sub(lambda m: m.group(1) + PLACEHOLDER, source)


def sanitise_output(output):
    """Keep an error's type and message (the learner's explanation), drop its traceback.

    Streams are kept (hidden tests do not print their source); rich results could show hidden
    values, so they are dropped (None).
    """
    if output.output_type == "error":
        output.traceback = [f"{output.ename}: {output.evalue}"]
        return output
    return output if output.output_type == "stream" else None


class HideHiddenTests(Preprocessor):
    """Strip hidden-test source and tracebacks from cells that contain a hidden region."""

    def preprocess_cell(self, cell, resources, index):
        if BEGIN in cell.source:
            cell.source = hide_region(cell.source)
            if cell.cell_type == "code":
                cell.outputs = [o for o in map(sanitise_output, cell.outputs) if o is not None]
        return cell, resources

"""Feedback that never shows hidden tests.

nbgrader renders feedback from the autograded notebook, where the hidden tests are restored and
their failures carry tracebacks quoting the hidden lines. HideHiddenTests runs in
GenerateFeedback's preprocessor list (see course.grading.nbgrader.config) before the HTML is exported.
"""

from nbgrader.preprocessors import NbGraderPreprocessor

# Same delimiter test as nbgrader's ClearHiddenTests: any line containing these words.
BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
PLACEHOLDER = "# hidden tests (not shown)"


def hide_region(source):
    """Replace every hidden-test region (an unclosed one runs to the end) by one comment line."""
    lines, hiding = [], False
    for line in source.split("\n"):
        if BEGIN in line:
            hiding = True
            lines.append(line[: len(line) - len(line.lstrip())] + PLACEHOLDER)
        elif hiding:
            hiding = END not in line
        else:
            lines.append(line)
    return "\n".join(lines)


def sanitise_output(output):
    """Keep an error's type and message (the learner's explanation), drop its traceback.

    Streams are kept (hidden tests do not print their source); rich results could show hidden
    values, so they are dropped (None).
    """
    if output.output_type == "error":
        output.traceback = [f"{output.ename}: {output.evalue}"]
        return output
    return output if output.output_type == "stream" else None


class HideHiddenTests(NbGraderPreprocessor):
    """Strip hidden-test source and tracebacks from cells that contain a hidden region.

    Based on NbGraderPreprocessor because it is enabled by default: a plain nbconvert
    Preprocessor registered in GenerateFeedback.preprocessors is silently skipped.
    """

    def preprocess_cell(self, cell, resources, index):
        if BEGIN in cell.source:
            cell.source = hide_region(cell.source)
            if cell.cell_type == "code":
                cell.outputs = [o for o in map(sanitise_output, cell.outputs) if o is not None]
        return cell, resources

"""Real hostile submissions, graded by the real autograde path (sandbox, out-of-kernel checks).

One class is graded once (module fixture): honest learners (complete, racy `claim`, untouched) and
one learner per kind of attack. Each hostile learner starts from the untouched release and puts
its attack in the `claim` cell (and, for the resource vandal, in cells of its own), so its fair
score is what that notebook earns with `claim` unanswered: 0. Only `01_claims` is submitted, which
keeps the class small; the full four-notebook grading is tested in test_course_notebooks.py.

What is checked is data: the gradebook's scores, the autograded notebooks and feedback HTML
(searched for every hidden-test and solution line), the bytes of every file outside the grading
folders, the report line of each student, and the processes left running.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands
from course.grading.sandbox.bubblewrap import SandboxUnavailable, ensure_available

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
RELEASE = ROOT / "notebooks" / "ch12"
NOTEBOOK = "01_claims.ipynb"
REGION = re.compile(r"### BEGIN (HIDDEN TESTS|SOLUTION)(.*?)### END \1", re.S)

pytestmark = pytest.mark.slow

RACY_CLAIM = '''
def claim(db, owner, *, now=None, ttl=90, recovery_only=False, control_only=False, role="shop", identifier=""):
    """Read, then write in a second transaction: the race the chapter warns about."""
    now = time.time() if now is None else now
    if not owner or not math.isfinite(now) or not math.isfinite(ttl) or not 0 < ttl <= 3600:
        raise ValueError("bounded claim lifetime required")
    connection = db.connection
    control = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id=1").fetchone()
    if control["paused"]:
        return None
    row = connection.execute(
        "SELECT w.* FROM assistant_work w WHERE w.role=? AND (?='' OR w.id=?) AND w.available_after<=? "
        "AND (?=0 OR w.control=1) AND ((?=0 AND w.status='READY') OR (w.status='RUNNING' AND w.expires<=?) "
        "OR (?=1 AND w.status IN ('READY','BLOCKED','CANCELLED'))) AND (?=0 OR EXISTS (SELECT 1 FROM "
        "assistant_orders o WHERE o.work_id=w.id AND o.status IN ('SENDING','UNKNOWN'))) AND NOT EXISTS "
        "(SELECT 1 FROM assistant_work other WHERE other.session=w.session AND other.status='RUNNING' "
        "AND other.expires>?) ORDER BY w.control DESC, w.created, w.rowid LIMIT 1",
        (role, identifier, identifier, now, control_only, recovery_only, now, recovery_only, recovery_only, now),
    ).fetchone()
    if row is None:
        return None
    generation = row["generation"] + 1
    with db.immediate() as connection:
        connection.execute("UPDATE assistant_work SET status='RUNNING', generation=?, owner=?, expires=? WHERE id=?",
                           (generation, owner, now + ttl, row["id"]))
        append_event(db, "assistant.work.claimed", {"work": row["id"], "generation": generation})
    return Claim(row["id"], row["session"], row["prompt"], generation, owner, control["epoch"],
                 row["subject"], row["role"])
'''

# Replace or patch the helpers the checks use, while the definitions load and while a check runs.
CHEAT_HELPERS = '''
import builtins
import sys
import course.checks as _checks

def expect(condition, message):
    return None

class _Rewire:
    _checks.expect = lambda condition, message: None
    _checks.CheckFailed.__str__ = lambda self: "passed"
    builtins.all = lambda *args: True

def claim(db, owner, *, now=None, ttl=90, **options):
    sys._getframe(1).f_globals["expect"] = lambda condition, message: None
    return None
'''

# Hide failures in the learner's own kernel (IPython hooks, AST transformer, exception handler),
# and install trace and exception hooks where definitions load.
CHEAT_HOOKS = '''
import ast
import sys

class _NoExpect(ast.NodeTransformer):
    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "expect":
            return ast.Constant(None)
        return self.generic_visit(node)

def _swallow(shell, etype, value, tb, tb_offset=None):
    print("all good")

class _Hooks:
    sys.excepthook = lambda *args: None
    sys.settrace(lambda *args: None)

ip = get_ipython()
ip.ast_transformers.append(_NoExpect())
ip.set_custom_exc((BaseException,), _swallow)
ip.events.register("pre_run_cell", lambda info: None)

def claim(db, owner, *, now=None, ttl=90, **options):
    return None
'''

# Objects that answer everything, and builtins patched through a default argument.
CHEAT_OBJECTS = '''
import builtins

class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __getattr__(self, name): return Anything()
    def __call__(self, *args, **kwargs): return Anything()
    def __bool__(self): return True
    def __hash__(self): return 0
    def __repr__(self): return "anything"

class Claim(Anything):
    def __init__(self, *args, **kwargs): pass

def claim(db, owner, *, now=None, ttl=90, _=setattr(builtins, "isinstance", lambda *a: True), **options):
    return Anything()
'''

# Import the answer: the reference runtime's own Claim and claim, under the graded names.
CHEAT_REFERENCE = """
from sovereign_agent.assistant_work import Claim, claim
"""

# Look for the hidden tests and solutions everywhere: the file system, the course root by name,
# the process's own objects and memory; print what it finds in the kernel, raise it in checks.
SPY = '''
import gc
import os
import sys

COURSE = {course!r}

def _look():
    """Every text it can reach that mentions a hidden test or a solution, in short excerpts."""
    texts = []
    for start in (os.getcwd(), "/", COURSE, os.path.join(COURSE, "..")):
        for folder, _, files in os.walk(start):
            if folder.startswith(("/proc", "/sys", "/dev", "/usr")):
                continue
            for name in files:
                if name.endswith((".db", ".ipynb", ".py", ".json")):
                    try:
                        with open(os.path.join(folder, name), errors="replace") as handle:
                            texts.append(handle.read(2_000_000))
                    except OSError:
                        pass
    texts += [v for thing in gc.get_objects() if isinstance(thing, dict)
              for v in list(thing.values()) if isinstance(v, str) and len(v) > 40]
    frame = sys._getframe()
    while frame is not None:
        texts += [str(c) for c in frame.f_code.co_consts]
        frame = frame.f_back
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as memory:
            for line in maps:
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if perms.startswith("r") and end - start <= 64 * 1024 * 1024:
                    try:
                        memory.seek(start)
                        texts.append(memory.read(end - start).decode("utf-8", "replace"))
                    except (OSError, ValueError, OverflowError):
                        pass
    except OSError:
        pass
    found = []
    for text in texts:
        for marker in ("HIDDEN", "SOLUTION", "expect("):
            at = text.find(marker)
            while at != -1 and len(found) < 200:
                found.append(text[max(0, at - 200): at + 800])
                at = text.find(marker, at + 1)
    return "\n".join(found)

print(_look())

def claim(db, owner, *, now=None, ttl=90, **options):
    raise RuntimeError(_look())
'''

# Forge the verdict itself: what a check reports travels on a pipe the learner's code can write
# too. Write a passing verdict on every descriptor and end the process, while the definitions
# load (so every check of the notebook sees it) and again from `claim`.
FORGER = '''
import os

FORGED = b'{"passed": true, "tampering": false, "ename": "", "message": ""}'

def _forge():
    for fd in range(3, 1024):
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
    os._exit(0)

class _AtDefinition:
    _forge()

def claim(db, owner, *, now=None, ttl=90, **options):
    _forge()
'''

# Get the checker's own code to seal a passing verdict: call its reporting function, raise its
# audit event, run its `work` on a job whose check is `pass` (in this thread, in a new one, in a
# fork), and reach for the key through frames, the collector, ctypes and /proc/self/mem.
SEAL_THIEF = '''
import base64, gc, marshal, os, sys, _thread, time
from course.grading import checker, seal

FAKE = {"course_cells": [], "learner_cells": [], "expect_calls": 0,
        "check": base64.b64encode(marshal.dumps(compile("pass", "fake", "exec"))).decode()}

def _steal():
    for attempt in (lambda: seal.report("1 0\\n\\n"), lambda: sys.audit("course.verdict", "1 0\\n\\n"),
                    lambda: _thread.start_new_thread(checker.work, (dict(FAKE), lambda: None)),
                    lambda: gc.get_objects(), lambda: sys._getframe(1).f_back.f_locals,
                    lambda: __import__("ctypes").string_at(id(seal), 64), lambda: open("/proc/self/mem", "rb")):
        try:
            attempt()
        except BaseException:
            pass
    if os.fork() == 0:
        try:
            seal.report("1 0\\n\\n")
        finally:
            os._exit(0)
    time.sleep(0.5)
    checker.work(dict(FAKE), lambda: None)

def claim(db, owner, *, now=None, ttl=90, **options):
    _steal()
'''

# Rewrite what the grader's own functions call: closure cells (writable from Python), defaults
# and keyword defaults of every function the cell's namespace reaches, `expect` first (beside a
# Claim that is not the chapter's (not frozen), so that the checks get as far as their
# expectations but earn nothing fairly).
CLOSURE_REWRITER = '''
def _silence():
    quiet = lambda *args, **kwargs: None
    for value in list(globals().values()):
        for cell in getattr(value, "__closure__", None) or ():
            try:
                if callable(cell.cell_contents) and not isinstance(cell.cell_contents, type):
                    cell.cell_contents = quiet
            except ValueError:
                pass
        keywords = getattr(value, "__kwdefaults__", None)
        for name in list(keywords or ()):
            if callable(keywords[name]):
                keywords[name] = quiet
        try:
            value.__defaults__ = tuple(quiet if callable(d) else d for d in value.__defaults__ or ())
        except Exception:
            pass

from dataclasses import dataclass

@dataclass
class Claim:
    id: str
    session: str
    prompt: str
    generation: int
    owner: str
    epoch: str
    subject: str = ""
    role: str = "shop"

def claim(db, owner, *, now=None, ttl=90, **options):
    _silence()
    return None
'''

# Blind the grader instead of the checks: empty the list of dunders it refuses (a course constant,
# not a function), so that a Claim that equals everything passes as plain data, and make the
# builtin `tuple` drop any report of a replaced helper.
BLINDER = '''
import builtins, sys
from dataclasses import dataclass

_real_tuple = builtins.tuple

class _quiet(tuple):
    def __new__(cls, items=()):
        items = _real_tuple(items)
        if any(isinstance(i, str) and ("replaced" in i or "rebound" in i or "saw" in i) for i in items):
            return _real_tuple()
        return items

class _Blind:
    sys.modules["course.grading.integrity"].DISHONEST = ()
    builtins.tuple = _quiet

@dataclass(eq=False)
class Claim:
    id: str = ""
    session: str = ""
    prompt: str = ""
    generation: int = 0
    owner: str = ""
    epoch: str = ""
    subject: str = ""
    role: str = "shop"

    def __eq__(self, other):
        builtins.tuple = _quiet
        return True

def claim(db, owner, *, now=None, ttl=90, **options):
    builtins.tuple = _quiet
    return Claim()
'''

# Write the gradebook, another student's submission, the course's files and the installed
# packages, by absolute and relative path, from the kernel and from definitions.
VANDAL_FILES = '''
import os
import sqlite3
import sys

COURSE = {course!r}
TARGETS = [
    os.path.join(COURSE, "gradebook.db"),
    os.path.join(COURSE, "submitted", "complete", "ch12", "01_claims.ipynb"),
    os.path.join(COURSE, "solutions", "ch12", "01_claims.ipynb"),
    os.path.join(COURSE, "nbgrader_config.py"),
    {outside!r},
    os.path.join(sys.prefix, "vandal.txt"),
    os.path.join(os.path.dirname(os.__file__), "os.py"),
] + ["../" * up + "gradebook.db" for up in range(1, 6)]

def _vandalize():
    for target in TARGETS:
        try:
            with open(target, "a") as handle:
                handle.write("vandalized")
            print("wrote", target)
        except OSError as error:
            print(type(error).__name__, error)
    try:
        gradebook = sqlite3.connect(os.path.join(COURSE, "gradebook.db"))
        gradebook.execute("UPDATE grade_cell SET max_score = 0")
        gradebook.execute("UPDATE grade SET auto_score = 0")
        gradebook.commit()
    except sqlite3.Error as error:
        print("sqlite3", error)

class _AtDefinition:
    _vandalize()

_vandalize()

def claim(db, owner, *, now=None, ttl=90, **options):
    _vandalize()
    return None
'''

# Resources, each in a cell of its own after `claim`: disk, output, memory, then processes (the
# fork bomb leaves the kernel itself unable to start a thread, so it goes last).
VANDAL_RESOURCES = [
    "def claim(db, owner, **options):\n    return None",
    "with open('fill.bin', 'wb') as handle:\n    while True:\n        handle.write(b'x' * (1 << 20))",
    "while True:\n    print('x' * 1000)",
    "hog = bytearray(16 * 1024 ** 3)",
    "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)",
]


def notebook_with(source_nb: Path, claim_source: str, extra_cells=()) -> nbformat.NotebookNode:
    nb = nbformat.read(source_nb, as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "claim")
    nb.cells[index].source = claim_source
    for offset, source in enumerate(extra_cells, start=1):
        nb.cells.insert(index + offset, nbformat.v4.new_code_cell(source))
    return nb


def submit(root: Path, student: str, nb: nbformat.NotebookNode) -> None:
    folder = root / "submitted" / student / "ch12"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / NOTEBOOK)


def fingerprint(root: Path, skip=("autograded", "feedback", "gradebook.db", "grades.csv", "grading-report.csv")):
    """Hash of every file under `root` except what grading is meant to write."""
    digest = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and relative.parts[0] not in skip and not str(relative).startswith(skip):
            digest[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def protected_lines() -> set[str]:
    """Every substantial line of a hidden test or solution region that a learner does not have."""
    lines = set()
    for path in SOLUTIONS.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            for _, region in REGION.findall(cell.source):
                lines.update(line.strip() for line in region.splitlines()
                             if len(line.strip()) > 20 and not line.strip().startswith("#"))
    # What every learner has anyway: the release, and the installed packages (the reference runtime
    # implements the chapter's listings, so some solution lines are in it by design).
    public = "\n".join([cell.source for path in RELEASE.glob("*.ipynb") for cell in nbformat.read(path, as_version=4).cells]
                       + [path.read_text() for path in (ROOT / "src").rglob("*.py")])
    return {line for line in lines if line not in public}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    try:
        ensure_available()
    except SandboxUnavailable as error:
        pytest.fail(f"the grading sandbox must work here (CI installs bubblewrap): {error}")
    base = tmp_path_factory.mktemp("hostile")
    root = base / "course"
    root.mkdir()
    (root / "nbgrader_config.py").write_text(
        "from course.grading.nbgrader.config import configure\nfrom pathlib import Path\n"
        "configure(c, Path(__file__).resolve().parent)\n"
        "c.Execute.timeout = 30  # every honest cell of 01_claims takes a few seconds; a hung one costs less\n")
    shutil.copytree(SOLUTIONS, root / "solutions" / "ch12")
    commands.release(root=root)
    outside = base / "outside-canary.txt"
    outside.write_text("untouched")
    blank, solved = RELEASE / NOTEBOOK, SOLUTIONS / NOTEBOOK
    racy = notebook_with(solved, RACY_CLAIM)
    submit(root, "complete", nbformat.read(solved, as_version=4))
    submit(root, "racy", racy)
    submit(root, "untouched", nbformat.read(blank, as_version=4))
    submit(root, "cheat_helpers", notebook_with(blank, CHEAT_HELPERS))
    submit(root, "cheat_hooks", notebook_with(blank, CHEAT_HOOKS))
    submit(root, "cheat_objects", notebook_with(blank, CHEAT_OBJECTS))
    submit(root, "cheat_reference", notebook_with(blank, CHEAT_REFERENCE))
    submit(root, "spy", notebook_with(blank, SPY.format(course=str(root))))
    submit(root, "forger", notebook_with(blank, FORGER))
    submit(root, "seal_thief", notebook_with(blank, SEAL_THIEF))
    submit(root, "closure_rewriter", notebook_with(blank, CLOSURE_REWRITER))
    submit(root, "blinder", notebook_with(blank, BLINDER))
    submit(root, "vandal_files", notebook_with(blank, VANDAL_FILES.format(course=str(root), outside=str(outside))))
    submit(root, "vandal_resources", notebook_with(blank, VANDAL_RESOURCES[0], VANDAL_RESOURCES[1:]))
    before = fingerprint(root)
    results = {r.student: r for r in autograde(root=root)}
    commands.feedback(root=root)
    commands.export_grades(root / "grades.csv", root=root)
    return root, results, before, outside


def scores(root: Path) -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {
            student.id: {g.name: g.score for nb in gb.find_submission("ch12", student.id).notebooks
                         for g in nb.grades if g.cell_type == "code" and nb.name == "01_claims"}
            for student in gb.students
        }


def test_honest_submissions_get_their_exact_scores(graded):
    root, _, _, _ = graded
    by_student = scores(root)
    full = {"test_claim_dataclass": 2, "test_claim_acquires": 3, "test_claim_replacement": 3,
            "test_claim_selection": 3, "test_claim_validation": 2, "test_claim_race": 3}
    assert by_student["complete"] == full
    assert by_student["racy"] == {**full, "test_claim_race": 0}, "a read-then-write claim loses exactly the race"
    assert set(by_student["untouched"].values()) == {0}


@pytest.mark.parametrize("student", ["cheat_helpers", "cheat_hooks", "cheat_objects", "cheat_reference", "spy",
                                     "forger", "seal_thief", "closure_rewriter", "blinder", "vandal_files",
                                     "vandal_resources"])
def test_hostile_submissions_earn_nothing(graded, student):
    root, _, _, _ = graded
    earned = {part: score for part, score in scores(root)[student].items() if score}
    assert earned == {}, f"{student} earned {earned} with `claim` unanswered"


def test_cheats_are_reported_as_tampering(graded):
    _, results, _, _ = graded
    for student in ("cheat_helpers", "cheat_hooks", "cheat_objects", "cheat_reference", "forger", "closure_rewriter",
                    "blinder"):
        assert results[student].findings["tampering"] >= 1, f"{student}: {results[student].findings}"
    for student in ("complete", "racy", "untouched"):
        assert results[student].findings["tampering"] == 0, f"{student} flagged: {results[student].findings}"


def test_no_hidden_test_or_solution_line_reaches_any_output(graded):
    root, _, _, _ = graded
    secret = protected_lines()
    assert len(secret) > 300, "the search must cover the hidden tests and solutions"
    written = list((root / "autograded").rglob("*.ipynb")) + list((root / "feedback").rglob("*.html"))
    assert len(written) >= 20
    for path in written:
        text = path.read_text()
        if path.relative_to(root).parts[1] in ("complete", "racy"):
            continue  # their own answers are solution lines, by construction
        leaked = sorted(line for line in secret if line in text or json.dumps(line)[1:-1] in text)
        assert not leaked, f"{path.relative_to(root)} holds {len(leaked)} protected line(s), e.g. {leaked[:2]}"


def test_nothing_outside_the_grading_folders_changed(graded):
    root, results, before, outside = graded
    assert fingerprint(root) == before
    assert outside.read_text() == "untouched"
    commands.check_gradebook(root)  # still matches the release: points, sources, checksums
    report = list(csv.DictReader(open(root / "grading-report.csv")))
    assert [row["student"] for row in report] == sorted(results)


def test_resource_vandal_is_bounded_and_reported(graded):
    _, results, _, _ = graded
    findings = results["vandal_resources"].findings
    assert findings["process_limit"] >= 1 and findings["disk_limit"] >= 1
    assert findings["output_limit"] >= 1 and findings["memory_limit"] >= 1
    assert results["vandal_files"].findings["sandbox_denials"] >= 1
    assert results["complete"].score == 16 and results["racy"].score == 13


def test_gradebook_that_was_changed_is_refused(graded, tmp_path):
    root, _, _, _ = graded
    copy = tmp_path / "course"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("autograded", "feedback"))
    (copy / "nbgrader_config.py").write_text(
        "from course.grading.nbgrader.config import configure\nfrom pathlib import Path\n"
        "configure(c, Path(__file__).resolve().parent)\n")
    import sqlite3

    with sqlite3.connect(copy / "gradebook.db") as gradebook:
        gradebook.execute("UPDATE source_cell SET source='pass' WHERE name='test_claim_race'")
    with pytest.raises(commands.NbgraderError, match="does not match the release"):
        autograde(root=copy, force=True)
    # Plain nbgrader (formgrader's button) refuses too: nbgrader_config.py wires the same check.
    done = commands.run_nbgrader(copy, "autograde", "ch12", "--student", "complete", "--force", check=False)
    assert done.returncode != 0 and "does not match the release" in done.stderr
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{copy / 'gradebook.db'}") as gb:
        kept = {g.name: g.score for nb in gb.find_submission("ch12", "complete").notebooks for g in nb.grades}
    assert kept["test_claim_race"] == 3, "the refused run must not have recorded anything"


def test_parallel_grading_gives_exactly_the_scores_of_serial_grading(graded, tmp_path):
    """The class above was graded in parallel (one grading unit per student, recorded by the
    coordinator). Honest, partial and hostile students graded one after another by plain
    `nbgrader autograde` (one process, nbgrader's own recording) into a fresh gradebook score the same."""
    root, _, _, _ = graded
    chosen = ["cheat_hooks", "complete", "racy", "untouched"]
    copy = tmp_path / "course"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(
        "autograded", "feedback", "submitted", "gradebook.db", "grades.csv"))
    for student in chosen:
        shutil.copytree(root / "submitted" / student, copy / "submitted" / student)
    commands.run_nbgrader(copy, "generate_assignment", "ch12", "--force", f"--CourseDirectory.release_directory={tmp_path / 'r'}")
    commands.run_nbgrader(copy, "autograde", "ch12")
    serial, parallel = scores(copy), scores(root)
    assert sorted(serial) == chosen, "the fresh gradebook holds the serially graded students only"
    assert serial == {s: parallel[s] for s in chosen}
    assert sum(serial["complete"].values()) == 16 and sum(serial["racy"].values()) == 13

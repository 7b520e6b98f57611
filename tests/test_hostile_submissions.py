"""Real hostile submissions, graded by the real autograde path: the judge, learner processes, sandboxes.

One class is graded once (module fixture). Honest students: complete, written differently, and
a racy `claim`. Each hostile student attacks by kind (the course's own answer reached some other
way; names bound to objects that are no functions or data; objects whose dunders or attribute
look-ups try to act inside the grader; hooks installed at top level; a forged verdict; a spy;
vandals) and has a *twin*: the same submission without the attack (the attacked answer
unanswered, or the same answer without its hook). The rule: no attack scores more than its twin.

What is checked is data: the gradebook's scores, the autograded notebooks and feedback HTML
(searched for every hidden-test line and hidden value, plain and encoded), the bytes of every
file outside the grading folders, the report, and the processes left running.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import json
import re
import shutil
import zlib
from pathlib import Path

import nbformat
import pytest

from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands
from course.grading.sandbox.bubblewrap import SandboxUnavailable, ensure_available

from checked_answers import home
from test_resource_fence import MISTAKES

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
RELEASE = ROOT / "notebooks" / "ch12"
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)
SOLUTION = re.compile(r"### BEGIN SOLUTION(.*?)### END SOLUTION", re.S)

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

# --- forced races: a racy answer with every trick at once (tests/test_forced_races.py: the scheduler) ----

FAKE = ('CONN.execute("SELECT count(*) FROM {table}").fetchone(); '
        'CONN.execute("BEGIN IMMEDIATE"); CONN.execute("COMMIT")')  # a read, then a write, of nothing


def cell_of(notebook_name: str, grade_id: str) -> str:
    cells = json.loads((SOLUTIONS / notebook_name).read_text())["cells"]
    return next("".join(c["source"]) for c in cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _tricks(racy: str, read: str, write: str, conn: str, table: str, later: str, seconds: float) -> dict[str, str]:
    """The racy answer, and the same with every trick at once: a read and a write of nothing before its
    real ones, a sleep between its read and its write, and one before its read when it is the later worker."""
    assert racy.count(read) == 1 and racy.count(write) == 1, "the racy answer changed: find its read and write again"
    indent = read[: len(read) - len(read.lstrip())]
    sleep, fake = f"__import__('time').sleep({seconds})", FAKE.replace("CONN", conn).format(table=table)
    return {"racy": racy, "tricked": racy.replace(read, f"{indent}{fake}\n{indent}{sleep} if {later} else None\n{read}")
            .replace(write, f"{indent}{sleep}\n{write}")}


OBSERVE = cell_of("02_fencing.ipynb", "observe")
CHECK_INSIDE = "    with db.immediate() as connection:\n        assert_current(connection, work)\n"
CHECK_OUTSIDE = "    assert_current(db.connection, work)\n    with db.immediate() as connection:\n"
RACY_OBSERVE = OBSERVE.replace(CHECK_INSIDE, CHECK_OUTSIDE)
RACES = {  # notebook: (answer cell, race check, the tricks), with sleeps longer than Lab's wait (0.5 s; 06: 1.5 s)
    "01_claims.ipynb": ("claim", "test_claim_race", _tricks(
        RACY_CLAIM, '    row = connection.execute(\n        "SELECT w.*', '    generation = row["generation"] + 1\n',
        "db.connection", "assistant_work", "owner.endswith('B')", 0.6)),
    "02_fencing.ipynb": ("observe", "test_fences_inside_the_transaction", _tricks(
        RACY_OBSERVE, "    assert_current(db.connection, work)\n", "    with db.immediate() as connection:\n",
        "db.connection", "assistant_work", "work.generation == 1", 0.6)),
    "06_explore.ipynb": ("admit_generation", "test_admit_generation", _tricks(
        MISTAKES["check then record, replacing"], '    row = ledger.execute("SELECT generation',
        '    ledger.execute("INSERT', "ledger", "fence", "generation == 2", 1.6)),
}
NEEDED = {"01_claims.ipynb": ("claim_dataclass",), "02_fencing.ipynb": ("assert_current",)}  # what the race calls too


# --- honest answers written differently ------------------------------------------------------------

CLAIM_WITH_SLOTS_AND_A_HELPER = {
    "claim_dataclass": (
        "from collections import Counter  # a standard-library import at the top of the cell\n"
        "from dataclasses import dataclass\n\n"
        "@dataclass(frozen=True, slots=True)\nclass Claim:\n    id: str\n    session: str\n    prompt: str\n"
        "    generation: int\n    owner: str\n    epoch: str\n    subject: str = ''\n    role: str = 'shop'\n"),
}
# `claim` itself calls a helper defined in a cell of the learner's own (added after the answer cells).
CLAIM_HELPER_CELL = '''
def _take(connection, row, owner, now, ttl):
    generation = row["generation"] + 1
    connection.execute("UPDATE assistant_work SET status='RUNNING', generation=?, owner=?, expires=? WHERE id=?",
                       (generation, owner, now + ttl, row["id"]))
    return generation
'''
SOLVED_UPDATE = '''        generation = row["generation"] + 1
        connection.execute(
            "UPDATE assistant_work SET status='RUNNING', generation=?, owner=?, expires=? WHERE id=?",
            (generation, owner, now + ttl, row["id"]),
        )'''


def claim_calling_the_helper() -> str:
    source = next(c.source for c in nbformat.read(SOLUTIONS / "01_claims.ipynb", as_version=4).cells
                  if c.metadata.get("nbgrader", {}).get("grade_id") == "claim")
    assert SOLVED_UPDATE in source
    return source.replace(SOLVED_UPDATE, "        generation = _take(connection, row, owner, now, ttl)")
DATA_BUILT_BY_CALLS = {  # 04b, 07 and 07b: data answers built by calls and comprehensions
    "four_answers": 'four_answers = dict(zip(["health", "progress", "cancellation", "external"], "ACEG"))',
    "vocabulary": ('TERMS = "claim lease generation fence liveness progress recovery reconciliation".split()\n'
                   'vocabulary = {term: letter for term, letter in zip(TERMS, "ECHAGDBF")}'),
    "delayed_prediction": ('delayed_prediction = dict(held_generation=int("2"), completion="refused", '
                           'status_after="CANCELLED", generation_after=1 + 2, order_after="REVOKED", '
                           'reserved_after=0)'),
}

# --- the course's own answer, reached some other way ------------------------------------------------

REFERENCE_WAYS = {
    "alias": {"claim_dataclass": "from sovereign_agent.assistant_work import Claim",
              "claim": "from sovereign_agent.assistant_work import claim"},
    "wrapper_and_subclass": {
        "claim_dataclass": ("import dataclasses\nfrom sovereign_agent import assistant_work\n\n"
                            "@dataclasses.dataclass(frozen=True)\nclass Claim(assistant_work.Claim):\n    pass"),
        "claim": ("def claim(db, owner, **options):\n    from sovereign_agent.assistant_work import claim as course_claim\n"
                  "    return course_claim(db, owner, **options)")},
    "importlib": {"claim": (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('fresh', sys.modules['sovereign_agent.assistant_work'].__file__)\n"
        "fresh = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(fresh)\n"
        "Claim, claim = fresh.Claim, fresh.claim")},
    "code_object": {"claim": (
        "import types, sys\nmodule = sys.modules['sovereign_agent.assistant_work']\n"
        "claim = types.FunctionType(module.claim.__code__, module.__dict__, 'claim', module.claim.__defaults__)\n"
        "Claim = type(module.claim)")},
    "bytecode_on_disk": {"claim": (
        "import glob, marshal, os, sovereign_agent.assistant_work as module\n"
        "cached = glob.glob(os.path.join(os.path.dirname(module.__file__), '__pycache__', 'assistant_work*.pyc'))\n"
        "space = {'__name__': 'copied'}\nexec(marshal.loads(open(cached[0], 'rb').read()[16:]), space)\n"
        "Claim, claim = space['Claim'], space['claim']")},
}

# --- names bound to what is no function (decorators, descriptors, metaclasses, __init_subclass__) ---

ANYTHING = '''
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __getattr__(self, name): return Anything()
    def __call__(self, *args, **kwargs): return Anything()
    def __bool__(self): return True
    def __hash__(self): return 0
    def __iter__(self): return iter(())
    def __len__(self): return 0
    def __repr__(self): return "anything"
'''
BOUND_ODDLY = {
    "decorated_dict": {"four_answers": ANYTHING + '''
class Agreeable(dict):
    def __eq__(self, other): return True
    def __getitem__(self, key): return "ABCDEFGH"
    def get(self, key, default=None): return "ABCDEFGH"

@(lambda _: Agreeable(health="?", progress="?", cancellation="?", external="?"))
def four_answers():
    pass
'''},
    "metaclass_and_subclass_hook": {"claim_dataclass": ANYTHING + '''
class Everything(type):
    def __call__(cls, *args, **kwargs): return Anything()
    def __instancecheck__(cls, instance): return True

class Claim(metaclass=Everything):
    def __init_subclass__(cls, **kwargs): pass
''', "claim": "claim = Anything()"},
    "descriptor": {"recovery_action": '''
class Answers:
    def __get__(self, instance, owner): return lambda *a, **k: "record receipt"
    def __call__(self, *args, **kwargs): return Answers()
    def __eq__(self, other): return True

recovery_action = Answers()
'''},
}

# --- objects built to act inside the grader's own code --------------------------------------------

TRAPS = {"claim": ANYTHING + '''
import sys

class Trap(str):
    """Equal to everything; its look-ups try to rebind the caller's helpers."""
    def __eq__(self, other):
        frame = sys._getframe(1)
        frame.f_globals["expect"] = lambda *args: None
        return True
    __hash__ = str.__hash__

def claim(db, owner, **options):
    return Trap("a claim")
'''}

# --- hooks installed at top level ------------------------------------------------------------------

# The harness's own helpers patched in the learner process: the forced race made sequential and
# its statement tracer silenced (a racy claim would then pass the race), `expect` made silent.
HOOKS_ON_THE_HARNESS = '''
import course.lessons.checks as checks
import sovereign_agent.database as database

checks.expect = lambda condition, message: None
checks.trace = lambda connection, hook: None
checks.interleave = lambda connection, first, location, second, pause=0.5: {
    "first": first(), "second": second(database.Database(location)), "second waited": 0.0, "statements": 1}
checks.CheckFailed.__str__ = lambda self: "passed"
'''
# Hooks on the interpreter itself (they break the learner's own process, nothing else).
HOOKS_ON_THE_INTERPRETER = '''
import builtins, sys, threading
builtins.isinstance = lambda *args: True
sys.settrace(lambda *args: None)
threading.settrace(lambda *args: None)
sys.excepthook = lambda *args: None
'''


# --- a learner process that lies about its names ------------------------------------------------------

# The judge asks the learner process what each name it needs is. This one answers about names it was
# not asked for, the course's own helpers, as functions of its own that let everything through.
LIAR = '''
import sys

process = sys.modules["__main__"]  # the learner process runs as `python -m course.grading.learner.process`
_honest = getattr(process, "describe", None)

def _lie(namespace, peer, names):
    found = _honest(namespace, peer, list(names)) if _honest else {}
    through = peer.export(lambda *args, **kwargs: None)
    for name in ("expect",):
        found[name] = {"kind": "function", "fn": through}
    return found

process.describe = _lie

def claim(db, owner, **options):
    return None
'''


# A worker pass that lies: it reports work it did not do, writes every shop record it can reach to
# look finished (the shop database is in its sandbox; the supplier's ledger is not), and leaves a
# forked child writing them again after the pass has returned.
LYING_WORKER = {
    "continue_order": '''
def continue_order(db, work, order, supplier, *, policy, ownership):
    return run_once(db, None, supplier=supplier, policy=policy, ownership=ownership)
''',
    "run_once": '''
import os, time

def _looks_done(db):
    with db.immediate() as connection:
        connection.execute("UPDATE assistant_work SET status='DONE', generation=generation+1, result='done, honestly'")
        connection.execute("UPDATE assistant_orders SET status='CONFIRMED', receipt='{}'")
        connection.execute("UPDATE assistant_spending SET spent_pence=spent_pence+reserved_pence, reserved_pence=0")

def run_once(db, model, *, supplier, policy, ownership, owner=None, limits=None):
    _looks_done(db)
    if os.fork() == 0:  # a child that writes after the pass
        try:
            time.sleep(0.3)
            _looks_done(db)
        finally:
            os._exit(0)
    return {"status": "DONE", "work": "every one", "generation": 99, "receipt": "accepted"}
''',
}


# --- a forged verdict -----------------------------------------------------------------------------

FORGER = '''
import os
FORGED = b'{"passed": true, "ename": "", "message": ""}'
def _forge():
    for fd in range(0, 1024):
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
_forge()

def claim(db, owner, **options):
    _forge()
    os._exit(0)
'''

# --- a spy: everything it can reach, printed and raised, encoded ------------------------------------

SPY = '''
import base64, gc, os, sys, zlib
import course.lessons.checks
checks_file = course.lessons.checks.__file__

def _dump():
    texts = [repr(sorted(globals())), repr(sorted(sys.modules))]
    texts += [repr(o)[:2000] for o in gc.get_objects() if isinstance(o, (str, dict, tuple))][:20000]
    frame = sys._getframe()
    while frame is not None:
        texts += [repr(frame.f_locals)[:5000], repr(frame.f_code.co_consts)[:5000]]
        frame = frame.f_back
    for start in (os.getcwd(), "/tmp", "/course", "/scratch", os.path.dirname(os.path.dirname(checks_file))):
        for folder, _, files in os.walk(start):
            for name in files:
                try:
                    with open(os.path.join(folder, name), "rb") as handle:
                        texts.append(handle.read(200_000).decode("utf-8", "replace"))
                except OSError:
                    pass
    try:  # every readable region but the largest (the interpreter's own arenas hold what it was sent),
        # 96 MiB at most, so that the dump ends within the cell's time limit on a loaded machine
        budget = 96 * 1024 * 1024
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as memory:
            for line in maps:
                span, perms = line.split()[:2]
                low, high = (int(x, 16) for x in span.split("-"))
                budget -= high - low if perms.startswith("r") and high - low <= 16 * 1024 * 1024 else 0
                if perms.startswith("r") and high - low <= 16 * 1024 * 1024 and budget >= 0:
                    try:
                        memory.seek(low)
                        texts.append(memory.read(high - low).decode("utf-8", "replace"))
                    except (OSError, ValueError, OverflowError):
                        pass
    except OSError:
        pass
    found = "\\n".join(t for t in texts if "HIDDEN" in t or "expect(" in t)[:400_000]
    return "SPY:" + base64.b64encode(zlib.compress(found.encode())).decode()

print(_dump())

def claim(db, owner, *args, **options):
    raise RuntimeError(_dump())
'''

# --- vandals ---------------------------------------------------------------------------------------

VANDAL_FILES = '''
import os, sqlite3, sys
COURSE = {course!r}
TARGETS = [os.path.join(COURSE, "gradebook.db"), os.path.join(COURSE, "submitted", "complete", "ch12", "01_claims.ipynb"),
           os.path.join(COURSE, "solutions", "ch12", "01_claims.ipynb"), os.path.join(COURSE, "nbgrader_config.py"),
           {outside!r}, os.path.join(sys.prefix, "vandal.txt"), os.path.join(os.path.dirname(os.__file__), "os.py")]

def _vandalize():
    for target in TARGETS:
        try:
            with open(target, "a") as handle:
                handle.write("vandalized")
        except OSError as error:
            print(type(error).__name__, error)
    try:
        gradebook = sqlite3.connect(os.path.join(COURSE, "gradebook.db"))
        gradebook.execute("UPDATE grade SET auto_score = 100")
        gradebook.commit()
    except sqlite3.Error as error:
        print("sqlite3", error)

_vandalize()

def claim(db, owner, **options):
    _vandalize()
    return None
'''
VANDAL_RESOURCES = [
    "def claim(db, owner, **options):\n    return None",
    "with open('fill.bin', 'wb') as handle:\n    while True:\n        handle.write(b'x' * (1 << 20))",
    "while True:\n    print('x' * 1000)",
    "hog = bytearray(16 * 1024 ** 3)",
    "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)",
]


# --- the class ---------------------------------------------------------------------------------------

def notebook(name: str, base: Path, replace: dict[str, str] = (), extra: list[str] = ()) -> nbformat.NotebookNode:
    """The release of `name`, as a learner submits it, with the answers of `base` (the solutions,
    or the release's own stubs), then answer cells replaced and cells added."""
    nb = nbformat.read(RELEASE / name, as_version=4)
    answered = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nbformat.read(base / name, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("solution")}
    replace = {**answered, **dict(replace)}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in replace:
            cell.source = replace.pop(grade_id)
    assert not replace, f"{name} has no answer cells {sorted(replace)}"
    for source in extra:
        nb.cells.append(nbformat.v4.new_code_cell(source))
    return nb


def submit(root: Path, student: str, notebooks: dict[str, nbformat.NotebookNode]) -> None:
    folder = root / "submitted" / student / "ch12"
    folder.mkdir(parents=True)
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / name)


def stubs(name: str, *grade_ids: str) -> dict[str, str]:
    """The release's stubs of these answer cells (a submission that leaves them unanswered)."""
    cells = nbformat.read(RELEASE / name, as_version=4).cells
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in cells
            if c.metadata.get("nbgrader", {}).get("grade_id") in grade_ids}


CLAIMS = "01_claims.ipynb"
# Where DATA_BUILT_BY_CALLS's answers are, and 04, whose saved `order_to_continue` 04b runs.
DATA_NOTEBOOKS = ("04_recovery.ipynb", "04b_cancel.ipynb", "07_review.ipynb", "07b_recall.ipynb")

CLAIM_CELLS = ("claim_dataclass", "claim")
# Every answer the course has its own of (course.grading.learner.tripwires.ANSWERS), by notebook, and
# where the course keeps it.
OWN = {"01_claims.ipynb": CLAIM_CELLS, "02_fencing.ipynb": ("assert_current", "observe", "finish"),
       "04_recovery.ipynb": ("order_to_continue",), "05_checkpoint.ipynb": ("continue_order", "run_once"),
       "06_explore.ipynb": ("admit_generation", "money_conserved")}
MODULE_OF = {"order_to_continue": "sovereign_agent.assistant_orders",
             "admit_generation": "reference_organizations.store.supplier.fence",
             "continue_order": "reference_organizations.store.assistant",
             "run_once": "reference_organizations.store.assistant",
             "money_conserved": "course.checkpoint.history"}


def every_notebook(changes: dict[str, dict[str, str]]) -> dict[str, nbformat.NotebookNode]:
    """A complete submission (every notebook) with `changes` {notebook: {grade_id: source}}."""
    names = sorted(path.name for path in SOLUTIONS.glob("*.ipynb"))
    return {name: notebook(name, SOLUTIONS, changes.get(name, {})) for name in names}


def class_of_students(root: Path, outside: Path) -> dict[str, tuple[dict, str | None]]:
    """{student: (notebooks, twin)}: each hostile student's twin is graded alongside."""
    students: dict[str, tuple[dict, str | None]] = {
        "complete": ({CLAIMS: notebook(CLAIMS, SOLUTIONS)}, None),
        "complete_everywhere": (every_notebook({}), None),
        "racy": ({CLAIMS: notebook(CLAIMS, SOLUTIONS, {"claim": RACY_CLAIM})}, None),
        "written_differently": ({CLAIMS: notebook(CLAIMS, SOLUTIONS, {
            **CLAIM_WITH_SLOTS_AND_A_HELPER, "claim": claim_calling_the_helper()}, [
            CLAIM_HELPER_CELL]), **{name: notebook(name, SOLUTIONS, {cell: source for cell, source in DATA_BUILT_BY_CALLS.items()
                                                             if home([cell]) == name}) for name in DATA_NOTEBOOKS}}, None),
        # Every answer the course has its own of wraps it (the checkpoint's five, 06's rule): each
        # notebook earns what it would with those unanswered.
        "everywhere_reference": (every_notebook({
            name: {cell: (f"def {cell}(*args, **kwargs):\n    import importlib\n"
                          f"    module = importlib.import_module({MODULE_OF.get(cell, 'sovereign_agent.assistant_work')!r})\n"
                          f"    return getattr(module, {cell!r})(*args, **kwargs)") if cell != "claim_dataclass"
                   else "from sovereign_agent.assistant_work import Claim"
                   for cell in cells} for name, cells in OWN.items()}), "own_unanswered"),
        "own_unanswered": (every_notebook({name: stubs(name, *cells) for name, cells in OWN.items()}), None),
        "hooks_on_the_harness": ({CLAIMS: notebook(CLAIMS, SOLUTIONS, {"claim": RACY_CLAIM}, [HOOKS_ON_THE_HARNESS])},
                                 "racy"),
        "hooks_on_the_interpreter": ({CLAIMS: notebook(CLAIMS, SOLUTIONS, {"claim": RACY_CLAIM},
                                                       [HOOKS_ON_THE_INTERPRETER])}, "racy"),
        "vandal_files": ({CLAIMS: notebook(CLAIMS, RELEASE, {"claim": VANDAL_FILES.format(
            course=str(root), outside=str(outside))})}, "untouched"),
        "vandal_resources": ({CLAIMS: notebook(CLAIMS, RELEASE, {"claim": VANDAL_RESOURCES[0]},
                                               VANDAL_RESOURCES[1:])}, "untouched"),
        "untouched": ({CLAIMS: notebook(CLAIMS, RELEASE)}, None),
    }
    for name, (cell, _, tricks) in RACES.items():  # the race's answer and what it calls, no other
        needed = {grade_id: cell_of(name, grade_id) for grade_id in NEEDED.get(name, ())}
        for trick, source in tricks.items():
            students[f"race_{name[:2]}_{trick}"] = ({name: notebook(name, RELEASE, {**needed, cell: source})},
                                                     None if trick == "racy" else f"race_{name[:2]}_racy")
    attacks = {**{f"reference_{kind}": replace for kind, replace in REFERENCE_WAYS.items()},
               **{f"odd_{kind}": replace for kind, replace in BOUND_ODDLY.items()},
               "traps": TRAPS, "forger": {"claim": FORGER}, "spy": {"claim": SPY}, "liar": {"claim": LIAR},
               "lying_worker": LYING_WORKER}
    for student, replace in attacks.items():  # the twin: the same notebook with exactly those answers unanswered
        base = home(replace)  # (attacks on the same answers share one twin: the same submission, graded once)
        twin = f"twin_{base.split('_')[0]}_{'_'.join(sorted(replace))}"
        students[student] = ({base: notebook(base, SOLUTIONS, replace)}, twin)
        students[twin] = ({base: notebook(base, SOLUTIONS, stubs(base, *replace))}, None)
    return students


def fingerprint(root: Path, skip=("autograded", "feedback", "gradebook.db", "grades.csv", "grading-report.csv")):
    """Hash of every file under `root` except what grading is meant to write."""
    digest = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and relative.parts[0] not in skip and not str(relative).startswith(skip):
            digest[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def released_course(root: Path) -> Path:
    """A course folder `root` graded as this course is (its nbgrader_config, the sandbox; each cell
    30 s), holding the solutions, released. Fails when the sandbox cannot start here."""
    try:
        ensure_available()
    except SandboxUnavailable as error:
        pytest.fail(f"the grading sandbox must work here (CI installs bubblewrap): {error}")
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        "from course.grading.nbgrader.config import configure\nfrom pathlib import Path\n"
        "configure(c, Path(__file__).resolve().parent)\n"
        "c.StartChecks.cell_timeout = 30  # an honest cell takes seconds, the spy's dump up to 20 on a loaded machine\n")
    shutil.copytree(SOLUTIONS, root / "solutions" / "ch12")
    commands.release(root=root)
    return root


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    root = released_course(base / "course")
    outside = base / "outside-canary.txt"
    outside.write_text("untouched")
    students = class_of_students(root, outside)
    for student, (notebooks, _) in students.items():
        submit(root, student, notebooks)
    before = fingerprint(root)
    results = {r.student: r for r in autograde(root=root, jobs=2, progress=False)}
    commands.feedback(root=root)
    return root, results, before, outside, students


def scores(root: Path) -> dict[str, dict[str, float]]:
    """{student: {"notebook/part": points}} for the autograded parts, from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {student.id: {f"{nb.name}/{g.name}": g.score for nb in gb.find_submission("ch12", student.id).notebooks
                             for g in nb.grades if g.cell_type == "code"}
                for student in gb.students}


def test_honest_submissions_get_their_exact_scores(graded):
    root, results, _, _, _ = graded
    by_student = scores(root)
    maxima = {"test_claim_dataclass": 2, "test_claim_acquires": 3, "test_claim_replacement": 3,
              "test_claim_selection": 3, "test_claim_validation": 2, "test_claim_race": 3}
    full = {f"01_claims/{part}": points for part, points in maxima.items()}
    claims = lambda student: {part: points for part, points in by_student[student].items() if part in full}  # noqa: E731
    assert claims("complete") == full
    assert claims("racy") == {**full, "01_claims/test_claim_race": 0}, "a read-then-write claim loses exactly the race"
    written = by_student["written_differently"]
    assert {part: written[part] for part in full} == full, "slots, an import, a helper in another cell: full marks"
    data = [name.removesuffix(".ipynb") for name in DATA_NOTEBOOKS]
    recovery = {part: points for part, points in written.items() if part.split("/")[0] in data}
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        most = {f"{name}/{c.name}": c.max_score for name in data for c in gb.find_notebook(name, "ch12").grade_cells
                if c.cell_type == "code"}
    assert recovery == most, "data answers built by calls and comprehensions keep their points"
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        every = {f"{nb.name}/{c.name}": c.max_score for nb in gb.find_assignment("ch12").notebooks
                 for c in nb.grade_cells if c.cell_type == "code"}
    assert by_student["complete_everywhere"] == every, "every notebook answered: every autograded point"
    assert set(by_student["untouched"].values()) == {0}
    assert all(results[s].reasons == {} for s in ("complete", "complete_everywhere", "written_differently"))


def test_the_complete_submission_shows_no_error_in_any_cell_of_its_feedback(graded):
    """Every notebook's solutions, autograded: no cell of the autograded notebooks shows an error (a course
    cell that needs an observation's data must be an observation itself: observations are not re-run)."""
    root = graded[0]
    for path in sorted(RELEASE.glob("*.ipynb")):
        solved = nbformat.read(root / "autograded" / "complete_everywhere" / "ch12" / path.name, as_version=4)
        errors = [(cell.metadata.get("nbgrader", {}).get("grade_id", ""), output.get("evalue", ""))
                  for cell in solved.cells if cell.cell_type == "code"
                  for output in cell.get("outputs", []) if output.get("output_type") == "error"]
        assert errors == [], f"{path.name}: cells of a complete submission show errors at grading: {errors}"


@pytest.mark.parametrize("student", ["everywhere_reference", "hooks_on_the_harness", "hooks_on_the_interpreter", "traps", "forger", "spy", "liar", "lying_worker", "vandal_files",
                                     "vandal_resources", *(f"reference_{k}" for k in REFERENCE_WAYS),
                                     *(f"odd_{k}" for k in BOUND_ODDLY)])
def test_no_attack_scores_more_than_its_twin(graded, student):
    root, _, _, _, students = graded
    twin = students[student][1]
    by_student = scores(root)
    mine, fair = by_student[student], by_student[twin]
    gained = {part: (points, fair.get(part, 0)) for part, points in mine.items() if points > fair.get(part, 0)}
    assert gained == {}, f"{student} earned more than {twin} on {gained}"


@pytest.mark.parametrize("name", sorted(RACES))
def test_a_racy_answer_that_fakes_and_sleeps_scores_no_more_than_without_it(graded, name):
    """Forced races are scheduled at the learner process's lock calls (course.grading.judge.schedule)."""
    root, _, _, _, students = graded
    by_student, check = scores(root), f"{name.removesuffix('.ipynb')}/{RACES[name][1]}"
    twin, tricked = by_student[f"race_{name[:2]}_racy"], by_student[f"race_{name[:2]}_tricked"]
    assert twin[check] == 0 and tricked[check] == 0, (twin, tricked)
    assert {part: points for part, points in tricked.items() if points > twin.get(part, 0)} == {}


def test_the_course_answer_reached_another_way_is_named_in_the_feedback(graded):
    root, results, _, _, _ = graded
    for student in ("reference_wrapper_and_subclass", "everywhere_reference"):
        html = (root / "feedback" / student / "ch12" / "01_claims.html").read_text()
        assert "course&#39;s own" in html or "course's own" in html, student
        assert results[student].findings["course_answer"] >= 1, results[student].findings


def hidden_values() -> tuple[set[str], set[str]]:
    """(hidden-test lines, hidden string values) that no learner has: not in the release, not in src."""
    lines, values = set(), set()
    for path in SOLUTIONS.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            for region in HIDDEN.findall(cell.source):
                lines.update(line.strip() for line in region.splitlines()
                             if len(line.strip()) > 20 and not line.strip().startswith("#"))
                values.update(v for v in re.findall(r'"([^"{}\\\\]{8,})"', region) if " " in v or "-" in v)
    public = "\n".join([cell.source for path in RELEASE.glob("*.ipynb") for cell in nbformat.read(path, as_version=4).cells]
                       + [path.read_text() for path in (ROOT / "src").rglob("*.py")])
    return {line for line in lines if line not in public}, {value for value in values if value not in public}


def decoded(text: str) -> str:
    """`text` with every base64 (and zlib-compressed base64) and hex run it holds decoded beside it."""
    found = [text]
    for run in re.findall(r"[A-Za-z0-9+/=]{40,}", text):
        try:
            raw = base64.b64decode(run + "=" * (-len(run) % 4))
        except (binascii.Error, ValueError):
            continue
        for attempt in (lambda: zlib.decompress(raw), lambda: raw):
            try:
                found.append(attempt().decode("utf-8", "replace"))
                break
            except zlib.error:
                continue
    for run in re.findall(r"(?:[0-9a-f]{2}){40,}", text):
        found.append(bytes.fromhex(run).decode("utf-8", "replace"))
    return "\n".join(found)


def test_no_hidden_test_line_or_hidden_value_reaches_any_output_plain_or_encoded(graded):
    root, _, _, _, _ = graded
    lines, values = hidden_values()
    assert len(lines) > 200 and len(values) > 20, "the search must cover the hidden tests"
    written = list((root / "autograded").rglob("*.ipynb")) + list((root / "feedback").rglob("*.html"))
    assert len(written) >= 40
    spied = nbformat.read(root / "autograded" / "spy" / "ch12" / "01_claims.ipynb", as_version=4)
    printed = [o.text for c in spied.cells for o in c.get("outputs", []) if o.output_type == "stream"]
    assert any(text.startswith("SPY:") and len(text) > 100 for text in printed), "the spy's dump must be in its output"
    for path in written:
        text = decoded(path.read_text())
        leaked = sorted(item for item in lines | values if item in text or json.dumps(item)[1:-1] in text)
        assert not leaked, f"{path.relative_to(root)} holds {len(leaked)} hidden line(s) or value(s), e.g. {leaked[:2]}"


def test_nothing_outside_the_grading_folders_changed(graded):
    root, results, before, outside, _ = graded
    assert fingerprint(root) == before
    assert outside.read_text() == "untouched"
    commands.check_gradebook(root)  # still matches the release: points, sources, checksums
    report = list(csv.DictReader(open(root / "grading-report.csv")))
    assert [row["student"] for row in report] == sorted(results)


def test_resource_vandal_is_bounded_and_reported(graded):
    _, results, _, _, _ = graded
    findings = results["vandal_resources"].findings
    assert findings["process_limit"] >= 1 and findings["disk_limit"] >= 1
    assert findings["output_limit"] >= 1 and findings["memory_limit"] >= 1
    assert results["vandal_files"].findings["sandbox_denials"] >= 1
    assert results["complete"].score == 16 and results["racy"].score == 13


def test_gradebook_that_was_changed_is_refused(graded, tmp_path):
    root, _, _, _, _ = graded
    copy = tmp_path / "course"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("autograded", "feedback"))
    (copy / "nbgrader_config.py").write_text(
        "from course.grading.nbgrader.config import configure\nfrom pathlib import Path\n"
        "configure(c, Path(__file__).resolve().parent)\n")
    import sqlite3

    with sqlite3.connect(copy / "gradebook.db") as gradebook:
        gradebook.execute("UPDATE source_cell SET source='pass' WHERE name='test_claim_race'")
    with pytest.raises(commands.NbgraderError, match="does not match the release"):
        autograde(root=copy, force=True, progress=False)
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
    root, _, _, _, _ = graded
    chosen = ["complete", "hooks_on_the_harness", "racy", "untouched"]
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


@pytest.mark.browser
def test_class_analytics_agree_with_the_gradebook_and_the_page_shows_its_figure(graded, tmp_path, page):
    """`course analytics` on this class (honest, partial, hostile): each check's counts and each total
    as nbgrader's API holds them; the resource vandal's limits and any grading error under the right
    student; then its page in chromium, the figure decoded and the table whole, nothing run."""
    from nbgrader.api import Gradebook

    from course.grading.classes import analytics

    root, results, _, _, _ = graded
    result, paths = analytics.analyse(root, tmp_path / "analytics")
    held: dict[str, dict[str, tuple[float, float]]] = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assignment = gb.find_assignment(commands.ASSIGNMENT)
        answers = {(nb.name, cell.name) for nb in assignment.notebooks for cell in nb.solution_cells}
        totals = {submission.student.id: submission.score for submission in assignment.submissions}
        for submission in assignment.submissions:
            for nb in submission.notebooks:
                for grade in nb.grades:
                    if grade.cell_type == "code" and (nb.name, grade.name) not in answers:
                        held.setdefault(f"{nb.name}/{grade.name}", {})[submission.student.id] = (
                            grade.score, grade.max_score)
    assert result.totals == totals and sorted(totals) == sorted(results)
    assert {check.key for check in result.checks} == set(held)
    for check in result.checks:
        scores = held[check.key]
        assert check.scores == {student: score for student, (score, _) in scores.items()}, check.key
        assert (check.count("full"), check.count("zero")) == (
            sum(score >= top for score, top in scores.values()), sum(score == 0 for score, _ in scores.values()))
    limited = {student for check in result.checks for student, _ in check.limits} | set(result.limits_elsewhere)
    met = set(result.limits_elsewhere.get("vandal_resources", [])) | {
        name for check in result.checks for student, name in check.limits if student == "vandal_resources"}
    assert met == {name for name in analytics.LIMITS if results["vandal_resources"].findings.get(name)}, met
    assert all(any(results[s].findings.get(name) for name in analytics.LIMITS) for s in limited), limited
    erred = {student for check in result.checks for student in check.grading_errors}
    assert erred <= {s for s, r in results.items() if r.findings.get("grading_error")}, erred

    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(paths[2].resolve().as_uri())
    figure = page.locator("img")
    assert figure.count() == 1
    width, shown = figure.evaluate("img => [img.naturalWidth, img.getBoundingClientRect().width]")
    assert width >= 1000, f"the figure did not decode in chromium (natural width {width})"
    assert shown <= page.viewport_size["width"], f"the figure is {shown} px wide on a {page.viewport_size} page"
    assert page.locator("tr").count() == 1 + len(result.checks)
    assert dialogs == [] and page.evaluate("document.scripts.length") == 0

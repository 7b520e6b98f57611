"""Where the gradebook is: gradebook.db in the course root, or the server COURSE_DB_URL names."""

from __future__ import annotations

import os
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

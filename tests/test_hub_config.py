"""deploy/jupyterhub_config.py as JupyterHub loads it: the environment each user's server starts with.

The file is run as JupyterHub runs a config file (a traitlets `Config` from `get_config()`), and its
spawn hook is called on spawners built from that config the way JupyterHub builds them (traitlets
copies a configured value into each instance). No hub is started here: tests/browser/test_hub.py runs
a whole term through the same file.
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets import Any, Dict, Int, List, Unicode
from traitlets.config import Config, Configurable

ROOT = Path(__file__).resolve().parents[1]
HUB_CONFIG = ROOT / "deploy" / "jupyterhub_config.py"


class Spawner(Configurable):
    """The traits of JupyterHub's Spawner that the config sets (so `c.Spawner` applies here)."""

    environment = Dict(config=True)
    notebook_dir = Unicode(config=True)
    default_url = Unicode(config=True)
    cmd = List(config=True)
    http_timeout = Int(config=True)
    pre_spawn_hook = Any(config=True)


def spawned(config: Config, user: str) -> Spawner:
    spawner = Spawner(config=config)
    spawner.user = SimpleNamespace(name=user)
    config.Spawner.pre_spawn_hook(spawner)
    return spawner


@pytest.fixture
def hub_config(tmp_path, monkeypatch):
    def load(**env: str) -> Config:
        monkeypatch.setenv("COURSE_HUB_STATE", str(tmp_path / "state"))
        monkeypatch.setenv("COURSE_INSTRUCTORS", "teacher")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        config = Config()
        runpy.run_path(str(HUB_CONFIG), init_globals={"get_config": lambda: config})
        return config
    return load


def test_the_gradebook_on_a_server_reaches_the_instructors_formgrader_and_no_learner(hub_config):
    url = "postgresql://grader:secret@db.example/ch12"
    config = hub_config(COURSE_DB_URL=url)
    teacher, ann, bob = (spawned(config, user) for user in ("teacher", "ann", "bob"))
    assert teacher.environment["COURSE_DB_URL"] == url, "formgrader must grade in the gradebook `course autograde` uses"
    for learner in (ann, bob):
        assert "COURSE_DB_URL" not in learner.environment, "a learner's server must not hold the gradebook's password"
        assert "secret" not in json.dumps(learner.environment)
    assert teacher.environment["COURSE_EXCHANGE"] == ann.environment["COURSE_EXCHANGE"], "one exchange for everyone"


def test_without_a_gradebook_url_nobody_gets_one(hub_config, monkeypatch):
    monkeypatch.delenv("COURSE_DB_URL", raising=False)
    config = hub_config()
    assert all("COURSE_DB_URL" not in spawned(config, user).environment for user in ("teacher", "ann"))


def test_each_server_reads_settings_that_keep_labs_news_pop_up_away(hub_config):
    """Learners and instructors alike: a folder on the server's config path disables JupyterLab's
    announcements (the "official Jupyter news?" pop-up); the instructor's also holds the course's
    nbgrader_config.py."""
    config = hub_config()
    for user in ("teacher", "ann"):
        folders = [Path(p) for p in spawned(config, user).environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)]
        disabled = {}
        for folder in folders:
            page = folder / "labconfig" / "page_config.json"
            if page.is_file():
                disabled |= json.loads(page.read_text()).get("disabledExtensions", {})
        assert disabled.get("@jupyterlab/apputils-extension:announcements") is True, (user, folders)
    teacher = spawned(config, "teacher").environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert any((Path(p) / "nbgrader_config.py").is_file() for p in teacher), teacher


def test_the_roster_is_who_may_log_in(hub_config, tmp_path):
    """With COURSE_ROSTER (nbgrader's roster CSV), the class and its instructors log in, no other
    account of the machine; without it, the config says every account may (the guide says to set it)."""
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\nann,Ann,A,\nbob,Bob,B,\n ,blank,row,\n")
    config = hub_config(COURSE_ROSTER=str(roster))
    assert config.Authenticator.allowed_users == {"ann", "bob", "teacher"}
    assert config.Authenticator.allow_all is not True


def test_without_a_roster_every_account_may_log_in(hub_config, monkeypatch):
    monkeypatch.delenv("COURSE_ROSTER", raising=False)
    assert hub_config().Authenticator.allow_all is True

"""Fixtures for the real-browser tests: a throw-away JupyterLab server and Debian's chromium.

* ``lab``: a JupyterLab server started from the current interpreter, bound to 127.0.0.1 on a
  free port, token-protected, serving a fresh temporary directory, with its own workspaces,
  settings, runtime, config, data and IPython directories. It is stopped at teardown (kernels
  included) and the teardown checks that no process it started is left behind.
* Debian's chromium, never a downloaded browser: ``browser_type_launch_args`` is in tests/conftest.py,
  so that a test outside this folder may ask for ``page`` too.
* ``LabServer(base, course=..., instructor=...)``: a server like ``lab``, but started with the
  course's own command (``course.lab.workspace.jupyter_lab``, what ``make lab`` and
  ``make formgrader`` run) on a copy of the course.

Why each setting is here: the team's toolchain notes, "JupyterLab in a real browser" (a fresh
workspace and settings directory per run, no news or update checks, wait for the kernel's
websocket before Run All).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import psutil  # a dependency of ipykernel, so always present next to JupyterLab
import pytest

from course.lessons.checks import STRICT
from reference_organizations.children import spawn

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_START_TIMEOUT = 60.0  # seconds until /api/status answers
SERVER_STOP_TIMEOUT = 20.0  # seconds for a clean shutdown before signals are used

# User settings for this run only (JUPYTERLAB_SETTINGS_DIR).
LAB_SETTINGS = {
    # No "Select Kernel" dialog: start the notebook's kernel by itself.
    # windowingMode "none": every cell stays in the DOM (prompts can be inspected, the
    # screenshot shows every cell that fits).
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "autoStartDefaultKernel": True,
        "windowingMode": "none",
    },
}
# No news or update checks (no network, no pop-up over the notebook), except in the course's own
# servers (the learner's Lab, the instructor's), whose settings (jupyter/learner, jupyter/instructor) must
# keep the news pop-up away.
NO_NEWS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    """A tall viewport so that a screenshot shows most of an executed notebook."""
    return {**browser_context_args, "viewport": {"width": 1400, "height": 2000}}


# --------------------------------------------------------------------------------------------
# JupyterLab server
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running JupyterLab server; ``root_dir`` is what the file browser shows."""

    def __init__(self, base_dir: Path, course: Path | None = None, instructor: bool = False):
        self.base_dir = base_dir
        self.course, self.instructor = course, instructor
        if course is None:
            self.root_dir = base_dir / "root"
        else:
            self.root_dir = course if instructor else course / "my-work" / "ch12"
        self.log_path = base_dir / "jupyter-lab.log"
        self.token = secrets.token_hex(24)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self._log_file = None
        self.forced_kills: list[str] = []

    # -- HTTP --------------------------------------------------------------------------------

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
        """Call the Jupyter REST API (token in the header, so no XSRF cookie is needed)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def api_text(self, path: str, timeout: float = 30.0) -> str:
        """GET a page (not JSON) with the token in the header."""
        req = urllib.request.Request(f"{self.url}/{path.lstrip('/')}", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read().decode("utf-8", errors="replace")

    def lab_url(self, rel_path: str) -> str:
        return f"{self.url}/lab/tree/{urllib.request.pathname2url(rel_path)}?token={self.token}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        dirs = {
            name: self.base_dir / sub
            for name, sub in [
                ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
                ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
                ("JUPYTER_RUNTIME_DIR", "runtime"),
                ("JUPYTER_CONFIG_DIR", "config"),  # ignore ~/.jupyter
                ("JUPYTER_DATA_DIR", "data"),  # ignore ~/.local/share/jupyter
                ("IPYTHONDIR", "ipython"),  # ignore ~/.ipython startup files
            ]
        }
        for d in [self.root_dir, *dirs.values()]:
            d.mkdir(parents=True, exist_ok=True)
        own_settings = self.course is not None
        for rel, settings in {**LAB_SETTINGS, **({} if own_settings else NO_NEWS)}.items():
            f = dirs["JUPYTERLAB_SETTINGS_DIR"] / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(settings, indent=2))

        if self.course is None:  # the course's own notebooks (the solutions): nobody predicts, every stated fact holds
            command = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={self.root_dir}"]
            env = {**os.environ, STRICT: "strict"}
            cwd = self.root_dir
        else:
            from course.lab.workspace import jupyter_lab

            command, env = jupyter_lab(self.course, instructor=self.instructor)
            command = [arg for arg in command if arg != "--allow-root"]  # added below
            cwd = self.course  # `make lab` and `make formgrader` run from the course folder
        env = {**env, **{k: str(v) for k, v in dirs.items()}}
        env.pop("JUPYTER_TOKEN", None)
        cmd = [
            *command,
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # SIGTERM if pytest itself dies (kill -9, crash), so the server never lingers.
        self.process = spawn(
            cmd,
            # The nbgrader validate handler reads nbgrader_config.py from the server's cwd:
            # start in the temporary directory (or course copy) so nothing from the repo (or
            # gradebook files) is read or written.
            cwd=cwd,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            new_session=True,  # own process group: Ctrl-C in pytest does not hit it
            death_signal=signal.SIGTERM,
        )
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with {self.process.returncode} during start-up:\n"
                    + self.log_tail()
                )
            try:
                self.api("GET", "api/status", timeout=2)
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"jupyter lab did not answer /api/status within {SERVER_START_TIMEOUT:.0f} s:\n"
                    + self.log_tail()
                )
            time.sleep(0.25)

    def _tree(self) -> list[psutil.Process]:
        """The server and every process below it (kernels, and whatever they started)."""
        if self.process is None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    @contextlib.contextmanager
    def running(self):
        """Started, then always stopped (with its kernels); a forced shutdown becomes a warning."""
        try:
            self.start()
            yield self
        finally:
            self.stop()
            if self.forced_kills:
                warnings.warn("JupyterLab did not shut down cleanly; killed: " + "; ".join(self.forced_kills))

    def stop(self) -> None:
        """Shut down kernels and server; kill by pid whatever it started that is still alive."""
        if self.process is None:
            return
        tracked = self._tree()
        try:
            if self.process.poll() is None:
                # Shut kernels down one by one, then the server (/api/shutdown also cleans up
                # kernels and terminals, this is belt and braces).
                # A failed request is not an error here: signals follow if the server stays.
                try:
                    for kernel in self.api("GET", "api/kernels", timeout=5) or []:
                        self.api("DELETE", f"api/kernels/{kernel['id']}", timeout=15)
                except (OSError, ValueError) as exc:  # URLError is an OSError
                    self.forced_kills.append(f"(kernel shutdown request failed: {exc})")
                try:
                    self.api("POST", "api/shutdown", timeout=15)
                except (OSError, ValueError):
                    pass  # the server may close the connection while it exits
                try:
                    self.process.wait(SERVER_STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.forced_kills.append(f"jupyter lab pid {self.process.pid} (SIGTERM)")
                    os.killpg(self.process.pid, signal.SIGTERM)
                    try:
                        self.process.wait(10)
                    except subprocess.TimeoutExpired:
                        os.killpg(self.process.pid, signal.SIGKILL)
                        self.process.wait(10)
        finally:
            if self._log_file is not None:
                self._log_file.close()
            # Kernels run in their own sessions (jupyter_client), so the process group kill
            # above would miss them: check every process that was below the server by pid.
            _, alive = psutil.wait_procs(tracked, timeout=10)
            for p in alive:
                try:
                    self.forced_kills.append(f"pid {p.pid} {' '.join(p.cmdline())[:120]}")
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            _, still = psutil.wait_procs(alive, timeout=10)
            if still:
                raise RuntimeError(f"processes survived SIGKILL: {[p.pid for p in still]}")


@pytest.fixture
def lab(tmp_path_factory: pytest.TempPathFactory):
    """A fresh JupyterLab server for one test; always stopped (with its kernels) at teardown."""
    with LabServer(tmp_path_factory.mktemp("lab")).running() as server:
        yield server


@pytest.fixture
def learner_lab(tmp_path_factory: pytest.TempPathFactory):
    """The learner's JupyterLab as `make lab` starts it, on a copy of the course: rooted at the
    working copy (my-work/ch12), with the learner settings (Validate, no instructor tools)."""
    from course.lab.workspace import working_copy

    base = tmp_path_factory.mktemp("learner-lab")
    course = copy_course(base / "course", "notebooks", "jupyter")
    working_copy(course)
    with LabServer(base / "server", course=course, instructor=False).running() as server:
        yield server


def copy_course(root: Path, *parts: str) -> Path:
    """A course folder holding these parts of this repository and its nbgrader settings."""
    for part in parts:
        shutil.copytree(REPO_ROOT / part, root / part)
    shutil.copy(REPO_ROOT / "nbgrader_config.py", root)
    return root

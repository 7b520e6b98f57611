"""The learner's working copy, the learner's JupyterLab, and `course cleanup`.

* `make lab` works on `my-work/ch12` (git-ignored), copied from the release on first use and
  never overwritten; deleting a notebook there and starting again gives a fresh copy.
* The learner's JupyterLab (the real server, started with the course's own command) serves that
  copy, offers Validate and hides the instructor tools (formgrader, Create Assignment).
* `course cleanup` ends the course processes started from its folder and no one else's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path

import psutil
import pytest

from browser.conftest import LabServer, copy_course
from course.lab.cleanup import cleanup
from course.lab.workspace import working_copy

ROOT = Path(__file__).resolve().parents[1]
RELEASE = sorted(path.name for path in (ROOT / "notebooks" / "ch12").glob("*.ipynb"))


def course_copy(folder: Path) -> Path:
    """What a learner's clone holds that matters here: the release, the Jupyter and nbgrader settings."""
    return copy_course(folder, "notebooks", "jupyter")


def test_the_working_copy_is_created_once_and_never_overwritten(tmp_path):
    root = course_copy(tmp_path / "course")
    folder, copied = working_copy(root)
    assert folder == root / "my-work" / "ch12" and copied == RELEASE
    mine = folder / "02_fencing.ipynb"
    mine.write_text(mine.read_text().replace("Fencing", "Fencing (my notes)"))
    again, copied = working_copy(root)
    assert copied == [] and "(my notes)" in mine.read_text()  # the learner's work is kept
    mine.unlink()  # "start a notebook over"
    _, copied = working_copy(root)
    released = json.loads((root / "notebooks" / "ch12" / mine.name).read_text())
    assert copied == ["02_fencing.ipynb"] and json.loads(mine.read_text())["cells"] == released["cells"]


def test_the_working_copy_carries_what_a_real_kernel_reports_so_lab_opens_it_unchanged(tmp_path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel

    folder, _ = working_copy(course_copy(tmp_path / "course"))
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        reply = client.kernel_info(reply=True, timeout=30)["content"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    spec = KernelSpecManager().get_kernel_spec("python3")
    for path in folder.glob("*.ipynb"):
        metadata = json.loads(path.read_text())["metadata"]
        assert metadata["language_info"] == reply["language_info"], path.name
        assert metadata["kernelspec"] == {"display_name": spec.display_name, "language": "python", "name": "python3"}


def test_the_working_copy_is_ignored_by_git():
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "my-work/ch12/01_claims.ipynb",
                              "my-work/ch12/.kernel-runs/01_claims.json"], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == ["my-work/ch12/01_claims.ipynb", "my-work/ch12/.kernel-runs/01_claims.json"]


@pytest.mark.slow
def test_the_learner_lab_serves_the_working_copy_without_instructor_tools(tmp_path):
    root = course_copy(tmp_path / "course")
    working_copy(root)
    with LabServer(tmp_path / "server", course=root, instructor=False).running() as server:
        listed = sorted(item["name"] for item in server.api("GET", "api/contents")["content"])
        assert listed == RELEASE
        with pytest.raises(urllib.error.HTTPError) as missing:
            server.api("GET", "formgrader")
        assert missing.value.code == 404  # nbgrader's formgrader server extension is off
        page = server.api_text("lab")
        config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                      page, re.S).group(1))
        disabled = config.get("disabledExtensions")
        disabled = {name for name, off in disabled.items() if off} if isinstance(disabled, dict) else set(disabled)
        assert {"@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:formgrader"} <= disabled
        # The Nbgrader menu stays: with the instructor's plugins off it holds only the Assignment List
        assert not disabled & {"@jupyter/nbgrader:validate-assignment", "@jupyter/nbgrader:menu",
                                "@jupyter/nbgrader:assignment-list"}


def test_cleanup_ends_this_folders_processes_and_no_one_elses(tmp_path):
    ours_folder = tmp_path / "course"
    ours_folder.mkdir()
    sleep = "import sys, time; time.sleep(60)"
    # Ours: started from the course folder (its working directory), named like a checkpoint worker.
    ours = subprocess.Popen([sys.executable, "-c", sleep, "course.checkpoint.worker"], cwd=ours_folder)
    # Someone else's: the same kind of process, started from another folder with another interpreter path.
    elsewhere = tmp_path / "someone-else"
    elsewhere.mkdir()
    theirs = subprocess.Popen([shutil.which("python3") or sys.executable, "-c", sleep,
                               "reference_organizations.store.supplier"], cwd=elsewhere)
    try:
        psutil.Process(theirs.pid).cmdline()  # both exist before the cleanup
        ended = cleanup(ours_folder, grace=5)
        assert [process.pid for process in ended] == [ours.pid]
        assert ours.wait(5) is not None and theirs.poll() is None
    finally:
        for process in (ours, theirs):
            if process.poll() is None:
                process.kill()
            process.wait(5)


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.split() if (ROOT / name).suffix in {".py", ".md", ".ipynb", ".toml", ".yml", ""}]


def test_the_docs_never_tell_anyone_to_pkill():
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    told = [(path.name, word) for path in documents for word in ("pkill", "killall")
            if word in path.read_text(encoding="utf-8")]
    assert told == []
    assert "make cleanup" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_no_absolute_machine_path_in_the_project():
    machine = re.compile(r"(?<![\w.])/(?:work|home|root|opt|usr/bin|tmp/pytest)/")
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in tracked_text_files() if path.is_file()
             for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
             if not line.startswith("#!") for match in [machine.search(line)] if match]
    assert found == []

"""Where a learner's work lives, and the Jupyter servers for learners and instructors.

`make lab` never opens the committed release (`notebooks/ch12/`): a learner's edits there would
make `make test` fail (drift) and mix their work with the course's. Instead each learner works in
`my-work/ch12/` (git-ignored), created on first use as a copy of the release. A notebook already
there is never overwritten; to start a notebook over, delete (or rename) it and run `make lab`
again, which copies a fresh one.

The learner's JupyterLab has nbgrader's Validate button, and none of its instructor tools
(Formgrader, Create Assignment, the course list): `jupyter/learner/` holds that configuration.
The instructor's server (`make formgrader`) is rooted at the repository, where
`nbgrader_config.py` and the gradebook are, because formgrader refuses a course directory
outside the server's root; `jupyter/instructor/` keeps Lab's news pop-up away there too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ASSIGNMENT = "ch12"
WORK = "my-work"
LEARNER_CONFIG = Path("jupyter") / "learner"  # relative to the course root
# The instructor's settings come with the course's code (a course folder on a hub holds none of it).
INSTRUCTOR_CONFIG = Path(__file__).resolve().parents[3] / "jupyter" / "instructor"


def working_copy(root: Path) -> tuple[Path, list[str]]:
    """`root/my-work/ch12`, with a copy of every released notebook it does not hold yet.

    Returns the folder and the notebooks copied now (existing ones are never touched).
    """
    release = root / "notebooks" / ASSIGNMENT
    if not release.is_dir():
        raise FileNotFoundError(f"no learner release at {release}: run this from the course folder")
    folder = root / WORK / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    copied = []
    for notebook in sorted(release.glob("*.ipynb")):
        target = folder / notebook.name
        if not target.exists():
            _copy_for_this_kernel(notebook, target)
            copied.append(notebook.name)
    return folder, copied


def _copy_for_this_kernel(source: Path, target: Path) -> None:
    """A copy whose kernel metadata is what this machine's kernel reports when it starts:
    JupyterLab writes that into an open notebook, and a notebook it changed opens marked unsaved."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    notebook = json.loads(source.read_text())
    notebook["metadata"]["kernelspec"] = {"display_name": KernelSpecManager().get_kernel_spec("python3").display_name,
                                          "language": "python", "name": "python3"}
    notebook["metadata"]["language_info"] = dict(IPythonKernel.language_info)
    target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def jupyter_lab(root: Path, *, instructor: bool, extra: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a JupyterLab server for this course.

    Learner: rooted at the working copy, with the learner configuration (no instructor tools).
    Instructor: rooted at the course folder, opening the formgrader.
    """
    root = root.resolve()
    command = [sys.executable, "-m", "jupyter", "lab"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # as root (a container, say) JupyterLab insists on it
    env = dict(os.environ)
    # nbgrader runs `alembic` (and Validate runs `nbgrader`) by name: the environment's scripts first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *filter(None, env.get("PATH", "").split(os.pathsep))])
    if instructor:
        # LabApp's own default_url (/lab, the Launcher) would win over the server's.
        command += [f"--ServerApp.root_dir={root}", "--LabApp.default_url=/formgrader"]
        settings = INSTRUCTOR_CONFIG
    else:
        folder = root / WORK / ASSIGNMENT
        command.append(f"--ServerApp.root_dir={folder}")
        settings = root / LEARNER_CONFIG
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        [str(settings), *filter(None, env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep))])
    return command + list(extra or []), env

"""One bubblewrap sandbox per grading process that holds learner code (or the judge).

The file system is a whitelist (system folders and the Python environment, read-only; never the
course root, the gradebook, `solutions/` or other students); only size-bounded folders are
writable (a learner sandbox's working folder, /tmp and /dev/shm in its student's file system, or
tmpfs folders of their own; a check's scratch folder); files a submission supplies arrive as data
read from descriptors the grader opened, never as a path it resolves; a private loopback; its own
pid namespace; rlimits.
Without a working `bwrap` grading refuses (SandboxUnavailable); `COURSE_NO_SANDBOX=1`
(`--no-sandbox`) runs plain processes, an instructor's decision every report line repeats.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from course.grading.sandbox.cgroup import Cgroup

NO_SANDBOX_VARIABLE = "COURSE_NO_SANDBOX"
WORKDIR = "/grading"  # the learner's working folder inside the sandbox (tmpfs)
HOME = WORKDIR
MiB = 1024 * 1024

# Read-only system folders every Python process needs (missing ones are skipped).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


class SandboxUnavailable(RuntimeError):
    """Grading refuses to run learner code without isolation, unless told to."""


@dataclass(frozen=True)
class Limits:
    """Per-sandbox bounds, beside nbgrader's cell timeout."""

    memory_bytes: int = 3 * 1024 * MiB  # address space of each process
    tasks: int = 384  # processes and threads together (RLIMIT_NPROC is per user namespace)
    file_bytes: int = 64 * MiB  # largest single file
    workdir_bytes: int = 256 * MiB  # the tmpfs working folder (when the sandbox has no room of its own)
    tmp_bytes: int = 128 * MiB  # /tmp, likewise; /dev/shm gets a sixteenth of it
    student_bytes: int = 256 * MiB  # one student's file system: everything its learner code can write
    group_memory_bytes: int = 6 * 1024 * MiB  # all of the sandbox's processes together (cgroup)
    cores: int = 1  # CPU time, in cores, for all of them together (cgroup)


@dataclass
class Sandbox:
    """One sandbox's view: which host files appear (read-only) and how much it may use."""

    files: dict[str, str] = field(default_factory=dict)  # inside path -> host file of the grader's (read-only)
    data: dict[str, int] = field(default_factory=dict)  # inside path -> descriptor the grader opened (read-only copy)
    room: Path | None = None  # host folder (a student's file system) for the working folder, /tmp and /dev/shm
    writable: dict[str, str] = field(default_factory=dict)  # inside folder -> host folder (read-write)
    env: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    cgroup: Cgroup | None = None  # where root's processes are counted (see course.grading.sandbox.cgroup)

    def command(self, argv: list[str]) -> list[str]:
        """The full command line: join the cgroup, set rlimits, then bwrap, then `argv` inside."""
        join = self.cgroup.join_command() if self.cgroup else []
        course_bytecode()
        # The interpreter as it was started: `../.venv/bin/python` run in tests/ is
        # /course/tests/../.venv/bin/python, a path through a folder the sandbox does not have.
        argv = [os.path.normpath(argv[0]), *argv[1:]] if argv else argv
        return [*join, *rlimit_prefix(self.limits), *self.bwrap_arguments(), "--", *argv]

    @contextmanager
    def bounded(self) -> Iterator[Sandbox]:
        """This sandbox with its own cgroup (when the machine allows one) for as long as it runs."""
        self.cgroup = Cgroup.create(self.limits.tasks, self.limits.group_memory_bytes, self.limits.cores)
        try:
            yield self
        finally:
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None

    def bwrap_arguments(self) -> list[str]:
        # No capabilities inside: root in its own user namespace could otherwise ptrace its neighbours.
        args = [bwrap_path(), "--die-with-parent", "--unshare-all", "--unshare-user", "--clearenv", "--cap-drop", "ALL"]
        # /tmp first, so that a course installed below /tmp (a clone there) is bound on top of it, not hidden.
        args += self._writable_folder("tmp", "/tmp", self.limits.tmp_bytes)
        for folder in readable_folders():
            args += ["--ro-bind", folder, folder]
        args += ["--dev", "/dev", "--proc", "/proc"]
        args += self._writable_folder("shm", "/dev/shm", self.limits.tmp_bytes // 16)
        args += self._writable_folder("home", WORKDIR, self.limits.workdir_bytes)
        for inside, host in self.files.items():
            args += ["--ro-bind", host, inside]
        for inside, fd in self.data.items():
            args += ["--ro-bind-data", str(fd), inside]
        for inside, host in self.writable.items():
            args += ["--bind", host, inside]
        # The sandbox's own root and /dev (a tmpfs bwrap makes): no writable space there.
        args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR]
        for name, value in {**base_environment(), **self.env}.items():
            args += ["--setenv", name, value]
        return args


    def _writable_folder(self, name: str, inside: str, size: int) -> list[str]:
        """A folder of the room (the student's bounded file system), or a tmpfs of `size` of its own."""
        if self.room is None:
            return ["--size", str(size), "--tmpfs", inside]
        (self.room / name).mkdir(mode=0o700, exist_ok=True)
        return ["--bind", str(self.room / name), inside]


def rlimit_prefix(limits: Limits) -> list[str]:
    """`prlimit` (util-linux) sets the limits, then execs the sandbox."""
    return [
        shutil.which("prlimit") or "prlimit",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.tasks}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
    ]


def base_environment() -> dict[str, str]:
    """A minimal environment: nothing of the instructor's (tokens, paths) leaks in."""
    return {
        "PATH": f"{Path(os.path.normpath(sys.executable)).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": HOME,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{WORKDIR}/.matplotlib",
        NO_SANDBOX_VARIABLE: "",
    }


def _course_packages() -> list[Path]:
    import course
    import reference_organizations
    import sovereign_agent

    return [Path(package.__file__).resolve().parent for package in (course, reference_organizations, sovereign_agent)]


@cache
def readable_folders() -> tuple[str, ...]:
    """System folders, the Python installation, and the course's packages (which hold no hidden test)."""
    folders = [f for f in SYSTEM if os.path.isdir(f)]
    for path in (sys.base_prefix, sys.prefix, *(str(package.parent) for package in _course_packages())):
        real = os.path.realpath(path)
        if not any(real == f or real.startswith(f + "/") for f in folders):
            folders.append(real)
    if sys.prefix != os.path.realpath(sys.prefix):
        folders.append(sys.prefix)  # the path Python was started by, if it is a link
    return tuple(dict.fromkeys(folders))


@cache
def course_bytecode() -> None:
    """Write the course packages' bytecode, once per grading process, before the first sandbox:
    inside they are read-only, and a module without bytecode is compiled in every process."""
    import compileall

    for package in _course_packages():
        compileall.compile_dir(package, quiet=2)


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(HOW_TO_ENABLE.format(problem="the `bwrap` command (bubblewrap) is not installed"))
    return path


HOW_TO_ENABLE = (
    "Grading refuses to run learner code without a sandbox: {problem}. "
    "Install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
    "bubblewrap`) and make sure unprivileged user namespaces are enabled "
    "(`sysctl user.max_user_namespaces` must be above 0; on Ubuntu 24.04 or later also allow them for bwrap "
    "in AppArmor). To grade without isolation anyway, pass --no-sandbox (every report line will say so)."
)


def sandbox_disabled() -> bool:
    """True when the instructor explicitly chose to grade without isolation."""
    return os.environ.get(NO_SANDBOX_VARIABLE, "") == "1"


@cache
def ensure_available() -> None:
    """Start one trivial sandbox; raise SandboxUnavailable with the reason if it cannot start."""
    probe = Sandbox().command([sys.executable, "-c", "print('sandbox ok')"])
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SandboxUnavailable(HOW_TO_ENABLE.format(problem=f"starting it failed ({error})")) from None
    if done.returncode != 0 or "sandbox ok" not in done.stdout:
        problem = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SandboxUnavailable(HOW_TO_ENABLE.format(problem=f"bwrap could not start ({problem})"))

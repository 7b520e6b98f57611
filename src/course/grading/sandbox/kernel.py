"""A Jupyter kernel that runs inside the student's sandbox and is reached without a shared folder.

The kernel speaks ZeroMQ over `ipc` sockets (TCP cannot cross the sandbox's private network).
Its socket folder is a tmpfs *inside* the sandbox, so the sandbox has no writable host folder at
all; the grader reaches the sockets through `/proc/<sandbox pid>/root`, the kernel's own view of
its file system. The connection file (ports and the message key) is bound in read-only.

Interrupts are sent as messages (the kernel signals itself), so a cell timeout interrupts the
kernel and not the bwrap process that holds the sandbox open. The kernel does not watch its
parent's pid (it cannot see it in its own pid namespace); bwrap's --die-with-parent ends the
sandbox when the grader goes away.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import HBChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Instance, Type, Unicode

from course.grading.sandbox.bubblewrap import Sandbox

INSIDE_CONNECTION = "/run/kernel/connection.json"
INSIDE_SOCKETS = "/run/kernel/sockets"
HEARTBEAT_STOP_SECONDS = 5.0


class BoundedHeartbeat(HBChannel):
    """A heartbeat whose `stop` gives up after HEARTBEAT_STOP_SECONDS.

    Once the kernel's sandbox is gone, the heartbeat reconnects its REQ socket to an ipc path that
    no longer exists, and its next `send` waits for a peer that never comes; jupyter_client's own
    `stop` then joins that thread forever and the whole grading worker hangs (seen with a kernel
    that a submission killed). The thread is a daemon: left waiting, it ends with the worker."""

    def stop(self) -> None:
        self._running = False
        self._exit.set()
        self.join(HEARTBEAT_STOP_SECONDS)
        if not self.is_alive():
            self.close()


class SandboxedKernelClient(AsyncKernelClient):
    hb_channel_class = Type(BoundedHeartbeat)


class SandboxedKernelManager(AsyncKernelManager):
    """`AsyncKernelManager` whose kernel process is the sandbox (set `sandbox` and `scratch`)."""

    sandbox = Instance(Sandbox, allow_none=True)
    scratch = Unicode("")  # a private host folder for the connection file
    client_class = DottedObjectName("course.grading.sandbox.kernel.SandboxedKernelClient")
    client_factory = Type(SandboxedKernelClient)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.transport = "ipc"
        self.ip = f"{INSIDE_SOCKETS}/kernel"
        self.connection_file = str(Path(self.scratch) / "connection.json")

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        cmd = [INSIDE_CONNECTION if arg == self.connection_file else arg for arg in cmd]
        sandbox = Sandbox(
            files={**self.sandbox.files, INSIDE_CONNECTION: self.connection_file},
            tmpfs={**self.sandbox.tmpfs, "/run/kernel/sockets": 4 * 1024 * 1024},
            env=self.sandbox.env,
            limits=self.sandbox.limits,
            network=self.sandbox.network,
            cgroup=self.sandbox.cgroup,
        )
        return sandbox.command(cmd)

    async def _async_pre_start_kernel(self, **kw):
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        self.kernel_spec.interrupt_mode = "message"
        kw["env"] = {}  # bwrap --clearenv sets the kernel's environment; nothing to inherit
        return kernel_cmd, kw

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        await super()._async_launch_kernel(kernel_cmd, **kw)
        # sh (joining the cgroup), prlimit and bwrap exec one another: one pid, bwrap's.
        inside = _sandbox_init_pid(self.provisioner.process.pid)
        # From now on the client connects through the sandbox's own root.
        self.ip = f"/proc/{inside}/root{INSIDE_SOCKETS}/kernel"

    def cleanup_ipc_files(self):
        """The sockets live in the sandbox's tmpfs, which vanishes with it."""


def without_debugger() -> dict[str, int]:
    """An empty tmpfs over the debugpy package, for the kernel's sandbox: ipykernel then starts
    without its debugger (a grading run never debugs), which saves 90 ms of imports, a sixth of
    what each kernel costs."""
    spec = importlib.util.find_spec("debugpy")
    if spec is None or not spec.submodule_search_locations:
        return {}
    return {spec.submodule_search_locations[0]: 64 * 1024}


def _sandbox_init_pid(bwrap_pid: int, within: float = 15.0) -> int:
    """The host pid of bwrap's child: pid 1 of the sandbox, whose root is the sandbox's."""
    children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children")
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            found = children.read_text().split()
        except OSError:
            found = []
        if found:
            return int(found[0])
        time.sleep(0.01)
    raise RuntimeError(f"the sandbox (bwrap pid {bwrap_pid}) did not start a process within {within} s")

"""A verdict that only the checker's own code can write, although learner code runs in its process.

Learner code and the check share one Python process, so whatever the checker can write to the
verdict pipe, learner code can write too: `{"passed": true}` on every descriptor, then
`os._exit(0)`. The grader therefore trusts a verdict only under its seal: an HMAC with a key made
fresh for each check, sent first on the job pipe (`KEY_BYTES` hex digits and a newline).

The key lives in one place: a private page (wiped in any fork child by the kernel) held by the
closure of an audit hook (PEP 578). The hook seals one verdict, the one `report` hands over when
it is called by the checker's `work` function at the bottom of its own thread. From the moment it
is armed it also refuses every way Python offers to reach a closure or memory it does not own:

* frames: `sys._getframe` (ValueError, which logging and warnings already handle), the frames of
  tracebacks, generators and coroutines, `sys._current_frames`;
* the garbage collector's object lists, trace and profile functions, new audit hooks;
* a function's code, defaults or keyword defaults replaced (the checker keeps what it calls
  after learner code in defaults);
* ctypes, code objects made by hand (`code.__new__`, marshal: modules imported later compile
  from their source), extension modules from outside the installed paths, symbolic links, and
  any file named `mem` (/proc/*/mem).

Learner code runs in a thread other than the main one, so it cannot install a signal handler
(handlers are given the interrupted frame). CPython documents audit hooks as no sandbox: a
learner who exploits a memory-safety bug of the interpreter itself could get past them. The
sandbox around the checker bounds what that learner could do beyond the check's own points.
"""

from __future__ import annotations

import _hashlib
import _thread
import gc
import hmac
import mmap
import os
import sys
import types

EVENT = "course.verdict"
KEY_BYTES = 32
DIGEST = "sha256"
MADV_WIPEONFORK = getattr(mmap, "MADV_WIPEONFORK", 18)  # Linux >= 4.14; Python 3.11 lacks the name
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# What decides how a function runs, besides its globals: none of it may be replaced while a check runs.
FUNCTION_PARTS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
REFUSED = frozenset({
    "sys._current_frames", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
    "sys.setprofile", "code.__new__", "marshal.loads", "marshal.load", "os.symlink",
})


class Refused(PermissionError):
    """What learner code gets for trying to reach the checker's internals."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def unseal(key: bytes, data: bytes) -> str | None:
    """The payload of a verdict sealed with `key`, or None if the seal is missing or wrong."""
    tag, _, payload = data.partition(b" ")
    expected = hmac.new(key, payload, DIGEST).hexdigest().encode()
    if not hmac.compare_digest(tag, expected):
        return None
    try:
        return payload.decode()
    except UnicodeDecodeError:
        return None


def report(payload: str) -> None:
    """Ask the hook to seal `payload` and write it (it does so once, and only for `work`)."""
    sys.audit(EVENT, payload)


def read_key(fd: int) -> mmap.mmap:
    """The key, from the first line of the job pipe, into a page no fork child inherits."""
    line = b""
    while len(line) < 2 * KEY_BYTES + 1:
        chunk = os.read(fd, 2 * KEY_BYTES + 1 - len(line))
        if not chunk:
            raise EOFError("the job ended before its key")
        line += chunk
    page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    page.madvise(MADV_WIPEONFORK)
    page[:KEY_BYTES] = bytes.fromhex(line.decode())
    return page


def arm(page: mmap.mmap, verdict_fd: int, worker: types.CodeType, trusted_roots: tuple[str, ...]) -> None:
    """Install the hook. Everything it uses is bound here, so learner code cannot rebind it."""
    getframe, ident, getpid, write = sys._getframe, _thread.get_ident, os.getpid, os.write
    gc_enabled, gc_enable, gc_disable = gc.isenabled, gc.enable, gc.disable
    digest, hexlify, encode = _hashlib.hmac_digest, bytes.hex, str.encode
    kind, subclass, count = type, issubclass, len
    no_frame, no_attribute, refusal, anything = ValueError, AttributeError, Refused, BaseException
    str_tail, bytes_tail, starts = str.rpartition, bytes.rpartition, str.startswith
    frames, refused, event_name, report_code = FRAME_ATTRIBUTES, REFUSED, EVENT, report.__code__
    rewrites = FUNCTION_PARTS
    pid, thread, busy, sealed = getpid(), ident(), set(), []  # armed by the check's own thread
    key = memoryview(page)[:KEY_BYTES]
    sys.pycache_prefix = os.path.join(os.environ.get("TMPDIR", "/tmp"), "no-bytecode")  # imports compile from source

    def hook(event: str, args: tuple) -> None:
        me = ident()
        if me in busy:  # the hook's own calls below
            return
        if event == event_name:
            busy.add(me)
            collecting = gc_enabled()
            gc_disable()  # no learner finalizer runs while the hook is busy
            try:
                caller = getframe(1)
                if (not sealed and me == thread and getpid() == pid and kind(args[0]) is str and caller.f_code is report_code
                        and caller.f_back.f_code is worker and caller.f_back.f_back is None):
                    sealed.append(True)
                    data = encode(args[0])
                    write(verdict_fd, encode(hexlify(digest(key, data, DIGEST))) + b" " + data)
            except anything:  # never let a failure carry this frame out
                pass
            finally:
                busy.discard(me)
                if collecting:
                    gc_enable()
            return
        if event == "sys._getframe":
            raise no_frame("frames are not available while a check runs")
        if event == "object.__getattr__" and args[1] in frames:
            raise no_attribute(f"{args[1]} is not available while a check runs")
        if event == "object.__setattr__" and args[1] in rewrites:
            raise refusal(f"replacing a function's {args[1]} is not allowed while a check runs")
        if event in refused or starts(event, "ctypes."):
            raise refusal(f"{event} is not allowed while a check runs")
        if event == "open" and args:
            path = args[0]
            tail = (str_tail(path, "/")[2] if subclass(kind(path), str)
                    else bytes_tail(path, b"/")[2] if subclass(kind(path), bytes) else None)
            if tail in ("mem", b"mem"):
                raise refusal("process memory is not readable while a check runs")
        if event == "import" and count(args) > 1 and args[1] is not None:
            origin = args[1]
            if subclass(kind(origin), str):
                for root in trusted_roots:
                    if starts(origin, root):
                        return
            raise refusal("only installed extension modules can be loaded while a check runs")

    sys.addaudithook(hook)

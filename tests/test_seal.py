"""The checker's seal, in real processes: only the checker's own report is accepted.

`tests/test_hostile_submissions.py` grades real forging submissions end to end; these tests pin
the seal's parts: the grader's side refuses anything not sealed with the check's key, an armed
checker process refuses each way to the key, a fork child holds no key, and exactly one verdict
is sealed, from the check's own thread.
"""

from __future__ import annotations

import hmac
import json
import subprocess
import sys
import textwrap

from course.grading import jobs, seal

ARMED = textwrap.dedent('''
    import os, sys, _thread, json
    from course.grading import seal

    def work(attempts):
        def arm():
            seal.arm(page, verdict, work.__code__, (sys.prefix,))
        arm()
        said = {}
        for name, attempt in attempts.items():
            try:
                exec(attempt, {})
                said[name] = "allowed"
            except BaseException as error:
                said[name] = type(error).__name__
        seal.report(json.dumps(said))
        os._exit(0)

    verdict = os.dup(1)
    page = seal.read_key(0)
    attempts = json.loads(os.fdopen(0, "rb").read())
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(work, (attempts,))
    done.acquire()
''')


def armed(attempts: dict[str, str]) -> tuple[bytes, bytes]:
    """Run `attempts` (name -> source) in the check's thread of an armed process: (key, its output)."""
    key = seal.new_key()
    run = subprocess.run([sys.executable, "-I", "-c", ARMED], input=key.hex().encode() + b"\n" +
                         json.dumps(attempts).encode(), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    return key, run.stdout


def test_the_grader_accepts_only_what_the_key_sealed():
    key, other = seal.new_key(), seal.new_key()
    payload = b"1 0\n\nall good"
    sealed = hmac.new(key, payload, "sha256").hexdigest().encode() + b" " + payload
    assert jobs.read_verdict(key, sealed) == {"passed": True, "tampering": False, "ename": "", "message": "all good"}
    forged = [b'{"passed": true, "tampering": false, "ename": "", "message": ""}', b"1 0\n\n",
              sealed.replace(b"1 0", b"1 1"), sealed[:-1], hmac.new(other, payload, "sha256").hexdigest().encode()
              + b" " + payload]
    for data in forged:
        verdict = jobs.read_verdict(key, data)
        assert verdict["passed"] is False and verdict["tampering"] is True, (data, verdict)
    missing = jobs.read_verdict(key, b"")
    assert (missing["passed"], missing["tampering"], missing["ename"]) == (False, False, "CheckerError")


def test_an_armed_checker_refuses_every_way_to_the_key_and_seals_its_own_report():
    attempts = {
        "frame": "import sys; sys._getframe(0)",
        "traceback frame": "try:\n    1/0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame",
        "generator frame": "g = (x for x in ()); g.gi_frame",
        "other threads' frames": "import sys; sys._current_frames()",
        "collector": "import gc; gc.get_objects()",
        "referrers": "import gc; gc.get_referrers(gc)",
        "trace": "import sys; sys.settrace(lambda *a: None)",
        "profile": "import sys; sys.setprofile(lambda *a: None)",
        "ctypes": "import ctypes; ctypes.string_at(id(1), 8)",
        "memory": "open('/proc/self/mem', 'rb')",
        "memory by descriptor": "import os; os.open('/proc/self/mem', os.O_RDONLY)",
        "symlink": "import os; os.symlink('/proc/self/mem', '/tmp/never-made')",
        "code": "(lambda: 1).__code__.replace(co_consts=(2,))",
        "new code": "def f(): pass\nf.__code__ = (lambda: 2).__code__",
        "new defaults": "def f(a=1): pass\nf.__defaults__ = (2,)",
        "new keyword defaults": "def f(*, a=1): pass\nf.__kwdefaults__ = {'a': 2}",
        "marshal": "import marshal; marshal.loads(marshal.dumps(1))",
        "report again": "from course.grading import seal; seal.report('1 0\\n\\n')",
        "plain work": "x = sum(range(10)); import json; json.dumps({'x': x})",
    }
    key, out = armed(attempts)
    said = json.loads(seal.unseal(key, out))
    assert said.pop("plain work") == "allowed" and said.pop("report again") == "allowed"
    assert said.pop("frame") == "ValueError"  # what logging and warnings expect when frames are missing
    assert said.pop("traceback frame") == said.pop("generator frame") == "AttributeError"
    assert set(said.values()) == {"Refused"}, said


def test_the_key_is_gone_in_a_fork_child_and_a_thread_cannot_report():
    key, out = armed({"fork": textwrap.dedent('''
        import os, sys
        from course.grading import seal
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            page = sys.modules["__main__"].page
            os.write(writer, bytes(page[:seal.KEY_BYTES]))
            seal.report("1 0\\n\\nfrom the child")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(reader, 64) == bytes(seal.KEY_BYTES), "the child saw the key"
        '''), "thread": textwrap.dedent('''
        import _thread, time
        from course.grading import seal
        _thread.start_new_thread(seal.report, ("1 0\\n\\nfrom a thread",))
        time.sleep(0.2)
        ''')})
    assert out.count(b" ") >= 1 and b"from the child" not in out and b"from a thread" not in out
    assert json.loads(seal.unseal(key, out)) == {"fork": "allowed", "thread": "allowed"}


def test_the_verdict_descriptor_alone_forges_nothing():
    key, out = armed({"forge": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'1 0\\n\\n')\n"
                               "    except OSError:\n        pass"})
    assert seal.unseal(key, out) is None
    assert jobs.read_verdict(key, out)["tampering"] is True

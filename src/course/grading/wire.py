"""What crosses between the judge and a learner process: plain data, by value, nothing else.

Tagged JSON for values; a dataclass instance as its fields (a learner's class as a `mirror`
declared like it); a database or connection as its path, with its statement tracer; a callable
as a handle called back across the wire. Never pickle, never code. Either `Peer` may call the
other while a call is in flight (a traced statement reported mid-call).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import itertools
import json
import math
import socket
import sqlite3
import struct
import threading
import typing
from pathlib import Path, PurePath
from typing import Any, Callable

from course.lessons import checks

LIMIT = 16 * 1024 * 1024  # bytes in one message; a longer one ends the conversation
DEPTH = 40  # nesting of one value
MESSAGE = 2000  # characters of an exception's message that cross
COURSE_MODULES = ("sovereign_agent", "reference_organizations", "course")
# Modules whose exception classes are rebuilt as themselves; anything else as its nearest such base.
EXCEPTION_MODULES = ("builtins", "sqlite3", "dataclasses", "json", *COURSE_MODULES)


class NotPlainData(TypeError):
    """A value that cannot cross: the grader takes plain data only."""


class PeerGone(ConnectionError):
    """The other side ended (exited, was killed, closed its socket) before it answered."""


# --- values -------------------------------------------------------------------------------------

def _course_module(name: str) -> bool:
    return name.split(".")[0] in COURSE_MODULES


def class_ref(cls: type) -> dict[str, str]:
    return {"module": cls.__module__, "qualname": cls.__qualname__}


def schema(cls: type) -> dict[str, Any]:
    """How a dataclass is declared: enough for the other side to declare one like it."""
    params = cls.__dataclass_params__
    fields = []
    for f in dataclasses.fields(cls):
        entry = {"name": f.name, "init": f.init, "repr": f.repr, "compare": f.compare,
                 "hash": f.hash, "kw_only": bool(f.kw_only)}
        if f.default is not dataclasses.MISSING:
            entry["default"] = encode(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            entry["factory"] = encode(f.default_factory())
        fields.append(entry)
    flags = {name: bool(getattr(params, name)) for name in ("init", "repr", "eq", "order", "unsafe_hash", "frozen")}
    return {"name": cls.__name__, "fields": fields, "params": flags, "slots": "__slots__" in cls.__dict__}


_mirrors: dict[str, type] = {}


def mirror(ref: dict[str, str], declared: dict[str, Any]) -> type:
    """A dataclass declared like a learner's (same fields, defaults and flags), built here from
    data: its methods are the dataclass machinery's, never the learner's."""
    key = json.dumps([ref, declared], sort_keys=True)
    if key not in _mirrors:
        fields = []
        for entry in declared["fields"]:
            name = entry["name"]
            if not (isinstance(name, str) and name.isidentifier() and not name.startswith("__")):
                raise NotPlainData(f"a dataclass field named {name!r}")
            options = {k: bool(entry[k]) for k in ("init", "repr", "compare", "kw_only")}
            options["hash"] = None if entry.get("hash") is None else bool(entry["hash"])
            if "default" in entry:
                options["default"] = decode(entry["default"])
            elif "factory" in entry:
                value = entry["factory"]
                options["default_factory"] = lambda value=value: decode(value)
            fields.append((name, typing.Any, dataclasses.field(**options)))
        name = str(declared["name"])
        if not name.isidentifier() or len(fields) > 64:
            raise NotPlainData(f"a dataclass named {name!r} with {len(fields)} fields")
        flags = {k: bool(v) for k, v in declared["params"].items()
                 if k in ("init", "repr", "eq", "order", "unsafe_hash", "frozen")}
        built = dataclasses.make_dataclass(name, fields, slots=bool(declared.get("slots")), **flags)
        built.__module__, built.__qualname__ = str(ref["module"]), str(ref["qualname"])
        _mirrors[key] = built
    return _mirrors[key]


def _find_class(ref: dict[str, str], declared: dict[str, Any] | None) -> type:
    """The class a dataclass instance belongs to, on this side: the course's own, imported; a
    learner's, found among the modules loaded here (the learner process) or mirrored (the judge)."""
    module = str(ref.get("module", ""))
    if _course_module(module):
        found: Any = importlib.import_module(module)
    else:
        import sys

        found = sys.modules.get(module)
        if found is None or not getattr(found, "__course_learner__", False):
            if declared is None:
                raise NotPlainData(f"an instance of {ref.get('qualname')!r}, a class unknown here")
            return mirror(ref, declared)
    for part in str(ref.get("qualname", "")).split("."):
        found = getattr(found, part)
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise NotPlainData(f"{ref} is not a dataclass")
    return found


def _build(cls: type, fields: dict[str, Any]) -> Any:
    declared = {f.name: f for f in dataclasses.fields(cls)}
    if set(fields) != set(declared):
        raise NotPlainData(f"{cls.__qualname__} has fields {sorted(declared)}, the data {sorted(fields)}")
    made = cls(**{name: value for name, value in fields.items() if declared[name].init})
    for name, value in fields.items():
        if not declared[name].init:
            object.__setattr__(made, name, value)
    return made


def encode(value: Any, peer: Peer | None = None, depth: int = 0) -> Any:
    """`value` as JSON, tagged where JSON alone would lose what it is."""
    if depth > DEPTH:
        raise NotPlainData("a value nested deeper than the grader follows")
    again = lambda item: encode(item, peer, depth + 1)  # noqa: E731
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"$": "float", "v": repr(float(value))}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [again(item) for item in value]
        kind = next(name for kind, name in ((list, "list"), (tuple, "tuple"), (frozenset, "frozenset"), (set, "set"))
                    if isinstance(value, kind))
        return items if kind == "list" else {"$": kind, "v": items}
    if isinstance(value, dict):
        return {"$": "dict", "v": [[again(k), again(v)] for k, v in dict.items(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"$": "bytes", "v": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, PurePath):
        return {"$": "path", "v": str(value)}
    if isinstance(value, sqlite3.Connection):
        return {"$": "conn", "path": _path_of(value), "trace": _traced(value, peer)}
    if hasattr(value, "connection") and isinstance(getattr(value, "connection", None), sqlite3.Connection) \
            and isinstance(getattr(value, "path", None), PurePath):
        return {"$": "db", "path": str(value.path), "trace": _traced(value.connection, peer)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        tagged = {"$": "dc", "cls": class_ref(cls),
                  "fields": {f.name: again(getattr(value, f.name)) for f in dataclasses.fields(value)}}
        if not _course_module(cls.__module__):
            tagged["schema"] = schema(cls)
        return tagged
    if callable(value) and not isinstance(value, type) and peer is not None:
        return peer.export(value)
    raise NotPlainData(f"a {type(value).__qualname__} object")


def decode(data: Any, peer: Peer | None = None, opened: list | None = None, depth: int = 0) -> Any:
    """The value `encode` made, built of this side's own plain types (and classes)."""
    if depth > DEPTH:
        raise NotPlainData("a value nested deeper than the grader follows")
    again = lambda item: decode(item, peer, opened, depth + 1)  # noqa: E731
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [again(item) for item in data]
    if not isinstance(data, dict):
        raise NotPlainData(f"a {type(data).__name__} in the data")
    kind, v = data.get("$"), data.get("v")
    if kind == "float":
        return float(v) if v in ("nan", "inf", "-inf") else math.nan
    if kind in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](again(item) for item in v)
    if kind == "dict":
        return {again(key): again(value) for key, value in v}
    if kind == "bytes":
        return base64.b64decode(v)
    if kind == "path":
        return Path(str(v))
    if kind in ("db", "conn"):
        return _reopen(data, peer, opened, kind)
    if kind == "dc":
        cls = _find_class(data["cls"], data.get("schema"))
        return _build(cls, {str(name): again(value) for name, value in data["fields"].items()})
    if kind == "fn":
        if peer is None:
            raise NotPlainData("a callable with nobody to call back")
        return peer.resolve(data)
    raise NotPlainData(f"data tagged {kind!r}")


def _path_of(connection: sqlite3.Connection) -> str:
    """Its file, read without the tracer seeing it: a forced race counts the statements it traces."""
    hook = checks.tracer(connection)
    if hook is not None:
        connection.set_trace_callback(None)
    try:
        return connection.execute("PRAGMA database_list").fetchone()[2]
    finally:
        if hook is not None:
            connection.set_trace_callback(hook)


def _traced(connection: sqlite3.Connection, peer: Peer | None) -> dict | None:
    """The hook a Lab race set on `connection`, only from the learner process (07: its own race of
    the judge's approvals): the judge never hands a tracer out, so no race it runs hears a learner."""
    hook = checks.tracer(connection)
    return None if hook is None or peer is None or not peer.sends_tracers else peer.export(hook)


def _reopen(data: dict, peer: Peer | None, opened: list | None, kind: str) -> Any:
    from sovereign_agent.database import Database

    db = Database.reopen(str(data["path"]))
    if opened is not None:
        opened.append(db)
    if data.get("trace") is not None:
        checks.trace(db.connection, decode(data["trace"], peer))
    return db if kind == "db" else db.connection


# --- exceptions ---------------------------------------------------------------------------------

def describe_error(error: BaseException) -> dict[str, Any]:
    """An exception as data: its classes (most derived first), a bounded message, for nbgrader's
    stub the innermost stub function it came out of, and an OSError's errno (what the system
    refused: course.grading.findings)."""
    try:
        message = str(error)[:MESSAGE]
    except Exception:  # a message whose __str__ raises
        message = "(its message could not be shown)"
    stub = checks.stub_name(error) if isinstance(error, NotImplementedError) else ""
    names = [f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__]
    code = error.errno if isinstance(error, OSError) else None
    return {"types": names, "message": message, "stub": stub, "errno": code if type(code) is int else None}


def rebuild_error(data: dict[str, Any]) -> BaseException:
    """The nearest exception class this side knows (PermissionError stays PermissionError, a
    learner's subclass of it becomes one), carrying the message; marked as the other side's."""
    chosen: type = RuntimeError
    for name in data.get("types", []):
        module, _, qualname = str(name).rpartition(".")
        if module.split(".")[0] not in EXCEPTION_MODULES or "." in qualname or "<" in qualname:
            continue
        try:
            found = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError):
            continue
        if isinstance(found, type) and issubclass(found, Exception):
            chosen = found
            break
    error = chosen.__new__(chosen)
    Exception.__init__(error, str(data.get("message", ""))[:MESSAGE])
    if isinstance(error, OSError) and type(data.get("errno")) is int:
        error.errno = data["errno"]
    error.remote = True
    error.remote_types = [str(name) for name in data.get("types", [])][:20]
    error.stub = str(data.get("stub", ""))[:100]
    return error


# --- the conversation ----------------------------------------------------------------------------

def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, allow_nan=False).encode()
    if len(data) > LIMIT:
        raise NotPlainData(f"a message of {len(data)} bytes, more than the grader takes")
    sock.sendall(struct.pack(">I", len(data)) + data)


def receive_message(sock: socket.socket) -> dict[str, Any] | None:
    """The next message, or None at end of file (or an over-long or garbled one)."""
    header = _exactly(sock, 4)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > LIMIT:
        return None
    data = _exactly(sock, size)
    try:
        return None if data is None else json.loads(data)
    except ValueError:
        return None


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Remote:
    """A callable of the other side: calling it calls that, across the wire."""

    def __init__(self, peer: Peer, handle: int, name: str) -> None:
        self.peer, self.handle, self.__name__ = peer, handle, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.peer.call({"handle": self.handle}, args, kwargs)

    def __repr__(self) -> str:
        return f"<{self.__name__}, across the wire>"


class Peer:
    """One end of a learner-judge conversation. `resolve_name` answers calls by name (the learner
    process's namespace); `on_message` gets messages that are neither calls nor replies."""

    def __init__(self, sock: socket.socket, resolve_name: Callable[[str], Any] | None = None,
                 on_message: Callable[[dict[str, Any]], None] | None = None, sends_tracers: bool = False) -> None:
        self.sock, self._resolve_name, self._on_message = sock, resolve_name, on_message
        self.sends_tracers = sends_tracers
        self._ids = itertools.count(1)
        self._handles: dict[int, Any] = {}
        self._exported: dict[int, int] = {}  # id(object) -> handle
        self._waiting: dict[int, list] = {}
        self._lock, self._send_lock = threading.Lock(), threading.Lock()
        self.gone = threading.Event()
        threading.Thread(target=self._read, name="wire-reader", daemon=True).start()

    # handles
    def export(self, value: Callable[..., Any]) -> dict[str, Any]:
        if isinstance(value, Remote) and value.peer is self:
            return {"$": "fn", "owner": "receiver", "id": value.handle, "name": value.__name__}
        with self._lock:
            handle = self._exported.get(id(value))
            if handle is None or self._handles.get(handle) is not value:
                handle = next(self._ids)
                self._handles[handle], self._exported[id(value)] = value, handle
        return {"$": "fn", "owner": "sender", "id": handle, "name": str(getattr(value, "__name__", "callable"))[:80]}

    def resolve(self, data: dict[str, Any]) -> Any:
        if data.get("owner") == "receiver":
            with self._lock:
                found = self._handles.get(int(data["id"]))
            if found is None:
                raise NotPlainData("a callable this side never handed out")
            return found
        return Remote(self, int(data["id"]), str(data.get("name", "callable"))[:80])

    # calls out
    def call(self, target: dict[str, Any], args: tuple = (), kwargs: dict | None = None) -> Any:
        ident = next(self._ids)
        slot: list = []
        done = threading.Event()
        with self._lock:
            self._waiting[ident] = [slot, done]
        try:
            self.send({"call": ident, "target": target, "args": encode(list(args), self),
                       "kwargs": encode(dict(kwargs or {}), self)})
            while not done.wait(0.5):
                if self.gone.is_set():
                    raise PeerGone("the other side ended before it answered")
        finally:
            with self._lock:
                self._waiting.pop(ident, None)
        if not slot:
            raise PeerGone("the other side ended before it answered")
        reply = slot[0]
        if "raised" in reply:
            raise rebuild_error(reply["raised"])
        return decode(reply.get("value"), self)

    def send(self, message: dict[str, Any]) -> None:
        try:
            with self._send_lock:
                send_message(self.sock, message)
        except OSError:
            self.gone.set()
            raise PeerGone("the other side is gone") from None

    # calls in
    def _read(self) -> None:
        try:
            while True:
                message = receive_message(self.sock)
                if message is None:
                    break
                if "reply" in message:
                    with self._lock:
                        waiting = self._waiting.get(message["reply"])
                    if waiting is not None:
                        waiting[0].append(message)
                        waiting[1].set()
                elif "call" in message:
                    threading.Thread(target=self._serve, args=(message,), name="wire-call", daemon=True).start()
                elif self._on_message is not None:
                    self._on_message(message)
        finally:
            self.gone.set()
            with self._lock:
                for _, done in self._waiting.values():
                    done.set()

    def _serve(self, message: dict[str, Any]) -> None:
        opened: list = []
        try:
            target = message.get("target", {})
            if "handle" in target:
                function = self.resolve({"owner": "receiver", "id": target["handle"]})
            elif self._resolve_name is not None:
                function = self._resolve_name(str(target.get("name", "")))
            else:
                raise NotPlainData("a call by name, which this side does not take")
            args = decode(message.get("args", []), self, opened)
            kwargs = decode(message.get("kwargs", {"$": "dict", "v": []}), self, opened)
            reply = {"reply": message["call"], "value": encode(function(*args, **{str(k): v for k, v in kwargs.items()}), self)}
        except BaseException as error:  # anything the function raises is the caller's answer
            reply = {"reply": message["call"], "raised": describe_error(error)}
        finally:
            for db in opened:
                db.close()
        try:
            self.send(reply)
        except (PeerGone, NotPlainData) as error:
            if isinstance(error, NotPlainData):
                self.send({"reply": message["call"], "raised": describe_error(error)})

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

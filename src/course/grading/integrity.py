"""What the checker verifies so that learner code cannot decide its own points.

Two kinds of guard, both run inside the checker process:

* `Snapshot`: taken after the course's helpers are loaded and before learner code runs; compared
  after the check. Any helper rebound or given new code (in the cell's namespace, in a loaded
  module, in builtins), a trace, profile or exception hook installed, or a module swapped in
  `sys.modules` is "tampering detected".
* `honest`: values a learner function hands back must be plain data (exact built-in types,
  dataclasses whose comparison is the generated one, runtime types). An object that "equals
  everything" is refused before any check can compare it.
"""

from __future__ import annotations

import builtins
import dataclasses
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any

PLAIN = (str, int, float, bool, bytes, type(None))
CONTAINERS = (list, tuple, set, frozenset)
# Dunders that decide how a value compares, converts or answers attribute lookups. A class that
# defines one itself (other than what @dataclass generates) could fake any check.
DISHONEST = (
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__",
    "__getattribute__", "__getattr__", "__iter__", "__contains__", "__index__", "__int__", "__float__",
    "__instancecheck__", "__subclasscheck__", "__class__",
)
GENERATED = ("__eq__", "__hash__", "__lt__", "__le__", "__gt__", "__ge__")
TRUSTED_TYPE_MODULES = ("sovereign_agent", "reference_organizations", "course", "sqlite3", "pathlib", "datetime", "uuid")
HOOKS = ("gettrace", "getprofile")
HOOK_ATTRIBUTES = ("excepthook", "displayhook", "breakpointhook", "unraisablehook")


class Dishonest(Exception):
    """A learner value that is not plain data."""


@dataclass
class Snapshot:
    """Identities of everything the checks rely on, at one moment."""

    builtins: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, int] = field(default_factory=dict)
    modules: dict[str, int] = field(default_factory=dict)
    callables: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def take(cls) -> Snapshot:
        snap = cls()
        snap.builtins = dict(vars(builtins))
        snap.hooks = _hooks()
        for name, module in list(sys.modules.items()):
            if module is None:
                continue
            snap.modules[name] = id(module)
            for attr, value in list(getattr(module, "__dict__", {}).items()):
                _record(snap.callables, (name, attr), value)
                if isinstance(value, type) and value.__module__ == name:
                    for member, inner in list(vars(value).items()):
                        _record(snap.callables, (name, f"{attr}.{member}"), inner)
        return snap

    def changes(self) -> list[str]:
        """What differs now, in words (empty when nothing the checks rely on changed).

        Builtins and hooks are compared and put back first, with nothing but `is` and dict
        methods, so the rest of the comparison (and the verdict) runs on the real ones.
        """
        current = vars(builtins)
        found = [f"builtin {name!r} replaced" for name, value in self.builtins.items()
                 if name not in current or current[name] is not value]
        current.update(self.builtins)
        hooks = _hooks()
        sys.settrace(None)
        sys.setprofile(None)
        threading.settrace(None)
        threading.setprofile(None)
        found += [f"{name} changed" for name, identity in self.hooks.items() if hooks.get(name) != identity]
        for name, identity in self.modules.items():
            if name in sys.modules and id(sys.modules[name]) != identity:
                found.append(f"module {name!r} swapped")
        for (module, attr), (identity, code) in self.callables.items():
            value = _lookup(module, attr)
            if value is _MISSING:
                continue  # deleted caches or lazily dropped names: nothing the checks call
            if id(value) != identity or id(getattr(value, "__code__", None)) != code:
                found.append(f"{module}.{attr} replaced")
        return found


_MISSING = object()


def _record(table: dict, key: tuple[str, str], value: Any) -> None:
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type, types.MethodType)):
        table[key] = (id(value), id(getattr(value, "__code__", None)))


def _lookup(module: str, attr: str) -> Any:
    target: Any = sys.modules.get(module, _MISSING)
    for part in attr.split("."):
        if target is _MISSING:
            return _MISSING
        holder = getattr(target, "__dict__", None)
        target = holder.get(part, _MISSING) if holder is not None else _MISSING
    return target


def _hooks() -> dict[str, int]:
    found = {name: id(getattr(sys, name)()) for name in HOOKS}
    found.update({name: id(getattr(sys, name)) for name in HOOK_ATTRIBUTES})
    found["threading trace"] = id(getattr(threading, "_trace_hook", None))
    found["threading profile"] = id(getattr(threading, "_profile_hook", None))
    return found


def honest(value: Any, depth: int = 0) -> None:
    """Raise Dishonest unless `value` is plain data all the way down (bounded depth)."""
    kind = type(value)
    if kind in PLAIN:
        return
    if depth > 20:
        raise Dishonest("a value nested more than 20 levels deep")
    if kind in CONTAINERS:
        for item in value:
            honest(item, depth + 1)
        return
    if kind is dict:
        for key, item in value.items():
            honest(key, depth + 1)
            honest(item, depth + 1)
        return
    if dataclasses.is_dataclass(kind):
        check_class(kind)
        state = object.__getattribute__(value, "__dict__") if hasattr(kind, "__dict__") else {}
        for item in dataclasses.fields(kind):
            honest(state.get(item.name), depth + 1)
        return
    if (kind.__module__ or "").split(".")[0] in TRUSTED_TYPE_MODULES and not _learner_class(kind):
        return
    raise Dishonest(f"an object of type {kind.__qualname__!r}")


def check_class(cls: type) -> None:
    """Raise Dishonest if a learner class can fake comparisons or attribute lookups."""
    if type(cls) not in (type,):
        raise Dishonest(f"class {cls.__qualname__} has a custom metaclass")
    for base in cls.__mro__[1:]:
        if base in PLAIN or base in CONTAINERS or base is dict:
            raise Dishonest(f"class {cls.__qualname__} subclasses {base.__name__}")
    own = vars(cls)
    for name in DISHONEST:
        if name in own and own[name] is not None and not _generated(cls, name):
            raise Dishonest(f"class {cls.__qualname__} defines {name} itself")


def _learner_class(cls: type) -> bool:
    return cls.__module__.startswith("course_learner") or cls.__module__ == "__main__"


def _generated(cls: type, name: str) -> bool:
    """True if `cls.name` is exactly what @dataclass writes for these fields."""
    if name not in GENERATED or not dataclasses.is_dataclass(cls):
        return False
    params = cls.__dataclass_params__
    probe = dataclasses.make_dataclass(
        cls.__name__, [(f.name, Any) for f in dataclasses.fields(cls)],
        eq=params.eq, order=params.order, frozen=params.frozen, unsafe_hash=params.unsafe_hash,
    )
    mine, theirs = vars(cls)[name], vars(probe).get(name)
    mine_code, their_code = getattr(mine, "__code__", None), getattr(theirs, "__code__", None)
    if mine_code is None or their_code is None:
        return False
    return (mine_code.co_code, mine_code.co_names, mine_code.co_consts) == (
        their_code.co_code, their_code.co_names, their_code.co_consts)

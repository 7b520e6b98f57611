"""What the checker verifies so that learner code cannot decide its own points.

Two kinds of guard, both run inside the checker process:

* `snapshot`: taken after the course's helpers are loaded and before learner code runs; compared
  after the check. Any helper rebound or given new code, defaults or closure contents (in a loaded
  module, in builtins), any value of the course's own modules rebound (a constant such as the
  list of dunders `check_class` refuses included), a trace, profile or exception hook installed,
  or a module swapped in `sys.modules` is "tampering detected".
* `frozen`: the same for the functions the check itself calls (`expect`, the guards around the
  learner's functions): learner code can reach them, and a closure cell is writable from Python.
* `honest`: values a learner function hands back must be plain data (exact built-in types,
  dataclasses whose comparison is the generated one, runtime types). An object that "equals
  everything" is refused before any check can compare it.
"""

from __future__ import annotations

import builtins
import dataclasses
import operator
import sys
import threading
import types
from typing import Any, Callable

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
OWN_MODULES = ("sovereign_agent", "reference_organizations", "course")
TRUSTED_TYPE_MODULES = (*OWN_MODULES, "sqlite3", "pathlib", "datetime", "uuid")
HOOK_ATTRIBUTES = ("excepthook", "displayhook", "breakpointhook", "unraisablehook")


class Dishonest(Exception):
    """A learner value that is not plain data."""


def snapshot() -> Callable[[], list[str]]:
    """Record the identities of everything the checks rely on; return `changes`.

    `changes()` says, in words, what differs since (empty when nothing did). It is a closure over
    what it needs, bound now: learner code that rebinds a name in this module (or `sys.modules`,
    or a builtin) changes nothing about how the comparison runs. Builtins and hooks are compared
    and put back first, so the rest of the check's verdict runs on the real ones.

    It runs twice per check over some 20,000 names, so most of the comparison is `_replaced`'s
    pass at C speed over namespaces that did not change.
    """
    real_builtins, real_modules, real_sys, real_threading = vars(builtins), sys.modules, sys, threading
    kept_builtins, hooks, read_hooks = dict(real_builtins), _hooks(), _hooks
    modules: dict[str, int] = {}
    # (module, class path, deep, values, entries): entries are the names of `values`, or (own) fingerprints
    groups: list[tuple[str, tuple[str, ...], bool, tuple, tuple | list]] = []
    for name, module in list(real_modules.items()):
        if module is None:
            continue
        modules[name] = id(module)
        own = name.split(".")[0] in OWN_MODULES
        names = getattr(module, "__dict__", {})
        groups.append(_group(name, (), names, own))
        for attr, value in list(names.items()):
            if isinstance(value, type) and value.__module__ == name:
                groups.append(_group(name, (attr,), vars(value), own))
    # Every name `changes` uses is one of these locals: a global could be rebound by learner code.
    identity, attribute, kind = id, getattr, type
    settrace, setprofile, hook_names = sys.settrace, sys.setprofile, HOOK_ATTRIBUTES
    builtin_names, module_type = frozenset(kept_builtins), types.ModuleType
    replaced = _replaced
    shadows = {name: builtin_names & module.__dict__.keys() for name, module in list(real_modules.items())
               if module is not None and kind(attribute(module, "__dict__", None)) is dict}

    def changes() -> list[str]:
        found = [f"builtin {name!r} replaced" for name, value in kept_builtins.items()
                 if name not in real_builtins or real_builtins[name] is not value]
        real_builtins.update(kept_builtins)
        now = read_hooks(real_sys, real_threading, hook_names, identity, attribute)
        found += [f"{name} changed" for name, before in hooks.items() if now.get(name) != before]
        if now["gettrace"] != hooks["gettrace"]:
            settrace(None)
        if now["getprofile"] != hooks["getprofile"]:
            setprofile(None)
        for name, before in shadows.items():
            names = attribute(real_modules.get(name), "__dict__", None)
            if kind(names) is dict:  # a submodule imported since (encodings.ascii) is not a shadow
                found += [f"{name}.{shadow} shadows the builtin" for shadow in (builtin_names & names.keys()) - before
                          if kind(names[shadow]) is not module_type]
        found += [f"module {name!r} swapped" for name, before in modules.items()
                  if name in real_modules and identity(real_modules[name]) != before]
        return found + replaced(groups, real_modules)

    return changes


def _group(module: str, path: tuple[str, ...], names: Any, own: bool) -> tuple:
    """One namespace's record: its values as they are now, and what `changes` compares by name.

    The course's own: a fingerprint of every value (but the contents of a private container, a
    cache that grows as the checks run). Any other: the values themselves (a function or a
    class still the same object is still the same: its code cannot be replaced while a check runs)."""
    if not own:
        return module, path, False, tuple(names.values()), tuple(names)
    entries = []
    for attr, value in tuple(names.items()):
        deep = not (attr.startswith("_") and isinstance(value, (list, dict, set)))
        entries.append((attr, _fingerprint(value, deep), deep))
    return module, path, True, (), entries


_MISSING = object()
RECORDED = (types.FunctionType, types.BuiltinFunctionType, type, types.MethodType)


def _fingerprint(value: Any, deep: bool, identity=id, attribute=getattr, kind=type, empty=ValueError,
                 shallow=(list, dict)) -> tuple:
    """What decides how `value` behaves: its identity and code; with `deep`, also a function's
    defaults and closure contents, and a list's or dict's items. Builtins are bound as defaults
    (setting a function's defaults is refused while a check runs)."""
    code = attribute(value, "__code__", None)
    if not deep:
        return identity(value), identity(code)
    cells = []
    for cell in attribute(value, "__closure__", None) or ():
        try:
            cells.append(identity(cell.cell_contents))
        except empty:
            cells.append(None)
    keywords = attribute(value, "__kwdefaults__", None)
    items = [(k, identity(v)) for k, v in keywords.items()] if kind(keywords) is dict else []
    if kind(value) is shallow[0]:
        items = [identity(v) for v in value]
    elif kind(value) is shallow[1]:
        items = [(k, identity(v)) for k, v in value.items()]
    return identity(value), identity(code), identity(attribute(value, "__defaults__", None)), cells, items


def frozen(functions: list[Any], fingerprint=_fingerprint) -> Callable[[], list[str]]:
    """Record how each of `functions` runs (code, defaults, closure); return what changed since."""
    pairs = [(getattr(function, "__name__", "?"), function, fingerprint(function, True)) for function in functions]

    def changed() -> list[str]:
        return [f"the check's `{name}` was rewritten" for name, function, was in pairs if fingerprint(function, True) != was]

    return changed


def _replaced(groups: list[tuple], modules: dict, fingerprint=_fingerprint, attribute=getattr, kind=type,
              holders=(dict, types.MappingProxyType), same=operator.is_, each=map, every=all, values_of=tuple,
              is_a=isinstance, recorded=RECORDED, missing=_MISSING, pairs=zip) -> list[str]:
    """What `changes` says of the recorded namespaces: every name rebound, or (the course's own)
    given new code, defaults or contents. A namespace whose values are all still the same objects,
    in the same order, is passed over at C speed. It runs after learner code: what it uses are
    its defaults, bound when this module loaded."""
    found = []
    for module, path, deep, values, entries in groups:
        value = modules.get(module, missing)
        for part in path:
            holder = attribute(value, "__dict__", None)
            value = holder.get(part, missing) if kind(holder) in holders else missing
        names = attribute(value, "__dict__", None)
        if kind(names) not in holders:
            continue  # a module or class dropped since: nothing the checks call
        if not deep:
            current = values_of(names.values())
            if current.__len__() == values.__len__() and every(each(same, current, values)):
                continue
            found += [f"{module}.{'.'.join((*path, attr))} replaced" for attr, value in pairs(entries, values)
                      if is_a(value, recorded) and names.get(attr, value) is not value]
            continue
        for attr, before, deep_entry in entries:
            value = names.get(attr, missing)
            if value is not missing and fingerprint(value, deep_entry) != before:
                found.append(f"{module}.{'.'.join((*path, attr))} replaced")
    return found


def _hooks(real_sys=sys, real_threading=threading, names=HOOK_ATTRIBUTES, identity=id, attribute=getattr) -> dict[str, int]:
    """Identities of the interpreter's hooks (`changes` passes what it kept, never a global)."""
    return {
        "gettrace": identity(real_sys.gettrace()), "getprofile": identity(real_sys.getprofile()),
        **{name: identity(attribute(real_sys, name)) for name in names},
        "threading trace": identity(attribute(real_threading, "_trace_hook", None)),
        "threading profile": identity(attribute(real_threading, "_profile_hook", None)),
    }


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

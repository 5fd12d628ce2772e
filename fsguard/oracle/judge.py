"""What one layer of handling does with an error of one class."""

from __future__ import annotations

import builtins
import os
import sys
import types
from typing import Any

from . import layers
from .delegation import raises_it
from .names import MISSING, RECREATE, Instance, Unresolved, is_contextmanager, manager, resolve
from .values import (
    ENDS,
    PASSES,
    Converts,
    Decides,
    Delegates,
    Exits,
    Fate,
    Layer,
    NewClass,
    Outcome,
    Passes,
    Same,
    Unknown,
    With,
)


def layer(cls: type[BaseException], found: Layer, frame: Any) -> Outcome:
    """What ``found`` (a layer around ``frame``'s instruction) does with an error of class ``cls``."""
    if isinstance(found, Unknown):
        return Decides(found.why)
    if isinstance(found, With):
        if found.reason:
            return Decides(found.reason, found.label)
        return with_block(cls, manager(found.expression, frame), found.label)
    for clause in found.clauses:
        if clause.expression is None:
            return handled(cls, clause.label, clause.fate, frame)
        caught = catches(cls, resolve(clause.expression, frame))
        if caught is None:
            return Decides(f"cannot resolve {clause.label}", clause.label)
        if caught:
            return handled(cls, clause.label, clause.fate, frame)
    return PASSES


def handled(cls: type[BaseException], label: str, fate: Fate, frame: Any) -> Outcome:
    """Whether a handler of ``cls`` passes the error on: only when every path raises."""
    if fate.swallows:
        return Decides(f"{label} may swallow it", label)
    classes: list[type[BaseException]] = []
    ended = False
    for raised in fate.raised:
        if isinstance(raised, Same):
            new: Any = cls
        elif isinstance(raised, Exits):
            value = resolve(raised.expression, frame)
            if value is os._exit or value is getattr(os, "abort", None):
                ended = True
                continue
            if not (value is sys.exit or type(value).__name__ == "Quitter"):
                return Decides(f"{label} calls {raised.label}, which fsguard cannot resolve", label)
            new = SystemExit
        elif isinstance(raised, NewClass):
            new = resolve(raised.expression, frame)
            if not (isinstance(new, type) and issubclass(new, BaseException)):
                return Decides(f"{label} raises {raised.label}, which fsguard cannot resolve", label)
        elif isinstance(raised, Delegates):
            if not raises_it(raised.callee, frame):
                return Decides(f"{label} hands it to {raised.label}", label)
            new = cls
        else:
            return Decides(raised.why, label)
        if new not in classes:
            classes.append(new)
    if not classes:
        return ENDS if ended else Decides(f"{label} may swallow it", label)
    return PASSES if classes == [cls] else Converts(tuple(classes))


def catches(cls: type[BaseException], value: Any) -> bool | None:
    """Whether an ``except``/``suppress`` class (or tuple) catches ``cls``; None: not classes."""
    classes = value if isinstance(value, tuple) else (value,)
    while classes:
        head, classes = classes[0], classes[1:]
        if isinstance(head, tuple):
            classes = head + classes
        elif not (isinstance(head, type) and issubclass(head, BaseException)):
            return None
        elif issubclass(cls, head):
            return True  # the interpreter does not look past a match either
    return False


# --- with blocks ---------------------------------------------------------------------------------------------


def with_block(cls: type[BaseException], found: Any, label: str) -> Outcome:
    """What a ``with`` block's manager does with an error of class ``cls``."""
    if isinstance(found, Unresolved):
        return Decides(found.why, label)
    if isinstance(found, Instance):
        return _instance(cls, found.value, label)
    callee, args, kwargs = found.callee, found.args, found.kwargs
    contextlib = sys.modules.get("contextlib")
    if callee is RECREATE:  # ``ContextDecorator.inner``: the decorator's manager, made again
        return _recreated(cls, args[0] if args else None, label)
    if contextlib is not None and callee is contextlib.suppress:
        return _expecting(cls, args if not kwargs else None, label)
    if _expects_first(callee):
        return _expecting(cls, args[:1] if args else None, label)
    if is_contextmanager(callee):
        return generator(cls, callee.__wrapped__, args, kwargs, label)
    if isinstance(callee, type):
        if type(callee).__call__ is not type.__call__ or _own_new(callee):
            return Decides("a context manager class that makes its own instances", label)
        return exit_method(cls, callee, label)
    if callee in _factories():
        return PASSES
    return Decides("a context manager fsguard cannot read", label)


def _own_new(kind: type) -> bool:
    """Whether a Python class on ``kind``'s MRO defines ``__new__`` (it may make anything)."""
    return any(isinstance(vars(k).get("__new__"), (staticmethod, types.FunctionType)) for k in kind.__mro__[:-1])


def _expecting(cls: type[BaseException], expected: Any, label: str) -> Outcome:
    if expected is None or any(a is MISSING for a in expected):
        return Decides("arguments fsguard cannot resolve", label)
    caught = catches(cls, tuple(expected))
    if caught is None:
        return Decides("arguments fsguard cannot resolve", label)
    return Decides(f"{label} suppresses it", label) if caught else PASSES


def _instance(cls: type[BaseException], value: Any, label: str) -> Outcome:
    """``with value:``, an object made before."""
    contextlib = sys.modules.get("contextlib")
    unittest = sys.modules.get("unittest.case")
    tenacity = sys.modules.get("tenacity")
    assertion = getattr(unittest, "_AssertRaisesContext", None)
    if contextlib is not None and type(value) is contextlib.suppress:
        expected: Any = tuple(getattr(value, "_exceptions", ()))
        return _expecting(cls, expected, _saying(label, expected))
    if assertion is not None and isinstance(value, assertion):
        expected = getattr(value, "expected", None)
        expected = expected if isinstance(expected, tuple) else (expected,)
        return _expecting(cls, expected, _saying(label, expected))
    if tenacity is not None and isinstance(value, getattr(tenacity, "AttemptManager", ())):
        return Decides("tenacity's attempt swallows it and retries", label)
    if contextlib is not None and type(value) is contextlib._GeneratorContextManager:
        suspended = getattr(getattr(value, "gen", None), "gi_frame", None)
        if suspended is None:
            return Decides("a @contextmanager fsguard cannot read", label)
        return inside(cls, layers.at_frame(suspended), suspended, label)  # at the yield it is suspended at
    return exit_method(cls, type(value), label)


def _saying(label: str, expected: tuple[Any, ...]) -> str:
    """``with cm`` (expecting FileNotFoundError)``: what a manager made before expects."""
    if "(" in label:
        return label
    return label + " (expecting " + ", ".join(getattr(c, "__name__", "?") for c in expected) + ")"


def _recreated(cls: type[BaseException], owner: Any, label: str) -> Outcome:
    """``with self._recreate_cm():`` in ``ContextDecorator.inner``: ``owner`` is the decorator's manager."""
    contextlib = sys.modules.get("contextlib")
    if contextlib is None or owner is None:
        return Decides("a decorator's context manager fsguard cannot read", label)
    recreate = getattr(type(owner), "_recreate_cm", None)
    if (
        type(owner) is contextlib._GeneratorContextManager
        and recreate is contextlib._GeneratorContextManager._recreate_cm
    ):
        func, args, kwargs = (getattr(owner, name, None) for name in ("func", "args", "kwds"))
        if func is None or not isinstance(args, tuple) or not isinstance(kwargs, dict):
            return Decides("a decorator's context manager fsguard cannot read", label)
        return generator(cls, func, args, kwargs, label)
    if recreate is contextlib.ContextDecorator._recreate_cm:
        return exit_method(cls, type(owner), label)  # the decorator's own instance
    return Decides("a decorator that makes its context manager its own way", label)


def generator(cls: type[BaseException], func: Any, args: Any, kwargs: dict[str, Any], label: str) -> Outcome:
    """Whether a ``@contextmanager`` generator passes an error thrown in at its ``yield``. It is called with ``args``.
    The error passes when it passes at every ``yield``, read yield by yield, in the generator's own scope."""
    code = getattr(func, "__code__", None)
    if code is None or not code.co_flags & 0x20:  # CO_GENERATOR
        return Decides("a @contextmanager fsguard cannot read", label)
    points = layers.yield_points(code, func.__globals__)
    if not points:
        return Decides("a @contextmanager whose yields fsguard cannot read", label)
    scope = types.SimpleNamespace(
        f_locals=_bound(code, func, args, kwargs), f_globals=func.__globals__, f_builtins=vars(builtins), f_code=code
    )
    outcomes = [inside(cls, layers.at(code, offset, line, func.__globals__), scope, label) for offset, line in points]
    if all(isinstance(o, Passes) for o in outcomes):
        return PASSES
    decides = [o for o in outcomes if isinstance(o, Decides)]
    if decides or len(outcomes) > 1:
        return decides[0] if decides else Decides("a @contextmanager whose yields differ", label)
    return outcomes[0]


def _bound(code: Any, func: Any, args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The generator's names: its arguments as called (those fsguard could read), its closure."""
    bound: dict[str, Any] = {}
    if args is not None:
        bound.update(zip(code.co_varnames[: code.co_argcount], args, strict=False))
        if code.co_flags & 4:  # *args
            bound[code.co_varnames[code.co_argcount + code.co_kwonlyargcount]] = tuple(args[code.co_argcount :])
        named = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        bound.update((k, v) for k, v in kwargs.items() if k in named)
    for name, cell in zip(code.co_freevars, getattr(func, "__closure__", None) or (), strict=False):
        try:
            bound[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return bound


def inside(cls: type[BaseException], found: list[Layer], scope: Any, label: str) -> Outcome:
    """The layers around a generator's ``yield``, as the ``with`` block around it sees them."""
    for one in found:
        outcome = layer(cls, one, scope)
        if isinstance(outcome, Passes):
            continue
        if isinstance(outcome, Decides):
            return Decides(outcome.reason, label, outcome.handler)
        return outcome
    return PASSES


def exit_method(cls: type[BaseException], kind: type, label: str) -> Outcome:
    """Whether a manager of class ``kind`` passes the error on.

    It does when its ``__exit__`` returns only None or False, or is a standard C type's that never suppresses."""
    method = None
    for klass in getattr(kind, "__mro__", ()):
        if "__exit__" in vars(klass):
            method = vars(klass)["__exit__"]
            break
    if isinstance(method, types.FunctionType):
        if returns_false(method.__code__):
            return PASSES
        return Decides(f"{kind.__qualname__}.__exit__ may return true (suppress the error)", label)
    owner = getattr(method, "__objclass__", None)
    if getattr(owner, "__module__", None) in _QUIET_C:
        return PASSES
    threading = sys.modules.get("threading")
    if threading is not None and kind is getattr(threading, "Condition", None):
        return PASSES  # its __exit__ returns its lock's
    return Decides(f"a context manager fsguard cannot read ({kind.__qualname__})", label)


# C types whose ``__exit__`` returns None: files, locks, ``os.scandir``'s iterator, pollers, ``memoryview``.
_QUIET_C = frozenset({"_io", "_thread", "_multiprocessing", "posix", "select", "builtins"})


def _factories() -> set[Any]:
    """Standard functions that return a context manager that never suppresses."""
    import io

    found: set[Any] = {open, io.open, os.scandir, os.fdopen}
    threading = sys.modules.get("threading")
    if threading is not None:
        found.update(getattr(threading, name, None) for name in ("Lock", "RLock"))
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        found.update(getattr(tempfile, name, None) for name in ("TemporaryFile", "NamedTemporaryFile"))
    found.discard(None)
    return found


def returns_false(code: Any) -> bool:
    """Whether every ``return`` of ``code`` returns the constant None or False.

    Read straight: a return that is a jump target may be reached with another value on the stack."""
    import dis

    previous = None
    for ins in dis.get_instructions(code):
        if ins.opname in ("YIELD_VALUE", "RETURN_GENERATOR"):
            return False
        if ins.opname == "RETURN_CONST" and ins.argval not in (None, False):
            return False
        if ins.opname == "RETURN_VALUE":
            constant = previous is not None and previous.opname in ("LOAD_CONST", "LOAD_COMMON_CONSTANT")
            if not (constant and previous is not None and previous.argval in (None, False)) or ins.is_jump_target:
                return False
        previous = ins
    return True


def _expects_first(callee: Any) -> bool:
    """``assertRaises``/``assertRaisesRegex`` (unittest) and ``pytest.raises``: they expect their first argument."""
    unittest = sys.modules.get("unittest.case")
    if unittest is not None and callee in (unittest.TestCase.assertRaises, unittest.TestCase.assertRaisesRegex):
        return True
    module = str(getattr(callee, "__module__", ""))
    return getattr(callee, "__name__", None) == "raises" and module.startswith("_pytest")

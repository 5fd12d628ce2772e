"""Names and expressions read in a frame, without running the program's code."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

MISSING: Any = object()  # a value fsguard cannot know without running the program's code

_LOADS = {
    "LOAD_GLOBAL": "gb",
    "LOAD_NAME": "lgb",
    "LOAD_DEREF": "l",
    "LOAD_CLASSDEREF": "lgb",
    "LOAD_FROM_DICT_OR_DEREF": "l",
    "LOAD_FROM_DICT_OR_GLOBALS": "lgb",
}
SKIP = frozenset({"PUSH_NULL", "PRECALL", "NOP", "CACHE", "EXTENDED_ARG", "KW_NAMES"})


def loads(op: str) -> bool:
    """Whether ``op`` loads a name."""
    return op in _LOADS or op.startswith("LOAD_FAST")


def lookup(frame: Any, name: str, scopes: str) -> Any:
    """``name`` in the frame's locals (l), globals (g) or builtins (b), in that order."""
    for scope in scopes:
        space = frame.f_locals if scope == "l" else frame.f_globals if scope == "g" else frame.f_builtins
        if name in space:
            return space[name]
    return MISSING


def attribute(owner: Any, name: str) -> Any:
    """``owner.name`` with no property or ``__getattr__`` run (``inspect.getattr_static``)."""
    import types

    if owner is MISSING:
        return MISSING
    if isinstance(owner, (types.ModuleType, type)):
        return getattr(owner, name, MISSING)
    unittest = sys.modules.get("unittest.case")
    if unittest is not None and isinstance(owner, unittest.TestCase):
        return getattr(type(owner), name, MISSING)
    import inspect

    value = inspect.getattr_static(owner, name, MISSING)
    if isinstance(value, (types.FunctionType, property, staticmethod, classmethod)):
        return MISSING  # a descriptor: what it gives is the program's business
    return value


def resolve(expression: Any, frame: Any) -> Any:
    """The value of a clause's class expression (instructions or an ast node) in ``frame``."""
    if isinstance(expression, list):
        return chain(expression, frame)
    return evaluate(expression, frame)


def chain(instructions: list[Any], frame: Any) -> Any:
    """A short run of loads (names, attributes, constants, tuples) evaluated in ``frame``."""
    stack: list[Any] = []
    for ins in instructions:
        op = ins.opname
        if op in SKIP:
            continue
        if loads(op):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            for name in names:
                stack.append(lookup(frame, name, _LOADS.get(op, "l")))
        elif op in ("LOAD_ATTR", "LOAD_METHOD") and stack:
            stack.append(attribute(stack.pop(), ins.argval))
        elif op == "LOAD_CONST":
            stack.append(ins.argval)
        elif op == "BUILD_TUPLE" and len(stack) >= ins.arg:
            items = tuple(stack[len(stack) - ins.arg :]) if ins.arg else ()
            del stack[len(stack) - ins.arg :]
            stack.append(items)
        else:
            return MISSING
    return stack[-1] if len(stack) == 1 else MISSING


def evaluate(node: Any, frame: Any) -> Any:
    """An ast name, attribute, constant or tuple evaluated in ``frame`` (3.10)."""
    import ast

    if isinstance(node, ast.Name):
        return lookup(frame, node.id, "lgb")
    if isinstance(node, ast.Attribute):
        return attribute(evaluate(node.value, frame), node.attr)
    if isinstance(node, ast.Tuple):
        return tuple(evaluate(e, frame) for e in node.elts)
    if isinstance(node, ast.Constant):
        return node.value
    return MISSING


# --- a with statement's manager ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Called:
    """``with callee(*args, **kwargs):`` (``args`` None: not all read)."""

    callee: Any
    args: tuple[Any, ...] | None
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Instance:
    """``with value:``: an object already made."""

    value: Any


@dataclass(frozen=True)
class Unresolved:
    """A manager fsguard cannot resolve."""

    why: str


Manager = Called | Instance | Unresolved


def manager(expression: Any, frame: Any) -> Manager:
    """A ``with`` statement's context expression (instructions, or an ast node on 3.10) read in ``frame``."""
    if expression is None:
        return Unresolved("a with statement fsguard cannot read")
    if not isinstance(expression, list):
        return _ast_manager(expression, frame)
    run = [ins for ins in expression if ins.opname not in SKIP or ins.opname == "KW_NAMES"]
    keywords: tuple[str, ...] = ()
    if run and run[-1].opname == "CALL_KW" and len(run) > 1 and isinstance(run[-2].argval, tuple):
        keywords, run = run[-2].argval, [*run[:-2], run[-1]]
    named = [ins for ins in run if ins.opname == "KW_NAMES"]
    if named:
        keywords = tuple(named[-1].argval) if isinstance(named[-1].argval, tuple) else ()
        run = [ins for ins in run if ins.opname != "KW_NAMES"]
        if not keywords:
            return Unresolved("a context expression fsguard cannot read")
    head = attributes(run, 0)
    if head == len(run):
        value = chain(run, frame)
        return Unresolved("a context manager fsguard cannot resolve") if value is MISSING else Instance(value)
    if not run[-1].opname.startswith("CALL") or run[-1].opname == "CALL_FUNCTION_EX" or head == 0:
        return Unresolved("a context expression fsguard cannot read")
    owner = chain(run[: head - 1], frame) if head > 1 else MISSING
    found = method(owner, run[head - 1].argval) if head > 1 else None
    bound: list[Any] = []
    if found is None:
        callee = chain(run[:head], frame)
    else:
        callee, bound = found
    if callee is MISSING:
        return Unresolved("a context manager fsguard cannot resolve")
    args: list[Any] | None = list(bound)
    n = head
    while args is not None and n < len(run) - 1:
        end = attributes(run, n)
        if end == n:
            args = None
        else:
            args.append(chain(run[n:end], frame))
            n = end
    if args is None:
        return Called(callee, None, {})
    if keywords:
        if len(keywords) > len(args) - len(bound):
            return Called(callee, None, {})
        split = len(args) - len(keywords)
        return Called(callee, tuple(args[:split]), dict(zip(keywords, args[split:], strict=True)))
    return Called(callee, tuple(args), {})


def attributes(run: list[Any], n: int) -> int:
    """The end of the attribute chain (``a.b.c``, or a constant) starting at ``run[n]``."""
    if n >= len(run) or not (loads(run[n].opname) or run[n].opname == "LOAD_CONST"):
        return n
    m = n + 1
    while m < len(run) and run[m].opname in ("LOAD_ATTR", "LOAD_METHOD") and run[n].opname != "LOAD_CONST":
        m += 1
    return m


def method(owner: Any, name: str) -> tuple[Any, list[Any]] | None:
    """The function and instance behind a manager-making method; None for anything else. The method is a
    ``@contextmanager`` method or contextlib's ``_recreate_cm``; the result is (the function, [the instance])."""
    import inspect
    import types

    if owner is MISSING or isinstance(owner, (types.ModuleType, type)):
        return None
    function = inspect.getattr_static(owner, name, MISSING)
    if isinstance(function, types.FunctionType) and is_contextmanager(function):
        return function, [owner]
    contextlib = sys.modules.get("contextlib")
    if name == "_recreate_cm" and contextlib is not None and isinstance(owner, contextlib.ContextDecorator):
        return RECREATE, [owner]  # ``ContextDecorator.inner``'s ``with self._recreate_cm():``
    return None


def RECREATE(owner: Any) -> Any:
    """Never called: stands for ``owner._recreate_cm()``."""
    raise NotImplementedError


def is_contextmanager(callee: Any) -> bool:
    """Whether ``callee`` is a ``@contextlib.contextmanager`` helper."""
    helper = getattr(callee, "__code__", None)
    return helper is not None and helper.co_filename.endswith("contextlib.py") and hasattr(callee, "__wrapped__")


def _ast_manager(node: Any, frame: Any) -> Manager:
    import ast

    if isinstance(node, ast.Call):
        found = (
            method(evaluate(node.func.value, frame), node.func.attr) if isinstance(node.func, ast.Attribute) else None
        )
        callee, bound = (evaluate(node.func, frame), []) if found is None else found
        if callee is MISSING:
            return Unresolved("a context manager fsguard cannot resolve")
        simple = (ast.Name, ast.Attribute, ast.Constant, ast.Tuple)
        if not all(isinstance(a, simple) for a in node.args) or any(
            k.arg is None or not isinstance(k.value, simple) for k in node.keywords
        ):
            return Called(callee, None, {})
        args = tuple([*bound, *(evaluate(a, frame) for a in node.args)])
        return Called(callee, args, {str(k.arg): evaluate(k.value, frame) for k in node.keywords})
    value = evaluate(node, frame)
    return Unresolved("a context manager fsguard cannot resolve") if value is MISSING else Instance(value)

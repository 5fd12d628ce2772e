"""Whether a function a handler hands its error to raises it on every path. The handler calls a function of the program
(``self._handle_exception(e)``, ignite's engine). The frame's state decides that function's branches."""

from __future__ import annotations

import builtins
import dis
import inspect
import types
from typing import Any

from .bytecode import operand
from .names import MISSING, attribute, chain, evaluate, loads, resolve

_ASYNC = 0x80 | 0x100 | 0x200  # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR


def raises_it(run: Any, frame: Any) -> bool:
    """Whether the function a handler hands its error to raises it on every path. False when unsure."""
    found = _callee(run, frame)
    if found is None:
        return False
    function, bound = found
    code = function.__code__
    if code.co_flags & (0x20 | _ASYNC) or code.co_argcount - len(bound) != 1:
        return False
    scope = types.SimpleNamespace(f_locals=bound, f_globals=function.__globals__, f_builtins=vars(builtins))
    return _every_path(code, code.co_varnames[len(bound)], scope)


def _callee(run: Any, frame: Any) -> tuple[Any, dict[str, Any]] | None:
    """The plain function a handler hands its error to; ``self`` bound for a method."""
    import ast

    bound: dict[str, Any] = {}
    if isinstance(run, ast.Attribute):  # 3.10: the callee's ast
        owner, name = evaluate(run.value, frame), run.attr
    elif isinstance(run, list) and len(run) > 1:
        owner, name = chain(run[:-1], frame), run[-1].argval
    else:
        owner, name = None, None
    if name is None or owner is MISSING or isinstance(owner, (types.ModuleType, type)):
        function = resolve(run, frame)
    else:
        function = inspect.getattr_static(owner, name, MISSING)
        if isinstance(function, types.FunctionType) and function.__code__.co_argcount >= 2:
            bound[function.__code__.co_varnames[0]] = owner  # self
    if not isinstance(function, types.FunctionType):
        return None
    return function, bound


def _every_path(code: Any, parameter: str, scope: Any) -> bool:
    """Whether ``code`` raises ``parameter`` on every path, the branches ``scope`` decides taken one way."""
    instructions = list(dis.get_instructions(code))
    index = {ins.offset: k for k, ins in enumerate(instructions)}
    todo, seen = [0], set[int]()
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        if k >= len(instructions) or len(seen) > 500:
            return False
        seen.add(k)
        ins = instructions[k]
        op = ins.opname
        if op == "RAISE_VARARGS" and ins.arg == 1:
            previous = instructions[k - 1]
            if not (previous.opname.startswith("LOAD_FAST") and previous.argval == parameter):
                return False  # raises something else
            continue
        if op.startswith(("RETURN", "YIELD", "RERAISE", "RAISE")):
            return False
        if op.startswith("POP_JUMP") and ("IF_TRUE" in op or "IF_FALSE" in op):
            target = index.get(ins.argval)
            start = operand(instructions, k)
            value = _condition(instructions[start:k], scope) if start is not None else MISSING
            if target is None:
                return False
            if value is MISSING:
                todo += [target, k + 1]
            else:
                todo.append(target if bool(value) == ("IF_TRUE" in op) else k + 1)
            continue
        if "JUMP" in op:
            target = index.get(ins.argval)
            if target is None:
                return False
            todo.append(target)
            if op.startswith(("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_ABSOLUTE")) or op == "JUMP":
                continue
        todo.append(k + 1)
    return True


def _condition(run: list[Any], scope: Any) -> Any:
    """Evaluate a simple branch condition in the frame; ``MISSING`` for anything else. Simple means names, attributes,
    constants and ``in``/``is`` on plain containers (``Events.EXCEPTION_RAISED in self._event_handlers``)."""
    stack: list[Any] = []
    for ins in run:
        op = ins.opname
        if op in ("PUSH_NULL", "PRECALL", "NOP", "CACHE", "EXTENDED_ARG", "TO_BOOL", "NOT_TAKEN"):
            continue
        if op in ("CONTAINS_OP", "IS_OP"):
            if len(stack) < 2:
                return MISSING
            right, left = stack.pop(), stack.pop()
            if left is MISSING or right is MISSING:
                return MISSING
            if op == "IS_OP":
                stack.append((left is right) != bool(ins.arg))
                continue
            if isinstance(right, dict):
                found = dict.__contains__(right, left)
            elif isinstance(right, (set, frozenset)):
                found = frozenset.__contains__(frozenset(right), left)
            else:
                return MISSING
            stack.append(found != bool(ins.arg))
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            if not stack:
                return MISSING
            stack.append(attribute(stack.pop(), ins.argval))
        elif loads(op) or op == "LOAD_CONST":
            stack.append(chain([ins], scope))
        else:
            return MISSING
    return stack[0] if len(stack) == 1 else MISSING

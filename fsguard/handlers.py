"""Mechanism: does the code that called a guarded function handle the error itself?

A program that uses a failure as its answer (``try: os.makedirs(f"run-{i}") except FileExistsError: i += 1``)
must get that failure: absorbing it would hand two ranks one name. So before a failure is absorbed,
``caller_handles`` looks at the calling frames, on the failure path only:

* the immediate caller (the first frame outside fsguard and wrapt, passing over the thin standard wrappers in
  ``_pass_through``, such as ``pathlib.Path.mkdir``, and the standard library's own frames, ``_STANDARD``):
  an ``except`` clause that matches the raised error (its class, a base class, a tuple holding one, a bare
  ``except``), ``with contextlib.suppress(...)`` of a matching class, or a ``@contextmanager`` helper whose
  ``yield`` is inside such a handler, active around the call;
* further up (``DEPTH`` frames, the standard library's not counted), following the error outwards past
  handlers that raise on every path (``except Exception: log; raise`` passes it on): the first frame that
  swallows it decides, if its class is *specific* (narrower than ``OSError``), or if it is a retry: a handler of
  any class that swallows the error and goes round a loop again to call a function it was handed (tenacity,
  retrying, retry, backoff, a hand-written decorator). A broad one that is no retry (``except Exception: log``
  around a whole run) is error reporting: fsguard decides.

A ``with`` block in general (a lock, an open file: ``__exit__`` sees the error and re-raises) and
``try/finally`` are not handlers; the search goes on outwards past them.

How: on 3.11+, exactly, from the code object's exception table (``co_exceptiontable``) at the frame's
current instruction, following the error from handler to handler as the interpreter would; the names in an
``except`` clause or a ``suppress(...)`` call are resolved in the frame when the error happens. On 3.10 the
block stack cannot be read from Python: the enclosing ``try``/``with`` statements are found in the source's
``ast`` (by line), where that is unambiguous. Anything not understood (no source, odd bytecode, a clause that
is not a plain name) is "unknown", and fsguard decides as it did before. Analyses are cached per code object
and instruction.
"""

from __future__ import annotations

import sys
from typing import Any

from .state import STATE

# Handlers of these classes (and bare ``except``) count only in the immediate caller's frame.
BROAD: tuple[type[BaseException], ...] = (BaseException, Exception, OSError)
DEPTH = 8  # frames looked at: the immediate caller and those above it (the standard library's not counted)
# Modules whose frames are passed over: their handlers of a guarded call's error are the caller's business
# (``shutil.copytree``'s ``os.makedirs``), and the frames do not count towards ``DEPTH``.
_STANDARD = frozenset({"os", "posixpath", "genericpath", "shutil", "tempfile", "pathlib", "contextlib"})
_CACHE_SIZE = 2048

# A layer of handling, innermost first. ("except", [(instructions or ast node, label, fate), ...]),
# ("bare", label, fate), ("suppress", (instructions or ast node), label), ("unknown", why). A handler's fate:
# "raise" (every path raises), "swallow" (a path leaves it normally), "retry" (and goes back round a loop).
_Layer = tuple[Any, ...]  # kept per (code, position) in ``STATE.caches.handler_layers``


def caller_handles(error: BaseException, frame: Any = None) -> dict[str, Any] | None:
    """``{"handler": "except FileExistsError", "frame": "file:line"}`` when the calling code handles
    ``error`` itself, else None (no handler, or unknown). ``frame``: where to start looking (default: the
    caller of this function); fsguard's and wrapt's own frames are passed over. Never raises."""
    try:
        start = frame if frame is not None else sys._getframe(1)
        return _search(error, start)
    except Exception:  # noqa: BLE001 - unknown: fsguard decides as for a caller without a handler
        return None


def _search(error: BaseException, frame: Any) -> dict[str, Any] | None:
    from .runtime import site_dirs

    own, applications, _, _ = site_dirs()
    passing = _pass_through()
    depth = 0
    while frame is not None and depth < DEPTH:
        code = frame.f_code
        filename = code.co_filename
        if (
            (filename.startswith(own) and not filename.startswith(applications))
            or code in passing
            or _standard(frame.f_globals.get("__name__"))
        ):
            frame = frame.f_back
            continue
        found = _in_frame(error, frame, immediate=depth == 0)
        if found is not None:
            if found.get("unknown"):
                return None
            fate, broad = found.pop("fate", "swallow"), found.pop("broad", False)
            if depth:
                # Further up, the frame that swallows the error decides: with a specific class, or as a retry
                # of a function it was handed. A broad handler that is no retry is reporting: fsguard decides.
                if broad and not (fate == "retry" and _takes_callable(frame)):
                    return None
                found["frames_up"] = depth
            found["frame"] = f"{filename}:{frame.f_lineno}"
            return found
        depth += 1
        frame = frame.f_back
    return None


def _standard(module: Any) -> bool:
    return isinstance(module, str) and (module in _STANDARD or module.startswith("pathlib."))


def _takes_callable(frame: Any) -> bool:
    """Whether the frame's function was handed a function (an argument or a closure variable): a retry
    decorator's ``fn``, ``target`` or ``f``, or a ``functools.partial`` of one."""
    import functools
    import types

    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    names = code.co_varnames[:count] + code.co_freevars
    local = frame.f_locals
    kinds = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    return any(isinstance(local.get(name), kinds) for name in names)


def _pass_through() -> frozenset[Any]:
    """Code objects of standard wrappers whose handlers only re-raise on the caller's own arguments
    (``exist_ok``, ``missing_ok``, ``parents``) or fall back for another reason: their caller decides.

    ``shutil.move`` catches ``OSError`` from ``os.rename`` to copy across filesystems; a source a peer
    already moved would fail the copy too, so its handler decides nothing about a race: passed over, so that a
    lost race of ``shutil.move`` is absorbed."""
    caches = STATE.caches
    if caches.pass_through is None:
        import os
        import pathlib
        import shutil

        functions: list[Any] = [os.makedirs, shutil.move]
        for name in ("mkdir", "unlink", "rmdir", "rename", "replace", "symlink_to", "hardlink_to", "touch"):
            functions.append(getattr(pathlib.Path, name, None))
        codes = set()
        for function in functions:
            for _ in range(8):  # the original under fsguard's (or anyone's) wrapper
                inner = getattr(function, "__wrapped__", None)
                if inner is None:
                    break
                function = inner
            code = getattr(function, "__code__", None)
            if code is not None:
                codes.add(code)
        caches.pass_through = frozenset(codes)
    return caches.pass_through


def _in_frame(error: BaseException, frame: Any, immediate: bool) -> dict[str, Any] | None:
    """The handler of ``error`` active in ``frame`` (``{"handler": ...}``), ``{"unknown": ...}``, or None."""
    code = frame.f_code
    position = frame.f_lasti if sys.version_info >= (3, 11) else frame.f_lineno
    key = (code, position)
    cache: dict[tuple[Any, int], list[_Layer]] = STATE.caches.handler_layers
    layers = cache.get(key)
    if layers is None:
        if sys.version_info >= (3, 11):
            layers = _bytecode_layers(code, position)
        else:
            layers = _source_layers(code, frame.f_lineno, frame.f_globals)
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        cache[key] = layers
    for layer in layers:
        kind = layer[0]
        if kind == "unknown":
            return {"unknown": layer[1]}
        # Further up, a handler that raises on every path passes the error on (``except Exception: log;
        # raise``): to the layers around it, and on outwards, as the interpreter does.
        if kind == "bare":
            if not immediate and layer[2] == "raise":
                continue
            return {"handler": layer[1], "fate": layer[2], "broad": True}
        if kind == "except":
            found = None
            for clause, label, fate in layer[1]:
                value = _resolve(clause, frame)
                counts = _matches(error, value, immediate)
                if counts is None:
                    return {"unknown": f"cannot resolve {label}"}
                if counts or _matches(error, value, True):  # a specific clause, or a broad one
                    found = {"handler": label, "fate": fate, **({} if counts else {"broad": True})}
                    break
            if found is not None and (immediate or found["fate"] != "raise"):
                return found
            continue
        if kind == "suppress":
            classes = _resolve(layer[1], frame, call=True) if layer[1] is not None else None
            if classes is not None and _matches(error, classes, True):
                label = layer[2]
                if "(" not in label:  # ``with cm:``: say what it expects
                    names = classes if isinstance(classes, tuple) else (classes,)
                    label += " (expecting " + ", ".join(getattr(c, "__name__", "?") for c in names) + ")"
                return {"handler": label, "fate": "swallow", "broad": not _matches(error, classes, immediate)}
            # otherwise a with block (a lock, an open file): its __exit__ re-raises, not a handler
    return None


def _matches(error: BaseException, value: Any, immediate: bool) -> bool | None:
    """Whether an ``except``/``suppress`` class (or tuple) catches ``error`` and counts at this depth;
    None when ``value`` is not a class or tuple of classes."""
    classes = value if isinstance(value, tuple) else (value,)
    flat: list[type] = []
    while classes:
        head, classes = classes[0], classes[1:]
        if isinstance(head, tuple):
            classes = head + classes
        elif isinstance(head, type) and issubclass(head, BaseException):
            flat.append(head)
        else:
            return None
    caught = [c for c in flat if isinstance(error, c)]
    if immediate:
        return bool(caught)
    return any(c not in BROAD for c in caught)


# --- resolving names in the frame -------------------------------------------------------------------------

_MISSING = object()


def _lookup(frame: Any, name: str, scopes: str) -> Any:
    for scope in scopes:
        if scope == "l":
            space = frame.f_locals
        elif scope == "g":
            space = frame.f_globals
        else:
            space = frame.f_builtins
        if name in space:
            return space[name]
    return _MISSING


def _attribute(owner: Any, name: str) -> Any:
    """``owner.name`` of a module or class only (no property or ``__getattr__`` of an arbitrary object runs);
    of a ``unittest.TestCase``, the class's function (``self.assertRaises``)."""
    import types

    if isinstance(owner, (types.ModuleType, type)):
        return getattr(owner, name, _MISSING)
    unittest = sys.modules.get("unittest.case")
    if unittest is not None and isinstance(owner, unittest.TestCase):
        return getattr(type(owner), name, _MISSING)
    return _MISSING


def _resolve(expression: Any, frame: Any, call: bool = False) -> Any:
    """The value of a clause's class expression in ``frame`` (``_MISSING`` if unknown); with ``call``, the
    classes passed to ``contextlib.suppress`` (None when the call is not one of ``suppress``)."""
    return _run(expression, frame, call) if isinstance(expression, list) else _evaluate(expression, frame, call)


_LOADS = {
    "LOAD_GLOBAL": "gb",
    "LOAD_NAME": "lgb",
    "LOAD_DEREF": "l",
    "LOAD_CLASSDEREF": "lgb",
    "LOAD_FROM_DICT_OR_DEREF": "l",
    "LOAD_FROM_DICT_OR_GLOBALS": "lgb",
}


def _run(instructions: list[Any], frame: Any, call: bool) -> Any:
    """Evaluate a short run of load instructions (no side effects: names and module/class attributes)."""
    stack: list[Any] = []
    for ins in instructions:
        op = ins.opname
        if op in ("PUSH_NULL", "PRECALL", "NOP", "CACHE", "EXTENDED_ARG"):
            continue
        if op in _LOADS or op.startswith("LOAD_FAST"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            for name in names:
                stack.append(_lookup(frame, name, _LOADS.get(op, "l")))
        elif op in ("LOAD_ATTR", "LOAD_METHOD") and stack:
            stack.append(_attribute(stack.pop(), ins.argval))
        elif op == "LOAD_CONST":
            stack.append(ins.argval)
        elif op == "BUILD_TUPLE" and len(stack) >= ins.arg:
            items = tuple(stack[len(stack) - ins.arg :]) if ins.arg else ()
            del stack[len(stack) - ins.arg :]
            stack.append(items)
        elif op == "CALL" and call and len(stack) >= ins.arg + 1:
            return _suppressed(stack[-ins.arg - 1], tuple(stack[len(stack) - ins.arg :]))
        else:
            return None if call else _MISSING
    if call:
        return _suppressing(stack[-1]) if len(stack) == 1 else None
    return stack[-1] if len(stack) == 1 else _MISSING


def _suppressed(callee: Any, args: tuple[Any, ...]) -> Any:
    """The classes a ``with`` of ``callee(*args)`` suppresses: ``contextlib.suppress``, and the tests'
    ``assertRaises``/``assertRaisesRegex`` (unittest) and ``pytest.raises``, which expect the error; else None."""
    contextlib = sys.modules.get("contextlib")
    if contextlib is not None and isinstance(callee, type) and issubclass(callee, contextlib.suppress):
        return args
    unittest = sys.modules.get("unittest.case")
    if unittest is not None and callee in (unittest.TestCase.assertRaises, unittest.TestCase.assertRaisesRegex):
        return args[:1] if args else None
    if getattr(callee, "__name__", None) == "raises" and str(getattr(callee, "__module__", "")).startswith("_pytest"):
        return args[:1] if args else None
    return _helper_suppresses(callee, args)


def _helper_suppresses(callee: Any, args: tuple[Any, ...]) -> Any:
    """The classes a ``@contextlib.contextmanager`` helper called with ``args`` swallows around its one
    ``yield`` (``try: yield`` / ``except FileExistsError: pass``), read from its bytecode (3.11+); None where
    it swallows nothing fsguard can tell."""
    generator: Any = getattr(callee, "__wrapped__", None)
    helper = getattr(callee, "__code__", None)
    code = getattr(generator, "__code__", None)
    if (
        code is None
        or helper is None
        or not helper.co_filename.endswith("contextlib.py")
        or not code.co_flags & 0x20  # CO_GENERATOR
    ):
        return None
    import builtins
    import dis
    import types

    yields, line = [], None
    for ins in dis.get_instructions(code):
        if sys.version_info < (3, 11) and ins.starts_line is not None:
            line = ins.starts_line
        if ins.opname == "YIELD_VALUE":
            yields.append((ins.offset, line))
    if len(yields) != 1:
        return None
    key = (code, -1 - yields[0][0])
    cache: dict[tuple[Any, int], list[_Layer]] = STATE.caches.handler_layers
    layers = cache.get(key)
    if layers is None:
        if sys.version_info >= (3, 11):
            layers = _bytecode_layers(code, yields[0][0])
        elif yields[0][1] is not None:
            layers = _source_layers(code, yields[0][1], generator.__globals__)
        else:
            return None
        cache[key] = layers
    # The helper's names: its arguments as called, its module's globals, its closure.
    count = code.co_argcount + code.co_kwonlyargcount
    bound: dict[str, Any] = dict(zip(code.co_varnames[: code.co_argcount], args, strict=False))
    if code.co_flags & 4:  # *args
        bound[code.co_varnames[count]] = args[code.co_argcount :]
    for name, cell in zip(code.co_freevars, getattr(generator, "__closure__", None) or (), strict=False):
        bound[name] = cell.cell_contents
    scope = types.SimpleNamespace(f_locals=bound, f_globals=generator.__globals__, f_builtins=vars(builtins))
    caught: list[Any] = []
    for layer in layers:
        if layer[0] == "except":
            for clause, _, fate in layer[1]:
                value = _resolve(clause, scope)
                if value is not _MISSING and fate != "raise":
                    caught.append(value)
        elif layer[0] == "bare" and layer[2] != "raise":
            caught.append(BaseException)
    return tuple(caught) if caught else None


def _suppressing(value: Any) -> Any:
    """The classes a context manager object suppresses (``with cm:``), for the kinds ``_suppressed`` knows."""
    contextlib = sys.modules.get("contextlib")
    if contextlib is not None and isinstance(value, contextlib.suppress):
        return getattr(value, "_exceptions", None)
    unittest = sys.modules.get("unittest.case")
    context = getattr(unittest, "_AssertRaisesContext", None)
    if context is not None and isinstance(value, context):
        return getattr(value, "expected", None)
    tenacity = sys.modules.get("tenacity")  # ``for attempt in Retrying(...): with attempt: ...`` swallows all
    if tenacity is not None and isinstance(value, getattr(tenacity, "AttemptManager", ())):
        return BaseException
    return None


def _evaluate(node: Any, frame: Any, call: bool) -> Any:
    import ast

    if call:
        if isinstance(node, (ast.Name, ast.Attribute)):
            return _suppressing(_evaluate(node, frame, False))
        if not isinstance(node, ast.Call) or node.keywords:
            return None
        callee = _evaluate(node.func, frame, False)
        args = tuple(_evaluate(a, frame, False) for a in node.args)
        return _suppressed(callee, args)
    if isinstance(node, ast.Name):
        return _lookup(frame, node.id, "lgb")
    if isinstance(node, ast.Attribute):
        return _attribute(_evaluate(node.value, frame, False), node.attr)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e, frame, False) for e in node.elts)
    return _MISSING


# --- 3.11+: the exception table -----------------------------------------------------------------------------


def _exception_table(code: Any) -> list[tuple[int, int, int]]:
    """(start, end, target) byte offsets, end exclusive (format: CPython's Objects/exception_handling_notes)."""
    data = code.co_exceptiontable
    entries = []
    i = 0

    def varint() -> int:
        nonlocal i
        b: int = data[i]
        i += 1
        value = b & 63
        while b & 64:
            b = data[i]
            i += 1
            value = (value << 6) | (b & 63)
        return value

    while i < len(data):
        start = varint() * 2
        length = varint() * 2
        target = varint() * 2
        varint()  # depth and lasti
        entries.append((start, start + length, target))
    return entries


def _bytecode_layers(code: Any, offset: int) -> list[_Layer]:
    import dis

    table = _exception_table(code)
    instructions = list(dis.get_instructions(code))
    index = {ins.offset: n for n, ins in enumerate(instructions)}

    def handler(at: int) -> int | None:
        for start, end, target in table:
            if start <= at < end:
                return target
        return None

    def next_reraise(n: int, limit: int = 1_000_000) -> int | None:
        """Offset of the first RERAISE from instruction ``n`` on that leaves to ``handler(offset of n)``."""
        leaves_to = handler(instructions[n].offset)
        for ins in instructions[n : n + limit]:
            if ins.opname == "RERAISE" and handler(ins.offset) == leaves_to:
                return ins.offset
        return None

    layers: list[_Layer] = []
    at: int | None = offset
    for _ in range(64):  # nesting depth bound
        target = handler(at) if at is not None else None
        if target is None:
            return layers
        n = index.get(target)
        if n is None or n + 1 >= len(instructions):
            return [*layers, ("unknown", "handler outside the code")]
        first, second = instructions[n], instructions[n + 1]
        if first.opname == "COPY" and second.opname == "POP_EXCEPT":  # cleanup after a handler: passes it on
            at = next_reraise(n, 3)
        elif first.opname != "PUSH_EXC_INFO":
            # Other cleanups re-raise after restoring state (an inlined comprehension's variable, a
            # generator's StopIteration check): a few stack moves, then RERAISE.
            at = None
            for ins in instructions[n : n + 8]:
                if ins.opname == "RERAISE":
                    at = ins.offset
                    break
                if ins.opname not in _CLEANUP_OPS:
                    break
            if at is None:
                return [*layers, ("unknown", f"handler starting with {first.opname}")]
        elif second.opname == "WITH_EXCEPT_START":
            run, label = _with_call(instructions, index, table, target)
            layers.append(("suppress", run, label))
            at = next_reraise(n + 1, 6)
        elif second.opname == "POP_TOP":
            layers.append(("bare", "except", _fate(instructions, index, n + 2, offset)))
            return layers
        else:
            clauses, at, bare = _clauses(instructions, index, n + 1)
            if clauses is None:
                at = next_reraise(n + 1)  # no clause: a finally block, which re-raises at its end
            elif clauses == "unknown":
                return [*layers, ("unknown", "an except clause fsguard cannot read")]
            else:
                layers.append(
                    ("except", [(run, label, _fate(instructions, index, body, offset)) for run, label, body in clauses])
                )
                if bare is not None:
                    layers.append(("bare", "except", _fate(instructions, index, bare, offset)))
                    return layers
    return [*layers, ("unknown", "too deep")]


_CLEANUP_OPS = frozenset(
    {"SWAP", "POP_TOP", "STORE_FAST", "STORE_FAST_MAYBE_NULL", "CALL_INTRINSIC_1", "COPY", "NOP", "LOAD_CONST"}
)


def _fate(instructions: list[Any], index: dict[int, int], body: int, call: int) -> str:
    """What a handler whose body starts at instruction ``body`` does with the error: "raise" (every path
    raises), "swallow" (a path leaves the handler normally: ``POP_EXCEPT``), "retry" (and then jumps back to
    the loop around the call at offset ``call``). Normal flow only, bounded."""
    todo: list[tuple[int, bool]] = [(body, False)]
    seen: set[tuple[int, bool]] = set()
    swallowed = False
    while todo and len(seen) < 2000:
        n, left = todo.pop()
        if n >= len(instructions) or (n, left) in seen:
            continue
        seen.add((n, left))
        ins = instructions[n]
        op = ins.opname
        if op in ("RERAISE", "RAISE_VARARGS"):
            continue
        if op in ("RETURN_VALUE", "RETURN_CONST"):
            swallowed = swallowed or left
            continue
        if op == "POP_EXCEPT":
            swallowed = left = True
        if "JUMP" in op or op == "FOR_ITER":
            target = index.get(ins.argval) if isinstance(ins.argval, int) else None
            if left and "BACKWARD" in op and isinstance(ins.argval, int) and ins.argval <= call:
                return "retry"
            if target is not None:
                todo.append((target, left))
            if op.startswith(("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_ABSOLUTE")) or op == "JUMP":
                continue  # unconditional
        todo.append((n + 1, left))
    return "swallow" if swallowed else "raise"


def _clauses(instructions: list[Any], index: dict[int, int], n: int) -> tuple[Any, int | None, int | None]:
    """The ``except`` clauses starting at instruction ``n``: ([(instructions, label, body)], offset of the
    RERAISE after the last clause, the body of a bare ``except`` that ends them, or None); (None, None, None)
    for a block that is no ``except`` (``finally``); ("unknown", None, None) for clauses fsguard cannot read.
    ``body``: the index of a clause's first instruction after its match."""
    clauses: list[tuple[list[Any], str, int]] = []
    for _ in range(256):
        run: list[Any] = []
        m = n
        while m < len(instructions) and instructions[m].opname != "CHECK_EXC_MATCH" and len(run) < 40:
            ins = instructions[m]
            if ins.opname == "CHECK_EG_MATCH" or ins.opname.startswith(("CALL", "STORE", "RERAISE", "RETURN")):
                break
            if "JUMP" in ins.opname or ins.opname == "POP_TOP":
                break
            run.append(ins)
            m += 1
        if m >= len(instructions) or instructions[m].opname != "CHECK_EXC_MATCH" or not run:
            return (None, None, None) if not clauses else ("unknown", None, None)
        clauses.append((run, "except " + _label(run), m + 2))
        jump = instructions[m + 1] if m + 1 < len(instructions) else None
        if jump is None or "IF_FALSE" not in jump.opname:
            return "unknown", None, None
        n = index.get(jump.argval, -1)
        if n < 0:
            return "unknown", None, None
        nxt = instructions[n]
        if nxt.opname == "RERAISE":
            return clauses, nxt.offset, None
        if nxt.opname == "POP_TOP":
            return clauses, None, n + 1
    return "unknown", None, None


def _label(run: list[Any]) -> str:
    parts: list[str] = []
    for ins in run:
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and parts:
            parts[-1] += "." + str(ins.argval)
        elif ins.opname == "BUILD_TUPLE":
            k = ins.arg or 0
            items = parts[len(parts) - k :] if k else []
            del parts[len(parts) - k :]
            parts.append("(" + ", ".join(items) + ")")
        elif isinstance(ins.argval, tuple) and ins.opname.startswith("LOAD_FAST"):
            parts.extend(ins.argval)
        elif ins.opname.startswith("LOAD"):
            parts.append(str(ins.argval))
    return " ".join(parts)


def _with_call(
    instructions: list[Any], index: dict[int, int], table: list[tuple[int, int, int]], target: int
) -> tuple[list[Any] | None, str]:
    """The instructions of a ``with`` statement's context expression (``suppress(A, B)``), up to its CALL,
    and a label; None where they are not a plain call of plain names."""
    starts = [start for start, _, t in table if t == target]
    n = index.get(min(starts)) if starts else None
    if n is None or n < 2 or instructions[n - 1].opname != "BEFORE_WITH":
        return None, "with"
    m = first = n - 2
    called = instructions[m].opname == "CALL"
    if not called:
        first = m + 1  # ``with cm:``: the load chain of a context manager object
    while first > 0:
        op = instructions[first - 1].opname
        if op in _LOADS or op.startswith("LOAD_FAST") or op in ("LOAD_ATTR", "LOAD_METHOD", "PUSH_NULL", "PRECALL"):
            first -= 1
        else:
            break
    run = instructions[first : m + 1]
    if not called:
        return (run, f"with {_label(run)}") if run else (None, "with")
    words = _label(run[:-1]).split(" ")
    arity = instructions[m].arg or 0
    if len(run) < 2 or len(words) < arity + 1:
        return None, "with"
    callee, args = words[: len(words) - arity], words[len(words) - arity :]
    return run, f"with {callee[-1]}({', '.join(args)})"


# --- 3.10: the source's ast ---------------------------------------------------------------------------------


def _source_layers(code: Any, line: int, module_globals: Any) -> list[_Layer]:
    import ast
    import linecache

    blocks = (ast.stmt, ast.excepthandler)
    lines = linecache.getlines(code.co_filename, module_globals)
    if not lines:
        return [("unknown", "no source")]
    text = "".join(lines)
    trees = STATE.caches.source_trees
    tree = trees.get(code.co_filename)
    if tree is None or tree[0] != text:
        try:
            tree = (text, ast.parse(text))
        except (SyntaxError, ValueError):
            return [("unknown", "source does not parse")]
        if len(trees) > 256:
            trees.clear()
        trees[code.co_filename] = tree
    chain: list[Any] = []
    looped: set[int] = set()  # the ``try`` statements inside a loop of the same function
    loop = False
    scope: Any = None
    node: Any = tree[1]
    while True:
        inner = None
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is not None and end is not None and start <= line <= end and isinstance(child, blocks):
                inner = child
                break
        if inner is None:
            break
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            chain, scope, loop = [], inner, False
        elif isinstance(inner, (ast.Try, ast.With, ast.AsyncWith)):
            chain.append(inner)
            if loop:
                looped.add(id(inner))
        elif isinstance(inner, (ast.For, ast.AsyncFor, ast.While)):
            loop = True
        node = inner
    if code.co_name == "<module>":
        if scope is not None:
            return [("unknown", "line not in the module's own code")]
    elif scope is None or scope.name != code.co_name:
        return [("unknown", "line not in the function's own code")]
    layers: list[_Layer] = []
    for block in reversed(chain):
        body = block.body
        if not (body[0].lineno <= line <= (body[-1].end_lineno or 0)):
            continue  # in a handler, else or finally, or a with statement's header: not protected by it
        if isinstance(block, ast.Try):
            clauses: list[tuple[Any, str, str]] = []
            for clause in block.handlers:
                raises = bool(clause.body) and isinstance(clause.body[-1], ast.Raise)
                fate = "raise" if raises else "retry" if id(block) in looped else "swallow"
                if clause.type is None:
                    if clauses:
                        layers.append(("except", clauses))
                    layers.append(("bare", "except", fate))
                    return layers
                clauses.append((clause.type, "except " + ast.unparse(clause.type), fate))
            if clauses:
                layers.append(("except", clauses))
        else:
            if line == block.lineno or line <= max(i.context_expr.end_lineno or 0 for i in block.items):
                return [*layers, ("unknown", "with statement and its body on one line")]
            for item in reversed(block.items):
                layers.append(("suppress", item.context_expr, "with " + ast.unparse(item.context_expr)))
    return layers

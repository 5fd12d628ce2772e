"""Mechanism: would a guarded call's error crash the program, or does the program handle it?

The rule: **fsguard absorbs only a would-be crash.** A failure that a rule would absorb (a peer of this job did
the same thing) is absorbed only when, left alone, the error would leave its thread's top frame, or reach only
handlers that pass it on (``except Exception: log; raise``, a converting ``except FileExistsError: raise
AlreadyExistsError(...)``, torch elastic's ``@record``) or end the process (``sys.exit``, ``os._exit``). Any
other handler, at any depth and of any class (a claim loop's ``except OSError``, a retry, a suppressing context
manager, the executor, pool or task that carries the error to another frame), decides: the error goes to it
unchanged, with a ``deferred`` record. Anything fsguard cannot read (no source, unusual bytecode, an ``except``
clause or context manager it cannot resolve, ``except*``) is left to the program too, the record saying why.

``caller_handles`` walks outwards from the failing call over every frame up to the thread's top (no depth
limit: it runs only on a failure the evidence would absorb), passing over fsguard's and wrapt's frames and the
standard library's thin wrappers (``os.makedirs``, ``pathlib``, ``shutil``: their handlers settle the caller's
own arguments or fall back; the caller decides). In each frame it follows the error from handler to handler as
the interpreter would:

* an ``except`` clause that matches the error's class (any class, a tuple, a bare ``except``; the names
  resolved in the frame) decides, unless every path through it raises: re-raising passes the error on; raising
  another class (``raise errors.AlreadyExistsError(...)``, ``sys.exit``: ``SystemExit``) passes *that* class on
  (the search goes on outwards with it); ``os._exit`` ends the process;
* a ``with`` block decides when its ``__exit__`` may suppress the error: ``contextlib.suppress`` and the tests'
  ``assertRaises`` of a matching class, a ``@contextmanager`` generator that swallows it at its ``yield``, a
  class whose ``__exit__`` may return true, tenacity's ``with attempt:``; it passes the error on when the
  ``__exit__`` returns only ``None``/``False`` or is a standard type's that never suppresses (files, locks);
* ``try/finally`` passes the error on;
* the thread's top (the main thread's first frame, ``threading.Thread``'s bootstrap, ``multiprocessing``'s
  process bootstrap, which reports and exits) means a crash; a coroutine's first frame means the error is
  carried to whatever drives it (an asyncio task: deferred), as do ``concurrent.futures``' and
  ``multiprocessing.pool``'s workers (their handlers swallow it into a future or a result).

How: on 3.11+ from the code object's exception table (``co_exceptiontable``) at the frame's current
instruction; on 3.10 from the source's ``ast`` (by line), where that is unambiguous. Analyses are cached per code
object and instruction; names are resolved in the frame when the error happens.
"""

from __future__ import annotations

import sys
from typing import Any

from .state import STATE

# Modules whose frames are passed over: their handlers of a guarded call's error are the caller's business
# (``shutil.copytree``'s ``os.makedirs``).
_STANDARD = frozenset({"os", "posixpath", "genericpath", "shutil", "tempfile", "pathlib", "contextlib"})
_CACHE_SIZE = 2048
_CONVERSIONS = 8  # converting handlers followed, one after the other
_ASYNC = 0x80 | 0x100 | 0x200  # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR
# Modules whose handlers hand the error to another frame or thread (a future, a pool's result, a task).
_CARRIERS = ("concurrent.futures", "multiprocessing.pool", "asyncio")

# A layer of handling, innermost first: ("except", [(clause, label, fate), ...]), ("bare", label, fate),
# ("with", expression, label), ("unknown", why). A clause or expression: instructions (3.11+) or an ast node.
# A handler's fate: ("swallow",) when a path leaves it normally, else ("raise", (raised, ...)) with what each
# raising path raises: ("same",), ("class", expression, label), ("exit",) (SystemExit), ("end",) (os._exit), or
# ("unknown", why).
_Layer = tuple[Any, ...]  # kept per (code, position) in ``STATE.caches.handler_layers``
_PASS: Any = "pass"  # the layer passes the error on unchanged
_END: Any = "end"  # the layer ends the process


def caller_handles(error: BaseException, frame: Any = None) -> dict[str, Any] | None:
    """None when ``error`` would crash its thread or process (no handler decides; fsguard's verdict stands);
    otherwise what decides instead: ``{"handler": "except OSError", "frame": "file:line"}``, with a
    ``reason`` where fsguard could not read it. ``frame``: where to start looking (default: the caller of this
    function); fsguard's and wrapt's own frames are passed over. Never raises: a failure of the analysis leaves
    the error to the program too."""
    try:
        start = frame if frame is not None else sys._getframe(1)
        return _walk(type(error), start, 0, _CONVERSIONS)
    except Exception as failure:  # noqa: BLE001 - not understood: the program decides
        return {"reason": f"fsguard's handler analysis failed ({type(failure).__name__}: {failure})"}


def _walk(cls: type[BaseException], frame: Any, first: int, conversions: int) -> dict[str, Any] | None:
    """Follow an error of class ``cls`` from ``frame`` (its layers from ``first`` on) outwards."""
    from .runtime import site_dirs

    own, applications, _, _ = site_dirs()
    passing = _pass_through()
    tops = _tops()
    up = 0
    while frame is not None:
        code = frame.f_code
        if code in tops:
            return None
        filename = code.co_filename
        if not (
            (filename.startswith(own) and not filename.startswith(applications))
            or code in passing
            or _standard(frame.f_globals.get("__name__"))
        ):
            layers = _layers_at(frame)
            for index in range(first, len(layers)):
                outcome = _layer(cls, layers[index], frame)
                if outcome is _PASS:
                    continue
                if outcome is _END:
                    return None
                if isinstance(outcome, tuple):  # a converting handler: its classes go on from here
                    if conversions <= 0:
                        return _at(frame, {"reason": "too many converting handlers"}, up)
                    for converted in outcome:
                        found = _walk(converted, frame, index + 1, conversions - 1)
                        if found is not None:
                            found.setdefault("converted", converted.__name__)
                            found.setdefault("frames_up", up)
                            return found
                    return None
                return _at(frame, outcome, up)
            up += 1
        first = 0
        if code.co_flags & _ASYNC and (frame.f_back is None or not frame.f_back.f_code.co_flags & _ASYNC):
            why = "a coroutine's error goes to whatever drives it (an asyncio task, a caller's await)"
            return _at(frame, {"reason": why, "carried": "coroutine"}, max(up - 1, 0))
        frame = frame.f_back
    return None  # the thread's top: a would-be crash


def _at(frame: Any, found: dict[str, Any], up: int) -> dict[str, Any]:
    found["frame"] = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    if up:
        found["frames_up"] = up
    module = frame.f_globals.get("__name__")
    if isinstance(module, str) and module.startswith(_CARRIERS) and "carried" not in found:
        found["carried"] = module
    return found


def _standard(module: Any) -> bool:
    return isinstance(module, str) and (module in _STANDARD or module.startswith("pathlib."))


def _tops() -> set[Any]:
    """Code objects of the frames where an error ends its thread or process: ``threading.Thread``'s bootstrap
    (the thread ends; ``threading.excepthook`` reports it) and ``multiprocessing``'s (reports, exit code 1)."""
    codes = set()
    threading = sys.modules.get("threading")
    function = getattr(getattr(threading, "Thread", None), "_bootstrap_inner", None)
    if function is not None:
        codes.add(function.__code__)
    process = sys.modules.get("multiprocessing.process")
    function = getattr(getattr(process, "BaseProcess", None), "_bootstrap", None)
    if function is not None:
        codes.add(function.__code__)
    return codes


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


def _layers_at(frame: Any) -> list[_Layer]:
    """The layers of handling around ``frame``'s current instruction (cached per code object and position)."""
    code = frame.f_code
    if sys.version_info >= (3, 11):
        return _layers(code, frame.f_lasti, None, frame.f_globals)
    return _layers(code, None, frame.f_lineno, frame.f_globals)


def _layers(code: Any, offset: int | None, line: int | None, module_globals: Any) -> list[_Layer]:
    key = (code, offset if offset is not None else -1_000_000 - (line or 0))
    cache: dict[tuple[Any, int], list[_Layer]] = STATE.caches.handler_layers
    layers = cache.get(key)
    if layers is None:
        if offset is not None:
            layers = _bytecode_layers(code, offset)
        elif line is not None:
            layers = _source_layers(code, line, module_globals)
        else:
            layers = [("unknown", "no position")]
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        cache[key] = layers
    return layers


def _layer(cls: type[BaseException], layer: _Layer, frame: Any) -> Any:
    """What one layer does with an error of class ``cls``: ``_PASS``, ``_END``, a tuple of the classes it
    raises instead, or a dict saying that it decides (and why, where fsguard cannot read it)."""
    kind = layer[0]
    if kind == "unknown":
        return {"reason": layer[1]}
    if kind == "bare":
        return _handled(cls, layer[1], layer[2], frame)
    if kind == "except":
        for clause, label, fate in layer[1]:
            caught = _catches(cls, _resolve(clause, frame))
            if caught is None:
                return {"handler": label, "reason": f"cannot resolve {label}"}
            if caught:
                return _handled(cls, label, fate, frame)
        return _PASS
    if kind == "with":
        return _with(cls, _manager(layer[1], frame), layer[2])
    return {"reason": f"a layer fsguard does not know ({kind})"}


def _handled(cls: type[BaseException], label: str, fate: tuple[Any, ...], frame: Any) -> Any:
    if fate[0] != "raise":
        return {"handler": label}
    classes: list[type[BaseException]] = []
    ended = False
    for raised in fate[1]:
        if raised[0] == "same":
            new: Any = cls
        elif raised[0] == "exit":
            new = SystemExit
        elif raised[0] == "end":
            ended = True
            continue
        elif raised[0] == "class":
            new = _resolve(raised[1], frame)
            if not (isinstance(new, type) and issubclass(new, BaseException)):
                return {"handler": label, "reason": f"raises {raised[2]}, which fsguard cannot resolve"}
        elif raised[0] == "delegate":
            if not _delegated(raised[1], frame):
                return {"handler": label, "delegates_to": raised[2]}
            new = cls
        else:
            return {"handler": label, "reason": raised[1]}
        if new not in classes:
            classes.append(new)
    if not classes:
        return _END if ended else {"handler": label}
    if classes == [cls]:
        return _PASS
    return tuple(classes)


def _catches(cls: type[BaseException], value: Any) -> bool | None:
    """Whether an ``except``/``suppress`` class (or tuple) catches ``cls``; None when ``value`` is not a class
    or tuple of classes."""
    classes = value if isinstance(value, tuple) else (value,)
    while classes:
        head, classes = classes[0], classes[1:]
        if isinstance(head, tuple):
            classes = head + classes
        elif not (isinstance(head, type) and issubclass(head, BaseException)):
            return None
        elif issubclass(cls, head):
            # classes after a match are not checked by the interpreter either
            return True
    return False


# --- with blocks: may the context manager's __exit__ suppress the error? ------------------------------------


def _with(cls: type[BaseException], manager: tuple[Any, Any, Any], label: str) -> Any:
    """What a ``with`` block does with an error of class ``cls``. ``manager``: ("call", callee, args) for
    ``with f(*args):``, ("object", value, None) for ``with cm:``, (None, why, None) when unresolved."""
    kind, target, args = manager
    if kind is None:
        return {"handler": label, "reason": target}
    expected: Any = None
    contextlib = sys.modules.get("contextlib")
    unittest = sys.modules.get("unittest.case")
    if kind == "call":
        if contextlib is not None and isinstance(target, type) and issubclass(target, contextlib.suppress):
            expected = args
        elif _expects_first(target, unittest):
            expected = args[:1] if args else None
        elif _is_contextmanager(target):
            return _helper(cls, target, args, label)
        elif isinstance(target, type):
            return _exit(cls, target, label)
        elif target in _factories():
            return _PASS
        else:
            return {"handler": label, "reason": "a context manager fsguard cannot read"}
        if expected is None or any(a is _MISSING for a in (expected if isinstance(expected, tuple) else ())):
            return {"handler": label, "reason": "arguments fsguard cannot resolve"}
    else:
        value = target
        tenacity = sys.modules.get("tenacity")
        assertion = getattr(unittest, "_AssertRaisesContext", None)
        if contextlib is not None and isinstance(value, contextlib.suppress):
            expected = getattr(value, "_exceptions", None)
        elif assertion is not None and isinstance(value, assertion):
            expected = getattr(value, "expected", None)
        elif tenacity is not None and isinstance(value, getattr(tenacity, "AttemptManager", ())):
            return {"handler": label}  # ``for attempt in Retrying(...): with attempt:``: swallows, retries
        elif contextlib is not None and isinstance(value, contextlib._GeneratorContextManager):
            generator = getattr(value, "gen", None)
            suspended = getattr(generator, "gi_frame", None)
            if suspended is None:
                return {"handler": label, "reason": "a @contextmanager fsguard cannot read"}
            return _inside(cls, _layers_at(suspended), suspended, label)
        else:
            return _exit(cls, type(value), label)
        if "(" not in label and expected is not None:  # ``with cm:``: say what it expects
            names = expected if isinstance(expected, tuple) else (expected,)
            label += " (expecting " + ", ".join(getattr(c, "__name__", "?") for c in names) + ")"
    caught = _catches(cls, expected)
    if caught is None:
        return {"handler": label, "reason": "arguments fsguard cannot resolve"}
    return {"handler": label} if caught else _PASS


def _expects_first(callee: Any, unittest: Any) -> bool:
    """``assertRaises``/``assertRaisesRegex`` (unittest) and ``pytest.raises``: they expect their first argument."""
    if unittest is not None and callee in (unittest.TestCase.assertRaises, unittest.TestCase.assertRaisesRegex):
        return True
    module = str(getattr(callee, "__module__", ""))
    return getattr(callee, "__name__", None) == "raises" and module.startswith("_pytest")


def _is_contextmanager(callee: Any) -> bool:
    helper = getattr(callee, "__code__", None)
    return helper is not None and helper.co_filename.endswith("contextlib.py") and hasattr(callee, "__wrapped__")


def _helper(cls: type[BaseException], callee: Any, args: Any, label: str) -> Any:
    """A ``@contextlib.contextmanager`` helper called with ``args``: what its generator does with the error
    thrown in at its one ``yield`` (``try: yield`` / ``except FileExistsError: pass`` swallows it)."""
    import builtins
    import dis
    import types

    generator: Any = callee.__wrapped__
    code = getattr(generator, "__code__", None)
    if code is None or not code.co_flags & 0x20 or args is None:  # CO_GENERATOR
        return {"handler": label, "reason": "a @contextmanager fsguard cannot read"}
    yields, line = [], None
    for ins in dis.get_instructions(code):
        if sys.version_info < (3, 11) and ins.starts_line is not None:
            line = ins.starts_line
        if ins.opname == "YIELD_VALUE":
            yields.append((ins.offset, line))
    if len(yields) != 1:
        return {"handler": label, "reason": "a @contextmanager with more than one yield"}
    if sys.version_info >= (3, 11):
        layers = _layers(code, yields[0][0], None, generator.__globals__)
    else:
        layers = _layers(code, None, yields[0][1], generator.__globals__)
    # The helper's names: its arguments as called, its module's globals, its closure.
    count = code.co_argcount + code.co_kwonlyargcount
    bound: dict[str, Any] = dict(zip(code.co_varnames[: code.co_argcount], args, strict=False))
    if code.co_flags & 4:  # *args
        bound[code.co_varnames[count]] = args[code.co_argcount :]
    for name, cell in zip(code.co_freevars, getattr(generator, "__closure__", None) or (), strict=False):
        bound[name] = cell.cell_contents
    scope = types.SimpleNamespace(
        f_locals=bound, f_globals=generator.__globals__, f_builtins=vars(builtins), f_code=code
    )
    return _inside(cls, layers, scope, label)


def _inside(cls: type[BaseException], layers: list[_Layer], scope: Any, label: str) -> Any:
    """The layers around a generator's ``yield``, as the ``with`` block around the call sees them."""
    for layer in layers:
        outcome = _layer(cls, layer, scope)
        if outcome is _PASS:
            continue
        if isinstance(outcome, dict):
            inner = outcome.get("handler")
            if inner is not None:
                outcome["inside"] = inner  # the generator's own handler at its yield
            outcome["handler"] = label
        return outcome  # a dict (decides), a tuple of classes raised instead, or _END
    return _PASS


def _exit(cls: type[BaseException], kind: type, label: str) -> Any:
    """A context manager of class ``kind``: its ``__exit__`` passes the error on when it returns only None or
    False, or is a standard C type's that never suppresses."""
    import types

    method = None
    for klass in getattr(kind, "__mro__", ()):
        if "__exit__" in vars(klass):
            method = vars(klass)["__exit__"]
            break
    if isinstance(method, types.FunctionType):
        if _returns_false(method.__code__):
            return _PASS
        return {"handler": label, "reason": f"{kind.__qualname__}.__exit__ may return true (suppress the error)"}
    owner = getattr(method, "__objclass__", None)
    if getattr(owner, "__module__", None) in _QUIET_C:
        return _PASS
    threading = sys.modules.get("threading")
    if threading is not None and kind is getattr(threading, "Condition", None):
        return _PASS  # its __exit__ returns its lock's
    return {"handler": label, "reason": f"a context manager fsguard cannot read ({kind.__qualname__})"}


# Modules of C types whose ``__exit__`` returns None: files (``_io``), locks (``_thread``,
# ``_multiprocessing``), ``os.scandir``'s iterator (``posix``), ``select``'s pollers, ``memoryview``.
_QUIET_C = frozenset({"_io", "_thread", "_multiprocessing", "posix", "select", "builtins"})


def _factories() -> set[Any]:
    """Standard functions that return a context manager that never suppresses."""
    import io
    import os

    found: set[Any] = {open, io.open, os.scandir, os.fdopen}
    threading = sys.modules.get("threading")
    if threading is not None:
        found.update(getattr(threading, name, None) for name in ("Lock", "RLock"))
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        found.update(getattr(tempfile, name, None) for name in ("TemporaryFile", "NamedTemporaryFile"))
    found.discard(None)
    return found


def _returns_false(code: Any) -> bool:
    """Whether every ``return`` of ``code`` returns the constant None or False (raising is fine)."""
    import dis

    previous = None
    for ins in dis.get_instructions(code):
        if ins.opname == "RETURN_CONST" and ins.argval not in (None, False):
            return False
        if ins.opname == "RETURN_VALUE" and not (
            previous is not None and previous.opname == "LOAD_CONST" and previous.argval in (None, False)
        ):
            return False
        if ins.opname in ("YIELD_VALUE", "RETURN_GENERATOR"):
            return False
        previous = ins
    return True


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
    """``owner.name`` without running the program's code: of a module or class, ``getattr``; of any other
    object, the value stored in it or its class (``inspect.getattr_static``: no property or ``__getattr__``
    runs), such as ``self.retry_on`` or ``self._lock``; of a ``unittest.TestCase``, the class's function."""
    import types

    if owner is _MISSING:
        return _MISSING
    if isinstance(owner, (types.ModuleType, type)):
        return getattr(owner, name, _MISSING)
    unittest = sys.modules.get("unittest.case")
    if unittest is not None and isinstance(owner, unittest.TestCase):
        return getattr(type(owner), name, _MISSING)
    import inspect

    value = inspect.getattr_static(owner, name, _MISSING)
    if isinstance(value, (types.FunctionType, property, staticmethod, classmethod)):
        return _MISSING  # a descriptor: what it gives is the program's business
    return value


def _resolve(expression: Any, frame: Any) -> Any:
    """The value of a clause's class expression in ``frame`` (``_MISSING`` if unknown)."""
    if isinstance(expression, list):
        return _chain(expression, frame)
    return _evaluate(expression, frame)


_LOADS = {
    "LOAD_GLOBAL": "gb",
    "LOAD_NAME": "lgb",
    "LOAD_DEREF": "l",
    "LOAD_CLASSDEREF": "lgb",
    "LOAD_FROM_DICT_OR_DEREF": "l",
    "LOAD_FROM_DICT_OR_GLOBALS": "lgb",
}
_SKIP = frozenset({"PUSH_NULL", "PRECALL", "NOP", "CACHE", "EXTENDED_ARG", "KW_NAMES"})


def _loads(op: str) -> bool:
    return op in _LOADS or op.startswith("LOAD_FAST")


def _chain(instructions: list[Any], frame: Any) -> Any:
    """Evaluate a short run of load instructions (no side effects: names, attributes, constants, tuples)."""
    stack: list[Any] = []
    for ins in instructions:
        op = ins.opname
        if op in _SKIP:
            continue
        if _loads(op):
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
        else:
            return _MISSING
    return stack[-1] if len(stack) == 1 else _MISSING


def _manager(expression: Any, frame: Any) -> tuple[Any, Any, Any]:
    """A ``with`` statement's context expression in ``frame``: ("call", callee, args or None), ("object",
    value, None), or (None, why, None)."""
    if expression is None:
        return None, "a with statement fsguard cannot read", None
    if not isinstance(expression, list):
        return _evaluate_manager(expression, frame)
    run = [ins for ins in expression if ins.opname not in _SKIP]
    head = _attributes(run, 0)
    if head == len(run):
        value = _chain(run, frame)
        return (
            (None, "a context manager fsguard cannot resolve", None) if value is _MISSING else ("object", value, None)
        )
    if not run[-1].opname.startswith("CALL") or head == 0:
        return None, "a context expression fsguard cannot read", None
    owner = _chain(run[: head - 1], frame) if head > 1 else _MISSING
    callee, bound = _method(owner, run[head - 1].argval) if head > 1 else (_MISSING, [])
    args: list[Any] | None = bound
    if callee is _MISSING:
        callee = _chain(run[:head], frame)
    if callee is _MISSING:
        return None, "a context manager fsguard cannot resolve", None
    n = head
    while args is not None and n < len(run) - 1:
        end = _attributes(run, n)
        if end == n:
            args = None
        else:
            args.append(_chain(run[n:end], frame))
            n = end
    return "call", callee, tuple(args) if args is not None else None


def _attributes(run: list[Any], n: int) -> int:
    """The end of the attribute chain (``a.b.c``, or a constant) starting at ``run[n]``."""
    if n >= len(run) or not (_loads(run[n].opname) or run[n].opname == "LOAD_CONST"):
        return n
    m = n + 1
    while m < len(run) and run[m].opname in ("LOAD_ATTR", "LOAD_METHOD") and run[n].opname != "LOAD_CONST":
        m += 1
    return m


def _method(owner: Any, name: str) -> tuple[Any, list[Any]]:
    """A ``@contextmanager`` method of an instance (``self.accelerator.main_process_first``): (its function,
    [the instance] as its first argument); (``_MISSING``, []) for anything else."""
    import inspect
    import types

    if owner is _MISSING or isinstance(owner, (types.ModuleType, type)):
        return _MISSING, []
    function = inspect.getattr_static(owner, name, _MISSING)
    if isinstance(function, types.FunctionType) and _is_contextmanager(function):
        return function, [owner]
    return _MISSING, []


def _evaluate(node: Any, frame: Any) -> Any:
    import ast

    if isinstance(node, ast.Name):
        return _lookup(frame, node.id, "lgb")
    if isinstance(node, ast.Attribute):
        return _attribute(_evaluate(node.value, frame), node.attr)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e, frame) for e in node.elts)
    if isinstance(node, ast.Constant):
        return node.value
    return _MISSING


def _evaluate_manager(node: Any, frame: Any) -> tuple[Any, Any, Any]:
    import ast

    if isinstance(node, ast.Call):
        callee, bound = _MISSING, list[Any]()
        if isinstance(node.func, ast.Attribute):
            callee, bound = _method(_evaluate(node.func.value, frame), node.func.attr)
        if callee is _MISSING:
            callee = _evaluate(node.func, frame)
        if callee is _MISSING:
            return None, "a context manager fsguard cannot resolve", None
        simple = all(isinstance(a, (ast.Name, ast.Attribute, ast.Constant, ast.Tuple)) for a in node.args)
        args = tuple([*bound, *(_evaluate(a, frame) for a in node.args)]) if simple and not node.keywords else None
        return "call", callee, args
    value = _evaluate(node, frame)
    if value is _MISSING:
        return None, "a context manager fsguard cannot resolve", None
    return "object", value, None


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
            at = _cleanup_reraise(instructions, n)
            if at is None:
                return [*layers, ("unknown", f"handler starting with {first.opname}")]
        elif second.opname == "WITH_EXCEPT_START":
            layers.append(("with", *_with_call(instructions, index, table, target)))
            at = next_reraise(n + 1, 6)
        elif any(ins.opname == "CHECK_EG_MATCH" for ins in instructions[n : n + 12]):
            return [*layers, ("unknown", "except* (an exception group's handler)")]
        elif second.opname == "POP_TOP":
            layers.append(("bare", "except", _fate(instructions, index, n + 2)))
            at = instructions[n + 2].offset  # its body's own handler leads outwards (when it raises)
        else:
            clauses, at, bare = _clauses(instructions, index, n + 1)
            if clauses is None:
                at = next_reraise(n + 1)  # no clause: a finally block, which re-raises at its end
            elif clauses == "unknown":
                return [*layers, ("unknown", "an except clause fsguard cannot read")]
            else:
                layers.append(
                    ("except", [(run, label, _fate(instructions, index, body)) for run, label, body in clauses])
                )
                if bare is not None:
                    layers.append(("bare", "except", _fate(instructions, index, bare)))
                    at = instructions[bare].offset
    return [*layers, ("unknown", "too deep")]


def _cleanup_reraise(instructions: list[Any], n: int) -> int | None:
    """The offset of the RERAISE ending a cleanup that starts at instruction ``n``: other cleanups than a
    handler's re-raise after restoring state (an inlined comprehension's variable, a generator's StopIteration
    check): a few stack moves, then RERAISE. None: not such a cleanup."""
    for ins in instructions[n : n + 8]:
        if ins.opname == "RERAISE":
            offset: int = ins.offset
            return offset
        if ins.opname not in _CLEANUP_OPS:
            return None
    return None


_CLEANUP_OPS = frozenset(
    {"SWAP", "POP_TOP", "STORE_FAST", "STORE_FAST_MAYBE_NULL", "CALL_INTRINSIC_1", "COPY", "NOP", "LOAD_CONST"}
)
_EXITS: dict[tuple[Any, Any], tuple[str]] = {
    ("sys", "exit"): ("exit",),
    ("os", "_exit"): ("end",),
    ("os", "abort"): ("end",),
}


def _fate(instructions: list[Any], index: dict[int, int], body: int) -> tuple[Any, ...]:
    """What a handler whose body starts at instruction ``body`` does with the error: ("swallow",) when a path
    leaves the handler normally (``POP_EXCEPT``), else ("raise", what its paths raise). A path that leaves it
    normally after handing the error to a function of the program (``self._handle_exception(e)``, ignite's
    engine) raises what that function raises, if it raises: ("delegate", callee, label), read at the search.
    Normal flow only, bounded."""
    todo: list[tuple[int, Any]] = [(body, None)]
    seen: set[tuple[int, Any]] = set()
    raised: list[tuple[Any, ...]] = []
    named = instructions[body].argval if instructions[body].opname.startswith("STORE_") else None  # ``as e``
    while todo:
        n, delegate = todo.pop()
        if n >= len(instructions) or (n, delegate) in seen:
            continue
        if len(seen) > 2000:
            return ("raise", (("unknown", "a handler too long to read"),))
        seen.add((n, delegate))
        ins = instructions[n]
        op = ins.opname
        if op == "RERAISE" or (op == "RAISE_VARARGS" and ins.arg == 0):
            raised.append(("same",))
            continue
        if op == "RAISE_VARARGS":
            raised.append(_raised(instructions, n, named))
            continue
        if op in ("RETURN_VALUE", "RETURN_CONST", "POP_EXCEPT"):
            if delegate is None:
                return ("swallow",)
            run = [i for i in instructions[delegate[0] : delegate[1]] if i.opname not in _SKIP]
            raised.append(("delegate", run, _label(run)))
            continue
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            after = instructions[n + 1] if n + 1 < len(instructions) else None
            attribute = after.argval if after is not None and after.opname in ("LOAD_ATTR", "LOAD_METHOD") else None
            ending = _EXITS.get((ins.argval, attribute)) or (("exit",) if ins.argval in ("exit", "quit") else None)
            if ending is not None:
                raised.append(ending)
                continue
        if op.startswith("CALL") and named is not None:
            delegate = _delegation(instructions, n, named) or delegate
        if "JUMP" in op or op == "FOR_ITER":
            target = index.get(ins.argval) if isinstance(ins.argval, int) else None
            if target is not None:
                todo.append((target, delegate))
            if op.startswith(("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_ABSOLUTE")) or op == "JUMP":
                continue  # unconditional
        todo.append((n + 1, delegate))
    return ("raise", _unique(raised)) if raised else ("swallow",)


def _delegation(instructions: list[Any], n: int, named: Any) -> tuple[int, int] | None:
    """For a call at instruction ``n`` of one argument, the handler's own error (``f(e)``, ``self.handle(e)``):
    the instruction range of its callee's attribute chain; else None."""
    if instructions[n].arg != 1:
        return None
    m = n - 1
    while m >= 0 and instructions[m].opname in _SKIP:
        m -= 1
    if m < 1 or not instructions[m].opname.startswith("LOAD_FAST") or instructions[m].argval != named:
        return None
    k = m - 1
    while k >= 0 and instructions[k].opname in _SKIP:
        k -= 1
    end = k + 1
    while k >= 0 and instructions[k].opname in ("LOAD_ATTR", "LOAD_METHOD"):
        k -= 1
    if k < 0 or not _loads(instructions[k].opname) or isinstance(instructions[k].argval, tuple):
        return None
    return k, end


def _delegated(run: list[Any], frame: Any) -> bool:
    """Whether the function a handler hands its error to (``self._handle_exception(e)``) raises it on every
    path, as the frame's state now decides its branches (``if Events.EXCEPTION_RAISED in self._event_handlers:
    ... else: raise e``). False when unsure."""
    import builtins
    import types

    found = _callee(run, frame)
    if found is None:
        return False
    function, bound = found
    code = function.__code__
    if code.co_flags & (0x20 | _ASYNC) or code.co_argcount - len(bound) != 1:
        return False
    scope = types.SimpleNamespace(f_locals=bound, f_globals=function.__globals__, f_builtins=vars(builtins))
    return _raises_on_every_path(code, code.co_varnames[len(bound)], scope)


def _callee(run: Any, frame: Any) -> tuple[Any, dict[str, Any]] | None:
    """The plain function a handler hands its error to, with ``self`` bound where it is a method; None: not one."""
    import ast
    import inspect
    import types

    bound: dict[str, Any] = {}
    if isinstance(run, ast.Attribute):  # 3.10: the callee's ast
        owner, name = _evaluate(run.value, frame), run.attr
    elif isinstance(run, list) and len(run) > 1:
        owner, name = _chain(run[:-1], frame), run[-1].argval
    else:
        owner, name = None, None
    if name is None or owner is _MISSING or isinstance(owner, (types.ModuleType, type)):
        function = _resolve(run, frame)
    else:
        function = inspect.getattr_static(owner, name, _MISSING)
        if isinstance(function, types.FunctionType) and function.__code__.co_argcount >= 2:
            bound[function.__code__.co_varnames[0]] = owner  # self
    if not isinstance(function, types.FunctionType):
        return None
    return function, bound


def _raises_on_every_path(code: Any, parameter: str, scope: Any) -> bool:
    """Whether ``code`` raises its ``parameter`` on every path through its branches, those that ``scope`` (the
    callee's bound ``self``, its globals) decides taken one way. False when unsure."""
    import dis

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
            start = _operand(instructions, k)
            value = _condition(instructions[start:k], scope) if start is not None else _MISSING
            if target is None:
                return False
            if value is _MISSING:
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
    """The value of a branch's condition made only of names, attributes, constants and ``in``/``is`` on plain
    containers (``Events.EXCEPTION_RAISED in self._event_handlers``); ``_MISSING`` for anything else."""
    stack: list[Any] = []
    for ins in run:
        op = ins.opname
        if op in _SKIP:
            continue
        if op == "CONTAINS_OP" or op == "IS_OP":
            if len(stack) < 2:
                return _MISSING
            right, left = stack.pop(), stack.pop()
            if _MISSING in (left, right):
                return _MISSING
            if op == "IS_OP":
                stack.append((left is right) != bool(ins.arg))
                continue
            if isinstance(right, dict):
                found = dict.__contains__(right, left)
            elif isinstance(right, (set, frozenset)):
                found = (
                    set.__contains__(set(right), left)
                    if isinstance(right, frozenset)
                    else set.__contains__(right, left)
                )
            else:
                return _MISSING
            stack.append(found != bool(ins.arg))
            continue
        if op == "TO_BOOL":  # 3.13+: before the jump
            continue
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            if not stack:
                return _MISSING
            stack.append(_attribute(stack.pop(), ins.argval))
        elif _loads(op) or op == "LOAD_CONST":
            stack.append(_chain([ins], scope))
        else:
            return _MISSING
    return stack[0] if len(stack) == 1 else _MISSING


def _unique(raised: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    unique: list[tuple[Any, ...]] = []
    for item in raised:
        if item not in unique:
            unique.append(item)
    return tuple(unique)


def _raised(instructions: list[Any], n: int, named: Any) -> tuple[Any, ...]:
    """What ``raise X`` / ``raise X from Y`` at instruction ``n`` raises: the same error (``raise e``), a class
    (``raise AlreadyExistsError(...)``, ``raise errors.X``), or unknown."""
    end = n
    if instructions[n].arg == 2:  # ``from Y``: the cause's expression is the last operand
        start = _operand(instructions, n)
        if start is None:
            return ("unknown", "a raise statement fsguard cannot read")
        end = start
    start = _operand(instructions, end)
    if start is None:
        return ("unknown", "a raise statement fsguard cannot read")
    run = [ins for ins in instructions[start:end] if ins.opname not in _SKIP]
    head = _attributes(run, 0)
    if head == 0:
        return ("unknown", "a raise statement fsguard cannot read")
    if head == len(run) and head == 1 and run[0].argval == named and named is not None:
        return ("same",)
    if head == len(run) or run[-1].opname.startswith("CALL"):
        return ("class", run[:head], _label(run[:head]))
    return ("unknown", "a raise statement fsguard cannot read")


def _operand(instructions: list[Any], end: int) -> int | None:
    """The first instruction of the straight-line expression that leaves the value under the top of the stack
    just before instruction ``end`` (None where a jump or anything unusual is in the way)."""
    import dis

    total = 0
    for i in range(end - 1, max(end - 64, -1), -1):
        ins = instructions[i]
        if "JUMP" in ins.opname or ins.opname.startswith(("RETURN", "RAISE", "RERAISE", "POP_EXCEPT", "STORE")):
            return None
        try:
            total += dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return None
        if total >= 1:  # a load that also pushes a NULL (a call's callable) may step from 0 to 2
            return i
    return None


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
        elif ins.opname == "LOAD_CONST":
            parts.append(repr(ins.argval))
        elif ins.opname.startswith("LOAD"):
            parts.append(str(ins.argval))
    return " ".join(parts)


def _with_call(
    instructions: list[Any], index: dict[int, int], table: list[tuple[int, int, int]], target: int
) -> tuple[list[Any] | None, str]:
    """The instructions of a ``with`` statement's context expression (``suppress(A, B)``, ``open(...)``,
    ``self._lock``) and a label; None where fsguard cannot find them."""
    starts = [start for start, _, t in table if t == target]
    n = index.get(min(starts)) if starts else None
    consumer = _with_entry(instructions, n)
    if consumer is None:
        return None, "with"
    start = _operand(instructions, consumer)
    if start is None:
        return None, "with"
    run = instructions[start:consumer]
    plain = [ins for ins in run if ins.opname not in _SKIP]
    head = _attributes(plain, 0)
    if head == len(plain):
        return run, f"with {_label(plain)}"
    words, m = [], head
    while m < len(plain) - 1:
        end = _attributes(plain, m)
        if end == m:
            return run, f"with {_label(plain[:head])}(...)"
        words.append(_label(plain[m:end]))
        m = end
    return run, f"with {_label(plain[:head])}({', '.join(words)})"


# How a ``with`` statement enters its manager, the instructions just before its protected block: up to 3.13
# ``BEFORE_WITH``; from 3.14 the two special methods are loaded and ``__enter__`` called.
_ENTRY_314 = ("COPY", "LOAD_SPECIAL", "SWAP", "SWAP", "LOAD_SPECIAL", "CALL")


def _with_entry(instructions: list[Any], n: int | None) -> int | None:
    """The index of the instruction that takes the context manager off the stack, for a ``with`` block whose
    protected region starts at instruction ``n`` (None where the shape is not one fsguard knows)."""
    if n is None or n < 2:
        return None
    if instructions[n - 1].opname == "BEFORE_WITH":
        return n - 1
    first = n - len(_ENTRY_314)
    if first > 0 and tuple(ins.opname for ins in instructions[first:n]) == _ENTRY_314:
        return first
    return None


# --- 3.10: the source's ast ---------------------------------------------------------------------------------


def _source_tree(code: Any, module_globals: Any) -> Any:
    """The parsed source of ``code``'s file (cached per file name while its text is the same), or the reason
    there is none (a string)."""
    import ast
    import linecache

    lines = linecache.getlines(code.co_filename, module_globals)
    if not lines:
        return "no source"
    text = "".join(lines)
    trees = STATE.caches.source_trees
    tree = trees.get(code.co_filename)
    if tree is None or tree[0] != text:
        try:
            tree = (text, ast.parse(text))
        except (SyntaxError, ValueError):
            return "source does not parse"
        if len(trees) > 256:
            trees.clear()
        trees[code.co_filename] = tree
    return tree[1]


def _source_layers(code: Any, line: int, module_globals: Any) -> list[_Layer]:
    import ast

    blocks = (ast.stmt, ast.excepthandler)
    node: Any = _source_tree(code, module_globals)
    if isinstance(node, str):
        return [("unknown", node)]
    chain: list[Any] = []
    scope: Any = None
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
            chain, scope = [], inner
        elif isinstance(inner, (ast.Try, ast.With, ast.AsyncWith)) or type(inner).__name__ == "TryStar":
            chain.append(inner)
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
        if type(block).__name__ == "TryStar":
            return [*layers, ("unknown", "except* (an exception group's handler)")]
        if isinstance(block, ast.Try):
            clauses: list[tuple[Any, str, tuple[Any, ...]]] = []
            for clause in block.handlers:
                fate = _source_fate(clause)
                if clause.type is None:
                    if clauses:
                        layers.append(("except", clauses))
                    layers.append(("bare", "except", fate))
                    clauses = []
                    break
                clauses.append((clause.type, "except " + ast.unparse(clause.type), fate))
            if clauses:
                layers.append(("except", clauses))
        else:
            if line == block.lineno or line <= max(i.context_expr.end_lineno or 0 for i in block.items):
                return [*layers, ("unknown", "with statement and its body on one line")]
            if isinstance(block, ast.AsyncWith):
                return [*layers, ("unknown", "an async with block")]
            for item in reversed(block.items):
                layers.append(("with", item.context_expr, "with " + ast.unparse(item.context_expr)))
    return layers


def _source_fate(clause: Any) -> tuple[Any, ...]:
    """A handler's fate from its source: it raises on every path when its last statement raises (or exits)
    and nothing in it returns, breaks or continues."""
    import ast

    body = clause.body
    nodes: list[Any] = []
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        nodes.append(node)
        todo.extend(ast.iter_child_nodes(node))
    if any(isinstance(node, (ast.Return, ast.Break, ast.Continue)) for node in nodes):
        return ("swallow",)
    raised: list[tuple[Any, ...]] = []
    last = body[-1] if body else None
    call = last.value if isinstance(last, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, (ast.Name, ast.Attribute))
        and [type(a) for a in call.args] == [ast.Name]
        and call.args[0].id == clause.name  # type: ignore[attr-defined]
        and not call.keywords
    ):
        raised.append(("delegate", call.func, ast.unparse(call.func)))  # ``self._handle_exception(e)``
    elif not (isinstance(last, ast.Raise) or (last is not None and _source_exit(last) is not None)):
        return ("swallow",)
    for node in nodes:
        ending = _source_exit(node) if isinstance(node, ast.Expr) else None
        if ending is not None:
            raised.append(ending)
        elif isinstance(node, ast.Raise):
            exc = node.exc
            if exc is None or (isinstance(exc, ast.Name) and exc.id == clause.name):
                raised.append(("same",))
            else:
                target = exc.func if isinstance(exc, ast.Call) else exc
                if isinstance(target, (ast.Name, ast.Attribute)):
                    raised.append(("class", target, ast.unparse(target)))
                else:
                    raised.append(("unknown", "a raise statement fsguard cannot read"))
    return ("raise", _unique(raised))


def _source_exit(statement: Any) -> tuple[str] | None:
    import ast

    call = statement.value if isinstance(statement, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    if isinstance(func, ast.Name) and func.id in ("exit", "quit"):
        return ("exit",)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        ending = _EXITS.get((func.value.id, func.attr))
        return (ending[0],) if ending else None
    return None

"""The standard library's own ``rmtree`` code, copied for one walk. Its ``os`` is the walk's ``Position`` (``checked``),
or ``os`` with fsguard's wrappers taken off (``plain``).

The walk is the running interpreter's own code (3.10's recursive ``_rmtree_safe_fd`` to 3.13's stack), run with
fsguard's ``os.open``, ``os.unlink`` and ``os.rmdir`` in place of the real ones: so the symlink-attack protection,
the order of calls, the ``(func, path, exc)`` every handler gets (mapped back to ``os.open``/``os.unlink``/
``os.rmdir`` by ``real``), ``dir_fd`` and the exceptions are the standard library's by construction, version by
version. Each call's walk is its own copy: no state is kept between calls or per thread.
"""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from ..state import STATE
from .position import Position
from .tree import unguarded

_WALKERS = ("_rmtree_safe_fd", "_rmtree_unsafe", "_rmtree_safe_fd_step")  # shutil's functions rmtree calls
# The names of ``os`` every version's walk reads (``_Os``'s; ``_unguarded_os``'s, made again when one changes)
_OS_NAMES = (
    "O_NONBLOCK",
    "O_RDONLY",
    "fsdecode",
    "fstat",
    "path",
    "close",
    "lstat",
    "open",
    "rmdir",
    "scandir",
    "unlink",
)


class _Os:
    """``os`` for one checked walk. ``lstat``, ``open``, ``unlink``, ``rmdir``, ``close`` and ``scandir`` are the walk's
    ``Position``'s, which report each step to it (and ask it, through ``check``, whether the tree is still at its path).
    The other names every version's walk reads (``os.path``, ``os.O_RDONLY``, ``os.fstat``...) are ``os``'s own, read
    when the walk starts; any other name is read live. So a test or program that swaps ``os.fstat`` before the call is
    obeyed. (Issue 47: a name missed here costs the walk an ``AttributeError`` and a Python call at each read, ten a
    small walk: an eighth of a checked walk's own instructions.)"""

    __slots__ = (
        *("O_NONBLOCK", "O_RDONLY", "fsdecode", "fstat", "path"),
        *("close", "lstat", "open", "rmdir", "scandir", "unlink"),
    )

    def __init__(self, position: Position) -> None:
        self.O_RDONLY, self.fsdecode, self.fstat, self.path = os.O_RDONLY, os.fsdecode, os.fstat, os.path
        nonblock = getattr(os, "O_NONBLOCK", None)  # 3.13+ (not on Windows)
        if nonblock is not None:
            self.O_NONBLOCK = nonblock
        # Bound once: the standard walk compares them by identity (3.13+: ``func is os.rmdir``).
        self.lstat = position.lstat
        self.open = position.open
        self.unlink = position.unlink
        self.rmdir = position.rmdir
        self.close = position.close
        self.scandir = position.scandir

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def real(func: Any) -> Any:
    """The function a handler is told about, as the program sees it. ``os.open`` for the walk's ``Position.open``,
    ``os.unlink`` (fsguard's wrapper) for the unwrapped ``unlink`` of a plain walk, and so on."""
    if isinstance(getattr(func, "__self__", None), Position):
        return getattr(os, func.__name__)
    name = getattr(func, "__name__", None)
    if name is not None and func is STATE.originals.get(name):
        return getattr(os, name, func)
    return func


class _Globals(dict[str, Any]):
    """The globals of one checked walk. ``shutil``'s own, as they are when the walk first reads each name, with ``os``
    replaced. A test or program that swaps ``shutil._rmtree_safe_fd`` or ``_use_fd_functions`` before the call is
    obeyed. The standard walk functions ``rmtree`` calls are copied to see these globals too. Each name is looked up
    once per walk, builtins included, then read from here at a plain dictionary's speed."""

    def __init__(self, module: dict[str, Any], proxy: _Os) -> None:
        super().__init__(os=proxy, __builtins__=module.get("__builtins__", __builtins__))
        self._module = module

    def __missing__(self, name: str) -> Any:
        module = self._module
        if name in module:
            value = module[name]
            # A walker by its own name (3.13 calls ``_rmtree_impl``); a program's own replacement runs as it is.
            if isinstance(value, types.FunctionType) and value.__name__ in _WALKERS and value.__globals__ is module:
                value = _clone(value, self)
        else:
            value = _builtin(self["__builtins__"], name)
        self[name] = value
        return value


def _builtin(builtins: Any, name: str) -> Any:
    """A builtin by name; ``KeyError`` (Python's ``NameError``) if none. ``__builtins__`` is a module or its dict."""
    found = builtins if isinstance(builtins, dict) else vars(builtins)
    return found[name]


def checked(original: Any, position: Position) -> Callable[..., Any] | None:
    """The standard ``rmtree`` made to report to ``position``, or None. It is a copy for this walk: its globals say
    which position. None where ``original`` is not the standard library's Python ``rmtree``. That one then runs as it
    is, without the position checks."""
    module = getattr(original, "__globals__", None)
    if not (isinstance(original, types.FunctionType) and module is vars(shutil) and original.__name__ == "rmtree"):
        return None
    return _clone(original, _Globals(module, _Os(position)))


def _clone(function: types.FunctionType, namespace: dict[str, Any]) -> types.FunctionType:
    copy = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    return copy


def _unguarded_os() -> types.ModuleType:
    """``os`` for a plain walk, with fsguard's wrappers taken off. A module (its attributes are read as fast as
    ``os``'s own) with ``os``'s names as they are now. The walk's functions (``_OS_NAMES``) are unwrapped
    (``unguarded``: a program's or a test's own replacement stays)."""
    proxy = types.ModuleType(os.__name__, os.__doc__)
    proxy.__dict__.update((name, value) for name, value in vars(os).items() if not name.startswith("__"))
    for name in _OS_NAMES:
        if hasattr(os, name):
            setattr(proxy, name, unguarded(name))
    return proxy


class _Plain(NamedTuple):
    """One copy of the plain walk, and ``unchanged``: whether it is still current."""

    remover: Callable[..., Any]
    unchanged: Callable[[Any], bool]


class _PlainWalk:
    """The plain walk's copy of the standard ``rmtree``, kept while fsguard is installed. One record, replaced whole:
    threads that make it at once each keep a consistent one."""

    __slots__ = ("made",)

    def __init__(self) -> None:
        self.made: _Plain | None = None

    def clear(self) -> None:
        self.made = None


PLAIN = STATE.caches.register(_PlainWalk())


def plain(original: Any) -> Callable[..., Any] | None:
    """The standard ``rmtree`` whose walk calls ``os``'s own functions, not fsguard's wrappers, or None. For a tree no
    peer can move meanwhile (a plain walk, not serialized): each step through a wrapper that only passes it on cost
    3,800 instructions (issue 47). The code is the running interpreter's, so the walk, its calls and the
    ``(func, path, exc)`` every handler gets (mapped back by ``real``) are the standard library's. The copy is kept,
    and made again when the original, a ``shutil`` name its walk reads or one of ``_OS_NAMES`` changed: a test or
    program that swaps one is obeyed. None where ``original`` is not the standard Python ``rmtree``, where ``shutil``
    walks by path (``_use_fd_functions`` false: each step of that walk is a call fsguard remembers), and where a
    program gave ``shutil`` another ``os``."""
    made = PLAIN.made
    if made is not None:
        try:
            if made.unchanged(original):  # (it reads _use_fd_functions and os too)
                return made.remover
        except AttributeError:  # a name it read is gone: made again, or none
            pass
    module = getattr(original, "__globals__", None)
    if not (isinstance(original, types.FunctionType) and module is vars(shutil) and original.__name__ == "rmtree"):
        return None
    if module.get("_use_fd_functions") is not True or module.get("os") is not os:
        return None
    made = _make_plain(original, module)
    if made is None:
        return None
    PLAIN.made = made
    return made.remover


def _make_plain(original: types.FunctionType, module: dict[str, Any]) -> _Plain | None:
    """Copy ``original`` and its walkers into one namespace. It is ``shutil``'s as it is now, ``os`` unguarded."""
    namespace = dict(module)
    namespace["os"] = _unguarded_os()
    for name, value in module.items():
        if isinstance(value, types.FunctionType) and value.__name__ in _WALKERS and value.__globals__ is module:
            namespace[name] = _clone(value, namespace)
    read = [name for name in _OS_NAMES if hasattr(os, name)]
    try:
        unchanged = _unchanged(original, sorted(_global_names(original, module)), read)
    except AttributeError:  # changed meanwhile
        return None
    return _Plain(_clone(original, namespace), unchanged)


def _global_names(original: types.FunctionType, module: dict[str, Any]) -> set[str]:
    """The names of ``module`` that ``original`` and the walkers (with their nested code) may read."""
    codes = [original.__code__] + [
        value.__code__
        for value in module.values()
        if isinstance(value, types.FunctionType) and value.__name__ in _WALKERS
    ]
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(name for name in code.co_names if name in module)
        codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


def _unchanged(original: Any, shutil_names: list[str], os_names: list[str]) -> Callable[[Any], bool]:
    """A function: whether the original given and these ``shutil`` and ``os`` names are as now. Each name is the
    object it is now (``AttributeError`` where one is gone). Written out as attribute reads of the two modules, which
    the interpreter specializes, with the objects as its defaults: ``operator.itemgetter`` reads of ``vars(os)`` cost
    every small ``rmtree`` 8,500 instructions, these 3,200 (issue 47)."""
    reads = [("shutil", name) for name in shutil_names] + [("os", name) for name in os_names]
    if not all(name.isidentifier() for _, name in reads):  # (code names and _OS_NAMES are)
        raise AttributeError("not a name")
    modules = {"shutil": shutil, "os": os}
    values = [getattr(modules[module], name) for module, name in reads]
    tests = "".join(f" and {module}.{name} is _{k}" for k, (module, name) in enumerate(reads))
    defaults = "".join(f", _{k}=_values[{k}]" for k in range(len(reads)))
    source = f"def unchanged(given, shutil=shutil, os=os, original=original{defaults}):\n"
    source += f"    return given is original{tests}\n"
    namespace = {"shutil": shutil, "os": os, "original": original, "_values": values}
    exec(compile(source, "<fsguard.rmwalk.standard: the plain walk's names>", "exec"), namespace)
    unchanged: Callable[[Any], bool] = namespace["unchanged"]
    return unchanged

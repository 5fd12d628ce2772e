"""The standard library's own ``rmtree`` code, copied for one walk. Its ``os`` is the walk's ``Position``.

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
from typing import Any

from .position import Position

_WALKERS = ("_rmtree_safe_fd", "_rmtree_unsafe", "_rmtree_safe_fd_step")  # shutil's functions rmtree calls


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
    """The function a handler is told about: ``os.open`` for the walk's ``Position.open``, and so on."""
    return getattr(os, func.__name__) if isinstance(getattr(func, "__self__", None), Position) else func


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

"""The frame walk: follow an error outwards, frame by frame, to its thread's top."""

from __future__ import annotations

import sys
from typing import Any

from ..operations import OPERATIONS
from ..runtime import site_dirs
from ..state import STATE
from . import judge, layers
from .values import Converts, Decides, Ends, Passes

CONVERSIONS = 8  # converting handlers followed, one after the other
_ASYNC = 0x80 | 0x100 | 0x200  # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR
# Modules whose handlers hand the error to another frame or thread (a future, a pool's result, a task).
_CARRIERS = ("concurrent.futures", "multiprocessing.pool", "asyncio")


def walk(cls: type[BaseException], frame: Any, first: int, conversions: int) -> dict[str, Any] | None:
    """Follow an error of class ``cls`` outwards from ``frame``, its layers from ``first`` on. None: it ends its thread
    or process (a would-be crash)."""
    own, applications, _, _ = site_dirs()
    passing = _pass_through()
    up = 0
    while frame is not None:
        code = frame.f_code
        top = _top(code, frame)
        if top is not None:
            return None if top == "" else _at(frame, {"reason": top}, up)
        if code.co_name == "__del__":  # the interpreter reports its error as unraisable, and goes on
            return _at(frame, {"reason": "an error in __del__ is reported, not raised"}, up)
        filename = code.co_filename
        if not ((filename.startswith(own) and not filename.startswith(applications)) or code in passing):
            found = layers.at_frame(frame)
            for index in range(first, len(found)):
                outcome = judge.layer(cls, found[index], frame)
                if isinstance(outcome, Passes):
                    continue
                if isinstance(outcome, Ends):
                    return None
                if isinstance(outcome, Converts):
                    return _converted(outcome, frame, index, conversions, up)
                return _at(frame, _decided(outcome), up)
            up += 1
        first = 0
        if code.co_flags & _ASYNC and (frame.f_back is None or not frame.f_back.f_code.co_flags & _ASYNC):
            why = "a coroutine's error goes to whatever drives it (an asyncio task, a caller's await)"
            return _at(frame, {"reason": why, "carried": "coroutine"}, max(up - 1, 0))
        frame = frame.f_back
    return _at_top()


def _converted(outcome: Converts, frame: Any, index: int, conversions: int, up: int) -> dict[str, Any] | None:
    """A converting handler: each class it raises goes on outwards from the next layer."""
    if conversions <= 0:
        return _at(frame, {"reason": "too many converting handlers"}, up)
    for converted in outcome.classes:
        found = walk(converted, frame, index + 1, conversions - 1)
        if found is not None:
            found.setdefault("converted", converted.__name__)
            found.setdefault("frames_up", up)
            return found
    return None


def _decided(outcome: Decides) -> dict[str, Any]:
    found: dict[str, Any] = {"reason": outcome.reason}
    if outcome.handler is not None:
        found["handler"] = outcome.handler
    if outcome.inside is not None:
        found["inside"] = outcome.inside
    return found


def _at(frame: Any, found: dict[str, Any], up: int) -> dict[str, Any]:
    found["frame"] = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    if up:
        found["frames_up"] = up
    module = frame.f_globals.get("__name__")
    if isinstance(module, str) and module.startswith(_CARRIERS) and "carried" not in found:
        found["carried"] = module
    return found


def _top(code: Any, frame: Any) -> str | None:
    """What decides at a thread's or process's top frame; None: not a top. "" where the error ends it (the default
    hooks), the reason where the program's own hook decides."""
    threading = sys.modules.get("threading")
    thread = getattr(getattr(threading, "Thread", None), "_bootstrap_inner", None)
    if thread is not None and code is thread.__code__:
        if threading.excepthook is threading.__excepthook__:  # type: ignore[union-attr]
            return ""
        return "a program-set threading.excepthook decides (a supervised thread)"
    process = sys.modules.get("multiprocessing.process")
    function = getattr(getattr(process, "BaseProcess", None), "_bootstrap", None)
    if function is not None and code is function.__code__:
        return ""  # reports, exit status 1
    return None


def _at_top() -> dict[str, Any] | None:
    """The first frame of an unknown thread, or the main thread's: its hook decides."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.current_thread() is not threading.main_thread():
        return {"reason": "the top of a thread fsguard does not know"}
    if not _reports_only(sys.excepthook):
        return {"reason": "a program-set sys.excepthook decides"}
    return None


# Hooks known to report and then call the hook they replaced, in the closure cell named here: torch's
# ``init_process_group`` prefixes each line with ``[rankN]:`` (every torchrun job that made a process group).
_REPORTING_HOOKS: dict[tuple[Any, Any], str] = {
    ("torch.distributed.distributed_c10d", "_distributed_excepthook"): "old_hook"
}


def _reports_only(hook: Any) -> bool:
    """Whether ``sys.excepthook`` only reports: the default, or a known reporting hook over it (issue 45)."""
    for _ in range(8):
        if hook is sys.__excepthook__:
            return True
        code: Any = getattr(hook, "__code__", None)
        cell = _REPORTING_HOOKS.get((getattr(hook, "__module__", None), getattr(code, "co_name", None)))
        if cell is None:
            return False
        try:
            hook = hook.__closure__[code.co_freevars.index(cell)].cell_contents
        except (AttributeError, IndexError, TypeError, ValueError):
            return False
    return False


class _PassThrough:
    """The standard wrappers' code objects (``_pass_through``), found once per install (a ``STATE.caches`` cache)."""

    __slots__ = ("codes",)

    def __init__(self) -> None:
        self.codes: frozenset[Any] | None = None

    def clear(self) -> None:
        self.codes = None


PASS_THROUGH = STATE.caches.register(_PassThrough())


def _pass_through() -> frozenset[Any]:
    """Code objects of standard wrappers whose caller decides. Their handlers settle only the caller's own arguments
    (``exist_ok``, ``missing_ok``, ``parents``) or fall back. ``shutil.move`` catches ``OSError`` from ``os.rename`` to
    copy across filesystems; a source a peer moved would fail the copy too."""
    if PASS_THROUGH.codes is None:
        import os
        import pathlib
        import shutil

        functions: list[Any] = [os.makedirs, shutil.move]
        for name in (*(name for op in OPERATIONS.values() for name in op.pathlib), "touch"):
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
        PASS_THROUGH.codes = frozenset(codes)
    return PASS_THROUGH.codes

"""Mechanism: wrap the guarded functions in place with wrapt, and hand every failure to its guard.

The happy path of a wrapped call is: call the original, remember the call (one deque append), return.
Only a failing call reaches a guard's ``decide``; only an absorbed (or conflicting) failure makes a record.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time

import wrapt

from . import config, evidence, launcher, runtime
from .guards import Rules, Verdict
from .guards import makedirs as makedirs_rule
from .guards import rename as rename_rule
from .guards import rmtree as rmtree_rule
from .memory import resolve_fds

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import ModuleType
    from typing import Any

# operation -> (module, attribute, name by which pickles refer to it)
TARGETS: dict[str, tuple[ModuleType, str, str]] = {
    "makedirs": (os, "makedirs", "os:makedirs"),
    "rename": (os, "rename", "os:rename"),
    "replace": (os, "replace", "os:replace"),
    "rmtree": (shutil, "rmtree", "shutil:rmtree"),
    "remove": (os, "remove", "os:remove"),
    "unlink": (os, "unlink", "os:unlink"),  # not an operation name: guarded with "remove", as "remove"
    "mkdir": (os, "mkdir", "os:mkdir"),
    "symlink": (os, "symlink", "os:symlink"),
    "link": (os, "link", "os:link"),
}
_ALSO = {"remove": ("unlink",)}  # operation -> further attributes guarded under its name

_DECIDE: dict[str, Callable[[OSError, tuple[Any, ...], dict[str, Any], Rules], Verdict]] = {
    "makedirs": makedirs_rule.decide,
    "rename": rename_rule.decide,
    "replace": rename_rule.decide,
}
_LATER = ("remove", "mkdir", "symlink", "link")  # rules imported by their first failure, not at startup
# Operations whose calls with directory descriptors pass straight through (neither decided nor remembered:
# the standard rmtree makes one ``unlink(name, dir_fd=...)`` per file), and whose failures inside the standard
# library's own code are left to that code (os.makedirs's mkdir, shutil's walks, tempfile's name claims).
_FAMILY = frozenset(("remove", "mkdir", "symlink", "link"))
_FD_KEYWORDS = ("dir_fd", "src_dir_fd", "dst_dir_fd")
_STDLIB_CALLERS = frozenset(("os", "shutil", "tempfile"))
_PATHLIB_OPTIONS = {"mkdir": "exist_ok", "unlink": "missing_ok"}  # Path method -> its "that is fine" flag

_lock = threading.RLock()
_originals: dict[str, Any] = {}
_serializer: Any = None  # set by fsguard.locks when FSGUARD_SERIALIZE=1


if TYPE_CHECKING:
    _Wrapper = wrapt.FunctionWrapper[Any, Any]
else:  # older wrapt releases are not subscriptable at run time
    _Wrapper = wrapt.FunctionWrapper


class GuardedFunction(_Wrapper):
    """A wrapt function wrapper that pickles and copies as the function it stands for.

    ``pickle`` stores a reference (``os:makedirs``) resolved again on loading, so a pool worker gets its
    own ``os.makedirs``: the real function, or fsguard's wrapper where fsguard is active too.
    """

    def __init__(self, wrapped: Any, wrapper: Any, qualified: str) -> None:
        super().__init__(wrapped, wrapper)
        self._self_qualified = qualified

    def __reduce_ex__(self, protocol: Any) -> Any:
        import pkgutil  # only pickling needs it: not imported at startup

        return (pkgutil.resolve_name, (self._self_qualified,))

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(2)

    def __copy__(self) -> GuardedFunction:
        return self

    def __deepcopy__(self, memo: Any) -> GuardedFunction:
        return self


_rules_for: tuple[object, Rules] | None = None  # (the settings they were made from, the rules)


def _rules() -> Rules:
    """The rules' numbers, made once per settings object (every guarded rmtree asks, not only failures)."""
    global _rules_for
    settings = runtime.settings
    if _rules_for is None or _rules_for[0] is not settings:
        job_start = evidence.job_start(runtime.launch is not None)
        peers = runtime.launch is not None and runtime.launch.distributed
        rules = Rules(settle_s=settings.settle_s, fresh_s=settings.fresh_s, job_start=job_start, peers=peers)
        _rules_for = (settings, rules)
    return _rules_for[1]


def _settle(
    verdict: Verdict, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], error: BaseException | None
) -> bool:
    """Record a verdict that needs one; True when the failure is absorbed."""
    if verdict.decision is not None:
        shown = list(args[:2] if op in ("rename", "replace", "symlink", "link") else args[:1])
        if not shown:
            shown = [kwargs.get(k) for k in ("src", "dst", "name", "path") if k in kwargs]
        runtime.record(op, verdict.decision, verdict.evidence, shown, error, verdict.waited_s, verdict.detail)
    return verdict.absorb


def _inside_makedirs() -> bool:
    """Whether this failing makedirs is the standard makedirs' own call for a missing parent.

    The standard makedirs calls ``makedirs(head, exist_ok=exist_ok)`` through the module attribute, so that
    call is guarded too; its ``FileExistsError`` is caught by the outer standard makedirs, which goes on.
    Deciding (and recording) it here would only add a record for a failure nobody sees.
    """
    code = getattr(_originals.get("makedirs"), "__code__", None)
    frame: Any = sys._getframe(2)  # callers of _decide: guarded_call, then the wrapper (and a serializer)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _left_to_caller(depth: int = 2) -> bool:
    """Whether a failing remove/mkdir/symlink/link is the standard library's own business (the first frame
    outside fsguard and wrapt): ``os.makedirs`` calls ``mkdir`` and is decided itself (one decision, not two),
    shutil's tree walks hand errors to their own handlers, ``tempfile`` claims names by ``mkdir`` and
    ``FileExistsError`` means "try another"; ``Path.mkdir(exist_ok=True)`` and ``Path.unlink(missing_ok=True)``
    settle the very error themselves (a decision there would only add a record). Such calls are not serialized
    either: ``os.makedirs`` already holds the lock on its path, and would wait for itself."""
    frame: Any = sys._getframe(depth)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "wrapt" or module.startswith(("wrapt.", "fsguard."))) or module.startswith(
            ("fsguard.demo", "fsguard.cli")
        ):
            if module == "pathlib" or module.startswith("pathlib."):  # 3.13: pathlib._local
                return (
                    frame.f_code.co_name in _PATHLIB_OPTIONS
                    and frame.f_locals.get(_PATHLIB_OPTIONS[frame.f_code.co_name]) is True
                )
            return module in _STDLIB_CALLERS
        frame = frame.f_back
    return False


def _decide(op: str, error: OSError, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True to absorb. Any failure inside fsguard's own decision means: re-raise the original."""
    if runtime.busy() or (op == "makedirs" and _inside_makedirs()) or (op in _FAMILY and _left_to_caller()):
        return False
    try:
        with runtime.Busy():
            if op not in _DECIDE and op in _LATER:
                _DECIDE[op] = __import__(f"{__package__}.guards.{op}", fromlist=["decide"]).decide
            verdict = _DECIDE[op](error, args, kwargs, _rules())
    except Exception:  # noqa: BLE001 - a broken rule must not change what the caller sees
        return False
    return _settle(verdict, op, args, kwargs, error)


_SERIALIZED = object()  # passed as ``instance``: this call already holds the serializer's locks


def _path_wrapper(op: str) -> Callable[..., Any]:
    remember = evidence.MEMORY.append
    # A move is remembered with its time: a later decision tells this process's own old move of a reused
    # temp name from a peer's newer one by the destination's ctime (fsguard.guards.rename).
    now = time.time if op in ("rename", "replace", "symlink", "link") else None
    takes_fds = op != "makedirs"  # makedirs has no directory descriptor arguments; its exist_ok costs nothing
    passes_fds = op in _FAMILY

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # One Python frame on the happy path: the call, one append, return.
        if kwargs and passes_fds and any(kwargs.get(k) is not None for k in _FD_KEYWORDS):
            return wrapped(*args, **kwargs)
        if (
            _serializer is not None
            and instance is not _SERIALIZED
            and not runtime.busy()
            and not (passes_fds and _left_to_caller(1))
        ):
            return _serializer.run(op, wrapped, args, kwargs, serialized_call)
        try:
            result = wrapped(*args, **kwargs)
        except OSError as error:
            if not _decide(op, error, args, kwargs):
                raise
            result = None
        entry = (op, args, kwargs) if now is None else (op, args, kwargs, now())
        remember(resolve_fds(entry) if kwargs and takes_fds else entry)
        return result

    def serialized_call(wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return wrapper(wrapped, _SERIALIZED, args, kwargs)  # the serializer's locked call, guarded

    return wrapper


def _takes_onexc(function: Any) -> bool:
    """Whether ``shutil.rmtree`` takes ``onexc`` (Python 3.12+), read from its code object rather than with
    ``inspect`` (not otherwise needed at startup). Follows ``__wrapped__`` as ``inspect.signature`` does;
    False when unsure."""
    for _ in range(16):
        inner = getattr(function, "__wrapped__", None)
        if inner is None:
            break
        function = inner
    code: Any = getattr(function, "__code__", None)
    try:
        return "onexc" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    except (AttributeError, TypeError):  # no code object (a builtin, a callable instance): unknown
        return False


def _rmtree_wrapper() -> Callable[..., Any]:
    remember = evidence.MEMORY.append
    use_onexc = _takes_onexc(shutil.rmtree)

    def guarded_call(wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        ignore_errors = args[1] if len(args) > 1 else kwargs.get("ignore_errors", False)
        if runtime.busy() or not (args or "path" in kwargs):
            return wrapped(*args, **kwargs)
        if ignore_errors or kwargs.get("dir_fd") is not None:  # passed through, but remembered as removed
            wrapped(*args, **kwargs)
            remember(resolve_fds(("rmtree", args, kwargs)) if kwargs else ("rmtree", args, kwargs))
            return None
        verdict = rmtree_rule.run(wrapped, args, kwargs, _rules(), use_onexc)
        remember(resolve_fds(("rmtree", args, kwargs)) if kwargs else ("rmtree", args, kwargs))
        if verdict is not None:
            _settle(verdict, "rmtree", args, kwargs, verdict.detail.pop("error", None))
        return None

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _serializer is not None and not runtime.busy():
            return _serializer.run("rmtree", wrapped, args, kwargs, guarded_call)
        return guarded_call(wrapped, args, kwargs)

    return wrapper


def install(ops: Iterable[str] | None = None, settings: config.Settings | None = None) -> list[str]:
    """Wrap the named operations in place (default: all). Returns the names patched after the call."""
    with _lock:
        if not _originals:
            runtime.configure(settings or config.load(os.environ), launcher.detect(os.environ))
        if runtime.settings.serialize and _serializer is None:
            _enable_serializer()
        wanted = list(config.ALL_OPS) if ops is None else [op for op in ops if op in config.ALL_OPS]
        for op in wanted:
            for target in (op, *_ALSO.get(op, ())):
                if target in _originals:
                    continue
                module, attribute, qualified = TARGETS[target]
                original = getattr(module, attribute)
                wrapper = _rmtree_wrapper() if op == "rmtree" else _path_wrapper(op)
                _originals[target] = original
                guarded = GuardedFunction(original, wrapper, qualified)
                setattr(module, attribute, guarded)
                _swap_in_pathlib(original, guarded)
        return installed()


def uninstall(ops: Iterable[str] | None = None) -> None:
    """Put back the exact original objects of the named operations (default: all)."""
    with _lock:
        for op in list(_originals) if ops is None else [t for name in ops for t in (name, *_ALSO.get(name, ()))]:
            original = _originals.pop(op, None)
            if original is not None:
                module, attribute, _ = TARGETS[op]
                _swap_in_pathlib(getattr(module, attribute), original)
                setattr(module, attribute, original)


def _swap_in_pathlib(old: Any, new: Any) -> None:
    """Python 3.10's pathlib calls os through ``_NormalAccessor``, whose attributes it took from os on import
    (wrapt's import brings pathlib in before fsguard patches): ``Path.mkdir`` and the others follow os."""
    accessor = getattr(sys.modules.get("pathlib"), "_NormalAccessor", None)
    if accessor is not None:
        for name, value in list(vars(accessor).items()):
            if value is old:
                setattr(accessor, name, new)


def installed() -> list[str]:
    return [op for op in config.ALL_OPS if op in _originals]


def original(op: str) -> Any:
    """The unpatched function of an operation, patched or not."""
    if op in _originals:
        return _originals[op]
    module, attribute, _ = TARGETS[op]
    return getattr(module, attribute)


def _enable_serializer() -> None:
    global _serializer
    try:
        from . import locks
    except ImportError:
        return
    _serializer = locks.serializer(runtime.settings, runtime.launch)

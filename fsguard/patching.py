"""Mechanism: wrap the guarded functions in place with wrapt; the happy path and the pass-throughs.

The happy path of a wrapped call is: call the original, remember the call (one deque append), return.
A failing call becomes one ``Call``, handed with its error to ``fsguard.failure`` (the one failure pipeline:
the caller's context, the rule, the record); only an absorbed (or conflicting) failure makes a record.
"""

from __future__ import annotations

import os
import sys
import time

from . import _later, _wrapt, callers, config, failure, launcher
from .calls import FAMILY, Call, fds_given, first_path, makedirs_exist_ok, resolve_fds
from .operations import MAKES, OPERATIONS
from .state import STATE, THREAD, Unforkable, busy, shutting_down

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import ModuleType
    from typing import Any

    import wrapt


# Views of fsguard.operations' table. Guarded name -> (module name, attribute, name by which pickles refer to it):
# ``os.unlink`` is not an operation name, it is guarded with ``remove``, as ``remove`` (``Operation.also``).
TARGETS: dict[str, tuple[str, str, str]] = {
    name: (module, attribute, f"{module}:{attribute}")
    for operation in OPERATIONS.values()
    for name, module, attribute in operation.wraps
}
_ALSO = {op.name: op.also for op in OPERATIONS.values() if op.also}  # operation -> further attributes guarded as it


if TYPE_CHECKING:
    _Wrapper = wrapt.FunctionWrapper[Any, Any]
else:  # wrapt's type without wrapt's package imports (fsguard/_wrapt.py); not subscriptable at run time
    _Wrapper = _wrapt.function_wrapper()
# wrapt's ``_FunctionWrapperBase``, whose ``__init__`` takes the instance (None: not found, see GuardedFunction)
_WRAPPER_BASE: Any = next((kind for kind in _Wrapper.__mro__ if kind.__name__ == "_FunctionWrapperBase"), None)


_CALLED = object()  # the ``instance`` fsguard's wrapper gets from a call of the guarded function itself (not bound)


class GuardedFunction(_Wrapper):
    """A wrapt function wrapper that pickles and copies as the function it stands for.

    ``pickle`` stores a reference (``os:makedirs``) resolved again on loading, so a pool worker gets its
    own ``os.makedirs``: the real function, or fsguard's wrapper where fsguard is active too.
    """

    def __init__(self, wrapped: Any, wrapper: Any, qualified: str) -> None:
        super().__init__(wrapped, wrapper)
        if self._self_binding == "function" and _WRAPPER_BASE is not None:
            # A Python function (``makedirs``, ``rmtree``). wrapt calls the wrapper of an unbound one with ``instance``
            # the function's ``__self__``, looked up at every call: the ``AttributeError`` it raises and clears cost
            # each call about 360 ns (issue 47). Given an instance, wrapt passes it and looks nothing up. It binds as
            # before: as a class attribute, its ``__get__`` makes wrapt's bound wrapper, as a function's would.
            _WRAPPER_BASE.__init__(self, wrapped, _CALLED, wrapper, None, "function")
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


_SERIALIZED = object()  # passed as ``instance``: this call already holds the serializer's locks


def _path_wrapper(op: str) -> Callable[..., Any]:
    """The wrapper of a path operation's guarded function, with what it knows of its operation."""
    # Directories made are remembered apart, so that they stay known while they exist (fsguard.memory).
    operation = OPERATIONS[op]
    remember = (STATE.memory.dirs if operation.effect == MAKES else STATE.memory.calls).append
    # A move is remembered with its time (``Operation.timed``).
    now = time.time if operation.timed else None
    # mkdir: the standard makedirs' own call, whose FileExistsError it settles itself (exist_ok, or its
    # decided re-raise), goes straight back to it: told by its caller's code object, one frame up.
    std_makedirs = getattr(STATE.originals.get("makedirs", os.makedirs), "__code__", None) if op == "mkdir" else None
    # mkdir notes what it creates in its job's node-local journal (fsguard.journal), in a job with a tag;
    # makedirs' levels are its mkdir calls.
    tag = STATE.job if op == "mkdir" else None
    # makedirs: the standard makedirs' own call for a missing parent, told the same way (see _parents_in_turn)
    makes = op == "makedirs"
    parent_of = getattr(STATE.originals.get("makedirs", os.makedirs), "__code__", None) if makes else None
    return _wrapper(op, remember, now, std_makedirs, tag, parent_of)


def _wrapper(
    op: str,
    remember: Callable[[tuple[Any, ...]], None],
    now: Callable[[], float] | None,
    std_makedirs: Any,
    tag: str | None,
    parent_of: Any,
) -> Callable[..., Any]:
    """One Python frame on the happy path: the call, one append, return. A failure goes to its one pipeline,
    ``failure.absorbs``, called from this frame (its frame questions count from here)."""
    state, getframe, absorbs = STATE, sys._getframe, failure.absorbs
    makes, passes_fds, notes = op == "makedirs", op in FAMILY, _journal_note()  # [the journal's note]

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not kwargs and state.serializer is None and (not makes or len(args) < 3):  # positional, not serialized
            try:
                result = wrapped(*args)
            except OSError as error:
                if _leaf_found(std_makedirs, error) or not _tried(tag, op, args, kwargs, error, absorbs):
                    raise
                result = None
            else:
                if tag is not None:
                    notes[0](args[0], tag)
            remember((op, args, kwargs) if now is None else (op, args, kwargs, now()))
            return result
        if passes_fds and (kwargs.get("dir_fd") is not None or fds_given(kwargs)):
            return wrapped(*args, **kwargs)  # relative to a descriptor: passed (dir_fd: each step of rmtree's walk)
        if makes and instance is not _LEVEL and getframe(1).f_code is parent_of and parent_of is not None:
            return _parents_in_turn(wrapper, wrapped, args, kwargs)  # (only a missing parent's call has kwargs)
        fds = not makes and fds_given(kwargs)  # makedirs takes no directory descriptors
        serializer = state.serializer
        if serializer is not None and instance is not _SERIALIZED and _serializes(passes_fds, std_makedirs):
            return serializer.run(op, wrapped, args, kwargs, serialized_call)
        shared = makedirs_exist_ok(args, kwargs) if makes else None  # (name, mode) with exist_ok=True
        found = False
        try:
            if shared is not None:
                # exist_ok=True: made by this call, or found there (the standard makedirs cannot say which)
                found = not _makedirs_exist_ok(wrapper, wrapped, args, kwargs, *shared)
                result = None
            else:
                result = wrapped(*args, **kwargs)
                if tag is not None and kwargs.get("dir_fd") is None:
                    notes[0](first_path(op, args, kwargs), tag)
        except OSError as error:
            if _leaf_found(std_makedirs, error) or not _tried(tag, op, args, kwargs, error, absorbs):
                raise
            result = None
        if shared is not None:  # found there (or a peer's, absorbed), or made here: a name others make too
            entry: tuple[Any, ...] = ("makedirs-found" if found else "makedirs-shared", args, kwargs)
        else:
            entry = (op, args, kwargs) if now is None else (op, args, kwargs, now())
        remember(resolve_fds(entry) if fds else entry)
        return result

    def serialized_call(wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return wrapper(wrapped, _SERIALIZED, args, kwargs)  # the serializer's locked call, guarded

    return wrapper


def _leaf_found(std_makedirs: Any, error: OSError) -> bool:
    """Whether a mkdir's ``FileExistsError`` is the standard makedirs' own call. The wrapper's caller settles it itself:
    exist_ok, or its decided re-raise. Then the error goes straight back to it."""
    return std_makedirs is not None and error.__class__ is FileExistsError and sys._getframe(2).f_code is std_makedirs


def _tried(
    tag: str | None,
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: OSError,
    absorbs: Callable[[Call, OSError], bool],
) -> bool:
    """``absorbs`` of the failing call, a mkdir's ``FileExistsError`` noted first. The note goes in the job's journal as
    a name this rank tried to make (issue 47: a peer sharing the name may commit the tree,
    ``fsguard.guards.rmtree.plan``)."""
    if tag is not None and error.__class__ is FileExistsError:
        path = first_path(op, args, kwargs)
        if path is not None:
            _note(path, tag, found=True)
    return absorbs(Call(op, args, kwargs), error)


def _serializes(passes_fds: bool, std_makedirs: Any) -> bool:
    """Whether the wrapper (the caller) hands its call to the serializer. Not fsguard's own call, not the standard
    library's own business (``callers.left_to_caller``), not while the interpreter finalizes."""
    if busy() or shutting_down():
        return False
    if not passes_fds:
        return True
    return not (sys._getframe(2).f_code is std_makedirs or callers.left_to_caller(sys._getframe(1)))


_LEVEL = object()  # passed as ``instance``: one level of a makedirs taken in turn (_parents_in_turn)


def _parents_in_turn(
    wrapper: Callable[..., Any], wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The standard makedirs' call for a missing parent, without its recursion. That is ``makedirs(head,
    exist_ok=exist_ok)``. A deep ``makedirs`` adds no frames per level, so it goes as deep as without fsguard. (A
    guarded level is three frames, not one: 400 levels hit the recursion limit.)

    The missing parents are found as the standard makedirs finds them (``path.exists`` of each head, in the
    same order), then each level is one guarded call, the topmost first, its parent there by then: the same
    calls (the standard makedirs of that level, its mkdir), remembered the same and never decided (inside a
    makedirs), each level's ``FileExistsError`` swallowed by the level under it, every other error raised at
    once. What is not plain (a ``.`` in the path, another spelling of the call, a chain the standard makedirs
    could not recurse through either) goes the standard way, recursion and all."""
    sep: Any
    curdir: Any
    name: Any = args[0] if len(args) == 1 else None
    if type(name) is str:
        sep, curdir = os.sep, os.curdir
    elif type(name) is bytes:
        sep, curdir = os.sep.encode(), os.curdir.encode()
    else:
        name = None
    if name is None or list(kwargs) != ["exist_ok"] or curdir in name.split(sep):
        return wrapper(wrapped, _LEVEL, args, kwargs)
    exist_ok = kwargs["exist_ok"]
    split, exists = os.path.split, os.path.exists
    names = []  # the missing parents, nearest first: the levels the standard makedirs would recurse into
    while True:
        head, tail = split(name)
        if not tail:
            head, tail = split(head)
        if not (head and tail and not exists(head)):
            break
        names.append(head)
        name = head
    if names and _depth() + len(names) + 3 > sys.getrecursionlimit():
        return wrapper(wrapped, _LEVEL, args, kwargs)  # too deep for the standard makedirs: its RecursionError
    for parent in reversed(names):
        try:
            wrapper(wrapped, _LEVEL, (parent,), {"exist_ok": exist_ok})
        except FileExistsError:  # as the standard makedirs of the level under it: made by a peer meanwhile
            pass
    return wrapper(wrapped, _LEVEL, args, kwargs)


def _depth() -> int:
    """The number of frames on this thread's stack, fsguard's own left out. The standard makedirs has none."""
    depth = 0
    frame: Any = sys._getframe(1)
    while frame is not None:
        depth += frame.f_globals.get("__name__") != __name__
        frame = frame.f_back
    return depth


def _makedirs_exist_ok(
    wrapper: Callable[..., Any],
    makedirs: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: Any,
    mode: Any,
) -> bool:
    """``makedirs(..., exist_ok=True)``; True when this call created the directory (False: it was there).
    Remembered as ``makedirs-shared`` (made here: a name others make too, that a peer may have written into and
    may still commit with a rename, ``fsguard.guards.rmtree``) or ``makedirs-found`` (there, or a peer's).

    The standard makedirs cannot say which: it swallows its own ``mkdir``'s ``FileExistsError``. So its steps
    are taken here, the same calls in its order (on a distributed filesystem each is a request to the metadata
    server: no more of them than without fsguard): its missing parent (its recursion, made level by level as
    ``_parents_in_turn`` makes it), then the leaf's ``mkdir`` (the unpatched one), its error raised unless a
    directory is there.
    """
    if name is None:
        makedirs(*args, **kwargs)  # the standard makedirs says what is missing
        return False
    mkdir = STATE.originals.get("mkdir", os.mkdir)
    head, tail = os.path.split(name)  # as the standard makedirs, line by line (its errors, its order)
    if not tail:
        head, tail = os.path.split(head)
    if head and tail and not os.path.exists(head):
        try:
            _parents_in_turn(wrapper, makedirs, (head,), {"exist_ok": True})
        except FileExistsError:
            pass
        if tail == (os.curdir.encode() if isinstance(tail, bytes) else os.curdir):
            return False
    try:
        mkdir(name, mode)
    except OSError:
        if not os.path.isdir(name):
            raise
        if STATE.job is not None:
            _note(name, STATE.job, found=True)
        return False
    if STATE.job is not None:
        _note(name, STATE.job)
    return True


def _journal_note() -> list[Callable[[Any, str], None]]:
    """A one-entry list holding the journal's note (``fsguard.journal.made``). At first a stand-in: it imports the
    journal at the first directory made (not at start-up). It then puts the note in its place and notes."""
    slot: list[Callable[[Any, str], None]] = []

    def first(path: Any, job: str) -> None:
        made = _journal_made()
        slot[0] = made
        made(path, job)

    slot.append(first)
    return slot


def _note(path: Any, job: str, found: bool = False) -> None:
    """Note a directory ``makedirs(exist_ok=True)`` made, or ``found`` there, in the job's journal. The journal is
    node-local (``fsguard.journal``, imported at the first one, not at start-up)."""
    if found:
        # Imported whole: no section, no import statement (most calls; an import statement costs 2-4 us, issue 47).
        journal = sys.modules.get(f"{__package__}.journal")
        if journal is None or getattr(journal.__spec__, "_initializing", False):
            with Unforkable():
                from . import journal as imported  # its first import (or another thread's, awaited), in the section
            journal = imported
        journal.tried(path, job)
    else:
        _journal_made()(path, job)


def _journal_made() -> Callable[[Any, str], None]:
    """``fsguard.journal.made``, imported inside a section (``state.Unforkable``). A fork from another thread meanwhile
    would leave its child a half-imported module. The child would wait forever for its lock."""
    with Unforkable():
        from .journal import made
    return made


def _takes_onexc(function: Any) -> bool:
    """Whether ``shutil.rmtree`` takes ``onexc`` (Python 3.12+). Read from its code object: ``inspect`` is not otherwise
    needed at startup. Follows ``__wrapped__`` as ``inspect.signature`` does; False when unsure."""
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


def _rmtree_wrapper(rmtree: Callable[..., Any]) -> Callable[..., Any]:
    remember = STATE.memory.calls.append
    state = STATE
    use_onexc = _takes_onexc(rmtree)
    # rmtree(path), or with its error keywords (a TemporaryDirectory's clean-up): perhaps the short course
    lane_keywords = frozenset(("ignore_errors", "onerror", "onexc") if use_onexc else ("ignore_errors", "onerror"))
    short_walk, thread = failure.short_walk, THREAD

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if thread.busy or sys.meta_path is None:  # (busy(); shutting down: unguarded)
            return wrapped(*args, **kwargs)
        read = None  # what the short course read of the top, where it left the call to the full one
        if len(args) == 1 and state.serializer is None and (not kwargs or kwargs.keys() <= lane_keywords):
            taken, found = short_walk(wrapped, args, kwargs, use_onexc)  # perhaps a plain removal
            if taken:
                remember(("rmtree", args, kwargs))
                if found is not None:
                    raise found
                return None
            read = found
        return _rmtree_course(wrapped, args, kwargs, use_onexc, read)

    return wrapper


def _rmtree_course(
    wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], use_onexc: bool, read: Any
) -> None:
    """A guarded rmtree down the full course (``failure.walk``): the short course did not take it. Apart from
    the wrapper: its closure would make the wrapper's variables cells at every call (issue 47)."""
    remember, state = STATE.memory.calls.append, STATE
    call = Call("rmtree", args, kwargs)
    if not call.bound or call.given[0] is None:  # the standard rmtree says what is wrong
        return wrapped(*args, **kwargs)  # type: ignore[no-any-return]
    if call.fds.dir_fd is not None:  # passed through, but remembered as removed
        wrapped(*args, **kwargs)
        remember(resolve_fds(("rmtree", args, kwargs)))
        return None
    # A peer can only move a tree away in a job that has peers: alone, no window at all.
    launch = state.launch
    yield_s = state.settings.yield_s if launch is not None and launch.distributed else 0.0
    serializer = state.serializer

    def perform() -> None:
        error = failure.walk(wrapped, call, use_onexc, yield_s, serializer, read)
        remember(resolve_fds(("rmtree", args, kwargs)) if kwargs else ("rmtree", args, kwargs))
        if error is not None:
            raise error

    if serializer is None:
        perform()
    elif serializer.flown(call, perform, shared=_SERIALIZED) is _SERIALIZED:
        remember(("rmtree", args, kwargs))  # a peer's identical call removed the tree for this one
    return None


def install(ops: Iterable[str] | None = None, settings: config.Settings | None = None) -> list[str]:
    """Wrap the named operations in place (default: all). Returns the names patched after the call."""
    with STATE.lock:
        if not STATE.originals:
            STATE.settings = settings or config.load(os.environ)
            STATE.launch = launcher.detect(os.environ)
            if STATE.launch is not None and STATE.launch.distributed:
                STATE.job = launcher.job_tag(os.environ)
        if STATE.settings.serialize and STATE.serializer is None:
            _enable_serializer()
        wanted = list(config.ALL_OPS) if ops is None else [op for op in ops if op in config.ALL_OPS]
        for op in wanted:
            for target in (op, *_ALSO.get(op, ())):
                if target in STATE.originals or target in STATE.pending:
                    continue
                hook = _later.after_import(TARGETS[target][0], _wrapping(op, target))
                if hook is not None:
                    STATE.pending[target] = hook
        return installed()


def _wrapping(op: str, target: str) -> Callable[[ModuleType], None]:
    def then(module: ModuleType) -> None:
        _wrap(op, target, module)

    return then


def _wrap(op: str, target: str, module: ModuleType) -> None:
    """Replace ``module.<attribute>`` of ``target`` with operation ``op``'s guarded function. Now, or at the import of
    its module. Then it happens under the import's own module lock, before anyone else can see the module."""
    with STATE.lock:
        STATE.pending.pop(target, None)
        if target in STATE.originals:
            return
        _, attribute, qualified = TARGETS[target]
        original = getattr(module, attribute)
        wrapper = _rmtree_wrapper(original) if op == "rmtree" else _path_wrapper(op)
        STATE.originals[target] = original
        guarded = GuardedFunction(original, wrapper, qualified)
        setattr(module, attribute, guarded)
        _swap_in_pathlib(original, guarded)


def uninstall(ops: Iterable[str] | None = None) -> None:
    """Put back the exact original objects of the named operations (default: all). With none left patched,
    the process state is back to "never installed" (settings, launch, serializer, rules)."""
    with STATE.lock:
        every = [*STATE.originals, *STATE.pending]
        for op in every if ops is None else [t for name in ops for t in (name, *_ALSO.get(name, ()))]:
            hook = STATE.pending.pop(op, None)
            if hook is not None:
                hook.cancel()
            original = STATE.originals.pop(op, None)
            if original is not None:
                module_name, attribute, _ = TARGETS[op]
                module = sys.modules[module_name]
                _swap_in_pathlib(getattr(module, attribute), original)
                setattr(module, attribute, original)
        if not STATE.originals and not STATE.pending:
            STATE.reset()


def _swap_in_pathlib(old: Any, new: Any) -> None:
    """Point Python 3.10's ``pathlib`` accessor at the guarded os functions. Python 3.10's pathlib calls os through
    ``_NormalAccessor``, whose attributes it took from os on import. (Where the program imported pathlib before fsguard
    patched.) Then ``Path.mkdir`` and the others follow os."""
    accessor = getattr(sys.modules.get("pathlib"), "_NormalAccessor", None)
    if accessor is not None:
        for name, value in list(vars(accessor).items()):
            if value is old:
                setattr(accessor, name, new)


def installed() -> list[str]:
    """The operations patched: wrapped, or to be wrapped at their module's first import (``shutil.rmtree``)."""
    return [op for op in config.ALL_OPS if op in STATE.originals or op in STATE.pending]


def original(op: str) -> Any:
    """The unpatched function of an operation, patched or not."""
    module_name, attribute, _ = TARGETS[op]
    module = __import__(module_name)  # a pending wrap happens here, at the module's first import
    if op in STATE.originals:
        return STATE.originals[op]
    return getattr(module, attribute)


def _enable_serializer() -> None:
    try:
        from . import locks
    except ImportError:
        return
    STATE.serializer = locks.serializer(STATE.settings, STATE.launch)
    if STATE.serializer is not None:
        STATE.serializer.crashes = _crashes


def _crashes(error: type[OSError]) -> bool:
    """Whether an ``error`` at the serialized call being made would crash its thread. No handler of the program's
    decides. It is asked before a claim gets a peer's outcome (``fsguard.locks.flight.claim_error``)."""
    return failure._oracle().caller_handles(error(), sys._getframe(1)) is None

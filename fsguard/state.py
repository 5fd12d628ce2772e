"""The process state of fsguard, and the at-fork hook that resets it.

``STATE`` holds what an active fsguard knows about this process: the settings, the launch, the original
functions it patched and the wraps waiting for a module's first import (``pending``), the serializer
(``FSGUARD_SERIALIZE=1``), the rules' numbers, the memory of its own guarded calls (``memory``: the ``deque``
the happy path appends to, ``calls``, or ``dirs`` for mkdir and makedirs, with their index), what fsguard
finds once and keeps (``caches``, the mounts read from mountinfo among them), the record writer's state
(``writer``) and the process's nonce. ``patching.install`` fills it, ``uninstall`` of the last operation
empties it again (the memory and the writer stay: they describe the process, not the install). No other
module keeps state of its own: they read and write it here.

Forks: ranks fork while another thread may be inside fsguard (DataLoader workers, compile pools, async
checkpoints). A fork copies only the forking thread, so a lock another thread held at that moment would stay
held in the child forever, and a descriptor it held is shared with the child. ``os.register_at_fork`` is
called once, here: in the child, ``STATE``'s lock is made anew and each module that keeps locks or
descriptors (memory, records) runs the reset it registered with ``at_fork``. Registered resets are module
functions, never bound methods: an object with a reset of its own (a lock backend) registers with ``forkable``
and is reached through a weak set.

Some of fsguard's own work cannot be made safe by a reset in the child: opening a store connection imports
modules (each import holds a per-module lock a child that imports the same module would wait on forever) and
makes name lookups inside c10d and the C library. Such work runs as an ``Unforkable`` section: before a fork,
a hook registered here at the first section waits for the sections of other threads to end (at most
``FORK_WAIT_S``) and keeps new ones from starting until the fork is done.
"""

from __future__ import annotations

import os
import sys
import time

# The C types that ``threading`` and ``collections`` hand out (``threading.RLock()`` is ``_thread.RLock``,
# ``threading.local`` is ``_thread._local``, ``collections.deque`` is ``_collections.deque``), taken from the
# built-in modules: importing ``threading`` (functools, collections) costs an enabled interpreter's start-up
# about a quarter of a bare interpreter's (issue 37).
from _thread import RLock, allocate_lock, get_ident
from _thread import _local as local

from . import config, launcher

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    import logging
    from collections import deque
    from collections.abc import Callable
    from typing import IO, Protocol, TypeVar
    from weakref import WeakSet

    from .calls import Call

    class Forkable(Protocol):
        def after_fork_in_child(self) -> None: ...

    class Clearable(Protocol):
        def clear(self) -> None: ...

    class Serializing(Protocol):
        """What fsguard asks of ``fsguard.locks.Serializer`` (a module above this one, so not named here)."""

        crashes: Callable[[type[OSError]], bool] | None

        def run(
            self,
            op: str,
            wrapped: Callable[..., object],
            args: tuple[object, ...],
            kwargs: dict[str, object],
            guarded_call: Callable[..., object],
        ) -> object: ...

        def flown(self, call: Call, perform: Callable[[], object], shared: object = ...) -> object: ...

    Entry = tuple[object, ...]  # a remembered call: (operation, args, kwargs[, time])

    C = TypeVar("C", bound=Clearable)

    from . import _later
else:
    from _collections import deque

MEMORY_SIZE = 4096
# mkdir and makedirs calls waiting for the next decision to index them (fsguard.memory keeps the directories
# from there on while they exist): only more directory-making calls than this between two decisions are lost.
DIRS_SIZE = 1 << 15


class Caches:
    """The registry of what fsguard finds once and keeps while installed. Each cache is typed by its owner.

    A cache is anything with a ``clear()`` (a dict, a set, a small class of the owner's), registered once at
    the owner's import (``FOUND = STATE.caches.register(_Found())``); ``clear`` empties them all at
    ``uninstall`` of the last operation, so each is found again after it."""

    __slots__ = ("owned",)

    def __init__(self) -> None:
        self.owned: list[Clearable] = []

    def register(self, cache: C) -> C:
        """Keep ``cache`` with the others, emptied with them. Returns it (the owner's module-level name for it)."""
        self.owned.append(cache)
        return cache

    def clear(self) -> None:
        for cache in self.owned:
            cache.clear()


class Memory:
    """This process's own guarded calls (``fsguard.memory``), kept across installs: they describe the process."""

    __slots__ = ("calls", "dirs", "index", "index_lock", "scratch")

    def __init__(self) -> None:
        # (operation, args, kwargs) or, for rename/replace, (operation, args, kwargs, time): the happy path appends
        self.calls: deque[Entry] = deque(maxlen=MEMORY_SIZE)
        # the same entries for mkdir and makedirs (they are not in ``calls``)
        self.dirs: deque[Entry] = deque(maxlen=DIRS_SIZE)
        self.index: object = None  # fsguard.memory's index of the two deques (its own type), made at its first decision
        self.index_lock = allocate_lock()  # decisions of several threads index and read together
        # paths where this process removed a tree it made or found with makedirs(exist_ok=True) after a yield window
        # that no peer used (insertion order, at most MEMORY_SIZE): scratch, removed at once next time (rmwalk)
        self.scratch: dict[str, None] = {}


class Writer:
    """The record writer's state (``fsguard.records``). Kept across installs: the logger's handler stays attached, the
    file open. In a forked child its lock is new and the parent's file is left alone."""

    __slots__ = (
        "handler",
        "held_for_fork",
        "inherited",
        "jsonl",
        "jsonl_failed",
        "limiter",
        "lock",
        "logger",
        "propagate_before",
    )

    def __init__(self) -> None:
        self.lock = RLock()  # around each record's writing; held across a fork (see records)
        self.held_for_fork = False
        self.logger: logging.Logger | None = None  # the ``fsguard`` logger, once a record is written
        self.handler: logging.StreamHandler[IO[str]] | None = None  # fsguard's own stderr handler
        self.propagate_before = True  # the logger's propagate before fsguard's handler was attached
        self.jsonl: tuple[int, IO[str]] | None = None  # (pid, open file)
        self.jsonl_failed = False
        self.inherited: list[
            IO[str]
        ] = []  # a forked child's copies of its parent's file: kept, never flushed or closed
        self.limiter: object = None  # records._Limiter (its own type): lines per call site and decision


class State:
    """What an active fsguard knows about this process (one instance: ``STATE``)."""

    __slots__ = (
        "caches",
        "job",
        "launch",
        "lock",
        "memory",
        "nonce",
        "originals",
        "pending",
        "serializer",
        "settings",
        "writer",
    )

    def __init__(self) -> None:
        self.lock = RLock()  # install/uninstall
        self.memory = Memory()
        self.originals: dict[
            str, Callable[..., object]
        ] = {}  # operation -> the function fsguard replaced (emptied, never replaced)
        # operation -> the hook that wraps it at its module's first import (shutil, not yet imported): patching
        self.pending: dict[str, _later.AfterImport] = {}
        self.nonce = os.urandom(4).hex()  # random per process, renewed at fork: fsguard.locks' tokens
        self.writer = Writer()
        self.caches = Caches()
        self.reset()

    def reset(self) -> None:
        """Back to "not installed": no settings, launch, originals, serializer, rules or caches."""
        self.settings: config.Settings = config.Settings()
        self.launch: launcher.Launch | None = None
        # This job's and attempt's tag (``launcher.job_tag``), in a job with peers only: what guarded mkdir and
        # makedirs write on the directories they create, and what the rules compare a directory's tag with.
        self.job: str | None = None
        self.originals.clear()
        self.serializer: Serializing | None = None  # fsguard.locks.Serializer when FSGUARD_SERIALIZE=1
        self.caches.clear()


STATE = State()


class _ThreadFlags(local):
    """This thread's flags. A class default, so a thread that never set one reads it without an exception."""

    busy = False


_local = _ThreadFlags()
THREAD = _local  # this thread's flags: ``THREAD.busy`` is ``busy()`` without its call (a guarded rmtree's first test)


def busy() -> bool:
    """True while this thread is inside fsguard's own decision or logging. Guarded calls then pass through."""
    return _local.busy


def shutting_down() -> bool:
    """Whether the interpreter is finalizing. That is ``__del__`` of module globals, or late finalizers. Imports fail
    then (``sys.meta_path`` is None) and records could not be written. So a guarded call is the unpatched call. Asked
    only where fsguard would import or record: a failure's decision, a serialized call (every rmtree asks
    ``sys.meta_path`` alone: the import its walk needs is what fails)."""
    return sys.meta_path is None or sys.is_finalizing()


class Busy:
    """Marks this thread as inside fsguard, so fsguard's own filesystem calls are not guarded again.

    Nests: leaving restores what the thread was before (a record written inside a decision leaves the
    decision still busy)."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = _local.busy
        _local.busy = True

    def __exit__(self, *exc: object) -> None:
        _local.busy = self._before


def set_serializer(serializer: Serializing | None) -> Serializing | None:
    """Serialize guarded calls with ``serializer`` (a ``fsguard.locks.Serializer``), or stop with None.

    For tests and benchmarks that compare backends in one process; returns the serializer it replaces."""
    before = STATE.serializer
    STATE.serializer = serializer
    return before


_child_resets: list[Callable[[], None]] = []


def at_fork(reset: Callable[[], None]) -> Callable[[], None]:
    """Run ``reset`` in every forked child. A module function: it stays alive as long as the process."""
    _child_resets.append(reset)
    return reset


# Objects whose ``after_fork_in_child`` runs in every forked child while they are alive (the lock backends and their
# serializer), weakly held in one ``WeakSet`` under ``"all"``, made at the first (``weakref`` is not imported at
# startup); ``setdefault``, so that two threads making the first two backends at once share one set.
_forkables: dict[str, WeakSet[Forkable]] = {}


def forkable(obj: Forkable) -> None:
    """Run ``obj.after_fork_in_child()`` in every forked child while ``obj`` is alive. It is weakly held: an object
    nobody uses any more is not kept alive by this."""
    forkables = _forkables.get("all")
    if forkables is None:
        from weakref import WeakSet

        forkables = _forkables.setdefault("all", WeakSet())
    forkables.add(obj)


@at_fork
def _forkables_after_fork() -> None:
    for obj in list(_forkables.get("all", ())):
        try:
            obj.after_fork_in_child()
        except Exception:  # noqa: BLE001 - one object's failure must not leave the others held
            pass


# A section that has not ended after this long (a name lookup waiting out its DNS timeouts: 5 s a try, two tries
# by default) no longer holds forks back: the fork goes on, later forks no longer wait for it, and a ``waited``
# record says so (not a ``hazard``: no data is at stake, a child may hang).
FORK_WAIT_S = 10.0


class _Gate:
    """The ``Unforkable`` sections in progress; ``cond``'s lock is held across a fork."""

    __slots__ = ("cond", "held", "inside", "late", "passed", "sections")

    def __init__(self) -> None:
        import threading  # at the first section only (serialized mode, torch imported): not at start-up

        self.cond = threading.Condition(allocate_lock())
        self.inside: dict[int, list[int]] = {}  # thread ident -> [sections it is in (they nest), outermost's number]
        self.sections = 0  # sections started so far: each outermost one is numbered
        self.passed = 0  # sections up to this number no longer hold a fork back (``FORK_WAIT_S`` spent on them)
        self.held = False  # cond's lock taken by ``_before_fork``
        self.late: tuple[float, list[int]] | None = None  # (waited, threads inside) when a fork gave up waiting


_gate: _Gate | None = None  # made at the first section (``_hook_gate``), made afresh in a forked child


class Unforkable:
    """A section of fsguard's own work that no fork may split. A fork from another thread waits for it to end (bounded,
    ``FORK_WAIT_S``). A section does not start while a fork is under way. Nests; a fork made by the thread inside the
    section itself does not wait for it. About a microsecond to enter and leave."""

    __slots__ = ("_gate", "_ident")

    def __enter__(self) -> None:
        self._gate, self._ident = _gate or _hook_gate(), get_ident()
        with self._gate.cond:
            mine = self._gate.inside.get(self._ident)
            if mine is None:
                self._gate.sections += 1
                self._gate.inside[self._ident] = [1, self._gate.sections]
            else:
                mine[0] += 1

    def __exit__(self, *exc: object) -> None:
        gate = self._gate
        if gate is not _gate:
            return  # entered in the parent, left in a forked child: the child's gate never counted it
        with gate.cond:
            mine = gate.inside.get(self._ident)
            if mine is not None and mine[0] > 1:
                mine[0] -= 1
            else:
                gate.inside.pop(self._ident, None)
                gate.cond.notify_all()


_gate_making = allocate_lock()
_gate_hooked: list[bool] = []


def _hook_gate() -> _Gate:
    """Make the gate and its at-fork hook at the first section. Not at startup: hooks run newest first before a fork. So
    a fork then waits for the sections before it takes the locks of hooks registered earlier. (``logging``'s, which
    torch imports, and ``fsguard.records``' when a record was written already.) A section that logs then never waits for
    the fork that waits for it. ``logging`` imported for the first time inside a section registers its hook after the
    gate's: ``_lend_logging_lock``."""
    global _gate
    with _gate_making:
        if _gate is None:
            _gate = _Gate()
        if not _gate_hooked:  # a forked child keeps its parent's hooks
            _gate_hooked.append(True)
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
        return _gate


def _holding_back(gate: _Gate, me: int) -> list[int]:
    """The threads (not ``me``) inside a section that still holds a fork back."""
    return [ident for ident, (_, number) in gate.inside.items() if ident != me and number > gate.passed]


def _before_fork() -> None:
    gate = _gate
    if gate is None:
        return
    started = time.monotonic()
    gate.late = None
    gate.held = gate.cond.acquire(timeout=FORK_WAIT_S)
    me = get_ident()
    if not gate.held or not _holding_back(gate, me):
        return
    lent = _lend_logging_lock()
    try:
        while _holding_back(gate, me):
            left = started + FORK_WAIT_S - time.monotonic()
            if left <= 0:
                gate.late = (time.monotonic() - started, _holding_back(gate, me))
                gate.passed = gate.sections  # one fork waits out the bound; the next ones go on at once
                return
            gate.cond.wait(left)
    finally:
        lock, times = lent
        for _ in range(times):
            if lock is None or not lock.acquire(timeout=FORK_WAIT_S):
                break  # logging's own hook then finds it not held: a line on stderr, and the fork goes on


def _lend_logging_lock() -> tuple[RLock | None, int]:
    """Release ``logging``'s lock while this thread waits for sections, if held for the fork. Returns the lock and how
    many times. ``logging`` first imported inside a section (the first failure's imports) registers its at-fork hook
    after the gate's, so a fork took logging's lock before it waited, and the section's import then waited for that lock
    in logging's own module body: the fork waited out ``FORK_WAIT_S`` for a section that could not end before it did,
    split it, and the child had half an import."""
    lock: RLock | None = getattr(sys.modules.get("logging"), "_lock", None)
    owned = getattr(lock, "_is_owned", None)
    times = 0
    while lock is not None and owned is not None and owned():
        lock.release()
        times += 1
    return lock, times


def _after_fork_in_parent() -> None:
    gate = _gate
    if gate is None:
        return
    if gate.held:
        gate.held = False
        gate.cond.release()
    if gate.late is not None:
        late, gate.late = gate.late, None
        # Not written here: the hooks registered after this one still hold their locks until the fork returns
        # (``logging``'s), and the thread still inside its section may hold what writing a record takes (the
        # import lock of ``fsguard.records`` and ``logging``, while it imports them): waiting for either here
        # would hang the parent for good. A thread of its own writes it once they are given back.
        try:
            import threading

            threading.Thread(target=_forked_late, args=late, name="fsguard-fork-record", daemon=True).start()
        except RuntimeError:  # no new threads at interpreter shutdown: nobody would read it then
            pass


_late_fork_reporters: list[Callable[[float, list[str]], None]] = []


def report_late_forks(report: Callable[[float, list[str]], None]) -> Callable[[float, list[str]], None]:
    """Report, in the parent, a fork that went on while sections were open. It calls ``report(waited_s, thread_names)``
    after a fork made while other threads were inside ``Unforkable`` sections. The layer that opens such sections writes
    the record."""
    _late_fork_reporters.append(report)
    return report


def _forked_late(waited: float, idents: list[int]) -> None:
    import threading

    names = sorted(t.name for t in threading.enumerate() if t.ident in idents)
    for report in _late_fork_reporters:
        try:
            report(waited, names)
        except Exception:  # noqa: BLE001 - a failed report must not break the parent after its fork
            pass


def _after_fork_in_child() -> None:
    global _gate, _gate_making
    _gate_making = allocate_lock()  # another thread may have been making the gate
    if _gate is not None:
        _gate = _Gate()  # the threads inside a section (and a cond lock held for the fork) are the parent's
    STATE.lock = RLock()
    STATE.nonce = os.urandom(4).hex()
    for reset in _child_resets:
        try:
            reset()
        except Exception:  # noqa: BLE001 - a failed reset must not break the child
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)

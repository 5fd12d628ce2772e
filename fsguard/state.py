"""The one process state of fsguard, and the one at-fork hook that keeps a forked child from inheriting
held locks.

``STATE`` holds what an active fsguard knows about this process: the settings, the launch, the original
functions it patched, the serializer (``FSGUARD_SERIALIZE=1``), the rules' numbers, and the memory of its own
guarded calls (the ``deque`` the happy path appends to: ``memory``, or ``dirs`` for mkdir and makedirs) with
its index, what fsguard finds once and keeps (``caches``), the record writer's state (``writer``) and the
process's nonce. ``patching.install`` fills it, ``uninstall`` of the last operation empties it again (the
memory and the writer stay: they describe the process, not the install). No other module keeps state of its
own: they read and write it here.

Forks: ranks fork while another thread may be inside fsguard (DataLoader workers, compile pools, async
checkpoints). A fork copies only the forking thread, so a lock another thread held at that moment would stay
held in the child forever, and a descriptor it held is shared with the child. ``os.register_at_fork`` is
called once, here: in the child, ``STATE``'s lock is made anew and each module that keeps locks or
descriptors (memory, records, the lock backends) runs the reset it registered with ``at_fork``. Registered
resets are module functions, never bound methods: a backend object is reached through a weak set.
"""

from __future__ import annotations

import collections
import os
import threading

from . import config, launcher

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MEMORY_SIZE = 4096
# mkdir and makedirs calls waiting for the next decision to index them (fsguard.memory keeps the directories
# from there on while they exist): only more directory-making calls than this between two decisions are lost.
DIRS_SIZE = 1 << 15


class Caches:
    """What fsguard finds once and keeps while installed: each is found again after ``uninstall``."""

    __slots__ = (
        "attempt_start",
        "boot_time",
        "failed_rules",
        "handler_layers",
        "job_start",
        "pass_through",
        "rmtree_checked",
        "site_dirs",
        "source_trees",
        "statx",
    )

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.job_start: tuple[float, str] | None = None  # (when this job started here, how that was found): evidence
        self.attempt_start: tuple[float | None] | None = None  # (when a restarted attempt started here,): evidence
        self.boot_time: float | None = None  # wall-clock time of boot: evidence
        self.statx: Any = None  # libc's statx and a buffer maker, False where there is none: evidence
        self.site_dirs: Any = None  # the directory prefixes a call site is told by: runtime
        self.handler_layers: dict[Any, Any] = {}  # (code, offset) -> the layers handling it: handlers
        self.pass_through: frozenset[Any] | None = None  # standard wrappers' code objects: handlers
        self.source_trees: dict[str, Any] = {}  # file -> (its source, its ast), 3.10 only: handlers
        self.rmtree_checked: tuple[Any, Any] | None = None  # (rmtree, its checked copy or None): rmwalk
        self.failed_rules: set[str] = set()  # operations whose rule failed (reported once each): patching


class Writer:
    """The record writer's state (``fsguard.records``): kept across installs (the logger's handler stays
    attached, the file open); in a forked child its lock is new and the parent's file is left alone."""

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
        self.lock = threading.RLock()  # around each record's writing; held across a fork (see records)
        self.held_for_fork = False
        self.logger: Any = None  # the ``fsguard`` logging.Logger, once a record is written
        self.handler: Any = None  # fsguard's own stderr logging.StreamHandler
        self.propagate_before = True  # the logger's propagate before fsguard's handler was attached
        self.jsonl: tuple[int, Any] | None = None  # (pid, open file)
        self.jsonl_failed = False
        self.inherited: list[Any] = []  # a forked child's copies of its parent's file: kept, never flushed or closed
        self.limiter: Any = None  # records._Limiter: lines per call site and decision


class State:
    """What an active fsguard knows about this process (one instance: ``STATE``)."""

    __slots__ = (
        "caches",
        "dirs",
        "index",
        "index_lock",
        "job",
        "launch",
        "lock",
        "memory",
        "nonce",
        "originals",
        "rules_for",
        "serializer",
        "settings",
        "writer",
    )

    def __init__(self) -> None:
        self.lock = threading.RLock()  # install/uninstall
        # (operation, args, kwargs) or, for rename/replace, (operation, args, kwargs, time): see fsguard.memory
        self.memory: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=MEMORY_SIZE)
        # the same entries for mkdir and makedirs (they are not in ``memory``): see fsguard.memory
        self.dirs: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=DIRS_SIZE)
        self.index: Any = None  # fsguard.memory's index of the two deques, made at its first decision
        self.index_lock = threading.Lock()  # decisions of several threads index and read together
        self.originals: dict[str, Any] = {}  # operation -> the function fsguard replaced (emptied, never replaced)
        self.nonce = os.urandom(4).hex()  # random per process, renewed at fork: fsguard.locks' tokens
        self.writer = Writer()
        self.caches = Caches()
        self.reset()

    def reset(self) -> None:
        """Back to "not installed": default settings, no launch, no originals, no serializer, no rules, no caches."""
        self.settings: config.Settings = config.Settings()
        self.launch: launcher.Launch | None = None
        # This job's and attempt's tag (``launcher.job_tag``), in a job with peers only: what guarded mkdir and
        # makedirs write on the directories they create, and what the rules compare a directory's tag with.
        self.job: str | None = None
        self.originals.clear()
        self.serializer: Any = None  # fsguard.locks.Serializer when FSGUARD_SERIALIZE=1
        self.rules_for: tuple[object, Any] | None = None  # (the settings they were made from, guards.Rules)
        self.caches.clear()


STATE = State()

_local = threading.local()


def busy() -> bool:
    """True while this thread is inside fsguard's own decision or logging (guarded calls then pass through)."""
    return getattr(_local, "busy", False)


class Busy:
    """Marks this thread as inside fsguard, so fsguard's own filesystem calls are not guarded again.

    Nests: leaving restores what the thread was before (a record written inside a decision leaves the
    decision still busy)."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = getattr(_local, "busy", False)
        _local.busy = True

    def __exit__(self, *exc: object) -> None:
        _local.busy = self._before


def set_serializer(serializer: Any) -> Any:
    """Serialize guarded calls with ``serializer`` (a ``fsguard.locks.Serializer``), or stop with None.

    For tests and benchmarks that compare backends in one process; returns the serializer it replaces."""
    before = STATE.serializer
    STATE.serializer = serializer
    return before


_child_resets: list[Callable[[], None]] = []


def at_fork(reset: Callable[[], None]) -> Callable[[], None]:
    """Run ``reset`` in every forked child (a module function: it stays alive as long as the process)."""
    _child_resets.append(reset)
    return reset


def _after_fork_in_child() -> None:
    STATE.lock = threading.RLock()
    STATE.nonce = os.urandom(4).hex()
    for reset in _child_resets:
        try:
            reset()
        except Exception:  # noqa: BLE001 - a failed reset must not break the child
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)

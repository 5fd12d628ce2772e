"""What this process's own guarded calls did: a condition it caused itself is never a race with a peer.

The happy path pays one ``deque.append`` of the call's own arguments (rename, replace, symlink and link add
the wall-clock time, so a later decision can tell its own old move or link from a peer's newer one).
Nothing is normalised then: the first failing call that asks indexes the entries appended since the last
question, newest wins, so a decision costs a few dictionary lookups however full the memory is.
"""

from __future__ import annotations

import os
import threading

from . import state
from .state import resolve_fds as resolve_fds  # what the happy path remembers: see fsguard.state

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)

if TYPE_CHECKING:
    from typing import Any

    # (operation, args, kwargs), or for rename/replace/symlink/link (operation, args, kwargs, time.time() after)
    Entry = tuple[Any, ...]

MEMORY_SIZE = state.MEMORY_SIZE
MEMORY = state.STATE.memory  # the happy path appends here (fsguard.patching)


class Event:
    """The newest thing this process did to a path: ``made``, ``made-shared`` (a ``makedirs(exist_ok=True)``
    that made it), ``found`` (a ``makedirs(exist_ok=True)`` that
    found the directory there: not made by this process), ``moved-away`` or ``removed``."""

    __slots__ = ("kind", "seq", "time")

    def __init__(self, kind: str, time: float | None, seq: int) -> None:
        self.kind = kind
        self.time = time  # wall-clock time after the call, where remembered (rename/replace/symlink/link)
        self.seq = seq

    def __repr__(self) -> str:
        return f"Event({self.kind!r}, time={self.time!r}, seq={self.seq})"


def fspath(path: Any) -> str | bytes:
    """``os.fspath``, and the bytes of a ``bytearray``/``memoryview``, which the C functions of ``os`` still take
    (with a DeprecationWarning) and so can fail with: ``TypeError`` for anything else."""
    if isinstance(path, (bytearray, memoryview)):
        return bytes(path)
    value: str | bytes = os.fspath(path)
    return value


def norm(path: Any, cwd: str | None = None) -> str:
    """Absolute, ``..``-folded text form of a path argument, relative to ``cwd`` (default: the current one)."""
    if type(path) is str and path[:1] == "/" and "/." not in path and "//" not in path and path[-1:] != "/":
        return path  # already normal: the index normalises thousands of these at once
    value: str | bytes = fspath(path)
    text = os.fsdecode(value) if isinstance(value, bytes) else value
    if cwd is None or os.path.isabs(text):
        return os.path.abspath(text)
    return os.path.normpath(os.path.join(cwd, text))


# operation -> (position, keyword) of the name it makes
_MADE_AT = {"mkdir": (0, "path"), "symlink": (1, "dst"), "link": (1, "dst")}


def _ancestry(path: str) -> list[str]:
    """``path`` and every directory above it, nearest first."""
    chain = [path]
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return chain
        chain.append(parent)
        path = parent


class _Index:
    """Normalised view of ``MEMORY``, brought up to date lazily, entry by entry, when a decision asks.

    Values are ``(seq, kind, time)`` tuples: ``seq`` orders events, the newest wins.
    """

    # Start over from MEMORY when the index holds this many more paths than MEMORY can.
    LIMIT = 4 * MEMORY_SIZE

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.seq = 0
        self.last: Entry | None = None  # newest entry indexed so far (by identity)
        self.made: dict[str, tuple[int, str, float | None]] = {}  # made at the path
        self.gone: dict[str, tuple[int, str, float | None]] = {}  # removed or moved away, with all below it

    def update(self) -> None:
        entries = list(MEMORY)
        start = 0
        if self.last is not None:
            for position in range(len(entries) - 1, -1, -1):
                if entries[position] is self.last:
                    start = position + 1
                    break
            else:
                self.clear()  # more than MEMORY_SIZE calls since the last question: start over
        if len(self.made) + len(self.gone) > self.LIMIT:
            self.clear()
            start = 0
        made, gone = self.made, self.gone
        seq = self.seq
        try:
            cwd: str | None = os.getcwd()  # relative paths: as the decision will see them (cwd is not remembered)
        except OSError:
            cwd = None
        for entry in entries[start:]:
            seq += 1
            op, args, kwargs = entry[0], entry[1], entry[2]
            when = entry[3] if len(entry) > 3 else None
            try:
                if op == "makedirs":
                    made[norm(args[0] if args else kwargs["name"], cwd)] = (seq, "made", when)
                elif op == "makedirs-shared":  # makedirs(exist_ok=True) that made it: a name others make too
                    made[norm(args[0] if args else kwargs["name"], cwd)] = (seq, "made-shared", when)
                elif op == "makedirs-found":  # makedirs(exist_ok=True) that found the directory there
                    made[norm(args[0] if args else kwargs["name"], cwd)] = (seq, "found", when)
                elif op in _MADE_AT:  # mkdir, symlink, link (calls with directory descriptors are not remembered)
                    position, keyword = _MADE_AT[op]
                    made[norm(args[position] if len(args) > position else kwargs[keyword], cwd)] = (seq, "made", when)
                elif op in ("remove", "rmdir"):
                    gone[norm(args[0] if args else kwargs["path"], cwd)] = (seq, "removed", when)
                elif op == "rmtree":
                    if kwargs.get("dir_fd") is None:
                        gone[norm(args[0] if args else kwargs["path"], cwd)] = (seq, "removed", when)
                elif not kwargs or (kwargs.get("src_dir_fd") is None and kwargs.get("dst_dir_fd") is None):
                    gone[norm(args[0] if args else kwargs["src"], cwd)] = (seq, "moved-away", when)
                    made[norm(args[1] if len(args) > 1 else kwargs["dst"], cwd)] = (seq, "made", when)
            except (KeyError, IndexError, TypeError, ValueError):
                pass  # a call this index cannot place (it succeeded, so there is nothing to learn)
        self.seq = seq
        if entries:
            self.last = entries[-1]

    def last_event(self, path: str, within: bool) -> Event | None:
        found = self.made.get(path)
        if within:
            prefix = path.rstrip(os.sep) + os.sep
            for made, value in self.made.items():
                if (found is None or value[0] > found[0]) and made.startswith(prefix):
                    found = value
        for above in _ancestry(path):
            gone = self.gone.get(above)
            if gone is not None and (found is None or gone[0] > found[0]):
                found = gone
        return None if found is None else Event(found[1], found[2], found[0])


_index = _Index()
# Decisions of several threads index and read together; the happy path never takes this lock.
_index_lock = threading.Lock()


@state.at_fork
def _after_fork_in_child() -> None:
    global _index_lock
    _index_lock = threading.Lock()  # a fork while another thread decided must not leave it held forever
    _index.clear()  # it may have been half brought up to date: index again from MEMORY


def own_last(path: str, *, within: bool = False) -> Event | None:
    """The newest thing this process's guarded calls did to ``path`` (normalised), or None.

    ``made``: makedirs, mkdir, symlink or link made it, or something was renamed onto it (with ``within``:
    also anything below it); ``made-shared``: ``makedirs(exist_ok=True)`` made it (a name other processes make
    too: a peer may have written into it and may still commit it); ``found``: a ``makedirs(exist_ok=True)``
    found it there. ``moved-away``/``removed``: it, or a directory above it, was renamed away / removed by
    rmtree, remove, unlink or rmdir.
    """
    with _index_lock:
        _index.update()
        return _index.last_event(path.rstrip(os.sep) or os.sep, within)


def own_last_event(path: str, *, within: bool = False) -> str | None:
    """Kind of :func:`own_last` (``made``, ``moved-away``, ``removed``), or None."""
    event = own_last(path, within=within)
    return event.kind if event is not None else None

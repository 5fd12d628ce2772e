"""What this process's own guarded calls did. What it caused itself is never a race with a peer.

The happy path pays one ``deque.append`` of the call's own arguments (rename, replace, symlink and link add
the wall-clock time, so a later decision can tell its own old move or link from a peer's newer one).
Nothing is normalised then: the first failing call that asks drains the entries appended since the last
question into an index, newest wins, so a decision costs a few dictionary lookups per directory above its path
however many calls came before (it never passes over the history).
``MEMORY`` holds the calls since the last question (at most ``MEMORY_SIZE``; the index keeps what the last
``MEMORY_SIZE`` told); mkdir and makedirs go to ``DIRS`` instead, which the index drains into directories kept
while they exist: a process's own ``mkdtemp`` tree stays its own however many calls come before its cleanup.
"""

from __future__ import annotations

import os
import stat
import threading

from . import state
from .calls import effects
from .calls import fspath as fspath
from .calls import norm as norm
from .calls import resolve_fds as resolve_fds  # what the happy path remembers: see fsguard.calls

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)

if TYPE_CHECKING:
    from typing import Any

    # (operation, args, kwargs), or for rename/replace/symlink/link (operation, args, kwargs, time.time() after)
    Entry = tuple[Any, ...]

MEMORY_SIZE = state.MEMORY_SIZE
MEMORY = state.STATE.memory.calls  # the happy path appends here (fsguard.patching)
DIRS = state.STATE.memory.dirs  # mkdir and makedirs append here instead
DIRS_SIZE = state.DIRS_SIZE


class Event:
    """The newest thing this process did to a path. ``made``; ``made-shared``, a ``makedirs(exist_ok=True)`` that made
    it. ``found``, a ``makedirs(exist_ok=True)`` that found the directory there, not made by this process.
    ``moved-away`` or ``removed``."""

    __slots__ = ("kind", "seq", "time")

    def __init__(self, kind: str, time: float | None, seq: int) -> None:
        self.kind = kind
        self.time = time  # wall-clock time after the call, where remembered (rename/replace/symlink/link)
        self.seq = seq

    def __repr__(self) -> str:
        return f"Event({self.kind!r}, time={self.time!r}, seq={self.seq})"


def _ancestry(path: str) -> list[str]:
    """``path`` and every directory above it, nearest first."""
    sep = os.sep
    if path[:1] == sep and path[-1:] != sep and sep + sep not in path:  # normalised: cut at each separator
        chain = [path]
        cut = path.rfind(sep)
        while cut > 0:
            path = path[:cut]
            chain.append(path)
            cut = path.rfind(sep)
        if len(path) > 1:
            chain.append(sep)
        return chain
    chain = [path]
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return chain
        chain.append(parent)
        path = parent


class _Index:
    """Normalised view of ``MEMORY`` and ``DIRS``, brought up to date lazily when a decision asks.

    Values are ``(seq, kind, time)`` tuples: ``seq`` orders events, the newest wins. ``MEMORY``'s entries get
    even numbers (twice their count), the directories drained from ``DIRS`` at one update the odd number after
    that update's last ``MEMORY`` entry (the order between the two deques within one update is not known: a
    directory that one of that update's removals or moves could have taken counts only if it is there now).
    What ``MEMORY`` tells is kept for its last ``MEMORY_SIZE`` entries; the directories this process made are
    kept while they exist (swept by ``lstat`` when there are many), however many calls come between.

    Every question costs a few lookups per directory above the path, never a pass over the history: both deques
    are drained (not copied) at each update, and "made anything below this directory" is read from ``below``:
    for every directory, the names made under it, oldest first (a name's every insertion appends, so the newest
    one still current is found from the end; a stale one there is dropped for good, since numbers only grow).
    """

    # Forget what fell out of MEMORY when the index holds this many more paths than MEMORY can.
    LIMIT = 4 * MEMORY_SIZE
    # Sweep the kept directories that no longer exist when more than this many are kept.
    DIRS_LIMIT = 4096
    # Rebuild ``below`` from the current names when it holds this many entries (then twice what it rebuilt).
    BELOW_LIMIT = 1 << 16

    def __init__(self) -> None:
        self.dirs: dict[str, tuple[int, str, float | None]] = {}  # made (or found) by mkdir/makedirs
        # directory (as "/a/b/") -> (seq, name, in dirs) of the names made below it, in the order of seq
        self.below: dict[str, list[tuple[int, str, bool]]] = {}
        self.below_count = 0
        self.below_at = self.BELOW_LIMIT
        self.below_parent: str | None = None  # the directory of the last name noted, and its lists in ``below``
        self.below_lists: list[list[tuple[int, str, bool]]] = []
        self.forget()

    def forget(self) -> None:
        """Everything, the kept directories too (a child forked while another thread updated the index)."""
        self.count = 0  # MEMORY entries indexed so far
        self.dirs.clear()
        self.sweep_at = self.DIRS_LIMIT
        self.clear()
        self._rebuild_below()  # the numbering starts again: no entry of before may look current

    def clear(self) -> None:
        """Forget what MEMORY told. The kept directories stay, and the numbering goes on. ``below``'s entries of what is
        forgotten are stale from now on; they are dropped when met or at the next rebuild."""
        self.made: dict[str, tuple[int, str, float | None]] = {}  # made at the path
        self.gone: dict[str, tuple[int, str, float | None]] = {}  # removed or moved away, with all below it
        self.gone_seq = 0  # the newest number in ``gone``

    def update(self) -> None:
        if not MEMORY and not DIRS:
            return  # nothing new since the last question
        # More than MEMORY_SIZE calls since the last question (the deque is full: the oldest may be lost):
        # what MEMORY told may have a gap, so start over.
        if len(MEMORY) >= MEMORY_SIZE:
            self.clear()
        first = 2 * (self.count + 1)  # this update's first number
        try:
            cwd: str | None = os.getcwd()  # relative paths: as the decision will see them (cwd is not remembered)
        except OSError:
            cwd = None
        for _ in range(len(MEMORY)):  # what is there now; calls other threads make meanwhile wait for the next
            try:
                entry = MEMORY.popleft()  # atomic: other threads append meanwhile
            except IndexError:
                break
            self.count += 1
            self._place(entry, 2 * self.count, cwd, self.made)
        if len(self.made) + len(self.gone) > self.LIMIT:  # keep only what the last MEMORY_SIZE entries told
            oldest = 2 * (self.count - MEMORY_SIZE + 1)
            self.made = {path: value for path, value in self.made.items() if value[0] >= oldest}
            self.gone = {path: value for path, value in self.gone.items() if value[0] >= oldest}
        self._drain(2 * self.count + 1, first, cwd)
        if self.below_count > self.below_at:
            self._rebuild_below()

    def _drain(self, seq: int, first: int, cwd: str | None) -> None:
        """Index the directories made since the last update. They are numbered ``seq``, after this update's MEMORY
        entries, numbered from ``first``."""
        dirs = self.dirs
        recent = self.gone_seq >= first  # something was removed or moved away in this update's span
        taken: dict[str, bool] = {}  # path -> whether it or a directory above it was (asked once per directory)
        while True:
            try:
                entry = DIRS.popleft()  # atomic: other threads append meanwhile
            except IndexError:
                break
            new: dict[str, tuple[int, str, float | None]] = {}
            self._place(entry, seq, cwd, new)
            for path, value in new.items():
                if recent and self._taken_since(path, first, taken) and not _is_dir(path):
                    continue  # removed or moved away in this update's span, after it was made
                dirs.pop(path, None)
                dirs[path] = value
                self._below(path, value[0], True)
        if len(dirs) > self.sweep_at:
            for path in [path for path in dirs if not _is_dir(path)]:
                del dirs[path]
            self.sweep_at = max(self.DIRS_LIMIT, 2 * len(dirs))

    def _taken_since(self, path: str, first: int, taken: dict[str, bool]) -> bool:
        """Whether ``path`` or a directory above it went at ``first`` or later."""
        gone, chain, hit = self.gone, [], False
        while True:
            known = taken.get(path)
            if known is not None:
                hit = known
                break
            chain.append(path)
            if gone.get(path, (0,))[0] >= first:
                hit = True
                break
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        for path in chain:
            taken[path] = hit
        return hit

    def _place(self, entry: Entry, seq: int, cwd: str | None, made: dict[str, tuple[int, str, float | None]]) -> None:
        """Put one remembered call into ``made`` and ``gone``. ``made`` is the index's, or for DIRS's entries a
        batch."""
        did, took, when = effects(entry, cwd)
        if did is not None:
            made[did[0]] = (seq, did[1], when)
            if made is self.made:
                self._below(did[0], seq, False)
        if took is not None:
            self._gone(took[0], (seq, took[1], when))

    def _gone(self, path: str, value: tuple[int, str, float | None]) -> None:
        self.gone[path] = value
        self.gone_seq = value[0]
        self.dirs.pop(path, None)  # older than this (directories below it go at the next sweep)

    def _below(self, path: str, seq: int, in_dirs: bool) -> None:
        """Note ``path`` (made at ``seq``) under every directory above it. Under each ``prefix`` (ending in the
        separator) that ``path.startswith``, as the question "anything below" reads it."""
        entry = (seq, path, in_dirs)
        parent = path[: path.rfind(os.sep) + 1]
        if parent != self.below_parent:  # names made one after another share their directories' lists
            below, find, sep = self.below, parent.find, os.sep
            lists: list[list[tuple[int, str, bool]]] = []
            at = find(sep)
            while at >= 0:
                lists.append(below.setdefault(parent[: at + 1], []))
                at = find(sep, at + 1)
            self.below_parent, self.below_lists = parent, lists
        for names in self.below_lists:
            names.append(entry)
        self.below_count += len(self.below_lists)

    def _rebuild_below(self) -> None:
        """``below`` from the names current now (dropping what only stale entries held)."""
        self.below = {}
        self.below_count = 0
        self.below_parent = None
        self.below_lists = []
        current = [(value[0], path, False) for path, value in self.made.items()]
        current += [(value[0], path, True) for path, value in self.dirs.items()]
        current.sort(key=lambda entry: entry[0])  # stable: names made at one number stay in their order
        for seq, path, in_dirs in current:
            self._below(path, seq, in_dirs)
        self.below_at = max(self.BELOW_LIMIT, 2 * self.below_count)

    def _newest_below(self, prefix: str) -> tuple[int, str, float | None] | None:
        """The newest event still current of a name made below ``prefix``, or None."""
        names = self.below.get(prefix)
        while names:
            seq, path, in_dirs = names[-1]
            value = (self.dirs if in_dirs else self.made).get(path)
            if value is not None and value[0] == seq:
                return value
            names.pop()  # overwritten by a newer event, forgotten or gone: never current again
            self.below_count -= 1
        return None

    def last_event(self, path: str, within: bool) -> Event | None:
        found = self.made.get(path)
        kept = self.dirs.get(path)
        if kept is not None and (found is None or kept[0] > found[0]):
            found = kept
        if within:
            newest = self._newest_below(path.rstrip(os.sep) + os.sep)
            if newest is not None and (found is None or newest[0] > found[0]):
                found = newest
        for above in _ancestry(path):
            gone = self.gone.get(above)
            if gone is not None and (found is None or gone[0] > found[0]):
                found = gone
        return None if found is None else Event(found[1], found[2], found[0])


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def _index() -> _Index:
    """The index of this process's remembered calls (``STATE.memory.index``, made at the first decision that asks)."""
    index = state.STATE.memory.index
    if not isinstance(index, _Index):
        index = state.STATE.memory.index = _Index()
    return index


@state.at_fork
def _after_fork_in_child() -> None:
    if state.STATE.memory.index_lock.locked():  # another thread was bringing it up to date: start again from the deques
        _index().forget()
    state.STATE.memory.index_lock = (
        threading.Lock()
    )  # a fork while another thread decided must not leave it held forever


def own_last(path: str, *, within: bool = False) -> Event | None:
    """The newest thing this process's guarded calls did to ``path`` (normalised), or None.

    ``made``: makedirs, mkdir, symlink or link made it, or something was renamed onto it (with ``within``:
    also anything below it); ``made-shared``: ``makedirs(exist_ok=True)`` made it (a name other processes make
    too: a peer may have written into it and may still commit it); ``found``: a ``makedirs(exist_ok=True)``
    found it there. ``moved-away``/``removed``: it, or a directory above it, was renamed away / removed by
    rmtree, remove, unlink or rmdir.
    """
    with state.STATE.memory.index_lock:  # the happy path never takes this lock
        index = _index()
        index.update()
        return index.last_event(path.rstrip(os.sep) or os.sep, within)


def own_last_event(path: str, *, within: bool = False) -> str | None:
    """Kind of :func:`own_last` (``made``, ``moved-away``, ``removed``), or None."""
    event = own_last(path, within=within)
    return event.kind if event is not None else None

"""Mechanism: run one guarded ``shutil.rmtree``: the yield window, the checked walk, fsguard's error handler.

The walk is the standard library's own ``rmtree`` code of the running interpreter (3.10's recursive
``_rmtree_safe_fd`` to 3.13's stack), run with fsguard's ``os.open``, ``os.unlink`` and ``os.rmdir`` in
place of the real ones: so the symlink-attack protection, the order of calls, the ``(func, path, exc)``
every handler gets (fsguard's functions are mapped back to ``os.open``/``os.unlink``/``os.rmdir`` before a
handler sees them), ``dir_fd`` and the exceptions are the standard library's by construction, version by
version. fsguard's functions add one thing: before each removal the tree must still be at its path
(the name's ``lstat`` as when the call began, one per entry: O(1) in the size of the parent on a coherent
local filesystem; where the mount may answer lookups from a cache, also fresh listings of the top's parent,
since such a mount may answer a lookup of a renamed name from its cache: one before the top's own removal, and
between them spaced so that they take at most a tenth of the walk). Once it is not, the walk stops and leaves
the moved tree alone; the guard's verdict names where it went and what was removed. Its ``scandir`` notes what
each directory held when the walk listed it: an entry that appeared later is never removed by a retry.
What to decide is ``fsguard.guards.rmtree``'s business; this module waits, walks, retries, locks, and asks the
``World`` it is given (``fsguard.guards.World``; live: ``fsguard.world.LIVE``) what it needs to know beyond its own
steps. Each call's walk is its own copy of the standard code, whose ``os`` reports to that walk's position: no
state is kept between calls or per thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from . import evidence, mounts
from .calls import Call, norm
from .guards import Rules, World, by_tag, own_event
from .guards import rmtree as rule
from .guards.rmtree import Plan, RmtreeVerdict
from .state import MEMORY_SIZE, STATE
from .waiting import Backoff, wait_for

_RETRIES = 4
_REMOVED_KEPT = 1000  # removed names kept per walk for a hazard record (the count is always exact)
_WALKERS = ("_rmtree_safe_fd", "_rmtree_unsafe", "_rmtree_safe_fd_step")  # shutil's functions rmtree calls


class _Moved(BaseException):
    """The tree is no longer at its path: stop the walk (not an ``OSError``: no handler of the walk sees it)."""

    def __init__(self, renamed_to: str | None) -> None:
        super().__init__(renamed_to)
        self.renamed_to = renamed_to  # where a peer renamed it within its parent, if that could be found


class _Vanishing(BaseException):
    """Entries vanish under the walk: a peer is removing the same tree. Stop walking (and wait for it)."""


# --- the os the standard rmtree code sees: fsguard's functions, reporting to one walk's position ----------


class _Os:
    """``os`` for one checked walk: ``lstat``, ``open``, ``unlink``, ``rmdir``, ``close`` and ``scandir`` are the
    walk's ``_Position``'s, which report each step to it (and ask it, through ``check``, whether the tree is still at
    its path); every other name is ``os``'s own, read live (a test or program that swaps ``os.lstat`` is obeyed)."""

    __slots__ = ("close", "lstat", "open", "rmdir", "scandir", "unlink")

    def __init__(self, position: _Position) -> None:
        # Bound once: the standard walk compares them by identity (3.13+: ``func is os.rmdir``).
        self.lstat = position.lstat
        self.open = position.open
        self.unlink = position.unlink
        self.rmdir = position.rmdir
        self.close = position.close
        self.scandir = position.scandir

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


class _Listing:
    """A ``scandir`` iterator that adds each name it yields to ``names``."""

    def __init__(self, listing: Any, names: set[str] | None) -> None:
        self._listing = listing
        self._names = names

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: object) -> None:
        self._listing.close()

    def __iter__(self) -> _Listing:
        return self

    def __next__(self) -> Any:
        entry = next(self._listing)
        if self._names is not None:
            self._names.add(os.fsdecode(entry.name))
        return entry

    def close(self) -> None:
        self._listing.close()


def _unguarded(name: str) -> Callable[..., Any]:
    """``os.<name>`` as the standard walk would call it (a program's or a test's own replacement included),
    but never fsguard's guarded wrapper of it: this walk decides its own failures (and holds the path's lock)."""
    func: Callable[..., Any] = getattr(os, name)
    original = STATE.originals.get(name)  # the unguarded os function, where fsguard patched it
    if original is not None and getattr(func, "__wrapped__", None) is original:
        return original  # type: ignore[return-value]
    return func


def _real(func: Any) -> Any:
    """The function a handler is told about: ``os.open`` for the walk's ``_Position.open``, and so on."""
    return getattr(os, func.__name__) if isinstance(getattr(func, "__self__", None), _Position) else func


class _Globals(dict[str, Any]):
    """The globals of one checked walk: ``shutil``'s own as they are when the walk first reads each name (a test or
    program that swaps ``shutil._rmtree_safe_fd`` or ``_use_fd_functions`` before the call is obeyed), with
    ``os`` replaced, and the standard walk functions ``rmtree`` calls copied to see these globals too. Each name
    is looked up once per walk, builtins included, then read from here at a plain dictionary's speed."""

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
    """A builtin by name (``__builtins__`` is a module or its dict); ``KeyError`` (Python's ``NameError``) if none."""
    found = builtins if isinstance(builtins, dict) else vars(builtins)
    return found[name]


def checked(original: Any, position: _Position) -> Callable[..., Any] | None:
    """The standard ``rmtree`` made to use fsguard's functions reporting to ``position`` (a copy for this walk:
    its globals say which position), or None where ``original`` is not the standard library's Python ``rmtree``
    (then it runs as it is, without the position checks)."""
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


# --- one walk ------------------------------------------------------------------------------------------


class _Removed:
    """What a walk removed from the tree: how many entries, and the first ``_REMOVED_KEPT`` names (a hazard
    record names them)."""

    __slots__ = ("count", "names")

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []


class _FreshListing:
    """Where this mount may answer lookups from a cache (NFS, FUSE...): the top's name in its parent's fresh
    listing, read spaced so that listings take at most a tenth of the walk's time, however big the parent."""

    __slots__ = ("after", "listed_ino", "top")

    def __init__(self, top: str) -> None:
        self.top = top
        self.listed_ino: Any = _UNSET  # the inode number the listing gave the name at the first check
        self.after = 0.0  # monotonic time before which no listing is read between directories

    def due(self) -> bool:
        """Whether to read a fresh listing before this step (a rename landing meanwhile costs the moved tree what
        was removed since the last listing, and the hazard record names it)."""
        return time.monotonic() >= self.after

    def shows_top(self) -> bool:
        """Whether the parent's fresh listing still shows the top's name as the inode it showed at the first
        look (True where that cannot be told: an unreadable listing)."""
        started = time.monotonic()
        listed = _listed_inode(self.top)
        now = time.monotonic()
        self.after = now + 9 * (now - started)
        if self.listed_ino is _UNSET:
            if listed is None:
                return False  # already gone from the listing: only a stale lookup still shows the name
            self.listed_ino = listed  # the listing's own number for the name: d_ino may differ from st_ino
            return True
        if self.listed_ino is _UNREADABLE or listed is _UNREADABLE:
            return True
        return bool(listed == self.listed_ino)


class _Position:
    """Where the tree being removed is: its top's name and identity, the directories the walk holds open, and
    what the walk removed from it. The walk's filesystem functions are its methods (``_Os``): they report each
    step to it and ask it, through ``check``, whether the tree is still at its path."""

    def __init__(self, top: str, world: World, held: _Held) -> None:
        self.top = top  # normalised
        # The top as it is before the walk (one lstat per guarded call; None if it cannot be read: rmtree
        # will say why): whether to wait for a peer, and which directory "the tree" is for a retry.
        self.top_st, self.top_missing = _lstat_top(top)
        self.ident: os.stat_result | None = None  # the walk's own open of the top (fstat)
        self.top_fd: int | None = None
        self.dirs: dict[int, str] = {}  # descriptor -> the directory the walk opened there
        self.listings: dict[str, set[str]] = {}  # directory -> the names the walk's first listing of it showed
        self.removed = _Removed()
        # Checks also read fresh listings (spaced) where this mount may answer lookups from a cache.
        stale = self.top_st is not None and world.lookups_may_be_stale(self.top_st.st_dev)
        self.fresh = _FreshListing(top) if stale else None
        self.checking = True  # False for a tree no peer can move meanwhile (fsguard.guards.rmtree.plan)
        self.held = held  # the top's descriptor, held while the call runs (see _find_renamed)

    def identity(self) -> os.stat_result | None:
        """The top's identity: from the walk's own open of it, else from the lstat before the walk."""
        return self.ident or self.top_st

    def is_tree(self) -> bool:
        """Whether the top was a directory before the walk (a rename can only take a tree away)."""
        return self.top_st is not None and stat.S_ISDIR(self.top_st.st_mode)

    def restart(self) -> None:
        """The walk starts again on the same tree: its next open is the top's again."""
        self.ident = None

    def renamed(self) -> str | None:
        """Where a peer renamed the tree within its parent, if that can be found (``_find_renamed``)."""
        return _find_renamed(self.top, self.identity(), self.held)

    def forget_missing(self) -> None:
        """The top's missing lookup is no longer the news (a wait for a lock or a peer came between)."""
        self.top_missing = False

    # --- the walk's own os functions (``_Os``): each step reported, each removal checked first --------------

    def lstat(self, path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        """``os.lstat``; the walk's first ``lstat`` of a top whose own lookup missed a moment ago (this call's first
        step, nothing waited for between) raises that answer again, as ``os.lstat`` would, without asking the
        filesystem twice (on a distributed one, a missed name is one request each time: nothing caches misses)."""
        if self.top_missing and dir_fd is None and isinstance(path, (str, bytes, os.PathLike)):
            self.top_missing = False
            if norm(path) == self.top:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return os.lstat(path, dir_fd=dir_fd)

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        self.check(boundary=False)  # entering a directory: the name's lstat (a listing only when one is due)
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        self.opened(fd, path, dir_fd)
        return fd

    def unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        self.check(boundary=False)
        _unguarded("unlink")(path, dir_fd=dir_fd)
        self.note_removed(path, dir_fd)

    def rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        self.check(boundary=dir_fd is None)  # the top itself: confirm with a fresh listing where lookups cache
        _unguarded("rmdir")(path, dir_fd=dir_fd)
        self.note_removed(path, dir_fd)

    def close(self, fd: int) -> None:
        self.closed(fd)
        os.close(fd)

    def scandir(self, path: Any = None) -> Any:
        """``os.scandir``, its names noted for the directory the walk lists: what was there when the walk looked
        (an entry that appears afterwards is not the call's to remove, see ``Walk._retry``)."""
        listing = os.scandir() if path is None else os.scandir(path)
        return _Listing(listing, self.listing_of(path))

    # --- what the steps report ------------------------------------------------------------------------

    def opened(self, fd: int, path: Any, dir_fd: int | None) -> None:
        name = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
        if self.ident is None:
            try:
                self.ident = os.fstat(fd)
            except OSError:
                return
            self.top_fd = fd
            self.dirs[fd] = self.top
        else:
            self.dirs[fd] = os.path.join(self.dirs.get(dir_fd, ""), name) if dir_fd is not None else name

    def listing_of(self, path: Any) -> set[str] | None:
        """The set that holds the names of the walk's first listing of the directory ``path`` names (a descriptor
        the walk opened, or a path); None for a later listing of it, or a directory it cannot name."""
        if isinstance(path, int):
            where = self.dirs.get(path)
        else:
            try:
                where = norm(path)
            except (TypeError, ValueError):
                where = None
        if where is None or where in self.listings:
            return None
        names: set[str] = set()
        self.listings[where] = names
        return names

    def closed(self, fd: int) -> None:
        self.dirs.pop(fd, None)
        if fd == self.top_fd:
            self.top_fd = None

    def note_removed(self, path: Any, dir_fd: int | None) -> None:
        if not self.checking:
            return  # a tree nobody can move: no hazard can name what was removed from it
        removed = self.removed
        removed.count += 1
        if len(removed.names) < _REMOVED_KEPT:
            name = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
            removed.names.append(os.path.join(self.dirs[dir_fd], name) if dir_fd in self.dirs else name)

    def check(self, boundary: bool) -> None:
        """Raise ``_Moved`` when the tree is no longer at its path (where that cannot be told, the call goes
        on: it then fails on its own, as the standard rmtree's would).

        "At its path" means: the name's own ``lstat`` is what it was when the call began (so a top that is a mount
        point, a path through a symlink, or an overlay's merged directory is judged by what the name shows, never
        by comparing two different kinds of inode numbers), and, where this mount's lookups may be answered from a
        cache (NFS, FUSE...), the parent's fresh listing still shows the name as the inode it showed at the first
        check (a renamed name may still answer a cached ``lstat``): always before the top's own removal
        (``boundary``), otherwise when one is due (``_FreshListing.due``). A coherent local filesystem is never listed:
        the name's ``lstat`` is the truth there, whatever the size of the parent."""
        start = self.top_st or self.ident
        if start is None or not self.checking:
            return
        missing = False
        try:
            here = os.path.samestat(os.lstat(self.top), start)
        except FileNotFoundError:
            here, missing = False, True
        except OSError:
            return
        fresh = self.fresh
        if here and fresh is not None and (boundary or fresh.due()) and not fresh.shows_top():
            here, missing = False, True  # a stale lookup cache still answers for a name the listing lost
        if here:
            return
        if self.top_fd is not None:
            try:
                if os.fstat(self.top_fd).st_nlink == 0:
                    return  # emptied and removed by a peer's rmtree: what is left fails on its own
            except OSError:
                pass
        renamed = self.renamed()
        if renamed is None and missing and self.top_fd is None:
            return  # no telling (the walk has let go of the top): the call fails on its own
        if renamed is None and self.top_fd is not None and not _entries_left(self.top_fd):
            # Not in its parent any more, and nothing left in it: a peer's rmtree of the same tree emptied and
            # removed it (a caching filesystem may still report its link count): not a rename, no hazard.
            return
        raise _Moved(renamed)


class _Caller:
    """What the caller of ``rmtree`` asked of its errors: ``ignore_errors``, its own ``onerror``/``onexc``
    (``onexc``: whether this ``rmtree`` takes one, 3.12+), and what it got (``forwarded``: the error that
    escaped to it, the caller's, never absorbed)."""

    __slots__ = ("forwarded", "ignore", "onerror", "onexc", "use_onexc")

    def __init__(
        self, ignore: bool, onerror: Callable[..., Any] | None, onexc: Callable[..., Any] | None, use_onexc: bool
    ) -> None:
        self.ignore = ignore
        self.onerror = onerror
        self.onexc = onexc
        self.use_onexc = use_onexc
        self.forwarded: BaseException | None = None

    @property
    def handler(self) -> str | None:
        """``"onexc"``/``"onerror"`` where the caller passed its own handler (and not ``ignore_errors``, which
        overrides it): then every error the walk meets is the handler's to decide, as in the standard ``rmtree``."""
        if self.ignore:
            return None
        return "onexc" if self.onexc is not None else "onerror" if self.onerror is not None else None

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any], walk: Walk) -> tuple[list[Any], dict[str, Any]]:
        """The caller's arguments with the walk's handler in place of the caller's (``onexc`` where it exists, else
        ``onerror``, in the position the caller used; none with ``ignore_errors``)."""
        positional, named = list(args), dict(kwargs)
        if not self.ignore:
            if self.use_onexc:
                named["onexc"] = walk.onexc
            elif len(positional) > 2:
                positional[2] = walk.onerror
            else:
                named["onerror"] = walk.onerror
        return positional, named

    def forward(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        """Pass an error on as the standard library does: to the caller's handler, or raise it."""
        try:
            if self.onexc is not None:
                self.onexc(func, path, exc)
            elif self.onerror is not None:
                self.onerror(func, path, exc_info or (type(exc), exc, exc.__traceback__))
            else:
                raise exc
        except BaseException as raised:
            self.forwarded = raised
            raise


class Found:
    """What a walk absorbed: entries a peer removed first, directories removed again, seconds waited, the top
    gone (``"before"`` or ``"after"`` the walk) and where a peer renamed it, the first error absorbed."""

    __slots__ = ("entries_gone", "first_error", "handed", "renamed_to", "retried", "top_gone", "waited")

    def __init__(self) -> None:
        self.entries_gone: list[str] = []
        self.retried: list[str] = []
        self.waited = 0.0
        self.top_gone: str | None = None
        self.renamed_to: str | None = None
        self.first_error: BaseException | None = None
        self.handed: str | None = None  # the caller's handler that got what a peer did (``Walk._hand``)

    def verdict(self, world: World) -> RmtreeVerdict | None:
        return rule.walk_verdict(
            self.entries_gone,
            self.retried,
            self.top_gone,
            self.renamed_to,
            self.waited,
            self.first_error,
            world,
            self.handed,
        )


class Walk:
    """fsguard's error handler for one guarded ``rmtree`` call, and what it found: called by the standard
    rmtree as ``onerror(func, path, exc_info)`` or ``onexc(func, path, exc)``. It passes the caller's errors
    on to the caller's handler (or raises them), and absorbs only what the rule says a peer did."""

    def __init__(self, position: _Position, original: Callable[..., Any], caller: _Caller, world: World, rules: Rules):
        self.position = position
        self.remover = original  # the caller's rmtree; ``checked`` makes it the checked walk
        self.caller = caller
        self.world = world
        self.rules = rules
        self.found = Found()
        self.wait_on_vanish = False  # stop at the first vanished entry and wait for the peer (``remove``)

    def set_checking(self, checking: bool) -> None:
        """Remove the tree with the position checked (the standard walk's copy for this walk, where the caller's
        ``rmtree`` is the standard one), or, for a tree no peer can move meanwhile, with the caller's ``rmtree``
        as it is: no checks, and no copy made."""
        position = self.position
        position.checking = checking
        if checking:
            self.remover = checked(self.remover, position) or self.remover

    def remove(self, positional: list[Any], named: dict[str, Any], wait_on_vanish: bool = False) -> None:
        """Run the remover on the caller's arguments, with this walk's position checked. ``wait_on_vanish``:
        stop at the first entry a peer removed (``_Vanishing``), to wait for it instead of racing it."""
        self.wait_on_vanish = wait_on_vanish
        self.remover(*positional, **named)

    def top_went(self, error: FileNotFoundError) -> bool:
        """Whether the top went while the walk ran (``error``, saying so, escaped the handler): the rule waits
        for the evidence."""
        found = self.found
        gone, waited = rule.escaped_gone(self.position.top, self.world, self.rules)
        found.waited += waited
        if gone:
            found.top_gone = "after"
            found.first_error = found.first_error or error
        return gone

    def onerror(self, func: Callable[..., Any], path: Any, exc_info: Any) -> None:
        self._handle(_real(func), path, exc_info[1], exc_info)

    def onexc(self, func: Callable[..., Any], path: Any, exc: BaseException) -> None:
        self._handle(_real(func), path, exc, None)

    def _handle(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        code = getattr(exc, "errno", None)
        found, top = self.found, self.position.top
        is_top = norm(path) == top
        if code == errno.ENOENT and found.first_error is None:
            found.first_error = exc
        if self.caller.handler is not None:
            # The caller's own handler is the program's decision: it gets every error, as from the standard rmtree
            # (a tree or entries a peer removed included; the record says what it got).
            if code == errno.ENOENT:
                self._hand(func, is_top, path)
            self.caller.forward(func, path, exc, exc_info)
            return
        if code == errno.ENOENT:
            if not is_top and not rule.entry_gone_by_peer(self.rules):
                self.caller.forward(func, path, exc, exc_info)  # the standard library's error, at once
                return
            if not is_top:
                found.entries_gone.append(norm(path))
                if self.wait_on_vanish and rule.settle_on_vanishing(len(found.entries_gone)):
                    self.wait_on_vanish = False  # once per call: a resumed walk goes to its end
                    raise _Vanishing
                return
            if func is os.rmdir:
                found.top_gone = "after"
                found.renamed_to = self.position.renamed()
                return
            missed = func is os.lstat or func is os.open  # the top's own lookup said it just now
            gone, waited = rule.top_gone_before_by_peer(top, self.world, self.rules, missed)
            found.waited += waited
            if gone:
                found.top_gone = "before"
                return
        elif code in (errno.ENOTEMPTY, errno.EBUSY) and func is os.rmdir and self._retry(path, code, sys._getframe(2)):
            return
        self.caller.forward(func, path, exc, exc_info)

    def _hand(self, func: Callable[..., Any], is_top: bool, path: Any) -> None:
        """Note, for the record, a ``FileNotFoundError`` the caller's handler gets that the rule would have absorbed
        as a peer's doing (decided from what the listings show now: the handler gets it anyway, no waiting)."""
        found, rules = self.found, self.rules
        if not is_top:
            if not rule.entry_gone_by_peer(rules):
                return
            found.entries_gone.append(norm(path))
        elif func is os.rmdir:
            found.top_gone = "after"
        else:
            gone, _ = rule.top_gone_before_by_peer(self.position.top, self.world, rules.without_waits())
            if not gone:
                return
            found.top_gone = "before"
        found.handed = self.caller.handler

    def _retry(self, path: Any, code: int, frame: Any) -> bool:
        """Remove a directory again that is not empty at its removal, if it is still the same directory and
        everything in it now was in it when the walk listed it, or is what a removal in progress leaves (an NFS or
        FUSE client's silly-renamed ``.nfs…``/``.fuse_hidden…`` file of an unlinked open one). An entry that
        appeared after the walk's listing (a peer publishing into the tree) is not the call's to remove, and
        neither is a busy mount point (no peer's removal ends that): the error goes where the standard rmtree
        sends it."""
        where = norm(path)
        before = self._started_on(where, frame)
        if code == errno.EBUSY and before is not None and not rule.busy_may_clear(where, before, self.world):
            return False
        found = self.found
        backoff = Backoff(self.rules.settle_s - found.waited, 0.02, 0.16, tries=_RETRIES, paused_only=True)
        try:
            while backoff.pause():
                now = self.world.lstat(where)
                if now is None:
                    found.retried.append(where)
                    return True  # a peer finished it
                if before is None or not os.path.samestat(before, now):
                    return False  # a different directory now stands there (or no telling): not ours to remove
                done = self._remove_again(where)
                if done is None:
                    return False  # something was put there after the walk listed it: not ours to remove
                if done:
                    found.retried.append(where)
                    return True
            return False
        finally:
            found.waited += backoff.waited()

    def _remove_again(self, where: str) -> bool | None:
        """Remove the directory ``where`` and what is in it, if all of that is what the walk listed there (or a
        removal's residue; directories among it alike): True when it is gone, False when something of it stays
        (tried again, bounded, by ``_retry``), None when something in it appeared after the walk's listing."""
        try:
            names = os.listdir(where)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        listed = self.position.listings.get(where, set())
        if not all(name in listed or _removal_residue(name) for name in names):
            return None
        for name in names:
            full = os.path.join(where, name)
            try:
                if stat.S_ISDIR(os.lstat(full).st_mode):
                    done = self._remove_again(full)
                    if done is not True:
                        return done
                else:
                    _unguarded("unlink")(full)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        try:
            _unguarded("rmdir")(where)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    def _started_on(self, path: str, frame: Any) -> os.stat_result | None:
        """The directory the standard ``rmtree`` found at ``path`` when it started removing it, read from its
        failing frame: ``orig_st`` (the recursive walk), or the stat cached in ``orig_entry`` (the stack-based
        walk, which keeps no stat of the top: for the top, the walk's own)."""
        found: Any = frame.f_locals if frame is not None else {}
        st = found.get("orig_st")
        entry = found.get("orig_entry")
        if st is None and entry is not None:
            try:
                st = entry.stat(follow_symlinks=False)  # cached when the walk reached the entry: no new lookup
            except OSError:
                st = None
        if st is None and path == self.position.top:
            st = self.position.identity()
        return st if isinstance(st, os.stat_result) else None

    def wait_for_peer_removal(self) -> bool:
        """A peer is removing this tree: wait, at most ``FSGUARD_SETTLE_S``, for its name to leave the parent's
        fresh listing, instead of racing the peer entry by entry (N ranks' walks of one tree cost N times its
        metadata operations). True when the tree went (removed, or renamed: then where), False to walk on.

        Each probe is the name's own lookup (a peer's removal on this node shows there at once, and where the mount
        caches no missing names a miss is the truth: ``World.look``); while the lookup still shows the tree, a
        listing (several requests to a distributed filesystem's metadata server) is read only when one is due:
        ``_LISTING_EVERY_S`` into the wait, or the mount's own lookup cache time where it shows one (JuiceFS's
        1 s: the lookup is fresh by then), then each after at least as long again as the wait has lasted (a
        handful in a long wait, however slow the peer), and listings taking at most a tenth of the time."""
        found, world, position = self.found, self.world, self.position
        top = position.top
        start = position.top_st or position.identity()  # what the name showed when the call began (see ``check``)
        began = time.monotonic()
        # Where the mount says how long a lookup may stay stale, the lookup itself is fresh by then: no listing before
        cached = mounts.cache_s(start.st_dev) if start is not None else None
        listing = _Spacing(began + max(_LISTING_EVERY_S, cached or 0.0), began)

        def went() -> bool | None:
            now = world.lstat(top)
            if now is not None and start is not None and not os.path.samestat(now, start):
                found.top_gone = "after"  # our tree went; another one stands there now: not ours to remove
                return True
            if now is not None and not listing.due():
                return None  # still there by its lookup; no listing due yet
            seen = listing.timed(lambda: world.look(top, missed=now is None))  # a miss is not asked twice
            if not seen.present:  # gone (its parent too, or its parent unreadable: the walk will tell)
                if not seen.parent_exists:
                    return False
                found.top_gone = "after"
                # the plain walk's tree, which no peer moves: removed by the peer this wait was for, not searched
                found.renamed_to = position.renamed() if position.checking else None
                return True
            return None

        gone, waited = wait_for(went, self.rules.settle_s, 0.005, 0.05)
        found.waited += waited
        if not gone:
            position.restart()  # the same tree (checked): the resumed walk's open is its top again
        return bool(gone)


_LISTING_EVERY_S = 0.05  # a wait for a peer's removal reads its first fresh listing this far in (see above)


class _Spacing:
    """When the next fresh listing of a wait that began at ``began`` is due: at ``after``, then each after at least
    as long again as the wait has lasted, listings taking at most a tenth of the time (and at least
    ``_LISTING_EVERY_S`` apart)."""

    __slots__ = ("after", "began")

    def __init__(self, after: float, began: float) -> None:
        self.after = after
        self.began = began

    def due(self) -> bool:
        return time.monotonic() >= self.after

    def timed(self, read: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return read()
        finally:
            now = time.monotonic()
            self.after = now + max(_LISTING_EVERY_S, 9 * (now - started), now - self.began)


def _removal_residue(name: str) -> bool:
    """Whether ``name`` is what a client leaves of an open file that was unlinked: NFS's ``.nfs`` plus 24 hex
    digits, FUSE's ``.fuse_hidden`` plus 16 (the entry a removal of the tree took away, not a new one)."""
    import re

    return re.fullmatch(r"\.nfs[0-9a-fA-F]{24}|\.fuse_hidden[0-9a-fA-F]{16}", name) is not None


def _lstat_top(path: str) -> tuple[os.stat_result | None, bool]:
    """The top's ``lstat`` before the walk (None where it cannot be read: rmtree will say why), and whether its
    name was missing (``FileNotFoundError``)."""
    try:
        return os.lstat(path), False
    except FileNotFoundError:
        return None, True
    except (OSError, ValueError):  # unreadable, a NUL in the name: the standard rmtree reports it
        return None, False


_UNSET: Any = object()
_UNREADABLE: Any = object()


def _listed_inode(top: str) -> Any:
    """The inode number a fresh listing of the parent gives ``top``'s name: None when it is not listed,
    ``_UNREADABLE`` when the listing cannot be read. Stops at the name."""
    parent, name = os.path.split(top)
    try:
        with os.scandir(parent or os.curdir) as entries:
            for entry in entries:
                if entry.name == name:
                    return entry.inode()
    except OSError:
        return _UNREADABLE
    return None


def _entries_left(fd: int) -> bool:
    """Whether the directory open at ``fd`` still lists entries (a fresh ``readdir``; False when it cannot)."""
    try:
        return bool(os.listdir(fd))
    except OSError:
        return False


def _find_renamed(top: str, orig: os.stat_result | None, held: _Held) -> str | None:
    """Where the tree went, if a peer renamed it within its parent (found by its inode).

    An inode number is only an identity while something holds the inode: once the tree is removed, the next
    directory made may get its number (ext4 gives it at once). So the guarded call holds a descriptor of the
    top (``_Held``): while it is open the number cannot be reused, and a link count of 0 (or a handle the
    server no longer knows) says the tree was removed, not moved. Without one (the top could not be opened),
    the inode and device alone decide."""
    if orig is None:
        return None
    fd = held.fds.get((orig.st_dev, orig.st_ino))
    if fd is not None:
        try:
            if os.fstat(fd).st_nlink == 0:
                return None  # removed (a caching filesystem may still report links: the held number decides)
        except OSError:
            return None  # e.g. ESTALE: the server removed it
    try:
        with os.scandir(os.path.dirname(top)) as entries:
            for entry in entries:
                if entry.inode() == orig.st_ino:
                    st = entry.stat(follow_symlinks=False)
                    if st.st_dev == orig.st_dev:
                        return entry.path
    except OSError:
        return None
    return None


class _Held:
    """The descriptor of the tree's top that one guarded call holds open while it may search for it by inode
    (``_find_renamed``); closed when the call ends."""

    __slots__ = ("fds",)

    def __init__(self) -> None:
        self.fds: dict[tuple[int, int], int] = {}

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds.values():
            os.close(fd)

    def take(self, path: str, expected: os.stat_result) -> None:
        """Open the directory at ``path`` if it is still ``expected`` (nothing held otherwise: no telling). An
        ``O_PATH`` descriptor where there is one, its identity from the attributes this node holds
        (``evidence.identity``): it holds the inode without a request to a distributed filesystem's server."""
        key = (expected.st_dev, expected.st_ino)
        if key in self.fds:
            return
        try:
            fd = os.open(path, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if evidence.identity(fd) == key:
                self.fds[key] = fd
                return
        except OSError:
            pass
        os.close(fd)


# --- the call ------------------------------------------------------------------------------------------


def wait_for_move(
    top: str, world: World, budget_s: float, pending: Callable[[], bool] | None, settle_s: float
) -> tuple[str, float]:
    """Poll fresh listings of the parent, up to ``budget_s``, for ``top`` to disappear (a peer moved it).

    ``pending``: whether a peer announced a rename of ``top`` (serialized mode); while one is announced the
    wait goes on up to ``settle_s`` more. Returns ("" when it stayed, else how it went, seconds waited)."""
    backoff = Backoff(budget_s, 0.002, 0.02)
    how = "(its name left the fresh listing)"
    extended = False
    while True:
        seen = world.look(top)
        if seen.parent_exists and not seen.present:
            return how, backoff.waited()
        if not seen.parent_exists:
            return "", backoff.waited()
        if pending is not None and not extended and pending():
            backoff.budget_s, extended = max(backoff.budget_s, backoff.waited() + settle_s), True
            how = "(a rename announced to the serialization backend went first)"
        if not backoff.pause():
            return "", backoff.waited()


def run(
    original: Callable[..., Any],
    call: Call,
    world: World,
    rules: Rules,
    use_onexc: bool,
    yield_s: float,
    serializer: Any = None,
) -> RmtreeVerdict | None:
    """One guarded ``rmtree`` call; a verdict when something needs a record. ``world``: what the walk asks
    (live: ``fsguard.world.LIVE``), ``rules``: the numbers (``fsguard.failure.rules()``).

    The walk gets the caller's own arguments, fsguard's handler in place of the caller's (``_Caller``), so it
    accepts or rejects the call as the standard ``rmtree`` would alone. With a serializer, the walk runs holding
    the path's lock, after letting a rename of the same path that a peer announced go first."""
    top, args, kwargs = call.path, call.args, call.kwargs  # the call's parts this module reads: here only
    if top is None:
        original(*args, **kwargs)  # the standard rmtree says what is wrong (outside any except)
        return None
    caller = _Caller(call.on_error.ignore_errors, call.on_error.onerror, call.on_error.onexc, use_onexc)
    with _Held() as held:  # the top's descriptor: see _find_renamed
        position = _Position(top, world, held)
        walk = Walk(position, original, caller, world, rules)
        positional, named = caller.arguments(args, kwargs, walk)
        return _Course(walk, positional, named, serializer).run(yield_s)


def _remember_scratch(scratch: dict[str, None], top: str) -> None:
    """Note ``top`` as this process's own scratch path (``fsguard.guards.rmtree.plan``), keeping the newest
    ``MEMORY_SIZE`` paths."""
    scratch.pop(top, None)
    scratch[top] = None
    while len(scratch) > MEMORY_SIZE:
        del scratch[next(iter(scratch))]


class _Course:
    """The course of one guarded ``rmtree``: its plan, the yield window, the walk (alone, or holding the path's
    lock), and a failure that escaped the walk's handler, into one verdict."""

    def __init__(self, walk: Walk, positional: list[Any], named: dict[str, Any], serializer: Any) -> None:
        self.walk = walk
        self.arguments = (positional, named)  # the caller's, with fsguard's handler in place of the caller's
        self.serializer = serializer
        self.top = walk.position.top
        self.pending: Callable[[], bool] | None = None  # whether a peer announced a rename of the top (serialized)
        self.window = 0.0  # seconds waited for a peer to move the tree before (or instead of) the walk

    def run(self, yield_s: float) -> RmtreeVerdict | None:
        walk, top, world, rules = self.walk, self.top, self.walk.world, self.walk.rules
        position = walk.position
        tree = position.is_tree()
        if tree and position.top_st is not None:
            position.held.take(top, position.top_st)
        serializer = self.serializer
        if serializer is not None and tree:
            self.pending = lambda: bool(serializer.pending(top))
        # The cheap tests first: own memory is asked only for a directory, in a job with peers.
        own = own_event(world, top) if tree and rules.peers else None
        scratch = STATE.memory.scratch
        plan: Plan = rule.plan(top, position.top_st, own, world, rules, yield_s, top in scratch) if tree else "check"
        # "plain": nobody can move it meanwhile: the standard walk itself, with fsguard's error handler
        walk.set_checking(plan != "plain")
        if plan == "wait" or self._announced():
            yielded = self._yield(yield_s)
            if yielded is not None:
                self._tell_handler()
                return yielded
        try:
            yielded = self._walk()
            if yielded is not None:
                return yielded
        except _Moved as moved:
            removed, waited = position.removed.names, walk.found.waited + self.window
            return rule.moved_mid_walk(top, moved.renamed_to, removed, waited)
        except FileNotFoundError as exc:
            if not self._absorbs(exc):
                raise
        found = walk.found.verdict(world)
        if plan == "wait" and position.removed.count:
            if own == "made-shared":  # no peer used the window: this process's own scratch at this path
                _remember_scratch(scratch, top)
            identity = by_tag(rules.whose(world.job_tag(top)))
            return rule.removed_peer_tree(top, self.window, found, made_here=own == "made-shared", identity=identity)
        return found

    def _tell_handler(self) -> None:
        """The tree left while this process waited: where the caller passed its own handler, the standard walk runs
        now all the same, so that the handler sees the missing tree as the standard ``rmtree`` called now shows it
        (a tree that stands there meanwhile is another one: the checked walk stops before removing anything)."""
        walk, (positional, named) = self.walk, self.arguments
        if walk.caller.handler is None or not walk.position.checking:
            return
        try:
            walk.remove(positional, named)
        except _Moved:
            pass

    def _announced(self) -> bool:
        return self.pending is not None and self.pending()

    def _yield(self, budget_s: float) -> RmtreeVerdict | None:
        """Wait up to ``budget_s`` (more while a peer's announced rename is pending) for a peer to move the
        tree away: the verdict saying where it went, or None when it stayed."""
        walk = self.walk
        how, waited = wait_for_move(self.top, walk.world, budget_s, self.pending, walk.rules.settle_s)
        self.window += waited
        if not how:
            return None
        position = walk.position
        return rule.yielded(self.top, self.window, how, _find_renamed(self.top, position.top_st, position.held))

    def _walk(self) -> RmtreeVerdict | None:
        """Remove the tree: alone (waiting for a peer that removes it too), or holding the path's lock (then a
        rename of it that a peer announced meanwhile goes first: its verdict)."""
        walk, (positional, named) = self.walk, self.arguments
        if self.serializer is None:
            # Only in a job with peers (a lone process has nobody to wait for); serialized, peers do not walk
            # the tree meanwhile.
            try:
                raises = not walk.caller.ignore and walk.caller.handler is None  # no handler of the caller's
                walk.remove(positional, named, wait_on_vanish=raises and walk.rules.peers)
            except _Vanishing:
                if not walk.wait_for_peer_removal():
                    walk.remove(positional, named)  # the peer stopped (or is slow): remove what is left
            return None

        walk.position.forget_missing()  # the lock may be a wait: the walk asks the top's name again

        def call() -> bool:
            walk.remove(positional, named)
            return True

        def call_unless_announced() -> bool:
            return False if self._announced() else call()

        if self.serializer.call("rmtree", [self.top], call_unless_announced, (), {}):
            return None
        # A peer announced a rename of this path while this process waited for the lock: give the lock back so
        # that it goes first, then remove only what is still here.
        yielded = self._yield(0.0)
        if yielded is None:
            self.serializer.call("rmtree", [self.top], call, (), {})
        else:
            self._tell_handler()
        return yielded

    def _absorbs(self, error: FileNotFoundError) -> bool:
        """Whether a failure that escaped the handler (e.g. ``fstat`` of the top on FUSE after a peer removed it)
        is the top gone meanwhile. One the handler passed on to the caller (raised, or raised by the caller's
        handler) is the caller's, and so is any with ``ignore_errors``."""
        caller = self.walk.caller
        if error is caller.forwarded or caller.ignore:
            return False
        name = getattr(error, "filename", None)
        if name is not None and norm(name) != self.top:
            return False
        return self.walk.top_went(error)

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
What to decide is ``fsguard.guards.rmtree``'s business; this module waits, walks, retries, locks.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import evidence
from .calls import Call
from .guards import Rules, by_tag
from .guards import rmtree as rule
from .guards.rmtree import Removal
from .state import STATE
from .waiting import Backoff, wait_for

_RETRIES = 4
_REMOVED_KEPT = 1000  # removed names kept per walk for a hazard record (the count is always exact)
_local = threading.local()


class _Moved(BaseException):
    """The tree is no longer at its path: stop the walk (not an ``OSError``: no handler of the walk sees it)."""

    def __init__(self, renamed_to: str | None) -> None:
        super().__init__(renamed_to)
        self.renamed_to = renamed_to  # where a peer renamed it within its parent, if that could be found


class _Vanishing(BaseException):
    """Entries vanish under the walk: a peer is removing the same tree. Stop walking (and wait for it)."""


def _current() -> _Position | None:
    positions: list[_Position] | None = getattr(_local, "positions", None)
    return positions[-1] if positions else None


# --- fsguard's three filesystem functions, used by the standard rmtree code in place of os's -------------


def _open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    position = _current()
    if position is not None:
        position.check(boundary=False)  # entering a directory: the name's lstat (a listing only when one is due)
    fd = os.open(path, flags, mode, dir_fd=dir_fd)
    if position is not None:
        position.opened(fd, path, dir_fd)
    return fd


def _unlink(path: Any, *, dir_fd: int | None = None) -> None:
    position = _current()
    if position is not None:
        position.check(boundary=False)
    _unguarded("unlink")(path, dir_fd=dir_fd)
    if position is not None:
        position.removed(path, dir_fd)


def _rmdir(path: Any, *, dir_fd: int | None = None) -> None:
    position = _current()
    if position is not None:
        position.check(boundary=dir_fd is None)  # the top itself: confirm with a fresh listing where lookups cache
    _unguarded("rmdir")(path, dir_fd=dir_fd)
    if position is not None:
        position.removed(path, dir_fd)


def _close(fd: int) -> None:
    position = _current()
    if position is not None:
        position.closed(fd)
    os.close(fd)


def _scandir(path: Any = None) -> Any:
    """``os.scandir``, its names noted for the directory the walk lists: what was there when the walk looked (an
    entry that appears afterwards is not the call's to remove, see ``Walk._retry``)."""
    listing = os.scandir() if path is None else os.scandir(path)
    position = _current()
    if position is None:
        return listing
    return _Listing(listing, position.listing_of(path))


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


_OURS: dict[Any, str] = {_open: "open", _unlink: "unlink", _rmdir: "rmdir", _close: "close", _scandir: "scandir"}


def _real(func: Any) -> Any:
    """The function a handler is told about: ``os.open`` for fsguard's ``_open``, and so on."""
    name = _OURS.get(func)
    return getattr(os, name) if name is not None else func


class _Globals(dict[str, Any]):
    """The globals of the checked walk: ``shutil``'s own, read live (a test or program that swaps
    ``shutil._rmtree_safe_fd`` or ``_use_fd_functions`` is obeyed), with ``os`` replaced."""

    def __init__(self, module: dict[str, Any], proxy: types.ModuleType, clones: dict[Any, Any]) -> None:
        super().__init__(os=proxy, __builtins__=module.get("__builtins__", __builtins__))
        self._module = module
        self._clones = clones  # the standard walk functions -> their copies that see these globals

    def __missing__(self, name: str) -> Any:
        value = self._module[name]
        return self._clones.get(value, value)


def _os_proxy() -> types.ModuleType:
    proxy = types.ModuleType("os")
    proxy.open = _open  # type: ignore[attr-defined]
    proxy.unlink = _unlink  # type: ignore[attr-defined]
    proxy.rmdir = _rmdir  # type: ignore[attr-defined]
    proxy.close = _close  # type: ignore[attr-defined]
    proxy.scandir = _scandir  # type: ignore[attr-defined]
    proxy.__getattr__ = lambda name: getattr(os, name)  # type: ignore[method-assign]  # live: os.close swapped...
    return proxy


def checked(original: Any) -> Callable[..., Any] | None:
    """The standard ``rmtree`` made to use fsguard's functions, or None where ``original`` is not the
    standard library's Python ``rmtree`` (then it runs as it is, without the position checks)."""
    found = STATE.caches.rmtree_checked
    if found is not None and found[0] is original:
        checked_copy: Callable[..., Any] | None = found[1]
        return checked_copy
    result = None
    module = getattr(original, "__globals__", None)
    if isinstance(original, types.FunctionType) and module is vars(shutil) and original.__name__ == "rmtree":
        clones: dict[Any, Any] = {}
        namespace = _Globals(module, _os_proxy(), clones)
        for name in ("_rmtree_safe_fd", "_rmtree_unsafe", "_rmtree_safe_fd_step"):
            function = module.get(name)
            if isinstance(function, types.FunctionType):
                clones[function] = _clone(function, namespace)
        result = _clone(original, namespace)
    STATE.caches.rmtree_checked = (original, result)
    return result


def _clone(function: types.FunctionType, namespace: dict[str, Any]) -> types.FunctionType:
    copy = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    return copy


# --- one walk ------------------------------------------------------------------------------------------


class _Position:
    """Where the tree being removed is: its top's name and identity, the directories the walk holds open, and
    what the walk removed from it. The walk's filesystem functions (``_open``, ``_unlink``, ``_rmdir``,
    ``_close``) report to it and ask it, through ``check``, whether the tree is still at its path."""

    def __init__(self, top: str) -> None:
        self.top = top  # normalised
        # The top as it is before the walk (one lstat per guarded call; None if it cannot be read: rmtree
        # will say why): whether to wait for a peer, and which directory "the tree" is for a retry.
        self.top_st = _lstat_quietly(top)
        self.ident: os.stat_result | None = None  # the walk's own open of the top (fstat)
        self.top_fd: int | None = None
        self.dirs: dict[int, str] = {}  # descriptor -> the directory the walk opened there
        self.removed_names: list[str] = []  # the first ``_REMOVED_KEPT``, for a hazard record
        self.listings: dict[str, set[str]] = {}  # directory -> the names the walk's first listing of it showed
        self.removed_count = 0
        # Whether this mount may answer lookups from a cache (then checks also read fresh listings, spaced),
        # and the inode number the listing gave the top's name at the first check (None: not listed then).
        self.cached_lookups = self.top_st is not None and evidence.lookups_may_be_stale(self.top_st.st_dev)
        self.listed_ino: Any = _UNSET
        self.fresh_after = 0.0  # monotonic time before which no listing is read between directories
        self.checking = True  # False for a tree no peer can move meanwhile (fsguard.guards.rmtree.removal)

    def identity(self) -> os.stat_result | None:
        """The top's identity: from the walk's own open of it, else from the lstat before the walk."""
        return self.ident or self.top_st

    def is_tree(self) -> bool:
        """Whether the top was a directory before the walk (a rename can only take a tree away)."""
        return self.top_st is not None and stat.S_ISDIR(self.top_st.st_mode)

    def restart(self) -> None:
        """The walk starts again on the same tree: its next open is the top's again."""
        self.ident = None

    @contextmanager
    def active(self) -> Iterator[None]:
        """The walk's filesystem functions report to this position while the block runs (in this thread)."""
        positions = _local.__dict__.setdefault("positions", [])
        positions.append(self)
        try:
            yield
        finally:
            positions.pop()

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
                where = evidence.norm(path)
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

    def removed(self, path: Any, dir_fd: int | None) -> None:
        if not self.checking:
            return  # a tree nobody can move: no hazard can name what was removed from it
        self.removed_count += 1
        if len(self.removed_names) < _REMOVED_KEPT:
            name = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
            self.removed_names.append(os.path.join(self.dirs[dir_fd], name) if dir_fd in self.dirs else name)

    def check(self, boundary: bool) -> None:
        """Raise ``_Moved`` when the tree is no longer at its path (where that cannot be told, the call goes
        on: it then fails on its own, as the standard rmtree's would).

        "At its path" means: the name's own ``lstat`` is what it was when the call began (so a top that is a mount
        point, a path through a symlink, or an overlay's merged directory is judged by what the name shows, never
        by comparing two different kinds of inode numbers), and, where this mount's lookups may be answered from a
        cache (NFS, FUSE...), the parent's fresh listing still shows the name as the inode it showed at the first
        check (a renamed name may still answer a cached ``lstat``): always before the top's own removal
        (``boundary``), otherwise when one is due (``_fresh_due``). A coherent local filesystem is never listed:
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
        if here and self.cached_lookups and (boundary or self._fresh_due()) and not self._listed_here():
            here, missing = False, True  # a stale lookup cache still answers for a name the listing lost
        if here:
            return
        if self.top_fd is not None:
            try:
                if os.fstat(self.top_fd).st_nlink == 0:
                    return  # emptied and removed by a peer's rmtree: what is left fails on its own
            except OSError:
                pass
        renamed = _find_renamed(self.top, self.identity())
        if renamed is None and missing and self.top_fd is None:
            return  # no telling (the walk has let go of the top): the call fails on its own
        if renamed is None and self.top_fd is not None and not _entries_left(self.top_fd):
            # Not in its parent any more, and nothing left in it: a peer's rmtree of the same tree emptied and
            # removed it (a caching filesystem may still report its link count): not a rename, no hazard.
            return
        raise _Moved(renamed)

    def _fresh_due(self) -> bool:
        """Whether to read a fresh listing before this step (mounts whose lookups may be cached only): spaced so
        that listings take at most a tenth of the walk's time, however big the parent (a rename landing meanwhile
        costs the moved tree what was removed since the last listing, and the hazard record names it)."""
        return time.monotonic() >= self.fresh_after

    def _listed_here(self) -> bool:
        """Whether the parent's fresh listing still shows the top's name as the inode it showed at the first
        look (True where that cannot be told: an unreadable listing)."""
        started = time.monotonic()
        listed = _listed_inode(self.top)
        now = time.monotonic()
        self.fresh_after = now + 9 * (now - started)
        if self.listed_ino is _UNSET:
            if listed is None:
                return False  # already gone from the listing: only a stale lookup still shows the name
            self.listed_ino = listed  # the listing's own number for the name: d_ino may differ from st_ino
            return True
        if self.listed_ino is _UNREADABLE or listed is _UNREADABLE:
            return True
        return bool(listed == self.listed_ino)


class Walk:
    """fsguard's error handler for one guarded ``rmtree`` call, and what it found: called by the standard
    rmtree as ``onerror(func, path, exc_info)`` or ``onexc(func, path, exc)``. It passes the caller's errors
    on to the caller's handler (or raises them), and absorbs only what the rule says a peer did."""

    def __init__(
        self,
        remover: Callable[..., Any],
        top: Any,
        rules: Rules,
        use_onexc: bool,
        onerror: Callable[..., Any] | None,
        onexc: Callable[..., Any] | None,
    ) -> None:
        self.remover = remover
        self.position = _Position(evidence.norm(top))
        self.rules = rules
        self.use_onexc = use_onexc
        self.user_onerror = onerror
        self.user_onexc = onexc
        self.entries_gone: list[str] = []
        self.retried: list[str] = []
        self.waited = 0.0
        self.top_gone: str | None = None  # "before" or "after" the walk
        self.renamed_to: str | None = None
        self.first_error: BaseException | None = None
        self.forwarded: BaseException | None = None  # what escaped _forward: the caller's, never absorbed
        self.wait_on_vanish = False  # stop at the first vanished entry and wait for the peer (``remove``)

    def plain(self, remover: Callable[..., Any]) -> None:
        """Remove a tree no peer can move meanwhile with ``remover`` (the standard rmtree), without checks."""
        self.remover = remover
        self.position.checking = False

    def remove(self, positional: list[Any], named: dict[str, Any], wait_on_vanish: bool = False) -> None:
        """Run the remover on the caller's arguments, with this walk's position checked. ``wait_on_vanish``:
        stop at the first entry a peer removed (``_Vanishing``), to wait for it instead of racing it."""
        self.wait_on_vanish = wait_on_vanish
        with self.position.active():
            self.remover(*positional, **named)

    def top_went(self, error: FileNotFoundError) -> bool:
        """Whether the top went while the walk ran (``error``, saying so, escaped the handler): the rule waits
        for the evidence."""
        gone, waited = rule.escaped_gone(self.position.top, self.rules)
        self.waited += waited
        if gone:
            self.top_gone = "after"
            self.first_error = self.first_error or error
        return gone

    def onerror(self, func: Callable[..., Any], path: Any, exc_info: Any) -> None:
        self._handle(_real(func), path, exc_info[1], exc_info)

    def onexc(self, func: Callable[..., Any], path: Any, exc: BaseException) -> None:
        self._handle(_real(func), path, exc, None)

    def _handle(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        code = getattr(exc, "errno", None)
        top = self.position.top
        is_top = evidence.norm(path) == top
        if code == errno.ENOENT and self.first_error is None:
            self.first_error = exc
        if code == errno.ENOENT:
            if not is_top and not rule.entry_gone_by_peer(self.rules):
                self._forward(func, path, exc, exc_info)  # the standard library's error, at once
                return
            if not is_top:
                self.entries_gone.append(evidence.norm(path))
                if self.wait_on_vanish and rule.settle_on_vanishing(len(self.entries_gone)):
                    self.wait_on_vanish = False  # once per call: a resumed walk goes to its end
                    raise _Vanishing
                return
            if func is os.rmdir:
                self.top_gone = "after"
                self.renamed_to = _find_renamed(top, self.position.identity())
                return
            gone, waited = rule.top_gone_before_by_peer(top, self.rules)
            self.waited += waited
            if gone:
                self.top_gone = "before"
                return
        elif code in (errno.ENOTEMPTY, errno.EBUSY) and func is os.rmdir and self._retry(path, sys._getframe(2)):
            return
        self._forward(func, path, exc, exc_info)

    def _retry(self, path: Any, frame: Any) -> bool:
        """Remove a directory again that is not empty at its removal, if it is still the same directory and
        everything in it now was in it when the walk listed it, or is what a removal in progress leaves (an NFS or
        FUSE client's silly-renamed ``.nfs…``/``.fuse_hidden…`` file of an unlinked open one). An entry that
        appeared after the walk's listing (a peer publishing into the tree) is not the call's to remove: the error
        goes where the standard rmtree sends it."""
        where = evidence.norm(path)
        before = self._started_on(where, frame)
        backoff = Backoff(self.rules.settle_s - self.waited, 0.02, 0.16, tries=_RETRIES, paused_only=True)
        try:
            while backoff.pause():
                now = evidence.lstat_or_none(where)
                if now is None:
                    self.retried.append(where)
                    return True  # a peer finished it
                if before is None or not os.path.samestat(before, now):
                    return False  # a different directory now stands there (or no telling): not ours to remove
                done = self._remove_again(where)
                if done is None:
                    return False  # something was put there after the walk listed it: not ours to remove
                if done:
                    self.retried.append(where)
                    return True
            return False
        finally:
            self.waited += backoff.waited()

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

    def _forward(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        """Pass an error on as the standard library does: to the caller's handler, or raise it."""
        try:
            if self.user_onexc is not None:
                self.user_onexc(func, path, exc)
            elif self.user_onerror is not None:
                self.user_onerror(func, path, exc_info or (type(exc), exc, exc.__traceback__))
            else:
                raise exc
        except BaseException as raised:
            self.forwarded = raised
            raise

    def wait_for_peer_removal(self) -> bool:
        """A peer is removing this tree: wait, at most ``FSGUARD_SETTLE_S``, for its name to leave the parent's
        fresh listing, instead of racing the peer entry by entry (N ranks' walks of one tree cost N times its
        metadata operations). True when the tree went (removed, or renamed: then where), False to walk on."""
        top, ident = self.position.top, self.position.identity()
        start = self.position.top_st or ident  # what the name showed when the call began (see ``check``)

        def went() -> bool | None:
            seen = evidence.look(top)
            if not seen.present:  # gone (its parent too, or its parent unreadable: the walk will tell)
                if not seen.parent_exists:
                    return False
                self.top_gone = "after"
                self.renamed_to = _find_renamed(top, ident)
                return True
            now = evidence.lstat_or_none(top)
            if now is not None and start is not None and not os.path.samestat(now, start):
                self.top_gone = "after"  # our tree went; another one stands there now: not ours to remove
                return True
            return None

        gone, waited = wait_for(went, self.rules.settle_s, 0.005, 0.05)
        self.waited += waited
        if not gone:
            self.position.restart()  # the same tree (checked): the resumed walk's open is its top again
        return bool(gone)

    def verdict(self) -> Removal | None:
        return rule.walk_verdict(
            self.entries_gone, self.retried, self.top_gone, self.renamed_to, self.waited, self.first_error
        )


def _removal_residue(name: str) -> bool:
    """Whether ``name`` is what a client leaves of an open file that was unlinked: NFS's ``.nfs`` plus 24 hex
    digits, FUSE's ``.fuse_hidden`` plus 16 (the entry a removal of the tree took away, not a new one)."""
    import re

    return re.fullmatch(r"\.nfs[0-9a-fA-F]{24}|\.fuse_hidden[0-9a-fA-F]{16}", name) is not None


def _lstat_quietly(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (OSError, ValueError):  # missing, unreadable, a NUL in the name: the standard rmtree reports it
        return None


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


def _find_renamed(top: str, orig: os.stat_result | None) -> str | None:
    """Where the tree went, if a peer renamed it within its parent (found by its inode).

    An inode number is only an identity while something holds the inode: once the tree is removed, the next
    directory made may get its number (ext4 gives it at once). So the guarded call holds a descriptor of the
    top (``_Held``): while it is open the number cannot be reused, and a link count of 0 (or a handle the
    server no longer knows) says the tree was removed, not moved. Without one (the top could not be opened),
    the inode and device alone decide."""
    if orig is None:
        return None
    held = _held_fd(orig)
    if held is not None:
        try:
            if os.fstat(held).st_nlink == 0:
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
    """The descriptors of tree tops that one guarded call holds open while it may search for them by inode
    (``_find_renamed``); closed when the call ends. Thread-local, nested for an rmtree called by a handler."""

    def __init__(self) -> None:
        self.fds: dict[tuple[int, int], int] = {}

    def __enter__(self) -> _Held:
        _local.__dict__.setdefault("held", []).append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _local.held.remove(self)
        for fd in self.fds.values():
            os.close(fd)

    def take(self, path: str, expected: os.stat_result) -> None:
        """Open the directory at ``path`` if it is still ``expected`` (nothing held otherwise: no telling)."""
        key = (expected.st_dev, expected.st_ino)
        if key in self.fds:
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if os.path.samestat(os.fstat(fd), expected):
                self.fds[key] = fd
                return
        except OSError:
            pass
        os.close(fd)


def _held_fd(st: os.stat_result) -> int | None:
    """The descriptor a guarded call of this thread holds of the directory ``st`` describes, if any."""
    stack: list[_Held] = getattr(_local, "held", [])
    for held in reversed(stack):
        fd = held.fds.get((st.st_dev, st.st_ino))
        if fd is not None:
            return fd
    return None


# --- the call ------------------------------------------------------------------------------------------


def _make_walk(remover: Callable[..., Any], call: Call, rules: Rules, use_onexc: bool) -> Walk | None:
    """fsguard's walk for one call, or None for a call the standard ``rmtree`` rejects by itself: more
    positional arguments than it takes (adding fsguard's handler would change its message), no path at all."""
    if call.path is None:
        return None
    try:
        return Walk(remover, call.given[0], rules, use_onexc, call.on_error.onerror, call.on_error.onexc)
    except (TypeError, ValueError):
        return None


def wait_for_move(top: str, budget_s: float, pending: Callable[[], bool] | None, settle_s: float) -> tuple[str, float]:
    """Poll fresh listings of the parent, up to ``budget_s``, for ``top`` to disappear (a peer moved it).

    ``pending``: whether a peer announced a rename of ``top`` (serialized mode); while one is announced the
    wait goes on up to ``settle_s`` more. Returns ("" when it stayed, else how it went, seconds waited)."""
    backoff = Backoff(budget_s, 0.002, 0.02)
    how = "(its name left the fresh listing)"
    extended = False
    while True:
        seen = evidence.look(top)
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
    original: Callable[..., Any], request: Call, rules: Rules, use_onexc: bool, yield_s: float, serializer: Any = None
) -> Removal | None:
    """One guarded ``rmtree`` call; a verdict when something needs a record.

    The walk gets the caller's own arguments, fsguard's handler in place of the caller's (``onexc`` where it
    exists, else ``onerror``, in the position the caller used; none with ``ignore_errors``), so it accepts
    or rejects the call as the standard ``rmtree`` would alone. With a serializer, the walk runs holding the
    path's lock, after letting a rename of the same path that a peer announced go first."""
    remover = checked(original) or original
    walk = _make_walk(remover, request, rules, use_onexc)
    if walk is None:
        original(*request.args, **request.kwargs)  # the standard rmtree says what is wrong (outside any except)
        return None
    ignore = request.on_error.ignore_errors
    positional, named = list(request.args), dict(request.kwargs)
    if not ignore:
        if use_onexc:
            named["onexc"] = walk.onexc
        elif len(positional) > 2:
            positional[2] = walk.onerror
        else:
            named["onerror"] = walk.onerror
    with _Held() as held:  # the top's descriptor: see _find_renamed
        return _Removal(walk, positional, named, ignore, serializer).run(original, yield_s, held)


class _Removal:
    """The course of one guarded ``rmtree``: the yield window, the walk (alone, or holding the path's lock),
    and a failure that escaped the walk's handler, into one verdict."""

    def __init__(self, walk: Walk, positional: list[Any], named: dict[str, Any], ignore: bool, serializer: Any) -> None:
        self.walk = walk
        self.arguments = (positional, named)  # the caller's, with fsguard's handler in place of the caller's
        self.ignore = ignore
        self.serializer = serializer
        self.top = walk.position.top
        self.pending: Callable[[], bool] | None = None  # whether a peer announced a rename of the top (serialized)
        self.window = 0.0  # seconds waited for a peer to move the tree before (or instead of) the walk

    def run(self, original: Callable[..., Any], yield_s: float, held: _Held) -> Removal | None:
        walk, top, rules = self.walk, self.top, self.walk.rules
        position = walk.position
        tree = position.is_tree()
        if tree and position.top_st is not None:
            held.take(top, position.top_st)
        serializer = self.serializer
        if serializer is not None and tree:
            self.pending = lambda: bool(serializer.pending(top))
        # The cheap tests first: own memory is asked only for a directory, in a job with peers.
        own = evidence.own_last_event(top) if tree and rules.peers else None
        plan = rule.removal(top, own, position.top_st, rules, yield_s) if tree else "check"
        if plan == "plain":  # nobody can move it meanwhile: the standard walk itself, with fsguard's error handler
            walk.plain(original)
        if plan == "wait" or self._announced():
            yielded = self._yield(yield_s)
            if yielded is not None:
                return yielded
        try:
            yielded = self._walk()
            if yielded is not None:
                return yielded
        except _Moved as moved:
            return rule.moved_mid_walk(top, moved.renamed_to, position.removed_names, walk.waited + self.window)
        except FileNotFoundError as exc:
            if not self._absorbs(exc):
                raise
        found = walk.verdict()
        if plan == "wait" and position.removed_count:
            identity = by_tag(rules.whose(evidence.job_tag_of(top)))
            return rule.removed_peer_tree(top, self.window, found, made_here=own == "made-shared", identity=identity)
        return found

    def _announced(self) -> bool:
        return self.pending is not None and self.pending()

    def _yield(self, budget_s: float) -> Removal | None:
        """Wait up to ``budget_s`` (more while a peer's announced rename is pending) for a peer to move the
        tree away: the verdict saying where it went, or None when it stayed."""
        how, waited = wait_for_move(self.top, budget_s, self.pending, self.walk.rules.settle_s)
        self.window += waited
        if not how:
            return None
        return rule.yielded(self.top, self.window, how, _find_renamed(self.top, self.walk.position.top_st))

    def _walk(self) -> Removal | None:
        """Remove the tree: alone (waiting for a peer that removes it too), or holding the path's lock (then a
        rename of it that a peer announced meanwhile goes first: its verdict)."""
        walk, (positional, named) = self.walk, self.arguments
        if self.serializer is None:
            # Only in a job with peers (a lone process has nobody to wait for); serialized, peers do not walk
            # the tree meanwhile.
            try:
                walk.remove(positional, named, wait_on_vanish=not self.ignore and walk.rules.peers)
            except _Vanishing:
                if not walk.wait_for_peer_removal():
                    walk.remove(positional, named)  # the peer stopped (or is slow): remove what is left
            return None

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
        return yielded

    def _absorbs(self, error: FileNotFoundError) -> bool:
        """Whether a failure that escaped the handler (e.g. ``fstat`` of the top on FUSE after a peer removed it)
        is the top gone meanwhile. One the handler passed on to the caller (raised, or raised by the caller's
        handler) is the caller's, and so is any with ``ignore_errors``."""
        if error is self.walk.forwarded or self.ignore:
            return False
        name = getattr(error, "filename", None)
        if name is not None and evidence.norm(name) != self.top:
            return False
        return self.walk.top_went(error)

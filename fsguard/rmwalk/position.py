"""Where the tree being removed is. The walk's own ``os`` functions check it before each removal.

Before each removal the tree must still be at its path: the name's ``lstat`` as when the call began (one per
entry: O(1) in the size of the parent on a coherent local filesystem); where the mount may answer lookups from a
cache, also fresh listings of the top's parent (one before the top's own removal, and between them spaced so
that they take at most a tenth of the walk). Once it is not, the walk stops (``Moved``) and leaves the moved tree
alone. Its ``scandir`` notes what each directory held when the walk listed it: an entry that appeared later is
never removed by a retry.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import Any

from ..calls import norm
from ..guards import World
from .tree import UNREADABLE, UNSET, Held, entries_left, find_renamed, listed_inode, lstat_top, unguarded

_REMOVED_KEPT = 1000  # removed names kept per walk for a hazard record (the count is always exact)


class Moved(BaseException):
    """The tree is no longer at its path: stop the walk. Not an ``OSError``, so no handler of the walk sees it."""

    def __init__(self, renamed_to: str | None) -> None:
        super().__init__(renamed_to)
        self.renamed_to = renamed_to  # where a peer renamed it within its parent, if that could be found


class _Listing:
    """A ``scandir`` iterator that adds each name it yields to ``names``."""

    def __init__(self, listing: Any, names: set[str] | None) -> None:
        self._listing = listing
        self._names = names

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: object) -> None:
        self._listing.close()

    def __iter__(self) -> Any:
        """The whole listing at once, its names noted. Every version's walk lists a directory whole (``list(...)``);
        issue 47: a Python ``__next__`` per entry was a tenth of a checked walk's instructions."""
        entries = list(self._listing)
        names = self._names
        if names is not None:
            found = [entry.name for entry in entries]
            names.update(found if not found or isinstance(found[0], str) else map(os.fsdecode, found))  # bytes: text
        return iter(entries)

    def __next__(self) -> Any:
        entry = next(self._listing)
        if self._names is not None:
            self._names.add(os.fsdecode(entry.name))
        return entry

    def close(self) -> None:
        self._listing.close()


class _Removed:
    """What a walk removed from the tree: how many entries, and the first ``_REMOVED_KEPT`` names. A hazard record names
    them. Each is kept as (the directory the walk had open there, the name as given), joined only when a record asks
    (issue 47: joining at each removal was a tenth of a checked walk's instructions)."""

    __slots__ = ("count", "kept")

    def __init__(self) -> None:
        self.count = 0
        self.kept: list[tuple[str | None, Any]] = []

    @property
    def names(self) -> list[str]:
        """The names kept, as paths. Each is below the directory the walk had open there, else as given."""
        shown = []
        for parent, path in self.kept:
            name = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
            shown.append(name if parent is None else os.path.join(parent, name))
        return shown


class _FreshListing:
    """The top's name in its parent's fresh listing, on a caching mount. Where this mount may answer lookups from a
    cache (NFS, FUSE...). Listings are read spaced, taking at most a tenth of the walk's time, however big the
    parent."""

    __slots__ = ("after", "listed_ino", "top")

    def __init__(self, top: str) -> None:
        self.top = top
        self.listed_ino: Any = UNSET  # the inode number the listing gave the name at the first check
        self.after = 0.0  # monotonic time before which no listing is read between directories

    def due(self) -> bool:
        """Whether to read a fresh listing before this step. A rename landing meanwhile costs the moved tree what was
        removed since the last listing. The hazard record names it."""
        return time.monotonic() >= self.after

    def shows_top(self) -> bool:
        """Whether the parent's fresh listing still shows the top's name as its first inode. True where that cannot be
        told: an unreadable listing."""
        started = time.monotonic()
        listed = listed_inode(self.top)
        now = time.monotonic()
        self.after = now + 9 * (now - started)
        if self.listed_ino is UNSET:
            if listed is None:
                return False  # already gone from the listing: only a stale lookup still shows the name
            self.listed_ino = listed  # the listing's own number for the name: d_ino may differ from st_ino
            return True
        if self.listed_ino is UNREADABLE or listed is UNREADABLE:
            return True
        return bool(listed == self.listed_ino)


class Position:
    """Where the tree being removed is, and what the walk removed from it. It holds its top's name and identity, and the
    directories the walk holds open. The walk's filesystem functions are its methods (``_Os``): they report each step to
    it and ask it, through ``check``, whether the tree is still at its path."""

    def __init__(
        self, top: str, world: World, held: Held, before: tuple[os.stat_result | None, bool] | None = None
    ) -> None:
        self.top = top  # normalised
        # The top as it is before the walk (one lstat per guarded call; None if it cannot be read: rmtree
        # will say why): whether to wait for a peer, and which directory "the tree" is for a retry. ``before``:
        # ``lstat_top``'s answer, asked already (the short course's, fsguard.rmwalk.lane).
        self.top_st, self.top_missing = lstat_top(top) if before is None else before
        self.ident: os.stat_result | None = None  # the walk's own open of the top (fstat)
        self.top_fd: int | None = None
        self.dirs: dict[int, str] = {}  # descriptor -> the directory the walk opened there
        self.listings: dict[str, set[str]] = {}  # directory -> the names the walk's first listing of it showed
        self.removed = _Removed()
        # Checks also read fresh listings (spaced) where this mount may answer lookups from a cache.
        stale = self.top_st is not None and world.lookups_may_be_stale(self.top_st.st_dev)
        self.fresh = _FreshListing(top) if stale else None
        self.checking = True  # False for a tree no peer can move meanwhile (fsguard.guards.rmtree.plan)
        self.held = held  # the top's descriptor, held while the call runs (see find_renamed)
        self.removers: dict[str, Any] = {}  # the unguarded os.unlink and os.rmdir, each read at its first use

    def identity(self) -> os.stat_result | None:
        """The top's identity, from the walk's open of it or the earlier lstat."""
        return self.ident or self.top_st

    def is_tree(self) -> bool:
        """Whether the top was a directory before the walk. A rename can only take a tree away."""
        return self.top_st is not None and stat.S_ISDIR(self.top_st.st_mode)

    def restart(self) -> None:
        """The walk starts again on the same tree: its next open is the top's again."""
        self.ident = None

    def renamed(self) -> str | None:
        """Where a peer renamed the tree within its parent, if that can be found (``find_renamed``)."""
        return find_renamed(self.top, self.identity(), self.held)

    def forget_missing(self) -> None:
        """Forget the top's missing lookup. A wait for a lock or a peer came between."""
        self.top_missing = False

    # --- the walk's own os functions (``_Os``): each step reported, each removal checked first --------------

    def lstat(self, path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        """``os.lstat``, but a missing top is not asked twice (issue 47).

        The walk's first ``lstat`` of a top whose own lookup missed a moment ago raises that answer again, as
        ``os.lstat`` would: this call's first step, nothing waited for between. On a distributed filesystem a
        missed name is one request each time: nothing caches misses."""
        if self.top_missing and dir_fd is None and isinstance(path, (str, bytes, os.PathLike)):
            self.top_missing = False
            if norm(path) == self.top:
                raise FileNotFoundError(
                    errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(path)
                )  # as os.lstat names it
        return os.lstat(path, dir_fd=dir_fd)

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        self.check(boundary=False)  # entering a directory: the name's lstat (a listing only when one is due)
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        self.opened(fd, path, dir_fd)
        return fd

    def unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        self.check(boundary=False)
        unlink = self.removers.get("unlink")
        if unlink is None:  # read at the walk's first removal (a program's own replacement included), then kept
            unlink = self.removers["unlink"] = unguarded("unlink")
        unlink(path, dir_fd=dir_fd)
        self.note_removed(path, dir_fd)

    def rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        self.check(boundary=dir_fd is None)  # the top itself: confirm with a fresh listing where lookups cache
        rmdir = self.removers.get("rmdir")
        if rmdir is None:
            rmdir = self.removers["rmdir"] = unguarded("rmdir")
        rmdir(path, dir_fd=dir_fd)
        self.note_removed(path, dir_fd)

    def close(self, fd: int) -> None:
        self.closed(fd)
        os.close(fd)

    def scandir(self, path: Any = None) -> Any:
        """``os.scandir``, its names noted for the directory the walk lists. That is what was there when the walk
        looked. An entry that appears afterwards is not the call's to remove (see ``Walk._retry``)."""
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
        """The names of the walk's first listing of the directory ``path`` names. It is the set that holds them;
        ``path`` is a descriptor the walk opened, or a path. None for a later listing of it, or a directory it cannot
        name."""
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
        if len(removed.kept) < _REMOVED_KEPT:
            removed.kept.append((self.dirs.get(dir_fd) if dir_fd is not None else None, path))

    def check(self, boundary: bool) -> None:
        """Raise ``Moved`` when the tree is no longer at its path. Where that cannot be told, the call goes on: it then
        fails on its own, as the standard rmtree's would.

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
            now = os.lstat(self.top)
            here = now.st_ino == start.st_ino and now.st_dev == start.st_dev  # os.path.samestat, without its call
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
        if renamed is None and self.top_fd is not None and not entries_left(self.top_fd):
            # Not in its parent any more, and nothing left in it: a peer's rmtree of the same tree emptied and
            # removed it (a caching filesystem may still report its link count): not a rename, no hazard.
            return
        raise Moved(renamed)

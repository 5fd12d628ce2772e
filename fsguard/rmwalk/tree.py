"""What the walk reads of the tree besides its own steps. Lookups, fresh listings, the held top, plain removals.

Where a peer renamed the tree within its parent is found by its inode (``find_renamed``), which the guarded
call holds while it may search for it (``Held``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .. import evidence, mounts
from ..state import STATE


def unguarded(name: str) -> Callable[..., Any]:
    """``os.<name>`` as the standard walk would call it, never fsguard's wrapper. A program's or a test's own
    replacement is included. Never fsguard's guarded wrapper: this walk decides its own failures, and holds the path's
    lock."""
    func: Callable[..., Any] = getattr(os, name)
    original = STATE.originals.get(name)  # the unguarded os function, where fsguard patched it
    if original is not None and getattr(func, "__wrapped__", None) is original:
        return original  # type: ignore[return-value]
    return func


def removal_residue(name: str) -> bool:
    """Whether ``name`` is what a client leaves of an unlinked open file. NFS's ``.nfs`` plus 24 hex digits, FUSE's
    ``.fuse_hidden`` plus 16. It is the entry a removal of the tree took away, not a new one."""
    import re

    return re.fullmatch(r"\.nfs[0-9a-fA-F]{24}|\.fuse_hidden[0-9a-fA-F]{16}", name) is not None


def lstat_top(path: str) -> tuple[os.stat_result | None, bool]:
    """The top's ``lstat`` before the walk, and whether its name was missing. None where it cannot be read: rmtree
    will say why."""
    try:
        return os.lstat(path), False
    except FileNotFoundError:
        return None, True
    except (OSError, ValueError):  # unreadable, a NUL in the name: the standard rmtree reports it
        return None, False


# ``Held``'s open: an ``O_PATH`` descriptor where there is one (it reads nothing), of the directory itself
HOLD_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class TopStat:
    """The held top's ``fstat``, read when first asked. Issue 47: a plain removal in a single-node job needs none."""

    __slots__ = ("fd", "read")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.read: os.stat_result | None = None

    @property
    def st_dev(self) -> int:
        """The top's device (``OSError`` where its ``fstat`` fails)."""
        read = self.read
        if read is None:
            read = self.read = os.fstat(self.fd)
        return read.st_dev

    def before(self) -> tuple[os.stat_result, bool] | None:
        """The top's ``lstat_top``, read through the held descriptor. None where its ``fstat`` fails."""
        try:
            read = self.read
            if read is None:
                read = self.read = os.fstat(self.fd)
        except OSError:
            return None
        return read, False


UNSET: Any = object()
UNREADABLE: Any = object()


def listed_inode(top: str) -> Any:
    """The inode number a fresh listing of the parent gives ``top``'s name. None when it is not listed, ``UNREADABLE``
    when the listing cannot be read. Stops at the name."""
    parent, name = os.path.split(top)
    try:
        with os.scandir(parent or os.curdir) as entries:
            for entry in entries:
                if entry.name == name:
                    return entry.inode()
    except OSError:
        return UNREADABLE
    return None


def entries_left(fd: int) -> bool:
    """Whether the directory open at ``fd`` still lists entries. A fresh ``readdir``; False when it cannot."""
    try:
        return bool(os.listdir(fd))
    except OSError:
        return False


def find_renamed(top: str, orig: os.stat_result | None, held: Held) -> str | None:
    """Where the tree went, if a peer renamed it within its parent. It is found by its inode.

    An inode number is only an identity while something holds the inode: once the tree is removed, the next
    directory made may get its number (ext4 gives it at once). So the guarded call holds a descriptor of the
    top (``Held``): while it is open the number cannot be reused, and a link count of 0 (or a handle the
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


class Held:
    """The tree's top, held open by one guarded call. It may search for the tree by inode (``find_renamed``); closed
    when the call ends."""

    __slots__ = ("fds",)

    def __init__(self) -> None:
        self.fds: dict[tuple[int, int], int] = {}

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds.values():
            os.close(fd)

    def adopt(self, fd: int, st: os.stat_result) -> None:
        """Hold ``fd``, the directory ``st`` describes (the short course's held top): closed with the others."""
        self.fds[(st.st_dev, st.st_ino)] = fd

    def take(self, path: str, expected: os.stat_result) -> None:
        """Open the directory at ``path`` if it is still ``expected`` (nothing held otherwise: no telling). An
        ``O_PATH`` descriptor where there is one, its identity from the attributes this node holds (``_identity``): it
        holds the inode without a request to a distributed filesystem's server."""
        key = (expected.st_dev, expected.st_ino)
        if key in self.fds:
            return
        try:
            fd = os.open(path, HOLD_FLAGS)
        except OSError:
            return
        try:
            if _identity(fd, expected.st_dev) == key:
                self.fds[key] = fd
                return
        except OSError:
            pass
        os.close(fd)


def _identity(fd: int, dev: int) -> tuple[int, int]:
    """(device, inode number) of ``fd``, on the device ``dev``. ``fstat``'s on a coherent node-local filesystem,
    where it asks nobody: a third of the ctypes ``statx``'s cost (issue 47). Else ``evidence.identity``, which
    asks no server."""
    found = mounts.mount_of(dev)
    if found.stale or found.shared:
        return evidence.identity(fd)
    st = os.fstat(fd)
    return st.st_dev, st.st_ino

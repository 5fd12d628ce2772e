"""A job's change tokens: whether a journal changed since a process last looked (issue 47).

Two 8-byte tokens in a small file of fsguard's private node-local directory (``seq.<tag>``, beside the journals of
``fsguard.journal``), mapped by each process of the job that notes or reads. Every note's writer sets a new token
after its note: the journal's (slot 0) or the ``tried`` notes' (slot 1). A reader that finds the token it saw last
knows that nothing was noted since, without a system call: the ``lseek`` and ``fstat`` of every ``made_alone``
were a sixth of a small rmtree's added work. Tokens are a per-process random seed plus a count, so no two
processes set the same one; a token read mid-write is a token that changed, and is read again.

Each process holds a shared ``flock`` on the file while it maps it: a sweep removes only a file nobody holds (a job
that ended), whatever its age. A process that cannot map it (an unreadable directory, no ``mmap``) reads the journals
as before; its notes then set no token, which other processes of the job cannot tell.
"""

from __future__ import annotations

import os
import stat

from .state import STATE, Unforkable, at_fork

TYPE_CHECKING = False  # not typing's: only what startup needs is imported
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PREFIX = "seq."  # the tokens' file name: the prefix, then the job's tag as ``journal.file_name`` escapes it
SIZE = 16  # two tokens of 8 bytes: the journal's, then the ``tried`` notes'


class _Slots:
    """This process's mapping of one job's tokens. A cache registered with ``state.STATE.caches``.

    A forked child keeps the parent's mapping and lock (its descriptor is the parent's) and draws tokens of its own."""

    __slots__ = ("count", "fd", "map", "seed", "tag")

    def __init__(self) -> None:
        self.tag: str | None = None
        self.fd = -1
        self.map: Any = None  # the mapped tokens (an ``mmap``), or None: none could be mapped
        self.seed = int.from_bytes(os.urandom(8), "little")
        self.count = 0

    def clear(self) -> None:
        try:
            if self.map is not None:
                self.map.close()
            if self.fd >= 0:
                os.close(self.fd)
        except (OSError, ValueError):
            pass
        self.__init__()  # type: ignore[misc]

    def read(self, tag: str, locate: Callable[[str], str | None]) -> bytes | None:
        """Both tokens of job ``tag`` (16 bytes), or None where they cannot be mapped. ``locate``: the tokens' file of
        a job tag (``fsguard.journal.tokens_path``), asked where this process has not mapped them yet."""
        if self.tag != tag:
            self._map(tag, locate)
        found = self.map
        return None if found is None else found[:SIZE]

    def bump(self, tag: str, slot: int, locate: Callable[[str], str | None]) -> bytes | None:
        """Set a new token in ``slot``: 0 the journal's, 1 the ``tried`` notes'. Returns it (None: none set)."""
        if self.tag != tag:
            self._map(tag, locate)
        found = self.map
        if found is None:
            return None
        self.count += 1
        token = ((self.seed + self.count) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
        found[8 * slot : 8 * slot + 8] = token
        return token

    def _map(self, tag: str, locate: Callable[[str], str | None]) -> None:
        self.clear()
        self.tag = tag
        path = locate(tag)
        if path is None:
            return
        try:
            with Unforkable():  # the first note or rmtree of a process (not at startup): no fork splits the imports
                import fcntl
                import mmap
        except ImportError:  # e.g. a process that dropped its privileges, the interpreter's own files unreadable now
            return
        for _ in range(3):  # a sweep may be removing it meanwhile: then a new one
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError:
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                st = os.fstat(fd)
                if st.st_nlink and stat.S_ISREG(st.st_mode):
                    if st.st_size < SIZE:
                        os.ftruncate(fd, SIZE)  # (another process's ftruncate to the same size changes nothing)
                    self.map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                    self.fd = fd
                    return
            except (OSError, ValueError):
                pass
            os.close(fd)


SLOTS = STATE.caches.register(_Slots())


@at_fork
def _own_tokens_in_child() -> None:
    """A forked child draws tokens of its own. The parent's seed would repeat the parent's next tokens."""
    SLOTS.seed = int.from_bytes(os.urandom(8), "little")
    SLOTS.count = 0


def sweep_unheld(path: str, unlink: Any) -> None:
    """Remove a job's tokens at ``path`` where no process holds them: its job ended."""
    try:
        with Unforkable():
            import fcntl
    except ImportError:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        unlink(path)  # (a process opening it meanwhile finds it unlinked once it holds it, and makes a new one)
    except OSError:
        pass  # held: its job still runs
    finally:
        os.close(fd)

"""What the jobs of this node made: identity kept in fsguard's own place, never on users' files (issue 46).

A guarded ``mkdir`` that creates a directory in a job with a tag (``fsguard.launcher.job_tag``) appends one
entry, ``<time>@<rank> <absolute path>\\0``, to its job's journal: ``made.<tag>`` in the private node-local directory
``/dev/shm/fsguard-<uid>`` (else ``/tmp/fsguard-<uid>``, the lock files' place). One ``write`` to a local
file, with ``O_APPEND`` (an entry is written whole): no operation on the user's filesystem, no extended
attribute, nothing in the user's tree. A failing ``mkdir`` asks ``newest``: which job of this node last made a
directory at that path, and when.

What it can tell: every guarded mkdir of every job of this user on this node, so in a single-node job (all its
ranks here: ``launcher.single_node``) a directory its journal lacks was made by no guarded call of this job.
What it cannot: a peer on another node (its journal is on its own node: there time decides), a directory made
by a tool or an unguarded process, one spelled differently (through a symlink) by its maker, or one made with
``dir_fd``. Journals nobody wrote into for ``STALE_S`` are removed by the next job to start on the node.
"""

from __future__ import annotations

import os
import stat
import time

from .state import STATE

TYPE_CHECKING = False  # not typing's: only what startup needs is imported
if TYPE_CHECKING:
    from typing import Any

CANDIDATES = ("/dev/shm", "/tmp")
PREFIX = "made."
STALE_S = 86400.0  # a journal unchanged for a day is another day's: removed when a process opens its own
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class _Opened:
    """This process's journal, opened once per install (a cache registered with ``state.STATE.caches``)."""

    __slots__ = ("journal",)

    def __init__(self) -> None:
        self.journal: tuple[str, int] | None = None  # (job tag, its journal's descriptor or -1)

    def clear(self) -> None:
        self.journal = None


OPENED = STATE.caches.register(_Opened())


def file_name(tag: str) -> str:
    """The journal's file name for a job tag (``%``, ``/`` and NUL escaped; a long tag ends in its hash)."""
    name = PREFIX + tag.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")
    if len(name.encode()) > 200:
        import zlib

        raw = tag.encode()
        name = f"{name.encode()[:160].decode('utf-8', 'ignore')}%{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"
    return name


def tag_of(name: str) -> str | None:
    """The job tag a journal's file name stands for (None: not a journal, or a hashed long tag's)."""
    if not name.startswith(PREFIX):
        return None
    return name[len(PREFIX) :].replace("%2F", "/").replace("%00", "\0").replace("%25", "%")


def directory() -> str | None:
    """This user's private node-local directory (made mode 0700; refused unless it is ours alone)."""
    for parent in CANDIDATES:
        path = os.path.join(parent, f"fsguard-{os.geteuid()}")
        try:
            STATE.originals.get("mkdir", os.mkdir)(path, 0o700)  # fsguard's own call: never the guarded one
        except FileExistsError:
            pass
        except OSError:
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return path
    return None


def _open(tag: str) -> int:
    """This job's journal, opened for appending once per process (-1: none can be); the process that creates
    it sweeps old journals away."""
    fd = -1
    where = directory()
    if where is not None:
        path = os.path.join(where, file_name(tag))
        try:
            fd = os.open(path, _FLAGS | os.O_EXCL, 0o600)
            _sweep(where)  # the first process of a job on this node: once per job, not per process
        except FileExistsError:
            fd = _open_existing(path)
        except OSError:
            fd = -1
    OPENED.journal = (tag, fd)
    return fd


def _open_existing(path: str) -> int:
    try:
        return os.open(path, _FLAGS, 0o600)
    except OSError:
        return -1


def _sweep(where: str) -> None:
    unlink = STATE.originals.get("unlink", os.unlink)  # fsguard's own call: never the guarded one
    cutoff = time.time() - STALE_S
    try:
        with os.scandir(where) as entries:
            for entry in entries:
                if entry.name.startswith(PREFIX) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    unlink(entry.path)
    except OSError:
        pass


def made(path: Any, tag: str) -> None:
    """Note that this process just created the directory ``path`` (as given to ``mkdir``) in job ``tag``.
    The happy path of a guarded mkdir: one ``write`` to a node-local file; never raises."""
    try:
        journal = OPENED.journal
        fd = journal[1] if journal is not None and journal[0] == tag else _open(tag)
        if fd < 0:
            return
        name = os.fsencode(path)
        if name[:1] != b"/":
            name = os.path.join(os.getcwdb(), name)
        launch = STATE.launch  # the rank's own children (a Pool's) inherit its variables: the same rank
        rank = b"" if launch is None else b"@%d" % launch.rank
        os.write(fd, b"%.6f%s %s\0" % (time.time(), rank, os.path.normpath(name)))
    except (OSError, TypeError, ValueError):
        pass


def newest(path: str, own: str) -> tuple[float, str, int | None] | None:
    """(when, job tag, maker's rank) of the newest entry naming ``path`` in this node's journals; None where none
    does.
    The failure path only: reads every journal (``own``: this job's tag, told by its file's name; another long
    tag, hashed in its file's name, is named by the file)."""
    where = directory()
    if where is None:
        return None
    needle = b" " + os.path.normpath(os.path.abspath(os.fsencode(path))) + b"\0"
    found: tuple[float, str, int | None] | None = None
    try:
        names = [n for n in os.listdir(where) if n.startswith(PREFIX)]
    except OSError:
        return None
    for name in names:
        entry = _last(os.path.join(where, name), needle)
        if entry is not None and (found is None or entry[0] > found[0]):
            found = (entry[0], own if name == file_name(own) else tag_of(name) or name, entry[1])
    return found


def _last(journal: str, needle: bytes) -> tuple[float, int | None] | None:
    """The time and maker's rank of the last entry naming ``needle``'s path in one journal."""
    try:
        with open(journal, "rb") as f:
            data = f.read()
    except OSError:
        return None
    end = len(data)
    while True:
        end = data.rfind(needle, 0, end)
        if end < 0:
            return None
        start = data.rfind(b"\0", 0, end) + 1
        when, _, rank = data[start:end].partition(b"@")
        try:  # an entry's own time and rank: the match is its whole path
            return float(when), int(rank) if rank else None
        except ValueError:
            continue  # the needle inside a longer path: look further back

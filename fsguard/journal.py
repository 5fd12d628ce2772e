"""What the jobs of this node made, kept in fsguard's own place (issue 46). Identity is never kept on users' files.

A guarded ``mkdir`` that creates a directory in a job with a tag (``fsguard.launcher.job_tag``) appends one
entry, ``<time>@<rank> <absolute path>\\0``, to its job's journal: ``made.<tag>`` in the private node-local directory
``/dev/shm/fsguard-<uid>`` (else ``/tmp/fsguard-<uid>``, the lock files' place). One ``write`` to a local
file, with ``O_APPEND`` (an entry is written whole): no operation on the user's filesystem, no extended
attribute, nothing in the user's tree. A failing ``mkdir`` asks ``newest``: which job of this node last made a
directory at that path, and when.

What it can tell: every guarded mkdir of every job of this user on this node. So in a single-node job
(``launcher.single_node``), a directory its journal lacks was made by no guarded call of this job. What it cannot: a
peer on another node, whose journal is on its own node (there time decides). A directory made by a tool or an unguarded
process, or spelled differently (through a symlink) by its maker, or made with ``dir_fd``. Journals nobody wrote into
for ``STALE_S`` are removed by the next job to start on the node. A journal that passed ``JOURNAL_MAX_BYTES`` is set
aside (``made~.<tag>``, still read by ``newest``; the one set aside before is dropped): a job keeps at most twice
that in ``/dev/shm``, which is memory.

Beside it, ``tried.<tag>`` (issue 47): a guarded mkdir's ``FileExistsError`` and a ``makedirs(exist_ok=True)`` that
found the directory there note the name, one ``open``/``write`` each (they are few): a name another rank shares.
``made_alone`` reads both before a guarded ``rmtree`` (``fsguard.guards.rmtree.plain_at_once``): this rank made the
tree and no other rank tried to, so no peer could commit it.
"""

from __future__ import annotations

import os
import stat
import sys
import time

from .notefile import CHUNK as _CHUNK
from .notefile import newest_note
from .state import MEMORY_SIZE, STATE, Unforkable
from .tokens import PREFIX as SEQ
from .tokens import SIZE as TOKENS_SIZE
from .tokens import SLOTS, sweep_unheld

TYPE_CHECKING = False  # not typing's: only what startup needs is imported
if TYPE_CHECKING:
    from typing import Any

CANDIDATES = ("/dev/shm", "/tmp")
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()  # os.fsencode's
PREFIX = "made."
ASIDE = "made~."  # a job's journal set aside when it passed ``JOURNAL_MAX_BYTES`` (one such generation is kept)
JOURNAL_MAX_BYTES = 8 << 20  # about 100,000 entries: /dev/shm is memory (a container's is often 64 MB in all)
STALE_S = 86400.0  # a journal unchanged for a day is another day's: removed when a process opens its own
_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # read too: made_alone
TRIED = "tried."  # a job's notes of directories its ranks tried to make and found there (issue 47)
_CHUNKS = 18  # made_alone reads at most this many chunks of a journal back (about 1 MiB)
# An entry's time is read before its write; the journal's change time comes from the kernel's coarser clock (or in
# whole seconds on some filesystems), so it may trail its newest entry's by that much: ``newest`` allows this.
_CLOCK_SLACK_S = 2.0
NOTE_AGAIN_S = 3600.0  # a name this process noted as tried is noted again after this long (``_Noted``)


class _Opened:
    """This process's journal and where its last note ended. Opened once per install (a cache registered with
    ``state.STATE.caches``)."""

    __slots__ = ("journal", "last")

    def __init__(self) -> None:
        self.journal: tuple[str, int] | None = None  # (job tag, its journal's descriptor or -1)
        # (descriptor, the journal's size just after this process's last note, that note's " <path>\0" and rank, the
        # journal's token it set after it or None, the path as given where it is that note's path as text (an
        # absolute str; else None), the rank as a number), where nothing else was appended between the size read
        # before the note and the note itself (nor before the token, where there is one).
        self.last: tuple[int, int, bytes, bytes, bytes | None, str | None, int | None] | None = None

    def clear(self) -> None:
        self.journal = None
        self.last = None


OPENED = STATE.caches.register(_Opened())


class _Tried:
    """The ranks that noted each path in the job's ``tried`` notes, as read so far. Issue 47: the
    file only grows, so a ``made_alone`` reads only what was appended since the last (most often nothing: one
    ``fstat``), not the whole file each time. The first read starts at most ``_CHUNKS`` chunks from its end, as before;
    a cache registered with ``state.STATE.caches``."""

    __slots__ = ("end", "fd", "made", "ranks", "seen", "tag")

    def __init__(self) -> None:
        self.tag: str | None = None
        self.fd = -1  # the notes, open for reading (-1: none yet)
        self.end = 0  # where the notes read so far end: just past an entry's NUL
        self.ranks: dict[bytes, set[bytes]] = {}  # path -> the ranks that noted it (b"": a note without one)
        self.made = False  # whether this process tried to make the notes file where there was none
        self.seen: bytes | None = None  # the notes' token read before they were last read (``fsguard.tokens``)

    def clear(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.__init__()  # type: ignore[misc]

    def others(self, own: str, path: bytes, mine: bytes, token: bytes | None = None) -> bool:
        """Whether a process of a rank other than ``mine`` noted ``path`` in job ``own``'s notes. ``token``: the notes'
        token (``fsguard.tokens``), read before this call: where it is the one seen at the last read, nothing was noted
        since, and nothing is read."""
        if token is not None and token == self.seen and self.tag == own:
            ranks = self.ranks.get(path)
            return ranks is not None and any(rank != mine for rank in ranks)
        found = self._others(own, path, mine)
        if self.tag == own and self.fd >= 0:
            self.seen = token
        return found

    def _others(self, own: str, path: bytes, mine: bytes) -> bool:
        if self.tag != own:
            self.clear()
            self.tag = own
        if self.fd < 0:
            # Made empty where there are none yet, once per process: a later note goes into it, read through this
            # descriptor (a failed open of a missing file on every rmtree was a tenth of a small rmtree's time).
            self.fd = _open_tried(own, create=not self.made)
            self.made = True
            if self.fd < 0:
                return False  # no notes, and none could be made: the next call looks again
        st = os.fstat(self.fd)
        if st.st_nlink == 0:  # swept away and made afresh since it was opened: read the new one from the start
            self.clear()
            return self._others(own, path, mine)
        if st.st_size > self.end:
            self._read(st.st_size)
        ranks = self.ranks.get(path)  # most often none: no generator made (issue 47)
        return ranks is not None and any(rank != mine for rank in ranks)

    def noted(self, tag: str, written: int, entry: bytes, end: int, token: bytes | None) -> None:
        """Take this process's own note ``entry`` as read, where nothing came between. It was just written through
        ``written`` (ending at ``end``), then its ``token`` set. Taken where it is all that came after what was read
        (the same file), with its token where nothing came after it either. The next ``made_alone`` reads nothing
        (issue 47)."""
        if self.tag != tag or self.fd < 0 or self.end != end - len(entry):
            return
        try:
            read, wrote = os.fstat(self.fd), os.fstat(written)
            if (read.st_dev, read.st_ino) != (wrote.st_dev, wrote.st_ino):
                return  # swept and made afresh since this process opened it
            self._take(entry[:-1])
            self.end = end
            if token is not None and os.lseek(written, 0, os.SEEK_END) == end:
                self.seen = token
        except OSError:
            pass

    def _read(self, size: int) -> None:
        start = self.end or max(0, size - _CHUNKS * _CHUNK)
        data = os.pread(self.fd, size - start, start)
        first = data.find(b"\0") + 1 if start and not self.end else 0  # the first read may start mid-entry
        last = data.rfind(b"\0") + 1  # an entry still being appended is read next time
        if last <= first:
            return
        self.end = start + last
        self._take(data[first : last - 1])

    def _take(self, data: bytes) -> None:
        for entry in data.split(b"\0"):
            head, _, name = entry.partition(b" ")
            when, _, rank = head.partition(b"@")
            if when.replace(b".", b"", 1).isdigit() and (not rank or rank.isdigit()):
                self.ranks.setdefault(name, set()).add(rank)


TRIED_READ = STATE.caches.register(_Tried())


class _Makings:
    """The newest maker's rank of each path of the job's journal, as read so far.

    Each read goes on from where the last one ended (issue 47). The first read starts one chunk from its end; the
    newest ``MEMORY_SIZE`` paths are kept. A path not kept is looked up in the journal itself (``_newest_rank``). A
    cache registered with ``state.STATE.caches``."""

    __slots__ = ("end", "fd", "ranks", "seen")

    def __init__(self) -> None:
        self.fd = -1  # the journal read (this process's descriptor of it)
        self.end = 0  # where the notes read so far end: just past an entry's NUL
        self.ranks: dict[bytes, bytes] = {}  # path -> the rank of its newest note (b"": a note without one)
        self.seen: bytes | None = None  # the journal's token read before it was last read (``fsguard.tokens``)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def rank(self, fd: int, size: int, path: bytes) -> bytes | None:
        """The rank of the newest note of ``path`` in journal ``fd`` (of ``size``). None: no kept note names it."""
        if fd != self.fd:
            self.__init__()  # type: ignore[misc]
            self.fd = fd
        if size > self.end:
            start = self.end or max(0, size - _CHUNK)
            data = os.pread(fd, size - start, start)
            first = data.find(b"\0") + 1 if start and not self.end else 0  # the first read may start mid-entry
            last = data.rfind(b"\0") + 1  # an entry still being appended is read next time
            if last > first:
                self.end = start + last
                ranks = self.ranks
                for entry in data[first : last - 1].split(b"\0"):
                    head, _, name = entry.partition(b" ")
                    when, _, rank = head.partition(b"@")
                    if when.replace(b".", b"", 1).isdigit() and (not rank or rank.isdigit()):
                        ranks.pop(name, None)
                        ranks[name] = rank
                while len(ranks) > MEMORY_SIZE:
                    del ranks[next(iter(ranks))]
        return self.ranks.get(path)


MAKINGS = STATE.caches.register(_Makings())
_NOT_NOTED = b"-"  # ``_Makings``'s rank of a path no note within ``made_alone``'s reach names (never a rank)


def file_name(tag: str, prefix: str = PREFIX) -> str:
    """The journal's file name for a job tag. ``%``, ``/`` and NUL are escaped; a long tag ends in its hash. With
    ``prefix`` ``TRIED``, the name of its notes of directories found there."""
    name = prefix + tag.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")
    if len(name.encode()) > 200:
        import zlib

        raw = tag.encode()
        name = f"{name.encode()[:160].decode('utf-8', 'ignore')}%{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"
    return name


def tag_of(name: str) -> str | None:
    """The job tag a journal's file name stands for (a journal set aside too). None: not a journal, or a hashed long
    tag's."""
    prefix = PREFIX if name.startswith(PREFIX) else ASIDE if name.startswith(ASIDE) else None
    if prefix is None:
        return None
    return name[len(prefix) :].replace("%2F", "/").replace("%00", "\0").replace("%25", "%")


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


def tokens_path(tag: str) -> str | None:
    """Where job ``tag``'s change tokens are (``fsguard.tokens``), in ``directory``; None where there is none."""
    where = directory()
    return None if where is None else os.path.join(where, file_name(tag, SEQ))


def _open(tag: str) -> int:
    """This job's journal, opened for appending once per process (-1: none can be). The process that creates it sweeps
    old journals away."""
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
    OPENED.last = None  # a note of another descriptor (one set aside) never tells this one's end
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
                ours = entry.name.startswith((PREFIX, ASIDE, TRIED, SEQ))
                if ours and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    if not entry.name.startswith(SEQ):
                        unlink(entry.path)
                    else:
                        sweep_unheld(entry.path, unlink)
    except OSError:
        pass


def made(path: Any, tag: str) -> None:
    """Note that this process just created the directory ``path`` in job ``tag``. ``path`` is as given to ``mkdir``. The
    happy path of a guarded mkdir: one ``write`` to a node-local file; never raises."""
    try:
        journal = OPENED.journal
        fd, size = _current(tag, journal[1] if journal is not None and journal[0] == tag else _open(tag))
        if fd >= 0:
            entry, as_given = _entry(path)
            written = os.write(fd, entry)
            token = SLOTS.bump(tag, 0, tokens_path)
            # Where the journal then ends, if this note was all that came after the size read (see made_alone); with
            # a token, if nothing came after the note before the token either (its size read again).
            at = entry.index(b" ")
            rank = entry[:at].partition(b"@")[2]
            whole = size >= 0 and written == len(entry)
            if whole and token is not None and os.lseek(fd, 0, os.SEEK_END) != size + written:
                token = None  # another note came between: the token does not say this one is the last
            text = os.fspath(path) if as_given else None  # the note's path as text (made_alone compares it)
            number = getattr(STATE.launch, "rank", None)
            last = (fd, size + written, entry[at:], rank, token, text if type(text) is str else None, number)
            OPENED.last = last if whole else None
    except (OSError, TypeError, ValueError):
        pass


def _current(tag: str, fd: int) -> tuple[int, int]:
    """This process's descriptor of job ``tag``'s journal, kept current, and its size (-1: not read).

    The journal is set aside once it passed ``JOURNAL_MAX_BYTES`` (``ASIDE``, replacing the one set aside before: a
    job's journals keep at most twice that), and reopened where another process set it aside. One ``lseek``: only a
    full journal is ever set aside, so one under the bound is current (a job that made millions of directories filled
    ``/dev/shm``)."""
    if fd < 0:
        return fd, -1
    size = os.lseek(fd, 0, os.SEEK_END)  # (appends go to the end whatever the offset; reads are preads)
    if size < JOURNAL_MAX_BYTES:
        return fd, size
    st = os.fstat(fd)
    where = directory()
    if where is None:
        return fd, -1
    path = os.path.join(where, file_name(tag))
    try:
        with Unforkable():  # an import (see fsguard.tokens): only here, a full journal, once per process and generation
            import fcntl
    except ImportError:  # (a process whose imports fail: notes go on into this journal, the guarded call unharmed)
        return fd, -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one process sets it aside; the others reopen after
    except OSError:
        return fd, -1  # another process is setting it aside: the next note looks again
    try:
        if _names(path, st):  # not set aside by another process already
            os.replace(path, os.path.join(where, file_name(tag, ASIDE)))
    except OSError:
        pass
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
    if _names(path, st):
        return fd, -1  # it could not be set aside: notes go on into it
    os.close(fd)
    OPENED.journal = None
    return _open(tag), -1


def _names(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` still names the file ``st`` describes."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def tried(path: Any, tag: str) -> None:
    """Note that this process found the directory ``path`` there when it tried to make it. A peer shares the name in job
    ``tag``: it may commit the tree (``made_alone``). Its own file, ``tried.<tag>``, opened per note; never raises.

    Once per name and process (``NOTED``): ``made_alone`` asks only which ranks noted a name. A program that calls
    ``makedirs(out, exist_ok=True)`` before every write paid an ``open``, a ``write`` and a ``close`` each time, and
    the notes grew by an entry each time (issue 47: 38 us of CPU against 8 us, and 45 bytes a call)."""
    try:
        name = os.fspath(path)
        if not os.path.isabs(name):  # the same name from another working directory is another
            name = os.path.join(os.getcwdb() if isinstance(name, bytes) else os.getcwd(), name)
        if not NOTED.due(tag, name):
            return
        entry = _entry(path)[0]
        where = directory()
        if where is None:
            return
        fd = os.open(os.path.join(where, file_name(tag, TRIED)), _FLAGS, 0o600)
        try:
            written = os.write(fd, entry)
            end = os.lseek(fd, 0, os.SEEK_CUR)  # (appended: where this note ends)
            token = SLOTS.bump(tag, 1, tokens_path)
            if written == len(entry):
                TRIED_READ.noted(tag, fd, entry, end, token)
        finally:
            os.close(fd)
        NOTED.done(tag, name)
    except (OSError, TypeError, ValueError):
        pass


class _Noted:
    """The names this process noted in its job's ``tried`` notes, the newest ``MEMORY_SIZE``, and when. A name is noted
    again after ``NOTE_AGAIN_S``: the notes may have been swept and made afresh meanwhile. A cache registered with
    ``state.STATE.caches``."""

    __slots__ = ("names", "tag")

    def __init__(self) -> None:
        self.tag: str | None = None
        self.names: dict[str | bytes, float] = {}  # name, as given -> when noted (insertion order: the oldest first)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def due(self, tag: str, name: str | bytes) -> bool:
        """Whether ``name`` is to be noted now."""
        if tag != self.tag:
            self.clear()
            self.tag = tag
        when = self.names.get(name)
        return when is None or time.monotonic() - when > NOTE_AGAIN_S

    def done(self, tag: str, name: str | bytes) -> None:
        if tag != self.tag:
            return
        self.names.pop(name, None)
        self.names[name] = time.monotonic()
        while len(self.names) > MEMORY_SIZE:
            del self.names[next(iter(self.names))]


NOTED = STATE.caches.register(_Noted())


def _entry(path: Any) -> tuple[bytes, bool]:
    """One note, ``<time>@<rank> <absolute path>\\0``, and whether ``path`` is its path as given. The rank's own
    children (a Pool's) inherit its variables. As given: ``path`` is absolute and normal."""
    name = os.fsencode(path)
    given = name[:1] == b"/"
    if not given:
        name = os.path.join(os.getcwdb(), name)
    launch = STATE.launch
    rank = b"" if launch is None else b"@%d" % launch.rank
    normal = os.path.normpath(name)
    return b"%.6f%s %s\0" % (time.time(), rank, normal), given and normal == name


def newest(path: str, own: str, since: float | None = None) -> tuple[float, str, int | None] | None:
    """(when, job tag, maker's rank) of the newest entry naming ``path``; None where none does. It reads this node's
    journals, the failure path only. ``own`` is this job's tag, told by its file's name; another long tag, hashed in
    its file's name, is named by the file.

    A node keeps a day of journals, so there may be thousands, some of megabytes (issue 48: 157 ms a failure, the
    whole directory read). So the newest-changed journals are read first, each backwards from its end, to its
    newest entry for ``path``. The reading stops at a journal last changed before the entry found: none of its entries,
    nor any older journal's, can be newer. Where no journal names ``path``, every one is read, as before.

    ``since``: entries older than this are ignored (they named an earlier directory at ``path``, one removed since),
    and journals last changed before it are not read."""
    where = directory()
    if where is None:
        return None
    needle = b" " + os.path.normpath(os.path.abspath(os.fsencode(path))) + b"\0"
    journals: list[tuple[float, str]] = []
    try:
        with os.scandir(where) as entries:
            for item in entries:
                if item.name.startswith((PREFIX, ASIDE)):
                    try:
                        journals.append((item.stat(follow_symlinks=False).st_mtime, item.name))
                    except OSError:
                        continue  # swept meanwhile
    except OSError:
        return None
    journals.sort(reverse=True)
    found: tuple[float, str, int | None] | None = None
    floor = since if since is not None else float("-inf")
    for changed, name in journals:
        if changed + _CLOCK_SLACK_S < (floor if found is None else max(floor, found[0])):
            break
        entry = _last(os.path.join(where, name), needle)  # a journal's newest entry for path: the older ones are older
        if entry is not None and entry[0] >= floor and (found is None or entry[0] > found[0]):
            mine = name in (file_name(own), file_name(own, ASIDE))
            found = (entry[0], own if mine else tag_of(name) or name, entry[1])
    return found


def _last(journal: str, needle: bytes) -> tuple[float, int | None] | None:
    """The time and maker's rank of the last entry naming ``needle``'s path in one journal."""
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        note = newest_note(fd, needle, None)
    except OSError:
        return None
    finally:
        os.close(fd)
    if note is None:
        return None
    when, rank = note
    return float(when), int(rank) if rank else None


def made_alone(path: str, own: str, rank: int) -> bool:
    """Whether rank ``rank`` made the directory ``path`` last, and no other rank tried to. A process of rank ``rank``
    (this one, or its children: a ``multiprocessing.Pool``'s) made ``path`` (absolute, normalised) last in job ``own``
    on this node. No process of another rank of the job tried to make it and found it there. Reads node-local files
    only: the job's ``tried`` notes (most often there are none), and the end of its journal back to the path's newest
    making (at most about 1 MiB back: beyond that, no telling: False). Where this process's own note of ``path`` is
    still the journal's last (its size is where that note ended: ``_Opened.last``), nothing is read (issue 47)."""
    last = OPENED.last
    try:
        # The tokens, before anything is read: a note made after it changes them (SLOTS.read, without its call)
        mapped = SLOTS.map if SLOTS.tag == own else None
        now = mapped[:TOKENS_SIZE] if mapped is not None else SLOTS.read(own, tokens_path)
        if now is not None and last is not None and last[5] == path and last[4] == now[:8] and last[6] == rank:
            # This process's note of path is the journal's last: nothing was noted since. Nor in the tried notes,
            # where their token is the one seen when they were last read: their ranks, as read then, decide.
            tried = TRIED_READ
            if tried.seen == now[8:] and tried.tag == own and not tried.ranks:
                return True  # (the path's text is the note's; no tried notes at all, the most common case)
        name = path.encode(_FS_ENCODING, _FS_ERRORS) if type(path) is str else os.fsencode(path)
        needle = b" " + name + b"\0"
        mine = b"%d" % rank
        journal = OPENED.journal
        fd = journal[1] if journal is not None and journal[0] == own else _open(own)
        if fd < 0:
            return False
        if TRIED_READ.others(own, name, mine, None if now is None else now[8:]):
            return False  # another rank of the job found it there: it shares the name
        if now is not None and last is not None and last[4] == now[:8] and last[2:4] == (needle, mine):
            return True  # this process's note of path is the journal's last: nothing was noted since
        makings = MAKINGS
        if now is not None and makings.seen == now[:8] and makings.fd == fd:  # nothing noted since the last read
            found = makings.ranks.get(name)
            if found is not None:
                return found == mine
        fd, size = _current(own, fd)
        if fd < 0:
            return False
        if last is not None and last[:4] == (fd, size, needle, mine):
            return True  # this process's note of path is the journal's last: nothing was appended since
        found = makings.rank(fd, size, name)
        makings.seen = None if now is None else now[:8]
        if found is None:
            found = _newest_rank(fd, needle, size)
            if makings.fd == fd:  # kept too: the notes read on from here update it (a miss read 1 MiB back each time)
                makings.ranks[name] = _NOT_NOTED if found is None else found
        return found == mine
    except OSError:
        return False


def _open_tried(own: str, create: bool = False) -> int:
    """The job's ``tried`` notes opened for reading (-1: there are none). Where ``directory`` put them, in this user's
    private directory (mode 0700: nobody else could have made a file there), without making or checking it.
    ``create``: make them empty where there are none, in the directory ``directory`` checks."""
    name = file_name(own, TRIED)
    if create:
        where = directory()
        if where is not None:
            try:
                flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                return os.open(os.path.join(where, name), flags, 0o600)
            except OSError:
                pass
    uid = os.geteuid()
    for parent in CANDIDATES:
        try:
            return os.open(f"{parent}/fsguard-{uid}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
    return -1


def _newest_rank(fd: int, needle: bytes, size: int = -1) -> bytes | None:
    """The rank of the newest note naming ``needle``'s path in journal ``fd``, or None. ``size``: the journal's, -1
    where not read yet. An empty rank is a note without one; None, no note within ``_CHUNKS`` chunks of its end."""
    note = newest_note(fd, needle, _CHUNKS, size)
    return None if note is None else note[1]

"""Node-local serialization: ``flock`` on lock files in a private per-user directory.

Scope: the ranks of one node only. ``flock`` over NFS is not reliable. Older clients lock locally only; newer ones
emulate it with byte-range locks that a server restart can lose. So the directory is always on a node-local filesystem:
``/dev/shm/fsguard-<uid>`` (tmpfs), else ``/tmp/fsguard-<uid>``. Both are fixed names, so every rank of the node agrees
on them whatever its ``TMPDIR`` or ``XDG_RUNTIME_DIR`` says.

Safety: the directory is created mode 0700, then opened with ``O_NOFOLLOW`` and checked on the open descriptor. It must
be a directory, owned by us, not reachable by others. So a symlink or directory planted by another user in the sticky
shared ``/dev/shm`` is refused, not followed. Lock files are opened relative to that descriptor with ``O_NOFOLLOW``.
Nobody else can write into the directory, so nobody can plant anything in it.

A rank killed while holding a lock loses it at once: the kernel drops a ``flock`` when the last
descriptor of its open file goes away. Lock files are never deleted (deleting a lock file races with a
waiter that has it open); there are at most ``STRIPES`` of them, each one page.
"""

# Why ``fcntl.flock`` by hand, not the ``filelock`` library (a8bde79): filelock 4.x spends ~800 µs per acquire/release
# on its fork, registry and soft-lock machinery (raw ``flock``: ~15 µs, measured), sixteen times the 50 µs budget of a
# serialized call. That machinery guards against symlinks and foreign owners in shared directories, which cannot
# happen in a private 0700 directory checked as above.

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import threading
from typing import Any

from ..state import forkable
from ..waiting import Backoff
from .base import Held, LockTimeout, Unreachable

CANDIDATES = ("/dev/shm", "/tmp")
HOLDER_BYTES = 512  # holder text written at the start of the lock file, padded, so no truncate is needed
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_private_dir(parent: str) -> int:
    """Open (creating it if needed) ``<parent>/fsguard-<uid>``; raise ``Unreachable`` if it is not ours alone."""
    path = os.path.join(parent, f"fsguard-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise Unreachable(f"cannot create {path}: {error}") from error
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise Unreachable(f"cannot open {path} (a symlink?): {error}") from error
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise Unreachable(
            f"{path} is not a private directory of uid {os.geteuid()} "
            f"(owner {st.st_uid}, mode {stat.filemode(st.st_mode)}): refusing to use it"
        )
    return fd


class FileBackend:
    """``flock`` locks, one lock file per key, in a private node-local directory."""

    name = "file"
    scope = "node"

    def __init__(self, host: str, candidates: tuple[str, ...] = CANDIDATES) -> None:
        self._host = host
        self._candidates = candidates
        self._dir_fd: int | None = None
        self.directory: str | None = None
        self._lock = threading.Lock()
        self._open: set[int] = set()  # lock file descriptors opened and not yet closed, by any thread
        forkable(self)

    def after_fork_in_child(self) -> None:
        """Fresh lock; close (never unlock: the parent still holds them) the lock descriptors inherited."""
        self._lock = threading.Lock()
        inherited, self._open = self._open, set()
        for fd in inherited:
            try:
                os.close(fd)
            except OSError:
                pass

    def _dir(self) -> int:
        if self._dir_fd is not None:
            return self._dir_fd
        with self._lock:
            problems = []
            for parent in self._candidates:
                if self._dir_fd is not None or not os.path.isdir(parent):
                    continue
                try:
                    self._dir_fd = _open_private_dir(parent)
                    self.directory = os.path.join(parent, f"fsguard-{os.geteuid()}")
                except Unreachable as problem:
                    problems.append(str(problem))
            if self._dir_fd is None:
                raise Unreachable("; ".join(problems) or "no node-local directory for lock files")
            return self._dir_fd

    def prepare(self) -> None:
        """Nothing to open ahead: the call that takes a node-local lock file opens it."""

    def acquire(self, key: str, timeout: float, what: str) -> Held:
        dir_fd = self._dir()
        try:
            fd = os.open(f"{key}.lock", _FLAGS, 0o600, dir_fd=dir_fd)
        except OSError as error:
            raise Unreachable(f"cannot open lock file {key}.lock: {error}") from error
        self._open.add(fd)
        try:
            backoff = Backoff(timeout, 0.0002, 0.01)
            holder: str | None = None
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as error:
                    if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise Unreachable(f"flock failed: {error}") from error
                holder = _read_holder(fd) or holder
                if not backoff.pause():
                    raise LockTimeout(holder, backoff.waited())
            os.pwrite(fd, what.encode("utf-8", "replace")[:HOLDER_BYTES].ljust(HOLDER_BYTES), 0)
            held = Held(key, fd, backoff.waited(), holder)
            if holder is not None:
                held.note = _gone_note(holder, self._host)
            return held
        except BaseException:
            self._close(fd)
            raise

    def release(self, held: Held) -> None:
        if held.forked():
            return  # a forked child's copy: closed at fork, and the lock is the parent's
        # Unlock first: a child forked while the lock was held shares this open file, and a close alone
        # would leave the lock held until the last child exits.
        try:
            fcntl.flock(held.token, fcntl.LOCK_UN)
        finally:
            self._close(held.token)

    def _close(self, fd: int) -> None:
        self._open.discard(fd)
        os.close(fd)

    # --- renames announced ahead of their locks (fsguard.locks.serializer): a shared flock per rename ---

    def announce(self, key: str) -> int | None:
        """Hold a shared flock on ``<key>.rename`` until ``withdraw``. None if it cannot be taken at once."""
        fd = os.open(f"{key}.rename", _FLAGS, 0o600, dir_fd=self._dir())
        backoff = Backoff(
            float("inf"), 0.0005, 0.0005, tries=49
        )  # 50 tries: a pending() probe holds it for microseconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return fd
            except OSError:
                if not backoff.pause():
                    break
        os.close(fd)
        return None

    def withdraw(self, token: int | None) -> None:
        if token is not None:
            fcntl.flock(token, fcntl.LOCK_UN)  # before close: a forked child's copy must not keep it announced
            os.close(token)

    def pending(self, key: str) -> bool:
        fd = os.open(f"{key}.rename", _FLAGS, 0o600, dir_fd=self._dir())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
        finally:
            os.close(fd)
        return False

    # --- singleflight: not on node-local locks (a flight's outcome is shared through the job's store) ---

    def flight_claim(self, flight: str, what: str, reuse: bool = False) -> tuple[bool, Any] | None:
        return None

    def moved(self, ended: bool) -> None:
        """Nothing to count: no flight's outcome is reused on node-local locks."""

    def flight_wait(self, flight: str, value: bytes, timeout: float) -> tuple[bytes | None, bool, str]:
        raise NotImplementedError("file locks share no flights: flight_claim returned None")

    def flight_done(self, flight: str, held: Held, outcome: bytes) -> int:
        raise NotImplementedError("file locks share no flights: flight_claim returned None")


def _read_holder(fd: int) -> str | None:
    try:
        text = os.pread(fd, HOLDER_BYTES, 0).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text or None


_PID = re.compile(r"pid (\d+) on ")


def _gone_note(holder: str, host: str) -> str:
    """Whether the holder we waited for is still alive. It is on this node, so its pid means something here."""
    found = _PID.search(holder)
    if not found or not holder[found.end() :].startswith(f"{host} "):
        return ""
    if _exited(int(found.group(1))):
        return f"; its process {found.group(1)} has exited (killed?), and the kernel released its lock"
    return ""


_PF_EXITING = 0x4  # the kernel's flag of a process in exit: set before its files close, so before its flock goes


def _exited(pid: int) -> bool:
    """Whether process ``pid`` is gone, a zombie, or exiting (``/proc/<pid>/stat``). A waiter that a killed holder's
    lock wakes may run before that holder is a zombie: it is still exiting then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            fields = stat_file.read().rpartition(b")")[2].split()  # after the command name, which may hold anything
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)
    except (OSError, IndexError, ValueError):
        return False

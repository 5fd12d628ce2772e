"""What the decision rules may ask about the world: fresh listings, freshness, bounded settle, own memory.

Shared filesystems cache lookups (``stat``, ``open``) for seconds, but a directory listing is read fresh
from the server; so the rules ask "is the name in its parent's listing?" before anything else, and
only then fall back to a short bounded wait.
"""

from __future__ import annotations

import collections
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, Union

PathArg = Union[str, bytes, "os.PathLike[Any]"]
T = TypeVar("T")

# --- own memory ----------------------------------------------------------------------------------------
# What this process's guarded calls did, newest last. Appended on the happy path (one deque append, no
# normalisation); read only when a call failed. Bounded: a long job keeps the most recent events.
MEMORY_SIZE = 4096
MEMORY: collections.deque[tuple[str, tuple[Any, ...], dict[str, Any]]] = collections.deque(maxlen=MEMORY_SIZE)


def norm(path: PathArg) -> str:
    """Absolute, ``..``-folded text form of a path argument (relative to the current directory)."""
    value = os.fspath(path)
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    return os.path.abspath(value)


def _event_paths(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, str | None]:
    """(path made or removed or renamed away, path renamed onto) of one remembered call, normalised."""
    try:
        if op == "makedirs":
            return norm(args[0] if args else kwargs["name"]), None
        if op == "rmtree":
            if kwargs.get("dir_fd") is not None:
                return None, None
            return norm(args[0] if args else kwargs["path"]), None
        if kwargs.get("src_dir_fd") is not None or kwargs.get("dst_dir_fd") is not None:
            return None, None
        src = args[0] if args else kwargs["src"]
        dst = args[1] if len(args) > 1 else kwargs["dst"]
        return norm(src), norm(dst)
    except (KeyError, IndexError, TypeError, ValueError):
        return None, None


def own_last_event(path: str, *, within: bool = False) -> str | None:
    """The newest thing this process did to ``path`` (or, with ``within``, to anything below it).

    Returns ``"made"`` (makedirs succeeded, or something was renamed onto it), ``"moved-away"`` (renamed
    away), ``"removed"`` (rmtree succeeded), or None when this process's guarded calls never touched it.
    """
    prefix = path.rstrip(os.sep) + os.sep
    for op, args, kwargs in reversed(list(MEMORY)):
        first, second = _event_paths(op, args, kwargs)

        def hits(candidate: str | None) -> bool:
            return candidate is not None and (candidate == path or (within and candidate.startswith(prefix)))

        if op == "makedirs" and hits(first):
            return "made"
        if op == "rmtree" and first is not None and (first == path or path.startswith(first.rstrip(os.sep) + os.sep)):
            return "removed"
        if op in ("rename", "replace"):
            if hits(second):
                return "made"
            if first is not None and (first == path or path.startswith(first.rstrip(os.sep) + os.sep)):
                return "moved-away"
    return None


# --- fresh looks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """A name as its parent's fresh listing shows it."""

    parent_exists: bool
    present: bool
    kind: str | None = None  # "dir", "file", "symlink", "other", or None if the listing does not say


def look(path: str) -> Look:
    """Read ``path``'s parent directory listing (not served from the lookup cache) and find ``path`` in it."""
    parent, name = os.path.split(path.rstrip(os.sep) or os.sep)
    try:
        with os.scandir(parent or os.curdir) as entries:
            for entry in entries:
                if entry.name == name:
                    return Look(True, True, _kind(entry))
    except FileNotFoundError:
        return Look(False, False)
    except NotADirectoryError:
        return Look(False, False)
    return Look(True, False)


def _kind(entry: os.DirEntry[str]) -> str | None:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
        return "other"
    except OSError:
        return None


def lstat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def kind_of(st: os.stat_result) -> str:
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


# --- freshness -----------------------------------------------------------------------------------------

_job_start: float | None = None


def _proc_start(pid: int | str) -> float | None:
    """Wall-clock start time of a process, from /proc (Linux); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5); the split starts at field 3
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    boot = int(line.split()[1])
                    break
            else:
                return None
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def job_start(launched: bool) -> float:
    """When this job started, as well as this process can tell: the earliest of its own start, its
    launcher agent's start (the parent, when a launcher was detected) and ``SLURM_JOB_START_TIME``."""
    global _job_start
    if _job_start is None:
        candidates = [t for t in (_proc_start("self"),) if t is not None] or [time.time()]
        if launched:
            parent = _proc_start(os.getppid())
            if parent is not None and os.getppid() > 1:
                candidates.append(parent)
            slurm = os.environ.get("SLURM_JOB_START_TIME")
            if slurm and slurm.isdigit():
                candidates.append(float(slurm))
        _job_start = min(candidates)
    return _job_start


# --- bounded waiting -----------------------------------------------------------------------------------


def settle(probe: Callable[[], T | None], budget_s: float) -> tuple[T | None, float]:
    """Call ``probe`` with backoff (5 ms doubling to 200 ms) until it returns non-None or ``budget_s`` passes.

    Returns (result or None, seconds waited). Never waits longer than the budget.
    """
    started = time.monotonic()
    delay = 0.005
    result = probe()
    while result is None:
        waited = time.monotonic() - started
        if waited >= budget_s:
            break
        time.sleep(min(delay, budget_s - waited))
        delay = min(delay * 2, 0.2)
        result = probe()
    return result, time.monotonic() - started

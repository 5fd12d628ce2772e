"""What the decision rules may ask about the world: presence by the mount's fresh probe, freshness, bounded
settle, own memory.

Shared filesystems cache lookups (``stat``, ``open``) for seconds, but a directory listing is read fresh
from the server; so there the rules ask "is the name in its parent's listing?" before anything else, and
only then fall back to a short bounded wait. On a coherent local filesystem (``fsguard.mounts``) the name's
own ``lstat`` is already the truth: no listing, and nothing to wait for.
"""

from __future__ import annotations

import os
import stat
import time

from . import mounts

# Own memory lives in fsguard.memory; the rules ask for it here with the rest of the evidence.
from .memory import MEMORY as MEMORY
from .memory import MEMORY_SIZE as MEMORY_SIZE
from .memory import fspath as fspath
from .memory import norm as norm
from .memory import own_last as own_last
from .memory import own_last_event as own_last_event
from .mounts import lookups_may_be_stale as lookups_may_be_stale

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

# --- fresh looks ---------------------------------------------------------------------------------------


class Look:
    """A name as the freshest view of its parent shows it."""

    __slots__ = ("kind", "parent_exists", "present")

    def __init__(self, parent_exists: bool, present: bool, kind: str | None = None) -> None:
        self.parent_exists = parent_exists
        self.present = present
        self.kind = kind  # "dir", "file", "symlink", "other", or None if the listing does not say

    def __repr__(self) -> str:
        return f"Look(parent_exists={self.parent_exists}, present={self.present}, kind={self.kind!r})"


def look(path: str) -> Look:
    """Find ``path`` by the cheapest probe its mount honours: its own ``lstat`` on a coherent local filesystem;
    elsewhere its parent's directory listing (not served from the lookup cache), read up to the name."""
    parent, name = os.path.split(path.rstrip(os.sep) or os.sep)
    if not mounts.lookups_may_be_stale(parent or os.curdir):
        seen = _look_own(path.rstrip(os.sep) or os.sep, parent or os.curdir)
        if seen is not None:
            return seen
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


def _look_own(path: str, parent: str) -> Look | None:
    """The name's own ``lstat`` (and its parent's ``stat`` when it is missing); None: no answer, list instead."""
    try:
        return Look(True, True, kind_of(os.lstat(path)))
    except NotADirectoryError:
        return Look(False, False)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        return Look(stat.S_ISDIR(os.stat(parent).st_mode), False)
    except (FileNotFoundError, NotADirectoryError):
        return Look(False, False)
    except OSError:
        return None


def later_generation(path: str) -> str | None:
    """The name of a sibling directory that is a later generation of ``path``'s name: the same name with
    greater numbers in it (``checkpoint-2`` -> ``checkpoint-6``, ``global_step10`` -> ``global_step20``), from
    the parent's fresh listing; None where there is none, or the name holds no number."""
    parent, name = os.path.split(path.rstrip(os.sep) or os.sep)
    stem, numbers = _generation(name)
    if not numbers:
        return None
    try:
        with os.scandir(parent or os.curdir) as entries:
            for entry in entries:
                if entry.name == name:
                    continue
                other_stem, other_numbers = _generation(entry.name)
                if other_stem == stem and other_numbers > numbers and _kind(entry) == "dir":
                    return entry.name
    except OSError:
        return None
    return None


def _generation(name: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A name's text apart from its numbers, and its numbers: ``step-3-of-8`` -> (("step-", "-of-", ""), (3, 8))."""
    import re

    parts = re.split(r"(\d+)", name)
    return tuple(parts[0::2]), tuple(int(n) for n in parts[1::2])


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


def settle(probe: Callable[[], T | None], budget_s: float, where: str | None = None) -> tuple[T | None, float]:
    """Call ``probe`` with backoff (5 ms doubling to 200 ms) until it returns non-None or the budget passes.

    ``where``: a path whose mount bounds the budget (``fsguard.mounts.wait_budget``): nothing to wait for on a
    coherent local filesystem, at most the mount's own lookup cache time where it is known, else ``budget_s``.
    Returns (result or None, seconds waited). Never waits longer than the budget.
    """
    started = time.monotonic()
    result = probe()
    if result is not None:
        return result, time.monotonic() - started
    if where is not None:
        budget_s = mounts.wait_budget(os.path.dirname(where.rstrip(os.sep)) or os.curdir, budget_s)
    delay = 0.005
    while result is None:
        waited = time.monotonic() - started
        if waited >= budget_s:
            break
        time.sleep(min(delay, budget_s - waited))
        delay = min(delay * 2, 0.2)
        result = probe()
    return result, time.monotonic() - started

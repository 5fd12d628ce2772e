"""What the decision rules may ask about the world. That is presence by the mount's fresh probe, freshness, bounded
waits for a peer's work, and own memory.

Shared filesystems cache lookups (``stat``, ``open``) for seconds, but read a directory listing fresh from the server.
So there the rules ask "is the name in its parent's listing?" first. Only then do they fall back to a short bounded
wait. On a coherent local filesystem (``fsguard.mounts``) the name's own ``lstat`` is already the truth: no listing, and
nothing to wait for.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time

from . import journal, mounts
from .launcher import is_single_node

# Own memory lives in fsguard.memory; the rules ask for it here with the rest of the evidence.
from .memory import DIRS as DIRS
from .memory import MEMORY as MEMORY
from .memory import MEMORY_SIZE as MEMORY_SIZE
from .memory import fspath as fspath
from .memory import norm as norm
from .memory import own_last as own_last
from .memory import own_last_event as own_last_event
from .mounts import lookups_may_be_stale as lookups_may_be_stale
from .state import STATE
from .waiting import Backoff

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Literal, TypeVar

    T = TypeVar("T")


class _Found:
    """What the evidence finds once per install (a cache registered with ``state.STATE.caches``)."""

    __slots__ = ("attempt_start", "boot_time", "job_start", "rotations", "statx")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.job_start: tuple[float, str] | None = None  # (when this job started here, how that was found)
        self.attempt_start: tuple[float | None] | None = None  # (when a restarted attempt started here,)
        self.boot_time: float | None = None  # wall-clock time of boot
        # libc's statx, a buffer maker and get_errno; False where there is none
        self.statx: tuple[Callable[..., int], Callable[[int], Any], Callable[[], int]] | Literal[False] | None = None
        self.rotations: dict[tuple[str, Any], str] = {}  # (directory, name stem) -> the generation removed


FOUND = STATE.caches.register(_Found())

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


def look(path: str, missed: bool = False) -> Look:
    """Find ``path`` by the cheapest probe its mount honours. ``missed``: the caller's own call on the name failed
    with ``ENOENT`` a moment ago, so its lookup is not asked again. First the name's own ``lstat``, whose device says
    the mount (no lookup of its own). On a coherent local filesystem that is the truth. Elsewhere a name it shows may
    be a stale cache entry. So the parent's directory listing, not served from the lookup cache, is read up to the
    name. A name it does not find is the truth where the mount caches no "no such name" answers. (That is JuiceFS's
    and FUSE's default, and NFS ``lookupcache=positive``: ``fsguard.mounts.misses_are_fresh``.) Then the parent is
    read as its own lookup shows it. Where such answers may be cached, the listing is read again. On a distributed
    filesystem a listing is several requests to the metadata server and a lookup one at most (none while the
    kernel's entry is fresh)."""
    full = path.rstrip(os.sep) or os.sep
    parent, name = os.path.split(full)
    parent = parent or os.curdir
    if missed:
        return _missing(parent, name)
    try:
        st = os.lstat(full)
    except NotADirectoryError:
        return Look(False, False)
    except FileNotFoundError:
        return _missing(parent, name)
    except OSError:
        return _listed(parent, name)
    found = mounts.mount_of(st.st_dev)
    if not found.stale and not (stat.S_ISDIR(st.st_mode) and found.point == full):
        return Look(True, True, kind_of(st))
    return _listed(parent, name)  # a mount's root: its parent's mount decides, by its listing


def _missing(parent: str, name: str) -> Look:
    """Whether a name its own lookup did not find is really missing. Where missing names are not cached, the parent's
    own lookup says; else the parent's listing."""
    try:
        dev = _directory_device(parent)
    except (FileNotFoundError, NotADirectoryError):
        found = mounts.mount_of(parent)  # the nearest directory above that is there
        return Look(False, False) if mounts.misses_are_fresh(found) else _listed(parent, name)
    except OSError:
        return _listed(parent, name)
    if dev is None:
        return Look(False, False)  # something else than a directory
    if mounts.misses_are_fresh(mounts.mount_of(dev)):
        return Look(True, False)
    return _listed(parent, name)


def _directory_device(path: str) -> int | None:
    """The device of the directory at ``path`` (following symlinks), None where it is no directory. Where the kernel has
    ``statx``, it asks with ``AT_STATX_DONT_SYNC``: the lookup alone, from the attributes this node holds. A directory's
    type and device never change. A ``stat`` on a distributed filesystem would ask the server again after every change
    this node made in the directory."""
    found = _statx(path, _STATX_TYPE, _AT_STATX_DONT_SYNC)
    if found is None:
        st = os.stat(path)
        return st.st_dev if stat.S_ISDIR(st.st_mode) else None
    raw = found
    mode = int.from_bytes(raw[28:30], sys.byteorder)  # stx_mode
    if not stat.S_ISDIR(mode):
        return None
    major = int.from_bytes(raw[136:140], sys.byteorder)  # stx_dev_major
    minor = int.from_bytes(raw[140:144], sys.byteorder)  # stx_dev_minor
    return os.makedev(major, minor)


def _listed(parent: str, name: str) -> Look:
    """The name as the parent's fresh listing shows it, read up to the name."""
    try:
        with os.scandir(parent) as entries:
            for entry in entries:
                if entry.name == name:
                    return Look(True, True, _kind(entry))
    except FileNotFoundError:
        return Look(False, False)
    except NotADirectoryError:
        return Look(False, False)
    return Look(True, False)


def generation_beside(path: str) -> str | None:
    """A sibling directory that is another generation of ``path``'s name, or None. Another generation is the same name
    with other numbers in it, read from the parent's fresh listing. ``checkpoint-2`` is beside ``checkpoint-6`` or
    ``checkpoint-1``, ``global_step10`` beside ``global_step20``. None where there is none, or the name holds no number.

    A rotation this process runs needs no listing per removal. A listing may have shown another generation beside one
    this process then removed (own memory: its guarded ``rmtree``). That removed generation is then the answer for the
    name's next generation in that directory. A Trainer's ``save_total_limit`` removes one per save. On a distributed
    filesystem a listing is several requests to the metadata server."""
    parent, name = os.path.split(path.rstrip(os.sep) or os.sep)
    stem, numbers = _generation(name)
    if not numbers:
        return None
    rotations = FOUND.rotations
    key = (parent, stem)
    before = rotations.get(key)
    if before is not None and before != path and own_last_event(before) == "removed":
        rotations[key] = path  # this one, when this process has removed it in turn, answers for the next
        return os.path.basename(before)
    try:
        with os.scandir(parent or os.curdir) as entries:
            for entry in entries:
                if entry.name == name:
                    continue
                other_stem, other_numbers = _generation(entry.name)
                if other_stem == stem and other_numbers != numbers and _kind(entry) == "dir":
                    _note_rotation(rotations, key, path)
                    return entry.name
    except OSError:
        return None
    return None


def _note_rotation(rotations: dict[tuple[str, Any], str], key: tuple[str, Any], path: str) -> None:
    """Remember ``path`` as a generation of a rotation, asked again once this process removed it. A few hundred
    directories at most."""
    rotations.pop(key, None)
    if len(rotations) >= 256:
        del rotations[next(iter(rotations))]
    rotations[key] = path


def _generation(name: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A name's text apart from its numbers, and its numbers. ``step-3-of-8`` -> (("step-", "-of-", ""), (3, 8))."""
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


# --- mounts ---------------------------------------------------------------------------------------------


def is_mount_point(path: str, st: os.stat_result | None = None) -> bool:
    """Whether ``path`` is the root of a mount. A bind mount of a directory of the same filesystem counts. Device
    numbers cannot tell it; ``/proc/self/mountinfo`` can. Read afresh at each call: a program may mount while it runs;
    asked only on the way to a wait, never on a happy path."""
    st = st or lstat_or_none(path)
    parent = lstat_or_none(os.path.dirname(path))
    if st is None or parent is None:
        return False
    if st.st_dev != parent.st_dev:
        return True
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split(" ", 5)
                if len(fields) > 4 and _unescape(fields[4]) == real:
                    return True
    except OSError:
        return False
    return False


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are written as octal escapes."""
    if "\\" not in field:
        return field
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


# --- freshness -----------------------------------------------------------------------------------------
#
# "During this job" starts when this node's launcher started (torchrun's agent, mpirun's daemon, slurmstepd):
# every rank of a job starts after it. With a rendezvous (torchrun, and accelerate and deepspeed's torchrun-
# style launchers; mpirun launching its ranks once all daemons reported in) a peer node's ranks start only
# after every agent has joined, this node's included, so this node's agent start bounds every peer's action;
# launchers without one (srun tasks, deepspeed's pdsh fan-out, hydra's proxies) start nodes a little apart,
# and file times come from the file server's clock: ``FSGUARD_FRESH_S`` (``Rules.is_fresh``) allows for both.


# Process names (``comm``) of launchers' per-node daemons, and of slurm's step daemon.
_LAUNCHER_DAEMONS = frozenset(
    {"orted", "prted", "prterun", "orterun", "mpirun", "mpiexec", "hydra_pmi_proxy", "mpiexec.hydra", "slurmstepd"}
)


def _proc_stat(pid: int | str) -> tuple[str, int, float] | None:
    """(name, parent pid, wall-clock start time) of a process, from /proc (Linux); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            head, _, tail = f.read().rpartition(b")")
        fields = tail.split()
        ticks = int(fields[19])  # field 22 of stat(5); the split starts at field 3
        name = head.partition(b"(")[2].decode("utf-8", "replace")
        return name, int(fields[1]), _boot_time() + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _boot_time() -> float:
    """The wall-clock time of boot, to the microsecond, read once per install. So every start time this process computes
    is on one scale. Not /proc/stat's ``btime``: whole seconds, up to 1 s early."""
    if FOUND.boot_time is None:
        FOUND.boot_time = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return FOUND.boot_time


def _proc_start(pid: int | str) -> float | None:
    """Wall-clock start time of a process, from /proc (Linux); None elsewhere."""
    found = _proc_stat(pid)
    return None if found is None else found[2]


def _launcher_ancestor(limit: int = 8) -> tuple[str, float, int] | None:
    """(what, start time, pid) of the nearest launcher ancestor. The ancestor is a process
    ``launcher.is_launcher_process`` recognises by its command line. That is torchrun, deepspeed's and accelerate's
    launchers, or mpirun; or one of ``_LAUNCHER_DAEMONS`` by name."""
    from .launcher import is_launcher_process

    pid = os.getppid()
    for _ in range(limit):
        if pid <= 1:
            return None
        found = _proc_stat(pid)
        if found is None:
            return None
        name, parent, started = found
        if name in _LAUNCHER_DAEMONS:
            return f"{name} (pid {pid})", started, pid
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        except OSError:
            argv = []
        if argv and is_launcher_process(argv):
            program = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else os.path.basename(argv[0])
            return f"{program} agent (pid {pid})", started, pid
        pid = parent
    return None


def job_start(launched: bool) -> float:
    """When this job started on this node, as well as this process can tell. ``job_start_source`` says how it was told.
    Inside a launch: the start of the nearest launcher ancestor (see above). Without one it can see (a PID namespace, an
    unknown launcher): ``SLURM_JOB_START_TIME``. Else its parent's start, or a driver's children's
    (``_parent_or_driver``). Outside a launch (``FSGUARD=force``): this process's own start."""
    found = FOUND.job_start
    if found is None:
        own = _proc_start("self")
        start, source = (own, "this process's start") if own is not None else (time.time(), "fsguard's start")
        if launched:
            ancestor = _launcher_ancestor()
            slurm = os.environ.get("SLURM_JOB_START_TIME", "")
            parent = _proc_start(os.getppid()) if os.getppid() > 1 else None
            if ancestor is not None:
                source, start = f"the start of {ancestor[0]}", ancestor[1]
            elif slurm.isdigit():
                source, start = "SLURM_JOB_START_TIME", min(start, float(slurm))
            elif parent is not None:
                start, source = _parent_or_driver(start, parent)
        found = FOUND.job_start = (start, source)
    return found[0]


def _parent_or_driver(own: float, parent: float) -> tuple[float, str]:
    """(start, how found) of the job where no launcher is in sight. The parent's start, unless it started longer before
    this process than ``FSGUARD_FRESH_S``. Then it is a driver that starts one job after another (a notebook, a sweep
    runner), not a launcher. The job then started with the earliest of its living children started with this process.
    Those are children started within ``FSGUARD_FRESH_S`` before it: not a job it ran before, nor a helper it keeps
    running."""
    fresh_s = STATE.settings.fresh_s
    if parent >= own - fresh_s:
        return min(own, parent), "the parent process's start"
    ppid = os.getppid()
    starts = [found for found in map(_proc_start, _children(ppid)) if found is not None and found >= own - fresh_s]
    return min([own, *starts]), f"the earliest start among the children of a driver (pid {ppid}) started long before"


def __getattr__(name: str) -> str:
    """``job_start_source``: how ``job_start`` found the job's start ("this process's start" before it was asked)."""
    if name == "job_start_source":
        found = FOUND.job_start
        return "this process's start" if found is None else found[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _children(pid: int) -> list[int]:
    """The living children of process ``pid`` (``/proc/<pid>/task/*/children``; none where it cannot be read)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
    except (OSError, ValueError):
        pass
    return found


def attempt_start(launched: bool) -> float | None:
    """When this attempt of a restarted torchrun job started on this node. This is a job with
    ``TORCHELASTIC_RESTART_COUNT`` > 0. The attempt started with the earliest of its agent's living children, the
    workers of this attempt. The agent stopped every worker of the previous attempt before it started this one's. The
    agent itself started with the first attempt. A worker's own subprocesses (DataLoader workers) ask the same agent.
    Without a launcher ancestor in sight, this process's parent's children. None for a first attempt, outside a launch,
    or where no start can be read."""
    cached = FOUND.attempt_start
    if cached is None:
        from .launcher import restart_count

        found = None
        if launched and restart_count(os.environ) > 0:
            ancestor = _launcher_ancestor()
            agent = ancestor[2] if ancestor is not None else os.getppid()
            pids: list[int | str] = ["self", *(_children(agent) if agent > 1 else [])]
            starts = [start for start in map(_proc_start, pids) if start is not None]
            found = min(starts) if starts else None
        cached = FOUND.attempt_start = (found,)
    return cached[0]


def job_tag_of(path: str, since: float | None = None) -> str | None:
    """Whose the directory at ``path`` is, by this node's journal. The journal (``fsguard.journal``) notes what each job
    made; nothing is read from the directory itself. The answer is the tag of the job whose guarded mkdir made it last.
    An earlier job of the same identity adds ``;made N s before this job started`` to this job's tag. (That is
    torchrun's default run id and port relaunched, or a driver's jobs in turn.) In a single-node job
    (``launcher.single_node``) it is ``""`` when no job of this node made it: no peer's guarded call did. None where the
    journal cannot tell: a peer on another node, or no tag of this job's own. ``since``: an entry older than this is
    of an earlier directory at ``path`` (one removed since) and tells nothing of this one."""
    own = STATE.job
    if own is None:
        return None
    found = journal.newest(path, own, since)
    if found is None:
        return "" if is_single_node(own) else None
    when, tag, _ = found
    started = FOUND.job_start
    if tag == own and started is not None and when < started[0]:
        return f"{tag};made {started[0] - when:.1f} s before this job started"
    return tag


def made_by_rank(path: str, rank: int) -> bool:
    """Whether this job's newest journal entry for ``path`` names ``rank`` as its maker. That is, a process of that rank
    made the directory there last. It may be the rank itself or its children (a ``multiprocessing.Pool``'s)."""
    own = STATE.job
    found = None if own is None else journal.newest(path, own)
    return found is not None and found[1] == own and found[2] == rank


_AT_SYMLINK_NOFOLLOW, _AT_EMPTY_PATH, _AT_STATX_DONT_SYNC = 0x100, 0x1000, 0x4000  # at: AT_FDCWD (-100) by default
_STATX_TYPE, _STATX_CTIME, _STATX_INO, _STATX_BTIME = 0x1, 0x80, 0x100, 0x800


def identity(fd: int) -> tuple[int, int]:
    """(device, inode number) of the open descriptor ``fd``. Where the kernel has ``statx``, from the attributes this
    node holds (``AT_STATX_DONT_SYNC``). Neither ever changes for an open inode, so nothing is asked of a distributed
    filesystem's server. Else ``fstat``'s."""
    raw = _statx("", _STATX_INO, _AT_EMPTY_PATH | _AT_STATX_DONT_SYNC, fd)
    if raw is None:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino
    major = int.from_bytes(raw[136:140], sys.byteorder)  # stx_dev_major
    minor = int.from_bytes(raw[140:144], sys.byteorder)  # stx_dev_minor
    return os.makedev(major, minor), int.from_bytes(raw[32:40], sys.byteorder)  # stx_ino


def _statx(path: str, mask: int, flags: int, at: int = -100) -> bytes | None:
    """``statx(2)`` of ``path``, or None where there is no ``statx``. The raw ``struct statx``. ``statx`` is libc's
    (glibc 2.28+), imported with ctypes at the first call: on the failure path only. Raises ``OSError`` as ``os.stat``
    does."""
    if FOUND.statx is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            function = libc.statx
            function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
            function.restype = ctypes.c_int
            FOUND.statx = (function, ctypes.create_string_buffer, ctypes.get_errno)
        except (AttributeError, OSError, ImportError):
            FOUND.statx = False
    if not FOUND.statx:
        return None
    call, buffer, get_errno = FOUND.statx
    out = buffer(256)  # struct statx
    if call(at, os.fsencode(path), flags, mask, out) != 0:
        code = get_errno()
        if code == errno.ENOSYS:  # a kernel before 4.11
            return None
        raise OSError(code, os.strerror(code), path)
    return bytes(out.raw)


def held_ctime(path: str) -> float | None:
    """The change time of ``path`` as this node holds it, asking the server nothing. It is ``statx`` with
    ``AT_STATX_DONT_SYNC``: never newer than the truth (a ctime only grows), so one that is already during the job needs
    no fresh ``lstat`` (a ``GetAttr`` on a distributed filesystem). None where the kernel has no ``statx`` or it
    fails."""
    try:
        raw = _statx(path, _STATX_CTIME, _AT_SYMLINK_NOFOLLOW | _AT_STATX_DONT_SYNC)
    except (OSError, ValueError):
        return None
    if raw is None or not int.from_bytes(raw[0:4], sys.byteorder) & _STATX_CTIME:
        return None
    seconds = int.from_bytes(raw[96:104], sys.byteorder, signed=True)  # stx_ctime.tv_sec
    return seconds + int.from_bytes(raw[104:108], sys.byteorder) / 1e9  # stx_ctime.tv_nsec


def birth_time(path: str) -> float | None:
    """When the file at ``path`` was created, or None where not known. It does not follow a final symlink. It is
    ``statx``'s ``btime``, where the filesystem keeps it: ext4, xfs, btrfs, tmpfs, ... do; NFS and many FUSE filesystems
    do not. Called on the failure path only (ctypes is imported here, not at startup)."""
    try:
        raw = _statx(path, _STATX_BTIME, _AT_SYMLINK_NOFOLLOW)
    except OSError:
        return None
    if raw is None or not int.from_bytes(raw[0:4], sys.byteorder) & _STATX_BTIME:  # stx_mask: no btime filled
        return None
    seconds = int.from_bytes(raw[80:88], sys.byteorder, signed=True)  # stx_btime.tv_sec
    nanoseconds = int.from_bytes(raw[88:92], sys.byteorder)
    return seconds + nanoseconds / 1e9


def created(path: str, st: os.stat_result) -> tuple[float, str]:
    """When ``path`` was created, and what that time is. Birth time where the filesystem keeps it, else the ctime of
    ``st``. A ctime is the last change: a directory made long ago that changed moments ago looks new."""
    born = birth_time(path)
    return (born, "created") if born is not None else (st.st_ctime, "changed")


# --- bounded waiting -----------------------------------------------------------------------------------


def wait_for_seen(probe: Callable[[], T | None], budget_s: float, where: str | None = None) -> tuple[T | None, float]:
    """Call ``probe`` with backoff until it returns non-None or the budget passes. The backoff is 5 ms doubling to 200
    ms.

    ``where``: a path whose mount bounds the budget (``fsguard.mounts.wait_budget``). Nothing to wait for on a coherent
    local filesystem. At most the mount's own lookup cache time where it is known; else ``budget_s``. Returns (result or
    None, seconds waited). Never waits longer than the budget.
    """
    started = time.monotonic()
    result = probe()
    if result is not None:
        return result, time.monotonic() - started
    if where is not None:
        budget_s = mounts.wait_budget(os.path.dirname(where.rstrip(os.sep)) or os.curdir, budget_s)
    backoff = Backoff(budget_s, 0.005, 0.2, started=started)
    while result is None and backoff.pause():
        result = probe()
    return result, backoff.waited()

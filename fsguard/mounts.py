"""What kind of filesystem a path is on, read once per device from ``/proc/self/mountinfo``.

Two questions are asked of a mount, by different parts of fsguard:

* ``lookups_may_be_stale``: may this node's ``stat``/``lstat``/``open`` of a name answer from a cache that a
  peer's change has not reached yet? Network and FUSE filesystems cache lookups (NFS's attribute and lookup
  caches, a FUSE daemon's entry/attr timeouts); there the rules ask a fresh view (the parent's listing) and
  may wait. On a coherent local filesystem (ext4, xfs, btrfs, tmpfs, an overlay of local layers) every
  process of the node sees one kernel's dentries, so a name's own ``lstat`` is the truth: no listing, no wait.
* ``shared``: do all nodes see the same object there (singleflight's collapse across nodes,
  ``fsguard.locks.flight``)?

An unknown type is treated as node-local (not shared) but as possibly stale (the listing path): the cautious
answer for each question. ``cache_s``: how long the mount itself says a lookup may stay stale, where its
options tell (NFS ``actimeo``/``acdirmax``/``lookupcache``/``noac``, FUSE ``entry_timeout``, JuiceFS's
``--entry-cache``/``--dir-entry-cache`` as its ``.config`` file shows them); None where they do not, and the
rules then wait ``FSGUARD_SETTLE_S``. ``negative_s``: how long the mount may answer "no such name" from a cache
(NFS ``lookupcache``, FUSE ``negative_timeout``, JuiceFS's ``--negative-entry-cache``, 0 by default); where it
is 0, a name's own lookup that finds nothing is as fresh as a listing (``fsguard.evidence.look``): only a name
that a lookup still shows may be stale there.
"""

from __future__ import annotations

import os

from .state import STATE

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

# Every node sees one object there, and this node's lookups may lag a peer's change.
SHARED_TYPES = frozenset(
    ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "smbfs", "glusterfs", "panfs", "9p", "afs")
)
# One kernel's dentries: lookups are the truth for every process of the node.
COHERENT_TYPES = frozenset(
    (
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "bcachefs",
        "zfs",
        "f2fs",
        "jfs",
        "reiserfs",
        "tmpfs",
        "ramfs",
        "devtmpfs",
        "overlay",
        "vfat",
        "exfat",
        "ntfs3",
        "squashfs",
        "erofs",
        "iso9660",
    )
)
# NFS's defaults when its options do not say (nfs(5)): a directory's attributes, and so its lookups, may be
# cached this long.
NFS_ACDIRMAX_S = 60.0

# st_dev -> its Mount, read from mountinfo once per device and install (a cache of state.STATE.caches)
MOUNTS: dict[int, Mount] = STATE.caches.register({})


class Mount:
    """One mount as ``/proc/self/mountinfo`` describes it, and what fsguard concludes from it."""

    __slots__ = ("cache_s", "fstype", "negative_s", "options", "point", "shared", "source", "stale")

    def __init__(
        self, point: str, fstype: str, source: str, options: dict[str, str], stale: bool, shared: bool
    ) -> None:
        self.point = point
        self.fstype = fstype
        self.source = source
        self.options = options  # per-mount and superblock options together
        self.stale = stale
        self.shared = shared
        self.cache_s: float | None = None
        self.negative_s: float | None = 0.0 if not stale else None  # None: "missing" may be cached, how long unknown

    def __repr__(self) -> str:
        return (
            f"Mount({self.point!r}, {self.fstype!r}, stale={self.stale}, shared={self.shared}, cache_s={self.cache_s}, "
            f"negative_s={self.negative_s})"
        )

    def probe(self) -> str:
        """What the rules ask on this mount to see a name, in words (``fsguard status``)."""
        if not self.stale:
            return "the name's own lstat (coherent local filesystem: no listing, no settle wait)"
        return "the parent's fresh listing, scanned up to the name"

    def waits(self, settle_s: float) -> str:
        """What the rules wait for a name to show on this mount, in words."""
        if not self.stale:
            return "nothing"
        budget = wait_budget_for(self, settle_s)
        if self.cache_s is not None:
            own = f"the mount's own lookup cache time {self.cache_s:g} s"
            return f"up to {budget:g} s ({own}, FSGUARD_SETTLE_S {settle_s:g} s)"
        return f"up to {budget:g} s (FSGUARD_SETTLE_S: the mount's cache time is not visible)"


_UNKNOWN = Mount("", "", "", {}, stale=True, shared=False)


def mount_of(path_or_dev: str | bytes | int | os.PathLike[Any]) -> Mount:
    """The mount of a device number, or of a path's nearest existing directory. Cached per device."""
    if isinstance(path_or_dev, int):
        return MOUNTS.get(path_or_dev) or _mount_of_dev(path_or_dev, None)
    path = os.fsdecode(os.fspath(path_or_dev))
    dev, where = _device(path)
    if dev is None:
        return _UNKNOWN
    return _mount_of_dev(dev, where)


def lookups_may_be_stale(path_or_dev: str | bytes | int | os.PathLike[Any]) -> bool:
    """Whether this node's lookups of names there may lag a peer's change. FUSE includes JuiceFS. JuiceFS and bindfs,
    and anything unknown); False on a coherent local filesystem (ext4, xfs, btrfs, tmpfs, an overlay of local
    layers...), where a name's own lstat is the truth."""
    if type(path_or_dev) is int:  # a device already known: asked by every plain rmtree (issue 47)
        known = MOUNTS.get(path_or_dev)
        if known is not None:
            return known.stale
    return mount_of(path_or_dev).stale


def shared(path_or_dev: str | bytes | int | os.PathLike[Any]) -> bool:
    """Whether every node sees the same object there (a network or FUSE filesystem); unknown: node-local."""
    return mount_of(path_or_dev).shared


def cache_s(path_or_dev: str | bytes | int | os.PathLike[Any]) -> float | None:
    """How long the mount's options let a lookup stay stale, or None. It is 0 on a coherent mount; None where the
    options do not tell."""
    found = mount_of(path_or_dev)
    return 0.0 if not found.stale else found.cache_s


def misses_are_fresh(found: Mount) -> bool:
    """Whether a lookup that finds no name there is the truth. It is on a coherent filesystem, or a mount that caches no
    negative lookups. Only names a lookup still shows may be stale then."""
    return found.negative_s == 0.0


def wait_budget(path_or_dev: str | bytes | int | os.PathLike[Any], settle_s: float) -> float:
    """How long a rule waits for a name to show there. Nothing on a coherent filesystem. At most the mount's own lookup
    cache time where it is known; a stale entry has expired by then. ``settle_s`` at most."""
    return wait_budget_for(mount_of(path_or_dev), settle_s)


def wait_budget_for(found: Mount, settle_s: float) -> float:
    if not found.stale:
        return 0.0
    return settle_s if found.cache_s is None else min(found.cache_s, settle_s)


def forget() -> None:
    """Drop the cache, for a test or process whose mounts changed."""
    MOUNTS.clear()


# --- reading mountinfo -----------------------------------------------------------------------------------


def _device(path: str) -> tuple[int | None, str | None]:
    """``st_dev`` of ``path`` or of the nearest existing directory above it, and that directory."""
    current = path or os.curdir
    for _ in range(256):
        try:
            return os.stat(current).st_dev, current
        except (FileNotFoundError, NotADirectoryError):
            up = os.path.dirname(current.rstrip(os.sep)) or (os.sep if current.startswith(os.sep) else os.curdir)
            if up == current:
                return None, None
            current = up
        except (OSError, ValueError):
            return None, None
    return None, None


def _mount_of_dev(dev: int, where: str | None) -> Mount:
    by_dev = MOUNTS
    known = by_dev.get(dev)
    if known is not None:
        return known
    table = _read_table()
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    found = None
    for row in table:  # the last mount of a device wins: it is the one on top
        if row[0] == wanted:
            found = row
    if found is None and where is not None:
        found = _by_point(table, os.path.realpath(where))  # btrfs subvolumes: st_dev is not the superblock's
    if found is None:
        return _UNKNOWN  # not cached: the table may gain it (a mount made after this process started)
    result = conclude(found, table)
    by_dev[dev] = result
    return result


_Row = tuple[str, str, str, str, dict[str, str]]  # (major:minor, mount point, fstype, source, options)


def _read_table() -> list[_Row]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as lines:
            return parse_table(lines)
    except OSError:
        return []


def parse_table(lines: Iterable[str]) -> list[_Row]:
    """mountinfo lines (proc(5)) -> (major:minor, mount point, type, source, mount and superblock options)."""
    rows: list[_Row] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        after = fields[dash + 1 :]
        if len(after) < 2:
            continue
        options = _options(fields[5])
        options.update(_options(after[2] if len(after) > 2 else ""))
        rows.append((fields[2], _unescape(fields[4]), after[0], _unescape(after[1]), options))
    return rows


def _options(text: str) -> dict[str, str]:
    found = {}
    for item in text.split(","):
        if item:
            key, _, value = item.partition("=")
            found[key] = value
    return found


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash in octal (``\\040``)."""
    if "\\" not in text:
        return text
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _by_point(table: list[_Row], path: str) -> _Row | None:
    best = None
    for row in table:
        point = row[1].rstrip(os.sep) + os.sep
        if (path + os.sep).startswith(point) and (best is None or len(row[1]) >= len(best[1])):
            best = row
    return best


def conclude(row: _Row, table: list[_Row]) -> Mount:
    """What fsguard makes of one mount (``table``: every mount, for an overlay's layers)."""
    _, point, fstype, source, options = row
    base = fstype.split(".")[0]
    fuse = base in ("fuse", "fuseblk")
    if base == "overlay":
        # Coherent when its layers are: an overlay whose upper layer lies on a network filesystem is not.
        upper = options.get("upperdir") or options.get("lowerdir", "").split(":")[0]
        layer = _by_point(table, upper) if upper else None
        stale = layer is not None and layer[2].split(".")[0] not in COHERENT_TYPES
        found = Mount(point, fstype, source, options, stale=stale, shared=False)  # each node its own overlay
    else:
        stale = fuse or base not in COHERENT_TYPES
        found = Mount(point, fstype, source, options, stale=stale, shared=fuse or base in SHARED_TYPES)
    if found.stale:
        found.cache_s, found.negative_s = _cache_times(found, fuse)
    return found


def _cache_times(found: Mount, fuse: bool) -> tuple[float | None, float | None]:
    """The mount's bounds on a stale lookup and a cached "no such name". Its options, or JuiceFS's ``.config``, tell."""
    opts = found.options
    base = found.fstype.split(".")[0]
    if base in ("nfs", "nfs4"):
        lookups = opts.get("lookupcache")
        negative = 0.0 if lookups in ("none", "pos", "positive") else None
        if "noac" in opts or lookups == "none":
            return 0.0, negative
        for key in ("acdirmax", "actimeo"):
            if key in opts:
                return _seconds(opts[key]), negative
        return NFS_ACDIRMAX_S, negative
    if fuse:
        negative = _seconds(opts["negative_timeout"]) if "negative_timeout" in opts else None
        if "entry_timeout" in opts:  # a FUSE daemon that shows its own options (few do)
            return _seconds(opts["entry_timeout"]), negative
        if found.fstype == "fuse.juicefs" or found.source.startswith("JuiceFS:"):
            return _juicefs_cache_s(found.point)
        return None, negative
    return None, None


def _seconds(text: str) -> float | None:
    try:
        value = float(text.rstrip("s"))
    except ValueError:
        return None
    return value if value >= 0 else None


def _juicefs_cache_s(point: str) -> tuple[float | None, float | None]:
    """JuiceFS's cache times, read from its mount's ``.config`` file. The file is JSON; timeouts are in nanoseconds, or
    Go duration text. Returns the longest of its entry, directory-entry, negative-entry and attribute cache times. Also
    its negative-entry cache time (0 by default). None where it is hidden (``--hide-internal``)."""
    try:
        with open(os.path.join(point, ".config"), "rb") as f:
            import json

            config = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None, None
    vfs = config.get("Meta", config) if isinstance(config, dict) else {}
    found: dict[str, float] = {}
    for section in (config, vfs):
        if not isinstance(section, dict):
            continue
        for key in ("EntryTimeout", "DirEntryTimeout", "NegEntryTimeout", "AttrTimeout"):
            value = section.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[key] = max(found.get(key, 0.0), value / 1e9)
            elif isinstance(value, str):
                parsed = _go_duration(value)
                if parsed is not None:
                    found[key] = max(found.get(key, 0.0), parsed)
    return (max(found.values()) if found else None), found.get("NegEntryTimeout")


def _go_duration(text: str) -> float | None:
    import re

    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", text)
    if not parts:
        return None
    return sum(float(n) * units[u] for n, u in parts)

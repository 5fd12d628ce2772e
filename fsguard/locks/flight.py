"""Singleflight under serialization: N identical calls of the job's ranks cost one filesystem operation.

Identical means: same operation, same normalised paths, same other arguments (plain values only: ints,
strings, booleans, None), same filesystem object (the ``st_dev`` of each path's parent; for ``rmtree``, also the
device and inode of the tree itself) and, on a node-local filesystem, the same node. A call with an error
handler (``onerror``/``onexc``: the caller's own code decides what each failure means, and must see its own) or
a ``dir_fd`` is never shared. The first rank to claim the call's *flight* in the job's store performs it, under
the lock as before; the others block in the store's ``wait`` on the flight's hand-off key and then:

* the performer's call returned (succeeded, or a race absorbed by the guard's rule; for ``rmtree``, the whole
  guarded call: its yield window for a peer's rename, its walk, its verdict): return as it did, without
  touching the filesystem;
* it raised (a genuine error, or one deferred to the caller's own handler): perform their own call, under
  the lock, as without singleflight, so each rank gets its own error object with its own errno and filename.

A flight is open only while it is performed: a rank that comes after the outcome was published performs its
own call (a later identical call is a new call: the filesystem may have changed since). A flight is a lease,
like a lock (``fsguard.locks.store``): the performer's renewal thread renews it every quarter lease while the
call runs, which wakes its waiters. A performer that dies (killed mid-call) or freezes stops renewing: a
waiter that sees the same value for a whole lease closes the flight, records that it gave it up (``waited``,
``detail.flight``), and goes to the lock itself, where the lease take-over serves it; the other waiters find
the flight closed without an outcome and do the same. A waiter also gives up after ``FSGUARD_LOCK_TIMEOUT``
(a live performer still running): it then makes its own call, bounded by the lock's own timeout.

Records: one per collapsed call, not one per rank. The performer writes a ``shared`` record naming how many
ranks waited for its outcome (the count is sealed when it closes the flight: a rank that joined later knows it
was not counted and writes its own ``shared`` record, ranks=1) next to its own record (if any); the other
waiting ranks write none: their call was the performer's call. N ranks' identical call: one line, not N.

Local or shared filesystem: ``fsguard.mounts`` (the mount whose device number is the parent's ``st_dev``, read
from ``/proc/self/mountinfo`` once per device): NFS, Lustre, GPFS, BeeGFS, CephFS, FUSE, SMB... are shared;
anything else (ext4, xfs, tmpfs, overlay, or unknown) is node-local, so its flights collapse within a node only.
"""

from __future__ import annotations

import os
from hashlib import sha1
from typing import Any

from .. import mounts, operations
from ..calls import Call

PLAIN = (int, str, bytes, bool, float, type(None))
_OPERATIONS = operations.OPERATIONS.values()  # views of fsguard.operations' table:
SHARED = frozenset(op.name for op in _OPERATIONS if op.shared)  # the operations whose calls can be shared
REUSABLE = frozenset(("makedirs",))  # outcomes that stay true until something is removed or renamed
MOVES = frozenset(name for op in _OPERATIONS if op.takes_away for name in op.names)  # what ends such an outcome
ANNOUNCED = frozenset(op.name for op in _OPERATIONS if op.effect == operations.MOVES)  # said before they start
KNOWN = 4096  # directories whose st_dev a process keeps
REUSED = b"=ok"  # what a backend's ``flight_claim`` answers when a finished identical call's outcome applies


def claim_error(call: Call) -> type[OSError] | None:
    """The error this call would get alone where a peer's identical call went first. For a call that claims something:
    only one of N identical calls succeeds without fsguard. That is ``makedirs`` without ``exist_ok``,
    ``rename``/``replace``, ``rmtree`` without ``ignore_errors``. None for one whose outcome is the same whoever goes
    first (``makedirs(exist_ok=True)``, ``rmtree(ignore_errors=True)``)."""
    if call.op == "makedirs":
        return None if call.options.exist_ok else FileExistsError
    if call.op == "rmtree" and call.on_error.ignore_errors:
        return None
    return FileNotFoundError


def flight_key(call: Call, paths: list[str], host: str, known: dict[str, int] | None = None) -> str | None:
    """The key naming this call among the job's identical calls, or None. None for a call that is never shared. A
    caller's error handler decides what each rank's failure means, and must see it. A directory descriptor is this
    process's own. An argument that is not a plain value cannot be compared across processes. ``known``: the ``st_dev``
    of directories found before (a directory's filesystem does not change while it exists), filled in here."""
    if call.op not in SHARED or not call.bound:
        return None
    if call.on_error.onerror is not None or call.on_error.onexc is not None or call.fds:
        return None
    options = call.arguments()
    if not all(isinstance(value, PLAIN) for _, value in options):
        return None
    devices: list[Any] = []
    local = False
    for path in paths:
        dev = _device(path, known if known is not None else {})
        if dev is None:
            return None  # nothing to name the filesystem by: every rank makes its own call
        found = mounts.mount_of(dev)
        if found.shared and found.source:  # every node's client of one filesystem: the same on each node
            devices.append((found.fstype, found.source, found.point))
        else:
            devices.append(dev)
            local = True
    if call.op == "rmtree":  # the same tree: the object at the path, not only the filesystem it is on
        try:
            st = os.lstat(paths[0])
        except (OSError, ValueError):
            return None  # nothing there: each rank's own call says what that means
        devices.append((st.st_dev, st.st_ino) if local else st.st_ino)  # a shared one's inodes: every node's
    text = repr((call.op, paths, options, devices, host if local else ""))
    return sha1(text.encode("utf-8", "surrogateescape")).hexdigest()


def _device(path: str, known: dict[str, int]) -> int | None:
    """``st_dev`` of the nearest existing directory above ``path``, or None. For ``makedirs`` of a deep path, its
    parents may not exist yet. ``known``: the answers found before, by directory (at most ``KNOWN`` kept)."""
    parent = os.path.dirname(path)
    for _ in range(64):
        dev = known.get(parent)
        if dev is not None:
            return dev
        try:
            dev = os.stat(parent or ".").st_dev
        except FileNotFoundError:
            up = os.path.dirname(parent)
            if up == parent:
                return None
            parent = up
            continue
        except (OSError, ValueError):
            return None
        if len(known) >= KNOWN:
            known.clear()
        if parent and os.path.isabs(parent):
            known[parent] = dev
        return dev
    return None

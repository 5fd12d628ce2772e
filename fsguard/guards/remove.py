"""``os.remove``, ``os.unlink``, ``os.rmdir``: absorb a peer's removal moments ago.

``Path.unlink`` and ``Path.rmdir`` too: every rank cleans up one build or staging directory by hand, as torch
inductor's C++ builder does with ``*_CxxBuild``. A missing name leaves no trace of whether it ever existed, so the
evidence is about the job and the directory.

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   a launcher says this process has peers; the parent exists and changed during this job *and* within
           ``RECENT_S`` (removing a name changes its directory); this process did not remove or move the name
absorbed   the parent is gone too (a peer removed it while this process emptied it by hand): the directory
           above changed during this job and moments ago
re-raised  no peers (``FSGUARD=force`` alone, outside a job: every missing name is genuine)
re-raised  a name this process removed itself; a parent unchanged lately or during the job
re-raised  a missing chain longer than ``UP_TO`` directories
re-raised  ``IsADirectoryError``, ``NotADirectoryError``, ``ENOTEMPTY``, ``EACCES``/``EPERM``, every other error
passed     ``dir_fd`` calls; the standard library's own (``shutil``, ``tempfile``, ``os.removedirs``);
           ``Path.unlink(missing_ok=True)``, whose callers settle a missing name themselves
========== ===========================================================================================================

A documented deviation, as ``rmtree`` of a missing top: inside a job, a name that never existed (or that this
process removed through a call fsguard does not see) is absorbed in a directory that changed moments ago.
"""

from __future__ import annotations

import errno
import os

from ..calls import Call, fspath
from ..evidence import kind_of
from . import ABSORBED, NOT_FIXABLE, Rules, Scan, Verdict, World, absorb, own_event, reraise

# Ranks of one job reach the same cleanup within seconds of each other: a directory that has not changed
# for longer than this says nobody removed anything from it lately (settle windows longer than this count).
RECENT_S = 30.0
# A name under a missing directory: the directory a peer removed is at most this many levels above it.
UP_TO = 2


def decide(call: Call, error: OSError, world: World, rules: Rules) -> Verdict:
    if error.errno != errno.ENOENT or call.fds.dir_fd is not None:
        return reraise()
    path = call.path
    if path is None or not fspath(call.given[0]):  # "" names no entry at all
        return reraise()
    own = own_event(world, path)
    if own in ("removed", "moved-away"):
        return reraise("this process removed or moved it away itself")
    if not rules.peers:
        return reraise("no peers: not in a distributed job")
    parent = os.path.dirname(path)
    st = world.lstat(parent)
    gone_with = None
    if st is None:  # a peer removed the whole directory (a hand-written tree removal: walk, remove, rmdir)
        gone_with, parent, st = _nearest_existing(parent, world)
    if st is None or kind_of(st) != "dir":
        return reraise("parent directory is missing")
    changed = max(st.st_mtime, st.st_ctime)
    age = world.now() - changed
    where = "its directory" if gone_with is None else f"its directory {gone_with} is gone too, and {parent}"
    if not rules.is_fresh(changed):
        return reraise(f"{where} unchanged during this job ({age:.1f} s)")
    if age > max(RECENT_S, rules.settle_s):
        return reraise(f"{where} last changed {age:.1f} s ago: nobody removed it moments ago")
    if gone_with is None:
        return absorb(f"gone; its directory changed {age:.2f} s ago, during this job: a peer removed it")
    return absorb(f"gone; {where} changed {age:.2f} s ago, during this job: a peer removed the tree")


def _nearest_existing(missing: str, world: World) -> tuple[str, str, os.stat_result | None]:
    """The topmost missing directory above ``missing``, its parent and the parent's ``lstat``. (the topmost missing
    directory, the directory above it, its ``lstat``) for a missing ``missing``. The ``lstat`` is None when nothing
    exists within ``UP_TO`` levels; it never walks a whole chain of missing names."""
    for _ in range(UP_TO):
        above = os.path.dirname(missing)
        if above == missing:
            break
        st = world.lstat(above)
        if st is not None:
            return missing, above, st
        missing = above
    return missing, os.path.dirname(missing), None


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``).
SCAN = (
    Scan(
        "remove rmdir",
        "ENOENT",
        ABSORBED,
        "a peer removed it first; inside a job the default mode absorbs it when its directory changed moments ago "
        "(a name that never existed there cannot be told apart).",
    ),
    Scan(
        "rmdir",
        "ENOTEMPTY",
        NOT_FIXABLE,
        "a peer wrote into the directory while this rank removed it by hand (ranks sharing one build or scratch "
        "directory): give each rank its own directory, or let one rank remove it after a barrier.",
    ),
)

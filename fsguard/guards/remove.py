"""``os.remove`` and ``os.unlink`` (and ``Path.unlink``): absorb ``FileNotFoundError`` when a peer of this job
removed the name moments ago.

A missing name leaves no trace of whether it ever existed, so the evidence is about the job and the
directory: absorbed only where a distributed launcher says this process has peers (``FSGUARD=force`` alone,
outside a job, never absorbs here: without peers every missing name is genuine), when the parent directory
exists and changed during this job *and* within the last ``RECENT_S`` seconds (removing a name changes its
directory), and this process's own guarded calls did not remove or move the name away.
What is honestly absorbed with it, inside a job (a documented deviation, as ``rmtree`` of a missing top): a
name that never existed, or that this process removed through a call fsguard does not see (``os.rmdir``,
descriptors), in a directory that changed moments ago. Raised unchanged: no peers, a name this process
removed itself, a parent that is missing or has not changed lately (or not during the job),
``IsADirectoryError``, ``EACCES``/``EPERM``, every other error; ``dir_fd`` calls are passed through (never
resolved against the wrong directory), and so are the standard library's own calls (``shutil``,
``tempfile``) and ``Path.unlink(missing_ok=True)``, whose callers settle a missing name themselves.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from .. import evidence
from . import Rules, Verdict, absorb, reraise

# Ranks of one job reach the same cleanup within seconds of each other: a directory that has not changed
# for longer than this says nobody removed anything from it lately (settle windows longer than this count).
RECENT_S = 30.0


def decide(error: OSError, args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules) -> Verdict:
    if error.errno != errno.ENOENT or kwargs.get("dir_fd") is not None:
        return reraise()
    name = args[0] if args else kwargs.get("path")
    if name is None or not evidence.fspath(name):  # "" names no entry at all
        return reraise()
    path = evidence.norm(name)
    own = evidence.own_last_event(path)
    if own in ("removed", "moved-away"):
        return reraise("this process removed or moved it away itself")
    if not rules.peers:
        return reraise("no peers: not in a distributed job")
    parent = os.path.dirname(path)
    st = evidence.lstat_or_none(parent)
    if st is None or evidence.kind_of(st) != "dir":
        return reraise("parent directory is missing")
    changed = max(st.st_mtime, st.st_ctime)
    age = time.time() - changed
    if not rules.is_fresh(changed):
        return reraise(f"parent directory unchanged during this job ({age:.1f} s)")
    if age > max(RECENT_S, rules.settle_s):
        return reraise(f"parent directory last changed {age:.1f} s ago: nobody removed it moments ago")
    return absorb(f"gone; its directory changed {age:.2f} s ago, during this job: a peer removed it")

"""``os.rename`` and ``os.replace``: absorb ``FileNotFoundError`` when a peer already did the same move.

Absorbed: the source is gone and the destination is present and changed during this job, as fresh
listings of both parents show (waiting up to ``FSGUARD_SETTLE_S`` for a destination that a shared
filesystem has not shown yet), and this process did not move the source away itself.
Recorded as a conflict, then re-raised: a directory renamed onto a non-empty directory.
Re-raised unchanged: everything else, including calls with ``src_dir_fd``/``dst_dir_fd`` (passed through,
never resolved against the wrong directory).
"""

from __future__ import annotations

import errno
import time
from typing import Any

from .. import evidence
from . import Rules, Verdict, absorb, conflict, reraise


def _paths(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str] | None:
    if kwargs.get("src_dir_fd") is not None or kwargs.get("dst_dir_fd") is not None:
        return None
    try:
        src = args[0] if args else kwargs["src"]
        dst = args[1] if len(args) > 1 else kwargs["dst"]
        return evidence.norm(src), evidence.norm(dst)
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def decide(error: OSError, args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules) -> Verdict:
    paths = _paths(args, kwargs)
    if paths is None:
        return reraise("directory file descriptors given: passed through")
    src, dst = paths
    if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
        return conflict(
            "destination is a non-empty directory: two different results for one path (left in place, error raised)",
            src=src,
            dst=dst,
        )
    if error.errno != errno.ENOENT:
        return reraise()
    if evidence.own_last_event(src) == "moved-away":
        return reraise("this process moved the source away itself")

    source = evidence.look(src)
    if source.present:
        return reraise("source still present: the missing path is elsewhere")

    def destination_present() -> evidence.Look | None:
        seen = evidence.look(dst)
        if not seen.parent_exists:
            return seen  # decided: nothing to wait for
        return seen if seen.present else None

    seen, waited = evidence.settle(destination_present, rules.settle_s)
    if seen is None or not seen.present:
        where = "destination's parent is missing" if seen is not None else "destination absent"
        return reraise(f"source gone, {where} after {waited:.2f} s", waited)

    st = evidence.lstat_or_none(dst)
    later = f", appeared {waited:.2f} s later" if waited > 0.001 else ""
    if st is None:
        return absorb(
            f"source gone; destination in a fresh listing but not yet in this node's lookup "
            f"cache{later}: a peer renamed it moments ago",
            waited,
        )
    age = time.time() - st.st_ctime
    if not rules.is_fresh(st.st_ctime):
        return reraise(f"source gone but destination is older than the job ({age:.1f} s)", waited)
    return absorb(
        f"source gone, destination present and changed {age:.2f} s ago{later}: a peer did the same move", waited
    )

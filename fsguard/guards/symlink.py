"""``os.symlink`` (and ``Path.symlink_to``): absorb ``FileExistsError`` when the name is already a symlink
with the very same target text, made during this job by a peer (an identical result).

Re-raised: a symlink to anything else (the same target spelt differently included), a file or directory
in the way, an identical symlink older than the job or made by this process itself, ``dir_fd`` calls
(passed through), every other error.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from .. import evidence
from . import ABSORBED, Rules, Scan, Verdict, absorb, reraise


def _text(value: Any) -> str:
    raw = evidence.fspath(value)
    return os.fsdecode(raw) if isinstance(raw, bytes) else raw


def _entry(path: str) -> tuple[os.stat_result, str | None] | None:
    """The entry at ``path`` and its target (None: not a symlink), or None while there is none."""
    st = evidence.lstat_or_none(path)
    if st is None:
        return None
    if evidence.kind_of(st) != "symlink":
        return st, None
    try:
        return st, os.readlink(path)
    except OSError:  # removed again between the two looks
        return None


def decide(error: OSError, args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST or kwargs.get("dir_fd") is not None:
        return reraise()
    src = args[0] if args else kwargs.get("src")
    dst = args[1] if len(args) > 1 else kwargs.get("dst")
    if src is None or dst is None:
        return reraise()
    path = evidence.norm(dst)
    own = evidence.own_last(path)
    # Gone since the call failed: a peer refreshing the same name removed it; wait (bounded) for it again.
    seen, waited = evidence.settle(lambda: _entry(path), rules.settle_s)
    if seen is None:
        return reraise("gone since the call failed, and not back", waited)
    st, target = seen
    if target is None:
        return reraise("not a symlink", waited)
    if target != _text(src):
        return reraise("a symlink to another target")
    age = time.time() - st.st_ctime
    if own is not None and own.kind == "made" and (own.time is None or st.st_ctime <= own.time):
        return reraise("this process made it itself (it has not changed since)")
    made, _ = evidence.created(path, st)
    if not rules.is_fresh(made):
        return reraise(f"identical symlink older than the job ({time.time() - made:.1f} s; {rules.since()})")
    return absorb(f"identical symlink made by a peer {age:.2f} s ago, during this job", waited)


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``).
SCAN = (
    Scan(
        "symlink",
        "EEXIST",
        ABSORBED,
        "a peer made the link first; the default mode absorbs it when the existing link has the very same target "
        "(every rank refreshing one link), and raises for a link to anything else.",
    ),
)

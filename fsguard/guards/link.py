"""``os.link`` (and ``Path.hardlink_to``): absorb ``FileExistsError`` when the name is already a link to the
source's very inode, made during this job by a peer (an identical result).

The inode's ctime changes when a link to it is made, so "during this job" is read from it. Re-raised: another
inode (another file, a directory, a symlink) in the way, the same inode linked before the job or by this
process itself, a source that cannot be read, ``src_dir_fd``/``dst_dir_fd`` calls (passed through), every
other error. ``follow_symlinks=False`` compares with the symlink itself, as the call would have linked it.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from .. import evidence
from . import ABSORBED, Rules, Scan, Verdict, absorb, reraise


def decide(error: OSError, args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST:
        return reraise()
    if kwargs.get("src_dir_fd") is not None or kwargs.get("dst_dir_fd") is not None:
        return reraise("directory file descriptors given: passed through")
    src = args[0] if args else kwargs.get("src")
    dst = args[1] if len(args) > 1 else kwargs.get("dst")
    if src is None or dst is None:
        return reraise()
    path = evidence.norm(dst)
    own = evidence.own_last(path)
    try:
        source = os.stat(src, follow_symlinks=bool(kwargs.get("follow_symlinks", True)))
    except OSError:
        return reraise("the source cannot be read")
    # Gone since the call failed: a peer refreshing the same name removed it; wait (bounded) for it again.
    st, waited = evidence.settle(lambda: evidence.lstat_or_none(path), rules.settle_s)
    if st is None or (st.st_dev, st.st_ino) != (source.st_dev, source.st_ino):
        return reraise("another inode stands there")
    age = time.time() - st.st_ctime
    if own is not None and own.kind == "made" and (own.time is None or st.st_ctime <= own.time):
        return reraise("this process made it itself (it has not changed since)")
    if not rules.is_fresh(st.st_ctime):
        return reraise(f"the same inode, linked before the job ({age:.1f} s)")
    return absorb(f"the source's own inode, linked there by a peer {age:.2f} s ago, during this job", waited)


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``).
SCAN = (
    Scan(
        "link",
        "EEXIST",
        ABSORBED,
        "a peer made the hard link first; the default mode absorbs it when the existing name is the source's own "
        "inode, and raises for any other file.",
    ),
)

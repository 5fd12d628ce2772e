"""``os.link`` and ``Path.hardlink_to``: absorb a peer's link to the very same inode.

The rule it shares with ``os.symlink``: :func:`fsguard.guards.identical.made_by_peer`. The inode's ctime changes when
a link to it is made, so "during this job" is read from it. ``follow_symlinks=False`` compares with the symlink itself,
as the call would have linked it.

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   a link to the source's inode, made during this job by a peer
re-raised  another inode in the way (another file, a directory, a symlink); a source that cannot be read
re-raised  the same inode linked before the job, or by this process itself
re-raised  a destination naming the source's own entry (``link(a, a)``, however spelt): nobody made that link
re-raised  a destination ending in a separator: no link is ever made at such a name
passed     ``src_dir_fd``/``dst_dir_fd`` calls
re-raised  every other error
========== ===========================================================================================================
"""

from __future__ import annotations

import errno
import os

from ..calls import Call, ends_in_separator, norm
from ..evidence import kind_of
from . import ABSORBED, Rules, Scan, Verdict, World, reraise
from ._identical import made_by_peer


def decide(call: Call, error: OSError, world: World, rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST:
        return reraise()
    if call.fds:
        return reraise("directory file descriptors given: passed through")
    if call.dst is None or call.given[0] is None:
        return reraise()
    if ends_in_separator(call.given[1]):
        return reraise("a destination given with a trailing separator: no link can ever be made at it")
    path: str = call.dst
    source = world.stat(call.given[0], bool(call.options.follow_symlinks))
    if source is None:
        return reraise("the source cannot be read")
    inode = (source.st_dev, source.st_ino)
    if call.src is not None and _one_entry(call.src, call.dst, bool(call.options.follow_symlinks), world):
        return reraise("the destination is the source's own name: no link was made there")

    def entry() -> tuple[os.stat_result, str | None] | None:
        st = world.lstat(path)
        if st is None:
            return None
        return st, None if (st.st_dev, st.st_ino) == inode else "another inode stands there"

    path = call.dst
    return made_by_peer(
        path,
        world,
        rules,
        entry,
        lambda st: st.st_ctime,
        "the source's own inode, linked there",
        "a link to the same inode",
    )


# As the kernel's ELOOP bound: a longer chain of symlinks fails the call itself.
_SYMLINKS_FOLLOWED = 40


def _one_entry(src: str, dst: str, follow: bool, world: World) -> bool:
    """Whether ``dst`` names the very directory entry the call links from. That is ``src`` itself, or with
    ``follow_symlinks`` the entry its symlinks lead to: the same name in the same directory, however spelt."""
    for _ in range(_SYMLINKS_FOLLOWED):
        st = world.lstat(src) if follow else None
        target = world.readlink(src) if st is not None and kind_of(st) == "symlink" else None
        if target is None:
            break
        try:
            src = norm(os.path.join(os.path.dirname(src), target))
        except (OSError, ValueError):
            return False
    if os.path.basename(src) != os.path.basename(dst):
        return False
    here, there = world.stat(os.path.dirname(src)), world.stat(os.path.dirname(dst))
    return here is not None and there is not None and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


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

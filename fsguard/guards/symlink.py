"""``os.symlink`` and ``Path.symlink_to``: absorb a peer's symlink with the very same target.

The rule it shares with ``os.link``: :func:`fsguard.guards.identical.made_by_peer`.

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   a symlink with the same target text, made during this job by a peer
re-raised  a symlink to anything else, the same target spelt differently included; a file or directory
re-raised  a destination with a trailing separator: no symlink is ever made at such a name
re-raised  an identical symlink older than the job (birth time where kept, else ctime), or made by this process
passed     ``dir_fd`` calls
re-raised  every other error
========== ===========================================================================================================
"""

from __future__ import annotations

import errno
import os

from ..calls import Call, ends_in_separator, fspath
from ..evidence import kind_of
from . import ABSORBED, Rules, Scan, Verdict, World, reraise
from ._identical import made_by_peer


def decide(call: Call, error: OSError, world: World, rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST or call.fds.dir_fd is not None or call.dst is None or call.given[0] is None:
        return reraise()
    if ends_in_separator(call.given[1]):
        return reraise("a destination given with a trailing separator: no symlink can ever be made at it")
    path = call.dst
    raw = fspath(call.given[0])
    wanted = os.fsdecode(raw) if isinstance(raw, bytes) else raw

    def entry() -> tuple[os.stat_result, str | None] | None:
        st = world.lstat(path)
        if st is None:
            return None
        if kind_of(st) != "symlink":
            return st, "not a symlink"
        target = world.readlink(path)
        if target is None:  # removed again between the two looks
            return None
        return st, None if target == wanted else "a symlink to another target"

    def made(st: os.stat_result) -> float:
        return world.created(path, st)[0]

    return made_by_peer(path, world, rules, entry, made, "identical symlink made", "identical symlink")


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

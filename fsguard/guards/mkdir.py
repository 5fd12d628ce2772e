"""``os.mkdir`` and ``Path.mkdir``: absorb ``FileExistsError`` when a peer made the directory.

The same rule as ``os.makedirs`` without ``exist_ok``: :func:`fsguard.guards.makedirs.made_by_peer`.

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   a directory, changed during this job, neither it nor anything below it made by this process
absorbed   a fresh listing of the parent shows a directory this node's lookup cache still misses
re-raised  a file or symlink in the way, a directory older than the job, one this process made
passed     ``dir_fd`` calls; ``os.makedirs``'s and ``tempfile``'s own ``mkdir`` calls (``makedirs`` decides once
           for the whole call; a ``mkdtemp`` name collision is never a peer's result to share)
re-raised  every other error
========== ===========================================================================================================
"""

from __future__ import annotations

import errno

from ..calls import Call
from . import ABSORBED, NOT_FIXABLE, Rules, Scan, Verdict, World, reraise
from .makedirs import made_by_peer


def decide(call: Call, error: OSError, world: World, rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST or call.fds.dir_fd is not None or call.path is None:
        return reraise()
    return made_by_peer(call.path, world, rules)


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``).
SCAN = (
    Scan("mkdir", "EEXIST", ABSORBED, "a peer created the directory first; the default mode treats it as done."),
    Scan(
        "mkdir",
        "ENOENT",
        NOT_FIXABLE,
        "the parent directory does not exist and os.mkdir does not create it: a genuine error, or this rank ran "
        "before the one that creates the parent.",
    ),
)

"""The rule ``os.symlink`` and ``os.link`` share: absorb a peer's identical result.

``fsguard.guards.symlink`` asks for a symlink with the same target text; ``fsguard.guards.link`` for the source's own
inode.

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   the very result the call asked for, made during this job by a peer
re-raised  something else at the name, as the operation's own test says
re-raised  an identical entry made before the job, or by this process (its ctime not after its own call)
re-raised  nothing there any more once a bounded wait is over (a peer refreshing the name removed it again)
========== ===========================================================================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import Rules, Verdict, World, absorb, reraise

# The entry at the name, and why it is not the result asked for (None: it is); None while nothing is there.
Entry = Callable[[], "tuple[os.stat_result, str | None] | None"]


def made_by_peer(
    path: str,
    world: World,
    rules: Rules,
    entry: Entry,
    made: Callable[[os.stat_result], float],
    same: str,
    what: str,
) -> Verdict:
    """Absorb ``FileExistsError`` when a peer made the identical entry during this job. ``entry`` is the operation's own
    test of the name. ``made`` says when an identical entry was made (its birth time or ctime). ``same`` is what
    absorbing says it is (``identical symlink made``); ``what`` is its name (``identical symlink``)."""
    own = world.own_last(path)
    # Gone since the call failed: a peer refreshing the same name removed it; wait (bounded) for it again.
    seen, waited = world.wait_for(entry, rules.settle_s)
    if seen is None:
        return reraise("gone since the call failed, and not back", waited)
    st, different = seen
    if different:
        return reraise(different, waited)
    if own is not None and own.kind == "made" and (own.time is None or st.st_ctime <= own.time):
        return reraise("this process made it itself (it has not changed since)", waited)
    now = world.now()
    when = made(st)
    if not rules.is_fresh(when):
        return reraise(f"{what} older than the job ({now - when:.1f} s; {rules.since(now)})", waited)
    return absorb(f"{same} by a peer {now - st.st_ctime:.2f} s ago, during this job", waited)

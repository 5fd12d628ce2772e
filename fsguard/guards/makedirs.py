"""``os.makedirs``: absorb ``FileExistsError`` when a peer of this job created the directory.

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   ``exist_ok=False``: the rule ``os.mkdir`` shares (:func:`made_by_peer`): a directory, changed during
           this job, neither it nor anything below it made by this process's own guarded calls
absorbed   ``exist_ok=True``: the fresh parent listing shows a directory the (cached) lookup said was missing
re-raised  a file or symlink in the way, a directory older than the job
re-raised  a directory this node's journal says another job or attempt made (``fsguard.evidence.job_tag_of``;
           entries older than the directory's birth named an earlier one at that path: not read)
re-raised  one no guarded call of a single-node job made (its journal is complete), one this process made
re-raised  every other error
========== ===========================================================================================================

Where the journal cannot tell (a peer on another node), time alone decides.
"""

from __future__ import annotations

import errno

from ..calls import Call
from ..evidence import kind_of
from . import (
    ABSORBED,
    NOT_FIXABLE,
    Rules,
    Scan,
    Verdict,
    World,
    absorb,
    by_tag,
    own_event,
    reraise,
    since_birth,
)


def decide(call: Call, error: OSError, world: World, rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST:
        return reraise()
    path = call.path
    if path is None:
        return reraise()
    if not call.options.exist_ok:
        return made_by_peer(path, world, rules)

    seen, waited = world.wait_for(lambda: directory_in_listing(path, world), rules.settle_s, path)
    if not seen:
        return reraise("not a directory in its parent's listing", waited)
    return absorb("directory present in a fresh listing of its parent (lookup cache was stale)", waited)


def made_by_peer(path: str, world: World, rules: Rules) -> Verdict:
    """Whether a peer made the directory at ``path`` during this job. A mkdir found it existing."""
    if own_event(world, path, within=True) in ("made", "made-shared", "found"):
        return reraise("this process made it (or found it there) itself")
    # mkdir's EEXIST is the server's word that the name exists; a shared filesystem's listing may show a peer's
    # new directory a moment later (seen on GlusterFS): wait for it there, bounded by the mount's budget.
    listed, waited = world.wait_for(lambda: directory_in_listing(path, world), rules.settle_s, path)
    if not listed:
        return reraise("not a directory in its parent's listing", waited)
    st = world.lstat(path)
    if st is None:
        # The listing has it but a lookup does not: this node cached "missing" moments ago, so a peer
        # created it within the cache period.
        return absorb(
            "directory present in a fresh listing but missing from this node's lookup cache: "
            "a peer created it moments ago",
            waited,
        )
    if kind_of(st) != "dir":
        return reraise("", waited)
    # Made before this job (its birth time, where the filesystem keeps one): never a peer's duplicate.
    made, what = world.created(path, st)
    now = world.now()
    age = now - made
    if not rules.is_fresh(made):
        return reraise(f"directory {what} before this job started ({age:.1f} s ago; {rules.since(now)})", waited)
    # Who made it, by this node's journal of what each job made (never the directory itself).
    # A journal entry from before this directory's birth named an earlier one at that path, removed since: a peer on
    # another node made this one. A birth after our now is a server clock ahead of ours (``since_birth``).
    since = since_birth(made, what, now, rules)
    tag, whose, waited = _whose(path, world, rules, age, waited, since)
    if whose == "another job":
        return reraise(f"directory made by another job or attempt (its job tag {tag!r}; this one's {rules.job!r})")
    if whose == "untagged":
        return reraise(f"no guarded mkdir of this single-node job made it (not in its journal; {rules.job!r})", waited)
    later = f", listed {waited:.2f} s later" if waited > 0.001 else ""
    told = {
        "this attempt": "its job tag is this attempt's",
        "this job": "its job tag is this job's with another node's restart count: the attempt told by time",
    }.get(whose, "no job tag here: told by time only")
    return absorb(
        f"directory {what} by a peer {age:.2f} s ago, during this job{later} ({told})", waited, identity=by_tag(whose)
    )


def _whose(
    path: str, world: World, rules: Rules, age: float, waited: float, since: float | None = None
) -> tuple[str | None, str, float]:
    """(job tag, ``Rules.whose`` of it, seconds waited in all). In a single-node job, a peer's mkdir may have just
    succeeded and not yet noted it (one ``write`` later). So where no job of this node made it yet, wait for that note.
    The wait is bounded by ``settle_s`` from the directory's making; an older directory has no note coming."""
    tag = world.job_tag(path, since)
    if tag == "" and rules.job is not None:
        noted, extra = world.wait_for(
            lambda: world.job_tag(path, since) or None, max(0.0, min(rules.settle_s - age, 1.0))
        )
        tag, waited = (noted if noted is not None else ""), waited + extra
    return tag, rules.whose(tag), waited


def directory_in_listing(path: str, world: World) -> bool | None:
    """Whether ``name`` is listed as a directory. True: a directory; False: something else stands there (decided). None:
    not listed yet; a shared filesystem may not show a peer's new directory at once."""
    seen = world.look(path)
    if not seen.present:
        return None
    kind = seen.kind
    if kind is None:  # the listing does not say: ask a lookup
        st = world.lstat(path)
        kind = kind_of(st) if st is not None else None
    return None if kind is None else kind == "dir"


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``).
SCAN = (
    Scan("makedirs", "EEXIST", ABSORBED, "a peer created the directory first; the default mode treats it as done."),
    Scan(
        "makedirs",
        "ENOENT",
        NOT_FIXABLE,
        "makedirs creates missing parents, so a parent was removed while it ran: an ordering bug between this "
        "creation and another rank's removal.",
    ),
)

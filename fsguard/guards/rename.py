"""``os.rename`` and ``os.replace``: absorb ``FileNotFoundError`` when a peer already did the same move.

The cases, in the order the rule asks (``docs/decides/rename.md`` has them with their evidence):

========== ===========================================================================================================
decision   case
========== ===========================================================================================================
absorbed   source missing; destination present and changed during this job, as the mount's fresh probe shows
           (``evidence.look``: the name's own lstat where coherent, no wait; elsewhere the parents' listings,
           waiting up to ``FSGUARD_SETTLE_S`` or the mount's shorter cache time)
absorbed   the same, with the source back already: a peer wrote the same temp name again (compile caches)
absorbed   destination only in the listing (a negative lookup cache), source back or moved by this process
           before: the rest of the budget waits for the lookup, then its ctime decides
absorbed   a stale entry of a moved source made the call fail as onto a non-empty directory (GlusterFS), and
           the source left its parent's fresh listing: decided as a missing source
re-raised  destination older than the job, or than this attempt of a restarted job
re-raised  a directory whose job tag is another job's or attempt's
re-raised  this process moved the source away itself, or its own move (or link) made the destination, unchanged
           since (``OWN_SLACK_S``): a per-rank ``state.{step}.tmp`` whose writer wrote nothing
re-raised  a trailing separator (a directory) and a destination that is not one
conflict   a directory renamed onto a non-empty directory: recorded, then re-raised
re-raised  everything else; ``src_dir_fd``/``dst_dir_fd`` calls pass through
========== ===========================================================================================================

A later move onto a destination this process made, as in a rotation reusing one temp name, is a peer's.
"""

from __future__ import annotations

import errno
import os
import stat

from ..calls import Call, ends_in_separator
from ..evidence import Look
from . import ABSORBED, SERIALIZE, Rules, Scan, Verdict, World, absorb, conflict, journal_since, reraise

# A destination whose ctime is within this many seconds of this process's own move of the same source is
# taken as that move's result (covers coarse file timestamps and small clock offsets to a file server).
OWN_SLACK_S = 1.0


def decide(call: Call, error: OSError, world: World, rules: Rules) -> Verdict:
    src, dst = call.src, call.dst
    if call.fds or src is None or dst is None:
        return reraise("directory file descriptors given: passed through")
    stale_source = _missing_source(error, src, dst, world)
    if isinstance(stale_source, Verdict):
        return stale_source
    own = world.own_last(src)
    if own is not None and own.kind == "moved-away" and own.time is None:
        return reraise("this process moved the source away itself")
    own_move = own.time if own is not None and own.kind == "moved-away" else None
    # This process's own newest change of the destination (a move, symlink or link onto it; an absorbed move
    # is remembered as one): while nobody changed it since, the missing source was this process's own.
    put = world.own_last(dst)
    own_put = put.time if put is not None and put.kind == "made" else None

    # Present again means re-published by a peer after the call found it missing (the destination's parent
    # is checked below: a missing one is the other way this call fails with ENOENT).
    republished = ", source re-published since by a peer" if world.look(src).present else ""
    seen, waited = world.wait_for(lambda: _destination_present(dst, world), rules.settle_s, dst)
    if seen is None or not seen.present:
        where = "destination's parent is missing" if seen is not None else "destination absent"
        return reraise(f"source gone, {where} after {waited:.2f} s", waited)

    later = f", appeared {waited:.2f} s later" if waited > 0.001 else ""
    # Whose move it was needs the destination's ctime only where this process moved something onto it (the
    # tests below): its own move of the source elsewhere (a staging dir committed to ``checkpoint-1``, made
    # again, then committed by a peer to ``checkpoint-2``) says nothing about who made this destination.
    needs_ctime = own_put is not None or bool(republished)
    # A path given with a trailing separator: only a directory can be a peer's identical move's result.
    directory = any(ends_in_separator(p) for p in call.given)
    st, waited = _destination_stat(dst, world, rules, waited, needs_ctime or directory)
    if st is None:
        if needs_ctime or directory:
            return reraise("destination not yet visible to this node's lookups: cannot tell whose it is", waited)
        return _absorbed(
            f"source gone; destination in a fresh listing but not yet in this node's lookup "
            f"cache{later}: a peer renamed it moments ago",
            waited,
            _shared_file(src, seen, None, world),
        )
    if directory and not stat.S_ISDIR(st.st_mode):
        return reraise("the call names directories (a trailing separator); no directory stands there", waited)
    refused = _not_a_peers(dst, st, world, rules, own_move, own_put, waited)
    if refused is not None:
        return refused
    now = world.now()
    own_times = [t for t in (own_move, own_put) if t is not None]
    again = f", {now - max(own_times):.1f} s after this process's own move" if own_times else ""
    return _absorbed(
        f"source gone{stale_source}{republished}, destination present and changed {now - st.st_ctime:.2f} s ago"
        f"{later}{again}: a peer did the same move",
        waited,
        _shared_file(src, seen, st, world),
    )


SHARED_FILE = (
    "; but the source was a file several ranks renamed, written in place under the name they shared (no move or "
    "link of this process put it there whole): their writes into it may be mixed in the destination"
)


def _absorbed(evidence: str, waited: float, shared_file: bool) -> Verdict:
    """The absorbing verdict: a ``hazard`` where ranks renamed one file they shared (``_shared_file``)."""
    if shared_file:
        return absorb(evidence + SHARED_FILE, waited, decision="hazard", shared_source="file")
    return absorb(evidence, waited)


def _shared_file(src: str, seen: Look, st: os.stat_result | None, world: World) -> bool:
    """Whether a peer renamed away a *file* this process had been writing. The destination the peer's move made is a
    regular file. And no guarded call of this process put the source there whole: a move or link onto the name. That is
    a private temp published atomically, as a compiler cache does. A file written in place under a shared name holds
    whatever each rank wrote, in any order. (``blobs/<etag>.incomplete`` appended by two nodes, ``.metadata.tmp`` of two
    coordinators.) A directory (``tmp-checkpoint-N``, each rank's own files in it) does not mix writes."""
    listed = seen.kind == "file" if seen.kind is not None else None  # what the fresh look said, where it says
    if not (listed if listed is not None else st is not None and stat.S_ISREG(st.st_mode)):
        return False
    own = world.own_last(src)
    return own is None or own.kind != "made"


def _missing_source(error: OSError, src: str, dst: str, world: World) -> Verdict | str:
    """What a rename's error says: a decided verdict, or a missing source. A decided verdict is a conflict, not a
    missing source. The words say when this node's stale entry of the source made the call fail as a non-empty
    destination."""
    if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
        if not _source_moved_under_a_stale_entry(src, world):
            return conflict(
                "destination is a non-empty directory: two different results for one path (left in place, "
                "error raised)",
                src=src,
                dst=dst,
            )
        return f" (the call failed with {errno.errorcode[error.errno]} on this node's stale entry of it)"
    if error.errno != errno.ENOENT:
        return reraise()
    return ""


def _destination_present(dst: str, world: World) -> Look | None:
    seen = world.look(dst)
    if not seen.parent_exists:
        return seen  # decided: nothing to wait for
    return seen if seen.present else None


def _destination_stat(
    dst: str, world: World, rules: Rules, waited: float, needs_ctime: bool
) -> tuple[os.stat_result | None, float]:
    """The destination's lstat, and the time waited in all. In the fresh listing, not yet in this node's lookup
    cache: where its ctime is needed, wait, within the same budget, for the lookup to show it."""
    st = world.lstat(dst)
    if st is None and needs_ctime:
        st, more = world.wait_for(lambda: world.lstat(dst), max(rules.settle_s - waited, 0.0), dst)
        waited += more
    return st, waited


def _not_a_peers(
    dst: str,
    st: os.stat_result,
    world: World,
    rules: Rules,
    own_move: float | None,
    own_put: float | None,
    waited: float,
) -> Verdict | None:
    """The re-raise where the destination is not a peer's move; None: a peer's. Not a peer's: another job's, older than
    the job, or this process's own move onto it."""
    tag = (
        world.job_tag(dst, journal_since(world, dst, st, rules)) if stat.S_ISDIR(st.st_mode) else None
    )  # no tag: a file
    if rules.whose(tag) == "another job":
        return reraise(f"source gone; the destination is another job's or attempt's (its job tag {tag!r})", waited)
    if not rules.is_fresh(st.st_ctime):
        now = world.now()
        age = now - st.st_ctime
        return reraise(f"source gone but destination is older than the job ({age:.1f} s; {rules.since(now)})", waited)
    if own_put is not None and st.st_ctime <= own_put + OWN_SLACK_S:
        return reraise(
            "the destination's last change was this process's own move onto it, nobody changed it since: "
            "the missing source was this process's own",
            waited,
        )
    if own_move is not None and own_put is not None and st.st_ctime <= own_move + OWN_SLACK_S:
        return reraise("this process moved the source away itself; the destination has not changed since", waited)
    return None


def _source_moved_under_a_stale_entry(src: str, world: World) -> bool:
    """Whether a failed directory rename met this node's stale entry of a moved source. A directory rename failed as if
    onto a non-empty directory, though its source left its parent's fresh listing. On a filesystem whose lookups may be
    stale (GlusterFS), this node's cached entry still named the moved directory. That is what the call tried to move."""
    if not world.lookups_may_be_stale(src):
        return False
    seen = world.look(src)
    return seen.parent_exists and not seen.present


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``);
# ``move`` is ``shutil.move``, whose rename this rule decides.
SCAN = (
    Scan(
        "rename replace move",
        "ENOENT",
        ABSORBED,
        "the source was gone because a peer already made the same move; the default mode absorbs it when the "
        "destination is there.",
    ),
    Scan(
        "rename replace move",
        "ENOTEMPTY EEXIST",
        SERIALIZE,
        "a directory was renamed onto a non-empty one: ranks interleaved removing and renaming it; "
        "FSGUARD_SERIALIZE=1 runs those calls one rank at a time.",
    ),
)

"""``shutil.rmtree``: the decisions; the walk that asks them is ``fsguard.rmwalk``.

The rule for a tree that a peer may rename away: *a rename that moves a tree away and an rmtree of the same
tree want the same thing at that path (nothing left there); the rename also wants the data, so the rename
wins.* So:
  * before removing a tree that changed during this job and that this process did not make, or made with
    ``makedirs(exist_ok=True)`` (peers' fresh work, such as a staging directory every rank wrote into, whoever
    made it first), the walk first waits up to ``FSGUARD_YIELD_S`` for a peer to move it away
    (``plan``); if it goes, the rmtree is done: ``yielded``. Trees this process claimed alone
    (``mkdir``, ``makedirs`` without ``exist_ok``, ``mkdtemp``), trees older than the job, and old generations
    of a rotation (another generation of the name stands beside the tree: ``checkpoint-2`` beside
    ``checkpoint-6``) are removed at once, and so are trees no guarded call of a peer of this attempt made (their
    job tag in the node's journal, ``fsguard.evidence.job_tag_of``: another job's, or none in a single-node job);
  * a tree moved away while it is being removed is left alone at its new name: a ``hazard`` record says
    where it went and what was removed before the move (``moved_mid_walk``);
  * a peer's fresh tree that nobody moved within the window is removed, with a ``hazard`` record naming it:
    if a peer still meant to rename it, that is where its data went (``removed_peer_tree``).

Failures of the walk, as before:
  * ``FileNotFoundError`` on an entry inside the tree (it was listed a moment ago): a peer removed it (only in a
    job with peers: a lone process gets the standard error at once, ``entry_gone_by_peer``).
  * ``FileNotFoundError`` on the top path before anything was removed: absorbed when its parent changed
    during this job and this process did not remove or move it itself (``top_gone_before_by_peer``).
  * ``FileNotFoundError`` on the top path after the walk: a peer removed or renamed the emptied tree.
  * ``ENOTEMPTY``/``EBUSY`` on a directory: removal of that directory is retried, bounded by
    ``FSGUARD_SETTLE_S``, while it is the same directory and holds only what the walk listed there or what a
    removal in progress leaves (NFS's ``.nfs…``, FUSE's ``.fuse_hidden…`` files). An entry that appeared after
    the walk's listing (a peer publishing into the tree) is never removed: the error goes on as without fsguard.
    ``EBUSY`` on a mount point inside the tree is never retried (``busy_may_clear``).
Every other error goes to the caller's ``onexc``/``onerror``, or is raised, exactly as without fsguard.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any, Literal, Protocol

from .._values import Value
from . import ABSORBED, SERIALIZE, Rules, Scan, Verdict, World, journal_since, own_event

REMOVED_SHOWN = 50  # names of removed entries a hazard record lists (and says how many more)


MAKES_THE_NAME = ("made-shared", "found")
"""This process's own memory of a directory whose name it makes too: its ``makedirs(exist_ok=True)`` made it, or found
it there (``plan``'s ``scratch``)."""

Plan = Literal["wait", "check", "plain"]
"""How to remove a tree (:func:`plan`): wait for a peer's rename first, walk checked at once, or walk plain."""


class RmtreeVerdict(Verdict):
    """A verdict about one guarded ``rmtree`` call. ``error``: the first error the walk absorbed, the one the
    caller gets when the verdict re-raises or defers to its handler; ``top_gone``: ``"before"`` or ``"after"``
    the walk when the top path itself was gone (that error escapes the standard ``rmtree``: a caller's handler
    of it decides), else None. ``detail`` keeps ``top_gone`` for the record too. ``handled_by``: ``"onerror"`` or
    ``"onexc"`` where the caller's own handler got the errors (the call raises nothing fsguard decided)."""

    _fields = (*Verdict._fields, "error", "top_gone", "handled_by")
    __slots__ = ("error", "handled_by", "top_gone")
    error: BaseException | None
    top_gone: str | None
    handled_by: str | None

    def __init__(self, *fields: Any) -> None:  # in ``_fields`` order, as ``Value`` copies and pickles it
        Value.__init__(self, *fields)

    @classmethod
    def of(
        cls,
        verdict: Verdict,
        error: BaseException | None = None,
        top_gone: str | None = None,
        handled_by: str | None = None,
    ) -> RmtreeVerdict:
        return cls(*verdict._values(), error, top_gone, handled_by)


def plan(
    path: str,
    top: os.stat_result | None,
    own: str | Callable[[], str | None] | None,
    world: World,
    rules: Rules,
    yield_s: float,
    scratch: bool = False,
    serialized: bool = False,
    at_once: bool | None = None,
) -> Plan:
    """How to remove the tree at ``path``: ``"wait"``, ``"check"`` or ``"plain"``. ``"wait"``: first wait up to
    ``yield_s`` for a peer's rename, then the checked walk. ``"check"``: the checked walk at once; the tree must stay at
    its path while it is removed. ``"plain"``: no peer can move it meanwhile, so the walk runs without position checks.

    Wait for a directory that changed during this job and that peers may have written into and may still commit:
    one this process did not make, or made with ``makedirs(exist_ok=True)`` (a name others make too: whoever came
    first made it, so who made it says nothing about who commits it). Plain for a tree only this process could
    claim (``mkdir``, ``makedirs`` without ``exist_ok``, ``mkdtemp``), in a job without peers, for a generation
    of a rotation (another generation of its name stands beside it: ``checkpoint-2`` beside ``checkpoint-6``, or a
    kept best ``checkpoint-2`` beside the ``checkpoint-4`` removed; a staging tree a peer is about to commit has a
    name of its own) and for a mount point (a bind-mounted output directory), which no rename can move. Checked at
    once: a tree older than the job (or this attempt), when the window is off, and a tree no guarded call of a peer
    of this attempt made: the node's journal names another job or attempt, or none in a single-node job (unpacked
    by ``tar``, made by a subprocess without fsguard); only a real move mid-walk is a hazard then. Checked at once
    too: a tree another process of this rank made (the journal names this rank as its maker: a
    ``multiprocessing.Pool``'s child of this process), and a tree whose name this process makes too
    (``makedirs(exist_ok=True)`` made it or found it there) at a path where it already removed such a tree after a
    window no peer used (``scratch``: a per-step scratch directory, its own or one every rank makes and writes into;
    peers do not commit trees at that path). Plain, before all these: a tree this rank made that
    no process of another rank made or tried to make, where this node's journal sees every peer (``plain_at_once``);
    not ``serialized``: there one rank makes a name for all (singleflight), and the others leave no note. ``at_once``:
    ``plain_at_once``'s answer, where the caller asked it already."""
    if top is None or not stat.S_ISDIR(top.st_mode):
        return "check"
    if own == "made" or (plain_at_once(path, top, world, rules, serialized) if at_once is None else at_once):
        return "plain"
    own = own() if callable(own) else own  # this process's memory: asked only now (issue 47: its cost)
    if own == "made":
        return "plain"
    if scratch and own in MAKES_THE_NAME:
        return "check"
    if yield_s <= 0 or not rules.is_fresh(max(top.st_ctime, top.st_mtime)):
        return "check"
    if rules.whose(world.job_tag(path, journal_since(world, path, top, rules))) in ("untagged", "another job"):
        return "check"  # not made by a guarded call of a peer of this attempt: a tool's tree (tar), another job's
    if own != "made-shared" and world.made_by_this_rank(path):  # the journal: before the parent's listing below
        return "check"  # another process of this rank made it (its Pool's child): no peer's commit
    if world.generation_beside(path) is not None or world.is_mount_point(path, top):
        return "plain"
    return "wait"


class Device(Protocol):
    """What ``plain_at_once`` reads of the top: its device. An ``os.stat_result``, or the short course's
    ``fsguard.rmwalk.tree.TopStat``, which reads it when first asked."""

    @property
    def st_dev(self) -> int: ...


def plain_at_once(path: str, top: Device, world: World, rules: Rules, serialized: bool = False) -> bool:
    """Whether the directory ``top`` at ``path`` is removed plainly before anything else is asked. ``plan``'s first
    answer, and the short course's test (``fsguard.rmwalk.lane``). In a job without peers; and, not ``serialized``, a
    tree this rank made alone, as far as this node sees (issue 47).

    Made alone: this process or its children (a ``multiprocessing.Pool``'s) made it, and no process of another rank of
    this attempt made it or tried to make it since, so nobody here could commit it. Only where this node's journal sees
    every peer that could (``World.made_alone``): in a single-node job, or on a node-local filesystem (a coherent local
    mount, which no other node sees). A peer that commits a tree makes it, or tries to, before it writes into it (every
    rank's ``makedirs(tmp-checkpoint-N, exist_ok=True)``); one that did neither is not seen. One frame: every small
    ``rmtree`` asks it."""
    if not rules.peers:
        return True
    if serialized or (not rules.single_node and world.lookups_may_be_stale(top.st_dev)):
        return False  # (serialized: one rank makes a name for all, the others leave no note; a peer on another
        # node notes in its own node's journal. The top's device is asked only in a job of several nodes.)
    return world.made_alone(path)


def yielded(top: str, waited_s: float, how: str, renamed_to: str | None) -> RmtreeVerdict:
    """The tree left its path while this process waited to remove it. A peer moved it (found under another name by its
    inode) or removed it; nothing is left to remove."""
    if renamed_to is None:
        return RmtreeVerdict.of(
            Verdict(
                True,
                "absorbed",
                f"tree removed by a peer (or moved out of its parent) {how} while this process waited "
                f"{waited_s:.2f} s to remove it: nothing left to remove",
                waited_s,
            )
        )
    return RmtreeVerdict.of(
        Verdict(
            True,
            "yielded",
            f"a peer moved the tree to {renamed_to} {how} after {waited_s:.2f} s: the rename wins, nothing left to "
            "remove",
            waited_s,
            {"renamed_to": renamed_to},
        )
    )


def removed_peer_tree(
    top: str, waited_s: float, absorbed: RmtreeVerdict | None, made_here: bool = False, identity: str | None = None
) -> RmtreeVerdict:
    """A tree peers may still have meant to commit, removed after the window. One they made during this job, or one this
    process made with ``makedirs(exist_ok=True)``, a name they make too. ``identity``: what told it a peer's
    (``fsguard.guards.by_tag``: its job tag, or time only)."""
    detail = dict(absorbed.detail) if absorbed is not None else {}
    detail["not_moved_within_s"] = round(waited_s, 4)
    if identity is not None:
        detail["identity"] = identity
    extra = f"; {absorbed.evidence}" if absorbed is not None else ""
    whose = (
        "a tree this process made with makedirs(exist_ok=True), a name peers make too (they may have written into it)"
        if made_here
        else "a tree that peers made or wrote during this job"
    )
    if made_here:
        detail["made_here"] = True
    hazard = Verdict(
        True,
        "hazard",
        f"removed {whose} after no peer moved it away within {waited_s:.2f} s (FSGUARD_YIELD_S): if a peer "
        f"still meant to rename {top}, that rename will fail, and its data is gone{extra}",
        waited_s + (absorbed.waited_s if absorbed is not None else 0.0),
        detail,
    )
    if absorbed is None:
        return RmtreeVerdict.of(hazard)
    return RmtreeVerdict.of(hazard, absorbed.error, absorbed.top_gone, absorbed.handled_by)


def moved_mid_walk(top: str, renamed_to: str | None, removed: list[str], waited_s: float) -> RmtreeVerdict:
    """The tree was moved away while this process removed it: left alone, and said so."""
    where = renamed_to or "a name this process cannot see (another directory?)"
    shown = [os.path.relpath(p, top) if p.startswith(top + os.sep) else p for p in removed[:REMOVED_SHOWN]]
    more = f" and {len(removed) - REMOVED_SHOWN} more" if len(removed) > REMOVED_SHOWN else ""
    what = f"{len(removed)} entr{'y' if len(removed) == 1 else 'ies'} ({', '.join(shown)}{more})" if removed else "none"
    return RmtreeVerdict.of(
        Verdict(
            True,
            "hazard",
            f"tree moved to {where} by a peer while this process was removing it: stopped and left it there; "
            f"already removed from it: {what}",
            waited_s,
            {"renamed_to": renamed_to, "removed": shown, "removed_count": len(removed)},
        )
    )


def top_gone_before_by_peer(top: str, world: World, rules: Rules, missed: bool = False) -> tuple[bool, float]:
    """The top path was missing at the start, by a peer's removal. Its parent changed during this job, and this process
    did not remove or move it earlier. ``missed``: the walk's own call on the top failed with ``ENOENT`` just now, so
    the first look does not ask its lookup again. Returns (decision, seconds waited)."""
    if own_event(world, top) in ("removed", "moved-away"):
        return False, 0.0
    first = [missed]

    def gone_from_listing() -> bool | None:  # gone: whether its parent is there
        seen = world.look(top, missed=first.pop()) if first else world.look(top)
        return seen.parent_exists if (not seen.parent_exists or not seen.present) else None

    # A stale lookup cache can say "missing" while peers are still deleting the tree: wait (bounded)
    # for the fresh listing to drop the name.
    parent_there, waited = world.wait_for(gone_from_listing, rules.settle_s, top)
    if not parent_there:
        return False, waited
    parent = os.path.dirname(top)
    held = world.held_ctime(parent)  # no request: an older ctime already during the job says enough
    if held is not None and rules.is_fresh(held):
        return True, waited
    st = world.lstat(parent)
    return st is not None and rules.is_fresh(st.st_ctime), waited


def escaped_gone(top: str, world: World, rules: Rules) -> tuple[bool, float]:
    """A ``FileNotFoundError`` that bypassed the handler: absorbed if a peer removed the whole tree."""
    if own_event(world, top) in ("removed", "moved-away"):
        return False, 0.0

    def gone() -> bool | None:
        seen = world.look(top)
        return True if seen.parent_exists and not seen.present else None

    result, waited = world.wait_for(gone, rules.settle_s, top)
    return result is not None, waited


def walk_verdict(
    entries_gone: list[str],
    retried: list[str],
    top_gone: str | None,
    renamed_to: str | None,
    waited_s: float,
    error: BaseException | None,
    world: World,
    handed: str | None = None,
) -> RmtreeVerdict | None:
    """What a walk that finished absorbed, or None when it absorbed nothing. ``handed``: the caller's handler
    (``"onerror"``/``"onexc"``) got those errors, as from the standard ``rmtree``: a ``deferred`` record."""
    if not (entries_gone or top_gone or retried):
        return None
    if handed is not None:
        return handed_to_caller(entries_gone, top_gone, error, handed)
    parts = []
    if top_gone == "before":
        parts.append("tree already removed (its parent changed during this job)")
    if entries_gone:
        parts.append(f"{len(entries_gone)} entr{'y' if len(entries_gone) == 1 else 'ies'} removed by a peer first")
    if retried:
        parts.append(
            f"{len(retried)} director{'y' if len(retried) == 1 else 'ies'} "
            f"gained entries mid-walk and were removed again"
        )
    detail: dict[str, Any] = {"entries_gone": entries_gone[:50], "retried": retried[:50], "top_gone": top_gone}
    if top_gone == "after":
        if renamed_to:
            detail["renamed_to"] = renamed_to
            n = world.entries(renamed_to)
            left = "unknown" if n is None else f"{n} entr{'y' if n == 1 else 'ies'}"
            hazard = Verdict(
                True,
                "hazard",
                f"tree renamed to {renamed_to} by a peer while this process was removing it: "
                f"{renamed_to} may be missing entries removed before the rename (still there: {left})",
                waited_s,
                detail,
            )
            return RmtreeVerdict.of(hazard, error, top_gone)
        parts.append("top directory removed by a peer at the end")
    return RmtreeVerdict.of(Verdict(True, "absorbed", "; ".join(parts), waited_s, detail), error, top_gone)


def handed_to_caller(
    entries_gone: list[str], top_gone: str | None, error: BaseException | None, handler: str
) -> RmtreeVerdict:
    """A peer's work went to the caller's own handler, as the standard ``rmtree`` sends it. Entries, or the whole tree,
    were removed first. The handler is the program's decision, and fsguard raises nothing of it."""
    parts = []
    if top_gone == "before":
        parts.append("tree already removed (its parent changed during this job)")
    if entries_gone:
        parts.append(f"{len(entries_gone)} entr{'y' if len(entries_gone) == 1 else 'ies'} removed by a peer first")
    if top_gone == "after":
        parts.append("top directory removed by a peer at the end")
    detail: dict[str, Any] = {
        "entries_gone": entries_gone[:50],
        "top_gone": top_gone,
        "handler": handler,
        "reason": f"the caller's {handler} handler: shutil.rmtree passes it every error, and it decides",
        "instead_of": "absorbed",
    }
    return RmtreeVerdict.of(Verdict(False, "deferred", "; ".join(parts), 0.0, detail), error, None, handler)


def entry_gone_by_peer(rules: Rules) -> bool:
    """An entry listed a moment ago is gone: a peer's removal, if there are peers. A lone process (``FSGUARD=force``
    outside a launcher) has none: another thread of its own removed it, and the standard library's error is the answer
    (at once: there is nobody to wait for)."""
    return rules.peers


def settle_on_vanishing(vanished: int) -> bool:
    """Whether a walk that saw entries vanish waits for the peer removing the tree. It stops at the first one
    (``fsguard.rmwalk.handler.Walk.wait_for_peer_removal``). One vanished entry is already the evidence that a peer
    walks this tree; every further entry raced costs both ranks a metadata operation for nothing."""
    return vanished >= 1


def busy_may_clear(path: str, st: os.stat_result, world: World) -> bool:
    """Whether an ``EBUSY`` removal of ``path`` inside the tree is tried again. ``st`` is what the walk found there
    (``fsguard.rmwalk.handler.Walk._retry``). Not for a mount point (a bind-mounted directory): no peer's removal makes
    it free. The standard error then goes on at once, as without fsguard."""
    return not world.is_mount_point(path, st)


# What ``fsguard scan`` says of this rule's errors in the log of a job run without fsguard (``guards.Scan``).
SCAN = (
    Scan(
        "rmtree",
        "ENOENT",
        ABSORBED,
        "a peer removed the entry (or the whole tree) first; the default mode finishes the removal.",
    ),
    Scan(
        "rmtree",
        "EBUSY",
        ABSORBED,
        "a directory was busy (often NFS .nfsXXXX files); the default mode retries its removal for up to "
        "FSGUARD_SETTLE_S.",
    ),
    Scan(
        "rmtree",
        "ENOTEMPTY EEXIST",
        SERIALIZE,
        "entries appeared in the tree while it was being removed (a peer wrote or renamed into it); "
        "FSGUARD_SERIALIZE=1 orders the removal against the peer's calls.",
    ),
    Scan(
        "rmtree",
        "ENOENT EBUSY",
        SERIALIZE,
        "the removed tree is a staging/temporary one: when a peer commits it with a rename (rank 0's "
        "os.rename(tmp-checkpoint, checkpoint) while other ranks clean it up), this race loses data, silently "
        "once the error is absorbed: the removal empties the tree before the rename, or keeps unlinking inside "
        "the renamed checkpoint. fsguard's fix, the rule 'the rename wins': FSGUARD=1 waits up to "
        "FSGUARD_YIELD_S for a peer's rename of a fresh peer tree and stops removing a tree moved away "
        "mid-walk (hazard record); FSGUARD_SERIALIZE=1 lets an announced rename go first with certainty. "
        "Better still: remove the staging directory only on the rank that renames it.",
        staging=True,
    ),
)

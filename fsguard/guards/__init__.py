"""Policy: for each guarded operation, one small rule that decides what a failure means.

A rule is ``decide(call, error, world, rules) -> Verdict``. It reads the decoded call (``fsguard.calls.Call``), the
error, the ``World``'s answers and the ``Rules``' numbers. It decides to absorb the failure (a peer of this job already
did the same thing) or to re-raise it unchanged. Rules never sleep, touch the filesystem, patch, lock or log. Every
question about the world goes through ``World``: live, ``fsguard.world``; in tests, a fake. The mechanism in
``fsguard.patching`` acts on the verdict.

The numbers are a separate argument, not part of the world. They are a plain value made from the settings and the
launch. They change per call (``without_waits`` when the caller handles the error). Tests vary them independently of
what the filesystem shows. Each rule's module ends in its ``SCAN`` table: what ``fsguard scan`` says of its errors in
the log of a job that ran without fsguard.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .._values import Frozen, Value
from ..launcher import is_single_node, same_job

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from ..evidence import Look
    from ..memory import Event

T = TypeVar("T")


class World(Protocol):
    """Everything a rule may ask about the world. Answers are never cached by a rule: ask again for news."""

    def now(self) -> float:
        """Wall-clock time (``time.time``)."""

    def look(self, path: str, missed: bool = False) -> Look:
        """The name as the freshest probe its mount honours shows it (``fsguard.evidence.look``). ``missed``: the
        caller's own call on the name just failed with ``ENOENT`` (its lookup is not asked again)."""

    def lstat(self, path: str) -> os.stat_result | None:
        """The name's own ``lstat``, None when it fails. A lookup: may be stale on a caching mount."""

    def held_ctime(self, path: str) -> float | None:
        """The entry's change time as this node holds it, without a request. Older than the truth, never newer
        (``fsguard.evidence.held_ctime``); None where it holds none."""

    def stat(self, path: Any, follow_symlinks: bool = True) -> os.stat_result | None:
        """``os.stat`` of a path argument as given, None when it fails."""

    def readlink(self, path: str) -> str | None:
        """A symlink's target text, None when it is not (or no longer) one."""

    def created(self, path: str, st: os.stat_result) -> tuple[float, str]:
        """(when ``path`` was created, ``"created"``), or its ctime where no birth time is kept (``"changed"``)."""

    def own_last(self, path: str, within: bool = False) -> Event | None:
        """The newest thing this process's own guarded calls did to ``path`` (``fsguard.memory.own_last``)."""

    def wait_for(
        self, probe: Callable[[], T | None], budget_s: float, where: str | None = None
    ) -> tuple[T | None, float]:
        """``probe()`` until it answers (not None), bounded by ``budget_s`` and ``where``'s mount. Nothing to wait for
        on a coherent mount. Returns (the answer or None, seconds waited)."""

    def lookups_may_be_stale(self, path: str | int) -> bool:
        """Whether the mount of ``path`` may answer lookups from a cache (``fsguard.mounts``). A device number asks
        without a lookup."""

    def generation_beside(self, path: str) -> str | None:
        """A sibling directory that is another generation of the name (``checkpoint-6`` or ``checkpoint-1``
        beside ``checkpoint-2``)."""

    def job_tag(self, path: str, since: float | None = None) -> str | None:
        """Whose the directory at ``path`` is, by this node's journal. By ``fsguard.evidence.job_tag_of``: the tag of
        the job that made it. ``""`` where no job of a single-node job's node made it; None where it cannot tell.
        ``since``: entries older than this (an earlier directory's, removed since) are not read."""

    def made_by_this_rank(self, path: str) -> bool:
        """Whether this job's journal names this rank as the directory's maker. That is
        ``fsguard.evidence.made_by_rank``. A process of this rank made it: this one or its children (a
        ``multiprocessing.Pool``'s)."""

    def made_alone(self, path: str) -> bool:
        """Whether this rank made the directory last, and no other rank since. It asks this node's journal: no note
        since from a process of another rank that made or tried to make it (``fsguard.journal.made_alone``)."""

    def is_mount_point(self, path: str, st: os.stat_result) -> bool:
        """Whether ``path`` (whose ``lstat`` is ``st``) is the root of a mount."""

    def entries(self, path: str) -> int | None:
        """How many entries the directory lists, None when it cannot be read."""


def own_event(world: World, path: str, within: bool = False) -> str | None:
    """The kind of :meth:`World.own_last` (``made``, ``made-shared``, ``found``, ``moved-away``, ``removed``)."""
    event = world.own_last(path, within)
    return event.kind if event is not None else None


class Verdict(Value):
    """What to do with a failed call.

    ``absorb``: return as if the call had succeeded. ``decision``: the record to write (``absorbed``, ``hazard`` or
    ``conflict``), or None for a plain re-raise that needs no record. A plain (unhashable) value, not ``Frozen``:
    ``detail`` is a dict, what the record says beside the evidence. Rmtree's verdicts
    (``fsguard.guards.rmtree.RmtreeVerdict``) carry what the mechanism acts on in fields of their own.
    """

    _fields: tuple[str, ...] = ("absorb", "decision", "evidence", "waited_s", "detail")
    __slots__ = ("absorb", "decision", "detail", "evidence", "waited_s")
    absorb: bool
    decision: str | None
    evidence: str
    waited_s: float
    detail: dict[str, Any]

    def __init__(
        self,
        absorb: bool,
        decision: str | None,
        evidence: str,
        waited_s: float = 0.0,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(absorb, decision, evidence, waited_s, {} if detail is None else detail)


def reraise(evidence: str = "", waited_s: float = 0.0) -> Verdict:
    return Verdict(False, None, evidence, waited_s)


def absorb(evidence: str, waited_s: float = 0.0, decision: str = "absorbed", **detail: Any) -> Verdict:
    return Verdict(True, decision, evidence, waited_s, dict(detail))


def conflict(evidence: str, waited_s: float = 0.0, **detail: Any) -> Verdict:
    return Verdict(False, "conflict", evidence, waited_s, dict(detail))


class Rules(Frozen):
    """The numbers a rule needs from the configuration and the job."""

    _fields = ("settle_s", "fresh_s", "job_start", "peers", "job_start_source", "job", "attempt_start")
    __slots__ = (*_fields, "single_node")
    settle_s: float
    fresh_s: float
    job_start: float
    peers: bool  # a distributed launcher says this process has peers (FSGUARD=force alone does not)
    job_start_source: str  # how ``job_start`` was found (fsguard.evidence.job_start)
    job: str | None  # this job's and attempt's tag (fsguard.launcher.job_tag), None: none to compare with
    attempt_start: float | None  # when a restarted attempt started here (fsguard.evidence.attempt_start)
    single_node: bool  # (derived from ``job``, not a field)

    def __init__(
        self,
        settle_s: float,
        fresh_s: float,
        job_start: float,
        peers: bool = False,
        job_start_source: str = "this process's start",
        job: str | None = None,
        attempt_start: float | None = None,
    ) -> None:
        super().__init__(settle_s, fresh_s, job_start, peers, job_start_source, job, attempt_start)
        # Derived from ``job``: whether the job is a single-node one (``launcher.is_single_node``), asked by every
        # plain rmtree (issue 47)
        object.__setattr__(self, "single_node", is_single_node(job))

    def without_waits(self) -> Rules:
        """The same numbers with no settle budget: decide from what the fresh listings show now."""
        return Rules(0.0, *self._values()[1:])  # type: ignore[arg-type]

    def before_job(self, when: float) -> bool:
        """Made or changed before this job started, beyond the ``fresh_s`` allowance. Never a peer's: no evidence can
        absorb it. One ``lstat`` before a decision tells it (``fsguard.failure``)."""
        return when < self.job_start - self.fresh_s

    def is_fresh(self, when: float) -> bool:
        """Made or changed during this job (``when``: a birth time or a ctime). At most ``fresh_s`` before the job's
        start on this node (``fsguard.evidence.job_start``). The allowance covers clock skew between nodes and the file
        server, and launchers' start stagger without a rendezvous. In a restarted attempt, not before it started, with
        no allowance. Every worker of the previous attempt was stopped before one of this attempt started. So what
        changed before is the previous attempt's."""
        return when >= self.job_start - self.fresh_s and (self.attempt_start is None or when >= self.attempt_start)

    def since(self, now: float) -> str:
        """The job's start, for a record. ``job started 12.3 s ago (the start of torchrun agent (pid 7))``."""
        attempt = "" if self.attempt_start is None else f"; this attempt started {now - self.attempt_start:.1f} s ago"
        return (
            f"job started {now - self.job_start:.1f} s ago ({self.job_start_source}; {self.fresh_s:g} s "
            f"allowed){attempt}"
        )

    def whose(self, tag: str | None) -> str:
        """Whose a directory is by its job tag (``World.job_tag``). ``"this attempt"``, or ``"this job"``: the same job,
        another node's restart count. (torchrun's agents count restarts per node, so ranks of one attempt may differ;
        ``is_fresh`` tells the attempt by time.) ``"another job"``: another job's or attempt's tag, never a peer's.
        ``"untagged"``: a single-node job, whose node's journal is complete; no guarded mkdir or makedirs of this job
        made it. ``"unknown"``: the journal cannot tell. A peer is on another node, or this process has no tag of its
        own."""
        if self.job is None or tag is None:
            return "unknown"
        if tag == "":
            return "untagged"
        if tag == self.job:
            return "this attempt"
        return "this job" if same_job(tag, self.job) else "another job"


BIRTH_SLACK_S = 2.0  # the least allowance between a birth time (the file server's clock) and a journal entry's (ours)


def since_birth(made: float, what: str, now: float, rules: Rules) -> float | None:
    """The oldest journal entry that can name the directory born at ``made``.

    ``made`` is ``World.created``'s time, a birth where ``what`` is ``"created"``. An entry older than the birth named
    an earlier directory at its path, removed since. Less ``fresh_s`` (at least ``BIRTH_SLACK_S``) for the file
    server's clock against ours; a birth after ``now`` (a server clock ahead) counts as now. None where the time is a
    change time, not a birth: every entry counts."""
    if what != "created":
        return None
    return min(made, now) - max(rules.fresh_s, BIRTH_SLACK_S)


def journal_since(world: World, path: str, st: os.stat_result, rules: Rules) -> float | None:
    """``since_birth`` of the directory at ``path`` (``st``: its ``lstat``). The journal's question then reads only what
    was written since (``World.job_tag``): where no journal names the path, not every journal of the node, whole."""
    made, what = world.created(path, st)
    return since_birth(made, what, world.now(), rules)


def by_tag(whose: str) -> str:
    """What identity evidence a decision had, for its record. ``"job tag"``, ``"job tag and time"`` (the job by its tag,
    the attempt by time) or ``"time only"``."""
    if whose == "this job":
        return "job tag and time"
    return "job tag" if whose in ("this attempt", "another job") else "time only"


# What ``fsguard scan`` says of a failure in the log of a job that ran without fsguard: this rule absorbs it when
# the evidence shows a peer of the job did the same (``ABSORBED``, ``FSGUARD=1``); no rule absorbs it, but
# serializing the calls on one path keeps it from happening (``SERIALIZE``, ``FSGUARD_SERIALIZE=1``); or fsguard
# re-raises it, rightly (``NOT_FIXABLE``: a genuine error, or an ordering bug of the program).
ABSORBED, SERIALIZE, NOT_FIXABLE = "absorbed", "serialize", "not fixable"
EVERY_OP = "*"


class Scan(Frozen):
    """One row of a rule's ``SCAN`` table: errors, operations, verdict, why. It sits at the end of its module, beside
    the rule it restates. ``errors`` are errno names; ``operations`` are as ``fsguard scan`` names them,
    space-separated. (``move`` for ``shutil.move``, ``remove`` for ``os.unlink`` too, ``*`` for every one.) ``why`` is
    one sentence for the person reading the scan: the evidence a run with fsguard needs. ``staging``: the row holds only
    for a staging or temporary tree (one a peer may commit with a rename), and wins over the plain one."""

    _fields = ("ops", "errors", "verdict", "why", "staging")
    __slots__ = _fields
    ops: tuple[str, ...]
    errors: tuple[str, ...]
    verdict: str
    why: str
    staging: bool

    def __init__(self, ops: str, errors: str, verdict: str, why: str, staging: bool = False) -> None:
        super().__init__(tuple(ops.split()), tuple(errors.split()), verdict, why, staging)


def _genuine(errors: str, what: str) -> Scan:
    return Scan(EVERY_OP, errors, NOT_FIXABLE, f"{what}: a genuine error, not a race between ranks.")


# Errors no rule absorbs, whatever the operation.
SCAN = (
    Scan(
        EVERY_OP,
        "ESTALE",
        SERIALIZE,
        "stale NFS file handle: a peer replaced or removed the path while this rank used it; FSGUARD_SERIALIZE=1 "
        "runs the calls on it one rank at a time (check the NFS attribute caching too).",
    ),
    _genuine("EACCES", "permission denied"),
    _genuine("EPERM", "operation not permitted"),
    _genuine("EROFS", "read-only filesystem"),
    _genuine("ENOSPC", "no space left on the device"),
    _genuine("EDQUOT", "disk quota exceeded"),
    Scan(
        EVERY_OP,
        "EXDEV",
        NOT_FIXABLE,
        "source and destination are on different filesystems, which a rename cannot cross (shutil.move can): a "
        "genuine error.",
    ),
    Scan(
        EVERY_OP,
        "ENOTDIR",
        NOT_FIXABLE,
        "a file stands where a directory is expected: a genuine error (or ranks writing different kinds of object "
        "at one path).",
    ),
    Scan(
        EVERY_OP,
        "EISDIR",
        NOT_FIXABLE,
        "a directory stands where a file is expected: a genuine error (or ranks writing different kinds of object "
        "at one path).",
    ),
    Scan(EVERY_OP, "ENAMETOOLONG", NOT_FIXABLE, "the path is too long: a genuine error."),
)


def rule_modules() -> dict[str, ModuleType]:
    """Every rule module by name, for ``Operation.rule`` (``fsguard.operations``): plain imports, made on call."""
    # Imported on call, not with the package: fsguard.failure asks at the first failure, not at start-up (issue 49).
    from . import link, makedirs, mkdir, remove, rename, rmtree, symlink

    modules = (link, makedirs, mkdir, remove, rename, rmtree, symlink)
    return {module.__name__.rpartition(".")[2]: module for module in modules}

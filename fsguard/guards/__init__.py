"""Policy: for each guarded operation, one small rule that decides what a failure means.

A rule looks at the error and the evidence and returns a ``Verdict``: absorb the failure (a peer of this
job already did the same thing) or re-raise it unchanged. Rules never patch, lock or log: the mechanism in
``fsguard.patching`` does that with their verdict. Each rule's module ends in its ``SCAN`` table: what
``fsguard scan`` says of its errors in the log of a job that ran without fsguard.
"""

from __future__ import annotations

from .._values import Frozen, Value

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from typing import Any


class Verdict(Value):
    """What to do with a failed call.

    ``absorb``: return as if the call had succeeded. ``decision``: the record to write (``absorbed``,
    ``hazard`` or ``conflict``), or None for a plain re-raise that needs no record. A plain (unhashable)
    value, not ``Frozen``: ``detail`` is a dict, which the mechanism may still read from (rmtree's error).
    """

    _fields = ("absorb", "decision", "evidence", "waited_s", "detail")
    __slots__ = _fields
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

    _fields = ("settle_s", "fresh_s", "job_start", "peers")
    __slots__ = _fields
    settle_s: float
    fresh_s: float
    job_start: float
    peers: bool  # a distributed launcher says this process has peers (FSGUARD=force alone does not)

    def __init__(self, settle_s: float, fresh_s: float, job_start: float, peers: bool = False) -> None:
        super().__init__(settle_s, fresh_s, job_start, peers)

    def without_waits(self) -> Rules:
        """The same numbers with no settle budget: decide from what the fresh listings show now."""
        return Rules(0.0, self.fresh_s, self.job_start, self.peers)

    def is_fresh(self, when: float) -> bool:
        """Made or changed (``when``: a birth time or a ctime) during this job: at most ``fresh_s`` before its
        start on this node (``fsguard.evidence.job_start``), for clock skew between nodes and the file server
        and for the start stagger of launchers without a rendezvous."""
        return when >= self.job_start - self.fresh_s

    def since(self) -> str:
        """The job's start, for a record: ``job started 12.3 s ago (the start of torchrun agent (pid 7))``."""
        import time

        from ..evidence import job_start_source

        return f"job started {time.time() - self.job_start:.1f} s ago ({job_start_source}; {self.fresh_s:g} s allowed)"


# What ``fsguard scan`` says of a failure in the log of a job that ran without fsguard: this rule absorbs it when
# the evidence shows a peer of the job did the same (``ABSORBED``, ``FSGUARD=1``); no rule absorbs it, but
# serializing the calls on one path keeps it from happening (``SERIALIZE``, ``FSGUARD_SERIALIZE=1``); or fsguard
# re-raises it, rightly (``NOT_FIXABLE``: a genuine error, or an ordering bug of the program).
ABSORBED, SERIALIZE, NOT_FIXABLE = "absorbed", "serialize", "not fixable"
EVERY_OP = "*"


class Scan(Frozen):
    """One row of a rule's ``SCAN`` table, at the end of its module, beside the rule it restates: the errors
    (errno names) of the operations (as ``fsguard scan`` names them: ``move`` for ``shutil.move``, ``remove``
    for ``os.unlink`` too, ``*`` for every one), given as space-separated words; the verdict; and ``why``, one
    sentence for the person reading the scan: the evidence a run with fsguard needs. ``staging``: the row holds
    only for a staging or temporary tree (one a peer may commit with a rename), and wins over the plain one."""

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

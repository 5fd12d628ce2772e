"""A fake ``World`` for the rules' in-process tests: the filesystem is a real temporary directory; what the
test arranges is faked: this process's own calls, a node's stale lookups, birth times, mount points, the clock,
and the waits (no sleeping: ``wait_for`` asks the probe, lets the next scripted peer action happen, asks
again)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fsguard.calls import Call
from fsguard.config import load
from fsguard.evidence import Look, generation_beside, kind_of
from fsguard.guards import Rules, Verdict
from fsguard.memory import Event

T = TypeVar("T")
STEP_S = 0.05  # what one scripted wait step counts as waited


class FakeWorld:
    def __init__(self, *, stale: bool = False) -> None:
        self.stale = stale  # lookups may be stale on this "mount"
        self.cached: dict[str, os.stat_result | None] = {}  # a lookup cache's answers, where they differ
        self.own: dict[str, Event] = {}
        self.births: dict[str, float] = {}
        self.mount_points: set[str] = set()
        self.offset = 0.0  # the clock, ahead of the real one by this much
        self.peers: list[Callable[[], None]] = []  # what peers do, one step per wait
        self.waits: list[float] = []  # the budget of each wait asked for
        self.tags: dict[str, str] = {}  # job tags on directories ("": none, where tags are kept); else unknown
        self.this_rank: set[str] = set()  # directories the journal names this rank as the maker of
        self.alone: set[str] = set()  # ... with no note of another rank's since (fsguard.journal.made_alone)
        self.since: list[float | None] = []  # the oldest journal entry each job_tag question reads

    def did(self, path: str, kind: str, when: float | None = None) -> None:
        """This process's own guarded call did ``kind`` to ``path`` (``made``, ``removed``...)."""
        self.own[path] = Event(kind, when, len(self.own))

    def now(self) -> float:
        return time.time() + self.offset

    def look(self, path: str, missed: bool = False) -> Look:
        parent, name = os.path.split(path)
        try:
            for entry in os.scandir(parent):
                if entry.name == name:
                    return Look(True, True, kind_of(entry.stat(follow_symlinks=False)))
        except (FileNotFoundError, NotADirectoryError):
            return Look(False, False)
        return Look(True, False)

    def lstat(self, path: str) -> os.stat_result | None:
        if path in self.cached:
            return self.cached[path]
        try:
            return os.lstat(path)
        except OSError:
            return None

    def held_ctime(self, path: str) -> float | None:
        return None  # nothing held: the rules ask ``lstat`` (a subclass holds what a test says)

    def stat(self, path: Any, follow_symlinks: bool = True) -> os.stat_result | None:
        try:
            return os.stat(path, follow_symlinks=follow_symlinks)
        except OSError:
            return None

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def created(self, path: str, st: os.stat_result) -> tuple[float, str]:
        born = self.births.get(path)
        return (born, "created") if born is not None else (st.st_ctime, "changed")

    def own_last(self, path: str, within: bool = False) -> Event | None:
        found = [e for p, e in self.own.items() if p == path or (within and p.startswith(path + os.sep))]
        found += [e for p, e in self.own.items() if e.kind in ("removed", "moved-away") and path.startswith(p + os.sep)]
        return max(found, key=lambda e: e.seq) if found else None

    def wait_for(
        self, probe: Callable[[], T | None], budget_s: float, where: str | None = None
    ) -> tuple[T | None, float]:
        self.waits.append(budget_s)
        waited = 0.0
        result = probe()
        while result is None and self.peers and waited < budget_s:
            self.peers.pop(0)()
            waited += STEP_S
            result = probe()
        return result, waited

    def lookups_may_be_stale(self, path: str | int) -> bool:
        return self.stale

    def generation_beside(self, path: str) -> str | None:
        return generation_beside(path)

    def job_tag(self, path: str, since: float | None = None) -> str | None:
        self.since.append(since)
        return self.tags.get(path)

    def made_by_this_rank(self, path: str) -> bool:
        return path in self.this_rank

    def made_alone(self, path: str) -> bool:
        return path in self.alone

    def is_mount_point(self, path: str, st: os.stat_result) -> bool:
        return path in self.mount_points

    def entries(self, path: str) -> int | None:
        try:
            return len(os.listdir(path))
        except OSError:
            return None


DEFAULTS = load({})  # fsguard's own defaults (FSGUARD_SETTLE_S, FSGUARD_FRESH_S...), as a job without settings has


def rules(
    *, peers: bool = True, settle_s: float = DEFAULTS.settle_s, fresh_s: float = 0.0, started_ago: float = 100.0
) -> Rules:
    """A job with peers that started ``started_ago`` seconds ago. Waits are bounded by the default settle time;
    ``fresh_s`` is 0 unless given (no allowance before the job's start: tests/rules/test_defaults.py gives the
    default one)."""
    return Rules(settle_s=settle_s, fresh_s=fresh_s, job_start=time.time() - started_ago, peers=peers)


BEFORE_THE_JOB = {"started_ago": -3600.0}  # the job starts an hour from now: everything here is older


def error(code: int, path: str = "x") -> OSError:
    """The OSError subclass the call would raise for ``code`` (``FileExistsError`` for ``EEXIST``...)."""
    return OSError(code, os.strerror(code), path)


def assert_raised(verdict: Verdict, evidence: str) -> None:
    """The exact outcome of a plain re-raise: not absorbed, no record, no wait, and the evidence starting with
    ``evidence`` ("": none, the call was passed through before anything was read)."""
    assert (verdict.absorb, verdict.decision, verdict.waited_s) == (False, None, 0.0), verdict
    assert verdict.evidence.startswith(evidence) if evidence else verdict.evidence == "", verdict


def decide(
    rule: Any, op: str, args: tuple[Any, ...], code: int, world: FakeWorld, numbers: Rules, **kwargs: Any
) -> Verdict:
    verdict: Verdict = rule.decide(Call(op, args, kwargs), error(code), world, numbers)
    return verdict


EEXIST, ENOENT = errno.EEXIST, errno.ENOENT

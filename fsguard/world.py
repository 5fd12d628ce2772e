"""The live world the rules ask (``fsguard.guards.World``). It asks the filesystem through ``fsguard.evidence``, this
process's own calls through ``fsguard.memory``, and the clock. The rules' only way to the outside."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from . import evidence, journal, memory, mounts
from .state import STATE

T = TypeVar("T")


class Live:
    """``fsguard.guards.World`` answered by the real filesystem (one instance: ``LIVE``). Each method looks its
    function up when called, so a replacement of ``evidence.look`` (a test, a benchmark) is obeyed."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    def look(self, path: str, missed: bool = False) -> evidence.Look:
        return evidence.look(path, missed)

    def held_ctime(self, path: str) -> float | None:
        return evidence.held_ctime(path)

    def lstat(self, path: str) -> os.stat_result | None:
        return evidence.lstat_or_none(path)

    def stat(self, path: Any, follow_symlinks: bool = True) -> os.stat_result | None:
        try:
            return os.stat(path, follow_symlinks=follow_symlinks)
        except (OSError, TypeError, ValueError):
            return None

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except (OSError, ValueError):
            return None

    def created(self, path: str, st: os.stat_result) -> tuple[float, str]:
        return evidence.created(path, st)

    def own_last(self, path: str, within: bool = False) -> memory.Event | None:
        return memory.own_last(path, within=within)

    def wait_for(
        self, probe: Callable[[], T | None], budget_s: float, where: str | None = None
    ) -> tuple[T | None, float]:
        return evidence.wait_for_seen(probe, budget_s, where)

    # ``mounts``'s own function: every plain rmtree asks, and a method around it was one call more (issue 47)
    lookups_may_be_stale = staticmethod(mounts.lookups_may_be_stale)

    def generation_beside(self, path: str) -> str | None:
        return evidence.generation_beside(path)

    def job_tag(self, path: str, since: float | None = None) -> str | None:
        return evidence.job_tag_of(path, since)

    def made_by_this_rank(self, path: str) -> bool:
        launch = STATE.launch
        return launch is not None and evidence.made_by_rank(path, launch.rank)

    def made_alone(self, path: str) -> bool:
        launch, job = STATE.launch, STATE.job
        if launch is None or job is None:
            return False
        return journal.made_alone(path if path[:1] == "/" else os.path.abspath(path), job, launch.rank)

    def is_mount_point(self, path: str, st: os.stat_result) -> bool:
        return evidence.is_mount_point(path, st)

    def entries(self, path: str) -> int | None:
        try:
            return len(os.listdir(path))
        except OSError:
            return None


LIVE = Live()

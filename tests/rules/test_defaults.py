"""The rules under fsguard's own defaults, from both sides (issue 48): the other rules tests give no allowance
before the job's start (``fresh_s=0``); here the default ``FSGUARD_FRESH_S`` window is tested from the inside
(a directory made moments before the job's start is this job's) and from the outside, and the waits follow
``FSGUARD_SETTLE_S`` (its default, and another value), not a number of the rule's own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fsguard.guards import Rules, makedirs, mkdir, rename, symlink

from .fake import DEFAULTS, EEXIST, ENOENT, FakeWorld, assert_raised, decide, rules


def test_the_defaults_are_the_documented_ones() -> None:
    """What the rest of this file builds on (docs/configuration.md, generated from fsguard/config.py)."""
    assert (DEFAULTS.settle_s, DEFAULTS.fresh_s) == (2.0, 5.0)


def _born(tmp_path: Path, name: str, before_start_s: float) -> tuple[FakeWorld, Rules, str]:
    """A directory created ``before_start_s`` seconds before the job started (its birth time), under the
    default window."""
    numbers = rules(fresh_s=DEFAULTS.fresh_s)
    path = tmp_path / name
    path.mkdir()
    world = FakeWorld()
    world.births[str(path)] = numbers.job_start - before_start_s
    return world, numbers, str(path)


@pytest.mark.parametrize("op,rule", [("makedirs", makedirs), ("mkdir", mkdir)])
@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_a_directory_made_inside_the_default_window_before_the_start_is_a_peers(
    op: str, rule: object, share: float, tmp_path: Path
) -> None:
    """A peer that started a moment before this rank (clocks, launch order) made it: absorbed."""
    world, numbers, path = _born(tmp_path, "results", share * DEFAULTS.fresh_s)
    verdict = decide(rule, op, (path,), EEXIST, world, numbers)
    assert verdict.absorb and verdict.decision == "absorbed", verdict


@pytest.mark.parametrize("op,rule", [("makedirs", makedirs), ("mkdir", mkdir)])
@pytest.mark.parametrize("share", [1.1, 2.0, 100.0])
def test_a_directory_made_before_the_default_window_is_raised(
    op: str, rule: object, share: float, tmp_path: Path
) -> None:
    world, numbers, path = _born(tmp_path, "results", share * DEFAULTS.fresh_s)
    verdict = decide(rule, op, (path,), EEXIST, world, numbers)
    assert_raised(verdict, "directory created before this job started")


def _late_directory(tmp_path: Path, numbers: Rules) -> tuple[object, FakeWorld]:
    path = tmp_path / "results"
    world = FakeWorld(stale=True)
    world.peers.append(path.mkdir)
    return decide(makedirs, "makedirs", (str(path),), EEXIST, world, numbers), world


def _late_destination(tmp_path: Path, numbers: Rules) -> tuple[object, FakeWorld]:
    src, dst = str(tmp_path / "tmp-checkpoint"), str(tmp_path / "checkpoint")
    world = FakeWorld(stale=True)
    world.peers.append(lambda: os.mkdir(dst))
    return decide(rename, "rename", (src, dst), ENOENT, world, numbers), world


def _late_link(tmp_path: Path, numbers: Rules) -> tuple[object, FakeWorld]:
    link = tmp_path / "latest"
    world = FakeWorld()
    world.peers.append(lambda: os.symlink("target", link))
    return decide(symlink, "symlink", ("target", str(link)), EEXIST, world, numbers), world


SCENARIOS: dict[str, Callable[[Path, Rules], tuple[object, FakeWorld]]] = {
    "makedirs": _late_directory,
    "rename": _late_destination,
    "symlink": _late_link,
}


@pytest.mark.parametrize("settle_s", [DEFAULTS.settle_s, 0.7, 9.0])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_wait_is_bounded_by_the_settle_setting(scenario: str, settle_s: float, tmp_path: Path) -> None:
    """The peer's change shows late: waited for, within FSGUARD_SETTLE_S (its default, or what was set)."""
    verdict, world = SCENARIOS[scenario](tmp_path, rules(settle_s=settle_s))
    assert getattr(verdict, "absorb") and world.waits == [settle_s], (verdict, world.waits)  # noqa: B009


def test_the_window_is_relative_to_the_jobs_start(tmp_path: Path) -> None:
    """Inside the window by the job's start, not by now: a directory made 3 s before a start 100 s ago is a
    peer's; one made 3 s before now, in a job that starts later (clock ahead), is older than that job."""
    world, numbers, path = _born(tmp_path, "a", 0.6 * DEFAULTS.fresh_s)
    assert decide(makedirs, "makedirs", (path,), EEXIST, world, numbers).absorb
    later = rules(fresh_s=DEFAULTS.fresh_s, started_ago=-100.0)
    world = FakeWorld()
    (tmp_path / "b").mkdir()
    world.births[str(tmp_path / "b")] = time.time() - 0.6 * DEFAULTS.fresh_s
    assert_raised(
        decide(makedirs, "makedirs", (str(tmp_path / "b"),), EEXIST, world, later), "directory created before"
    )

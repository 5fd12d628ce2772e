"""The rule of ``os.remove``, ``os.unlink`` and ``os.rmdir`` (``fsguard/guards/remove.py``), row by row of its
README paragraph and docstring; every row runs for the three operations."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fsguard.guards import remove as rule
from fsguard.guards.remove import RECENT_S

from .fake import BEFORE_THE_JOB, ENOENT, FakeWorld, assert_raised, decide, rules

OPS = pytest.mark.parametrize("op", ["remove", "unlink", "rmdir"])


@OPS
def test_a_name_gone_from_a_directory_changed_moments_ago_is_absorbed(op: str, tmp_path: Path) -> None:
    (tmp_path / "build.o").write_text("x")
    (tmp_path / "build.o").unlink()  # the peer's removal changes the directory
    verdict = decide(rule, op, (str(tmp_path / "build.o"),), ENOENT, FakeWorld(), rules())
    assert verdict.absorb and "a peer removed it" in verdict.evidence, verdict


@OPS
def test_a_name_that_never_existed_in_a_directory_changed_moments_ago_is_absorbed_too(op: str, tmp_path: Path) -> None:
    """The documented deviation: a missing name leaves no trace of whether it ever existed."""
    (tmp_path / "other").write_text("x")
    verdict = decide(rule, op, (str(tmp_path / "never"),), ENOENT, FakeWorld(), rules())
    assert verdict.absorb, verdict


@OPS
def test_without_peers_it_is_raised(op: str, tmp_path: Path) -> None:
    """``FSGUARD=force`` alone, outside a job: every missing name is genuine."""
    verdict = decide(rule, op, (str(tmp_path / "build.o"),), ENOENT, FakeWorld(), rules(peers=False))
    assert not verdict.absorb and "no peers" in verdict.evidence, verdict


@OPS
def test_a_name_this_process_removed_or_moved_away_itself_is_raised(op: str, tmp_path: Path) -> None:
    for kind in ("removed", "moved-away"):
        world = FakeWorld()
        world.did(str(tmp_path / "build.o"), kind)
        verdict = decide(rule, op, (str(tmp_path / "build.o"),), ENOENT, world, rules())
        assert not verdict.absorb and "this process removed" in verdict.evidence, (kind, verdict)


@OPS
def test_a_directory_unchanged_during_the_job_is_raised(op: str, tmp_path: Path) -> None:
    verdict = decide(rule, op, (str(tmp_path / "build.o"),), ENOENT, FakeWorld(), rules(**BEFORE_THE_JOB))
    assert not verdict.absorb and "unchanged during this job" in verdict.evidence, verdict


@OPS
def test_a_directory_unchanged_for_longer_than_recent_s_is_raised(op: str, tmp_path: Path) -> None:
    world = FakeWorld()
    world.offset = RECENT_S + 5  # the directory changed (made) RECENT_S + 5 s "ago"
    verdict = decide(rule, op, (str(tmp_path / "build.o"),), ENOENT, world, rules(started_ago=1000))
    assert not verdict.absorb and "nobody removed it moments ago" in verdict.evidence, verdict


@OPS
def test_a_name_whose_directory_a_peer_removed_too_is_judged_by_the_directory_above(op: str, tmp_path: Path) -> None:
    """Every rank removing one build directory by hand: a peer removed the whole directory meanwhile."""
    (tmp_path / "x_CxxBuild").mkdir()
    (tmp_path / "x_CxxBuild").rmdir()
    verdict = decide(rule, op, (str(tmp_path / "x_CxxBuild" / "main.o"),), ENOENT, FakeWorld(), rules())
    assert verdict.absorb and "a peer removed the tree" in verdict.evidence, verdict


@OPS
def test_a_longer_chain_of_missing_directories_is_raised(op: str, tmp_path: Path) -> None:
    name = tmp_path / "a" / "b" / "c" / "main.o"  # a, b and c missing: more than UP_TO levels
    verdict = decide(rule, op, (str(name),), ENOENT, FakeWorld(), rules())
    assert not verdict.absorb and "parent directory is missing" in verdict.evidence, verdict


@OPS
def test_other_errors_are_raised(op: str, tmp_path: Path) -> None:
    for code in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EACCES, errno.EPERM):
        verdict = decide(rule, op, (str(tmp_path / "build.o"),), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision is None, (code, verdict)


@OPS
def test_dir_fd_calls_are_passed_through(op: str, tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        verdict = decide(rule, op, ("build.o",), ENOENT, FakeWorld(), rules(), dir_fd=fd)
    finally:
        os.close(fd)
    assert_raised(verdict, "")


@OPS
def test_an_empty_name_names_no_entry_and_is_raised(op: str, tmp_path: Path) -> None:
    verdict = decide(rule, op, ("",), ENOENT, FakeWorld(), rules())
    assert_raised(verdict, "")

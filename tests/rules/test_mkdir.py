"""``os.mkdir``'s rule (``fsguard/guards/mkdir.py``: the makedirs rule without ``exist_ok``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fsguard.guards import mkdir as rule

from .fake import BEFORE_THE_JOB, EEXIST, FakeWorld, assert_raised, decide, rules


def test_a_directory_a_peer_made_during_the_job_is_absorbed(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    verdict = decide(rule, "mkdir", (str(tmp_path / "d"),), EEXIST, FakeWorld(), rules())
    assert verdict.absorb and verdict.decision == "absorbed", verdict


def test_a_listed_directory_the_lookup_cache_misses_is_absorbed(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    world = FakeWorld(stale=True)
    world.cached[str(tmp_path / "d")] = None
    verdict = decide(rule, "mkdir", (str(tmp_path / "d"),), EEXIST, world, rules())
    assert verdict.absorb and "lookup cache" in verdict.evidence, verdict


def test_a_file_or_symlink_in_the_way_is_raised(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "l").symlink_to(tmp_path)
    for name in ("f", "l"):
        verdict = decide(rule, "mkdir", (str(tmp_path / name),), EEXIST, FakeWorld(), rules())
        assert_raised(verdict, "not a directory in its parent's listing")


def test_a_directory_older_than_the_job_is_raised(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    verdict = decide(rule, "mkdir", (str(tmp_path / "d"),), EEXIST, FakeWorld(), rules(**BEFORE_THE_JOB))
    assert_raised(verdict, "directory changed before this job started")


def test_a_directory_this_process_made_is_raised(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    world = FakeWorld()
    world.did(str(tmp_path / "d"), "made")
    verdict = decide(rule, "mkdir", (str(tmp_path / "d"),), EEXIST, world, rules())
    assert_raised(verdict, "this process made it (or found it there) itself")


def test_dir_fd_calls_are_passed_through(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        verdict = decide(rule, "mkdir", ("d",), EEXIST, FakeWorld(), rules(), dir_fd=fd)
    finally:
        os.close(fd)
    assert_raised(verdict, "")


def test_every_other_error_is_raised(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for code in (errno.EACCES, errno.ENOENT, errno.EPERM):
        verdict = decide(rule, "mkdir", (str(tmp_path / "d"),), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision is None, (code, verdict)

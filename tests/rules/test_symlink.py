"""``os.symlink``'s rule (``fsguard/guards/symlink.py``, sharing ``guards/_identical.py`` with ``os.link``)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from fsguard.guards import symlink as rule

from .fake import BEFORE_THE_JOB, DEFAULTS, EEXIST, FakeWorld, decide, rules


def test_an_identical_symlink_a_peer_made_during_the_job_is_absorbed(tmp_path: Path) -> None:
    os.symlink("target", tmp_path / "latest")
    verdict = decide(rule, "symlink", ("target", str(tmp_path / "latest")), EEXIST, FakeWorld(), rules())
    assert verdict.absorb and "identical symlink made by a peer" in verdict.evidence, verdict


def test_a_symlink_to_another_target_is_raised_also_the_same_target_spelt_differently(tmp_path: Path) -> None:
    os.symlink("./target", tmp_path / "latest")
    for wanted in ("other", "target"):
        verdict = decide(rule, "symlink", (wanted, str(tmp_path / "latest")), EEXIST, FakeWorld(), rules())
        assert not verdict.absorb and "another target" in verdict.evidence, (wanted, verdict)


def test_a_file_or_directory_in_the_way_is_raised(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    for name in ("f", "d"):
        verdict = decide(rule, "symlink", ("target", str(tmp_path / name)), EEXIST, FakeWorld(), rules())
        assert not verdict.absorb and "not a symlink" in verdict.evidence, (name, verdict)


def test_an_identical_symlink_older_than_the_job_is_raised(tmp_path: Path) -> None:
    os.symlink("target", tmp_path / "latest")
    verdict = decide(
        rule, "symlink", ("target", str(tmp_path / "latest")), EEXIST, FakeWorld(), rules(**BEFORE_THE_JOB)
    )
    assert not verdict.absorb and "older than the job" in verdict.evidence, verdict


def test_an_identical_symlink_created_before_the_job_by_its_birth_time_is_raised(tmp_path: Path) -> None:
    os.symlink("target", tmp_path / "latest")
    world = FakeWorld()
    world.births[str(tmp_path / "latest")] = time.time() - 10_000
    verdict = decide(rule, "symlink", ("target", str(tmp_path / "latest")), EEXIST, world, rules())
    assert not verdict.absorb, verdict


def test_an_identical_symlink_this_process_made_is_raised_until_it_changes(tmp_path: Path) -> None:
    os.symlink("target", tmp_path / "latest")
    ctime = os.lstat(tmp_path / "latest").st_ctime
    world = FakeWorld()
    world.did(str(tmp_path / "latest"), "made", ctime)
    verdict = decide(rule, "symlink", ("target", str(tmp_path / "latest")), EEXIST, world, rules())
    assert not verdict.absorb and "this process made it" in verdict.evidence, verdict
    world.did(str(tmp_path / "latest"), "made", ctime - 10)  # a peer made it again after this process's own
    verdict = decide(rule, "symlink", ("target", str(tmp_path / "latest")), EEXIST, world, rules())
    assert verdict.absorb, verdict


def test_a_link_a_refreshing_peer_removed_again_is_waited_for(tmp_path: Path) -> None:
    link = tmp_path / "latest"
    world = FakeWorld()
    world.peers.append(lambda: os.symlink("target", link))
    verdict = decide(rule, "symlink", ("target", str(link)), EEXIST, world, rules())
    assert verdict.absorb and verdict.waited_s > 0 and world.waits == [DEFAULTS.settle_s], verdict
    verdict = decide(rule, "symlink", ("target", str(tmp_path / "never")), EEXIST, FakeWorld(), rules())
    assert not verdict.absorb and "not back" in verdict.evidence, verdict


def test_dir_fd_calls_are_passed_through(tmp_path: Path) -> None:
    os.symlink("target", tmp_path / "latest")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        verdict = decide(rule, "symlink", ("target", "latest"), EEXIST, FakeWorld(), rules(), dir_fd=fd)
    finally:
        os.close(fd)
    assert not verdict.absorb, verdict


def test_every_other_error_is_raised(tmp_path: Path) -> None:
    os.symlink("target", tmp_path / "latest")
    for code in (errno.EACCES, errno.ENOENT, errno.EPERM):
        verdict = decide(rule, "symlink", ("target", str(tmp_path / "latest")), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision is None, (code, verdict)


def test_a_destination_given_with_a_trailing_separator_is_raised(tmp_path: Path) -> None:
    """``symlink("target", "latest/")`` can never make a symlink: an identical one there is no peer's result of
    this call (absorbed on e3a2108)."""
    os.symlink("target", tmp_path / "latest")
    for name in (str(tmp_path / "latest") + os.sep, os.fsencode(str(tmp_path / "latest") + os.sep)):
        verdict = decide(rule, "symlink", ("target", name), EEXIST, FakeWorld(), rules())
        assert not verdict.absorb and "trailing separator" in verdict.evidence, verdict

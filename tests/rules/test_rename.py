"""``os.rename``'s and ``os.replace``'s rule (``fsguard/guards/rename.py``), row by row of its README paragraph
and docstring; every row runs for both operations."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from fsguard.guards import rename as rule
from fsguard.guards.rename import OWN_SLACK_S

from .fake import BEFORE_THE_JOB, DEFAULTS, ENOENT, FakeWorld, decide, rules

OPS = pytest.mark.parametrize("op", ["rename", "replace"])


def _paths(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "staging"), str(tmp_path / "checkpoint-1")


@OPS
def test_source_gone_and_a_fresh_destination_is_absorbed(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    verdict = decide(rule, op, (src, dst), ENOENT, FakeWorld(), rules())
    assert verdict.absorb and "a peer did the same move" in verdict.evidence, verdict


@OPS
def test_a_source_published_again_by_a_peer_is_the_same_race(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    os.mkdir(src)  # a peer wrote the same colliding temp name again
    verdict = decide(rule, op, (src, dst), ENOENT, FakeWorld(), rules())
    assert verdict.absorb and "re-published" in verdict.evidence, verdict


@OPS
def test_a_file_a_peer_renamed_away_from_a_shared_name_written_in_place_is_a_hazard(op: str, tmp_path: Path) -> None:
    """Several ranks wrote one temp file in place (``blobs/<etag>.incomplete`` appended by two nodes) and a peer
    renamed it first: absorbed, but a ``hazard``, since the destination may hold every rank's writes mixed."""
    src, dst = str(tmp_path / "blob.incomplete"), str(tmp_path / "blob")
    Path(dst).write_bytes(b"xx")
    verdict = decide(rule, op, (src, dst), ENOENT, FakeWorld(), rules())
    assert verdict.absorb and verdict.decision == "hazard", verdict
    assert "their writes into it may be mixed" in verdict.evidence and verdict.detail == {"shared_source": "file"}


@OPS
def test_a_file_only_the_listing_shows_is_a_hazard_too(op: str, tmp_path: Path) -> None:
    src, dst = str(tmp_path / "blob.incomplete"), str(tmp_path / "blob")
    Path(dst).write_bytes(b"xx")
    world = FakeWorld(stale=True)
    world.cached[dst] = None  # a negative lookup cache: the listing says what it is
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert verdict.absorb and verdict.decision == "hazard", verdict


@OPS
def test_a_file_this_process_published_whole_under_the_shared_name_stays_absorbed(op: str, tmp_path: Path) -> None:
    """A compiler cache writes a private temp and renames it onto the shared temp name (atomic): each rank's
    build stays whole, whichever the peer moved; the destination is one rank's, not a mixture."""
    src, dst = str(tmp_path / "kernel.so.tmp"), str(tmp_path / "kernel.so")
    Path(dst).write_bytes(b"build")
    world = FakeWorld()
    world.did(src, "made", time.time())  # this process's own rename of its private temp onto the name
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert verdict.absorb and verdict.decision == "absorbed", verdict


@OPS
def test_a_directory_a_peer_renamed_first_stays_absorbed(op: str, tmp_path: Path) -> None:
    """``tmp-checkpoint-N``: each rank's own files in one shared directory; nothing mixed."""
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    (Path(dst) / "rng_state_1.pth").write_bytes(b"x")
    verdict = decide(rule, op, (src, dst), ENOENT, FakeWorld(), rules())
    assert verdict.absorb and verdict.decision == "absorbed", verdict


@OPS
def test_a_destination_a_shared_filesystem_shows_late_is_waited_for(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    world = FakeWorld(stale=True)
    world.peers.append(lambda: os.mkdir(dst))
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert verdict.absorb and "appeared" in verdict.evidence and world.waits == [DEFAULTS.settle_s], verdict


@OPS
def test_a_destination_only_the_listing_shows_is_a_peers_move_moments_ago(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld(stale=True)
    world.cached[dst] = None  # a negative lookup cache
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert verdict.absorb and "not yet in this node's lookup cache" in verdict.evidence, verdict


@OPS
def test_an_unseen_destination_after_this_processs_own_move_cannot_be_told_and_is_raised(
    op: str, tmp_path: Path
) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld(stale=True)
    world.cached[dst] = None
    world.did(dst, "made", time.time())
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert not verdict.absorb and "cannot tell whose" in verdict.evidence, verdict


@OPS
def test_an_unseen_destination_after_this_processs_own_move_elsewhere_is_a_peers_move(op: str, tmp_path: Path) -> None:
    """A staging dir this process committed to ``checkpoint-1`` (or lost to a peer there, absorbed: remembered as
    its own move), made again, then committed by a peer to ``checkpoint-2``, which this node's negative lookup
    cache still misses: the earlier move elsewhere says nothing about who made this destination."""
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld(stale=True)
    world.cached[dst] = None
    world.did(src, "moved-away", time.time() - 0.05)
    world.did(str(tmp_path / "checkpoint-0"), "made", time.time() - 0.05)
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert verdict.absorb and "not yet in this node's lookup cache" in verdict.evidence, verdict


@OPS
def test_a_source_this_process_moved_away_itself_is_raised(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld()
    world.did(src, "moved-away")
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert not verdict.absorb and "moved the source away itself" in verdict.evidence, verdict


@OPS
def test_a_destination_last_changed_by_this_processs_own_move_is_raised(op: str, tmp_path: Path) -> None:
    """A per-rank ``replace(f"state.{step}.tmp", "state.latest")`` whose writer produced nothing."""
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld()
    world.did(dst, "made", os.lstat(dst).st_ctime)
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert not verdict.absorb and "this process's own move onto it" in verdict.evidence, verdict


@OPS
def test_own_move_of_the_source_and_onto_the_destination_unchanged_since_is_raised(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    ctime = os.lstat(dst).st_ctime
    world = FakeWorld()
    world.did(dst, "made", ctime - 2 * OWN_SLACK_S)
    world.did(src, "moved-away", ctime)
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert not verdict.absorb and "moved the source away itself" in verdict.evidence, verdict


@OPS
def test_a_rotation_reusing_one_temp_name_is_a_peers_later_move(op: str, tmp_path: Path) -> None:
    """``replace(latest.tmp, latest)`` every step: the destination changed well after this process's own move."""
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld()
    world.did(dst, "made", os.lstat(dst).st_ctime - 5 * OWN_SLACK_S)
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert verdict.absorb and "after this process's own move" in verdict.evidence, verdict


@OPS
def test_source_and_destination_both_missing_is_raised_after_the_wait(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    world = FakeWorld()
    world.peers.append(lambda: None)
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules())
    assert not verdict.absorb and "destination absent" in verdict.evidence, verdict


@OPS
def test_a_destination_older_than_the_job_is_raised(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    verdict = decide(rule, op, (src, dst), ENOENT, FakeWorld(), rules(**BEFORE_THE_JOB))
    assert not verdict.absorb and "older than the job" in verdict.evidence, verdict


@OPS
def test_a_missing_destination_parent_is_raised(op: str, tmp_path: Path) -> None:
    src, dst = str(tmp_path / "staging"), str(tmp_path / "gone" / "checkpoint-1")
    verdict = decide(rule, op, (src, dst), ENOENT, FakeWorld(), rules())
    assert not verdict.absorb and "parent is missing" in verdict.evidence, verdict


@OPS
def test_directory_descriptor_calls_are_passed_through(op: str, tmp_path: Path) -> None:
    os.mkdir(tmp_path / "checkpoint-1")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        verdict = decide(rule, op, ("staging", "checkpoint-1"), ENOENT, FakeWorld(), rules(), src_dir_fd=fd)
    finally:
        os.close(fd)
    assert not verdict.absorb and "passed through" in verdict.evidence, verdict


@OPS
def test_a_directory_onto_a_non_empty_directory_is_a_conflict(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(src)
    os.mkdir(dst)
    (Path(dst) / "shard").write_text("x")
    for code in (errno.ENOTEMPTY, errno.EEXIST):
        verdict = decide(rule, op, (src, dst), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision == "conflict" and verdict.detail == {"src": src, "dst": dst}


@OPS
def test_eexist_on_a_stale_entry_of_a_source_gone_from_the_listing_is_a_missing_source(op: str, tmp_path: Path) -> None:
    """GlusterFS: this node's stale entry of ``staging`` named the directory a peer already moved."""
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    verdict = decide(rule, op, (src, dst), errno.EEXIST, FakeWorld(stale=True), rules())
    assert verdict.absorb and "stale entry" in verdict.evidence, verdict


@OPS
def test_every_other_error_is_raised(op: str, tmp_path: Path) -> None:
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    for code in (errno.EACCES, errno.EXDEV, errno.ENOTDIR, errno.EISDIR):
        verdict = decide(rule, op, (src, dst), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision is None, (code, verdict)


@OPS
def test_a_trailing_separator_names_a_directory_and_a_file_there_is_raised(op: str, tmp_path: Path) -> None:
    """``rename("gone/", "there/")`` moves only a directory: a file at the destination is no peer's identical
    move (absorbed on e3a2108); a directory there still is."""
    src, dst = _paths(tmp_path)
    Path(dst).write_text("x")
    for args in [(src + os.sep, dst + os.sep), (src + os.sep, dst), (src, os.fsencode(dst + os.sep))]:
        verdict = decide(rule, op, args, ENOENT, FakeWorld(), rules())
        assert not verdict.absorb and "trailing separator" in verdict.evidence, (args, verdict)
    os.remove(dst)
    os.mkdir(dst)
    verdict = decide(rule, op, (src + os.sep, dst + os.sep), ENOENT, FakeWorld(), rules())
    assert verdict.absorb, verdict


@OPS
def test_the_journal_is_asked_from_the_destinations_birth(op: str, tmp_path: Path) -> None:
    """Source gone, a directory at the destination: whose it is, by the journal's entries since its birth (less the
    skew allowance). An older entry named an earlier directory at that path, removed since."""
    src, dst = _paths(tmp_path)
    os.mkdir(dst)
    world = FakeWorld()
    born = time.time() - 1
    world.births[dst] = born
    verdict = decide(rule, op, (src, dst), ENOENT, world, rules(fresh_s=5.0))
    assert verdict.absorb, verdict
    assert world.since == [born - 5.0], world.since

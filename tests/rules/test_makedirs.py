"""``os.makedirs``'s rule (``fsguard/guards/makedirs.py``), row by row of its README paragraph and docstring."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from fsguard.guards import BIRTH_SLACK_S
from fsguard.guards import makedirs as rule

from .fake import BEFORE_THE_JOB, DEFAULTS, EEXIST, FakeWorld, assert_raised, decide, rules


def test_a_directory_a_peer_made_during_the_job_is_absorbed(tmp_path: Path) -> None:
    path = tmp_path / "results"
    path.mkdir()
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, FakeWorld(), rules())
    assert verdict.absorb and verdict.decision == "absorbed" and "by a peer" in verdict.evidence, verdict


def test_a_file_in_the_way_is_raised_at_once(tmp_path: Path) -> None:
    path = tmp_path / "results"
    path.write_text("x")
    world = FakeWorld()
    world.peers.append(lambda: None)  # nothing to wait for: the listing already shows a file
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules())
    assert not verdict.absorb and verdict.decision is None and verdict.waited_s == 0.0, verdict


def test_a_symlink_in_the_way_is_raised(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "results").symlink_to(tmp_path / "target")
    verdict = decide(rule, "makedirs", (str(tmp_path / "results"),), EEXIST, FakeWorld(), rules())
    assert_raised(verdict, "not a directory in its parent's listing")


def test_a_directory_older_than_the_job_is_raised(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    verdict = decide(rule, "makedirs", (str(tmp_path / "results"),), EEXIST, FakeWorld(), rules(**BEFORE_THE_JOB))
    assert not verdict.absorb and "before this job started" in verdict.evidence, verdict


def test_the_birth_time_decides_where_the_filesystem_keeps_one(tmp_path: Path) -> None:
    """Created long ago, changed moments ago (its ctime is fresh): not a peer's new directory."""
    path = tmp_path / "results"
    path.mkdir()
    world = FakeWorld()
    world.births[str(path)] = time.time() - 10_000
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules())
    assert not verdict.absorb and "created before this job started" in verdict.evidence, verdict


def test_the_journal_is_read_from_the_directory_birth_less_the_skew_allowance(tmp_path: Path) -> None:
    """Entries older than the birth (less ``fresh_s``, at least 2 s) named an earlier directory at the path."""
    path = tmp_path / "results"
    path.mkdir()
    world = FakeWorld()
    born = time.time() - 30
    world.births[str(path)] = born
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules(fresh_s=DEFAULTS.fresh_s))
    assert verdict.absorb, verdict
    assert world.since == [born - max(DEFAULTS.fresh_s, BIRTH_SLACK_S)], world.since


def test_a_birth_after_our_now_reads_the_journal_from_now(tmp_path: Path) -> None:
    """The file server's clock is a minute ahead of ours. Its birth time would hide this job's own notes, made
    seconds ago by our clock: the journal is read from our now, less the same allowance."""
    path = tmp_path / "results"
    path.mkdir()
    world = FakeWorld()
    world.births[str(path)] = time.time() + 60
    before = time.time()
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules(fresh_s=DEFAULTS.fresh_s))
    assert verdict.absorb, verdict
    [since] = world.since
    allowance = max(DEFAULTS.fresh_s, BIRTH_SLACK_S)
    assert since is not None and before - allowance <= since <= time.time() - allowance, (since, before)


def test_a_directory_this_process_made_or_found_itself_is_raised(tmp_path: Path) -> None:
    """``makedirs`` twice (and ``copytree(dirs_exist_ok=False)``) behave as without fsguard."""
    for kind in ("made", "made-shared", "found"):
        path = tmp_path / kind
        path.mkdir()
        world = FakeWorld()
        world.did(str(path), kind)
        verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules())
        assert not verdict.absorb and "this process made it" in verdict.evidence, (kind, verdict)


def test_a_directory_this_process_made_something_below_is_raised(tmp_path: Path) -> None:
    (tmp_path / "results" / "run-1").mkdir(parents=True)
    world = FakeWorld()
    world.did(str(tmp_path / "results" / "run-1"), "made")
    verdict = decide(rule, "makedirs", (str(tmp_path / "results"),), EEXIST, world, rules())
    assert_raised(verdict, "this process made it (or found it there) itself")


def test_exist_ok_a_stale_lookup_of_a_listed_directory_is_absorbed(tmp_path: Path) -> None:
    """exist_ok=True: the lookup said "missing" (cached), the fresh listing shows a directory."""
    path = tmp_path / "results"
    path.mkdir()
    world = FakeWorld(stale=True)
    world.cached[str(path)] = None
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules(), exist_ok=True)
    assert verdict.absorb and "lookup cache was stale" in verdict.evidence, verdict


def test_exist_ok_a_file_in_the_listing_is_raised(tmp_path: Path) -> None:
    (tmp_path / "results").write_text("x")
    verdict = decide(rule, "makedirs", (str(tmp_path / "results"), 0o777, True), EEXIST, FakeWorld(), rules())
    assert not verdict.absorb and "not a directory" in verdict.evidence, verdict


def test_a_listed_directory_the_lookup_cache_misses_is_absorbed(tmp_path: Path) -> None:
    path = tmp_path / "results"
    path.mkdir()
    world = FakeWorld(stale=True)
    world.cached[str(path)] = None
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules())
    assert verdict.absorb and "missing from this node's lookup cache" in verdict.evidence, verdict


def test_a_directory_the_listing_shows_a_moment_later_is_waited_for(tmp_path: Path) -> None:
    """GlusterFS: mkdir's EEXIST comes before the parent's listing shows the peer's directory."""
    path = tmp_path / "results"
    world = FakeWorld(stale=True)
    world.peers.append(path.mkdir)
    verdict = decide(rule, "makedirs", (str(path),), EEXIST, world, rules())
    assert verdict.absorb and verdict.waited_s > 0 and "listed" in verdict.evidence, verdict
    assert world.waits == [DEFAULTS.settle_s], world.waits  # bounded by FSGUARD_SETTLE_S


def test_every_other_error_is_raised(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    for code in (errno.EACCES, errno.ENOENT, errno.ENOTDIR, errno.EROFS):
        verdict = decide(rule, "makedirs", (str(tmp_path / "results"),), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision is None, (code, verdict)


def test_the_path_is_read_as_the_call_gave_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyword, relative and bytes spellings name the same directory (``x/..`` as the kernel reads it: ``x``
    exists, as the real ``makedirs`` would have made it)."""
    (tmp_path / "results").mkdir()
    (tmp_path / "x").mkdir()
    monkeypatch.chdir(tmp_path)
    for args, kwargs in (((), {"name": "results"}), ((b"results",), {}), (("./x/../results",), {})):
        verdict = decide(rule, "makedirs", args, EEXIST, FakeWorld(), rules(), **kwargs)
        assert verdict.absorb, (args, kwargs, verdict)

"""``shutil.rmtree``'s decisions (``fsguard/guards/rmtree.py``; the walk that asks them is ``fsguard.rmwalk``),
row by row of the README paragraphs on rmtree and of the module's docstring."""

from __future__ import annotations

import errno
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fsguard import rmwalk
from fsguard.calls import Call
from fsguard.evidence import Look
from fsguard.guards import Rules
from fsguard.guards import rmtree as rule
from fsguard.guards.rmtree import RmtreeVerdict

from .fake import BEFORE_THE_JOB, DEFAULTS, FakeWorld, rules

YIELD_S = 1.0


def _plan(tmp_path: Path, own: str | None = None, world: FakeWorld | None = None, **numbers: float) -> str:
    top = tmp_path / "tmp-checkpoint-10"
    top.mkdir(exist_ok=True)
    return rule.plan(str(top), os.lstat(top), own, world or FakeWorld(), rules(**numbers), YIELD_S)


def test_a_fresh_tree_this_process_did_not_make_waits_for_a_peers_rename(tmp_path: Path) -> None:
    assert _plan(tmp_path) == "wait"


def test_a_tree_made_with_makedirs_exist_ok_waits_too(tmp_path: Path) -> None:
    """A name every rank makes: whoever came first made it, which says nothing about who commits it."""
    assert _plan(tmp_path, own="made-shared") == "wait"


def test_a_tree_another_process_of_this_rank_made_is_removed_at_once_with_checks(tmp_path: Path) -> None:
    """The journal names this rank as its maker: a child of this process (a ``multiprocessing.Pool``'s) made it, not a peer.
    Flipped: made by this process with ``exist_ok=True`` (maybe first of several ranks), the window stays."""
    world = FakeWorld()
    world.this_rank.add(str(tmp_path / "tmp-checkpoint-10"))
    assert _plan(tmp_path, world=world) == "check"
    assert _plan(tmp_path, own="made-shared", world=world) == "wait"


def test_a_tree_this_rank_made_alone_is_removed_plain_where_the_journal_sees_every_peer(tmp_path: Path) -> None:
    """Issue 47: this rank made the tree (this process with ``exist_ok=True``, or its Pool's children) and no process
    of another rank made it or tried to (``World.made_alone``), on a node-local mount or in a single-node job: no
    window and no checks, its memory not even asked. Flipped: a peer tried to make it (not alone), or the mount is
    shared in a job on several nodes (a peer there notes in its own node's journal): the window, as before."""
    top = tmp_path / "eval_tmp"
    top.mkdir()

    def unasked() -> str | None:
        raise AssertionError("this process's memory was asked")

    alone = FakeWorld()
    alone.alone.add(str(top))
    assert rule.plan(str(top), os.lstat(top), unasked, alone, rules(), YIELD_S) == "plain"
    assert rule.plan(str(top), os.lstat(top), "made-shared", FakeWorld(), rules(), YIELD_S) == "wait"  # a peer tried
    shared = FakeWorld(stale=True)
    shared.alone.add(str(top))
    assert rule.plan(str(top), os.lstat(top), "made-shared", shared, rules(), YIELD_S) == "wait"  # several nodes
    one_node = Rules(settle_s=1.0, fresh_s=0.0, job_start=time.time() - 100, peers=True, job="RUN=1;host=n0")
    assert rule.plan(str(top), os.lstat(top), unasked, shared, one_node, YIELD_S) == "plain"


def test_the_tops_device_is_read_only_in_a_job_of_several_nodes(tmp_path: Path) -> None:
    """Issue 47: the short course reads the held top's ``fstat`` only when ``plain_at_once`` asks its device, which it
    does only in a job of several nodes (is its mount node-local?). Flipped: a job tagged without a host asks it, and
    the answer (a shared mount) decides."""
    top = tmp_path / "eval_tmp"
    top.mkdir()
    asked: list[str] = []

    class Device:
        @property
        def st_dev(self) -> int:
            asked.append("st_dev")
            return os.lstat(top).st_dev

    shared = FakeWorld(stale=True)
    shared.alone.add(str(top))
    one_node = Rules(settle_s=1.0, fresh_s=0.0, job_start=time.time() - 100, peers=True, job="RUN=1;host=n0")
    assert one_node.single_node and rule.plain_at_once(str(top), Device(), shared, one_node)
    assert asked == []
    several = Rules(settle_s=1.0, fresh_s=0.0, job_start=time.time() - 100, peers=True, job="RUN=1")
    assert not several.single_node and not rule.plain_at_once(str(top), Device(), shared, several)
    assert asked == ["st_dev"]
    assert several == Rules(1.0, 0.0, several.job_start, True, several.job_start_source, "RUN=1")  # not a field


def test_this_processs_own_scratch_path_is_removed_at_once_with_checks(tmp_path: Path) -> None:
    """Where this process already removed a tree of its own made with ``exist_ok=True`` after a window no peer used,
    the next such tree at that path is its scratch. Flipped: the same path made by a peer still waits."""
    top = tmp_path / "eval_tmp"
    top.mkdir()
    assert rule.plan(str(top), os.lstat(top), "made-shared", FakeWorld(), rules(), YIELD_S, True) == "check"
    assert rule.plan(str(top), os.lstat(top), None, FakeWorld(), rules(), YIELD_S, True) == "wait"
    assert rule.plan(str(top), os.lstat(top), "made-shared", FakeWorld(), rules(), YIELD_S, False) == "wait"


def test_the_journal_is_asked_from_the_trees_birth_where_the_filesystem_keeps_one(tmp_path: Path) -> None:
    """A fresh tree at a path an earlier job of this node made and removed: the journal's entries older than the tree's
    birth (less the skew allowance) named that earlier directory. Only the newer ones are asked for: where none names
    the path, not every journal of the node is read, whole."""
    top = tmp_path / "tmp-checkpoint-5"
    top.mkdir()
    world = FakeWorld()
    born = time.time() - 3
    world.births[str(top)] = born
    assert rule.plan(str(top), os.lstat(top), None, world, rules(fresh_s=5.0), YIELD_S) == "wait"
    assert world.since == [born - 5.0], world.since
    unborn = FakeWorld()  # no birth time (NFS, most FUSE filesystems): every entry counts, as before
    assert rule.plan(str(top), os.lstat(top), None, unborn, rules(fresh_s=5.0), YIELD_S) == "wait"
    assert unborn.since == [None], unborn.since


def test_a_tree_this_process_claimed_alone_is_removed_at_once_without_checks(tmp_path: Path) -> None:
    assert _plan(tmp_path, own="made") == "plain"  # mkdir, makedirs without exist_ok, mkdtemp


def test_in_a_job_without_peers_the_walk_is_plain(tmp_path: Path) -> None:
    top = tmp_path / "t"
    top.mkdir()
    assert rule.plan(str(top), os.lstat(top), None, FakeWorld(), rules(peers=False), YIELD_S) == "plain"


def test_a_tree_older_than_the_job_is_removed_at_once_with_checks(tmp_path: Path) -> None:
    assert _plan(tmp_path, **BEFORE_THE_JOB) == "check"


def test_with_the_window_off_the_walk_is_checked_at_once(tmp_path: Path) -> None:
    top = tmp_path / "t"
    top.mkdir()
    assert rule.plan(str(top), os.lstat(top), None, FakeWorld(), rules(), 0.0) == "check"


def test_an_old_generation_of_a_rotation_is_removed_at_once(tmp_path: Path) -> None:
    """A Trainer's ``save_total_limit`` removing ``checkpoint-8`` beside ``checkpoint-10``; and, with
    ``load_best_model_at_end``, ``checkpoint-10`` beside the kept best ``checkpoint-8`` (transformers 4.25.1).
    A generation alone in its directory (no rotation to tell) still waits."""
    (tmp_path / "checkpoint-8").mkdir()
    (tmp_path / "checkpoint-10").mkdir()
    top = str(tmp_path / "checkpoint-8")
    assert rule.plan(top, os.lstat(top), None, FakeWorld(), rules(), YIELD_S) == "plain"
    top = str(tmp_path / "checkpoint-10")
    assert rule.plan(top, os.lstat(top), None, FakeWorld(), rules(), YIELD_S) == "plain"
    (tmp_path / "checkpoint-8").rmdir()
    assert rule.plan(top, os.lstat(top), None, FakeWorld(), rules(), YIELD_S) == "wait"


def test_a_mount_point_is_removed_at_once(tmp_path: Path) -> None:
    world = FakeWorld()
    world.mount_points.add(str(tmp_path / "tmp-checkpoint-10"))
    assert _plan(tmp_path, world=world) == "plain"


def test_a_top_that_is_no_directory_is_checked(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert rule.plan(str(tmp_path / "f"), os.lstat(tmp_path / "f"), None, FakeWorld(), rules(), YIELD_S) == "check"
    assert rule.plan(str(tmp_path / "gone"), None, None, FakeWorld(), rules(), YIELD_S) == "check"


def test_a_tree_moved_away_in_the_window_is_yielded_to_the_rename() -> None:
    verdict = rule.yielded("/j/staging", 0.3, "(its name left the fresh listing)", "/j/checkpoint-2")
    assert verdict.absorb and verdict.decision == "yielded" and verdict.detail == {"renamed_to": "/j/checkpoint-2"}
    verdict = rule.yielded("/j/staging", 0.3, "(its name left the fresh listing)", None)
    assert verdict.absorb and verdict.decision == "absorbed" and "removed by a peer" in verdict.evidence


def test_a_tree_moved_mid_walk_is_left_alone_with_a_hazard_naming_what_was_removed() -> None:
    removed = [f"/j/staging/shard-{i}" for i in range(60)]
    verdict = rule.moved_mid_walk("/j/staging", "/j/checkpoint-2", removed, 0.0)
    assert verdict.absorb and verdict.decision == "hazard" and "/j/checkpoint-2" in verdict.evidence
    assert verdict.detail["removed_count"] == 60 and len(verdict.detail["removed"]) == rule.REMOVED_SHOWN
    assert "and 10 more" in verdict.evidence


def test_a_peer_tree_nobody_moved_within_the_window_is_removed_with_a_hazard() -> None:
    verdict = rule.removed_peer_tree("/j/staging", 1.0, None)
    assert verdict.absorb and verdict.decision == "hazard" and "FSGUARD_YIELD_S" in verdict.evidence
    assert verdict.detail == {"not_moved_within_s": 1.0}
    verdict = rule.removed_peer_tree("/j/staging", 1.0, None, made_here=True)
    assert verdict.detail["made_here"] is True and "exist_ok=True" in verdict.evidence


def test_entries_a_peer_removed_first_are_absorbed_and_the_error_is_typed() -> None:
    error = FileNotFoundError(errno.ENOENT, "gone", "shard-1")
    verdict = rule.walk_verdict(["/j/t/shard-1"], [], None, None, 0.0, error, FakeWorld())
    assert verdict is not None and verdict.absorb and "1 entry removed by a peer first" in verdict.evidence
    assert verdict.error is error and verdict.top_gone is None and "error" not in verdict.detail


def test_a_top_already_gone_before_the_walk_is_absorbed_and_says_so() -> None:
    error = FileNotFoundError(errno.ENOENT, "gone", "/j/t")
    verdict = rule.walk_verdict([], [], "before", None, 0.0, error, FakeWorld())
    assert verdict is not None and verdict.absorb and verdict.top_gone == "before" and verdict.error is error
    assert "tree already removed" in verdict.evidence and verdict.detail["top_gone"] == "before"


def test_a_top_a_peer_removed_at_the_end_is_absorbed(tmp_path: Path) -> None:
    verdict = rule.walk_verdict([], [], "after", None, 0.0, None, FakeWorld())
    assert verdict is not None and verdict.absorb and "removed by a peer at the end" in verdict.evidence


def test_a_top_a_peer_renamed_at_the_end_is_a_hazard_counting_what_is_left(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "shard").write_text("x")
    renamed = str(tmp_path / "checkpoint-2")
    verdict = rule.walk_verdict(["/j/t/a"], [], "after", renamed, 0.0, None, FakeWorld())
    assert verdict is not None and verdict.decision == "hazard" and "still there: 1 entry" in verdict.evidence


def test_directories_that_gained_entries_mid_walk_and_were_removed_again_are_absorbed() -> None:
    verdict = rule.walk_verdict([], ["/j/t/d"], None, None, 0.1, None, FakeWorld())
    assert verdict is not None and verdict.absorb and "1 directory gained entries" in verdict.evidence


def test_a_walk_that_absorbed_nothing_has_no_verdict() -> None:
    assert rule.walk_verdict([], [], None, None, 0.0, None, FakeWorld()) is None


def test_a_missing_top_whose_parent_changed_during_the_job_was_a_peers_removal(tmp_path: Path) -> None:
    top = str(tmp_path / "step-1")
    assert rule.top_gone_before_by_peer(top, FakeWorld(), rules()) == (True, 0.0)


def test_a_missing_top_this_process_removed_or_moved_itself_is_not_a_peers(tmp_path: Path) -> None:
    for kind in ("removed", "moved-away"):
        world = FakeWorld()
        world.did(str(tmp_path / "step-1"), kind)
        assert rule.top_gone_before_by_peer(str(tmp_path / "step-1"), world, rules()) == (False, 0.0)
        assert rule.escaped_gone(str(tmp_path / "step-1"), world, rules()) == (False, 0.0)


def test_a_missing_top_under_a_parent_unchanged_during_the_job_is_not_a_peers(tmp_path: Path) -> None:
    gone, _ = rule.top_gone_before_by_peer(str(tmp_path / "step-1"), FakeWorld(), rules(**BEFORE_THE_JOB))
    assert not gone


class Held(FakeWorld):
    """A fake world that holds a change time for the parent (``statx`` without a request) and has no ``lstat``."""

    def __init__(self, held: float) -> None:
        super().__init__()
        self.held = held

    def held_ctime(self, path: str) -> float | None:
        return self.held

    def lstat(self, path: str) -> os.stat_result | None:
        return None


def test_a_held_change_time_during_the_job_decides_without_asking_again(tmp_path: Path) -> None:
    """A held ctime is older than the truth, never newer: one during the job is enough; one before it is not (the
    parent's own ``lstat`` then decides: here it has none, so the top is not taken as a peer's removal)."""
    top = str(tmp_path / "step-1")
    assert rule.top_gone_before_by_peer(top, Held(time.time()), rules(), missed=True) == (True, 0.0)
    assert rule.top_gone_before_by_peer(top, Held(0.0), rules(), missed=True) == (False, 0.0)


def test_a_stale_lookup_of_a_top_still_listed_waits_for_the_listing(tmp_path: Path) -> None:
    """A lookup cache says "missing" while peers still delete the tree: wait (bounded) for the listing."""
    top = tmp_path / "step-1"
    top.mkdir()
    world = FakeWorld(stale=True)
    world.peers.append(top.rmdir)
    gone, waited = rule.top_gone_before_by_peer(str(top), world, rules())
    assert gone and waited > 0 and world.waits == [DEFAULTS.settle_s]
    top.mkdir()
    gone, _ = rule.top_gone_before_by_peer(str(top), FakeWorld(), rules())  # still listed, nothing changes
    assert not gone


def test_an_escaped_file_not_found_is_absorbed_only_when_the_tree_is_gone(tmp_path: Path) -> None:
    assert rule.escaped_gone(str(tmp_path / "t"), FakeWorld(), rules())[0]
    (tmp_path / "t").mkdir()
    assert not rule.escaped_gone(str(tmp_path / "t"), FakeWorld(), rules())[0]


def test_an_entry_gone_mid_walk_is_a_peers_removal_only_in_a_job_with_peers() -> None:
    """A lone process (``FSGUARD=force`` outside a launcher) gets the standard error at once."""
    assert rule.entry_gone_by_peer(rules()) and not rule.entry_gone_by_peer(rules(peers=False))


def test_the_walk_stops_to_wait_for_the_peer_at_the_first_vanished_entry() -> None:
    assert rule.settle_on_vanishing(1) and not rule.settle_on_vanishing(0)


# --- whole walks (``fsguard.rmwalk.run``) in-process: a real tree, the world's answers faked -----------------
# Each test runs the walk with a world answer and with it flipped (a parameter, or two calls): the world decides.


class Meanwhile(FakeWorld):
    """A fake world whose peers act while this process looks: each ``look`` lets the next scripted peer step
    happen first (the walk's waits ask ``look``)."""

    def look(self, path: str, missed: bool = False) -> Look:
        if self.peers:
            self.peers.pop(0)()
        return super().look(path, missed)


def _tree(top: Path) -> Path:
    """``top`` with two directories of three files each."""
    for d in ("a", "b"):
        (top / d).mkdir(parents=True)
        for f in ("f1", "f2", "f3"):
            (top / d / f).write_text("x")
    return top


def _files(top: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(top))


def _walk(top: Path, world: FakeWorld, numbers: Rules | None = None, yield_s: float = 0.0) -> RmtreeVerdict | None:
    """One guarded ``shutil.rmtree(top)`` as fsguard runs it, asking ``world``."""
    call = Call("rmtree", (str(top),), {})
    use_onexc = sys.version_info >= (3, 12)
    return rmwalk.run(shutil.rmtree, call, world, numbers or rules(), use_onexc, yield_s)


def _after_unlink(monkeypatch: pytest.MonkeyPatch, nth: int, peer: Callable[[], None]) -> None:
    """A peer acts once, right after the walk's ``nth`` unlink: a real change to the real tree."""
    real, done = os.unlink, [0]

    def unlink(path: Any, *, dir_fd: int | None = None) -> None:
        real(path, dir_fd=dir_fd)
        done[0] += 1
        if done[0] == nth:
            peer()

    monkeypatch.setattr(os, "unlink", unlink)


@pytest.mark.parametrize("claimed", [False, True])
def test_a_walk_stops_at_a_peers_rename_mid_walk_and_leaves_the_moved_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claimed: bool
) -> None:
    """The rename wins: the walk stops at its next step, a hazard names where the tree went and what was removed.
    Flipped: where the world says this process claimed the tree alone (``mkdir``), the walk is plain, and the
    standard walk goes on inside the moved tree (its descriptors): what a peer moved is emptied."""
    top, moved = _tree(tmp_path / "tmp-checkpoint-2"), tmp_path / "checkpoint-2"
    _after_unlink(monkeypatch, 1, lambda: os.rename(top, moved))
    world = FakeWorld()
    if claimed:
        world.did(str(top), "made")
    verdict = _walk(top, world)
    assert verdict is not None and verdict.absorb and verdict.decision == "hazard"
    assert verdict.detail["renamed_to"] == str(moved) and not top.exists()
    if claimed:
        assert _files(moved) == 0 and "may be missing entries" in verdict.evidence
    else:
        assert _files(moved) == 5 and verdict.detail["removed_count"] == 1
        assert "stopped and left it there" in verdict.evidence


def _peer_removes_the_files(top: Path) -> Callable[[], None]:
    real_unlink = os.unlink  # not the test's own hook

    def peer() -> None:
        for where, _, files in os.walk(top):
            for name in files:
                real_unlink(os.path.join(where, name))

    return peer


@pytest.mark.parametrize("peer_finishes", [False, True])
def test_an_entry_a_peer_removed_mid_walk_is_absorbed_and_the_walk_waits_for_the_peer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer_finishes: bool
) -> None:
    """At the first vanished entry the walk stops and waits for the peer removing the same tree (asking the world
    whether the tree's name left the listing). Flipped: where the peer goes on meanwhile, the peer's removal ends
    the call; where it does not, the walk resumes and removes the rest itself."""
    top = _tree(tmp_path / "t")
    _after_unlink(monkeypatch, 1, _peer_removes_the_files(top))
    world = Meanwhile()
    if peer_finishes:
        world.peers.append(lambda: shutil.rmtree(top))
    verdict = _walk(top, world, rules(settle_s=0.2))
    assert verdict is not None and verdict.absorb and verdict.decision == "absorbed" and not top.exists()
    assert "1 entry removed by a peer first" in verdict.evidence
    assert isinstance(verdict.error, FileNotFoundError)
    if peer_finishes:
        assert verdict.top_gone == "after" and "top directory removed by a peer at the end" in verdict.evidence
        assert verdict.waited_s < 0.2
    else:
        assert verdict.top_gone is None and verdict.waited_s >= 0.2


def _busy(monkeypatch: pytest.MonkeyPatch, inner: Path) -> list[Any]:
    """``os.rmdir`` of ``inner`` fails with ``EBUSY``, as the kernel answers for a mount point; its tries."""
    tries: list[Any] = []
    real_rmdir = os.rmdir

    def rmdir(path: Any, *, dir_fd: int | None = None) -> None:
        if os.fsdecode(path) in (inner.name, str(inner)):
            tries.append(path)
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), path)
        real_rmdir(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "rmdir", rmdir)
    return tries


@pytest.mark.parametrize("mounted", [True, False])
def test_a_busy_mount_point_inside_the_tree_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mounted: bool
) -> None:
    """``EBUSY`` removing a mount point inside the tree (a bind-mounted directory) is raised at once, as the standard
    rmtree raises it: no peer's removal frees a mount point. Flipped: a busy directory that is no mount point is
    retried (bounded by the settle budget), since a removal in progress may free it."""
    top = _tree(tmp_path / "t")
    inner = top / "b"
    tries = _busy(monkeypatch, inner)
    world = FakeWorld()
    if mounted:
        world.mount_points.add(str(inner))
    with pytest.raises(OSError) as raised:
        _walk(top, world, rules(settle_s=0.5))
    assert raised.value.errno == errno.EBUSY and raised.value.filename in (inner.name, str(inner))
    assert inner.is_dir() and _files(inner) == 0  # emptied, then the error (the rest of the walk stops)
    assert len(tries) == (1 if mounted else 1 + rmwalk.handler.RETRIES)


def test_a_top_a_peers_rmtree_removed_first_is_absorbed(tmp_path: Path) -> None:
    """The tree is gone before the walk starts, and its parent changed during this job: a peer's rmtree finished
    first. Flipped: where the world remembers that this process removed it itself, it is not a peer's doing, and
    the standard error is raised."""
    top = tmp_path / "step-1"
    verdict = _walk(top, FakeWorld())
    assert verdict is not None and verdict.absorb and verdict.top_gone == "before"
    assert isinstance(verdict.error, FileNotFoundError) and "tree already removed" in verdict.evidence
    world = FakeWorld()
    world.did(str(top), "removed")
    with pytest.raises(FileNotFoundError) as raised:
        _walk(top, world)
    assert raised.value.filename == str(top)


def test_a_failure_no_peer_explains_is_raised_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A top missing under a parent the world shows unchanged since before the job: no peer removed it, the
    standard rmtree's own error (type, errno, filename, message) is raised. Flipped: under a parent the world shows
    changed during the job, the same failure is absorbed. Any other error (a permission denied) is raised too."""
    top = tmp_path / "step-1"
    with pytest.raises(FileNotFoundError) as plain:
        shutil.rmtree(top)
    parent = os.lstat(tmp_path)
    old = time.time() - 3600
    world = FakeWorld()
    world.cached[str(tmp_path)] = os.stat_result(tuple(parent)[:10], {"st_ctime": old, "st_mtime": old})
    with pytest.raises(FileNotFoundError) as guarded:
        _walk(top, world)
    assert (guarded.value.errno, guarded.value.filename, str(guarded.value)) == (
        plain.value.errno,
        plain.value.filename,
        str(plain.value),
    )
    assert _walk(top, FakeWorld()) is not None  # the parent as it is: changed during this job

    _tree(top)

    def unlink(path: Any, *, dir_fd: int | None = None) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(PermissionError) as denied:
        _walk(top, FakeWorld())
    assert denied.value.errno == errno.EACCES and _files(top) == 6


class Counted:
    """``os.lstat`` passed through, counting the calls on one path (a spy: every call is made)."""

    def __init__(self, path: str) -> None:
        self.path, self.calls, self.real = path, 0, os.lstat

    def __call__(self, path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) == self.path:
            self.calls += 1
        return self.real(path, *args, **kwargs)


@pytest.mark.parametrize("live", [False, True])
def test_a_top_a_peer_already_removed_is_asked_for_once_as_without_fsguard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: bool
) -> None:
    """Issue 47: the standard rmtree asks a missing top's name once (its ``lstat``, then the error); on a
    distributed filesystem each ask of a missing name is a request (nothing caches misses). The guarded call that
    absorbs it as a peer's removal asks once too: its own lookup before the walk answers the walk's first
    ``lstat``, and the rule's first look starts from that miss (the live world; the fake one lists)."""
    from fsguard.world import LIVE

    top = str(tmp_path / "checkpoint-3")
    counted = Counted(top)
    monkeypatch.setattr(os, "lstat", counted)
    call = Call("rmtree", (top,), {})
    verdict = rmwalk.run(shutil.rmtree, call, LIVE if live else FakeWorld(), rules(), sys.version_info >= (3, 12), 0.0)
    assert verdict is not None and verdict.absorb and verdict.top_gone == "before", verdict
    assert counted.calls == 1
    without = Counted(top)
    monkeypatch.setattr(os, "lstat", without)
    with pytest.raises(FileNotFoundError):
        shutil.rmtree(top)
    assert without.calls == 1

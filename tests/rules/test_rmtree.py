"""``shutil.rmtree``'s decisions (``fsguard/guards/rmtree.py``; the walk that asks them is ``fsguard.rmwalk``),
row by row of the README paragraphs on rmtree and of the module's docstring."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fsguard.guards import rmtree as rule

from .fake import BEFORE_THE_JOB, FakeWorld, rules

YIELD_S = 1.0


def _plan(tmp_path: Path, own: str | None = None, world: FakeWorld | None = None, **numbers: float) -> str:
    top = tmp_path / "tmp-checkpoint-10"
    top.mkdir(exist_ok=True)
    return rule.removal(str(top), own, os.lstat(top), rules(**numbers), YIELD_S, world or FakeWorld())


def test_a_fresh_tree_this_process_did_not_make_waits_for_a_peers_rename(tmp_path: Path) -> None:
    assert _plan(tmp_path) == "wait"


def test_a_tree_made_with_makedirs_exist_ok_waits_too(tmp_path: Path) -> None:
    """A name every rank makes: whoever came first made it, which says nothing about who commits it."""
    assert _plan(tmp_path, own="made-shared") == "wait"


def test_a_tree_this_process_claimed_alone_is_removed_at_once_without_checks(tmp_path: Path) -> None:
    assert _plan(tmp_path, own="made") == "plain"  # mkdir, makedirs without exist_ok, mkdtemp


def test_in_a_job_without_peers_the_walk_is_plain(tmp_path: Path) -> None:
    top = tmp_path / "t"
    top.mkdir()
    assert rule.removal(str(top), None, os.lstat(top), rules(peers=False), YIELD_S, FakeWorld()) == "plain"


def test_a_tree_older_than_the_job_is_removed_at_once_with_checks(tmp_path: Path) -> None:
    assert _plan(tmp_path, **BEFORE_THE_JOB) == "check"


def test_with_the_window_off_the_walk_is_checked_at_once(tmp_path: Path) -> None:
    top = tmp_path / "t"
    top.mkdir()
    assert rule.removal(str(top), None, os.lstat(top), rules(), 0.0, FakeWorld()) == "check"


def test_an_old_generation_of_a_rotation_is_removed_at_once(tmp_path: Path) -> None:
    """A Trainer's ``save_total_limit`` removing ``checkpoint-8`` beside ``checkpoint-10``; and, with
    ``load_best_model_at_end``, ``checkpoint-10`` beside the kept best ``checkpoint-8`` (transformers 4.25.1).
    A generation alone in its directory (no rotation to tell) still waits."""
    (tmp_path / "checkpoint-8").mkdir()
    (tmp_path / "checkpoint-10").mkdir()
    top = str(tmp_path / "checkpoint-8")
    assert rule.removal(top, None, os.lstat(top), rules(), YIELD_S, FakeWorld()) == "plain"
    top = str(tmp_path / "checkpoint-10")
    assert rule.removal(top, None, os.lstat(top), rules(), YIELD_S, FakeWorld()) == "plain"
    (tmp_path / "checkpoint-8").rmdir()
    assert rule.removal(top, None, os.lstat(top), rules(), YIELD_S, FakeWorld()) == "wait"


def test_a_mount_point_is_removed_at_once(tmp_path: Path) -> None:
    world = FakeWorld()
    world.mount_points.add(str(tmp_path / "tmp-checkpoint-10"))
    assert _plan(tmp_path, world=world) == "plain"


def test_a_top_that_is_no_directory_is_checked(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert rule.removal(str(tmp_path / "f"), None, os.lstat(tmp_path / "f"), rules(), YIELD_S, FakeWorld()) == "check"
    assert rule.removal(str(tmp_path / "gone"), None, None, rules(), YIELD_S, FakeWorld()) == "check"


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
    assert rule.top_gone_before_by_peer(top, rules(), FakeWorld()) == (True, 0.0)


def test_a_missing_top_this_process_removed_or_moved_itself_is_not_a_peers(tmp_path: Path) -> None:
    for kind in ("removed", "moved-away"):
        world = FakeWorld()
        world.did(str(tmp_path / "step-1"), kind)
        assert rule.top_gone_before_by_peer(str(tmp_path / "step-1"), rules(), world) == (False, 0.0)
        assert rule.escaped_gone(str(tmp_path / "step-1"), rules(), world) == (False, 0.0)


def test_a_missing_top_under_a_parent_unchanged_during_the_job_is_not_a_peers(tmp_path: Path) -> None:
    gone, _ = rule.top_gone_before_by_peer(str(tmp_path / "step-1"), rules(**BEFORE_THE_JOB), FakeWorld())
    assert not gone


def test_a_stale_lookup_of_a_top_still_listed_waits_for_the_listing(tmp_path: Path) -> None:
    """A lookup cache says "missing" while peers still delete the tree: wait (bounded) for the listing."""
    top = tmp_path / "step-1"
    top.mkdir()
    world = FakeWorld(stale=True)
    world.peers.append(top.rmdir)
    gone, waited = rule.top_gone_before_by_peer(str(top), rules(), world)
    assert gone and waited > 0 and world.waits == [2.0]
    top.mkdir()
    gone, _ = rule.top_gone_before_by_peer(str(top), rules(), FakeWorld())  # still listed, nothing changes
    assert not gone


def test_an_escaped_file_not_found_is_absorbed_only_when_the_tree_is_gone(tmp_path: Path) -> None:
    assert rule.escaped_gone(str(tmp_path / "t"), rules(), FakeWorld())[0]
    (tmp_path / "t").mkdir()
    assert not rule.escaped_gone(str(tmp_path / "t"), rules(), FakeWorld())[0]


def test_an_entry_gone_mid_walk_is_a_peers_removal_only_in_a_job_with_peers() -> None:
    """A lone process (``FSGUARD=force`` outside a launcher) gets the standard error at once."""
    assert rule.entry_gone_by_peer(rules()) and not rule.entry_gone_by_peer(rules(peers=False))


def test_the_walk_stops_to_wait_for_the_peer_at_the_first_vanished_entry() -> None:
    assert rule.settle_on_vanishing(1) and not rule.settle_on_vanishing(0)

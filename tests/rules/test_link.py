"""``os.link``'s rule (``fsguard/guards/link.py``, sharing ``guards/_identical.py`` with ``os.symlink``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fsguard.guards import link as rule

from .fake import BEFORE_THE_JOB, EEXIST, FakeWorld, assert_raised, decide, rules


def _source(tmp_path: Path) -> str:
    (tmp_path / "blob").write_text("x")
    return str(tmp_path / "blob")


def test_the_sources_own_inode_linked_by_a_peer_during_the_job_is_absorbed(tmp_path: Path) -> None:
    src = _source(tmp_path)
    os.link(src, tmp_path / "name")
    verdict = decide(rule, "link", (src, str(tmp_path / "name")), EEXIST, FakeWorld(), rules())
    assert verdict.absorb and "the source's own inode" in verdict.evidence, verdict


def test_another_inode_in_the_way_is_raised(tmp_path: Path) -> None:
    src = _source(tmp_path)
    (tmp_path / "name").write_text("x")
    (tmp_path / "dir").mkdir()
    os.symlink(src, tmp_path / "sym")
    for name in ("name", "dir", "sym"):
        verdict = decide(rule, "link", (src, str(tmp_path / name)), EEXIST, FakeWorld(), rules())
        assert not verdict.absorb and "another inode" in verdict.evidence, (name, verdict)


def test_the_same_inode_linked_before_the_job_is_raised(tmp_path: Path) -> None:
    src = _source(tmp_path)
    os.link(src, tmp_path / "name")
    verdict = decide(rule, "link", (src, str(tmp_path / "name")), EEXIST, FakeWorld(), rules(**BEFORE_THE_JOB))
    assert not verdict.absorb and "older than the job" in verdict.evidence, verdict


def test_the_same_inode_this_process_linked_is_raised(tmp_path: Path) -> None:
    src = _source(tmp_path)
    os.link(src, tmp_path / "name")
    world = FakeWorld()
    world.did(str(tmp_path / "name"), "made", os.lstat(tmp_path / "name").st_ctime)
    verdict = decide(rule, "link", (src, str(tmp_path / "name")), EEXIST, world, rules())
    assert not verdict.absorb and "this process made it" in verdict.evidence, verdict


def test_a_source_that_cannot_be_read_is_raised(tmp_path: Path) -> None:
    (tmp_path / "name").write_text("x")
    verdict = decide(rule, "link", (str(tmp_path / "gone"), str(tmp_path / "name")), EEXIST, FakeWorld(), rules())
    assert not verdict.absorb and "cannot be read" in verdict.evidence, verdict


def test_follow_symlinks_false_compares_with_the_symlink_itself(tmp_path: Path) -> None:
    src = _source(tmp_path)
    os.symlink(src, tmp_path / "sym")
    os.link(tmp_path / "sym", tmp_path / "name", follow_symlinks=False)  # a link to the symlink's own inode
    args = (str(tmp_path / "sym"), str(tmp_path / "name"))
    verdict = decide(rule, "link", args, EEXIST, FakeWorld(), rules(), follow_symlinks=False)
    assert verdict.absorb, verdict
    verdict = decide(rule, "link", args, EEXIST, FakeWorld(), rules())  # follows: the blob's inode, not there
    assert_raised(verdict, "another inode stands there")


def test_a_link_a_refreshing_peer_removed_again_is_waited_for(tmp_path: Path) -> None:
    src = _source(tmp_path)
    world = FakeWorld()
    world.peers.append(lambda: os.link(src, tmp_path / "name"))
    verdict = decide(rule, "link", (src, str(tmp_path / "name")), EEXIST, world, rules())
    assert verdict.absorb and verdict.waited_s > 0, verdict


def test_directory_descriptor_calls_are_passed_through(tmp_path: Path) -> None:
    src = _source(tmp_path)
    os.link(src, tmp_path / "name")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        verdict = decide(rule, "link", ("blob", "name"), EEXIST, FakeWorld(), rules(), src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
    assert not verdict.absorb and "passed through" in verdict.evidence, verdict


def test_every_other_error_is_raised(tmp_path: Path) -> None:
    src = _source(tmp_path)
    os.link(src, tmp_path / "name")
    for code in (errno.EXDEV, errno.EPERM, errno.EMLINK):
        verdict = decide(rule, "link", (src, str(tmp_path / "name")), code, FakeWorld(), rules())
        assert not verdict.absorb and verdict.decision is None, (code, verdict)


def test_a_name_linked_onto_itself_is_raised(tmp_path: Path) -> None:
    """``link(a, a)`` however spelt (``./a``, a symlinked directory, a symlink followed to it): the existing name
    is the source's own entry, not a link a peer made (absorbed on e3a2108)."""
    src = _source(tmp_path)
    (tmp_path / "alias").symlink_to(tmp_path)
    os.symlink("blob", tmp_path / "latest")
    for given, name in [
        (src, src),
        (src, str(tmp_path / "." / "blob")),
        (src, str(tmp_path / "alias" / "blob")),
        (str(tmp_path / "latest"), src),
    ]:
        verdict = decide(rule, "link", (given, name), EEXIST, FakeWorld(), rules())
        assert not verdict.absorb and "the source's own name" in verdict.evidence, (given, name, verdict)
    os.link(src, tmp_path / "name")  # a second name of the inode: still absorbed
    verdict = decide(rule, "link", (str(tmp_path / "latest"), str(tmp_path / "name")), EEXIST, FakeWorld(), rules())
    assert verdict.absorb, verdict


def test_a_destination_given_with_a_trailing_separator_is_raised(tmp_path: Path) -> None:
    """``link(src, "name/")`` can never make a link: the source's inode there is no peer's result of this call
    (absorbed on e3a2108)."""
    src = _source(tmp_path)
    os.link(src, tmp_path / "name")
    verdict = decide(rule, "link", (src, str(tmp_path / "name") + os.sep), EEXIST, FakeWorld(), rules())
    assert not verdict.absorb and "trailing separator" in verdict.evidence, verdict

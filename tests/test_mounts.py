"""Knowing the filesystem (issue 23): each path's mount, read from ``/proc/self/mountinfo`` once per device.

Real mounts: this machine's disk and ``/dev/shm`` (coherent: a name's own ``lstat`` decides, no listing, no
wait), two caching bindfs views of one directory (FUSE: the fresh listing, up to ``FSGUARD_SETTLE_S``), and a
JuiceFS client (its own cache time read from its ``.config``). Mount options that only a network mount shows
(NFS ``actimeo``, ``noac``; an overlay on an NFS layer) are read from mountinfo lines as the kernel writes them.
"""

# ruff: noqa: F811  (pytest fixtures are imported, then named as parameters)
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fsguard import evidence, mounts
from tests.cluster import backends
from tests.cluster.fixtures import StaleViews, needs_fuse, stale_mounts  # noqa: F401 (fixture)
from tests.conftest import TORCHRUN_ENV, clean_env


def _row(text: str) -> mounts.Mount:
    """What fsguard makes of the last of these mountinfo lines."""
    rows = mounts.parse_table(text.splitlines())
    return mounts.conclude(rows[-1], rows)


def test_network_mount_options_give_the_mounts_own_cache_time() -> None:
    nfs = "36 27 0:50 / /mnt/data rw,relatime - nfs4 srv:/export rw,vers=4.2,{}addr=10.0.0.1\n"
    assert _row(nfs.format("")).cache_s == mounts.NFS_ACDIRMAX_S  # nfs(5) defaults: not shown by the kernel
    assert _row(nfs.format("acregmin=3,acregmax=3,acdirmin=3,acdirmax=3,")).cache_s == 3.0  # actimeo=3
    assert _row(nfs.format("noac,")).cache_s == 0.0
    assert _row(nfs.format("lookupcache=none,")).cache_s == 0.0
    found = _row(nfs.format(""))
    assert found.stale and found.shared
    for fstype in ("lustre", "gpfs", "beegfs", "ceph", "cifs", "glusterfs", "panfs", "fuse.juicefs", "fuse"):
        found = _row(f"40 27 0:51 / /mnt/x rw - {fstype} src rw\n")
        assert found.stale and found.shared, fstype
        assert mounts.wait_budget_for(found, 2.0) == 2.0, fstype  # cache time not visible: FSGUARD_SETTLE_S
    assert _row("40 27 0:51 / /mnt/x rw - fuse.bindfs src rw,entry_timeout=0.5\n").cache_s == 0.5
    for fstype in ("ext4", "xfs", "btrfs", "tmpfs"):
        found = _row(f"40 27 8:1 / /mnt/x rw - {fstype} /dev/sda1 rw\n")
        assert not found.stale and not found.shared, fstype
        assert mounts.wait_budget_for(found, 2.0) == 0.0
    assert _row("40 27 8:1 / /mnt/my\\040disk rw - ext4 /dev/sda1 rw\n").point == "/mnt/my disk"


def test_where_a_mount_caches_no_missing_names_is_read_from_its_options() -> None:
    """``negative_s`` (issue 47): 0 where a lookup that finds nothing is the truth (no listing asked then)."""
    nfs = "36 27 0:50 / /mnt/data rw,relatime - nfs4 srv:/export rw,vers=4.2,{}addr=10.0.0.1\n"
    assert _row(nfs.format("")).negative_s is None  # lookupcache=all, nfs(5)'s default: missing names cached
    for option in ("lookupcache=positive,", "lookupcache=pos,", "lookupcache=none,"):
        assert mounts.misses_are_fresh(_row(nfs.format(option))), option
    assert _row("40 27 0:51 / /mnt/x rw - fuse.bindfs src rw,negative_timeout=0\n").negative_s == 0.0
    assert not mounts.misses_are_fresh(_row("40 27 0:51 / /mnt/x rw - fuse.bindfs src rw\n"))  # not shown: unknown
    assert mounts.misses_are_fresh(_row("40 27 8:1 / /mnt/x rw - ext4 /dev/sda1 rw\n"))


def test_an_overlay_is_as_coherent_as_its_upper_layer() -> None:
    local = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
    nfs = "2 1 0:50 / /nfs rw - nfs4 srv:/e rw\n"
    overlay = "3 1 0:60 / /merged rw - overlay overlay rw,lowerdir=/l,upperdir={}/up,workdir={}/work\n"
    assert not _row(local + overlay.format("/var", "/var")).stale
    on_nfs = _row(local + nfs + overlay.format("/nfs", "/nfs"))
    assert on_nfs.stale and not on_nfs.shared


def test_this_machines_disk_and_tmpfs_are_coherent_and_a_name_is_found_by_its_own_lstat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    places = [tmp_path]
    if os.path.isdir("/dev/shm"):
        places.append(Path("/dev/shm"))
    for place in places:
        kind = mounts.mount_of(place).fstype
        if kind.split(".")[0] not in mounts.COHERENT_TYPES:
            pytest.skip(f"{place} is on {kind}, not a coherent local filesystem")
        assert not mounts.lookups_may_be_stale(place) and mounts.cache_s(place) == 0.0
        assert mounts.lookups_may_be_stale(os.stat(place).st_dev) is False  # by device number too
    (tmp_path / "f").write_text("x")

    def no_listing(path: object) -> None:
        raise AssertionError(f"listed {path}: a coherent filesystem needs no listing")

    monkeypatch.setattr(os, "scandir", no_listing)
    look = evidence.look
    assert (look(str(tmp_path / "f")).present, look(str(tmp_path / "f")).kind) == (True, "file")
    assert (look(str(tmp_path)).present, look(str(tmp_path)).kind) == (True, "dir")
    missing = look(str(tmp_path / "nope"))
    assert (missing.parent_exists, missing.present) == (True, False)
    assert not look(str(tmp_path / "f" / "below")).parent_exists
    assert not look(str(tmp_path / "no" / "below")).parent_exists
    waited = evidence.wait_for_seen(lambda: None, 5.0, str(tmp_path / "nope"))[1]
    assert waited < 1.0, "nothing to wait for on a coherent filesystem"


@needs_fuse
def test_a_fuse_view_keeps_the_fresh_listing_and_status_says_so(stale_mounts: StaleViews, fsguard_python: Path) -> None:
    mounts.forget()
    assert mounts.lookups_may_be_stale(stale_mounts.a) and mounts.shared(stale_mounts.a)
    (stale_mounts.backing / "d").mkdir()
    assert evidence.look(str(stale_mounts.b / "d")).present
    done = subprocess.run(
        [str(fsguard_python), "-m", "fsguard", "status", "--json"],
        env=clean_env({"FSGUARD": "1", **TORCHRUN_ENV}),
        cwd=stale_mounts.b,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    fs = json.loads(done.stdout)["filesystem"]
    assert fs["type"].startswith("fuse") and fs["lookups_may_be_stale"] and fs["wait_s"] == 2.0, fs
    assert "listing" in fs["probe"], fs


@pytest.mark.skipif(
    backends.unavailable("juicefs") is not None, reason=f"JuiceFS unavailable: {backends.unavailable('juicefs')}"
)
def test_juicefs_shows_its_own_cache_time(tmp_path: Path) -> None:
    mounts.forget()
    with backends.juicefs_volume(tmp_path / "jfs") as volume, backends.juicefs_mount(volume, tmp_path / "m") as point:
        found = mounts.mount_of(point)
        assert (found.fstype, found.stale, found.shared, found.cache_s) == ("fuse.juicefs", True, True, 1.0)
        assert mounts.wait_budget(point, 2.0) == 1.0 and mounts.wait_budget(point, 0.5) == 0.5
        # no negative-entry cache by default (its .config): a name its own lookup does not find is gone, no listing
        assert found.negative_s == 0.0
        (point / "d").mkdir()
        real = os.scandir
        listed: list[object] = []

        def counted(path: object = ".") -> object:
            listed.append(path)
            return real(path)  # type: ignore[arg-type]

        os.scandir = counted  # type: ignore[assignment]
        try:
            missing, present = evidence.look(str(point / "nope")), evidence.look(str(point / "d"))
        finally:
            os.scandir = real
        assert (missing.parent_exists, missing.present) == (True, False) and present.present
        assert listed == [str(point)], listed  # the present name alone: a lookup of it may be stale
    assert not backends.mounted(tmp_path / "m")


@needs_fuse
def test_a_rename_failing_on_a_stale_entry_of_its_source_is_decided_as_a_missing_source(
    stale_mounts: StaleViews,
) -> None:
    """GlusterFS fails a peer-raced directory rename with EEXIST when this node's stale entry of the source still
    names the directory a peer already moved onto the destination. The rule, in-process on a caching FUSE view:
    the source gone from the fresh listing and the destination fresh -> absorbed; the source still listed (two
    different results for one path) -> a conflict, as on any filesystem."""
    import errno

    from fsguard.calls import Call
    from fsguard.guards import Rules
    from fsguard.guards import rename as rule
    from fsguard.world import LIVE

    mounts.forget()
    rules = Rules(settle_s=0.5, fresh_s=60.0, job_start=0.0, peers=True)
    (stale_mounts.backing / "checkpoint-2").mkdir()
    (stale_mounts.backing / "checkpoint-2" / "shard").write_text("x")  # the peer's move: staging -> checkpoint-2
    src, dst = str(stale_mounts.b / "staging"), str(stale_mounts.b / "checkpoint-2")
    error = FileExistsError(errno.EEXIST, "File exists", src, None, dst)
    verdict = rule.decide(Call("rename", (src, dst), {}), error, LIVE, rules)
    assert verdict.absorb and verdict.decision == "absorbed" and "stale entry" in verdict.evidence, verdict
    (stale_mounts.backing / "staging").mkdir()  # a source still there: a real second result
    verdict = rule.decide(Call("rename", (src, dst), {}), error, LIVE, rules)
    assert not verdict.absorb and verdict.decision == "conflict", verdict

"""A peer removes the tree, and a new directory takes its inode number: not a rename (``fsguard/rmwalk/``).

When the tree leaves its name, the walk looks for it under another name in its parent by its inode. A
filesystem that hands a freed inode number to the next directory made (ext4 does so at once) used to make
that search name an unrelated directory: a false ``hazard`` ("tree renamed to ...") or ``yielded`` record
(seen under sbatch, and in the two-node mpirun job, where ranks' ``ranks/`` took the removed tree's inode).
The walk now holds a descriptor of the top for the whole call, so the number cannot be reused while it
searches, and a top whose link count fell to 0 was removed, not moved.

Each scenario is deterministic: the peer's removal and the new directory happen in an audit hook at the
exact moment (before this process's own ``rmdir`` of the emptied top; before the yield window's first fresh
listing), made with the unguarded ``posix`` functions. A control first shows that the test's filesystem
does reuse a freed directory inode at once (else the old code would pass too, and the test skips).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import TORCHRUN_ENV, run_python
from tests.support.records import from_lines

# The tree is made, then removed by a "peer" at the chosen moment; the peer then makes ``ranks`` in the same
# parent. Prints whether ``ranks`` got the removed tree's inode number, then "done" (rmtree returned).
WORKER = """
    import os, posix, shutil, sys
    root, moment = os.environ["TREE_ROOT"], os.environ["MOMENT"]
    top = os.path.join(root, "old-checkpoint")
    if moment == "rmdir":
        os.makedirs(os.path.join(top, "d"))  # this process's own tree: removed at once, no yield window
    else:
        # The window looks through fresh listings where lookups may be stale (on a coherent disk, through the
        # name's own lstat, which no audit hook sees): this directory's mount is declared a caching one, as
        # bindfs or NFS would be, so that the hook below fires at the window's first look.
        from fsguard import mounts

        mounts.MOUNTS[os.stat(root).st_dev] = mounts.Mount(root, "fuse.simulated", "test", {}, stale=True, shared=True)
        import subprocess  # a peer's fresh tree (rank 0's guarded mkdir, noted in this node's journal as its):

        peer = {**os.environ, "RANK": "0", "LOCAL_RANK": "0"}  # the walk first waits for a peer to move it away
        subprocess.run([sys.executable, "-c", "import os, sys; os.mkdir(sys.argv[1])", top], env=peer, check=True)
        posix.mkdir(os.path.join(top, "d"))
    open(os.path.join(top, "d", "f"), "w").close()
    inode = os.lstat(top).st_ino
    fired = []

    def peer_removes_then_makes_ranks():
        fired.append(True)
        for dirpath, dirnames, filenames in os.walk(top, topdown=False):
            for name in filenames:
                posix.unlink(os.path.join(dirpath, name))
            for name in dirnames:
                posix.rmdir(os.path.join(dirpath, name))
        posix.rmdir(top)
        posix.mkdir(os.path.join(root, "ranks"))
        print("reused" if os.lstat(os.path.join(root, "ranks")).st_ino == inode else "not reused", flush=True)

    def hook(event, args):
        if fired:
            return
        if moment == "rmdir" and event == "os.rmdir" and args[0] == top:  # the emptied top, its fd closed
            peer_removes_then_makes_ranks()
        elif moment == "yield" and event == "os.scandir" and os.fspath(args[0]) == root:  # the window's look
            peer_removes_then_makes_ranks()

    sys.addaudithook(hook)

    def main():
        shutil.rmtree(top)  # guarded call: rmtree (nothing catches here: an error ends the worker)

    main()
    print("done", flush=True)
"""

JOB = {**TORCHRUN_ENV, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def reuses_inodes(where: Path) -> bool:
    """Whether a directory made right after another was removed gets its inode number here (ext4: yes)."""
    first, second = where / "probe-a", where / "probe-b"
    first.mkdir()
    inode = first.stat().st_ino
    first.rmdir()
    second.mkdir()
    try:
        return second.stat().st_ino == inode
    finally:
        second.rmdir()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    where = tmp_path / "shared"
    where.mkdir()
    if not reuses_inodes(where):
        pytest.skip(f"{where}'s filesystem does not reuse a freed directory inode at once (tmpfs): nothing to show")
    return where


def test_without_fsguard_the_peers_removal_fails_the_rmtree(fsguard_python: Path, root: Path) -> None:
    done = run_python(fsguard_python, WORKER, {"FSGUARD": "0", "TREE_ROOT": str(root), "MOMENT": "rmdir"})
    assert done.returncode == 1 and "FileNotFoundError" in done.stderr, done.stderr
    if done.stdout.splitlines() == ["not reused"]:  # another process of this busy machine took the number first
        pytest.skip("the freed inode number went to another process's directory this time: nothing to show")
    assert done.stdout.splitlines() == ["reused"], done.stdout  # without a held descriptor the number goes at once


def test_a_reused_inode_after_the_walk_is_not_a_rename(fsguard_python: Path, root: Path) -> None:
    """The stdlib closes the top's descriptor before its ``rmdir``; the peer removes the empty top there."""
    done = run_python(fsguard_python, WORKER, {"FSGUARD": "force", "TREE_ROOT": str(root), "MOMENT": "rmdir"})
    assert done.returncode == 0, done.stderr
    [record] = from_lines(done.stderr.splitlines())
    assert (record.op, record.decision) == ("rmtree", "absorbed"), record.to_line()
    assert "top directory removed by a peer at the end" in record.evidence, record.to_line()
    assert "renamed_to" not in record.detail and "ranks" not in record.evidence, record.to_line()
    assert done.stdout.splitlines() == ["not reused", "done"], done.stdout  # fsguard's descriptor holds the number
    assert sorted(os.listdir(root)) == ["ranks"]


def test_a_reused_inode_in_the_yield_window_is_not_a_rename(fsguard_python: Path, root: Path) -> None:
    """A peer's fresh tree: the window waits for a move; a peer removes it instead, and ``ranks`` is made."""
    done = run_python(fsguard_python, WORKER, {**JOB, "FSGUARD": "1", "TREE_ROOT": str(root), "MOMENT": "yield"})
    assert done.returncode == 0, done.stderr
    [record] = from_lines(done.stderr.splitlines())
    assert (record.op, record.decision) == ("rmtree", "absorbed"), record.to_line()
    assert "tree removed by a peer" in record.evidence, record.to_line()
    assert "renamed_to" not in record.detail and "ranks" not in record.evidence, record.to_line()
    assert done.stdout.splitlines() == ["not reused", "done"], done.stdout
    assert sorted(os.listdir(root)) == ["ranks"]

"""The rmtree walk's position checks cost O(1) in the size of the parent directory (issue 35).

A tree that sits in a big directory (a dataset folder) is removed by a guarded ``rmtree`` with its position
checks on (a tree made by an earlier process, longer ago than the default ``FSGUARD_FRESH_S``: older than the
job, so the walk checks at once). On a coherent local filesystem the checks are the name's own ``lstat``: the
walk never lists the parent (it did once per directory it opened: 21 listings of 2,000 entries here, 302
listings of 100k entries in the issue's case). Where the mount may answer lookups from a cache (declared so,
as bindfs or NFS would be), fresh listings of the parent are still read, one at least before the top's own
removal. An audit hook counts the ``os.scandir`` calls on the parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from fsguard.config import Settings
from tests.conftest import TORCHRUN_ENV, clean_env

WORKER = """
    import json, os, shutil, sys
    parent, caching = os.environ["PARENT"], os.environ["CACHING"] == "1"
    top = os.path.join(parent, "tree")
    if caching:
        from fsguard import mounts

        mounts.MOUNTS[os.stat(parent).st_dev] = mounts.Mount(parent, "fuse.simulated", "test", {}, stale=True, shared=True)
    listings = []
    sys.addaudithook(lambda event, args: listings.append(1) if event == "os.scandir" and args[0] == parent else None)
    shutil.rmtree(top)
    print(json.dumps({"listings": len(listings), "left": os.path.exists(top), "patched": hasattr(shutil.rmtree, "__wrapped__")}))
"""


@pytest.fixture(scope="module")
def old_trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two parents of 2,000 entries, each with a 20-directory tree, made longer ago than the default slack."""
    base = tmp_path_factory.mktemp("listings")
    for name in ("coherent", "caching"):
        parent = base / name
        parent.mkdir()
        for i in range(2000):
            (parent / f"item-{i:05d}").touch()
        for a in range(20):
            (parent / "tree" / f"d{a}").mkdir(parents=True)
            (parent / "tree" / f"d{a}" / "f").touch()
    time.sleep(Settings().fresh_s + 1.5)
    return base


@pytest.mark.parametrize("caching", [False, True])
def test_the_walk_lists_the_parent_only_where_lookups_may_be_cached(
    fsguard_python: Path, old_trees: Path, caching: bool
) -> None:
    parent = old_trees / ("caching" if caching else "coherent")
    env = {**TORCHRUN_ENV, "FSGUARD": "1", "PARENT": str(parent), "CACHING": "1" if caching else "0"}
    # Started through a shell that stays its parent: the job's start is the launcher's (the shell's), now.
    command = ["sh", "-c", '"$0" -c "$1"; exit $?', str(fsguard_python), textwrap.dedent(WORKER)]
    done = subprocess.run(command, env=clean_env(env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["patched"] and not seen["left"], seen
    if caching:
        assert seen["listings"] >= 1, seen
    else:
        assert seen["listings"] == 0, seen
    assert "fsguard: " not in done.stderr, done.stderr  # a tree older than the job: removed with no record
    assert os.listdir(parent) and len(os.listdir(parent)) == 2000

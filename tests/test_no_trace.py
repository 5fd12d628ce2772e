"""No trace (issue 46): the directories a rank makes look as a tool's. fsguard keeps who made what in its own
node-local journal (``fsguard.journal``), never on users' files: no extended attribute, the same disk use, and
copies and backups (``rsync -aX``, ``cp -r --preserve=xattr``) to a filesystem without user extended attributes
behave as without fsguard.

Each rank is a fresh interpreter of the wheel's venv, in a job as torchrun states it (a 32-digit run id, a restart
count: the tag on e3a2108 was 111 bytes there, too long for an ext4 inode's own space).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cluster.fixtures import needs_fuse
from tests.cluster.harness import mounts_under
from tests.conftest import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="extended attributes (Linux)")

RANK = {
    "FSGUARD": "1",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "0123456789abcdef0123456789abcdef",
    "TORCHELASTIC_RESTART_COUNT": "0",
}

MAKE = """
    import os, pathlib, sys
    assert hasattr(os.makedirs, "__wrapped__"), "fsguard is not active"
    root = os.environ["OUT"]
    for i in range({count}):
        os.makedirs(os.path.join(root, f"class-{{i:04d}}", "images"))
    pathlib.Path(root, "run").mkdir()
    os.mkdir(os.path.join(root, "run", "ckpt"))
    with open(os.path.join(root, "run", "ckpt", "weights"), "w") as f:
        f.write("w")
"""


def rank_makes(python: Path, out: Path, count: int) -> None:
    done = run_python(python, MAKE.format(count=count), {**RANK, "OUT": str(out)})
    assert done.returncode == 0, done.stderr


def tool_makes(out: Path, count: int) -> None:
    """The same tree made by tools (``mkdir -p``, the shell's redirection): what it is without fsguard."""
    names = [str(out / f"class-{i:04d}" / "images") for i in range(count)] + [str(out / "run" / "ckpt")]
    for at in range(0, len(names), 500):
        subprocess.run(["mkdir", "-p", *names[at : at + 500]], check=True)
    (out / "run" / "ckpt" / "weights").write_text("w")


def du_k(path: Path) -> int:
    return int(subprocess.run(["du", "-sk", str(path)], check=True, capture_output=True, text=True).stdout.split()[0])


def test_du_of_a_ranks_directories_is_a_tools(fsguard_python: Path, tmp_path: Path) -> None:
    """1,000 class directories (2,000 with their ``images``) made in a rank take the disk a tool's take (on ext4
    with 256-byte inodes, e3a2108's job tag took one more 4 KiB block each: twice the space)."""
    rank_makes(fsguard_python, tmp_path / "rank", 1000)
    tool_makes(tmp_path / "tool", 1000)
    # A directory of 1,000 entries spans several blocks; where they are not contiguous ext4 gives it one more for its
    # extent tree (two trees both made by mkdir -p differ so, 8,052 against 8,048 KiB). A job tag took 8,000 more.
    assert abs(du_k(tmp_path / "rank") - du_k(tmp_path / "tool")) <= 16
    assert sorted(p.relative_to(tmp_path / "rank") for p in (tmp_path / "rank").rglob("*")) == sorted(
        p.relative_to(tmp_path / "tool") for p in (tmp_path / "tool").rglob("*")
    )


def test_a_ranks_directories_carry_no_extended_attribute(fsguard_python: Path, tmp_path: Path) -> None:
    rank_makes(fsguard_python, tmp_path / "rank", 3)
    tool_makes(tmp_path / "tool", 3)
    for name in ("class-0000", "class-0002/images", "run", "run/ckpt"):
        assert os.listxattr(tmp_path / "rank" / name) == os.listxattr(tmp_path / "tool" / name), name


@contextmanager
def without_user_xattrs(backing: Path, point: Path) -> Iterator[Path]:
    """``backing`` seen at ``point`` through ``bindfs --xattr-none``: a filesystem that keeps no user extended
    attributes (as NFSv3, vfat, SMB, tmpfs before Linux 6.6)."""
    backing.mkdir()
    point.mkdir()
    daemon = subprocess.Popen(
        ["bindfs", "-f", "--xattr-none", str(backing), str(point)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while not mounts_under(point):
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.skip("FUSE unavailable: bindfs --xattr-none did not mount")
            time.sleep(0.005)
        yield point
    finally:
        if mounts_under(point) and subprocess.run(["fusermount3", "-u", str(point)], check=False).returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(point)], check=False)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)
        if daemon.stderr is not None:
            daemon.stderr.close()


@pytest.mark.fuse
@needs_fuse
@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync missing (scripts/test.sh installs it as root)")
def test_a_ranks_output_copies_to_a_filesystem_without_user_xattrs(fsguard_python: Path, tmp_path: Path) -> None:
    """``rsync -aX`` (exit 23 on e3a2108) and ``cp -r --preserve=xattr`` (exit 1) of a rank's output succeed, as
    they do for the same tree made by tools."""
    rank_makes(fsguard_python, tmp_path / "rank", 3)
    tool_makes(tmp_path / "tool", 3)
    with without_user_xattrs(tmp_path / "backing", tmp_path / "plain") as dest:
        for tree in ("tool", "rank"):
            rsync = subprocess.run(
                ["rsync", "-aX", f"{tmp_path / tree}/", f"{dest}/rsync-{tree}/"], capture_output=True, text=True
            )
            assert rsync.returncode == 0, (tree, rsync.stderr)
            cp = subprocess.run(
                ["cp", "-r", "--preserve=xattr", str(tmp_path / tree), f"{dest}/cp-{tree}"],
                capture_output=True,
                text=True,
            )
            assert cp.returncode == 0, (tree, cp.stderr)
        assert (dest / "rsync-rank" / "run" / "ckpt" / "weights").read_text() == "w"
        assert (dest / "cp-rank" / "run" / "ckpt" / "weights").read_text() == "w"


# --- the journal itself (in-process) -------------------------------------------------------------------------


def test_the_journal_names_the_newest_job_that_made_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries are whole paths (one inside another's name is not a match), the newest across jobs wins, relative
    paths are noted absolute, and a tag with ``/`` or ``%`` names its file reversibly."""
    from fsguard import journal
    from fsguard.state import STATE

    monkeypatch.setattr(journal, "CANDIDATES", (str(tmp_path),))
    monkeypatch.chdir(tmp_path)
    first, second = "MASTER_PORT=1;host=a/b%c", "MASTER_PORT=2;host=n"
    assert journal.tag_of(journal.file_name(first)) == first
    try:
        journal.made("runs/exp", first)
        journal.made(str(tmp_path / "x runs" / "exp"), first)  # " <path>" inside another entry's path
        assert journal.newest(str(tmp_path / "runs" / "exp"), second)[1] == first  # type: ignore[index]
        assert journal.newest(str(tmp_path / "exp"), second) is None
        journal.made(str(tmp_path / "runs" / "exp"), second)
        assert journal.newest("runs/exp", second)[1] == second  # type: ignore[index]
        assert sorted(os.listdir(tmp_path / f"fsguard-{os.geteuid()}")) == sorted(
            journal.file_name(tag, prefix) for tag in (first, second) for prefix in (journal.PREFIX, journal.SEQ)
        )  # each job's journal, and its change tokens
        assert oct(os.stat(tmp_path / f"fsguard-{os.geteuid()}").st_mode & 0o777) == "0o700"
    finally:
        STATE.caches.clear()

"""Never worse (issue 28, class 1): a tree whose name is not an ordinary directory entry ends as without fsguard.

rmtree's position check must tell "the tree moved" from a top whose name shows another inode than its parent's
listing does for good reasons: a mount point (a bind-mounted output dir: the standard rmtree empties it, then
``EBUSY``, which ``ignore_errors`` swallows), a path through a symlink (``rmtree('link/')`` empties the target,
then ``ENOTDIR``), an overlay whose layers are on different filesystems (listings and lookups give different inode
numbers). Each program (``tests/workers/rmtree_identity.py``) runs in a job with peers (``FSGUARD=1`` and a
torchrun environment, so the yield window and the checks are on) and without fsguard, in its own mount
namespace; the exception, the files left and the records must be the same as without (no record at all).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TORCHRUN_ENV, clean_env
from tests.support.records import from_lines

WORKER = Path(__file__).resolve().parent / "workers" / "rmtree_identity.py"

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], check=False).returncode != 0,
    reason="needs unshare -m (root) for private mounts",
)


def run_case(python: Path, case: str, root: Path, env: dict[str, str]) -> tuple[dict[str, object], str]:
    root.mkdir(parents=True)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", str(python), str(WORKER), case, str(root)],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome, done.stderr


@pytest.mark.parametrize("case", ["bind-ignore", "bind-raise", "symlink", "overlay"])
def test_the_tree_ends_as_without_fsguard(fsguard_python: Path, tmp_path: Path, case: str) -> None:
    without, _ = run_case(fsguard_python, case, tmp_path / "off", {"FSGUARD": "0"})
    peers = {**TORCHRUN_ENV, "FSGUARD": "1", "FSGUARD_YIELD_S": "0.05"}
    with_fsguard, stderr = run_case(fsguard_python, case, tmp_path / "on", peers)
    assert with_fsguard == without, (with_fsguard, without, stderr[-3000:])
    records = from_lines(stderr.splitlines(), only_records=True)
    assert not records, [r.to_line() for r in records]

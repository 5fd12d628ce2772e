"""Programs that remove a tree whose name is not an ordinary directory entry, for
``tests/test_never_worse_rmtree.py``: a bind-mounted output directory, a mount point removed without
``ignore_errors``, a path through a symlink to a directory (``rmtree('link/')``), a ``TemporaryDirectory`` on an
overlay whose layers are on different filesystems. Each runs in its own mount namespace (``unshare -m``), so
its mounts go with it.

Run as ``python rmtree_identity.py CASE ROOT``; prints one JSON line: the exception the program saw (type,
errno) and what is left under ROOT.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile


def fill(path: str, files: int = 4) -> None:
    os.makedirs(os.path.join(path, "sub"), exist_ok=True)
    for i in range(files):
        with open(os.path.join(path, f"f{i}.txt"), "w") as f:
            f.write("x")
    with open(os.path.join(path, "sub", "g.txt"), "w") as f:
        f.write("y")


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def bind_mounted(root: str, ignore: bool) -> None:
    """The job's output dir is a bind mount (as a container on a cluster has it); the job cleans it."""
    backing, out = os.path.join(root, "backing"), os.path.join(root, "out")
    os.makedirs(backing, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    mount("--bind", backing, out)
    fill(out)
    try:
        shutil.rmtree(out, ignore_errors=ignore)
    finally:
        subprocess.run(["umount", out], check=False)


def symlinked(root: str) -> None:
    """``rmtree('link/')``: the standard rmtree empties the directory the link points to, then fails."""
    target = os.path.join(root, "target")
    os.makedirs(target, exist_ok=True)
    fill(target)
    os.symlink("target", os.path.join(root, "link"))
    shutil.rmtree(os.path.join(root, "link") + os.sep)


def overlay_tempdir(root: str) -> None:
    """A ``TemporaryDirectory`` inside an overlay whose lower layer is a tmpfs and upper layer is on disk."""
    lower, upper, work, merged = (os.path.join(root, n) for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        os.makedirs(d, exist_ok=True)
    mount("-t", "tmpfs", "fsguard-lower", lower)
    os.makedirs(os.path.join(lower, "data"))
    mount("-t", "overlay", "fsguard-overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}", merged)
    try:
        with tempfile.TemporaryDirectory(dir=os.path.join(merged, "data")) as scratch:
            fill(scratch)
        os.makedirs(os.path.join(merged, "data", "run"))
        fill(os.path.join(merged, "data", "run"))
        shutil.rmtree(os.path.join(merged, "data", "run"))
        with open(os.path.join(root, "merged-left.json"), "w") as f:
            json.dump(sorted(os.listdir(os.path.join(merged, "data"))), f)
    finally:
        subprocess.run(["umount", merged], check=False)
        subprocess.run(["umount", lower], check=False)


CASES = {
    "bind-ignore": lambda root: bind_mounted(root, True),
    "bind-raise": lambda root: bind_mounted(root, False),
    "symlink": symlinked,
    "overlay": overlay_tempdir,
}


def main() -> None:
    case, root = sys.argv[1], sys.argv[2]
    error = None
    try:
        CASES[case](root)
    except OSError as exc:
        error = [type(exc).__name__, exc.errno]
    left = sorted(
        os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in (*dirs, *files)
    )
    print(json.dumps({"error": error, "left": left}), flush=True)


if __name__ == "__main__":
    main()

"""Programs that name a path through a symlink followed by ``..``, for ``tests/test_never_worse_paths.py``: the
kernel resolves ``latest/../x``, with ``latest`` a link to ``runs/run-3``, to ``runs/x``; fsguard must mean the
same file. Each rank works in its own directory (``ROOT/rank<r>``), so nothing races: what the program does
must end exactly as without fsguard.

Run as ``python paths_as_given.py CASE ROOT``; prints one JSON line: the exception the program saw (type,
errno), what it printed on the way, and what is left under its directory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys


def layout(here: str) -> str:
    """runs/run-3 (the latest run), runs/cache with a few files, and ``latest`` -> runs/run-3; returns latest."""
    os.makedirs(os.path.join(here, "runs", "run-3"))
    os.makedirs(os.path.join(here, "runs", "cache", "shard"))
    for name in ("a", "b"):
        with open(os.path.join(here, "runs", "cache", "shard", name), "w") as f:
            f.write(name)
    latest = os.path.join(here, "latest")
    os.symlink(os.path.join("runs", "run-3"), latest)
    return latest


def rmtree_beside_latest(here: str, said: list[str]) -> None:
    """Clear the cache that sits beside the latest run: the kernel's ``runs/cache``."""
    latest = layout(here)
    shutil.rmtree(os.path.join(latest, "..", "cache"))
    said.append(f"cache left: {os.path.lexists(os.path.join(here, 'runs', 'cache'))}")


def makedirs_claims_twice(here: str, said: list[str]) -> None:
    """Make the outputs directory beside the latest run, then, later, make it again by its plain name (a
    second run of the same step: without fsguard the program stops with ``FileExistsError``, its own)."""
    latest = layout(here)
    os.makedirs(os.path.join(latest, "..", "outputs"))
    said.append("made outputs")
    with open(os.path.join(here, "runs", "outputs", "owner.txt"), "w") as f:
        f.write("first")
    os.makedirs(os.path.join(here, "runs", "outputs"))  # this process's own directory: FileExistsError
    with open(os.path.join(here, "runs", "outputs", "owner.txt"), "w") as f:
        f.write("second")
    said.append("made outputs again")


def replace_from_a_missing_tmp(here: str, said: list[str]) -> None:
    """Publish ``result.json`` beside the latest run from a temporary file, twice; the second writer produced
    nothing (its tmp is missing): without fsguard ``FileNotFoundError``, never the first result taken as its."""
    latest = layout(here)
    result = os.path.join(latest, "..", "result.json")
    tmp = os.path.join(here, "runs", "result.json.tmp")
    with open(tmp, "w") as f:
        f.write("step 1")
    os.replace(tmp, result)
    said.append("published step 1")
    os.replace(os.path.join(latest, "..", "result.json.tmp"), os.path.join(here, "runs", "result.json"))
    said.append("published step 2")


CASES = {
    "rmtree": rmtree_beside_latest,
    "makedirs": makedirs_claims_twice,
    "replace": replace_from_a_missing_tmp,
}


def main() -> None:
    case, root = sys.argv[1], sys.argv[2]
    here = os.path.join(root, f"rank{os.environ.get('RANK', '0')}")
    os.makedirs(here)
    said: list[str] = []
    error = None
    try:
        CASES[case](here, said)
    except OSError as exc:
        error = [type(exc).__name__, exc.errno]
    left = {}
    for d, dirs, files in os.walk(here):
        for n in (*dirs, *files):
            path = os.path.join(d, n)
            rel = os.path.relpath(path, here)
            if os.path.islink(path):
                left[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path) as f:
                    left[rel] = f.read()
            else:
                left[rel] = "dir"
    print(json.dumps({"error": error, "said": said, "left": left}), flush=True)


if __name__ == "__main__":
    main()

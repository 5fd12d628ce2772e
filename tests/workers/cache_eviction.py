"""A cache evicted by one rank while its peer publishes a new entry into it, for
``tests/test_never_worse_enotempty.py``.

Rank 0 makes the cache (``cache/shard/{a,b}``) and evicts it with ``shutil.rmtree``; rank 1 publishes
``cache/shard/new`` (written to a temporary file, then ``os.replace``) at the moment rank 0's walk has emptied
``shard`` and is about to remove it (an audit hook holds rank 0 there until the entry is published, bounded:
the race happens in every run), then reads its entry back. Without fsguard, ``rmdir(shard)`` fails with
``ENOTEMPTY`` and the peer's entry survives. The cases differ in how rank 0 made the cache and what it does
with the error:

* ``suppress``: ``os.makedirs(cache)``; ``try: shutil.rmtree(cache) except OSError: pass`` (best effort);
* ``shared``: ``os.makedirs(cache, exist_ok=True)`` (every rank's spelling), the same best-effort eviction;
* ``onerror``: ``shutil.rmtree(cache, onerror=log)``, the handler logs and goes on;
* ``crash``: ``shutil.rmtree(cache)`` with no handler: the program stops with the error.

Run as ``python cache_eviction.py CASE ROOT``; prints one JSON line per rank.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time


def wait_for(path: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def flag(path: str) -> None:
    with open(path, "w"):
        pass


def evictor(case: str, root: str, cache: str, out: dict[str, object]) -> None:
    shard = os.path.join(cache, "shard")
    os.makedirs(shard, exist_ok=case == "shared")
    for name in ("a", "b"):
        with open(os.path.join(shard, name), "w") as f:
            f.write(name)
    flag(os.path.join(root, "ready"))
    held = []

    def at_rmdir(event: str, args: tuple[object, ...]) -> None:
        if event == "os.rmdir" and not held and os.fsdecode(args[0]) in ("shard", shard):  # type: ignore[arg-type]
            held.append(True)
            flag(os.path.join(root, "evicting"))
            out["published_in_time"] = wait_for(os.path.join(root, "published"))

    sys.addaudithook(at_rmdir)
    logged: list[list[object]] = []
    try:
        if case in ("suppress", "shared"):
            try:
                shutil.rmtree(cache)
            except OSError:
                pass
        elif case == "onerror":
            shutil.rmtree(cache, onerror=lambda f, p, e: logged.append([os.path.relpath(p, root), e[1].errno]))
        else:
            shutil.rmtree(cache)
    finally:
        out["logged"] = logged
        flag(os.path.join(root, "evicted"))


def publisher(root: str, cache: str, out: dict[str, object]) -> None:
    wait_for(os.path.join(root, "ready"))
    out["saw_eviction"] = wait_for(os.path.join(root, "evicting"))
    tmp = os.path.join(root, "new.tmp")
    with open(tmp, "w") as f:
        f.write("published")
    os.replace(tmp, os.path.join(cache, "shard", "new"))
    flag(os.path.join(root, "published"))
    wait_for(os.path.join(root, "evicted"))
    with open(os.path.join(cache, "shard", "new")) as f:  # the peer uses its entry
        out["read"] = f.read()


def main() -> None:
    case, root = sys.argv[1], sys.argv[2]
    cache = os.path.join(root, "cache")
    rank = int(os.environ["RANK"])
    out: dict[str, object] = {"rank": rank}
    try:
        if rank == 0:
            evictor(case, root, cache, out)
        else:
            publisher(root, cache, out)
        out["error"] = None
    except OSError as exc:
        out["error"] = [type(exc).__name__, exc.errno]
    left = sorted(os.path.relpath(os.path.join(d, n), cache) for d, dirs, files in os.walk(cache) for n in dirs + files)
    out["left"] = left
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

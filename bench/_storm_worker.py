"""One rank of the metadata storm (``bench/storm.py``): run by torchrun on each simulated node.

Every rank makes the same output tree, then checkpoints ``--steps`` times as training jobs do: make
``tmp-checkpoint-N`` (exist_ok), write its shard, wait at a store barrier, rank 0 renames the directory to
``checkpoint-N``, every rank removes ``checkpoint-(N-2)`` with ``shutil.rmtree``. Each ``rmtree`` runs in a
thread of its own with no handler around it: a lost race there is a would-be crash (fsguard absorbs it; without
fsguard the thread dies), counted per rank instead of ending the job. Barriers use the job's torchrun store
(no filesystem calls); local rank 0 of each node reads the JuiceFS client's ``.stats`` before and after the storm.
Each rank writes its figures to ``<--report>/rank-N.json`` (on the machine's disk, not on the storm's filesystem).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any


def tree_paths(root: str, dirs: int) -> list[str]:
    """The output tree: ``dirs`` leaf directories in groups of 20 (``out/part-G/d-I``)."""
    return [os.path.join(root, "out", f"part-{i // 20:02d}", f"d-{i:03d}") for i in range(dirs)]


def shard_bytes(rank: int, step: int, size: int) -> bytes:
    line = f"rank {rank} step {step}\n".encode()
    return (line * (size // len(line) + 1))[:size]


def read_stats(mount: str) -> dict[str, float]:
    """JuiceFS's counters from the mount's root: operations (``juicefs_fuse_ops_total_*``,
    ``juicefs_meta_ops_total_*``) and the seconds spent in them (``juicefs_meta_ops_duration_seconds_*``)."""
    counters: dict[str, float] = {}
    with open(os.path.join(mount, ".stats"), encoding="utf-8") as f:
        for line in f:
            name, _, value = line.strip().rpartition(" ")
            if name.startswith(("juicefs_fuse_ops_total_", "juicefs_meta_ops_total_", "juicefs_meta_ops_duration_s")):
                counters[name] = float(value)
    return counters


def as_a_crash(call: Callable[[], Any]) -> str | None:
    """Run ``call`` in a thread with no handler around it; the name of the error that escaped, or None."""
    escaped: list[BaseException] = []

    def ending() -> None:
        try:
            call()
        except BaseException as error:  # seen, and the thread ends: a program-set excepthook would decide
            escaped.append(error)
            raise SystemExit from error  # (the default excepthook ends a thread on SystemExit quietly)

    thread = threading.Thread(target=ending)
    thread.start()
    thread.join()
    return f"{type(escaped[0]).__name__}: {getattr(escaped[0], 'errno', '')}" if escaped else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("mount")
    parser.add_argument("--dirs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--shard-bytes", type=int, default=16384)
    parser.add_argument("--report", required=True, help="directory for each rank's JSON")
    parser.add_argument("--rank0", action="store_true", help="the usual fix: rank 0 makes and removes, peers wait")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])

    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store = TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=300)
    )
    run = os.path.basename(args.root)

    def barrier(name: str) -> None:
        key = f"storm/{run}/{name}"
        if store.add(key, 1) == world:
            store.set(key + "/go", "1")
        store.wait([key + "/go"])

    barrier("up")
    before = read_stats(args.mount) if local_rank == 0 else {}
    barrier("start")
    t0 = time.time()
    one = not args.rank0 or rank == 0  # whether this rank makes the shared calls
    for path in tree_paths(args.root, args.dirs) if one else ():
        os.makedirs(path, exist_ok=True)
    if args.rank0:
        barrier("tree")
    t_tree = time.time()
    ckpt = os.path.join(args.root, "ckpt")
    failures: list[str] = []
    for step in range(args.steps):
        tmp = os.path.join(ckpt, f"tmp-checkpoint-{step}")
        if one:
            os.makedirs(tmp, exist_ok=True)
        if args.rank0:
            barrier(f"tmp-{step}")
        with open(os.path.join(tmp, f"shard-{rank:03d}.bin"), "wb") as f:
            f.write(shard_bytes(rank, step, args.shard_bytes))
        barrier(f"saved-{step}")
        if rank == 0:
            os.rename(tmp, os.path.join(ckpt, f"checkpoint-{step}"))
        if step >= 2 and one:
            old = os.path.join(ckpt, f"checkpoint-{step - 2}")
            failed = as_a_crash(lambda old=old: shutil.rmtree(old))  # type: ignore[misc]
            if failed is not None:
                failures.append(f"step {step}: {failed}")
    t1 = time.time()
    barrier("end")
    after = read_stats(args.mount) if local_rank == 0 else {}
    out = {
        "rank": rank,
        "node": os.environ.get("GROUP_RANK", "?"),
        "local_rank": local_rank,
        "t0": t0,
        "tree_s": t_tree - t0,
        "t1": t1,
        "failures": failures,
        "stats": {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)},
    }
    with open(os.path.join(args.report, f"rank-{rank}.json"), "w", encoding="utf-8") as report:
        json.dump(out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

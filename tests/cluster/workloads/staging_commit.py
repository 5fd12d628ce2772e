"""A Trainer's atomic checkpoint on a shared filesystem: commit on rank 0, clean up the staging dir elsewhere.

Each step every rank calls ``os.makedirs(staging, exist_ok=True)`` in natural arrival order (after a random
pause of up to 2 ms: any rank of either node may be the one that makes it) and writes its shard into it; after
a barrier global rank 0 does
``if os.path.exists(staging): os.rename(staging, checkpoint-<step>)`` while the first process of every
other node does ``if os.path.exists(staging): shutil.rmtree(staging)`` ("clean up the staging dir on the
other nodes"). On one shared filesystem those are the same directory (issue 12). Rank 0 prints one line per
step, ``workload: step <n> <complete|partial|missing>``.

usage: staging_commit.py ROOT [--steps N]
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import shutil
import time

import _common


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    me = _common.start()
    for step in range(1, args.steps + 1):
        staging = os.path.join(args.root, f"tmp-checkpoint-{step}")
        final = os.path.join(args.root, f"checkpoint-{step}")
        _common.barrier()
        time.sleep(random.random() * 0.002)
        os.makedirs(staging, exist_ok=True)
        for i in range(8):
            with open(os.path.join(staging, f"model-rank{me.rank}-{i}.bin"), "wb") as shard:
                shard.write(_common.payload("shard", step, me.rank, i, size=4096))
        _common.barrier()
        if me.rank == 0:
            if os.path.exists(staging):
                os.rename(staging, final)
        elif me.local_main:  # noqa: SIM102 - the Trainer's shape, as written there
            if os.path.exists(staging):
                shutil.rmtree(staging)
        _common.barrier()
        if me.rank == 0:
            n = _count(final)
            outcome = "missing" if n < 0 else "complete" if n == 8 * me.world_size else "partial"
            print(f"workload: step {step} {outcome}", flush=True)
    _common.finish()


def _count(path: str) -> int:
    """The entries of ``path``, -1 where it is missing. GlusterFS's client may answer a listing of a directory
    renamed a moment ago with ``ESTALE`` (seen under load, 2 of 14 runs, with the peer's rmtree yielded and nothing
    removed): the check asks again, as an NFS client would, for up to 2 s."""
    for attempt in range(20):
        try:
            return len(os.listdir(path))
        except FileNotFoundError:
            return -1
        except OSError as error:
            if error.errno != errno.ESTALE or attempt == 19:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    main()

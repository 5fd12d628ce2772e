"""A kernel compile cache shared by every rank, written the way many JIT caches write it.

Every rank "compiles" the same kernels and publishes each one atomically: write ``<key>.<pid>.<n>.tmp``
then ``os.replace`` it onto ``<key>.so``. The temp name is only as unique as pid and a *seeded* random
number: on a real cluster pids repeat across nodes (here: equal pid namespaces), so the same local rank
of two nodes writes the same temp file, and the second ``os.replace`` fails with ``FileNotFoundError``.

usage: compile_cache.py ROOT [--kernels N] [--seed S]
"""

from __future__ import annotations

import argparse
import os
import random

import _common

CHUNK = 16 * 1024


def compile_kernel(key: str) -> bytes:
    """The same key gives the same binary on every rank (as a deterministic compiler does)."""
    return _common.payload("kernel", key, size=256 * 1024)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--kernels", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _common.start()
    cache = os.path.join(args.root, "cache")
    os.makedirs(cache, exist_ok=True)
    rng = random.Random(args.seed)
    for i in range(args.kernels):
        key = f"kernel_{i:03d}"
        suffix = rng.randrange(1 << 30)  # drawn on every rank, so the sequences stay equal
        binary = compile_kernel(key)
        _common.barrier()  # every rank misses the cache at the same moment, as after a code change
        final = os.path.join(cache, f"{key}.so")
        if os.path.exists(final):
            continue
        tmp = os.path.join(cache, f"{key}.{os.getpid()}.{suffix}.tmp")
        with open(tmp, "wb") as out:
            for at in range(0, len(binary), CHUNK):
                out.write(binary[at : at + CHUNK])
                out.flush()
        os.replace(tmp, final)
    _common.finish()


if __name__ == "__main__":
    main()

"""A trainer's checkpoint loop, in the shape that breaks on multi-node shared filesystems.

Each step every rank writes its weights shard and ``rng_state_<rank>.pth`` into ``staging/``; after a
barrier the first process of *each node* renames ``staging`` to ``checkpoint-<step>`` (a
``main_process_first(local=True)`` block run on every node against one shared directory); then every rank
rotates old checkpoints with ``shutil.rmtree``. Without fsguard the second node's rename and all but one
``rmtree`` fail with ``FileNotFoundError``.

usage: checkpoint_loop.py ROOT [--steps N] [--keep K]
"""

from __future__ import annotations

import argparse
import os
import shutil

import _common
import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--keep", type=int, default=2)
    args = parser.parse_args()
    me = _common.start()
    staging = os.path.join(args.root, "staging")
    generator = torch.Generator().manual_seed(1000 + me.rank)

    for step in range(1, args.steps + 1):
        os.makedirs(staging, exist_ok=True)
        _common.barrier()
        with open(os.path.join(staging, f"model-rank{me.rank}.bin"), "wb") as shard:
            shard.write(_common.payload("shard", step, me.rank))
        torch.rand(4, generator=generator)  # "training" advances this rank's random state
        torch.save(generator.get_state(), os.path.join(staging, f"rng_state_{me.rank}.pth"))
        _common.barrier()

        if me.local_main:
            os.rename(staging, os.path.join(args.root, f"checkpoint-{step}"))
        _common.barrier()

        old = step - args.keep
        if old >= 1:
            shutil.rmtree(os.path.join(args.root, f"checkpoint-{old}"))
        _common.barrier()
        if me.rank == 0:
            print(f"workload: step {step} saved", flush=True)
    _common.finish()


if __name__ == "__main__":
    main()

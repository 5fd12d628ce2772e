"""One rank of a job in which every rank logs to one tensorboardX run directory, as allennlp's trainer did
(allenai/allennlp #3841): tensorboardX's ``directory_check`` creates each writer's directory with
``if not os.path.exists(path): os.makedirs(path)`` (tensorboardX 1.x to 2.6.2, the latest), and ``add_scalars``
opens one writer per tag, in a directory of its own.

Run as ``torchrun ... tensorboardx_logdir.py <logdir> <steps>``; rank 0 prints one JSON line: every directory
under the log directory and how many event files each holds.
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist
from tensorboardX import SummaryWriter

TAGS = ("loss", "accuracy", "lr", "grad_norm", "throughput", "memory")


def main() -> None:
    logdir, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for split in ("train", "validation"):
        dist.barrier()  # the ranks start each phase together, as after a training step
        writer = SummaryWriter(os.path.join(logdir, split), filename_suffix=f".rank{rank}")
        for step in range(steps):
            writer.add_scalars("metrics", {tag: float(step * rank) for tag in TAGS}, step)
        writer.close()
    dist.barrier()
    if rank == 0:
        tree = {
            os.path.relpath(here, logdir): len([f for f in files if ".tfevents." in f])
            for here, _, files in sorted(os.walk(logdir))
        }
        print(json.dumps(tree, sort_keys=True), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

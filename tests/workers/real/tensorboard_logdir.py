"""One rank of a job in which every rank logs to one TensorBoard run directory, as allennlp's trainer did
(allenai/allennlp #3841) and yolov5's ``train.py`` (ultralytics/yolov5 #2275): each writer makes its directory
with "exists, else make": tensorboardX's ``directory_check`` (``if not os.path.exists(path):
os.makedirs(path)``, tensorboardX 1.x to 2.6.2, the latest) and, for ``torch.utils.tensorboard``, tensorboard's
``EventFileWriter`` (``if not tf.io.gfile.exists(logdir): tf.io.gfile.makedirs(logdir)``, whose
``os.makedirs(path)`` failure becomes ``AlreadyExistsError``; tensorboard up to 2.5). ``add_scalars`` opens
one writer per tag, in a directory of its own.

Run as ``torchrun ... tensorboard_logdir.py <tensorboardX|torch> <logdir> <steps>``; rank 0 prints one JSON
line: every directory under the log directory and how many event files each holds.
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist

TAGS = ("loss", "accuracy", "lr", "grad_norm", "throughput", "memory")


def main() -> None:
    library, logdir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if library == "tensorboardX":
        from tensorboardX import SummaryWriter
    else:
        from torch.utils.tensorboard import SummaryWriter
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

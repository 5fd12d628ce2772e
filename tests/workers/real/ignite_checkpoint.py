"""One rank of a pytorch-ignite 0.3.0 training loop whose ``ModelCheckpoint`` handler every process attaches,
as ignite's examples of the time let users do: its ``DiskSaver`` makes the directory with "exists, else make"
and ``ModelCheckpoint(n_saved=2)`` removes the oldest checkpoint file with ``os.remove`` on every process.

Run as ``torchrun ... ignite_checkpoint.py <dirname> <iterations>``; rank 0 prints one JSON line: the files
left in the directory.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from ignite.engine import Engine, Events
from ignite.handlers import ModelCheckpoint


def main() -> None:
    dirname, iterations = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(engine: Engine, batch: torch.Tensor) -> float:
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        return float(loss)

    trainer = Engine(step)
    dist.barrier()  # the ranks start together, as after the process group's setup
    checkpoint = ModelCheckpoint(dirname, "job", n_saved=2, require_empty=False)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint, {"model": model, "optimizer": optimizer})
    trainer.run([torch.randn(8, 64) for _ in range(iterations)], max_epochs=1)
    dist.barrier()
    if dist.get_rank() == 0:
        print(json.dumps(sorted(os.listdir(dirname))), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

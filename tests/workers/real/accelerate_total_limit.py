"""One rank of an ``Accelerator`` training loop that checkpoints every step with ``save_state`` and
``ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=2)``: accelerate up to 0.22.0 removes the
oldest checkpoint folder with ``shutil.rmtree`` on every process (huggingface/accelerate #1982).

Run as ``torchrun ... accelerate_total_limit.py <project_dir> <saves>``; rank 0 prints one JSON line: the
checkpoint folders left and the files in each.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration

SHARDS = 32


class Shard:
    """A piece of training state ``save_state`` writes into a file of its own."""

    def __init__(self, i: int) -> None:
        self.values = torch.full((256,), float(i))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"values": self.values}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.values = state["values"]


def main() -> None:
    project, saves = sys.argv[1], int(sys.argv[2])
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for i in range(SHARDS):  # a checkpoint of many files, as sharded states make it
        accelerator.register_for_checkpointing(Shard(i))
    for _ in range(saves):
        loss = model(torch.randn(4, 16)).sum()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.save_state()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        root = os.path.join(project, "checkpoints")
        left = {name: sorted(os.listdir(os.path.join(root, name))) for name in sorted(os.listdir(root))}
        print(json.dumps(left), flush=True)


if __name__ == "__main__":
    main()

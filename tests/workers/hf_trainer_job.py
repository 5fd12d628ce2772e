"""One rank of a real Hugging Face ``Trainer`` job: a tiny GPT-2 built from its config (nothing downloaded),
random tokens, a checkpoint every 2 steps and ``save_total_limit=2`` (the Trainer's own rotation removes old
checkpoints with ``shutil.rmtree``). Every rank writes its ``rng_state_<rank>.pth`` into each checkpoint.

Run as ``torchrun ... hf_trainer_job.py <output_dir> <steps> [each-node]``; rank 0 prints one JSON line: the
checkpoints left and the files in each. ``each-node``: ``save_on_each_node=True``, every node's local rank 0
saves (and, from transformers 4.36 to 4.37, renames ``tmp-checkpoint-N`` inside
``main_process_first(local=True)``: on a shared filesystem the nodes' local mains race on one rename), every
checkpoint kept; nothing printed then: the test reads the shared directory where it is kept, not through a node's caching view.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    each_node = sys.argv[3:] == ["each-node"]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=32))
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=4,
        max_steps=steps,
        save_steps=2,
        # each node: no rotation (two nodes rotating one shared directory by mtime remove each other's newest
        # checkpoint now and then, with or without fsguard: an ordering race of the Trainer's own)
        save_total_limit=None if each_node else 2,
        save_on_each_node=each_node,
        use_cpu=True,
        ddp_backend="gloo",
        report_to=[],
        logging_steps=1000,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=Tokens()).train()
    torch.distributed.barrier()  # every rank's last save is done
    if int(os.environ["RANK"]) == 0 and not each_node:  # each node: the test reads the shared directory itself
        left = {name: sorted(os.listdir(os.path.join(out, name))) for name in sorted(os.listdir(out))}
        print(json.dumps(left), flush=True)
    torch.distributed.destroy_process_group()  # not at interpreter exit, where gloo's threads may abort


if __name__ == "__main__":
    main()

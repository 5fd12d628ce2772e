"""One rank of a Hugging Face ``Trainer`` job of transformers 4.25 (huggingface/transformers #20988) with
``load_best_model_at_end=True`` and ``save_total_limit=1``: at the end of ``train()`` every process, not only
the one that saves, removes each checkpoint that is not the best one with ``shutil.rmtree``. A GPT-2
built from its config (nothing downloaded), random tokens, an evaluation and a checkpoint every 2 steps; the
metric ranks the first evaluation best, so the last checkpoint is the one removed at the end.

Run as ``torchrun ... hf_trainer_best_model.py <output_dir> <steps>``; rank 0 prints one JSON line: the
checkpoints left and the files in each.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

# ~13M parameters: a checkpoint of ~150 MB, whose removal takes long enough for the peers to meet in it, as
# real checkpoints' removals do (a GPT-2 of a few thousand parameters is gone before a peer lists it)
LAYERS, WIDTH = 4, 512


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    evaluations = 0

    def first_is_best(_: Any) -> dict[str, float]:
        nonlocal evaluations
        evaluations += 1
        return {"order": -float(evaluations)}  # every rank counts its own evaluations alike

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=2, vocab_size=128, n_positions=32))
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=steps,
        evaluation_strategy="steps",
        eval_steps=2,
        save_steps=2,
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="order",
        greater_is_better=True,
        no_cuda=True,
        xpu_backend="gloo",
        report_to=[],
        logging_steps=1000,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=Tokens(256), eval_dataset=Tokens(8), compute_metrics=first_is_best
    )
    trainer.train()
    torch.distributed.barrier()  # every rank's removals are done
    if int(os.environ["RANK"]) == 0:
        left = {name: sorted(os.listdir(os.path.join(out, name))) for name in sorted(os.listdir(out))}
        print(json.dumps(left), flush=True)
    torch.distributed.destroy_process_group()  # not at interpreter exit, where gloo's threads may abort


if __name__ == "__main__":
    main()

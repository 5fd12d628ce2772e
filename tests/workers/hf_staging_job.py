"""One rank of a real Hugging Face ``Trainer`` job whose checkpoint goes through a staging directory
(transformers 4.38.x, ``tmp-checkpoint-N``): every rank saves into ``tmp-checkpoint-N`` (its
``rng_state_<rank>.pth``; rank 0 the model, optimizer and state), then after a barrier global rank 0 renames it
to ``checkpoint-N`` while the local rank 0 of every other node removes it with ``shutil.rmtree``; on one shared
filesystem those are the same directory. Nothing downloaded: a tiny GPT-2 built from its config.

Run as ``torchrun ... hf_staging_job.py <output_dir> <steps>`` with the old transformers first on PYTHONPATH;
global rank 0 prints one JSON line at the end: every directory left in the output dir and the files in it.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 1024

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=32))
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=2,
        max_steps=steps,
        save_steps=1,
        use_cpu=True,
        ddp_backend="gloo",
        report_to=[],
        logging_steps=1000,
        dataloader_num_workers=0,
        disable_tqdm=True,
        save_safetensors=True,
    )
    Trainer(model=model, args=args, train_dataset=Tokens()).train()
    if int(os.environ["RANK"]) == 0:
        left = {
            name: sorted(os.listdir(os.path.join(out, name)))
            for name in sorted(os.listdir(out))
            if os.path.isdir(os.path.join(out, name))
        }
        print("trainer-result: " + json.dumps(left), flush=True)


if __name__ == "__main__":
    main()

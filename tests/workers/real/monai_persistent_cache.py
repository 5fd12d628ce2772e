"""One rank of a job in which every rank builds MONAI's ``PersistentDataset`` on one shared cache directory, as
MONAI's distributed examples do: MONAI up to 0.5.3 makes the directory with "exists, else make"
(``if not self.cache_dir.exists(): self.cache_dir.mkdir(parents=True)``, Project-MONAI/MONAI #2374), then each
rank fills the cache (one ``<md5>.pt`` per item, written to a private temporary directory and moved in).

Run as ``torchrun ... monai_persistent_cache.py <cache_root> <items>``; one dataset (and cache directory) per
fold and split; rank 0 prints one JSON line: the files in each cache directory.
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist
from monai.data import PersistentDataset
from monai.transforms import Lambda

SPLITS = ("train", "validation", "test")
FOLDS = 16  # cross-validation folds: a cache directory per fold and split, each a chance for the race


def main() -> None:
    cache_root, items = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    # plain lists: their hash is the same on every rank (a tensor's pickle is not), and torch >= 2.6's
    # weights-only torch.load reads them back (numpy arrays it refuses)
    data = [{"image": [float(i)] * 16} for i in range(items)]
    double = Lambda(lambda d: {"image": [2 * x for x in d["image"]]})
    caches = [os.path.join(f"fold{fold}", split) for fold in range(FOLDS) for split in SPLITS]
    for cache in caches:
        dist.barrier()  # the ranks start each phase together, as after a training step
        dataset = PersistentDataset(data, transform=double, cache_dir=os.path.join(cache_root, cache))
        total = sum(sum(dataset[i]["image"]) for i in range(len(dataset)))
        assert total == 2 * 16 * sum(range(items)), total
    dist.barrier()
    if dist.get_rank() == 0:
        tree = {cache: sorted(os.listdir(os.path.join(cache_root, cache))) for cache in caches}
        print(json.dumps(tree), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

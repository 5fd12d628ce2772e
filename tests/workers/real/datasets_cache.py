"""One rank of a job in which every rank loads one local JSON-lines file with ``datasets.load_dataset`` into
one shared cache directory (transformers #30859: "Cache problem while running on multiple nodes"; datasets
2.x). ``download_and_prepare`` builds the cache entry inside ``<entry>.incomplete`` under a ``FileLock``, then
moves it onto ``<entry>``. Where ``flock`` does not lock across nodes (tox-dev/filelock #389; Lustre mounted
with ``localflock``; here: each simulated node's own FUSE view of the shared directory), the nodes build one
entry in one ``.incomplete`` directory at once: a shared writer.

Run as ``torchrun ... datasets_cache.py <cache_dir> <data.jsonl>``; every rank prints one JSON line: the
number of rows it loaded and their sum.
"""

from __future__ import annotations

import json
import sys

import datasets


def main() -> None:
    cache_dir, data = sys.argv[1], sys.argv[2]
    loaded = datasets.load_dataset("json", data_files=data, cache_dir=cache_dir, split="train")
    print(json.dumps({"rows": loaded.num_rows, "sum": sum(loaded["value"])}), flush=True)


if __name__ == "__main__":
    main()

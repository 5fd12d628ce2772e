"""One rank of a job whose nodes each save a ``torch.distributed.checkpoint`` with their own process group into
one shared directory (issue 45): ``dcp.save(state, checkpoint_id=<out>/step-<n>, process_group=<this node's>)``.

Each node's group has its own coordinator, so the nodes write the same names: in ``FileSystemWriter.finish`` each
coordinator writes ``.metadata.tmp`` and renames it onto ``.metadata``, and the two nodes' coordinators race on
that rename. With ``per-rank`` (``use_collectives=False``: no gather, every rank finishes its own save) every rank
writes ``__<group rank>.metadata.tmp`` instead, and the nodes' ranks of one group rank race. The state is the same
on every rank (one seed), so whichever node's file wins holds the same checkpoint.

Run as ``torchrun ... dcp_node_groups.py <out> <saves> [per-rank] [nosync]``; global rank 0 prints one JSON line
at the end: the saves whose every ``.metadata`` file loads back.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main() -> None:
    out, saves = sys.argv[1], int(sys.argv[2])
    options = sys.argv[3:]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    groups = [dist.new_group(list(range(first, first + per_node))) for first in range(0, world, per_node)]
    mine = groups[rank // per_node]
    torch.manual_seed(0)
    state = {"model": torch.nn.Linear(16, 16).state_dict()}
    for step in range(saves):
        dist.barrier()  # the nodes save together, as a job's checkpoint step does
        where = os.path.join(out, f"step-{step}")
        writer = dcp.FileSystemWriter(where, sync_files="nosync" not in options)
        dcp.save(state, storage_writer=writer, process_group=mine, use_collectives="per-rank" not in options)
    dist.barrier()
    if rank == 0:
        whole = []
        for step in range(saves):
            where = os.path.join(out, f"step-{step}")
            names = [n for n in os.listdir(where) if n.endswith(".metadata")]
            for name in names:
                pickle.loads(_read(os.path.join(where, name)))  # a whole metadata file, not one mixed with a peer's
            if names:
                whole.append(step)
        print(json.dumps({"whole": whole}), flush=True)
    dist.destroy_process_group()


def _read(path: str) -> bytes:
    """The file's bytes. The listing is fresh, but this node's lookup may still be stale for the mount's cache time
    (a peer replaced the file a moment ago): asked again for up to 10 s (the 4a27ab5 run's one failure)."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            with open(path, "rb") as file:
                return file.read()
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    main()

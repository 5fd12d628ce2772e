"""What the workload scripts share: their place in the job, a gloo process group, and checkable payloads.

The scripts make their racy filesystem calls themselves (never through this module), so fsguard's records
name the workload script as the call site. Imported by the scripts (their directory is on ``sys.path``)
and by the tests (to check payloads).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

_started = 0.0
RESULT_SUBDIRS = ("checkpoints", "eval", "samples", "tensorboard")  # what results_dir.py makes


@dataclass(frozen=True)
class Place:
    """This process's place in the job, read from whichever launcher started it."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int

    @property
    def local_main(self) -> bool:
        """The first process of its node: the one a ``main_process_first(local=True)`` block runs first."""
        return self.local_rank == 0


def place(env: Mapping[str, str] = os.environ) -> Place:
    """Rank and size as torchrun, Open MPI's mpirun or SLURM's srun announce them."""
    for launcher, rank, size, local in (
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ):
        if rank in env:
            return Place(launcher, int(env[rank]), int(env[size]), int(env.get(local, "0")))
    raise SystemExit("workload: no launcher environment (RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)")


def start(timeout_s: float = 60) -> Place:
    """Join the job's gloo process group (the job's start gate) and say who we are on stdout."""
    import torch.distributed as dist

    me = place()
    timeout = datetime.timedelta(seconds=timeout_s)
    if me.launcher == "torchrun":
        dist.init_process_group("gloo", timeout=timeout)
    else:
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ["MASTER_PORT"]
        dist.init_process_group(
            "gloo", init_method=f"tcp://{addr}:{port}", rank=me.rank, world_size=me.world_size, timeout=timeout
        )
    dist.barrier()
    global _started
    _started = time.monotonic()
    print(
        f"workload: rank {me.rank}/{me.world_size} local {me.local_rank} host {socket.gethostname()} "
        f"pid {os.getpid()} via {me.launcher}",
        flush=True,
    )
    return me


def barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def finish() -> None:
    """Last barrier; rank 0 says how long the workload took after the start gate (launch time excluded)."""
    import torch.distributed as dist

    dist.barrier()
    if dist.get_rank() == 0:
        print(f"workload: finished in {time.monotonic() - _started:.2f} s", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()


def payload(*key: object, size: int = 64 * 1024) -> bytes:
    """Deterministic bytes for ``key``: what a file must hold, recomputable by the test that checks it."""
    seed = hashlib.sha256(repr(key).encode()).digest()
    count = -(-size // 32)
    return b"".join(hashlib.sha256(seed + i.to_bytes(8, "little")).digest() for i in range(count))[:size]

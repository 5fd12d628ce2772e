"""One rank of a torchrun job racing ``rmtree`` against ``rename`` of one staging directory, then storms.

Run as ``torchrun --nproc-per-node 4 serialize_race.py <root> <rounds>``; rank 0 prints one JSON line.

Race rounds (ranks 0-1 commit ``staging -> ckpt`` with ``os.rename``, ranks 2-3 clean up with
``shutil.rmtree(staging)``), three "mid" rounds then one "free" round in every four:
  * "mid": the committers wait until the cleanup has visibly started (files gone from the staging
    directory), then rename: without serialization the rename lands mid-walk and the checkpoint is partial;
  * "free": everyone starts after a random pause of up to 20 ms.
Outcome of a round: "complete" (ckpt has every file, staging gone), "gone" (neither exists) or "partial".
Storms: every rank ``os.makedirs(p)`` (``exist_ok=False``), then every rank ``os.rename(s, d)`` of one
directory: the work happens once, the other calls are absorbed by the guards.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable

import torch.distributed as dist
from gate import crash_of  # run as a script: this directory is on sys.path

FILES = 2000


def count_files(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def outcome(round_dir: str) -> str:
    staging, ckpt = os.path.join(round_dir, "staging"), os.path.join(round_dir, "ckpt")
    if os.path.lexists(staging):
        return "partial"  # cleanup was asked for by two ranks: any staging left is a half-removed one
    if not os.path.lexists(ckpt):
        return "gone"
    return "complete" if count_files(ckpt) == FILES else "partial"


def _race(rank: int, round_dir: str, kind: str) -> str:
    staging = os.path.join(round_dir, "staging")
    if kind == "free":
        time.sleep(random.uniform(0, 0.02))
    if rank < 2:
        if kind == "mid":
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:
                    if len(os.listdir(staging)) < FILES:
                        break
                except FileNotFoundError:
                    break
        os.rename(staging, os.path.join(round_dir, "ckpt"))
        return "renamed"
    shutil.rmtree(staging)
    return "removed"


def race(rank: int, round_dir: str, kind: str) -> str:
    # A lost race ends a thread of its own (a would-be crash); a handler here would get the error from fsguard
    # (it defers to code that handles the error itself).
    result, error = crash_of(_race, rank, round_dir, kind)
    if error is not None and not isinstance(error, OSError):
        raise error
    return str(result) if error is None else type(error).__name__


def _call(function: Callable[..., None], args: tuple[str, ...]) -> None:
    function(*args)


def main() -> None:
    root, rounds = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    random.seed(rank * 7919 + int(time.time() * 1000))
    outcomes: list[str] = []
    rounds_calls: list[list[object]] = []
    for k in range(rounds):
        round_dir = os.path.join(root, f"round{k}")
        if rank == 0:
            staging = os.path.join(round_dir, "staging")
            os.makedirs(staging)
            for i in range(FILES):
                with open(os.path.join(staging, f"shard{i}"), "w") as f:
                    f.write("x")
        dist.barrier()
        result = race(rank, round_dir, "free" if k % 4 == 3 else "mid")
        gathered: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, result)
        if rank == 0:
            outcomes.append(outcome(round_dir))
            rounds_calls.append(gathered)
        dist.barrier()

    # Storms: everyone does the same thing to one path at once.
    storm = os.path.join(root, "storm")
    if rank == 0:
        os.makedirs(os.path.join(storm, "src"))
        with open(os.path.join(storm, "src", "weights"), "w") as f:
            f.write("w")
    dist.barrier()
    errors = []
    calls: list[tuple[Callable[..., None], tuple[str, ...]]] = [
        (os.makedirs, (os.path.join(storm, "made", "deep"),)),
        (os.rename, (os.path.join(storm, "src"), os.path.join(storm, "dst"))),
    ]
    for function, args in calls:
        _, error = crash_of(_call, function, args)  # a thread of its own, as in race()
        if error is not None:
            errors.append(f"{type(error).__name__}: {error}")
        dist.barrier()
    gathered_errors: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered_errors, errors)
    if rank == 0:
        from fsguard.state import STATE  # which backend served this job, for the test to check

        backend = getattr(STATE.serializer, "backend", None)
        print(
            json.dumps(
                {
                    "backend": getattr(backend, "name", None),
                    "store": getattr(backend, "address", None),
                    "outcomes": outcomes,
                    "calls": rounds_calls,
                    "storm_errors": gathered_errors,
                    "storm_dst_ok": os.path.isfile(os.path.join(storm, "dst", "weights")),
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""One rank of a job committing a checkpoint by ``os.rename`` while the other ranks clean up the same staging
directory with ``shutil.rmtree``, for ``tests/test_rename_wins.py`` (issue 12).

Run as ``python rename_wins_worker.py <root> <rounds>`` with a launcher environment, every rank at once;
``<root>/gate`` must exist. Each round every rank calls ``os.makedirs(staging, exist_ok=True)`` in natural
arrival order (each after a random pause of up to 2 ms, so that any rank may be the one that makes it: nobody
arranges who comes first) and writes its share of ``FILES`` files; after a
file barrier rank 0 does ``if os.path.exists(staging): os.rename(staging, final)`` and every other rank
``if os.path.exists(staging): shutil.rmtree(staging)``, as a Trainer's "commit on rank 0, clean up the
staging directory elsewhere" does. Every rank prints one JSON line: its failures, and for rank 0 the outcome
of every round: ``complete`` (the final checkpoint has every file), ``partial`` or ``missing``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time

from gate import barrier, crash_of  # run as a script: this directory is on sys.path

FILES = 300
RANK, WORLD = int(os.environ.get("RANK", "-1")), int(os.environ.get("WORLD_SIZE", "0"))  # set by the launcher


def commit_or_clean(staging: str, final: str) -> None:
    """Rank 0 commits, the others clean up: the calls' own frame has no handler (a broad ``except OSError``
    around the call itself would be the program handling the error: fsguard would leave it to it)."""
    if RANK == 0:
        if os.path.exists(staging):
            os.rename(staging, final)
    elif os.path.exists(staging):
        shutil.rmtree(staging)


def main() -> None:
    root, rounds = os.path.abspath(sys.argv[1]), int(sys.argv[2])
    failures: list[dict[str, object]] = []
    outcomes: list[str] = []
    for k in range(rounds):
        staging, final = os.path.join(root, f"tmp-checkpoint-{k}"), os.path.join(root, f"checkpoint-{k}")
        barrier(root, f"start-{k}", RANK, WORLD)
        time.sleep(random.random() * 0.002)
        os.makedirs(staging, exist_ok=True)  # every rank, as a save_model does: whoever comes first makes it
        for i in range(RANK, FILES, WORLD):
            with open(os.path.join(staging, f"shard-{i}.bin"), "w") as f:
                f.write(f"round {k} shard {i}\n")
        barrier(root, f"written-{k}", RANK, WORLD)
        _, error = crash_of(commit_or_clean, staging, final)  # a lost race ends a thread: a would-be crash
        if error is not None:
            failures.append({"round": k, "type": type(error).__name__, "errno": error.errno})
        barrier(root, f"done-{k}", RANK, WORLD)
        if RANK == 0:
            try:
                n = len(os.listdir(final))
            except FileNotFoundError:
                n = -1
            outcomes.append("missing" if n < 0 else "complete" if n == FILES else "partial")
    print(json.dumps({"rank": RANK, "failures": failures, "outcomes": outcomes}), flush=True)


if __name__ == "__main__":
    main()

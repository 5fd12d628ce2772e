"""One rank of a job whose ranks race one guarded operation on one path, for ``tests/test_races.py``.

Run as ``python race_worker.py <op> <root> <iterations>`` with a launcher environment (``RANK``,
``WORLD_SIZE``, ...), every rank started at once; ``<root>/gate`` must exist. Rank 0 prepares every
iteration's inputs, then each iteration starts from a barrier on files in ``<root>/gate``, so all ranks
make the racing call together. A failed call is reported, not raised: the racing call itself is not inside a
``try`` (a program that handles the error in the calling frame gets it: fsguard defers to its handler), its
failure is caught one frame up, in ``main`` (a broad handler there is error reporting), and the worker prints one
JSON line
``{"rank", "pid", "failures": [{"iteration", "call", "type", "errno", "filename"}]}`` and exits 0, so
the test can count how often the race happened. The racing calls are marked ``# guarded call: <op>``:
the test finds the call site that fsguard's records must name by that marker.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from collections.abc import Callable

if __package__:  # imported by tests/test_races.py for its constants
    from .gate import barrier, crash_of
else:  # run as a script: this directory is on sys.path
    from gate import barrier, crash_of

RANK, WORLD = -1, 0  # this rank and the job's size, from the launcher environment (set by main)
SHARDS = 4  # files in a staged checkpoint
TREE = (6, 50)  # rmtree: subdirectories, files in each (plus as many files at the top)
TEMP_SUFFIX = ".tmp.pid_4242_7"  # compiler cache: pid and random seed coincide across nodes


def shard_text(k: int, i: int) -> str:
    return f"checkpoint {k} shard {i}\n" * 64


def kernel_text(k: int, rank: int) -> str:
    return f"kernel {k} built by rank {rank}\n" * 256


# --- preparation (rank 0, before the start gate) --------------------------------------------------------


def prepare_rename(root: str, k: int) -> None:
    staging = os.path.join(root, f"tmp-checkpoint-{k}")
    os.mkdir(staging)
    for i in range(SHARDS):
        with open(os.path.join(staging, f"shard-{i}.bin"), "w") as f:
            f.write(shard_text(k, i))


def prepare_rmtree(root: str, k: int) -> None:
    staging = os.path.join(root, f"staging-{k}")
    subdirs, files = TREE
    for d in range(subdirs):
        os.makedirs(os.path.join(staging, f"sub{d}"))
        for i in range(files):
            with open(os.path.join(staging, f"sub{d}", f"f{i}"), "w") as f:
                f.write("x")
    for i in range(files):
        with open(os.path.join(staging, f"top{i}"), "w") as f:
            f.write("x")


# --- the racing calls -------------------------------------------------------------------------------------


def race_makedirs(root: str, k: int) -> list[tuple[str, OSError]]:
    """Every rank makes the same results directory (nested, ``exist_ok=True``; then flat, without it)."""
    failures = []
    try:
        os.makedirs(os.path.join(root, f"shared-{k}", "a", "b"), exist_ok=True)
    except OSError as error:
        failures.append(("makedirs_exist_ok", error))
    os.makedirs(os.path.join(root, f"made-{k}"))  # guarded call: makedirs
    return failures


def race_rename(root: str, k: int) -> list[tuple[str, OSError]]:
    """Every rank commits the one staged checkpoint: only the first rename finds its source."""
    staging, final = os.path.join(root, f"tmp-checkpoint-{k}"), os.path.join(root, f"checkpoint-{k}")
    os.rename(staging, final)  # guarded call: rename
    return []


def race_replace(root: str, k: int) -> list[tuple[str, OSError]]:
    """Compiler cache: every rank publishes its build under the same temp name, then replaces the target.

    The build is written under a private name and renamed onto the shared temp name (atomic), so the
    contended call is ``os.replace`` alone. A barrier between publishing and replacing makes every rank's
    temp meet (the collision a cache hits by chance): the first replace wins, the others find the temp
    gone. (A temp published again *after* a lost replace is the separate case of
    ``test_replace_lost_to_a_republished_temp_is_absorbed``.)
    """
    target = os.path.join(root, f"kernel-{k}.so")
    private = f"{target}.rank{RANK}"
    with open(private, "w") as f:
        f.write(kernel_text(k, RANK))
    os.rename(private, target + TEMP_SUFFIX)
    barrier(root, f"published-{k}", RANK, WORLD)
    os.replace(target + TEMP_SUFFIX, target)  # guarded call: replace
    return []


def race_rmtree(root: str, k: int) -> list[tuple[str, OSError]]:
    """Every rank cleans up the same staging tree: they unlink entries a peer already removed."""
    shutil.rmtree(os.path.join(root, f"staging-{k}"))  # guarded call: rmtree
    return []


RACES: dict[str, Callable[[str, int], list[tuple[str, OSError]]]] = {
    "makedirs": race_makedirs,
    "rename": race_rename,
    "replace": race_replace,
    "rmtree": race_rmtree,
}
PREPARE: dict[str, Callable[[str, int], None]] = {"rename": prepare_rename, "rmtree": prepare_rmtree}


def main() -> None:
    global RANK, WORLD
    RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    op, root, iterations = sys.argv[1], os.path.abspath(sys.argv[2]), int(sys.argv[3])
    if RANK == 0 and op in PREPARE:
        for k in range(iterations):
            PREPARE[op](root, k)
    failures = []
    for k in range(iterations):
        barrier(root, f"iteration-{k}", RANK, WORLD)
        # A lost race ends the iteration's thread (a would-be crash); a handler here would be the program's own.
        lost, escaped = crash_of(RACES[op], root, k)
        if escaped is not None:
            if not isinstance(escaped, OSError):
                raise escaped
            lost = [(op, escaped)]
        for call, error in lost:
            failures.append(
                {
                    "iteration": k,
                    "call": call,
                    "type": type(error).__name__,
                    "errno": errno.errorcode.get(error.errno or 0),
                    "filename": error.filename,
                }
            )
    print(json.dumps({"rank": RANK, "pid": os.getpid(), "failures": failures}), flush=True)


if __name__ == "__main__":
    main()

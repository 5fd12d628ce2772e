"""One rank of a job whose ranks each claim a name by the failure of a guarded call, for ``tests/test_claims.py``.

Run as ``python claim_worker.py <idiom> <root> <rounds>`` with a launcher environment, every rank started at
once; ``<root>/gate`` must exist. Every round starts from a file barrier, then each rank claims, in
``<root>/round-<k>``, with one idiom programs really use:

* ``sequential``: the numbered log-dir loop of experiment frameworks
  (``while True: try: os.makedirs(run-i); break / except FileExistsError: i += 1``);
* ``parsl``: parsl's ``make_rundir`` as it long was (the next number after the highest present, inside
  ``try: ... except Exception: log; raise``), called by a driver that retries a lost claim;
* ``parsl_retry``: parsl's current ``make_rundir`` (``except FileExistsError``: warn, back off, try again,
  ``max_tries``);
* ``py2``: the same loop, Python 2 style (``except OSError as e: if e.errno != errno.EEXIST: raise``);
* ``mkdir_lock``: mkdir as a lock (``try: os.makedirs(lock) -> owner / except FileExistsError: not owner``);
* ``helper``: the claim loop with the ``makedirs`` inside a helper function two frames down.
* ``rename_lock``: ``os.rename(lock, unique)`` as "did I own it" (optuna's journal file lock).

Prints one JSON line ``{"rank", "pid", "claims": [name or null per round], "crashes": [...], "lost": n}``:
``lost`` counts the failures the rank's own handler saw.
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import random
import sys
import time

from gate import barrier  # run as a script: this directory is on sys.path

RANK, WORLD = -1, 0
logger = logging.getLogger("claim_worker")
lost = 0


def sequential(where: str) -> str:
    global lost
    i = 0
    while True:
        try:
            os.makedirs(os.path.join(where, f"run-{i}"))
            break
        except FileExistsError:
            lost += 1
            i += 1
    return f"run-{i}"


def py2(where: str) -> str:
    global lost
    i = 0
    while True:
        try:
            os.makedirs(os.path.join(where, f"run-{i}"))
            return f"run-{i}"
        except OSError as e:
            if e.errno != errno.EEXIST:
                raise
            lost += 1
            i += 1


def make_rundir(path: str) -> str:
    """parsl's make_rundir as it long was (parsl/dataflow/rundirs.py)."""
    try:
        if not os.path.exists(path):
            os.makedirs(path)
        prev_rundirs = glob.glob(os.path.join(path, "[0-9]*[0-9]"))
        current_rundir = os.path.join(path, "000")
        if prev_rundirs:
            x = sorted([int(os.path.basename(x)) for x in prev_rundirs])[-1]
            current_rundir = os.path.join(path, f"{x + 1:03}")
        os.makedirs(current_rundir)
        logger.debug("Parsl run initializing in rundir: %s", current_rundir)
        return os.path.abspath(current_rundir)
    except Exception:
        logger.exception("Failed to create run directory")
        raise


def parsl(where: str) -> str:
    global lost
    for _ in range(WORLD):  # each lost try means a peer took a number: WORLD tries always suffice
        try:
            return os.path.basename(make_rundir(where))
        except FileExistsError:
            lost += 1
            time.sleep(random.random() * 0.01)
    raise RuntimeError("no run directory after WORLD tries")


def make_rundir_retry(path: str, *, max_tries: int = 3) -> str:
    """parsl's current make_rundir (parsl/dataflow/rundirs.py), with a shorter back-off."""
    global lost
    backoff_time_s = random.random() * 0.01
    os.makedirs(path, exist_ok=True)
    try_count = 1
    while True:
        prev_rundirs = glob.glob(os.path.join(path, "[0-9]*[0-9]"))
        next = max([int(os.path.basename(x)) for x in prev_rundirs] + [-1]) + 1
        current_rundir = os.path.join(path, f"{next:03}")
        try:
            os.makedirs(current_rundir)
            return os.path.abspath(current_rundir)
        except FileExistsError:
            lost += 1
            logger.warning(f"Could not create rundir {current_rundir} on try {try_count}")
            if try_count >= max_tries:
                raise
            time.sleep(backoff_time_s)
            backoff_time_s *= 2 + random.random()
            try_count += 1


def parsl_retry(where: str) -> str:
    return os.path.basename(make_rundir_retry(where, max_tries=WORLD))


def mkdir_lock(where: str) -> str | None:
    global lost
    try:
        os.makedirs(os.path.join(where, "lock"))
        return "lock"
    except FileExistsError:
        lost += 1
        return None


def _make(path: str) -> None:
    os.makedirs(path)


def _claim(path: str) -> None:
    _make(path)


def helper(where: str) -> str:
    global lost
    i = 0
    while True:
        try:
            _claim(os.path.join(where, f"run-{i}"))  # makedirs two frames down
            return f"run-{i}"
        except FileExistsError:
            lost += 1
            i += 1


def rename_lock(where: str) -> str | None:
    global lost
    try:
        os.rename(os.path.join(where, "lockfile"), os.path.join(where, f"lockfile.{RANK}.{os.getpid()}"))
        return "lockfile"
    except FileNotFoundError:
        lost += 1
        return None


IDIOMS = {
    "sequential": sequential,
    "parsl": parsl,
    "parsl_retry": parsl_retry,
    "py2": py2,
    "mkdir_lock": mkdir_lock,
    "helper": helper,
    "rename_lock": rename_lock,
}


def main() -> None:
    global RANK, WORLD
    RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    idiom, root, rounds = sys.argv[1], os.path.abspath(sys.argv[2]), int(sys.argv[3])
    logging.basicConfig(level=logging.CRITICAL)  # parsl's log lines stay out of stderr (records only)
    if RANK == 0:
        for k in range(rounds):
            os.mkdir(os.path.join(root, f"round-{k}"))
            open(os.path.join(root, f"round-{k}", "lockfile"), "w").close()
    claims: list[str | None] = []
    crashes: list[str] = []
    for k in range(rounds):
        barrier(root, f"round-{k}", RANK, WORLD)
        try:
            claims.append(IDIOMS[idiom](os.path.join(root, f"round-{k}")))
        except Exception as error:  # reported: the test compares crashes with and without fsguard
            claims.append(None)
            crashes.append(type(error).__name__)
    print(json.dumps({"rank": RANK, "pid": os.getpid(), "claims": claims, "crashes": crashes, "lost": lost}))


if __name__ == "__main__":
    main()

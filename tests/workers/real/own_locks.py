"""One rank of a job in which every rank takes one lock many times, with three real locks whose filesystem
calls *are* the locking: filelock's ``SoftFileLock`` (``os.open(O_CREAT | O_EXCL)``, released with
``os.unlink``), lockfile's ``MkdirLockFile`` (``os.mkdir``, its ``FileExistsError`` handled as "locked by a
peer", released with ``os.unlink`` and ``os.rmdir``) and torch's ``FileBaton`` (the lock of
``torch.utils.cpp_extension``'s builds: ``O_EXCL``, released with ``os.remove``).

Inside the lock each rank claims a marker file with ``O_EXCL`` (a second holder would find it) and adds one
to a counter with a plain read and write (a second holder would lose an update).

Run as ``torchrun ... own_locks.py <dir> <rounds>``; rank 0 prints one JSON line: per lock, the counter and
how many times two ranks held it at once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import filelock
import lockfile.mkdirlockfile
import torch.distributed as dist
from torch.utils.file_baton import FileBaton


@contextmanager
def baton(path: str) -> Iterator[None]:
    lock = FileBaton(path, wait_seconds=0.001)
    while not lock.try_acquire():
        lock.wait()
    try:
        yield
    finally:
        lock.release()


@contextmanager
def mkdir_lock(path: str) -> Iterator[None]:
    lock = lockfile.mkdirlockfile.MkdirLockFile(path, threaded=False)
    lock.acquire()  # polls every 0.1 s, as lockfile does without a timeout
    try:
        yield
    finally:
        lock.release()


LOCKS: dict[str, Callable[[str], AbstractContextManager[object]]] = {
    "SoftFileLock": lambda path: filelock.SoftFileLock(path, timeout=60, poll_interval=0.001),
    "MkdirLockFile": mkdir_lock,
    "FileBaton": baton,
}


def critical(root: str) -> int:
    """The section the lock protects; 1 when a peer was inside it too."""
    try:
        fd = os.open(os.path.join(root, "holder"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return 1
    os.close(fd)
    counter = os.path.join(root, "counter")
    value = int(Path(counter).read_text()) if os.path.exists(counter) else 0
    time.sleep(0.0005)
    with open(counter, "w") as f:
        f.write(str(value + 1))
    os.remove(os.path.join(root, "holder"))
    return 0


def main() -> None:
    base, rounds = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    overlaps = {}
    for name, make in LOCKS.items():
        root = os.path.join(base, name)
        os.makedirs(root, exist_ok=True)
        dist.barrier()
        overlaps[name] = 0
        for _ in range(rounds):
            with make(os.path.join(root, "lock")):
                overlaps[name] += critical(root)
    dist.barrier()
    total = [None] * dist.get_world_size()
    dist.all_gather_object(total, overlaps)
    if dist.get_rank() == 0:
        result = {
            name: {
                "counter": int(Path(base, name, "counter").read_text()),
                "overlaps": sum(o[name] for o in total),
            }
            for name in LOCKS
        }
        print(json.dumps(result, sort_keys=True), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

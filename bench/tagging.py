"""The job's identity's cost on the happy path (issues 34, 46): one ``os.mkdir`` + ``os.rmdir`` pair, and one
``os.makedirs(a/b/c)`` + removal, unpatched against patched, in a process that looks like rank 1 of a 4-rank, 2-node
torchrun job (``fsguard.install()`` on the working tree).

Arms, interleaved round by round:

* ``unpatched``: the standard functions;
* ``patched, no tag``: fsguard installed with no job to name (``TORCHELASTIC_RUN_ID`` and ``MASTER_PORT`` unset:
  ``launcher.job_tag`` is None), so mkdir notes nothing: the wrapper alone;
* ``patched, tag``: fsguard installed in the job, so each directory a guarded mkdir creates is noted in the job's
  node-local journal (``fsguard.journal``): one ``write`` to a file in ``/dev/shm``, nothing on the directory
  (until issue 46, an ``lstat`` and a ``setxattr`` of ``user.fsguard.job`` on it);
* ``journal alone``: that note, without the mkdir.

Prints microseconds per pair (median of rounds) and the ratio to the unpatched arm, for the directory given
(default: a temporary directory; pass one on tmpfs, NFS... to measure there).
usage: python bench/tagging.py [--quick] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "FSGUARD": "1"}  # 2 nodes
NAMED = {"TORCHELASTIC_RUN_ID": "bench", "MASTER_PORT": "29500"}


def _pairs(where: str, n: int) -> Callable[[], float]:
    def run() -> float:
        mkdir, rmdir = os.mkdir, os.rmdir
        names = [os.path.join(where, f"d{i}") for i in range(n)]
        started = time.perf_counter()
        for name in names:
            mkdir(name)
            rmdir(name)
        return (time.perf_counter() - started) / n * 1e6

    return run


def _nested(where: str, n: int) -> Callable[[], float]:
    def run() -> float:
        makedirs, rmdir = os.makedirs, os.rmdir
        started = time.perf_counter()
        for i in range(n):
            top = os.path.join(where, f"n{i}")
            makedirs(os.path.join(top, "b", "c"))
            rmdir(os.path.join(top, "b", "c"))
            rmdir(os.path.join(top, "b"))
            rmdir(top)
        return (time.perf_counter() - started) / n * 1e6

    return run


def _journal(where: str, n: int) -> Callable[[], float]:
    from fsguard import journal

    target = os.path.join(where, "x")

    def run() -> float:
        made = journal.made
        started = time.perf_counter()
        for _ in range(n):
            made(target, "TORCHELASTIC_RUN_ID=bench;MASTER_PORT=29500;host=bench")
        return (time.perf_counter() - started) / n * 1e6

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--dir", metavar="DIR")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    import fsguard
    from fsguard import patching

    n, rounds = (200, 3) if args.quick else (2000, 15)
    results: dict[str, dict[str, list[float]]] = {"mkdir+rmdir": {}, "makedirs(a/b/c)+3 rmdir": {}}
    with tempfile.TemporaryDirectory(dir=args.dir) as where:
        work = {"mkdir+rmdir": _pairs(where, n), "makedirs(a/b/c)+3 rmdir": _nested(where, n // 4)}
        alone = _journal(where, n)
        setx: list[float] = []
        for _ in range(rounds):
            for arm, env in (("unpatched", None), ("patched, no tag", JOB), ("patched, tag", {**JOB, **NAMED})):
                if env is not None:
                    saved = dict(os.environ)
                    os.environ.update(env)
                    fsguard.install(["mkdir", "makedirs", "rmdir"])
                    assert (patching.STATE.job is not None) == (arm == "patched, tag")
                for what, run in work.items():
                    results[what].setdefault(arm, []).append(run())
                if env is not None:
                    fsguard.uninstall()
                    os.environ.clear()
                    os.environ.update(saved)
            setx.append(alone())
    table: dict[str, object] = {"journal alone (us)": round(statistics.median(setx), 2), "directory": where}
    print(f"job tag cost, {n} calls x {rounds} rounds in {where} (median microseconds; ratio to unpatched)")
    for what, arms in results.items():
        base = statistics.median(arms["unpatched"])
        row = {}
        for arm, times in arms.items():
            median = statistics.median(times)
            row[arm] = {"us": round(median, 2), "ratio": round(median / base, 3)}
            print(f"  {what:<26} {arm:<16} {median:8.2f} us  x{median / base:.3f}")
        table[what] = row
    print(f"  journal alone             {table['journal alone (us)']:8.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

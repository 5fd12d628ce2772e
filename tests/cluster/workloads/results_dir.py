"""Every rank creates the run's results directories with ``os.makedirs`` and no ``exist_ok``.

The classic "works on one GPU" bug: without fsguard every rank but the first to get there fails with
``FileExistsError``.

usage: results_dir.py ROOT [--run NAME]
"""

from __future__ import annotations

import argparse
import os

import _common

SUBDIRS = _common.RESULT_SUBDIRS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--run", default="run-1")
    args = parser.parse_args()
    me = _common.start()
    for sub in SUBDIRS:
        _common.barrier()
        os.makedirs(os.path.join(args.root, "results", args.run, sub))
    _common.barrier()
    if me.rank == 0:
        with open(os.path.join(args.root, "results", args.run, "done"), "w") as done:
            done.write("ok\n")
        print("workload: results directories made", flush=True)
    _common.finish()


if __name__ == "__main__":
    main()

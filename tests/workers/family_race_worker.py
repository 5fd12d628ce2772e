"""One rank of the issue-14 workload: every rank does a training loop's housekeeping on one shared directory.

Run as ``python family_race_worker.py <root> <rounds>`` with a launcher environment, every rank started at
once; ``<root>/gate`` must exist. Rank 0 first writes every round's checkpoint (``ckpt-<k>``), log
(``log-<k>.txt``) and ``last-<k>``; then each round starts from a file barrier and every rank, as code
written for one process does:

* rotation cleanup: removes ``ckpt-<k>`` with ``os.remove`` and ``log-<k>.txt`` with ``Path.unlink``
  (each after an existence check);
* check-then-mkdir: ``run-<k>`` with ``os.mkdir``, and ``epoch-<k>/metrics`` with ``Path.mkdir(parents=True)``;
* refreshes the ``latest`` symlink: ``if islink: os.remove(latest)``, then ``os.symlink("run-<k>", latest)``;
* hard-links ``best`` to ``last-<k>``: ``if lexists: os.remove(best)``, then ``os.link``;
* removes the build directory ``build-<k>`` (object files) by hand, as torch inductor's C++ builder removes
  its shared ``*_CxxBuild`` directory: ``os.walk(topdown=False)``, ``os.remove`` of each file, ``os.rmdir`` of
  each directory, then ``os.rmdir`` of the top. The tree is flat, as inductor's is: under a subdirectory a
  peer already removed whole, a name's parent is missing, which fsguard raises (README, known limits).

A failed call is reported, not raised: one JSON line ``{"rank", "pid", "failures": [...]}``, exit 0. Each
guarded call ends in ``# guarded call: <name>`` so the test can find the site its records must name.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable

from gate import barrier, crash_of  # run as a script: this directory is on sys.path

RANK, WORLD = -1, 0
# The training step between two rounds' housekeeping (seconds in real training). fsguard tells this rank's own
# symlink/link of the last round from a peer's newer one by the entry's ctime, which the kernel takes from a
# clock that ticks every few milliseconds: a peer's re-creation within that tick looks like this rank's own,
# and is raised as the standard library would (README, known limits).
STEP_S = 0.01


def prepare(root: str, rounds: int) -> None:
    for k in range(rounds):
        os.makedirs(os.path.join(root, f"build-{k}"))
        names = (
            f"ckpt-{k}",
            f"log-{k}.txt",
            f"last-{k}",
            f"build-{k}/out.so",
            f"build-{k}/a.o",
            f"build-{k}/b.o",
        )
        for name in names:
            with open(os.path.join(root, name), "w") as f:
                f.write(f"{name}\n")


def cleanup(root: str, k: int) -> None:
    old = os.path.join(root, f"ckpt-{k}")
    if os.path.exists(old):
        os.remove(old)  # guarded call: remove
    log = pathlib.Path(root, f"log-{k}.txt")
    if log.exists():
        log.unlink()  # guarded call: unlink


def make_dirs(root: str, k: int) -> None:
    run = os.path.join(root, f"run-{k}")
    if not os.path.isdir(run):
        os.mkdir(run)  # guarded call: mkdir
    metrics = pathlib.Path(root, f"epoch-{k}", "metrics")
    if not metrics.is_dir():
        metrics.mkdir(parents=True)  # guarded call: path-mkdir


def refresh_latest(root: str, k: int) -> None:
    latest = os.path.join(root, "latest")
    if os.path.islink(latest):
        os.remove(latest)  # guarded call: latest-remove
    os.symlink(f"run-{k}", latest)  # guarded call: symlink


def link_best(root: str, k: int) -> None:
    best = os.path.join(root, "best")
    if os.path.lexists(best):
        os.remove(best)  # guarded call: best-remove
    os.link(os.path.join(root, f"last-{k}"), best)  # guarded call: link


def remove_build(root: str, k: int) -> None:
    build = os.path.join(root, f"build-{k}")
    if os.path.exists(build):
        for top, dirs, files in os.walk(build, topdown=False):
            for name in files:
                os.remove(os.path.join(top, name))  # guarded call: build-remove
            for name in dirs:
                os.rmdir(os.path.join(top, name))  # guarded call: build-rmdir
        os.rmdir(build)  # guarded call: rmdir


STEPS: list[Callable[[str, int], None]] = [cleanup, make_dirs, refresh_latest, link_best, remove_build]


def main() -> None:
    global RANK, WORLD
    RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    root, rounds = os.path.abspath(sys.argv[1]), int(sys.argv[2])
    if RANK == 0:
        prepare(root, rounds)
    failures = []
    for k in range(rounds):
        barrier(root, f"round-{k}", RANK, WORLD)
        for step in STEPS:
            _, error = crash_of(step, root, k)  # a lost race ends the step's thread: a would-be crash
            if error is not None:
                if not isinstance(error, OSError):
                    raise error
                failures.append(
                    {
                        "round": k,
                        "step": step.__name__,
                        "line": (error.__traceback__.tb_next or error.__traceback__).tb_lineno
                        if error.__traceback__
                        else None,
                        "type": type(error).__name__,
                        "errno": errno.errorcode.get(error.errno or 0),
                        "filename": error.filename,
                    }
                )
        time.sleep(STEP_S)
    print(json.dumps({"rank": RANK, "pid": os.getpid(), "failures": failures}), flush=True)


if __name__ == "__main__":
    main()

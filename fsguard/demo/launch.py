"""A minimal local launcher for machines without torch: starts N ranks the way ``torchrun`` does.

Each rank is a fresh interpreter of this Python with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``ROLE_RANK`` and ``ROLE_WORLD_SIZE`` set, so fsguard's launcher
detection sees a torch.distributed job. ``MASTER_ADDR``/``MASTER_PORT`` are left unset: no store runs
behind them, and nothing should try to reach one. As with torchrun,
when one rank fails the others are stopped (after a short grace period), and the exit status is the
first failure's.

``python -m fsguard.demo.launch --nproc-per-node N [-m] SCRIPT_OR_MODULE [ARGS...]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence

GRACE_S = 5.0


def rank_env(rank: int, world: int, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0",
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world),
        }
    )
    return env


def launch(nproc: int, command: Sequence[str], timeout_s: float = 300.0) -> int:
    """Run ``command`` (arguments after ``python``) as ``nproc`` ranks; return the job's exit status."""
    procs = [subprocess.Popen([sys.executable, *command], env=rank_env(rank, nproc)) for rank in range(nproc)]
    stop_at = time.monotonic() + timeout_s
    first_failure: int | None = None
    while any(p.poll() is None for p in procs):
        if first_failure is None:
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if failed:
                first_failure = failed[0]
                stop_at = min(stop_at, time.monotonic() + GRACE_S)
        if time.monotonic() > stop_at:
            break
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if first_failure is None:
        first_failure = next((p.returncode for p in procs if p.returncode != 0), 0)
    return first_failure


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsguard.demo.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc-per-node", type=int, default=4)
    parser.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    parser.add_argument("target")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = ["-m", args.target] if args.module else [args.target]
    return launch(args.nproc_per_node, [*command, *args.args])


if __name__ == "__main__":
    sys.exit(main())

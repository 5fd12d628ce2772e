"""The file barrier the ranks of one test job pass together, so that they make their racing call at once.

Imported by the workers run as scripts (their directory is on ``sys.path``): ``from gate import barrier``.
"""

from __future__ import annotations

import os
import sys
import time


def barrier(root: str, name: str, rank: int, world: int, *, poll_s: float = 0.0001, timeout_s: float = 60.0) -> None:
    """Wait until every rank of ``world`` reached ``name`` (``<root>/gate/<name>.<rank>``; ``<root>/gate`` must
    exist). Bounded, so that a dead peer fails the run instead of hanging it."""
    gate = os.path.join(root, "gate")
    with open(os.path.join(gate, f"{name}.{rank}"), "w"):
        pass
    pending = [os.path.join(gate, f"{name}.{r}") for r in range(world)]
    deadline = time.monotonic() + timeout_s
    while pending:
        pending = [p for p in pending if not os.path.exists(p)]
        if time.monotonic() > deadline:
            worker = os.path.basename(sys.argv[0])
            raise SystemExit(f"{worker} rank {rank}: gate {name!r} timed out waiting for {pending}")
        time.sleep(poll_s)

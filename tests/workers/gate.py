"""The file barrier the ranks of one test job pass together, and the tests' one thread helper, ``crash_of``.

Imported by the workers run as scripts (their directory is on ``sys.path``): ``from gate import barrier``.
A program the tests give as text imports ``crash_of`` through ``tests/support/threads.py``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

RELEASE_S = 0.03  # after the last rank's arrival, when every rank goes on: each has seen it by then


def barrier(root: str, name: str, rank: int, world: int, *, poll_s: float = 0.002, timeout_s: float = 60.0) -> None:
    """Wait until every rank of ``world`` reached ``name`` (``<root>/gate/<name>.<rank>``; ``<root>/gate`` must
    exist). Bounded, so that a dead peer fails the run instead of hanging it.

    Ranks poll gently while they wait, and go on together: at ``RELEASE_S`` after the last arrival file's change
    time, an instant every rank reads alike. Spinning waiters (they polled every 100 us) took the CPU from peers
    still starting, on machines with fewer cores than ranks."""
    gate = os.path.join(root, "gate")
    with open(os.path.join(gate, f"{name}.{rank}"), "w"):
        pass
    pending = [os.path.join(gate, f"{name}.{r}") for r in range(world)]
    arrivals = list(pending)
    deadline = time.monotonic() + timeout_s
    while pending:
        pending = [p for p in pending if not os.path.exists(p)]
        if not pending:
            break
        if time.monotonic() > deadline:
            worker = os.path.basename(sys.argv[0])
            raise SystemExit(f"{worker} rank {rank}: gate {name!r} timed out waiting for {pending}")
        time.sleep(poll_s)
    release = max(os.stat(p).st_mtime for p in arrivals) + RELEASE_S
    if release - time.time() > 0.001:
        time.sleep(release - time.time() - 0.001)
    while time.time() < release:  # the last millisecond, spun: the ranks go within microseconds of each other
        pass


def crash_of(function: Any, *args: Any) -> tuple[Any, BaseException | None]:
    """``function(*args)`` in a thread of its own: (its result, None), or (None, the error that escaped it).

    An escaping error ends that thread: a would-be crash, which fsguard may absorb when a peer did the same
    thing. A worker that reported its failures with ``try: ... except OSError`` would be a program handling
    them itself, and fsguard would leave every error to it (``deferred``)."""
    import threading

    result: list[Any] = [None]
    escaped: list[BaseException] = []

    def run() -> None:
        try:
            result[0] = function(*args)
        except BaseException as error:  # seen, and the thread ends: a program-set excepthook would decide
            escaped.append(error)
            raise SystemExit from error  # (the default excepthook ends a thread on SystemExit quietly)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result[0], (escaped[0] if escaped else None)

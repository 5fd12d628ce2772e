"""One rank of ``bench/scale.py``: a fresh interpreter of the benchmark venv, started with launcher variables.

fsguard, when enabled, was activated by its ``.pth`` at start-up; this script only does what user code
does. Protocol on stdin/stdout, one JSON object per line: the coordinator sends a trial
(``{"op", "path", "dst", "start", "rank0_marker"}``) or ``{"quit": true}``; the worker sleeps until
``start`` (a ``time.monotonic`` value, one clock for all processes of the machine), makes the call, and
answers ``{"ok", "error", "latency_s"}``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

RANK = int(os.environ["RANK"])


def operation(trial: dict[str, Any]) -> None:
    op, path = trial["op"], trial["path"]
    if op == "makedirs":
        os.makedirs(path)
    elif op == "rename":
        os.rename(path, trial["dst"])
    elif op == "replace":
        os.replace(path, trial["dst"])
    elif op == "rmtree":
        shutil.rmtree(path)
    else:
        raise ValueError(op)


def rank0_then_barrier(trial: dict[str, Any]) -> None:
    """The usual fix: rank 0 makes the call, everyone else waits for its marker file (a file barrier)."""
    marker = trial["rank0_marker"]
    if RANK == 0:
        try:
            operation(trial)
        finally:
            with open(marker, "w"):
                pass
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise TimeoutError("rank 0 never finished")
        time.sleep(0.0005)


def main() -> int:
    warm = os.environ.get("FSG_BENCH_WARM")
    if warm:  # a first serialized call: the store connection (and torch's import) before any trial
        os.makedirs(f"{warm}/{RANK}", exist_ok=True)
    active = hasattr(os.rename, "__wrapped__")
    print(json.dumps({"ready": True, "fsguard_active": active}), flush=True)
    for line in sys.stdin:
        trial = json.loads(line)
        if trial.get("quit"):
            break
        delay = trial["start"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        started = time.perf_counter()
        error = None
        try:
            if trial.get("rank0_marker"):
                rank0_then_barrier(trial)
            else:
                operation(trial)
        except OSError as exc:
            error = type(exc).__name__
        latency = time.perf_counter() - started
        end = time.monotonic()
        print(json.dumps({"ok": error is None, "error": error, "latency_s": latency, "end": end}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

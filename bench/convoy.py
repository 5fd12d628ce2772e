"""The store lock's convoy (issue 24): N ranks take one store lock in turn; store requests per rank, wall time.

Different calls on one path (an ``rmtree`` and ``rename``s of one tree) cannot share one performer
(singleflight): every rank takes the lock in turn. Here each rank is a process forked from one warm parent
(torch.distributed and ``fsguard.locks.store`` imported, heap frozen); it opens fsguard's store connections
before the start gate (untimed), then at the gate calls ``StoreBackend.acquire`` on one key, holds the lock for
``--hold-ms`` and releases it. Figures per size: wall time from the gate to the last release, and store
requests per rank (every request of fsguard's clients, counted by a proxy over them; lease renewals included).
The store server is a separate process (``TCPStore`` master), as torchrun's agent store is.

``--src DIR`` benchmarks the ``fsguard`` package found in DIR (e.g. an export of another commit), so that two
versions run in one sitting.

Run: ``python bench/convoy.py [--sizes 32 64 128 256] [--hold-ms 0] [--trials 3] [--src DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SERVER = """
import sys, time
from datetime import timedelta
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120))
print(store.port, flush=True)
sys.stdin.read()
"""


class Counting:
    """A store client that counts the requests made through it (one per method call)."""

    def __init__(self, inner: Any, counts: dict[str, int]) -> None:
        self._inner = inner
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counts[name] = self._counts.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


def rank(store_mod: Any, port: int, gate: float, hold_s: float, trial: int, out: int) -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": str(trial)}
    backend = store_mod.StoreBackend(60.0, env)
    backend.prepare()
    counts: dict[str, int] = {}
    for part, name in ((backend.requests, "store"), (backend.wakes, "waiter")):
        if getattr(part, name, None) is not None:
            setattr(part, name, Counting(getattr(part, name), counts))
    while time.monotonic() < gate:
        time.sleep(max(0.0, min(gate - time.monotonic(), 0.01)))  # never negative: the gate may pass meanwhile
    held = backend.acquire("convoy", 60.0, f"rank pid {os.getpid()}")
    if hold_s:
        time.sleep(hold_s)
    backend.release(held)
    done = time.monotonic()
    os.write(out, (json.dumps({"done": done, "requests": sum(counts.values()), "counts": counts}) + "\n").encode())


def trial(store_mod: Any, port: int, size: int, hold_s: float, number: int) -> dict[str, Any]:
    read, write = os.pipe()
    gate = time.monotonic() + 2.0 + size * 0.02
    pids = []
    for _ in range(size):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(read)
                rank(store_mod, port, gate, hold_s, number, write)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    os.close(write)
    with os.fdopen(read) as lines:
        answers = [json.loads(line) for line in lines]
    failed = sum(os.waitpid(pid, 0)[1] != 0 for pid in pids)
    requests = [a["requests"] for a in answers]
    kinds: dict[str, int] = {}
    for a in answers:
        for k, v in a["counts"].items():
            kinds[k] = kinds.get(k, 0) + v
    return {
        "size": size,
        "failed": failed,
        "wall_s": max(a["done"] for a in answers) - gate,
        "requests_per_rank": statistics.fmean(requests),
        "requests_max": max(requests),
        "per_kind_per_rank": {k: v / size for k, v in sorted(kinds.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--hold-ms", type=float, default=0.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.src))
    os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
    import torch.distributed  # noqa: F401 - imported once, before the ranks are forked

    from fsguard.locks import store as store_mod

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        gc.freeze()
        results = []
        number = 0
        for size in args.sizes:
            for _ in range(args.trials):
                number += 1
                result = trial(store_mod, port, size, args.hold_ms / 1000, number)
                results.append(result)
                print(json.dumps(result), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"src": str(args.src), "hold_ms": args.hold_ms, "results": results}))
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The demo job: what one rank runs. Four classic races of distributed training, on a local directory.

1. results directory: every rank checks that it is missing, then creates it (``os.makedirs``);
2. checkpoints with rotation: every rank writes its shard into a staging directory, renames the staging
   directory to its final name (``os.rename``), removes the previous checkpoint (``shutil.rmtree``) and
   points the ``latest`` symlink at the new one (``os.remove`` of the old link, then ``os.symlink``);
3. compile cache: every rank compiles the same kernels and publishes each one under a temporary name derived
   from the kernel (so it is the same on every rank: its build written privately, then renamed there whole) and
   ``os.replace``-s it onto the kernel's name;
4. cleanup: every rank removes the job's ``RUNNING`` marker (``os.remove``).

Each rank makes these calls itself, as unmodified training code does. File-based start gates line the ranks up just
before each call. So the race that a busy shared filesystem makes likely happens every time. fsguard is not imported
here. In the guarded run its ``.pth`` activated it when this interpreter started.

A launcher runs it, with ``RANK`` and ``WORLD_SIZE`` set, as ``python -m fsguard.demo.workload ROOT STEPS``. ``fsguard
demo`` runs a copy, ``ROOT/train.py``; it is standard library only, so it runs anywhere. fsguard's records then name
their call site in it, as in a user's training script. Each rank appends its progress to ``ROOT/events/rank<N>.jsonl``,
which ``fsguard demo`` reads.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

KERNELS = 3
GATE_TIMEOUT_S = 60.0
EXIT_PEER_FAILED = 3


class PeerFailed(Exception):
    """Another rank crashed: stop quietly, as a launcher would stop this rank."""


class Rank:
    """This process's place in the job, its gates and its progress events."""

    def __init__(self, root: str) -> None:
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.root = root
        self.gates = os.path.join(root, "gates")
        self.job = os.path.join(root, "job")
        self.phase = "start"
        self._events = open(  # noqa: SIM115 - kept open for the whole run
            os.path.join(root, "events", f"rank{self.rank}.jsonl"), "a", encoding="utf-8"
        )

    def event(self, phase: str, status: str, **extra: Any) -> None:
        record = {"rank": self.rank, "phase": phase, "status": status, "time": time.time(), **extra}
        self._events.write(json.dumps(record) + "\n")
        self._events.flush()

    def gate(self, name: str) -> None:
        """Wait until every rank has reached gate ``name`` (or raise PeerFailed when one crashed)."""
        with open(os.path.join(self.gates, f"{name}.{self.rank}"), "w"):
            pass
        names = [os.path.join(self.gates, f"{name}.{r}") for r in range(self.world)]
        deadline = time.monotonic() + GATE_TIMEOUT_S
        while not all(os.path.exists(n) for n in names):
            if any(e.startswith("failed.") for e in os.listdir(self.gates)):
                raise PeerFailed(name)
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {name}: not every rank arrived within {GATE_TIMEOUT_S:.0f} s")
            time.sleep(0.002)

    def fail(self) -> None:
        with open(os.path.join(self.gates, f"failed.{self.rank}"), "w"):
            pass


def results_directory(r: Rank) -> None:
    results = os.path.join(r.job, "results")
    missing = not os.path.isdir(results)
    r.gate("results")
    if missing:
        os.makedirs(results)


def checkpoints(r: Rank, steps: int) -> None:
    ckpt = os.path.join(r.job, "checkpoints")
    for step in range(1, steps + 1):
        r.phase = f"checkpoint step {step}/{steps}"
        staging = os.path.join(ckpt, f"step-{step}.tmp")
        os.makedirs(staging, exist_ok=True)
        with open(os.path.join(staging, f"shard-rank{r.rank}.bin"), "wb") as f:
            f.write(os.urandom(1024))
        r.gate(f"step{step}-written")
        os.rename(staging, os.path.join(ckpt, f"step-{step}"))
        previous = os.path.join(ckpt, f"step-{step - 1}")
        exists = os.path.isdir(previous)
        r.gate(f"step{step}-renamed")
        if exists:
            shutil.rmtree(previous)
        latest = os.path.join(r.job, "latest")
        linked = os.path.islink(latest)
        r.gate(f"step{step}-rotated")
        if linked:
            os.remove(latest)
        os.symlink(os.path.join("checkpoints", f"step-{step}"), latest)
        r.gate(f"step{step}-linked")
        r.event(r.phase, "ok")


def compile_cache(r: Rank) -> None:
    cache = os.path.join(r.job, "cache")
    os.makedirs(cache, exist_ok=True)
    for kernel in range(KERNELS):
        final = os.path.join(cache, f"kernel-{kernel:02x}.so")
        temporary = final + ".tmp"  # derived from the kernel alone: every rank picks the same name
        missing = not os.path.exists(final)
        if missing:
            build = f"{temporary}.rank{r.rank}"  # written privately, published whole (never mixed with a peer's)
            with open(build, "wb") as f:
                f.write(b"\x7fELF compiled kernel %d" % kernel)
            os.rename(build, temporary)
        r.gate(f"kernel{kernel}")
        if missing:
            os.replace(temporary, final)


def cleanup(r: Rank) -> None:
    marker = os.path.join(r.job, "RUNNING")
    present = os.path.exists(marker)
    r.gate("cleanup")
    if present:
        os.remove(marker)


def main(argv: list[str]) -> int:
    root, steps = argv[0], int(argv[1])
    r = Rank(root)
    r.event("start", "ok", pid=os.getpid(), fsguard_active=hasattr(os.rename, "__wrapped__"))
    try:
        with open(os.path.join(r.job, "RUNNING"), "w") as marker:
            marker.write("the job is running\n")
        r.phase = "results directory"
        results_directory(r)
        r.event(r.phase, "ok")
        checkpoints(r, steps)
        r.phase = "compile cache"
        compile_cache(r)
        r.event(r.phase, "ok")
        r.phase = "cleanup"
        cleanup(r)
        r.event(r.phase, "ok")
    except PeerFailed:
        r.event(r.phase, "stopped")
        return EXIT_PEER_FAILED
    except BaseException as error:
        r.fail()
        r.event(r.phase, "crashed", error=type(error).__name__, message=str(error))
        raise
    r.event("done", "ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

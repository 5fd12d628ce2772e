"""One job's ranks started at once by a test, as plain processes, each with the environment torchrun gives a rank.

Tests that need the launcher itself start real torchrun (``tests/test_launchers.py``, ``tests/cluster/``);
the rest start their ranks here.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from .env import TORCHRUN_ENV, clean_env


@dataclass(frozen=True)
class Rank:
    """How one rank ended: its exit status and everything it printed."""

    code: int
    out: str
    err: str

    def report(self) -> Any:
        """The JSON value a worker prints as its last line of stdout."""
        return json.loads(self.out.strip().splitlines()[-1])


def rank_env(rank: int, world: int, run_id: str = TORCHRUN_ENV["TORCHELASTIC_RUN_ID"], **extra: str) -> dict[str, str]:
    """What torchrun sets for rank ``rank`` of a single-node job of ``world`` ranks, plus ``extra``."""
    return {
        **TORCHRUN_ENV,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "TORCHELASTIC_RUN_ID": run_id,
        **extra,
    }


def launch(command: Sequence[str], envs: Sequence[Mapping[str, str]], timeout_s: float) -> list[Rank]:
    """Start ``command`` once per environment in ``envs`` (each on top of ``clean_env()``), all at once, and wait
    for every one. Bounded: past ``timeout_s`` the ranks still running are killed and ``TimeoutExpired`` raised.
    Output goes to files, so a rank blocked on a full pipe can never stall its peers at a barrier."""
    with ExitStack() as stack:
        files = [
            (stack.enter_context(tempfile.TemporaryFile("w+")), stack.enter_context(tempfile.TemporaryFile("w+")))
            for _ in envs
        ]
        procs = [
            subprocess.Popen(list(command), env=clean_env(env), stdout=out, stderr=err, text=True)
            for env, (out, err) in zip(envs, files, strict=True)
        ]
        deadline = time.monotonic() + timeout_s
        try:
            codes = [p.wait(timeout=max(0.0, deadline - time.monotonic())) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        ranks = []
        for code, (out, err) in zip(codes, files, strict=True):
            out.seek(0)
            err.seek(0)
            ranks.append(Rank(code, out.read(), err.read()))
        return ranks

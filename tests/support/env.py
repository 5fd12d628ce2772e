"""Environments for the interpreters tests and benchmarks start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from fsguard.launcher import JOB_VARIABLE_PREFIXES  # what makes a process part of a job

ROOT = Path(__file__).resolve().parent.parent.parent

# Rank 1 of a two-node torchrun job (2 ranks a node): the peers whose directories a test makes by hand, without
# fsguard, stand for the other node's ranks, whose journal is on their own node (issue 46: in a single-node job a
# directory no guarded call of this node noted is no peer's, and tests/test_no_trace.py and
# tests/test_never_worse_identity.py set such a job up themselves).
TORCHRUN_ENV = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "test",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def clean_env(extra: Mapping[str, str] | None = None, *, bytecode: bool = False) -> dict[str, str]:
    """The current environment without fsguard or launcher variables or ``PYTHONPATH``, plus ``extra``.

    Tests write no bytecode (``PYTHONDONTWRITEBYTECODE=1``); benchmarks (``bytecode=True``) leave it as it
    is, so that an interpreter's start-up is measured as a user's is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLE_PREFIXES)}
    env.pop("PYTHONPATH", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env

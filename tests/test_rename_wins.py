"""Issue 12: a rename out of a staging tree beats a peer's rmtree of it, with real processes.

Four ranks of one job (the launcher's environment, fresh interpreters from the wheel): each round, rank 0
renames a fresh 300-file staging directory every rank wrote into, while ranks 1-3 remove it with
``shutil.rmtree`` (``workers/rename_wins_worker.py``). Without fsguard checkpoints are lost; with
``FSGUARD=1`` (the yield window), and with ``FSGUARD_SERIALIZE=1`` on the file and store backends (a rename
announced to the backend goes first), every checkpoint is complete and no call fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fsguard.records import parse_line
from tests.conftest import TORCHRUN_ENV, clean_env
from tests.support.ranks import launch, rank_env

RANKS = 4
ROUNDS = 40
WORKER = Path(__file__).resolve().parent / "workers" / "rename_wins_worker.py"


def run_job(python: Path, where: Path, extra: dict[str, str] | None) -> tuple[list[dict[str, Any]], list[str]]:
    root = where / "root"
    (root / "gate").mkdir(parents=True)
    envs = [rank_env(rank, RANKS, "rename-wins", **(extra or {})) for rank in range(RANKS)]
    ranks = launch([str(python), str(WORKER), str(root), str(ROUNDS)], envs, 240)
    errs = [r.err for r in ranks]
    assert [r.code for r in ranks] == [0] * RANKS, errs
    return [r.report() for r in ranks], errs


def test_without_fsguard_checkpoints_are_lost(fsguard_python: Path, tmp_path: Path) -> None:
    reports, _ = run_job(fsguard_python, tmp_path, {"FSGUARD": "0"})
    outcomes = reports[0]["outcomes"]
    lost = [o for o in outcomes if o != "complete"]
    print(f"without fsguard: {len(lost)} of {ROUNDS} checkpoints lost or partial")
    assert lost, outcomes  # the race is real: the test measures something


@pytest.mark.parametrize("mode", ["default", "file", "store"])
def test_the_rename_wins(fsguard_python: Path, tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    env = {"FSGUARD": "1", "FSGUARD_LOG": str(tmp_path / "log")}
    if mode != "default":
        env.update(FSGUARD_SERIALIZE="1", FSGUARD_LOCK=mode)
    if mode == "store":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(request.getfixturevalue("store_port")))
    reports, errs = run_job(fsguard_python, tmp_path, env)
    # On failure, every rank's fsguard records too: what each rank's rmtree decided (a lost checkpoint, once, under load)
    said = [[line for line in text.splitlines() if line.startswith("fsguard: ")][-40:] for text in errs]
    assert reports[0]["outcomes"] == ["complete"] * ROUNDS, (reports[0]["outcomes"], said)
    assert [r["failures"] for r in reports] == [[]] * RANKS, reports
    found = [parse_line(line) for text in errs for line in text.splitlines() if line.startswith("fsguard: ")]
    assert all(rec is not None for rec in found), errs
    decisions = sorted({(r.op, r.decision) for r in found if r})
    print(f"{mode}: records {decisions}")
    assert not [r for r in found if r and r.decision in ("hazard", "conflict", "unserialized")], errs
    # Every round some cleanup rank found the tree moved away by the commit (or gone before it looked).
    # (the store backend: ranks making one identical makedirs or rmtree share the first one's outcome, one "shared"
    # record)
    shared = {("makedirs", "shared"), ("rmtree", "shared")} if mode == "store" else set()
    assert {(r.op, r.decision) for r in found if r} <= {("rmtree", "yielded"), ("rmtree", "absorbed")} | shared, (
        decisions
    )


ROTATION = """
    import json, os, posix, shutil, sys, time
    out = sys.argv[1]
    def peer_tree(name):  # a peer rank of the other node wrote it (its journal is there): none of this node
        posix.mkdir(os.path.join(out, name))
        with open(os.path.join(out, name, "shard.bin"), "w") as f:
            f.write("x")
    posix.mkdir(out)
    for name in ("checkpoint-8", "checkpoint-10", "tmp-checkpoint-12"):
        peer_tree(name)
    timings = {}
    for name in ("checkpoint-8", "tmp-checkpoint-12"):
        started = time.monotonic()
        shutil.rmtree(os.path.join(out, name))
        timings[name] = time.monotonic() - started
    print(json.dumps({"left": sorted(os.listdir(out)), "timings": timings}))
"""


def test_an_old_generation_of_a_rotation_is_removed_at_once(fsguard_python: Path, tmp_path: Path) -> None:
    """A checkpoint rotation (a Trainer's ``save_total_limit``: rank 0 removes ``checkpoint-8`` that every rank
    wrote into, ``checkpoint-10`` beside it) is no staging tree a peer is about to commit: removed at once, no
    record. A fresh peer tree with no later generation beside it still gets the yield window and its hazard."""
    runs = {}
    for value in ("0", "1"):
        out = tmp_path / f"out{value}"
        result = subprocess.run(
            [str(fsguard_python), "-c", textwrap.dedent(ROTATION), str(out)],
            env=clean_env({**TORCHRUN_ENV, "FSGUARD": value}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        runs[value] = (json.loads(result.stdout), result.stderr)
    (off, _), (on, on_err) = runs["0"], runs["1"]
    assert on["left"] == off["left"] == ["checkpoint-10"]  # the same end state as the standard library
    found = [parse_line(line) for line in on_err.splitlines() if line.startswith("fsguard: ")]
    assert [(r.op, r.decision, os.path.basename(r.args[0])) for r in found if r] == [
        ("rmtree", "hazard", "tmp-checkpoint-12")
    ], on_err
    print(f"rmtree seconds with fsguard: {on['timings']}")

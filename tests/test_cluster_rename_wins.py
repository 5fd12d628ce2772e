"""Issue 12 on simulated nodes: a Trainer-style job commits each checkpoint with a rename on rank 0 while the
other node removes the same staging directory (``tests/cluster/workloads/staging_commit.py``).

Two nodes (namespaces, each with its own bindfs view of one shared directory; ``cache_s`` > 0 gives each
node a lookup cache, as NFS has), real torchrun and gloo, plain (``FSGUARD=1``) and serialized
(``FSGUARD_SERIALIZE=1``, the job's store), repeated: no crash, every checkpoint complete, and any loss
would have a ``hazard`` record.
"""

# ruff: noqa: F811  (pytest fixtures are imported, then named as parameters)
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fsguard.records import parse_line
from tests.cluster.fixtures import WORKLOADS, job_env, make_cluster, needs_cluster  # noqa: F401 (fixture)
from tests.cluster.harness import Cluster
from tests.conftest import clean_env

pytestmark = [pytest.mark.cluster, pytest.mark.fuse, needs_cluster]

NODES, NPROC, STEPS, RUNS = 2, 2, 5, 2


def run(
    made: Cluster, python: Path, env: dict[str, str], name: str, must_pass: bool = True
) -> tuple[list[str], list[str], str]:
    result = made.torchrun(
        python,
        WORKLOADS / "staging_commit.py",
        [str(made.shared), "--steps", str(STEPS)],
        nproc_per_node=NPROC,
        env=job_env(clean_env(env)),
        timeout=120,
        name=name,
    )
    output = result.output()
    assert result.ok or not must_pass, output[-6000:]
    if not result.ok:
        return ["crashed"], [], output
    steps = re.findall(r"workload: step \d+ (\w+)", "".join(n.stdout for n in result.nodes))
    lines = [line for n in result.nodes for line in n.stderr.splitlines() if line.startswith("fsguard: ")]
    return steps, lines, output


@pytest.mark.timeout(280)
def test_without_fsguard_the_checkpoints_are_lost(make_cluster: Callable[..., Cluster], fsguard_python: Path) -> None:
    losses = 0
    for attempt in range(RUNS):
        made = make_cluster(nodes=NODES, cache_s=0.0)
        steps, _, _ = run(made, fsguard_python, {"FSGUARD": "0"}, f"off{attempt}", must_pass=False)
        losses += sum(s != "complete" for s in steps)
    print(f"without fsguard: {losses} runs crashed or checkpoints lost in {RUNS} runs")
    assert losses, "the race never happened: the test measures nothing"


@pytest.mark.timeout(280)
@pytest.mark.parametrize("cache_s", [0.0, 0.5])
@pytest.mark.parametrize("serialize", ["0", "1"])
def test_the_checkpoint_is_always_complete(
    make_cluster: Callable[..., Cluster], fsguard_python: Path, cache_s: float, serialize: str
) -> None:
    for attempt in range(RUNS):
        made = make_cluster(nodes=NODES, cache_s=cache_s)
        env = {"FSGUARD": "1", "FSGUARD_SERIALIZE": serialize, "FSGUARD_LOG": str(made.root / "records")}
        steps, lines, output = run(made, fsguard_python, env, f"on{serialize}-{attempt}")
        recs = [parse_line(line) for line in lines]
        assert all(r is not None for r in recs), lines
        hazards = [r for r in recs if r and r.decision == "hazard"]
        print(f"serialize={serialize} cache={cache_s}: {steps} {sorted({(r.op, r.decision) for r in recs if r})}")
        assert steps == ["complete"] * STEPS, (steps, [r.to_line() for r in hazards], output[-4000:])
        assert not hazards, [r.to_line() for r in hazards]

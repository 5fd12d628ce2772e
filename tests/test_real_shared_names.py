"""Ranks that share one name (issue 45): a real ``torch.distributed.checkpoint`` save by per-node process groups,
and a download into one deterministic temp file, the shape of huggingface_hub 0.36.2's ``blobs/<etag>.incomplete``.

* DCP (torch 2.13, ``tests/workers/dcp_node_groups.py``) on two simulated nodes with 2 s lookup caches: each node's
  group saves into one shared directory, and the two groups' coordinators rename the same ``.metadata.tmp`` onto
  ``.metadata``. Without fsguard a coordinator dies of the lost rename. With it the rename is never deferred (it
  sits inside ``dcp.save``'s ``with _profile():``, a ``@contextmanager`` with two yields that passes every error on:
  on e3a2108 the oracle deferred it), and the two coordinators wrote one ``.metadata.tmp`` in place, so each absorbed
  rename is a ``hazard``. A run still fails, as without fsguard, where the losing coordinator had removed the peer's
  ``.metadata`` itself just before its own rename (``FileSystemWriter.finish`` removes an existing one first): the
  metadata is really gone, and fsguard re-raises. Or it fails where a coordinator's create of ``.metadata.tmp`` met
  its node's stale lookup of the peer's, renamed away a moment before (``open``, which fsguard leaves alone).
  Measured: 5 of 5 runs complete on a quiet machine, 16 of 18 beside a CPU and ``fsync`` load (the others: a create).
* A shared temp file appended by 3 ranks, then renamed (``tests/workers/shared_temp_append.py``): without fsguard
  two ranks crash on the rename; with it they go on, reading a blob three times its size, so the records are
  ``hazard``s, which ``fsguard report`` lists first; a rank that published its own whole file under the shared name
  (by a rename) is an ordinary ``absorbed`` race.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fsguard.records import parse_line
from tests.cluster.fixtures import job_env as cluster_env
from tests.cluster.fixtures import make_cluster as make_cluster
from tests.cluster.fixtures import needs_cluster
from tests.conftest import clean_env
from tests.support.cli import run_cli
from tests.support.ranks import Rank, launch, rank_env
from tests.support.records import json_records

pytestmark = pytest.mark.real

WORKERS = Path(__file__).resolve().parent / "workers"

# --- torch.distributed.checkpoint.save by per-node groups ------------------------------------------------------

DCP = WORKERS / "dcp_node_groups.py"
DCP_SAVES = 10  # a save per step: ten chances of a race per run (the coordinators' writes must overlap)
# with fsguard (FSGUARD_TESTS_DCP_RUNS=5 for the rate in the docs; each run is about a minute on 2 loaded cores)
DCP_RUNS = int(os.environ.get("FSGUARD_TESTS_DCP_RUNS", "2"))
DCP_TRIES = 3  # without: up to three runs, stopping at the first that crashes


def dcp_job(made: Any, python: Path, where: str, guarded: bool) -> Any:
    """One job on two simulated nodes (2 ranks each, a group per node) sharing ``<shared>/<where>``."""
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(made.root / "records" / where)} if guarded else {"FSGUARD": "0"}
    (made.backing / where).mkdir()
    os.chmod(made.backing / where, 0o777)
    return made.torchrun(
        python,
        DCP,
        [str(made.shared / where), str(DCP_SAVES)],
        nproc_per_node=2,
        env=cluster_env(clean_env(extra)),
        timeout=240,
        name=where,
    )


def dcp_failure(output: str) -> str | None:
    """How a DCP job failed, where it failed as the race makes it fail without fsguard: ``"lost rename"`` (the
    coordinator's ``.metadata.tmp`` was gone at its rename) or ``"stale create"`` (its create of ``.metadata.tmp``
    met this node's cached lookup of the peer's, renamed away a moment before); None for anything else."""
    tmp = r"'[^']*/\.metadata\.tmp'"
    if re.search(rf"FileNotFoundError: \[Errno 2\] No such file or directory: {tmp} -> '[^']*/\.metadata'", output):
        return "lost rename"
    if re.search(rf"FileNotFoundError: \[Errno 2\] No such file or directory: {tmp}\n", output):
        return "stale create"
    return None


@needs_cluster
@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_dcp_save_by_node_groups(make_cluster: Callable[..., Any], fsguard_python: Path) -> None:
    """Without fsguard a rank dies of the lost rename; with it, each run either completes (every lost rename found
    the peer's ``.metadata`` there: absorbed, as a hazard) or, where the losing coordinator had itself removed the
    peer's ``.metadata`` just before its rename (``FileSystemWriter.finish`` removes an existing one first: the
    checkpoint's metadata is really lost), fails exactly as without fsguard, with the same error. Never deferred:
    the rename sits inside ``dcp.save``'s ``with _profile():``, read yield by yield.

    The groups' coordinators race (``use_collectives``, DCP's default), ten saves a run: with every rank finishing
    its own save, 4 saves a run, the CI run of b6071c0 saw all 6 runs end in a real loss and none absorb."""
    made = make_cluster(nodes=2, cache_s=2.0)
    outcomes = []
    for attempt in range(DCP_TRIES):
        off = dcp_job(made, fsguard_python, f"off{attempt}", guarded=False)
        outcomes.append("completed" if off.ok else dcp_failure(off.output()))
        assert outcomes[-1], off.tails(6000)  # the race, nothing else
        if outcomes[-1] == "lost rename":
            break
    print(f"dcp.save by node groups without fsguard: {outcomes}")
    assert "lost rename" in outcomes, f"no rename was lost in {len(outcomes)} runs: the test measures nothing"

    completed = hazards = runs = 0
    failures: list[str] = []
    for attempt in range(3 * DCP_RUNS):  # at least DCP_RUNS, on until a lost rename was absorbed (timing decides)
        if attempt >= DCP_RUNS and hazards:
            break
        runs += 1
        on = dcp_job(made, fsguard_python, f"on{attempt}", guarded=True)
        records = [parse_line(line) for n in on.nodes for line in n.stderr.splitlines() if "fsguard: " in line]
        assert not [r.to_line() for r in records if r is not None and r.decision != "hazard"], on.tails(6000)
        for rec in records:
            assert rec is not None and rec.op == "rename" and rec.detail.get("shared_source") == "file", rec
            assert re.search(r"/\.metadata\.tmp$", rec.args[0]), rec.to_line()
        hazards += len(records)
        if on.ok:
            completed += 1
            assert re.search(rf'"whole": \[{", ".join(map(str, range(DCP_SAVES)))}\]', on.nodes[0].stdout), on.output()
        else:  # a real loss (re-raised unchanged), or the stale create fsguard leaves alone: as without fsguard
            failure = dcp_failure(on.output())
            assert failure, on.tails(6000)
            failures.append(failure)
    print(
        f"dcp.save by node groups with fsguard: {completed}/{runs} runs completed, {hazards} hazard records;"
        f" failed: {failures}"
    )
    assert hazards, f"no lost rename was absorbed in {runs} runs: the test measures nothing"


# --- one temp file appended by several ranks, then renamed -----------------------------------------------------

APPEND = WORKERS / "shared_temp_append.py"
RANKS = 3
BLOB_SIZE = len(b"model weights ") * 4096


def append_job(python: Path, where: Path, guarded: bool, *args: str) -> list[Rank]:
    root = where / "root"
    (root / "gate").mkdir(parents=True)
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(where / "log")} if guarded else {"FSGUARD": "0"}
    envs = [rank_env(rank, RANKS, f"shared-temp-{where.name}", **extra) for rank in range(RANKS)]
    return launch([str(python), str(APPEND), str(root), *args], envs, 120)


def test_a_temp_file_several_ranks_wrote_and_renamed_is_a_hazard(fsguard_python: Path, tmp_path: Path) -> None:
    off = append_job(fsguard_python, tmp_path / "off", guarded=False)
    crashed = [r for r in off if r.code != 0]
    assert len(crashed) == RANKS - 1, [r.err[-2000:] for r in off]
    assert all(re.search(r"FileNotFoundError: .*\.incomplete'", r.err) for r in crashed), [r.err for r in crashed]

    on = append_job(fsguard_python, tmp_path / "on", guarded=True)
    assert [r.code for r in on] == [0] * RANKS, [r.err[-2000:] for r in on]
    assert {r.report()["size"] for r in on} == {RANKS * BLOB_SIZE}  # every rank reads every rank's appends
    records = json_records(tmp_path / "on" / "log")
    assert sorted((r["op"], r["decision"]) for r in records) == [("rename", "hazard")] * (RANKS - 1), records
    assert all("their writes into it may be mixed" in r["evidence"] for r in records), records

    report = run_cli(fsguard_python, "report", str(tmp_path / "on" / "log"))
    assert report.returncode == 1, report.stderr
    assert re.search(r"^!! DATA MAY HAVE BEEN LOST.*\n.*\n!! hazard +rename ", report.stdout, re.M), report.stdout
    document = json.loads(run_cli(fsguard_python, "report", "--json", str(tmp_path / "on" / "log")).stdout)
    first = document["groups"][0]
    assert (first["op"], first["decision"], first["attention"]) == ("rename", "hazard", True), first


def test_a_whole_file_published_under_the_shared_name_stays_absorbed(fsguard_python: Path, tmp_path: Path) -> None:
    """Each rank writes its own temp and renames it onto the shared name (whole, atomic), as a compiler cache
    does: nothing is mixed, and the lost rename is an ordinary ``absorbed`` race."""
    off = append_job(fsguard_python, tmp_path / "off", False, "private")
    assert sorted(r.code != 0 for r in off) == [False] + [True] * (RANKS - 1), [r.err[-2000:] for r in off]

    on = append_job(fsguard_python, tmp_path / "on", True, "private")
    assert [r.code for r in on] == [0] * RANKS, [r.err[-2000:] for r in on]
    assert {r.report()["size"] for r in on} == {BLOB_SIZE}
    records = json_records(tmp_path / "on" / "log")
    assert sorted((r["op"], r["decision"]) for r in records) == [("rename", "absorbed")] * (RANKS - 1), records

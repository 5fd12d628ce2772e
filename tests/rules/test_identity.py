"""Identity before time (issues 34, 46): whose a directory is by the node's journal of what each job made
(``fsguard.evidence.job_tag_of``, ``fsguard.journal``) and a restarted attempt's start (``Rules.attempt_start``)
in the rules of makedirs/mkdir, rename/replace and rmtree.

The journal's answer can only turn an absorb into a raise (another job's, another attempt's, an earlier job's of
the same identity, none in a single-node job) or take away a wait (a tree no guarded call of a peer made); an
entry of this attempt is still subject to the time check; where the journal cannot tell (a peer on another
node) time alone decides, and the record says so (``identity``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fsguard.guards import Rules
from fsguard.guards import makedirs as makedirs_rule
from fsguard.guards import rename as rename_rule
from fsguard.guards import rmtree as rmtree_rule

from .fake import EEXIST, ENOENT, FakeWorld, decide

THIS = "TORCHELASTIC_RUN_ID=b;MASTER_PORT=29500;TORCHELASTIC_RESTART_COUNT=1"
EARLIER_ATTEMPT = "TORCHELASTIC_RUN_ID=b;MASTER_PORT=29500;TORCHELASTIC_RESTART_COUNT=0"
OTHER_JOB = "TORCHELASTIC_RUN_ID=a;MASTER_PORT=29511;TORCHELASTIC_RESTART_COUNT=1"
# A SLURM job requeued: SLURM_RESTART_COUNT is the job's, alike on every node (torchrun's count is each node's)
SLURM_THIS = "SLURM_JOB_ID=7;SLURM_STEP_ID=0;SLURM_RESTART_COUNT=1"
SLURM_EARLIER = "SLURM_JOB_ID=7;SLURM_STEP_ID=0;SLURM_RESTART_COUNT=0"
SINGLE = "TORCHELASTIC_RUN_ID=none;MASTER_PORT=29500;TORCHELASTIC_RESTART_COUNT=0;host=node0"


def numbers(job: str | None = THIS, attempt_ago: float | None = None, started_ago: float = 100.0) -> Rules:
    now = time.time()
    attempt = None if attempt_ago is None else now - attempt_ago
    return Rules(2.0, 0.0, now - started_ago, True, "a test", job, attempt)


def tagged(world: FakeWorld, path: Path, tag: str) -> str:
    world.tags[str(path)] = tag
    return str(path)


@pytest.mark.parametrize("op", ["makedirs", "mkdir"])
def test_a_directory_of_another_job_or_attempt_is_never_a_peers(op: str, tmp_path: Path) -> None:
    """Two jobs of a sweep with one run name, seconds apart: the second one's ``makedirs(run_dir)`` raises; so
    does a requeued SLURM job's, for what its previous run made (the job's own restart count differs)."""
    for tag, job in ((OTHER_JOB, THIS), (SLURM_EARLIER, SLURM_THIS)):
        world = FakeWorld()
        path = tmp_path / tag.split(";")[0]
        path.mkdir()
        verdict = decide(makedirs_rule, op, (tagged(world, path, tag),), EEXIST, world, numbers(job=job))
        assert not verdict.absorb and "another job or attempt" in verdict.evidence, verdict


@pytest.mark.parametrize("op", ["makedirs", "mkdir"])
def test_another_nodes_restart_count_is_this_job_and_time_tells_the_attempt(op: str, tmp_path: Path) -> None:
    """torchrun's agents count restarts per node: after node 0's rank fails, node 0 restarts with a count of 1
    and node 1 (restarting only because node 0 came back) with 0. A directory tagged with this job and another
    count is this job's; the attempt is told by time: made after this attempt started, a peer's (absorbed);
    before, the previous attempt's (raised)."""
    world = FakeWorld()
    path = tagged(world, tmp_path / "run", EARLIER_ATTEMPT)
    os.mkdir(path)
    verdict = decide(makedirs_rule, op, (path,), EEXIST, world, numbers(attempt_ago=5.0))
    assert verdict.absorb and verdict.detail == {"identity": "job tag and time"}, verdict
    assert "another node's restart count" in verdict.evidence, verdict
    verdict = decide(makedirs_rule, op, (path,), EEXIST, world, numbers(attempt_ago=-0.5))  # began after it
    assert not verdict.absorb and "before this job started" in verdict.evidence, verdict
    # on the node that did not fail (count 0, no attempt start of its own), the tag of the node that did
    node_1 = numbers(job=EARLIER_ATTEMPT)
    world.tags[path] = THIS
    assert decide(makedirs_rule, op, (path,), EEXIST, world, node_1).detail == {"identity": "job tag and time"}


@pytest.mark.parametrize("op", ["makedirs", "mkdir"])
def test_a_tag_of_this_attempt_is_still_subject_to_time(op: str, tmp_path: Path) -> None:
    world = FakeWorld()
    path = tagged(world, tmp_path / "run", THIS)
    os.mkdir(path)
    verdict = decide(makedirs_rule, op, (path,), EEXIST, world, numbers())
    assert verdict.absorb and verdict.detail == {"identity": "job tag"}, verdict
    verdict = decide(makedirs_rule, op, (path,), EEXIST, world, numbers(started_ago=-3600))
    assert not verdict.absorb and "before this job started" in verdict.evidence, verdict


def test_where_the_journal_cannot_tell_time_decides_and_the_record_says_so(tmp_path: Path) -> None:
    """No entry a rank can read (a peer on another node of a multi-node job): time alone, and the record says so."""
    world = FakeWorld()
    path = tmp_path / "run"
    path.mkdir()
    verdict = decide(makedirs_rule, "makedirs", (str(path),), EEXIST, world, numbers())
    assert verdict.absorb and verdict.detail == {"identity": "time only"}, verdict
    assert "told by time only" in verdict.evidence


@pytest.mark.parametrize("op", ["makedirs", "mkdir"])
def test_in_a_single_node_job_a_directory_its_journal_lacks_is_no_peers(op: str, tmp_path: Path) -> None:
    """Every rank of a single-node job notes what it makes in its node's journal, so a fresh directory the journal
    lacks (``""``: made by another single-node job on another node with the same identity, by a tool) was made
    by no guarded call of this job: raised as without fsguard, after a bounded wait for a note in flight."""
    world = FakeWorld()
    path = tmp_path / "run"
    path.mkdir()
    verdict = decide(makedirs_rule, op, (tagged(world, path, ""),), EEXIST, world, numbers(job=SINGLE))
    assert not verdict.absorb and "not in its journal" in verdict.evidence, verdict
    world.tags[str(path)] = SINGLE
    assert decide(makedirs_rule, op, (str(path),), EEXIST, world, numbers(job=SINGLE)).absorb


def test_a_previous_job_of_the_same_identity_is_another_job(tmp_path: Path) -> None:
    """torchrun relaunched with its default run id and port, a driver's second job: the journal names this very
    tag, noted before this job started (``fsguard.evidence.job_tag_of`` says so): another job."""
    world = FakeWorld()
    path = tmp_path / "run"
    path.mkdir()
    before = tagged(world, path, SINGLE + ";made 1.2 s before this job started")
    verdict = decide(makedirs_rule, "makedirs", (before,), EEXIST, world, numbers(job=SINGLE))
    assert not verdict.absorb and "another job or attempt" in verdict.evidence, verdict


def test_a_process_without_a_job_of_its_own_compares_no_tags(tmp_path: Path) -> None:
    world = FakeWorld()
    path = tmp_path / "run"
    path.mkdir()
    verdict = decide(makedirs_rule, "makedirs", (tagged(world, path, OTHER_JOB),), EEXIST, world, numbers(job=None))
    assert verdict.absorb and verdict.detail == {"identity": "time only"}, verdict


@pytest.mark.parametrize("op", ["rename", "replace"])
def test_a_restarted_attempt_never_takes_the_previous_attempts_result(op: str, tmp_path: Path) -> None:
    """Attempt 0 published ``result.json`` and crashed; attempt 1's writer produced nothing: its
    ``os.replace(tmp, result.json)`` raises ``FileNotFoundError`` as without fsguard, however recent the result."""
    src, dst = str(tmp_path / "result.json.tmp"), str(tmp_path / "result.json")
    Path(dst).write_text("attempt 0")
    world = FakeWorld()
    verdict = decide(rename_rule, op, (src, dst), ENOENT, world, numbers(attempt_ago=-0.5))  # began after it
    assert not verdict.absorb and "older than the job" in verdict.evidence, verdict
    assert "this attempt started" in verdict.evidence
    verdict = decide(rename_rule, op, (src, dst), ENOENT, world, numbers(attempt_ago=5.0))  # a peer's, this attempt
    assert verdict.absorb, verdict


@pytest.mark.parametrize("op", ["rename", "replace"])
def test_a_destination_directory_of_another_job_is_not_a_peers_move(op: str, tmp_path: Path) -> None:
    src, dst = str(tmp_path / "tmp-checkpoint-2"), str(tmp_path / "checkpoint-2")
    os.mkdir(dst)
    world = FakeWorld()
    verdict = decide(rename_rule, op, (src, tagged(world, Path(dst), OTHER_JOB)), ENOENT, world, numbers())
    assert not verdict.absorb and "another job's or attempt's" in verdict.evidence, verdict
    world.tags[dst] = THIS
    assert decide(rename_rule, op, (src, dst), ENOENT, world, numbers()).absorb


@pytest.mark.parametrize(
    ("tag", "plan"),
    [("", "check"), (OTHER_JOB, "check"), (EARLIER_ATTEMPT, "wait"), (THIS, "wait"), (None, "wait")],
)
def test_only_a_tree_a_peer_of_this_attempt_may_have_made_waits(tag: str | None, plan: str, tmp_path: Path) -> None:
    """A tree unpacked by ``tar`` (not in a single-node job's journal), another job's or attempt's: no window,
    no hazard for removing it (a real move mid-walk still is one). A peer's tree, or no tags to read: the window;
    this job's with another node's restart count too, where time says it is this attempt's (see below)."""
    top = tmp_path / "tmp-checkpoint-10"
    top.mkdir()
    world = FakeWorld()
    if tag is not None:
        tagged(world, top, tag)
    assert rmtree_rule.plan(str(top), os.lstat(top), None, world, numbers(), 1.0) == plan


def test_a_tree_of_this_job_older_than_this_attempt_gets_no_window(tmp_path: Path) -> None:
    top = tmp_path / "tmp-checkpoint-10"
    top.mkdir()
    world = FakeWorld()
    tagged(world, top, EARLIER_ATTEMPT)
    assert rmtree_rule.plan(str(top), os.lstat(top), None, world, numbers(attempt_ago=-0.5), 1.0) == "check"
    assert rmtree_rule.plan(str(top), os.lstat(top), None, world, numbers(attempt_ago=5.0), 1.0) == "wait"


def test_a_restarted_attempts_start_bounds_freshness() -> None:
    rules = numbers(attempt_ago=2.0)
    now = time.time()
    assert rules.is_fresh(now - 1.0) and not rules.is_fresh(now - 3.0)
    assert numbers().is_fresh(now - 3.0)
    assert rules.without_waits().attempt_start == rules.attempt_start and rules.without_waits().job == THIS


def test_the_job_tag_is_what_the_launcher_tells_every_rank_alike() -> None:
    from fsguard.launcher import job_tag

    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "node0", "MASTER_PORT": "1", "TORCHELASTIC_RESTART_COUNT": "2"}
    assert job_tag(env) == "TORCHELASTIC_RUN_ID=x;MASTER_PORT=1;TORCHELASTIC_RESTART_COUNT=2"
    assert job_tag({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_RESTART_COUNT": "1"}) == (
        "SLURM_JOB_ID=7;SLURM_STEP_ID=0;SLURM_RESTART_COUNT=1"
    )
    assert job_tag({"RANK": "0", "WORLD_SIZE": "2"}) is None  # nothing names the job: time alone


def test_a_single_node_job_names_its_host() -> None:
    """What the launcher states: a loopback ``MASTER_ADDR``, a job's size equal to its size on this node, one node
    in the SLURM step: every rank is here, so two such jobs on two nodes are two jobs."""
    from fsguard.launcher import is_single_node, job_tag, single_node

    base = {"TORCHELASTIC_RUN_ID": "none", "MASTER_PORT": "29500", "FSGUARD_HOST": "n7"}
    for addr in ("127.0.0.1", "localhost", "::1", "[::1]"):
        assert job_tag({**base, "MASTER_ADDR": addr}) == "TORCHELASTIC_RUN_ID=none;MASTER_PORT=29500;host=n7"
    assert single_node({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node0"})
    assert single_node({"SLURM_PROCID": "0", "SLURM_STEP_NUM_NODES": "1", "SLURM_JOB_NUM_NODES": "2"})
    assert not single_node({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node0"})
    assert not single_node({"SLURM_PROCID": "0", "SLURM_STEP_NUM_NODES": "2"})
    assert not is_single_node(job_tag({**base, "MASTER_ADDR": "node0"}))
    # simulated nodes sharing one loopback (tests/cluster): the counts say two nodes
    assert not single_node({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})

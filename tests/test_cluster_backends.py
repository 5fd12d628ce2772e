"""The race workloads on real distributed filesystems (issue 23): JuiceFS and GlusterFS, one client per node.

Two simulated nodes (namespaces, real torchrun and gloo) share one JuiceFS volume (SQLite metadata, a local
bucket) or one GlusterFS volume (this machine's ``glusterd``), each node through its own FUSE client with the
filesystem's own default caches (1 s lookups): ``tests/cluster/backends.py``. Each workload runs without
fsguard (how often the race kills the job there is printed: ``pytest -s``) and with it (every run must pass,
with its absorbed records and complete results), in one cluster (two subdirectories of the volume).

Which backends run: ``FSGUARD_TESTS_BACKENDS`` (comma-separated; default ``juicefs``, what CI runs), runs per
test ``FSGUARD_TESTS_BACKEND_RUNS`` (default 1; the README's failure rates come from 5), which race workloads
``FSGUARD_TESTS_BACKEND_SCRIPTS`` (default ``checkpoint_loop.py,results_dir.py``; add ``compile_cache.py``).
GlusterFS runs the same tests when selected (``FSGUARD_TESTS_BACKENDS=juicefs,glusterfs``).

The seed's case runs by default (issue 45): transformers 4.36.2's ``Trainer`` with ``save_on_each_node=True``,
pinned (``tests/support/pinned.py``), on a plain shared directory, bindfs with lookup caches and JuiceFS: it
crashes without fsguard and completes with it.
"""

# ruff: noqa: F811  (pytest fixtures are imported, then named as parameters)
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fsguard.records import parse_line
from tests.cluster.fixtures import WORKLOADS, job_env, make_cluster, needs_cluster  # noqa: F401 (fixture)
from tests.cluster.harness import Cluster, RunResult
from tests.conftest import clean_env
from tests.test_cluster import CHECKS, ERRORS, NPROC, WORLD, assert_absorbed_at, check_checkpoints, records

pytestmark = [pytest.mark.cluster, pytest.mark.fuse, needs_cluster]

NODES = 2
SELECTED = [b for b in os.environ.get("FSGUARD_TESTS_BACKENDS", "juicefs").split(",") if b]
RUNS = int(os.environ.get("FSGUARD_TESTS_BACKEND_RUNS", "1"))
# compile_cache.py is left out by default: on a FUSE client it also races inside open(), which fsguard does not
# guard (the same known limit as on bindfs, tests/test_cluster.py), so it costs CI a minute for an xfail.
SCRIPTS = os.environ.get("FSGUARD_TESTS_BACKEND_SCRIPTS", "checkpoint_loop.py,results_dir.py").split(",")
BACKENDS = [
    pytest.param(b, marks=pytest.mark.skipif(b not in SELECTED, reason=f"{b} not in FSGUARD_TESTS_BACKENDS"))
    for b in ("juicefs", "glusterfs", "moosefs")
]


def job(made: Cluster, python: Path, script: str, where: str, guarded: bool, *args: str) -> RunResult:
    """One two-node torchrun job of ``script`` in ``<shared>/<where>``."""
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(made.root / "records" / where)} if guarded else {"FSGUARD": "0"}
    (made.backing / where).mkdir()
    os.chmod(made.backing / where, 0o777)
    return made.torchrun(
        python,
        WORKLOADS / script,
        [str(made.shared / where), *args],
        nproc_per_node=NPROC,
        env=job_env(clean_env(extra)),
        timeout=150,
        name=where,
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", [s for s in sorted(ERRORS) if s in SCRIPTS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_race_workload(backend: str, script: str, make_cluster: Callable[..., Cluster], fsguard_python: Path) -> None:
    made = make_cluster(nodes=NODES, backend=backend)
    failed = raced = 0
    for attempt in range(RUNS):
        off = job(made, fsguard_python, script, f"off{attempt}", guarded=False)
        output = off.output()
        assert not off.timed_out, output[-4000:]
        if not off.ok:
            failed += 1
            # The race, nothing else (GlusterFS: a stale entry can fail a peer's rename with FileExistsError)
            assert re.search(rf"\[rank\d+\]: ({ERRORS[script]}|FileExistsError): ", output), output[-4000:]
            assert records(off) == []

        on = job(made, fsguard_python, script, f"on{attempt}", guarded=True)
        output = on.output()
        if not on.ok and script == "compile_cache.py" and 'with open(tmp, "wb")' in output:
            pytest.xfail("open() of a colliding temp name raced (open is not guarded): tests/test_cluster.py")
        assert on.ok, output[-6000:]
        recs = records(on)
        if not recs and script == "compile_cache.py":
            continue  # its temp names did not collide this time (timing): nothing raced, nothing to check
        raced += 1
        assert_absorbed_at(recs, script, output)
        if script == "checkpoint_loop.py":  # a stale entry may turn a peer's rename into a no-op success
            try:
                check_checkpoints(made.backing / f"on{attempt}", recs, WORLD, NODES, exact_renames=False)
            except AssertionError as missing:
                if backend == "glusterfs":
                    # Seen on GlusterFS (2 of 4 runs with its default 1 s caches): a node's stale entry of "staging"
                    # (a step's old staging, renamed away) sends its ranks' open() of the next step's shards into
                    # the previous checkpoint (missing or overwritten shards). open() is not guarded, and the same
                    # happens without fsguard: the workload's own loss on this filesystem, not fsguard's.
                    pytest.xfail(f"GlusterFS: shards written through a stale entry of staging: {missing}")
                raise
        else:
            CHECKS[script](made.backing / f"on{attempt}", recs, WORLD, NODES)
    print(f"{backend} {script}: without fsguard {failed}/{RUNS} runs failed; with fsguard 0/{RUNS} ({raced} raced)")
    assert raced or failed, "the race never happened: the test measures nothing"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_rename_beats_rmtree(backend: str, make_cluster: Callable[..., Cluster], fsguard_python: Path) -> None:
    """``staging_commit.py``: rank 0 commits each step's staging directory by rename while the other node removes
    it; with fsguard every checkpoint is complete and nothing is recorded as lost."""
    made = make_cluster(nodes=NODES, backend=backend)
    lost = 0
    for attempt in range(RUNS):
        off = job(made, fsguard_python, "staging_commit.py", f"off{attempt}", False, "--steps", "5")
        steps = re.findall(r"workload: step \d+ (\w+)", "".join(n.stdout for n in off.nodes))
        lost += not off.ok or steps != ["complete"] * 5

        on = job(made, fsguard_python, "staging_commit.py", f"on{attempt}", True, "--steps", "5")
        stale = "[Errno 116] Stale file handle" in on.output() and "return len(os.listdir(path))" in on.output()
        if not on.ok and backend == "glusterfs" and stale:
            # GlusterFS's client answered one of the workload's own (unguarded) calls on a directory renamed a
            # moment before with ESTALE: seen under load in 3 of about 30 runs, none on a quiet machine.
            pytest.xfail("GlusterFS: ESTALE on the workload's own call after the rename")
        assert on.ok, on.tails(6000)
        steps = re.findall(r"workload: step \d+ (\w+)", "".join(n.stdout for n in on.nodes))
        lines = [line for n in on.nodes for line in n.stderr.splitlines() if line.startswith("fsguard: ")]
        recs = [parse_line(line) for line in lines]
        hazards = [r.to_line() for r in recs if r is not None and r.decision == "hazard"]
        assert steps == ["complete"] * 5 and not hazards, (steps, hazards, on.tails(4000))
    print(f"{backend} staging_commit.py: without fsguard {lost}/{RUNS} runs lost a checkpoint; with fsguard 0/{RUNS}")
    assert lost, f"{backend}: no run without fsguard lost a checkpoint: the race never happened, nothing was shown"


# --- the seed's case: transformers 4.36.2's Trainer with save_on_each_node=True ----------------------------------

TRAINER = Path(__file__).resolve().parent / "workers" / "hf_trainer_job.py"
# transformers 4.36.2 renames tmp-checkpoint-N inside ``with self.args.main_process_first(local=save_on_each_node)``
# (a @contextmanager with two yields that passes every error on): each node's local rank 0 renames first, so on a
# shared filesystem the nodes race on one rename. Its packages at the versions of its day; torch, numpy and the
# rest come from the test environment.
TRAINER_436 = (
    "transformers==4.36.2",
    "tokenizers==0.15.2",
    "huggingface-hub==0.21.4",
    "safetensors==0.4.2",
    "accelerate==0.27.2",
    "requests==2.31.0",
    "charset-normalizer==3.3.2",
    "idna==3.6",
    "urllib3==2.2.1",
    "certifi==2024.2.2",
)
TRAINER_STEPS = 8  # a checkpoint every 2 steps, every one kept: four renames raced per run
TRAINER_OFF_RUNS = 3  # without fsguard: up to three runs, stopping at the first that crashes
# plain: one coherent shared directory (bindfs without caches); bindfs: 2 s lookup caches per node, as NFS has;
# juicefs: one client per node with its own default caches
TRAINER_ROWS = [
    pytest.param("bindfs", 0.0, id="plain"),
    pytest.param("bindfs", 2.0, id="bindfs"),
    pytest.param(
        "juicefs",
        None,
        id="juicefs",
        marks=pytest.mark.skipif("juicefs" not in SELECTED, reason="juicefs not in FSGUARD_TESTS_BACKENDS"),
    ),
]


def trainer_job(made: Cluster, python: Path, where: str, guarded: bool) -> RunResult:
    """One 2-node x 2-rank job of transformers 4.36.2's Trainer with ``save_on_each_node=True`` in
    ``<shared>/<where>``."""
    from tests.support.pinned import pinned_site

    site = pinned_site(*TRAINER_436)
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(made.root / "records" / where)} if guarded else {"FSGUARD": "0"}
    extra.update(PYTHONPATH=str(site), HF_HUB_OFFLINE="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    (made.backing / where).mkdir()
    os.chmod(made.backing / where, 0o777)
    return made.torchrun(
        python,
        TRAINER,
        [str(made.shared / where), str(TRAINER_STEPS), "each-node"],
        nproc_per_node=NPROC,
        env=job_env(clean_env(extra)),
        timeout=400,
        name=where,
    )


def trainer_crashed_on_the_rename(result: RunResult) -> bool:
    """Whether the job died of the race: a rank's ``os.rename(staging_output_dir, output_dir)`` of
    ``tmp-checkpoint-N`` failed with the source gone (a peer node's local main renamed it first)."""
    output = result.output()
    return not result.ok and bool(
        re.search(r"FileNotFoundError: \[Errno 2\] No such file or directory: '[^']*tmp-checkpoint-\d+'", output)
    )


@pytest.mark.timeout(900)
def test_hf_trainer_each_node_crashes_without_fsguard(
    make_cluster: Callable[..., Cluster], fsguard_python: Path
) -> None:
    """The race is real: without fsguard the nodes' local mains race on one rename and a rank dies of it (up to
    three runs on a shared directory with 2 s lookup caches, stopping at the first crash; the rate is printed)."""
    made = make_cluster(nodes=NODES, cache_s=2.0)
    outcomes = []
    for attempt in range(TRAINER_OFF_RUNS):
        off = trainer_job(made, fsguard_python, f"off{attempt}", guarded=False)
        assert not off.timed_out, off.tails(4000)
        assert off.ok or trainer_crashed_on_the_rename(off), off.tails(6000)  # the race, nothing else
        assert records(off) == []
        outcomes.append("crashed" if not off.ok else "completed")
        if not off.ok:
            break
    print(f"transformers 4.36.2 save_on_each_node without fsguard: {outcomes.count('crashed')}/{len(outcomes)} crashed")
    assert "crashed" in outcomes, f"the race never happened in {len(outcomes)} runs: the test measures nothing"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("backend", "cache_s"), TRAINER_ROWS)
def test_hf_trainer_each_node(
    backend: str, cache_s: float | None, make_cluster: Callable[..., Cluster], fsguard_python: Path
) -> None:
    """The seed's case (issue 45): transformers 4.36.2's Trainer with ``save_on_each_node=True`` on two nodes, 2
    ranks each, with fsguard: the job completes with its four checkpoints whole, each node's racing rename is
    an absorbed record at the Trainer's rename (in ``main_process_first``, whose generator passes the error on),
    and nothing is a hazard, a conflict or deferred."""
    made = make_cluster(nodes=NODES, cache_s=cache_s, backend=backend)
    on = trainer_job(made, fsguard_python, "on", guarded=True)
    assert on.ok, on.tails(6000)
    # read where the data is kept (the nodes' views may still cache a name their peer removed)
    out = made.backing / "on"
    left = {name: sorted(os.listdir(out / name)) for name in sorted(os.listdir(out))}
    assert sorted(left) == [f"checkpoint-{step}" for step in (2, 4, 6, 8)], left
    assert all({f"rng_state_{r}.pth" for r in range(WORLD)} <= set(files) for files in left.values()), left
    recs = records(on)
    print(f"{backend} cache={cache_s} transformers 4.36.2 each node: ok; {sorted({(r.op, r.decision) for r in recs})}")
    assert not [r.to_line() for r in recs if r.decision in ("hazard", "conflict", "deferred")]
    for rec in recs:
        assert rec.decision == "absorbed" and rec.site is not None, rec.to_line()
        assert str(rec.site["file"]).endswith("transformers/trainer.py"), rec.to_line()

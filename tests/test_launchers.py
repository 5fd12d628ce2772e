"""The launchers people type, for real: srun on a real SLURM, sbatch, srun + torchrun, accelerate, deepspeed.

Every job runs ``tests/workers/launcher_job.py`` on every rank: it reports what fsguard sees inside the
rank (``fsguard status``'s launcher, rank, world size; the operations patched; the job start), then all
ranks race ``makedirs``/``rename``/``replace``/``rmtree`` on one directory. Without fsguard the job
fails; with ``FSGUARD=1`` it passes, with records naming the right rank and host. The probe
(``tests/cluster/probe``) shows which processes of the job were patched: launcher agents never are, nor a
single task. SLURM: one cluster per session (``tests/slurm.py``), two ``slurmd`` on this host.
"""

# ruff: noqa: F811  (pytest fixtures are imported, then named as parameters)
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from fsguard.config import ALL_OPS
from fsguard.records import Record, parse_line
from tests import slurm as slurm_cluster
from tests.cluster import rsh
from tests.cluster.fixtures import PROBE, job_env, make_cluster, needs_cluster  # noqa: F401 (fixture)
from tests.cluster.harness import Cluster, free_port
from tests.conftest import ROOT, clean_env

pytestmark = pytest.mark.launchers

JOB = ROOT / "tests" / "workers" / "launcher_job.py"
OPS = list(ALL_OPS)
AGENTS = ("torchrun", "torch.distributed.run", "accelerate", "deepspeed", "deepspeed.launcher")


@dataclass
class Job:
    done: subprocess.CompletedProcess[str]
    ranks: dict[int, dict[str, object]]
    records: list[Record]
    probes: list[dict[str, object]]

    def text(self) -> str:
        return f"exit {self.done.returncode}\nstdout:\n{self.done.stdout[-3000:]}\nstderr:\n{self.done.stderr[-5000:]}"


def run_job(argv: Sequence[str], root: Path, guarded: bool, timeout: float = 120, **extra: str) -> Job:
    """Run one job (the launcher command ``argv``) with ``root`` as its shared directory."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "gate").mkdir(parents=True)
    probe = root / "probe"
    env = job_env(clean_env({"FSGUARD": "1", "FSGUARD_LOG": str(root / "records")} if guarded else {}), probe, **extra)
    done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, cwd=root, check=False)
    return read_job(subprocess.CompletedProcess(done.args, done.returncode, done.stdout, done.stderr), root, probe)


def read_job(done: subprocess.CompletedProcess[str], root: Path, probe: Path) -> Job:
    """What the ranks of a job under ``root`` wrote: their reports, fsguard's records, the probes."""
    ranks = {int(p.stem): json.loads(p.read_text()) for p in (root / "ranks").glob("*.json")}
    records = []
    for path in (root / "records").glob("*"):
        records += [r for r in map(parse_line, path.read_text().splitlines()) if r is not None]
    probes = [json.loads(p.read_text()) for p in probe.glob("*.json")]
    return Job(done, ranks, records, probes)


def check_fails_without(job: Job, world: int) -> None:
    assert job.done.returncode != 0, job.text()
    failed = {r: rep["failures"] for r, rep in job.ranks.items() if rep["failures"]}
    makedirs = [r for r, fails in failed.items() if any(f["call"] == "makedirs" for f in fails)]  # type: ignore[union-attr]
    assert len(makedirs) == world - 1, job.text()
    assert all(not rep["patched"] for rep in job.ranks.values())


def check_guarded(job: Job, launcher: str, world: int, hosts: set[str] | None = None) -> None:
    """Passes; every rank patched and named right by ``fsguard status``; records name the right rank and host."""
    assert job.done.returncode == 0, job.text()
    assert sorted(job.ranks) == list(range(world)), job.text()
    by_pid = {}
    for rank, rep in job.ranks.items():
        status = rep["status"]
        assert isinstance(status, dict)
        assert status["would_patch"] is True, rep
        launch = status["launch"]
        assert (launch["launcher"], launch["rank"], launch["world_size"]) == (launcher, rank, world), rep
        assert rep["patched"] == OPS, rep
        assert rep["failures"] == [], rep
        by_pid[rep["pid"]] = rep
    if hosts is not None:
        assert {rep["host"] for rep in job.ranks.values()} == hosts
    absorbed = {op: [r for r in job.records if r.op == op and r.decision == "absorbed"] for op in OPS}
    assert len(absorbed["makedirs"]) == world - 1, [r.to_line() for r in job.records]
    assert len(absorbed["rename"]) == world - 1, [r.to_line() for r in job.records]
    for record in job.records:
        rep = by_pid[record.origin.pid]
        assert (record.origin.launcher, record.origin.rank, record.origin.world_size) == (
            launcher,
            rep["rank"],
            world,
        ), record.to_line()
        assert record.origin.host == rep["host"], record.to_line()
        assert record.site_text().startswith(str(JOB)), record.to_line()
    agents = [p for p in job.probes if is_agent(p["argv"])]  # type: ignore[arg-type]
    assert all(p["patched"] == [] for p in agents), agents


def is_agent(argv: list[str]) -> bool:
    """A launcher's own Python process: ``python -m <agent module>`` or ``python <venv>/bin/<agent>``."""
    program = [a for a in argv[1:] if a != "-u"][:2]
    if program[:1] == ["-m"]:
        return program[1].startswith(AGENTS)
    return bool(program) and os.path.basename(program[0]) in ("torchrun", "accelerate", "deepspeed")


# --- SLURM ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Slurm]:
    reason = slurm_cluster.missing()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.Slurm(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def srun(slurm: slurm_cluster.Slurm, *args: str) -> list[str]:
    return ["srun", "--kill-on-bad-exit=0", "--wait=60", *args]


@pytest.mark.timeout(240)
def test_srun_four_tasks_on_two_nodes(slurm: slurm_cluster.Slurm, fsguard_python: Path, tmp_path: Path) -> None:
    """``srun -N 2 -n 4 python job.py``: each task a rank; parent slurmstepd; host is the node's name."""
    argv = srun(slurm, "-N", "2", "-n", "4", str(fsguard_python), str(JOB), str(tmp_path / "job"))
    check_fails_without(run_job(argv, tmp_path / "job", False, **slurm.env), 4)
    job = run_job(argv, tmp_path / "job", True, **slurm.env)
    check_guarded(job, "slurm", 4, hosts={"fsgn0", "fsgn1"})
    for rep in job.ranks.values():
        assert rep["parent"] == "slurmstepd", rep
        # freshness: the job's start is the step daemon's start (SLURM 22.05 sets no SLURM_JOB_START_TIME)
        assert rep["job_start"] == min(rep["own_start"], rep["parent_start"]), rep  # type: ignore[type-var]


@pytest.mark.timeout(120)
def test_srun_step_start_wins_over_job_start_time(
    slurm: slurm_cluster.Slurm, fsguard_python: Path, tmp_path: Path
) -> None:
    """``SLURM_JOB_START_TIME`` (set by SLURM 23.02+; exported by hand here) is the allocation's start, earlier
    steps of the allocation included: the step daemon's start (the task's launcher) is the job's start."""
    start = str(int(time.time()) - 3600)
    argv = srun(slurm, "-n", "2", f"--export=ALL,SLURM_JOB_START_TIME={start}", str(fsguard_python), str(JOB))
    job = run_job([*argv, str(tmp_path / "job")], tmp_path / "job", True, **slurm.env)
    check_guarded(job, "slurm", 2)
    for rep in job.ranks.values():
        assert rep["parent"] == "slurmstepd" and rep["job_start"] == rep["parent_start"], rep


@pytest.mark.timeout(240)
def test_srun_torchrun_only_workers_are_ranks(slurm: slurm_cluster.Slurm, fsguard_python: Path, tmp_path: Path) -> None:
    """``srun -n 2 torchrun --nproc-per-node 2``: the two torchrun agents are tasks, their four workers ranks."""
    torchrun = Path(fsguard_python).parent / "torchrun"
    if not torchrun.exists():
        torchrun = Path(shutil.which("torchrun") or ROOT / ".venv" / "bin" / "torchrun")
    port = free_port()
    inner = (
        f"exec {fsguard_python} -m torch.distributed.run --nnodes 2 --node-rank $SLURM_PROCID --nproc-per-node 2 "
        f"--master-addr 127.0.0.1 --master-port {port} {JOB} {tmp_path / 'job'}"
    )
    argv = srun(slurm, "-N", "2", "-n", "2", "bash", "-c", inner)
    check_fails_without(run_job(argv, tmp_path / "job", False, **slurm.env), 4)
    job = run_job(argv, tmp_path / "job", True, **slurm.env)
    check_guarded(job, "torchrun", 4, hosts={"fsgn0", "fsgn1"})
    agents = [p for p in job.probes if "torch.distributed.run" in p["argv"]]  # type: ignore[operator]
    assert len(agents) == 2 and all(p["patched"] == [] for p in agents), job.probes


@pytest.mark.timeout(300)
def test_sbatch_wait(slurm: slurm_cluster.Slurm, fsguard_python: Path, tmp_path: Path) -> None:
    """``sbatch --wait`` of a script that runs python itself (not a task: unpatched), then the same two jobs
    as above as its steps: ``srun -n 4 python`` and ``srun -n 2 torchrun --nproc-per-node 2``."""
    root, second = tmp_path / "job", tmp_path / "job" / "torchrun"
    script = tmp_path / "job.sbatch"
    torchrun = (
        f"exec {fsguard_python} -m torch.distributed.run --nnodes 2 --node-rank $SLURM_PROCID --nproc-per-node 2 "
        f"--master-addr 127.0.0.1 --master-port {free_port()} {JOB} {second}"
    )
    script.write_text(
        "#!/bin/bash\n"
        f"{fsguard_python} -c 'import os; print(\"batch script python\", os.rename.__module__)'\n"
        f"srun --kill-on-bad-exit=0 -n 4 {fsguard_python} {JOB} {root}; first=$?\n"
        '[ -z "$FSGUARD" ] && exit $first  # without fsguard the first step shows the crash; save the time\n'
        f"mkdir -p {second}/gate && export FSGUARD_LOG={second}/records\n"
        f"srun --kill-on-bad-exit=0 -N 2 -n 2 bash -c '{torchrun}'; second=$?\n"
        "exit $((first | second))\n"
    )
    argv = ["sbatch", "--wait", "-N", "2", "-n", "4", "-o", str(tmp_path / "sbatch.out"), str(script)]
    failed = run_job(argv, root, False, **slurm.env)
    check_fails_without(failed, 4)
    job = run_job(argv, root, True, **slurm.env)
    check_guarded(job, "slurm", 4)
    check_guarded(read_job(job.done, second, root / "probe"), "torchrun", 4, hosts={"fsgn0", "fsgn1"})
    batch = [p for p in job.probes if "-c" in p["argv"]]  # type: ignore[operator]
    assert len(batch) == 1 and batch[0]["patched"] == [], job.probes


@pytest.mark.timeout(120)
def test_srun_single_task_inside_an_allocation_of_four(
    slurm: slurm_cluster.Slurm, fsguard_python: Path, tmp_path: Path
) -> None:
    """``salloc -n 4 srun -n 1``: one task of an allocation of four, not patched."""
    root = tmp_path / "job"
    argv = ["salloc", "-n", "4", "srun", "-n", "1", str(fsguard_python), str(JOB), str(root)]
    job = run_job(argv, root, True, **slurm.env)
    assert job.done.returncode == 0, job.text()
    (rep,) = job.ranks.values()
    assert rep["patched"] == [] and rep["status"]["would_patch"] is False, rep  # type: ignore[index]
    assert rep["status"]["launch"]["world_size"] == 1, rep  # type: ignore[index]
    assert job.records == []


# --- accelerate and deepspeed (CPU, one node, 4 ranks) ----------------------------------------------------


def _needs(module: str) -> None:
    """Skip (failing under FSGUARD_TESTS_STRICT=1) when the launcher package is not in the test venv."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} cannot be installed here (not in the test venv: requirements-test.txt)")


@pytest.mark.timeout(200)
def test_accelerate_launch(fsguard_python: Path, tmp_path: Path) -> None:
    """``accelerate launch --multi_gpu --num_processes 4`` on CPU: accelerate ends in torch's launcher."""
    _needs("accelerate")
    argv = [
        str(fsguard_python),
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "4",
        "--num_machines",
        "1",
        "--main_process_port",
        str(free_port()),
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(JOB),
        str(tmp_path / "job"),
    ]
    check_fails_without(run_job(argv, tmp_path / "job", False), 4)
    job = run_job(argv, tmp_path / "job", True)
    check_guarded(job, "accelerate", 4)
    agents = [p for p in job.probes if "accelerate.commands.launch" in p["argv"]]  # type: ignore[operator]
    assert len(agents) == 1 and agents[0]["patched"] == [], job.probes


@pytest.mark.timeout(200)
def test_deepspeed_launcher(fsguard_python: Path, tmp_path: Path) -> None:
    """``deepspeed --num_gpus 4`` on CPU: the runner starts ``deepspeed.launcher.launch``, which starts the ranks."""
    _needs("deepspeed")
    argv = [
        str(fsguard_python),
        "-m",
        "deepspeed.launcher.runner",
        "--num_gpus",
        "4",
        "--master_port",
        str(free_port()),
        "--no_local_rank",
        str(JOB),
        str(tmp_path / "job"),
    ]
    check_fails_without(run_job(argv, tmp_path / "job", False), 4)
    job = run_job(argv, tmp_path / "job", True)
    check_guarded(job, "deepspeed", 4)
    agents = [p for p in job.probes if any(str(a).startswith("deepspeed.launcher") for a in p["argv"])]  # type: ignore[union-attr]
    assert len(agents) == 2 and all(p["patched"] == [] for p in agents), job.probes


# --- mpirun across two simulated nodes --------------------------------------------------------------------


def mpirun_two_nodes(made: Cluster, python: Path, guarded: bool, name: str) -> tuple[Job, str]:
    """``mpirun --host node0:2,node1:2`` on node0; its daemon reaches node1 through ``tests/cluster/rsh.py``."""
    root = made.shared / name
    done_flag = made.root / f"{name}.done"
    server = rsh.Server(f"fsguard-rsh-{os.getpid()}-{name}", str(made.logs / name) + "/")
    probe = made.root / f"{name}-probe"
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(made.shared / f"{name}-records")} if guarded else {}
    env = job_env(
        clean_env(extra),
        probe,
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        FSG_RSH_SOCKET=server.name,
        PYTHONPATH=f"{PROBE}:{ROOT}",
    )
    mpirun = (
        f"mkdir -p {root}/gate && mpirun --oversubscribe --bind-to none --host node0:2,node1:2 -np 4 "
        f"--mca plm_rsh_agent '{sys.executable} {ROOT / 'tests' / 'cluster' / 'rsh.py'}' "
        f"--mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include lo --mca btl self,tcp "
        f"--mca btl_tcp_if_include lo {python} {JOB} {root}; rc=$?; touch {done_flag}; exit $rc"
    )
    wait = f"for i in $(seq 1 1500); do [ -e {done_flag} ] && exit 0; sleep 0.1; done; exit 1"
    try:
        result = made.run(lambda node: ["bash", "-c", mpirun if node == 0 else wait], env=env, timeout=150, name=name)
    finally:
        server.close()
    backing = made.backing / name
    ranks = {int(p.stem): json.loads(p.read_text()) for p in (backing / "ranks").glob("*.json")}
    records = []
    for path in (made.backing / f"{name}-records").glob("*"):
        records += [r for r in map(parse_line, path.read_text().splitlines()) if r is not None]
    probes = [json.loads(p.read_text()) for p in probe.glob("*.json")]
    code = result.nodes[0].returncode
    done = subprocess.CompletedProcess(
        ["mpirun"], -1 if code is None else code, result.nodes[0].stdout, result.output()
    )
    return Job(done, ranks, records, probes), str(server.requests)


@pytest.mark.cluster
@pytest.mark.fuse
@needs_cluster
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin (mpirun) is not installed")
@pytest.mark.timeout(400)
def test_mpirun_across_two_nodes(make_cluster: Callable[..., Cluster], fsguard_python: Path) -> None:
    """2 x 2 ranks: the remote ranks are started by Open MPI's daemon on node1, via the rsh agent."""
    made = make_cluster(nodes=2)
    failed, _ = mpirun_two_nodes(made, fsguard_python, False, "unguarded")
    check_fails_without(failed, 4)
    job, requests = mpirun_two_nodes(made, fsguard_python, True, "guarded")
    check_guarded(job, "openmpi", 4, hosts={"node0", "node1"})
    assert "orted" in requests, requests  # node1's ranks came from the daemon the agent started there
    daemons = [p for p in job.probes if "orted" in " ".join(map(str, p["argv"]))]  # type: ignore[call-overload]
    assert all(p["patched"] == [] for p in daemons)


@pytest.mark.timeout(120)
def test_fsguard_status_inside_srun_tasks(slurm: slurm_cluster.Slurm, fsguard_python: Path, tmp_path: Path) -> None:
    """``srun -N 2 -n 2 fsguard status --json``: each task's own answer names slurm, its rank, 2 and its node."""
    out = tmp_path / "status-%t.json"
    argv = srun(
        slurm, "-N", "2", "-n", "2", f"--output={out}", str(fsguard_python), "-m", "fsguard", "status", "--json"
    )
    env = job_env(clean_env({"FSGUARD": "1"}), **slurm.env)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for rank, node in ((0, "fsgn0"), (1, "fsgn1")):
        info = json.loads((tmp_path / f"status-{rank}.json").read_text())
        assert info["would_patch"] is True, info
        assert info["launch"] == {"launcher": "slurm", "rank": rank, "local_rank": 0, "world_size": 2, "host": node}

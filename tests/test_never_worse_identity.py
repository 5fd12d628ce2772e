"""Never worse, third pass (issue 34): "a peer of this job" means this job and this attempt.

Each case is two small programs of ours, run as real ``torchrun`` jobs (gloo is not needed: files only) from
the wheel's venv, once with ``FSGUARD=1`` and once without, with the defaults a user gets (no ``FSGUARD_*``
setting but ``FSGUARD`` and ``FSGUARD_LOG``); the exit codes, the exception and the files left must be the same:

* two jobs of a sweep started seconds apart with one run name, rank 0 guarding against reuse with
  ``os.makedirs(run_dir)`` (or ``Path.mkdir``): the second job stops with ``FileExistsError``, the first job's
  files stay (this node's journal of what each job made, ``fsguard.journal``, names the first job);
* a restarted attempt (``torchrun --max-restarts 1``): attempt 0 published and crashed; attempt 1's
  ``os.replace(tmp, result.json)`` with no tmp raises ``FileNotFoundError``, its ``os.makedirs(ckpt)``
  ``FileExistsError`` (the attempt's start, and the journal's entry of attempt 0);
* a previous job's run directory made 10 s before launch and its ``result.json`` published 15 s before: raised
  as without fsguard (the documented ``FSGUARD_FRESH_S``, 5 s);
* a tree unpacked by ``tar`` (or copied by ``cp -r``) in a subprocess, then removed with ``shutil.rmtree``: no
  yield window and no ``hazard`` record (no guarded call of a peer made it: not in the single-node job's journal);
* issue 46: a torchrun relaunch with the default run id and port, a driver's two jobs in turn, two single-node
  jobs with identical identities on two simulated nodes: each second job is another job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import clean_env
from tests.support.records import from_log_dir

TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and /dev/shm (Linux)")


def start(
    python: Path,
    code: str,
    where: Path,
    args: list[str],
    guarded: bool,
    *options: str,
    log: str = "job",
    standalone: bool = True,
) -> subprocess.Popen[str]:
    """One ``torchrun --standalone`` job of 2 ranks running ``code`` (``where/program.py``) with ``args``; its
    records in ``where/log/<log>``. ``standalone=False``: torchrun's defaults (static rendezvous, run id "none",
    ``MASTER_ADDR`` 127.0.0.1)."""
    script = where / "program.py"
    if not script.exists():
        script.write_text(textwrap.dedent(code))
    env = clean_env({"FSGUARD": "1" if guarded else "0", "FSGUARD_LOG": str(where / "log" / log)})
    command = [str(python), "-m", "torch.distributed.run", *(["--standalone"] if standalone else [])]
    command += ["--nproc_per_node", "2", *options]
    return subprocess.Popen(
        [*command, str(script), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(job: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = job.communicate(timeout=TIMEOUT_S)
    return job.returncode, err


def files(root: Path) -> dict[str, str]:
    """Every file under ``root`` but the program and the logs (relative path -> content)."""
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "program.py" and "log" not in p.relative_to(root).parts
    }


def decisions(where: Path, job: str = "job") -> list[tuple[str, str]]:
    return [(r.op, r.decision) for r in from_log_dir(where / "log" / job)]


# --- two jobs of a sweep, one run name ---------------------------------------------------------------------

SWEEP = """
    import os, pathlib, sys, time
    base, job, how = sys.argv[1], sys.argv[2], sys.argv[3]
    rank = int(os.environ["RANK"])
    run_dir = os.path.join(base, "runs", "lr-0.1")
    if rank == 0:
        if how == "makedirs":
            os.makedirs(run_dir)  # the script's guard against reusing a run name
        else:
            pathlib.Path(run_dir).mkdir(parents=True)
        with open(os.path.join(run_dir, "owner.txt"), "w") as f:
            f.write(job)
        open(os.path.join(base, f"started-{job}"), "w").close()
    else:
        while not os.path.exists(os.path.join(base, f"started-{job}")):  # this job's own rank 0 made it
            time.sleep(0.01)
    with open(os.path.join(run_dir, f"weights-{rank}"), "w") as f:
        f.write(job)
    time.sleep(3)  # still training while the next job of the sweep starts
"""


@pytest.mark.parametrize("how", ["makedirs", "pathlib"])
def test_two_jobs_of_a_sweep_with_one_run_name(fsguard_python: Path, tmp_path: Path, how: str) -> None:
    """The second job starts once the first one has made its run directory (seconds apart, both running): it
    stops with ``FileExistsError`` and the first job's owner and weights stay, with and without fsguard."""
    outcomes = {}
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        base.mkdir()
        first = start(fsguard_python, SWEEP, base, [str(base), "job1", how], guarded, log="job1")
        deadline = time.monotonic() + 60
        while not (base / "started-job1").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        second = start(fsguard_python, SWEEP, base, [str(base), "job2", how], guarded, log="job2")
        (code1, err1), (code2, err2) = finish(first), finish(second)
        assert code1 == 0, err1[-3000:]
        assert code2 != 0 and "FileExistsError" in err2, err2[-3000:]
        outcomes[mode] = files(base)
        if guarded:
            assert decisions(base, "job2") == [], decisions(base, "job2")
    expected = {"runs/lr-0.1/owner.txt": "job1", "runs/lr-0.1/weights-0": "job1", "runs/lr-0.1/weights-1": "job1"}
    for mode in outcomes:
        assert {k: v for k, v in outcomes[mode].items() if k.startswith("runs/")} == expected, outcomes
    assert outcomes["with"] == outcomes["without"]


# --- a restarted attempt -------------------------------------------------------------------------------------

RESTART = """
    import os, sys
    base, how = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if rank == 0:
        if how == "replace":
            result = os.path.join(base, "result.json")
            tmp = result + ".tmp"
            if attempt == 0:  # this attempt's writer writes its result, publishes it, then the rank crashes
                with open(tmp, "w") as f:
                    f.write(f"attempt {attempt}")
            os.replace(tmp, result)  # attempt 1's writer produced nothing
        else:
            ckpt = os.path.join(base, "ckpt")
            os.makedirs(ckpt)  # this attempt's own checkpoint directory
            with open(os.path.join(ckpt, "step"), "w") as f:
                f.write(f"attempt {attempt}")
        if attempt == 0:
            sys.exit(3)
"""


@pytest.mark.parametrize("how", ["replace", "makedirs"])
def test_a_restarted_attempt_is_not_a_peer(fsguard_python: Path, tmp_path: Path, how: str) -> None:
    """``torchrun --max-restarts 1``: attempt 0 published (or made its checkpoint directory) and crashed; attempt
    1's ``os.replace`` of a missing tmp raises ``FileNotFoundError`` (its ``os.makedirs``, ``FileExistsError``) and
    the job fails, with attempt 0's file left, with and without fsguard."""
    outcomes = {}
    error = "FileNotFoundError" if how == "replace" else "FileExistsError"
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        base.mkdir()
        code, err = finish(start(fsguard_python, RESTART, base, [str(base), how], guarded, "--max-restarts", "1"))
        assert code != 0 and error in err, err[-3000:]
        outcomes[mode] = files(base)
        if guarded:
            assert decisions(base) == [], decisions(base)
    assert outcomes["with"] == outcomes["without"]
    assert list(outcomes["with"].values()) == ["attempt 0"], outcomes


RESTARTED_PEERS = """
    import json, os, sys, time
    base = sys.argv[1]
    rank = int(os.environ["RANK"])
    if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) == 0:
        if rank == 0:
            sys.exit(3)  # the first attempt crashes before anything is made
        time.sleep(60)  # stopped by the agent
    shared = os.path.join(base, "shared")
    if rank == 1:
        while not os.path.isdir(shared):  # rank 0 of this attempt made it first
            time.sleep(0.01)
    os.makedirs(shared)  # every rank makes the run's directory (exist_ok forgotten)
"""


def test_in_a_restarted_attempt_a_peers_directory_is_still_a_peers(fsguard_python: Path, tmp_path: Path) -> None:
    """The attempt's start is not too late: in attempt 1, rank 1's ``os.makedirs`` of the directory rank 0 of
    the same attempt made moments ago fails without fsguard and is absorbed with it (one record, by its tag)."""
    runs = {}
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        base.mkdir()
        runs[mode] = finish(start(fsguard_python, RESTARTED_PEERS, base, [str(base)], guarded, "--max-restarts", "1"))
    assert runs["without"][0] != 0 and "FileExistsError" in runs["without"][1], runs["without"][1][-3000:]
    assert runs["with"][0] == 0, runs["with"][1][-3000:]
    records = from_log_dir(tmp_path / "with" / "log" / "job")
    assert [(r.op, r.decision, r.origin.rank, r.detail) for r in records] == [
        ("makedirs", "absorbed", 1, {"identity": "job tag"})
    ], records


# --- a restarted job of two nodes: the node that did not fail keeps its restart count ------------------------

TWO_NODES = """
    import os, sys, time
    base = sys.argv[1]
    node, rank = int(os.environ["GROUP_RANK"]), int(os.environ["RANK"])

    n = 0  # which start of this node's worker this is: node 1's TORCHELASTIC_RESTART_COUNT stays 0
    while os.path.exists(os.path.join(base, f"start-{node}-{n}")):
        n += 1
    open(os.path.join(base, f"start-{node}-{n}"), "x").close()
    open(os.path.join(base, f"count-{rank}-{os.environ['TORCHELASTIC_RESTART_COUNT']}"), "w").close()
    if n == 0:
        if node == 0:
            time.sleep(1)
            sys.exit(3)  # the first attempt crashes on node 0
        time.sleep(60)  # stopped by its agent when node 0 comes back to the rendezvous
    shared = os.path.join(base, "shared")
    if node == 1:
        while not os.path.isdir(shared):  # node 0's rank of this attempt made it first
            time.sleep(0.01)
    try:
        os.makedirs(shared)  # every rank makes the run's directory (exist_ok forgotten)
    except BaseException as error:  # the crash, for the test to see, passed on (a program-set hook would decide)
        open(os.path.join(base, f"failed-{rank}-{type(error).__name__}"), "x").close()
        raise
    open(os.path.join(base, f"done-{rank}"), "x").close()
"""


def _two_node_job(python: Path, base: Path, guarded: bool, port: int) -> list[str]:
    """Two ``torchrun --nnodes 2`` agents (one rank each, a c10d rendezvous, ``--max-restarts 1``) running
    ``TWO_NODES``; ends when both ranks are done or one crashed (a crashed rank's peer agent would wait for
    minutes). Returns the marks the ranks left (``done-<rank>``, ``failed-<rank>-<error>``, ``count-...``)."""
    script = base / "program.py"
    script.write_text(textwrap.dedent(TWO_NODES))
    env = clean_env({"FSGUARD": "1" if guarded else "0", "FSGUARD_LOG": str(base / "log" / "job")})
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"two-{port}"]
    command = [str(python), "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", *rendezvous]
    command += ["--max-restarts", "1", "--monitor-interval", "0.2", str(script), str(base)]
    agents = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        for _ in range(2)
    ]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            marks = sorted(p.name for p in base.iterdir() if p.name.startswith(("done-", "failed-")))
            if len([m for m in marks if m.startswith("done-")]) == 2 or any(m.startswith("failed-") for m in marks):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the two-node job neither ended nor crashed in {TIMEOUT_S} s")
    finally:
        for agent in agents:
            try:
                os.killpg(agent.pid, 9)
            except ProcessLookupError:
                pass
            agent.communicate(timeout=30)
    return sorted(p.name for p in base.iterdir() if p.name.startswith(("done-", "failed-", "count-")))


def test_a_restarted_two_node_jobs_peers_are_still_peers(fsguard_python: Path, tmp_path: Path) -> None:
    """Two nodes, node 0's rank crashes in the first attempt: node 0's agent restarts with
    ``TORCHELASTIC_RESTART_COUNT=1``, node 1's (which restarts only because node 0 came back) with 0, so the two
    ranks of one attempt carry different restart counts. Node 1's ``os.makedirs`` of the directory node 0's rank
    of this attempt made moments ago crashes without fsguard, and is absorbed with it: the job tag says "this
    job", and time tells the attempt."""
    marks = {}
    for mode, guarded, port in (("without", False, 29631), ("with", True, 29632)):
        base = tmp_path / mode
        base.mkdir()
        marks[mode] = _two_node_job(fsguard_python, base, guarded, port)
    # the restart counts of the second attempt differ between the nodes (the premise)
    assert {"count-0-1", "count-1-0"} <= set(marks["without"]), marks
    assert "failed-1-FileExistsError" in marks["without"], marks
    assert {"done-0", "done-1"} <= set(marks["with"]) and not any(m.startswith("failed") for m in marks["with"]), marks
    records = from_log_dir(tmp_path / "with" / "log" / "job")
    assert [(r.op, r.decision, r.origin.rank) for r in records] == [("makedirs", "absorbed", 1)], records
    assert records[0].detail == {"identity": "job tag and time"}, records[0]


# --- a previous job's run directory and result, with the documented default --------------------------------

PREVIOUS = """
    import os, sys
    base, how = sys.argv[1], sys.argv[2]
    if int(os.environ["RANK"]) == 0:
        if how == "makedirs":
            os.makedirs(os.path.join(base, "run"))
            with open(os.path.join(base, "run", "weights"), "w") as f:
                f.write("new")
        else:
            result = os.path.join(base, "result.json")
            os.replace(result + ".tmp", result)  # this job's writer produced nothing
"""


def test_a_previous_jobs_run_directory_and_result_with_the_default(fsguard_python: Path, tmp_path: Path) -> None:
    """A run directory made 10 s before launch and a ``result.json`` published 15 s before: ``os.makedirs``
    raises ``FileExistsError``, ``os.replace`` of a missing tmp ``FileNotFoundError``, the old files stay, with and
    without fsguard (``FSGUARD_FRESH_S`` left at its default). Made by this test, so untagged: time decides."""
    for mode in ("without", "with"):
        (tmp_path / mode).mkdir()
        (tmp_path / mode / "result.json").write_text("previous")
    time.sleep(5)
    for mode in ("without", "with"):
        (tmp_path / mode / "run").mkdir()
        (tmp_path / mode / "run" / "weights").write_text("previous")
    time.sleep(10)
    outcomes = {}
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        for how, error in (("makedirs", "FileExistsError"), ("replace", "FileNotFoundError")):
            code, err = finish(start(fsguard_python, PREVIOUS, base, [str(base), how], guarded))
            assert code != 0 and error in err, (mode, how, err[-3000:])
        outcomes[mode] = files(base)
        if guarded:
            assert decisions(base) == [], decisions(base)
    assert outcomes["with"] == outcomes["without"] == {"result.json": "previous", "run/weights": "previous"}


# --- a tree a subprocess made, removed -----------------------------------------------------------------------

UNPACK = """
    import json, os, shutil, subprocess, sys, time
    base, how, archive = sys.argv[1], sys.argv[2], sys.argv[3]
    here = os.path.join(base, f"rank{os.environ['RANK']}")
    os.makedirs(here)
    tree = os.path.join(here, "dataset")
    for _ in range(3):
        if how == "tar":
            subprocess.run(["tar", "-xf", archive, "-C", here], check=True)
        else:
            subprocess.run(["cp", "-r", os.path.join(os.path.dirname(archive), "source", "dataset"), here], check=True)
        shutil.rmtree(tree)
    print(json.dumps(sorted(os.listdir(here))))
"""


def dataset_archive(where: Path) -> Path:
    source = where / "source" / "dataset"
    for part in ("train", "test"):
        (source / part).mkdir(parents=True)
        for i in range(20):
            (source / part / f"{i}.txt").write_text(str(i))
    archive = where / "dataset.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(source, arcname="dataset")
    return archive


@pytest.mark.parametrize("how", ["tar", "cp"])
def test_a_tree_a_subprocess_made_is_no_peers(fsguard_python: Path, tmp_path: Path, how: str) -> None:
    """Each rank unpacks a dataset with ``tar -xf`` (or copies it with ``cp -r``), then removes it, three times: no
    ``hazard`` record (nothing was lost) and no wait, with the same files left as without fsguard."""
    archive = dataset_archive(tmp_path / "input")
    outcomes = {}
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        base.mkdir()
        code, err = finish(start(fsguard_python, UNPACK, base, [str(base), how, str(archive)], guarded))
        assert code == 0, err[-3000:]
        outcomes[mode] = files(base)
        if guarded:
            assert decisions(base) == [], decisions(base)
    assert outcomes["with"] == outcomes["without"]
    assert os.listdir(tmp_path / "with" / "rank0") == []


# --- fsguard status ------------------------------------------------------------------------------------------


def test_status_says_how_a_peer_is_told(fsguard_python: Path, tmp_path: Path) -> None:
    """``fsguard status`` names the job's tag and the journal it is kept in (or says that time alone decides)."""
    import json

    from tests.support.cli import run_cli
    from tests.support.env import TORCHRUN_ENV

    single = {**TORCHRUN_ENV, "LOCAL_WORLD_SIZE": TORCHRUN_ENV["WORLD_SIZE"]}  # every rank on this node
    done = run_cli(fsguard_python, "status", "--json", env={"FSGUARD": "1", **single}, cwd=tmp_path)
    ident = json.loads(done.stdout)["identity"]
    assert ident["job_tag"] == f"TORCHELASTIC_RUN_ID=test;MASTER_PORT=29500;host={os.uname().nodename}", ident
    assert ident["single_node"] is True and ident["journal"] == f"/dev/shm/fsguard-{os.geteuid()}", ident
    assert ident["how"].startswith("this node's journal of what each job made"), ident
    two_nodes = json.loads(run_cli(fsguard_python, "status", "--json", env={"FSGUARD": "1", **TORCHRUN_ENV}).stdout)
    assert two_nodes["identity"]["job_tag"] == "TORCHELASTIC_RUN_ID=test;MASTER_PORT=29500", two_nodes["identity"]
    assert two_nodes["identity"]["single_node"] is False and "by time" in two_nodes["identity"]["how"]
    alone = run_cli(fsguard_python, "status", env={"FSGUARD": "force"}, cwd=tmp_path)
    assert "identity:    time only: no launcher variable names the job" in alone.stdout, alone.stdout


def test_a_copied_directory_is_nobodys(tmp_path: Path) -> None:
    """The journal names paths, not inodes, and nothing travels with a copy: a previous job's template copied
    into this job's staging directory (``shutil.copytree``) is in no journal, whatever the template's entry."""
    import shutil

    from fsguard import evidence, journal
    from fsguard.state import STATE

    previous, this = "TORCHELASTIC_RUN_ID=previous;MASTER_PORT=1", "TORCHELASTIC_RUN_ID=this;MASTER_PORT=1"
    template = tmp_path / "template"
    template.mkdir()
    journal.made(str(template), previous)
    STATE.job = this
    try:
        assert evidence.job_tag_of(str(template)) == previous
        shutil.copytree(template, tmp_path / "staging")
        assert os.listxattr(tmp_path / "staging") == []
        assert evidence.job_tag_of(str(tmp_path / "staging")) is None  # a multi-node job: the journal cannot tell
        STATE.job = this + ";host=n0"
        assert evidence.job_tag_of(str(tmp_path / "staging")) == ""  # single-node: no peer made it
    finally:
        STATE.reset()


ARRAY_TASK = """
import os, sys
run_dir = os.path.join(sys.argv[1], "runs", "shared-name")
if os.environ["SLURM_PROCID"] == "0":
    os.makedirs(run_dir)  # each array task guards its run name
    with open(os.path.join(run_dir, "owner"), "w") as f:
        f.write(os.environ["SLURM_ARRAY_TASK_ID"])
"""


def test_slurm_array_tasks_are_two_jobs(fsguard_python: Path, tmp_path: Path) -> None:
    """Two tasks of a SLURM array on one node, moments apart (their ``SLURM_JOB_ID`` differ, their array's is one):
    the second task's ``os.makedirs(run_dir)`` raises as without fsguard, the first task's owner stays. The
    variables are srun's, set here by hand (a real SLURM: ``tests/test_launchers.py``)."""
    outcomes = {}
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        base.mkdir()
        errors = []
        for task, job_id in (("0", "101"), ("1", "102")):
            env = {"FSGUARD": "1" if guarded else "0", "FSGUARD_LOG": str(base / "log" / task)}
            env.update(SLURM_ARRAY_JOB_ID="100", SLURM_ARRAY_TASK_ID=task, SLURM_JOB_ID=job_id, SLURM_STEP_ID="0")
            env.update(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NUM_NODES="1")
            done = subprocess.run(
                [str(fsguard_python), "-c", ARRAY_TASK, str(base)],
                env=clean_env(env),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            errors.append("FileExistsError" in done.stderr)
        outcomes[mode] = (files(base), errors)
        if guarded:
            assert decisions(base, "1") == [], decisions(base, "1")
    assert outcomes["with"] == outcomes["without"] == ({"runs/shared-name/owner": "0"}, [False, True]), outcomes


HANDLED_NO_WAIT = """
import os, subprocess, sys
import fsguard.world as world

waits = []
original = world.Live.wait_for
def counted(self, probe, budget_s, where=None):  # a spy: the wait itself still runs
    waits.append(budget_s)
    return original(self, probe, budget_s, where)
world.Live.wait_for = counted

lock = os.path.join(sys.argv[1], sys.argv[2])
subprocess.run(["mkdir", lock], check=True)  # a tool made it just now: no guarded call of this job noted it
try:
    os.mkdir(lock)
    print("made")
except FileExistsError:
    print("handled", [w for w in waits if w > 0])
waits.clear()
try:
    os.mkdir(lock)
finally:
    print("unhandled", [w for w in waits if w > 0], flush=True)
"""


def test_a_handled_mkdir_in_a_single_node_job_pays_no_wait_for_a_note(fsguard_python: Path, tmp_path: Path) -> None:
    """In a single-node job a fresh directory no guarded call noted may have a peer's note one ``write`` behind:
    the rule waits (at most 1 s) for it. Where the program handles ``FileExistsError`` itself it gets the error
    either way, so nothing waits (principle 2: the same time as without fsguard); a would-be crash still waits."""
    single = {**TORCHRUN_ENV_SINGLE, "FSGUARD": "1"}
    done = subprocess.run(
        [str(fsguard_python), "-c", HANDLED_NO_WAIT, str(tmp_path), "lock"],
        env=clean_env(single),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "handled []", done.stdout + done.stderr
    assert lines[1].startswith("unhandled [") and lines[1] != "unhandled []", done.stdout + done.stderr
    assert done.returncode == 1 and "FileExistsError" in done.stderr, done.stderr


TORCHRUN_ENV_SINGLE = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "4",
    "TORCHELASTIC_RUN_ID": "handled-no-wait",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29517",
}

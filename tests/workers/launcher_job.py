"""One rank of a job started by a real launcher (``tests/test_launchers.py``): what fsguard sees, then the races.

usage: launcher_job.py ROOT

Reads its place from the launcher's own variables (torch's ``RANK``/``WORLD_SIZE``, Open MPI's
``OMPI_COMM_WORLD_*``, SLURM's ``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS``), independently of fsguard. Writes
``ROOT/ranks/<rank>.json``: fsguard's ``status`` as gathered inside this rank, the operations patched here,
the parent process, the job start fsguard's evidence uses, and the failures of the races. Then every rank,
after a file barrier, races: ``os.makedirs`` of one directory (no ``exist_ok``), ``os.rename`` of one staged
checkpoint, ``os.replace`` of one shared temp name (every rank writes it before the first gate: written
after it, the job's own unguarded ``open(..., "w")`` raced a peer's replace, and on a path-based FUSE mount
such as the cluster's bindfs that open fails with ``ENOENT`` when the name is renamed away between the
kernel's lookup and the daemon's open: a race outside fsguard's guarded calls), ``shutil.rmtree`` of one
tree. Exit status 1 when a call failed. Every rank waits at a last gate for all reports to be written before
it exits (mpirun aborts the job at the first non-zero exit). A single task (world size 1) only writes its
file.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys

from gate import barrier, crash_of  # run as a script: this directory is on sys.path

GATE_POLL_S = 0.001  # the gate may be on a FUSE mount (the cluster's bindfs): poll gently


def place() -> tuple[int, int]:
    env = os.environ
    for rank, size in (
        ("RANK", "WORLD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),
    ):
        if rank in env and size in env:
            return int(env[rank]), int(env[size])
    raise SystemExit("launcher_job: no launcher environment")


def started(pid: int | str) -> float | None:
    from fsguard import evidence

    return evidence._proc_start(pid)


def race(root: str, rank: int, world: int) -> list[dict[str, object]]:
    failures: list[dict[str, object]] = []
    staging, final = os.path.join(root, "tmp-checkpoint-1"), os.path.join(root, "checkpoint-1")
    tree = os.path.join(root, "old-checkpoint")
    if rank == 0:
        os.makedirs(os.path.join(staging, "shards"))
        for i in range(world):
            with open(os.path.join(staging, "shards", f"shard-{i}.bin"), "w") as f:
                f.write("x" * 100)
        for d in range(4):
            os.makedirs(os.path.join(tree, f"d{d}"))
            for i in range(40):
                open(os.path.join(tree, f"d{d}", f"f{i}"), "w").close()
    temp = os.path.join(root, "latest.tmp")
    with open(temp, "w") as f:  # before the gate: only the guarded replace races (module docstring)
        f.write("step 1\n")
    barrier(root, "prepared", rank, world, poll_s=GATE_POLL_S)
    calls = (
        ("makedirs", lambda: os.makedirs(os.path.join(root, "results"))),  # guarded call: makedirs
        ("rename", lambda: os.rename(staging, final)),  # guarded call: rename
        ("replace", lambda: os.replace(temp, os.path.join(root, "latest"))),  # guarded call: replace
        ("rmtree", lambda: shutil.rmtree(tree)),  # guarded call: rmtree
    )
    for name, call in calls:
        barrier(root, name, rank, world, poll_s=GATE_POLL_S)
        _, error = crash_of(call)  # a lost race ends the call's thread: a would-be crash
        if error is not None:
            if not isinstance(error, OSError):
                raise error
            failures.append(
                {
                    "call": name,
                    "type": type(error).__name__,
                    "errno": error.errno,
                    "filename": error.filename,
                    "filename2": error.filename2,
                }
            )
    return failures


def main() -> None:
    root = sys.argv[1]
    rank, world = place()
    from fsguard.cli import status

    gathered = status.gather()
    try:
        with open(f"/proc/{os.getppid()}/comm") as f:
            parent = f.read().strip()
    except OSError:
        parent = "?"
    from fsguard import evidence, patching

    report = {
        "rank": rank,
        "world": world,
        "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),  # the node, as the launcher names it
        "pid": os.getpid(),
        "parent": parent,
        "status": {k: gathered.get(k) for k in ("would_patch", "reason", "launch", "launcher_process")},
        "patched": patching.installed(),
        "job_start": evidence.job_start(True) if patching.installed() else None,
        "own_start": started("self"),
        "parent_start": started(os.getppid()),
        "slurm_job_start_time": os.environ.get("SLURM_JOB_START_TIME"),
        "failures": [],
    }
    if world > 1:
        report["failures"] = race(root, rank, world)
    os.makedirs(os.path.join(root, "ranks"), exist_ok=True)
    with open(os.path.join(root, "ranks", f"{rank}.json"), "w") as f:
        json.dump(report, f)
    print(f"launcher_job: rank {rank}/{world} on {report['host']}: {len(report['failures'])} failures", flush=True)
    if world > 1:
        barrier(root, "reported", rank, world, poll_s=GATE_POLL_S)
    sys.exit(1 if report["failures"] else 0)


if __name__ == "__main__":
    main()

"""Serialization cost (issue 5): µs per guarded call with each lock backend, uncontended and contended.

For 1 rank (uncontended) and 2, 4, 8 ranks (all calling ``os.makedirs(p, exist_ok=True)`` on one existing
directory, back to back), every rank times ``--calls`` calls in each arm:

* guarded: fsguard on, not serialized (the baseline the targets are measured against);
* file: ``FSGUARD_LOCK=file`` (``flock`` in ``/dev/shm``), target: ≤ 50 µs added per call, uncontended;
* store: ``FSGUARD_LOCK=store`` (torchrun's agent store, over TCP), target: ≤ 200 µs added, uncontended;
* barrier: the usual user fix, the unserialized call followed by ``torch.distributed.barrier()`` (gloo).

Ranks are a real ``torchrun --standalone`` job of a fresh venv holding fsguard's wheel (torch from this
interpreter's environment). Arms run interleaved in 5 rounds, each after a barrier; a rank's figure is
the median over rounds of (time for the calls / calls), and the table shows the median over ranks. Under
contention a serialized call also waits for the others' turns, so its figure is at least ranks × the
lock's hold time: the cost of the guarantee, not of the mechanism.

Run: ``python bench/locks.py [--sizes 1 2 4 8] [--calls N] [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench import _common as common

ARMS = ("guarded", "file", "store", "barrier")
ROUNDS = 5
TARGETS_US = {"file": 50.0, "store": 200.0}


# --- one rank --------------------------------------------------------------------------------------------


def worker(directory: str, calls: int, out: str) -> None:
    """One rank of the job: time every arm, gather the figures on rank 0, which writes them to ``out``."""
    import torch.distributed as dist

    from fsguard import config, locks, state

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    target = os.path.join(directory, "shared")
    os.makedirs(target, exist_ok=True)
    assert hasattr(os.makedirs, "__wrapped__"), "fsguard is not active in the ranks"
    serializers = {
        arm: locks.serializer(
            config.load(dict(os.environ, FSGUARD_SERIALIZE="1", FSGUARD_LOCK=arm)), state.STATE.launch
        )
        for arm in ("file", "store")
    }
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for arm in ("file", "store"):  # warm up: torch's import, the store connection, the lock files
        state.set_serializer(serializers[arm])
        for _ in range(20):
            os.makedirs(target, exist_ok=True)
    for _ in range(ROUNDS):  # arms interleaved, so a burst of noise cannot land on one arm only
        for arm in ARMS:
            state.set_serializer(serializers.get(arm))
            n = max(calls // ROUNDS, 10)
            dist.barrier()
            started = time.perf_counter()
            for _ in range(n):
                os.makedirs(target, exist_ok=True)
                if arm == "barrier":
                    dist.barrier()
            samples[arm].append((time.perf_counter() - started) / n * 1e6)
            state.set_serializer(None)
    figures = {arm: statistics.median(values) for arm, values in samples.items()}
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, figures)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


# --- the coordinator ------------------------------------------------------------------------------------


def job(python: Path, ranks: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fsguard-bench-locks-") as tmp:
        out = Path(tmp) / "figures.json"
        # force: a 1-rank job is not "distributed", and FSGUARD=1 would leave it unpatched
        env = common.clean_env({"FSGUARD": "force", "FSGUARD_STDERR": "0", "OMP_NUM_THREADS": "1"})
        run = subprocess.run(
            [
                str(python),
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(ranks),
                str(Path(__file__).resolve()),
                "--worker",
                tmp,
                str(calls),
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if run.returncode != 0 or not out.exists():
            raise RuntimeError(f"torchrun with {ranks} ranks failed:\n{run.stderr[-3000:]}")
        per_rank = json.loads(out.read_text())
    return {arm: common.median(r[arm] for r in per_rank) for arm in ARMS} | {"per_rank": per_rank}


def make_python(workspace: common.Workspace) -> Path:
    python = workspace.venv("locks")
    if python is None:
        raise RuntimeError("cannot make the benchmark venv")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # torch (and gloo) from this interpreter's environment, after the venv's own packages
    (Path(purelib) / "zz_bench_torch.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def run(workspace: common.Workspace, sizes: list[int], calls: int) -> dict[str, Any]:
    python = make_python(workspace)
    results = {}
    for ranks in sizes:
        n = calls if ranks == 1 else max(calls // (2 * ranks), 50)  # contended calls take turns: fewer
        results[str(ranks)] = job(python, ranks, n) | {"calls": n}
        print(f"bench/locks: {ranks} rank(s) done", file=sys.stderr, flush=True)
    return results


def report(results: dict[str, Any]) -> str:
    rows = []
    for ranks, r in results.items():
        base = r["guarded"]
        cells = [f"{ranks} rank{'s' if ranks != '1' else ''}", common.fmt(base, " µs", 1)]
        for arm in ("file", "store", "barrier"):
            cells.append(f"{r[arm]:.1f} µs (+{r[arm] - base:.1f})")
        rows.append(cells)
    text = common.table(["ranks (same path)", "guarded", "file", "store", "barrier"], rows)
    if "1" in results:
        one = results["1"]
        verdicts = [
            f"{arm}: +{one[arm] - one['guarded']:.1f} µs uncontended, target ≤ {target:.0f} µs "
            f"({'met' if one[arm] - one['guarded'] <= target else 'MISSED'})"
            for arm, target in TARGETS_US.items()
        ]
        text += "\n" + "\n".join(verdicts)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--calls", type=int, default=5000, help="calls per arm for 1 rank (fewer when contended)")
    parser.add_argument("--quick", action="store_true", help="1 and 2 ranks, 500 calls (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.worker[2])
        return 0
    sizes, calls = ([1, 2], 500) if args.quick else (args.sizes, args.calls)
    info = common.machine()
    with common.Workspace() as workspace:
        results = run(workspace, sizes, calls)
    print(common.machine_line(info))
    print(report(results))
    if args.json:
        common.write_json(args.json, {"machine": info, "locks": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

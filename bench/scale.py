"""N processes racing on one path (issue 7): success rate and latency, with and without fsguard.

For 2..64 ranks and each operation (makedirs, rename of a directory, replace of a file, rmtree of a small
tree), every rank makes the same call on the same path at the same moment. Arms:

* none: fsguard installed but off (FSGUARD=0): what the job sees today;
* fsguard: FSGUARD=1, activated by the ``.pth`` from the launcher variables;
* serialize: FSGUARD=1 FSGUARD_SERIALIZE=1 (one node: file locks);
* serialize-store: the same with FSGUARD_LOCK=store, against a TCPStore this process serves (the launcher's
  agent store's stand-in): job-wide locks, and singleflight of identical calls (``fsguard.locks.flight``);
  each rank makes one serialized call before the trials (connects; imports torch);
* rank0+barrier: the usual fix: rank 0 makes the call, the others wait for its marker file.

Ranks are real subprocesses of a fresh venv with fsguard's wheel (RANK, WORLD_SIZE, LOCAL_RANK set), kept
alive across trials and released together by a start time on the shared monotonic clock. Latency is from
that start to the call's return (for rank0+barrier: to passing the barrier).

Run: ``python bench/scale.py [--sizes 2 4 ...] [--trials N] [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench import _common as common

OPS = ("makedirs", "rename", "replace", "rmtree")
MODES = ("none", "fsguard", "serialize", "serialize-store", "rank0+barrier")
WORKER = Path(__file__).resolve().parent / "_scale_worker.py"


class Pool:
    """``size`` worker processes with one environment, answering trials until closed."""

    def __init__(self, python: Path, size: int, env: dict[str, str], stderr: IO[str]) -> None:
        self.procs = []
        for rank in range(size):
            rank_env = common.clean_env(
                {
                    **env,
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(size),
                    "LOCAL_WORLD_SIZE": str(size),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": env.get("MASTER_PORT", "29500"),
                }
            )
            self.procs.append(
                subprocess.Popen(
                    [str(python), str(WORKER)],
                    env=rank_env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                    bufsize=1,
                )
            )
        self.active = [json.loads(self._read(p))["fsguard_active"] for p in self.procs]

    @staticmethod
    def _read(proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {proc.pid} died (exit {proc.wait()}); see its stderr")
        return line

    def trial(self, trial: dict[str, Any]) -> list[dict[str, Any]]:
        trial["start"] = time.monotonic() + 0.02 + 0.002 * len(self.procs)
        line = json.dumps(trial) + "\n"
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(line)
            proc.stdin.flush()
        return [json.loads(self._read(p)) for p in self.procs]

    def close(self) -> None:
        for proc in self.procs:
            try:
                assert proc.stdin is not None
                proc.stdin.write('{"quit": true}\n')
                proc.stdin.close()
            except OSError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _setup(op: str, where: Path) -> dict[str, Any]:
    """Lay out one trial's files (unpatched: this process never has fsguard active)."""
    where.mkdir(parents=True)
    if op == "makedirs":
        return {"op": op, "path": str(where / "results")}
    if op == "rename":
        staging = where / "staging"
        staging.mkdir()
        for i in range(2):
            (staging / f"shard{i}").write_bytes(b"x")
        return {"op": op, "path": str(staging), "dst": str(where / "final")}
    if op == "replace":
        (where / "ckpt.tmp").write_bytes(b"x")
        return {"op": op, "path": str(where / "ckpt.tmp"), "dst": str(where / "ckpt")}
    tree = where / "tree"
    for i in range(4):
        (tree / f"d{i}").mkdir(parents=True)
        for j in range(8):
            (tree / f"d{i}" / f"f{j}").write_bytes(b"x")
    return {"op": op, "path": str(tree)}


def _state_ok(trial: dict[str, Any]) -> bool:
    """Whether the files ended as one rank alone would have left them."""
    op = trial["op"]
    if op == "makedirs":
        return os.path.isdir(trial["path"])
    if op == "rename":
        return not os.path.exists(trial["path"]) and len(os.listdir(trial["dst"])) == 2
    if op == "replace":
        return not os.path.exists(trial["path"]) and os.path.isfile(trial["dst"])
    return not os.path.exists(trial["path"])


def _count_records(log_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for file in log_dir.glob("*.jsonl"):
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                decision = json.loads(line).get("decision", "?")
            except ValueError:
                continue
            counts[decision] = counts.get(decision, 0) + 1
    return counts


def run(
    ws: common.Workspace, *, sizes: tuple[int, ...] = (2, 4, 8, 16, 32, 64), trials: int = 5, progress: bool = True
) -> dict[str, Any]:
    python = ws.venv("fsguard")
    if python is None:
        raise RuntimeError("cannot make the benchmark venv")
    serialize = common.has_fsguard_locks(python)
    pools: dict[str, dict[str, str]] = {"none": {"FSGUARD": "0"}, "fsguard": {"FSGUARD": "1"}}
    pythons = {name: python for name in MODES}
    server = _store_server() if serialize else None
    if serialize:
        pools["serialize"] = {"FSGUARD": "1", "FSGUARD_SERIALIZE": "1"}
    torch_python = ws.venv("fsguard-torch", test_deps=True) if server is not None else None
    if server is not None and torch_python is not None:
        pools["serialize-store"] = {
            "FSGUARD": "1",
            "FSGUARD_SERIALIZE": "1",
            "FSGUARD_LOCK": "store",
            "MASTER_PORT": str(server.port),
        }
        pythons["serialize-store"] = torch_python
    cells: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fsguard-scale-") as tmp:
        base = Path(tmp)
        for size in sizes:
            for pool_name, env in pools.items():
                log_dir = base / "logs" / f"{pool_name}-{size}"
                with open(base / f"stderr-{pool_name}-{size}.txt", "w", encoding="utf-8") as stderr:
                    started = time.perf_counter()
                    warm = (
                        {"FSG_BENCH_WARM": str(base / "warm" / f"{pool_name}-{size}")} if "MASTER_PORT" in env else {}
                    )
                    pool = Pool(pythons[pool_name], size, {**env, **warm, "FSGUARD_LOG": str(log_dir)}, stderr)
                    spawn_s = time.perf_counter() - started
                    expected = pool_name != "none"
                    if any(a != expected for a in pool.active):
                        problems.append(f"{pool_name} x{size}: fsguard active in {sum(pool.active)}/{size} ranks")
                    try:
                        modes = ["none", "rank0+barrier"] if pool_name == "none" else [pool_name]
                        for op in OPS:
                            for mode in modes:
                                cell = cells.setdefault(
                                    f"{op}/{size}/{mode}",
                                    {
                                        "op": op,
                                        "size": size,
                                        "mode": mode,
                                        "calls": 0,
                                        "ok": 0,
                                        "errors": {},
                                        "jobs": 0,
                                        "jobs_ok": 0,
                                        "state_ok": 0,
                                        "latency_s": [],
                                        "wall_s": [],
                                    },
                                )
                                for t in range(trials):
                                    trial = _setup(op, base / mode / str(size) / op / str(t))
                                    if mode == "rank0+barrier":
                                        trial["rank0_marker"] = str(base / mode / str(size) / op / f"{t}.done")
                                    answers = pool.trial(trial)
                                    state = _state_ok(trial)
                                    cell["calls"] += len(answers)
                                    cell["ok"] += sum(a["ok"] for a in answers)
                                    for a in answers:
                                        if a["error"]:
                                            cell["errors"][a["error"]] = cell["errors"].get(a["error"], 0) + 1
                                    cell["latency_s"] += [a["latency_s"] for a in answers]
                                    cell["wall_s"].append(max(a["end"] for a in answers) - trial["start"])
                                    cell["jobs"] += 1
                                    cell["state_ok"] += state
                                    cell["jobs_ok"] += state and all(a["ok"] for a in answers)
                    finally:
                        pool.close()
                records = _count_records(log_dir) if log_dir.exists() else {}
                for op in OPS:
                    for mode in ["none", "rank0+barrier"] if pool_name == "none" else [pool_name]:
                        cells[f"{op}/{size}/{mode}"]["spawn_s"] = spawn_s
                        cells[f"{op}/{size}/{mode}"]["records_in_pool"] = records
                if progress:
                    print(
                        f"  scale: {size:>2} ranks, {pool_name:<9} done "
                        f"(start-up {spawn_s:.1f} s, records {records or '-'})",
                        file=sys.stderr,
                        flush=True,
                    )
    for cell in cells.values():
        lat = cell.pop("latency_s")
        walls = cell.pop("wall_s")
        cell["wall_ms"] = {"p50": common.percentile(walls, 50) * 1000, "max": max(walls) * 1000 if walls else 0.0}
        cell["success_rate"] = cell["ok"] / cell["calls"] if cell["calls"] else float("nan")
        cell["latency_ms"] = {f"p{q}": common.percentile(lat, q) * 1000 for q in (50, 90, 99)}
        cell["latency_ms"]["max"] = max(lat) * 1000 if lat else float("nan")
    return {
        "sizes": list(sizes),
        "trials": trials,
        "serialize_available": serialize,
        "problems": problems,
        "cells": cells,
    }


def _store_server() -> Any:
    """A TCPStore server for the serialize-store arm (None where torch is not importable here)."""
    try:
        from datetime import timedelta

        import torch.distributed as dist
    except ImportError:
        return None
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009
    return tcp_store("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))


def render(result: dict[str, Any]) -> str:
    cells = result["cells"]
    rows_ok: list[list[str]] = []
    rows_lat: list[list[str]] = []
    rows_wall: list[list[str]] = []
    for op in OPS:
        for size in result["sizes"]:
            row_ok, row_lat, row_wall = [f"{op} x{size}"], [f"{op} x{size}"], [f"{op} x{size}"]
            for mode in MODES:
                cell = cells.get(f"{op}/{size}/{mode}")
                if cell is None:
                    row_ok.append("n/a")
                    row_lat.append("n/a")
                    row_wall.append("n/a")
                    continue
                errors = ",".join(f"{k}:{v}" for k, v in cell["errors"].items())
                row_ok.append(
                    f"{cell['success_rate'] * 100:.0f}% {cell['jobs_ok']}/{cell['jobs']}"
                    + (f" ({errors})" if errors and mode == "none" else "")
                )
                lat = cell["latency_ms"]
                row_lat.append(f"{lat['p50']:.2f}/{lat['p99']:.2f}")
                row_wall.append(f"{cell['wall_ms']['p50']:.1f}/{cell['wall_ms']['max']:.1f}")
            rows_ok.append(row_ok)
            rows_lat.append(row_lat)
            rows_wall.append(row_wall)
    lines = [
        f"scale: all ranks make the same call at once; {result['trials']} trials per cell",
        "success: % of calls that returned, then jobs (trials) with every rank ok and the files right",
        common.table(["op x ranks", *MODES], rows_ok),
        "",
        "latency per call, ms, p50/p99 (rank0+barrier: until the barrier is passed)",
        common.table(["op x ranks", *MODES], rows_lat),
        "",
        "wall time, ms, from the start gate to the last rank done: p50/max over trials",
        common.table(["op x ranks", *MODES], rows_wall),
    ]
    if not result["serialize_available"]:
        lines.append("serialize: n/a (fsguard.locks has not landed in this tree)")
    lines += [f"problem: {p}" for p in result["problems"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 and 4 ranks, one trial (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.trials = [2, 4], 1
    info = common.machine()
    print(common.machine_line(info), flush=True)
    with common.Workspace() as ws:
        result = run(ws, sizes=tuple(args.sizes), trials=args.trials)
    print(render(result))
    if args.json:
        common.write_json(args.json, {"machine": info, "scale": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

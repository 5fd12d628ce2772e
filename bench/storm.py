"""A metadata storm on a real distributed filesystem (issue 39): does the serialized mode make a job faster?

Two simulated nodes (``tests/cluster/harness.py``: own mount, pid and UTS namespaces), each with its own JuiceFS
client of one volume (SQLite metadata, a local-directory bucket, JuiceFS's default 1 s caches), run one torchrun
job (``--nnodes 2 --node-rank 0|1``, ``--nproc-per-node N``) of ``bench/_storm_worker.py``: every rank makes the
same output tree (``--dirs`` leaf directories, ``makedirs(exist_ok=True)``), then ``--steps`` checkpoints (every
rank: ``makedirs(tmp-checkpoint-N, exist_ok=True)``, its shard, a store barrier; rank 0 renames
``tmp-checkpoint-N`` to ``checkpoint-N``; every rank ``shutil.rmtree``s ``checkpoint-(N-2)`` in a thread of its
own, whose crash is counted). Arms, interleaved within each round:

* ``none``: fsguard installed, ``FSGUARD=0`` (what the job does today);
* ``fsguard``: ``FSGUARD=1``;
* ``serialize``: ``FSGUARD=1 FSGUARD_SERIALIZE=1`` (two nodes: the job's torchrun store, MASTER_ADDR/MASTER_PORT);
* ``rank0``: the usual fix, by hand, without fsguard: rank 0 alone makes the tree, each ``tmp-checkpoint-N`` and
  each ``rmtree``, the others wait at a store barrier: the floor any collapsing of identical calls can reach.

Per run: the storm's wall time (first rank's start after a store barrier to the last rank's last call), the
job's wall time (both nodes booted, mounted, torchrun started and ended), the operations reaching JuiceFS (its
``.stats`` counters, read by local rank 0 of each node before and after the storm and summed over the nodes:
``juicefs_meta_ops_total_*``, the calls to the metadata engine, and ``juicefs_fuse_ops_total_*``, the FUSE
requests), the rmtree crashes, and the final tree (names, types, sizes), compared with the expected one.
usage: python bench/storm.py [--quick] [--json FILE] [--ranks N] [--runs K] [--arms ...] [--dirs D] [--steps S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common as common

ARMS = {
    "none": {"FSGUARD": "0"},
    "fsguard": {"FSGUARD": "1"},
    "serialize": {"FSGUARD": "1", "FSGUARD_SERIALIZE": "1"},
    "rank0": {"FSGUARD": "0"},
}
WORKER = Path(__file__).resolve().parent / "_storm_worker.py"
# what reads of .stats themselves cost (open, read, flush, release): not the storm's
_STATS_READ = ("open", "read", "flush", "release")


def unavailable() -> str | None:
    """Why the storm cannot run here (no root, FUSE, namespaces or juicefs client), or None."""
    from tests.cluster import backends, harness

    return harness.unavailable_reason() or backends.unavailable("juicefs")


def final_tree(root: Path) -> list[tuple[str, str, int]]:
    """Every entry under ``root``: (relative path, ``d``/``f``, size of a file), sorted."""
    found = []
    for here, dirs, files in os.walk(root):
        for name in dirs:
            found.append((os.path.relpath(os.path.join(here, name), root), "d", 0))
        for name in files:
            path = os.path.join(here, name)
            found.append((os.path.relpath(path, root), "f", os.path.getsize(path)))
    return sorted(found)


def expected_tree(world: int, dirs: int, steps: int, shard: int) -> list[tuple[str, str, int]]:
    """What a correct job leaves: the output tree and the last two checkpoints, one shard per rank each."""
    want: set[tuple[str, str, int]] = {("out", "d", 0), ("ckpt", "d", 0)}
    for i in range(dirs):
        want |= {(f"out/part-{i // 20:02d}", "d", 0), (f"out/part-{i // 20:02d}/d-{i:03d}", "d", 0)}
    for step in range(max(0, steps - 2), steps):
        want.add((f"ckpt/checkpoint-{step}", "d", 0))
        want |= {(f"ckpt/checkpoint-{step}/shard-{r:03d}.bin", "f", shard) for r in range(world)}
    return sorted(want)


def count_records(where: Path) -> dict[str, int]:
    """fsguard's records of the run by decision, ``shared_ranks``: the peers' calls that singleflight answered
    without a filesystem call (the ``ranks`` of every ``shared`` record), and ``rmtree_top_gone_before``/``_after``:
    the absorbed rmtree races whose tree was gone when the call began, or went while it walked (a peer's removal
    it waited for)."""
    counts: dict[str, int] = {}
    for path in where.glob("*"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            counts[rec.get("decision", "?")] = counts.get(rec.get("decision", "?"), 0) + 1
            top_gone = rec.get("detail", {}).get("top_gone")
            if rec.get("op") == "rmtree" and top_gone:  # how each absorbed rmtree race went: what its evidence cost
                counts[f"rmtree_top_gone_{top_gone}"] = counts.get(f"rmtree_top_gone_{top_gone}", 0) + 1
            if rec.get("decision") == "shared":
                counts["shared_ranks"] = counts.get("shared_ranks", 0) + int(rec.get("detail", {}).get("ranks", 0))
    return dict(sorted(counts.items()))


def parse(reports: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(reports.glob("rank-*.json"))]


def summarize(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    meta: dict[str, float] = {}
    fuse: dict[str, float] = {}
    meta_s = 0.0
    for r in ranks:
        for name, value in r["stats"].items():
            if name.startswith("juicefs_meta_ops_duration_s"):
                meta_s += value
            elif name.startswith("juicefs_meta_ops_total_"):
                key = name.removeprefix("juicefs_meta_ops_total_")
                meta[key] = meta.get(key, 0) + value
            else:
                key = name.removeprefix("juicefs_fuse_ops_total_")
                fuse[key] = fuse.get(key, 0) + value
    storm = max(r["t1"] for r in ranks) - min(r["t0"] for r in ranks)
    tree = max(r["tree_s"] for r in ranks)
    failures = [f"rank {r['rank']} {f}" for r in ranks for f in r["failures"]]
    return {
        "storm_s": storm,
        "tree_s": tree,
        "meta_ops": int(sum(meta.values())),
        "meta_by_op": {k: int(v) for k, v in sorted(meta.items())},
        "meta_s": meta_s,  # seconds JuiceFS's metadata engine spent, both clients together
        "fuse_ops": int(sum(v for k, v in fuse.items() if k not in _STATS_READ)),
        "fuse_by_op": {k: int(v) for k, v in sorted(fuse.items())},
        "rmtree_crashes": len(failures),
        "crash_samples": failures[:5],
    }


def run(
    *,
    ranks_per_node: int = 4,
    runs: int = 3,
    arms: tuple[str, ...] = tuple(ARMS),
    dirs: int = 200,
    steps: int = 10,
    shard: int = 16384,
    cache_s: float | None = None,
    timeout: float = 300,
) -> dict[str, Any]:
    from tests.cluster import harness

    world = 2 * ranks_per_node
    out: dict[str, Any] = {
        "nodes": 2, "ranks_per_node": ranks_per_node, "world": world, "dirs": dirs, "steps": steps,
        "shard_bytes": shard, "cache_s": cache_s, "runs": {arm: [] for arm in arms},
    }  # fmt: skip
    reason = unavailable()
    if reason is not None:
        out["skipped"] = reason
        return out
    want = expected_tree(world, dirs, steps, shard)
    with common.Workspace() as ws:
        python = ws.venv("fsguard-torch", test_deps=True)
        if python is None:
            out["skipped"] = "cannot make a venv with fsguard's wheel and torch"
            return out
        scratch = Path(tempfile.mkdtemp(prefix="fsguard-storm-"))
        try:
            with harness.cluster(nodes=2, backend="juicefs", cache_s=cache_s, root=scratch / "cluster") as cluster:
                for round_ in range(runs):
                    order = list(arms[round_ % len(arms) :]) + list(arms[: round_ % len(arms)])
                    for arm in order:
                        name = f"{arm}-{round_}"
                        root = cluster.backing / name
                        root.mkdir()
                        root.chmod(0o777)
                        records = cluster.root / "records" / name  # on this machine's disk, not on JuiceFS
                        reports = cluster.root / "reports" / name
                        for where in (records, reports):
                            where.mkdir(parents=True)
                        env = common.clean_env({**ARMS[arm], "OMP_NUM_THREADS": "1", "FSGUARD_LOG": str(records)})
                        args = [str(cluster.shared / name), str(cluster.shared), "--report", str(reports)]
                        args += ["--dirs", str(dirs), "--steps", str(steps), "--shard-bytes", str(shard)]
                        args += ["--rank0"] if arm == "rank0" else []
                        retried = []
                        for attempt in range(2):  # a job whose ranks did not all report (torchrun under load) once more
                            started = time.monotonic()
                            done = cluster.torchrun(
                                python, WORKER, args, nproc_per_node=ranks_per_node, env=env, timeout=timeout,
                                name=f"{name}-{attempt}",
                            )  # fmt: skip
                            job_s = time.monotonic() - started
                            ranks = parse(reports)
                            if len(ranks) == world or attempt:
                                break
                            retried.append(first_error(done.output()) or done.output()[-1500:])
                            for where in (root, records, reports):  # the failed job's tree, records and reports
                                shutil.rmtree(where)
                                where.mkdir(parents=True)
                            root.chmod(0o777)
                        cell: dict[str, Any] = {"job_s": job_s, "ok": done.ok, "ranks_reported": len(ranks)}
                        if retried:
                            cell["retried_after"] = retried
                        if len(ranks) == world:
                            cell.update(summarize(ranks))
                        else:
                            cell["output_tail"] = done.output()[-3000:]
                            cell["first_error"] = first_error(done.output())
                        cell["records"] = count_records(records)
                        tree = final_tree(root)
                        cell["tree_entries"] = len(tree)
                        cell["tree_as_expected"] = tree == want
                        if tree != want:
                            cell["tree_extra"] = [e for e in tree if e not in want][:10]
                            cell["tree_missing"] = [e for e in want if e not in tree][:10]
                        out["runs"][arm].append(cell)
                        print(render_cell(name, cell), flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    out["summary"] = summary(out)
    return out


def first_error(output: str) -> str:
    """The first traceback in a failed job's output (a rank's own, before torchrun's summary of the failure)."""
    at = output.find("Traceback (most recent call last)")
    if at < 0:
        return ""
    lines = output[at:].splitlines()
    end = next((i for i, line in enumerate(lines[1:], 1) if line and not line.startswith(" ")), len(lines) - 1)
    return "\n".join(lines[: end + 1])[-2000:]


def render_cell(name: str, c: dict[str, Any]) -> str:
    if "storm_s" not in c:
        shown = c.get("first_error") or c.get("output_tail", "")[-1500:]
        return f"{name}: job failed ({c['ranks_reported']} ranks reported)\n{shown}"
    return (
        f"{name}: storm {c['storm_s']:.2f} s (tree {c['tree_s']:.2f} s), job {c['job_s']:.1f} s, "
        f"meta ops {c['meta_ops']}, fuse ops {c['fuse_ops']}, rmtree crashes {c['rmtree_crashes']}, "
        f"tree {'as expected' if c['tree_as_expected'] else 'WRONG'}, records {c['records']}"
    )


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """Medians per arm, and ratios against ``none``."""
    rows: dict[str, Any] = {}
    for arm, cells in out["runs"].items():
        good = [c for c in cells if "storm_s" in c]
        if not good:
            continue
        rows[arm] = {
            "runs": len(good),
            "storm_s": common.median(c["storm_s"] for c in good),
            "tree_s": common.median(c["tree_s"] for c in good),
            "job_s": common.median(c["job_s"] for c in good),
            "meta_ops": common.median(c["meta_ops"] for c in good),
            "fuse_ops": common.median(c["fuse_ops"] for c in good),
            "meta_s": common.median(c["meta_s"] for c in good),
            "rmtree_crashes": sum(c["rmtree_crashes"] for c in good),
            "shared_ranks": common.median(c["records"].get("shared_ranks", 0) for c in good),
            "trees_as_expected": sum(bool(c["tree_as_expected"]) for c in cells),
            "cells": len(cells),
        }
    base = rows.get("none")
    if base:
        for row in rows.values():
            row["storm_ratio"] = row["storm_s"] / base["storm_s"]
            # the arm's metadata operations / none's (above 1: more than without fsguard), and its inverse
            row["meta_ratio"] = row["meta_ops"] / base["meta_ops"] if base["meta_ops"] else float("nan")
            row["meta_fall"] = base["meta_ops"] / row["meta_ops"] if row["meta_ops"] else float("nan")
    return rows


def render(out: dict[str, Any]) -> str:
    if "skipped" in out:
        return f"storm: skipped ({out['skipped']})"
    cache = "JuiceFS's own caches (1 s)" if out["cache_s"] is None else f"caches {out['cache_s']:g} s"
    head = (
        f"storm on JuiceFS ({cache}): 2 nodes x {out['ranks_per_node']} ranks, {out['dirs']} dirs, "
        f"{out['steps']} checkpoints"
    )
    rows = [
        [
            arm,
            f"{r['storm_s']:.2f} s",
            common.fmt(r.get("storm_ratio"), "x"),
            f"{r['tree_s']:.2f} s",
            f"{r['job_s']:.1f} s",
            f"{r['meta_ops']:.0f}",
            common.fmt(r.get("meta_ratio"), "x"),
            f"{r['fuse_ops']:.0f}",
            f"{r['meta_s'] * 1000:.0f} ms",
            str(r["rmtree_crashes"]),
            f"{r['shared_ranks']:.0f}",
            f"{r['trees_as_expected']}/{r['cells']}",
        ]
        for arm, r in out["summary"].items()
    ]
    headers = ["arm", "storm p50", "vs none", "tree", "job", "meta ops", "ops vs none", "fuse ops", "meta time"]
    headers += ["crashes", "shared", "tree ok"]
    return head + "\n" + common.table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 rank per node, 20 dirs, 4 checkpoints, 1 run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--ranks", type=int, default=4, help="ranks per node (the issue's 16 is for bigger machines)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--dirs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument(
        "--cache-s", type=float, help="JuiceFS entry/attr/dir-entry/negative cache times (default: its own, 1 s)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.ranks, args.runs, args.dirs, args.steps = 1, 1, 20, 4
    info = common.machine()
    print(common.machine_line(info), flush=True)
    started = time.monotonic()
    arms = tuple(args.arms)
    out = run(
        ranks_per_node=args.ranks, runs=args.runs, arms=arms, dirs=args.dirs, steps=args.steps, cache_s=args.cache_s
    )
    out["seconds"] = round(time.monotonic() - started, 1)
    print(render(out), flush=True)
    if args.json:
        common.write_json(args.json, {"storm": out, "machine": info})
    return 0


if __name__ == "__main__":
    sys.exit(main())

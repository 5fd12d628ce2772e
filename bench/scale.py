"""N processes racing on one path (issues 7, 17): success rate, latency, syscalls and store requests.

For 2..256 ranks and each operation (makedirs, rename of a directory, replace of a file, rmtree of a small
tree), every rank makes the same call on the same path at the same moment. Arms:

* none: fsguard installed but off (FSGUARD=0): what the job sees today;
* fsguard: FSGUARD=1, activated at start-up from the launcher variables;
* serialize: FSGUARD=1 FSGUARD_SERIALIZE=1 (one node: file locks);
* serialize-store: the same with FSGUARD_LOCK=store, against a TCPStore this process serves (the launcher's
  agent store's stand-in): job-wide locks, and singleflight of identical calls (``fsguard.locks.flight``);
  no rank makes a serialized call before the pool's first race (cold: fsguard opens its store connection in
  the background from start-up; the first race's wall time is reported apart as the cold figure);
* rank0+barrier: the usual fix: rank 0 makes the call, the others wait for its marker file.

How ranks are made (``--ranks``): ``fork`` (the default) starts one interpreter of a fresh venv with
fsguard's wheel per pool, with ``FSGUARD=0``; it imports fsguard (and torch.distributed for the store arm),
freezes its heap (``gc.freeze``) and forks the N ranks; each sets its own ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE``/``FSGUARD`` and runs ``fsguard._boot.start()``, the function the ``.pth`` runs, so detection
and activation are a real rank's (see ``_scale_worker``). A rank then holds about 2 (off) to 9 (store arm)
MiB of private memory, where a fresh interpreter that imports torch holds about 150 MiB: 256 fresh ranks of
the store arm need about 38 GiB and minutes of CPU to start, more than this 24 GiB, 2-core machine has.
``exec`` starts one fresh interpreter per rank (fsguard activated by its ``.pth``), as before; use it at
small sizes to check that forked ranks give the same figures. Ranks are kept alive across trials, talk to
this process over a Unix socket, and are released together by a start time on the shared monotonic clock.

Per cell: success (calls that returned; trials where every rank was ok and the files ended right), latency
per call (from the rank's wake-up at the start time to the call's return; for rank0+barrier, to passing the
barrier), wall time from the start time to the last rank done, CPU time per call, metadata syscalls per rank
(``strace -f -c`` attached to every rank for one extra, untimed trial: every syscall that names a path, and
``getdents64``), store requests per rank (every request of fsguard's TCPStore clients, counted by a proxy
the rank installs), and each pool's private memory per rank (USS and PSS from ``/proc/PID/smaps_rollup``).
Each pool first makes one untimed race (a rank's first record creates its log; its wall time is reported
apart).

Run: ``python bench/scale.py [--sizes 2 4 ...] [--trials N] [--modes ...] [--ranks fork|exec]
[--no-syscalls] [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
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
RANK_VARIABLES = ("RANK", "LOCAL_RANK")
SYSCALLS = "%file,getdents64"  # what strace counts: every call naming a path, and directory listings
# The store server's own process: a TCPStore client connection reverse-resolves the store's address (c10d's
# SocketImpl); where the DNS server drops queries, each lookup waits out the resolver's 5 s timeout. The ranks
# keep the resolver's defaults, as a job's would (the cold first race measures what that costs).
RES_OPTIONS = "timeout:1 attempts:1"
CHANGES = ("mkdir", "mkdirat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir")


class Pool:
    """``size`` ranks with one environment, answering trials over a Unix socket until closed.

    ``ranks="fork"``: one zygote forks them (see ``_scale_worker``); ``"exec"``: one fresh interpreter each."""

    def __init__(self, python: Path, size: int, env: dict[str, str], stderr: IO[str], where: Path, ranks: str) -> None:
        self.size = size
        path = str(where / f"s{os.getpid()}-{time.monotonic_ns()}")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(size)
        rank_env = {
            **env,
            "WORLD_SIZE": str(size),
            "LOCAL_WORLD_SIZE": str(size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": env.get("MASTER_PORT", "29500"),
            "FSG_BENCH_SOCKET": path,
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        if ranks == "fork":
            zygote_env = {**rank_env, "FSGUARD": "0", "FSG_BENCH_RANK_ENV": json.dumps(rank_env)}
            for name in RANK_VARIABLES:
                zygote_env.pop(name, None)
            self.procs.append(self._start([str(python), str(WORKER), "--fork", str(size)], zygote_env, stderr))
        else:
            for rank in range(size):
                self.procs.append(
                    self._start(
                        [str(python), str(WORKER)], {**rank_env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, stderr
                    )
                )
        self.conns: list[Any] = [None] * size
        self.pids = [0] * size
        self.active = [False] * size
        self.warm_s = [0.0] * size
        listener.settimeout(1.0)
        deadline = time.monotonic() + 1800
        try:
            for _ in range(size):
                while True:
                    try:
                        conn, _ = listener.accept()
                        break
                    except TimeoutError:
                        if any(p.poll() not in (None, 0) for p in self.procs) or time.monotonic() > deadline:
                            raise RuntimeError("a rank died or never connected; see its stderr") from None
                conn.settimeout(None)
                stream = conn.makefile("rw", encoding="utf-8", newline="\n")
                hello = json.loads(self._read(stream))
                self.conns[hello["rank"]] = stream
                self.pids[hello["rank"]] = hello["pid"]
                self.active[hello["rank"]] = hello["fsguard_active"]
                self.warm_s[hello["rank"]] = hello["warm_s"]
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
            os.unlink(path)

    @staticmethod
    def _start(argv: list[str], env: dict[str, str], stderr: IO[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, env=common.clean_env(env), stdin=subprocess.DEVNULL, stderr=stderr)

    @staticmethod
    def _read(stream: Any) -> str:
        line = stream.readline()
        if not line:
            raise RuntimeError("a rank closed its connection; see its stderr")
        return str(line)

    def trial(self, trial: dict[str, Any]) -> list[dict[str, Any]]:
        trial["start"] = time.monotonic() + 0.02 + 0.002 * self.size
        line = json.dumps(trial) + "\n"
        for stream in self.conns:
            stream.write(line)
            stream.flush()
        return [json.loads(self._read(s)) for s in self.conns]

    def memory_kib(self) -> dict[str, float]:
        """Mean private (USS) and proportional (PSS) memory of a rank, KiB, from ``/proc/PID/smaps_rollup``."""
        uss, pss = [], []
        for pid in self.pids:
            fields: dict[str, int] = {}
            try:
                with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
                    for row in f:
                        parts = row.split()
                        if len(parts) >= 2 and parts[1].isdigit():
                            fields[parts[0].rstrip(":")] = int(parts[1])
            except OSError:
                continue
            uss.append(fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0))
            pss.append(fields.get("Pss", 0))
        nan = float("nan")
        return {"uss": statistics.fmean(uss) if uss else nan, "pss": statistics.fmean(pss) if pss else nan}

    def close(self) -> None:
        for stream in self.conns:
            if stream is None:
                continue
            try:
                stream.write('{"quit": true}\n')
                stream.close()
            except OSError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def count_syscalls(pool: Pool, trial: dict[str, Any], out: Path) -> tuple[list[dict[str, Any]], dict[str, int] | None]:
    """One trial with ``strace -f -c`` attached to every rank: its answers, and the metadata syscalls the ranks
    made during it, by name (None where strace cannot attach). Attached with ``-p``, strace stops every
    syscall of the ranks (``--seccomp-bpf`` filters only what it starts itself): slow, so never timed."""
    if shutil.which("strace") is None:
        return pool.trial(trial), None
    argv = ["strace", "-f", "-c", "-e", f"trace={SYSCALLS}", "-o", str(out)]
    for pid in pool.pids:
        argv += ["-p", str(pid)]
    tracer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert tracer.stderr is not None
    waiting = {str(pid) for pid in pool.pids}
    while waiting:
        row = tracer.stderr.readline()
        if not row:
            return pool.trial(trial), None
        if "attached" in row:
            waiting.discard(row.split("Process ", 1)[-1].split()[0])
    answers = pool.trial(trial)
    tracer.send_signal(signal.SIGINT)
    tracer.communicate(timeout=120)
    counts: dict[str, int] = {}
    for row in out.read_text(encoding="utf-8").splitlines():
        parts = row.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total" and parts[3].isdigit():
            counts[parts[-1]] = int(parts[3])
    return answers, counts


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


def _new_cell(op: str, size: int, mode: str) -> dict[str, Any]:
    return {
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
        "cpu_s": [],
        "late_s": [],
        "store_ops": {},
    }


def _modes_of(pool_name: str, modes: tuple[str, ...]) -> list[str]:
    """The modes a pool serves: the unpatched pool serves both none and rank0+barrier."""
    return [m for m in ("none", "rank0+barrier") if m in modes] if pool_name == "none" else [pool_name]


def run(
    ws: common.Workspace,
    *,
    sizes: tuple[int, ...] = (2, 4, 8, 16, 32, 64),
    trials: int = 5,
    progress: bool = True,
    ranks: str = "fork",
    modes: tuple[str, ...] = MODES,
    syscalls: bool = True,
) -> dict[str, Any]:
    python = ws.venv("fsguard")
    if python is None:
        raise RuntimeError("cannot make the benchmark venv")
    serialize = common.has_fsguard_locks(python)
    pools: dict[str, dict[str, str]] = {}
    if "none" in modes or "rank0+barrier" in modes:
        pools["none"] = {"FSGUARD": "0"}
    if "fsguard" in modes:
        pools["fsguard"] = {"FSGUARD": "1"}
    pythons = {name: python for name in MODES}
    server = _store_server() if serialize and "serialize-store" in modes else None
    if serialize and "serialize" in modes:
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
    memory: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    store: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fsguard-scale-") as tmp:
        base = Path(tmp)
        for size in sizes:
            for pool_name, env in pools.items():
                log_dir = base / "logs" / f"{pool_name}-{size}"
                pool_modes = _modes_of(pool_name, modes)
                with open(base / f"stderr-{pool_name}-{size}.txt", "w", encoding="utf-8") as stderr:
                    started = time.perf_counter()
                    # no serialized call before the first race: that race is the job's first (cold: the
                    # store connection opened in the background since start-up, the first flight and lock)
                    pool = Pool(pythons[pool_name], size, {**env, "FSGUARD_LOG": str(log_dir)}, stderr, base, ranks)
                    spawn_s = time.perf_counter() - started
                    expected = pool_name != "none"
                    if any(a != expected for a in pool.active):
                        problems.append(f"{pool_name} x{size}: fsguard active in {sum(pool.active)}/{size} ranks")
                    try:
                        # one untimed race first: a rank's first record creates its log, its first decision
                        # reads the job's start; bench/startup.py measures first-use costs
                        first = _setup("makedirs", base / pool_name / str(size) / "first")
                        answers = pool.trial(first)
                        first_race_ms = (max(a["end"] for a in answers) - first["start"]) * 1000
                        for op in OPS:
                            for mode in pool_modes:
                                cell = cells.setdefault(f"{op}/{size}/{mode}", _new_cell(op, size, mode))
                                for t in range(trials + syscalls):
                                    trial = _setup(op, base / mode / str(size) / op / str(t))
                                    if mode == "rank0+barrier":
                                        trial["rank0_marker"] = str(base / mode / str(size) / op / f"{t}.done")
                                    if t == trials:  # the counting trial: traced, not timed
                                        answers, counts = count_syscalls(pool, trial, base / f"strace-{t}.txt")
                                        cell["syscalls_per_rank"] = (
                                            None if counts is None else {k: v / size for k, v in counts.items()}
                                        )
                                    else:
                                        answers = pool.trial(trial)
                                    state = _state_ok(trial)
                                    cell["calls"] += len(answers)
                                    cell["ok"] += sum(a["ok"] for a in answers)
                                    cell["jobs"] += 1
                                    cell["state_ok"] += state
                                    cell["jobs_ok"] += state and all(a["ok"] for a in answers)
                                    for a in answers:
                                        if a["error"]:
                                            cell["errors"][a["error"]] = cell["errors"].get(a["error"], 0) + 1
                                    if t == trials:
                                        continue
                                    cell["latency_s"] += [a["latency_s"] for a in answers]
                                    cell["cpu_s"] += [a["cpu_s"] for a in answers]
                                    cell["late_s"].append(max(a["late_s"] for a in answers))
                                    cell["wall_s"].append(max(a["end"] for a in answers) - trial["start"])
                                    for a in answers:
                                        for k, v in a["store_ops"].items():
                                            cell["store_ops"][k] = cell["store_ops"].get(k, 0) + v
                        memory[f"{pool_name}/{size}"] = pool.memory_kib()
                        if pool_name == "serialize-store" and size == min(sizes):
                            store = store_requests(pool)
                    finally:
                        pool.close()
                records = _count_records(log_dir) if log_dir.exists() else {}
                for op in OPS:
                    for mode in pool_modes:
                        cells[f"{op}/{size}/{mode}"]["spawn_s"] = spawn_s
                        cells[f"{op}/{size}/{mode}"]["first_race_wall_ms"] = first_race_ms
                        cells[f"{op}/{size}/{mode}"]["records_in_pool"] = records
                if progress:
                    mem = memory.get(f"{pool_name}/{size}", {})
                    print(
                        f"  scale: {size:>3} ranks, {pool_name:<15} done (start-up {spawn_s:.1f} s, "
                        f"rank USS {mem.get('uss', float('nan')) / 1024:.1f} MiB, load {os.getloadavg()[0]:.1f}, "
                        f"records {records or '-'})",
                        file=sys.stderr,
                        flush=True,
                    )
    for cell in cells.values():
        lat = cell.pop("latency_s")
        walls = cell.pop("wall_s")
        cpu = cell.pop("cpu_s")
        late = cell.pop("late_s")
        timed_calls = len(lat)
        cell["wall_ms"] = {"p50": common.percentile(walls, 50) * 1000, "max": max(walls) * 1000 if walls else 0.0}
        cell["success_rate"] = cell["ok"] / cell["calls"] if cell["calls"] else float("nan")
        cell["latency_ms"] = {f"p{q}": common.percentile(lat, q) * 1000 for q in (50, 90, 99)}
        cell["latency_ms"]["max"] = max(lat) * 1000 if lat else float("nan")
        cell["cpu_ms_per_call"] = {
            "p50": common.percentile(cpu, 50) * 1000,
            "mean": statistics.fmean(cpu) * 1000 if cpu else float("nan"),
        }
        cell["last_wake_ms"] = common.median(late) * 1000  # median over trials: how late the last rank woke up
        ops = cell.pop("store_ops")
        cell["store_ops_per_rank"] = {k: v / timed_calls for k, v in ops.items()} if timed_calls else {}
        cell["store_ops_per_rank"]["total"] = sum(ops.values()) / timed_calls if timed_calls else 0.0
        cell.setdefault("syscalls_per_rank", None)
    return {
        "sizes": list(sizes),
        "trials": trials,
        "ranks": ranks,
        "serialize_available": serialize,
        "problems": problems,
        "memory_kib_per_rank": memory,
        "store_requests_us": store,
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
    os.environ["RES_OPTIONS"] = RES_OPTIONS
    return tcp_store("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))


def store_requests(pool: Pool, n: int = 400) -> dict[str, Any]:
    """The store's costs behind the model in bench/README.md: the round trip of one client alone, and the
    server's time per request when every rank of ``pool`` sends ``n`` requests of a kind back to back
    (the server answers one request at a time: elapsed time over requests served; an upper bound here,
    where the clients share the server's cores), in microseconds."""
    out: dict[str, Any] = {}
    for clients in (1, pool.size):
        answers = pool.trial({"op": "store", "clients": clients, "n": n})
        probes = [a["probe"] for a in answers if a["probe"]]
        out[f"{clients}_clients"] = {
            kind: {
                "per_client_us": common.median(p[kind][1] - p[kind][0] for p in probes) / n * 1e6,
                "server_us_per_request": (max(p[kind][1] for p in probes) - min(p[kind][0] for p in probes))
                / (n * len(probes))
                * 1e6,
            }
            for kind in ("add", "compare_set", "get")
        }
    return out


def _syscalls(cell: dict[str, Any]) -> str:
    counts = cell.get("syscalls_per_rank")
    if counts is None:
        return "n/a"
    key = sum(v for k, v in counts.items() if k in CHANGES)
    return f"{sum(counts.values()):.1f}/{key:.2f}"


def _store(cell: dict[str, Any]) -> str:
    return f"{cell['store_ops_per_rank'].get('total', 0.0):.1f}"


def render(result: dict[str, Any]) -> str:
    cells = result["cells"]
    columns = [m for m in MODES if any(c["mode"] == m for c in cells.values())]
    tables: dict[str, list[list[str]]] = {"ok": [], "lat": [], "wall": [], "sys": [], "store": []}
    for op in OPS:
        for size in result["sizes"]:
            rows = {name: [f"{op} x{size}"] for name in tables}
            for mode in columns:
                cell = cells.get(f"{op}/{size}/{mode}")
                if cell is None:
                    for row in rows.values():
                        row.append("n/a")
                    continue
                errors = ",".join(f"{k}:{v}" for k, v in cell["errors"].items())
                rows["ok"].append(
                    f"{cell['success_rate'] * 100:.0f}% {cell['jobs_ok']}/{cell['jobs']}"
                    + (f" ({errors})" if errors and mode == "none" else "")
                )
                lat = cell["latency_ms"]
                rows["lat"].append(f"{lat['p50']:.2f}/{lat['p99']:.2f}")
                rows["wall"].append(f"{cell['wall_ms']['p50']:.1f}/{cell['wall_ms']['max']:.1f}")
                rows["sys"].append(_syscalls(cell))
                rows["store"].append(_store(cell))
            for name, row in rows.items():
                tables[name].append(row)
    headers = ["op x ranks", *columns]
    lines = [
        f"scale: all ranks make the same call at once; {result['trials']} timed trials per cell;"
        f" ranks made by {result['ranks']}",
        "success: % of calls that returned, then jobs (trials, the counting one too) with every rank ok and the"
        " files right",
        common.table(headers, tables["ok"]),
        "",
        "latency per call, ms, p50/p99 (rank0+barrier: until the barrier is passed)",
        common.table(headers, tables["lat"]),
        "",
        "wall time, ms, from the start gate to the last rank done: p50/max over trials",
        common.table(headers, tables["wall"]),
        "",
        f"metadata syscalls per rank in one traced trial (strace -c, trace={SYSCALLS}): all/changing"
        f" ({', '.join(CHANGES)})",
        common.table(headers, tables["sys"]),
        "",
        "store operations per rank per call (requests to the TCPStore, lease renewals included)",
        common.table(headers, tables["store"]),
        "",
        "cold: first race of each pool (makedirs; untimed above: first records, first decisions, and for the store "
        "arm the first serialized call of every rank), wall ms: "
        + "; ".join(
            f"{c['mode']}/{c['size']} {c['first_race_wall_ms']:.0f}"
            for c in cells.values()
            if c["op"] == "makedirs" and "first_race_wall_ms" in c
        ),
        "memory per rank, MiB, USS/PSS: "
        + "; ".join(
            f"{k} {v['uss'] / 1024:.1f}/{v['pss'] / 1024:.1f}" for k, v in result["memory_kib_per_rank"].items()
        ),
    ]
    for clients, kinds in result.get("store_requests_us", {}).items():
        lines.append(
            f"store requests, {clients.split('_')[0]} client(s): "
            + "; ".join(
                f"{k} {v['per_client_us']:.0f} us per client, server {v['server_us_per_request']:.0f} us per request"
                for k, v in kinds.items()
            )
        )
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
    parser.add_argument(
        "--ranks", choices=["fork", "exec"], default="fork", help="fork from one warm zygote (default) or exec each"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--no-syscalls", action="store_true", help="skip the strace-counted trial of each cell")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.trials = [2, 4], 1
    info = common.machine()
    print(common.machine_line(info), flush=True)
    with common.Workspace() as ws:
        result = run(
            ws,
            sizes=tuple(args.sizes),
            trials=args.trials,
            ranks=args.ranks,
            modes=tuple(args.modes),
            syscalls=not args.no_syscalls,
        )
    print(render(result))
    if args.json:
        common.write_json(args.json, {"machine": info, "scale": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

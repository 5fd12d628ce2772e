"""N processes racing on one path (issues 7, 17, 24): success rate, latency, syscalls and store requests, warm and cold.

For 2..1,024 ranks and each operation (makedirs, rename of a directory, replace of a file, rmtree of a small
tree), every rank makes the same call on the same path at the same moment; ``convoy``: every rank makes a call
of its own onto one name (``os.replace(f"latest.tmp.{rank}", "latest")``, each rank publishing its file):
different calls on one path, which singleflight cannot collapse and the lock serializes one by one. Arms:

* none: fsguard installed but off (FSGUARD=0): what the job sees today;
* fsguard: FSGUARD=1, activated at start-up from the launcher variables;
* serialize: FSGUARD=1 FSGUARD_SERIALIZE=1 (one node: file locks);
* serialize-store: the same with FSGUARD_LOCK=store, against a TCPStore this process serves (the launcher's
  agent store's stand-in): job-wide locks, and singleflight of identical calls (``fsguard.locks.flight``);
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
Warm and cold: a warm pool first makes one untimed race (a ``makedirs``: a rank's first record creates its log,
its first decision reads the job's start, in the store arm its first serialized call), then the timed trials.
A cold trial (``--cold-trials``) is a pool of its own whose first call of all is the trial's: the figure then
includes every first-use cost (for the store arm, fsguard's store connections, opened in the background from
start-up, and the first flight and lock). A cold pool's ranks are forked with fsguard not started yet; every rank
starts it (``fsguard._boot.start()``, what the ``.pth`` runs) at one moment, the trial's gate, as a job's ranks
start together, and makes the call ``--cold-gate-s`` later (0: at once, so the store connections that fsguard
opens in the background from start-up are on the call's path; the wall time is counted from the call's gate).
Memory: the machine's available memory (``MemAvailable``) when each pool is up, the lowest reported.

Run: ``python bench/scale.py [--sizes 2 4 ...] [--trials N] [--modes ...] [--ops ...] [--cells OP/MODE ...]
[--cold-trials K] [--cold-gate-s S] [--ranks fork|exec] [--no-syscalls] [--quick] [--json FILE]``.
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

OPS = ("makedirs", "rename", "replace", "rmtree", "convoy")
MODES = ("none", "fsguard", "serialize", "serialize-store", "rank0+barrier")
WORKER = Path(__file__).resolve().parent / "_scale_worker.py"
RANK_VARIABLES = ("RANK", "LOCAL_RANK")
SYSCALLS = "%file,getdents64"  # what strace counts: every call naming a path, and directory listings
# The store server's own process. c10d reverse-resolves the peer's address of every connection: the client
# before it connects (SocketImpl), and the server when it accepts (TCPStoreLibUvBackend's startRead, on its one
# event-loop thread, so a slow lookup stalls every request of every client). Listening on "::" as c10d does by
# itself, the peers are IPv4-mapped (::ffff:127.0.0.1), which /etc/hosts does not list: the lookup goes to DNS,
# and where the DNS server drops queries under a burst it waits out the resolver's timeout. ``--store-listen
# ipv4`` (the default) hands the server a socket of this process's own on 127.0.0.1 (``master_listen_fd``): its
# peers are then plain 127.0.0.1, found in /etc/hosts at once, as a cluster's hosts file or a healthy DNS server
# would answer; ``dual`` measures the store as a launcher serves it here. The ranks keep the resolver's
# defaults either way, as a job's would (their own lookups are part of the cold figures).
RES_OPTIONS = "timeout:1 attempts:1"  # the server's only: the ranks get the environment's own (USER_RES_OPTIONS)
USER_RES_OPTIONS = os.environ.get("RES_OPTIONS")
LISTEN = ("ipv4", "dual")
CHANGES = ("mkdir", "mkdirat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir")


class Pool:
    """``size`` ranks with one environment, answering trials over a Unix socket until closed.

    ``ranks="fork"``: one zygote forks them (see ``_scale_worker``); ``"exec"``: one fresh interpreter each."""

    def __init__(
        self,
        python: Path,
        size: int,
        env: dict[str, str],
        stderr: IO[str],
        where: Path,
        ranks: str,
        defer: bool = False,
    ) -> None:
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
            if defer:  # fsguard starts in every rank at the first trial's boot_at (see _scale_worker)
                zygote_env["FSG_BENCH_DEFER_BOOT"] = "1"
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
        full = common.clean_env(env)
        full.pop("RES_OPTIONS", None)  # the store server's, set in this process (see RES_OPTIONS)
        if USER_RES_OPTIONS is not None:
            full["RES_OPTIONS"] = USER_RES_OPTIONS
        return subprocess.Popen(argv, env=full, stdin=subprocess.DEVNULL, stderr=stderr)

    @staticmethod
    def _read(stream: Any) -> str:
        line = stream.readline()
        if not line:
            raise RuntimeError("a rank closed its connection; see its stderr")
        return str(line)

    def trial(self, trial: dict[str, Any], boot_gate_s: float | None = None) -> list[dict[str, Any]]:
        """The ranks' answers to ``trial``, started at one time for all; with ``boot_gate_s``, a deferred pool's
        ranks start fsguard at that time (``boot_at``) and make the call ``boot_gate_s`` later."""
        trial["start"] = time.monotonic() + 0.02 + 0.002 * self.size
        if boot_gate_s is not None:
            trial["boot_at"] = trial["start"]
            trial["start"] += boot_gate_s
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


def mem_available_mib() -> float:
    """The machine's available memory now (``MemAvailable`` in ``/proc/meminfo``), MiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for row in f:
                if row.startswith("MemAvailable:"):
                    return int(row.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return float("nan")


def count_syscalls(
    pool: Pool, trial: dict[str, Any], out: Path, boot_gate_s: float | None = None
) -> tuple[list[dict[str, Any]], dict[str, int] | None]:
    """One trial with ``strace -f -c`` attached to every rank: its answers, and the metadata syscalls the ranks
    made during it, by name (None where strace cannot attach). Attached with ``-p``, strace stops every
    syscall of the ranks (``--seccomp-bpf`` filters only what it starts itself): slow, so never timed."""
    if shutil.which("strace") is None:
        return pool.trial(trial, boot_gate_s), None
    argv = ["strace", "-f", "-c", "-e", f"trace={SYSCALLS}", "-o", str(out)]
    for pid in pool.pids:
        argv += ["-p", str(pid)]
    tracer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert tracer.stderr is not None
    waiting = {str(pid) for pid in pool.pids}
    while waiting:
        row = tracer.stderr.readline()
        if not row:
            return pool.trial(trial, boot_gate_s), None
        if "attached" in row:
            waiting.discard(row.split("Process ", 1)[-1].split()[0])
    answers = pool.trial(trial, boot_gate_s)
    tracer.send_signal(signal.SIGINT)
    tracer.communicate(timeout=120)
    counts: dict[str, int] = {}
    for row in out.read_text(encoding="utf-8").splitlines():
        parts = row.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total" and parts[3].isdigit():
            counts[parts[-1]] = int(parts[3])
    return answers, counts


def _setup(op: str, where: Path, size: int = 0) -> dict[str, Any]:
    """Lay out one trial's files (unpatched: this process never has fsguard active)."""
    where.mkdir(parents=True)
    if op == "convoy":  # every rank's own file, and the name they all replace
        for rank in range(size):
            (where / f"latest.tmp.{rank}").write_bytes(b"%d" % rank)
        (where / "latest").write_bytes(b"")
        return {"op": op, "path": str(where / "latest.tmp"), "dst": str(where / "latest")}
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
    if op == "convoy":
        where = os.path.dirname(trial["dst"])
        return os.path.isfile(trial["dst"]) and not [n for n in os.listdir(where) if n.startswith("latest.tmp.")]
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
        "cold_calls": 0,
        "cold_ok": 0,
        "cold_jobs": 0,
        "cold_jobs_ok": 0,
        "cold_state_ok": 0,
        "cold_latency_s": [],
        "cold_wall_s": [],
        "cold_cpu_s": [],
        "cold_late_s": [],
        "cold_store_ops": {},
        "cold_spawn_s": [],
        "cold_phases": [],
    }


def _modes_of(pool_name: str, modes: tuple[str, ...]) -> list[str]:
    """The modes a pool serves: the unpatched pool serves both none and rank0+barrier."""
    return [m for m in ("none", "rank0+barrier") if m in modes] if pool_name == "none" else [pool_name]


def _wanted(op: str, mode: str, cells: tuple[str, ...] | None) -> bool:
    """Whether cell ``op/mode`` is measured (``--cells``; convoy has no rank 0 + barrier form: every rank's call
    is its own)."""
    if op == "convoy" and mode == "rank0+barrier":
        return False
    return cells is None or f"{op}/{mode}" in cells


def _tally(cell: dict[str, Any], trial: dict[str, Any], answers: list[dict[str, Any]], prefix: str = "") -> None:
    """Add one trial's answers to ``cell`` (``prefix`` "cold_": to the cold figures)."""
    state = _state_ok(trial)
    cell[prefix + "calls"] += len(answers)
    cell[prefix + "ok"] += sum(a["ok"] for a in answers)
    cell[prefix + "jobs"] += 1
    cell[prefix + "state_ok"] += state
    cell[prefix + "jobs_ok"] += state and all(a["ok"] for a in answers)
    for a in answers:
        if a["error"]:
            cell["errors"][a["error"]] = cell["errors"].get(a["error"], 0) + 1


def _trace_network(pool: Pool, where: Path | None, tag: str) -> subprocess.Popen[bytes] | None:
    """``strace -f -tt`` of the network syscalls (and polls: a resolver's waits) of three ranks of a cold pool
    (first, middle, last), written to ``where/<tag>.<pid>``: where a cold call's time goes, its threads included
    (they are started after the attach)."""
    if where is None or shutil.which("strace") is None:
        return None
    where.mkdir(parents=True, exist_ok=True)
    pids = sorted({pool.pids[0], pool.pids[pool.size // 2], pool.pids[-1]})
    argv = ["strace", "-f", "-tt", "-ff", "-e", "trace=%network,poll,ppoll", "-o", str(where / tag)]
    for pid in pids:
        argv += ["-p", str(pid)]
    tracer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert tracer.stderr is not None
    for _ in pids:  # "Process N attached": one line each
        if not tracer.stderr.readline():
            break
    return tracer


def _phases(trial: dict[str, Any], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a cold trial's time went, s from the moment fsguard started (``boot_at``): the ranks' start-ups, the
    store clients fsguard made (each one's time to connect, and when the last one of a rank was made), the calls'
    ends (p50 and max over ranks)."""
    gate = trial.get("boot_at", trial["start"])
    out: dict[str, Any] = {}

    def spread(name: str, values: list[float]) -> None:
        if values:
            out[name] = {"p50": common.percentile(values, 50), "max": max(values)}

    spread("booted_s", [a["booted"] - gate for a in answers if a.get("booted") is not None])
    spread("connect_each_s", [e - b for a in answers for b, e in a.get("connects", [])])
    spread("connected_s", [max(e for _, e in a["connects"]) - gate for a in answers if a.get("connects")])
    spread("clients_per_rank", [float(len(a.get("connects", []))) for a in answers])
    spread("done_s", [a["end"] - gate for a in answers])
    return out


def _timed(cell: dict[str, Any], trial: dict[str, Any], answers: list[dict[str, Any]], prefix: str = "") -> None:
    cell[prefix + "latency_s"] += [a["latency_s"] for a in answers]
    cell[prefix + "cpu_s"] += [a["cpu_s"] for a in answers]
    cell[prefix + "late_s"].append(max(a["late_s"] for a in answers))
    cell[prefix + "wall_s"].append(max(a["end"] for a in answers) - trial["start"])
    for a in answers:
        for k, v in a["store_ops"].items():
            cell[prefix + "store_ops"][k] = cell[prefix + "store_ops"].get(k, 0) + v


def run(
    ws: common.Workspace,
    *,
    sizes: tuple[int, ...] = (2, 4, 8, 16, 32, 64),
    trials: int = 5,
    progress: bool = True,
    ranks: str = "fork",
    modes: tuple[str, ...] = MODES,
    ops: tuple[str, ...] = OPS,
    cells_wanted: tuple[str, ...] | None = None,
    cold_trials: int = 0,
    cold_ops: tuple[str, ...] = OPS,
    cold_gate_s: float = 0.0,
    store_listen: str = "ipv4",
    trace_network: Path | None = None,
    syscalls: bool = True,
) -> dict[str, Any]:
    python = ws.venv("fsguard")
    if python is None:
        raise RuntimeError("cannot make the benchmark venv")
    if cells_wanted is not None:
        modes = tuple(m for m in modes if any(c.split("/", 1)[1] == m for c in cells_wanted))
        ops = tuple(o for o in ops if any(c.split("/", 1)[0] == o for c in cells_wanted))
    serialize = common.has_fsguard_locks(python)
    pools: dict[str, dict[str, str]] = {}
    if "none" in modes or "rank0+barrier" in modes:
        pools["none"] = {"FSGUARD": "0"}
    if "fsguard" in modes:
        pools["fsguard"] = {"FSGUARD": "1"}
    pythons = {name: python for name in MODES}
    server = _store_server(store_listen) if serialize and "serialize-store" in modes else None
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
    available: list[float] = []
    problems: list[str] = []
    store: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fsguard-scale-") as tmp:
        base = Path(tmp)

        def start(pool_name: str, size: int, tag: str, stderr: IO[str], defer: bool = False) -> tuple[Pool, float]:
            log_dir = base / "logs" / f"{pool_name}-{size}-{tag}"
            env = {**pools[pool_name], "FSGUARD_LOG": str(log_dir)}
            started = time.perf_counter()
            pool = Pool(pythons[pool_name], size, env, stderr, base, ranks, defer=defer and ranks == "fork")
            spawn_s = time.perf_counter() - started
            available.append(mem_available_mib())
            expected = pool_name != "none" and not (defer and ranks == "fork")
            if any(a != expected for a in pool.active):
                problems.append(f"{pool_name} x{size}: fsguard active in {sum(pool.active)}/{size} ranks")
            return pool, spawn_s

        for size in sizes:
            for pool_name in pools:
                pool_modes = [m for m in _modes_of(pool_name, modes) if any(_wanted(o, m, cells_wanted) for o in ops)]
                if not pool_modes:
                    continue
                for op in ops:
                    for mode in pool_modes:
                        if _wanted(op, mode, cells_wanted):
                            cells.setdefault(f"{op}/{size}/{mode}", _new_cell(op, size, mode))
                with open(base / f"stderr-{pool_name}-{size}.txt", "a", encoding="utf-8") as stderr:
                    # cold: a pool of its own per trial, whose first call of all is the trial's
                    cold_modes = [m for m in pool_modes if m != "rank0+barrier"] if pool_name != "none" else []
                    for op in ops:
                        for mode in cold_modes:
                            if op not in cold_ops or not _wanted(op, mode, cells_wanted):
                                continue
                            cell = cells[f"{op}/{size}/{mode}"]
                            for t in range(cold_trials + (syscalls and cold_trials > 0)):
                                pool, spawn_s = start(pool_name, size, f"cold-{op}-{t}", stderr, defer=True)
                                try:
                                    cell["cold_spawn_s"].append(spawn_s)
                                    trial = _setup(op, base / mode / str(size) / f"cold-{op}" / str(t), size)
                                    if t == cold_trials:  # the counting pool: traced, not timed
                                        answers, counts = count_syscalls(
                                            pool, trial, base / f"strace-cold-{t}.txt", cold_gate_s
                                        )
                                        cell["cold_syscalls_per_rank"] = (
                                            None if counts is None else {k: v / size for k, v in counts.items()}
                                        )
                                    else:
                                        tracer = _trace_network(pool, trace_network, f"{mode}-{size}-{op}-{t}")
                                        try:
                                            answers = pool.trial(trial, cold_gate_s)
                                        finally:
                                            if tracer is not None:
                                                tracer.send_signal(signal.SIGINT)
                                                tracer.wait(timeout=60)
                                    if any(not a["active"] for a in answers):
                                        problems.append(f"{mode} x{size} cold: fsguard inactive in a rank")
                                    _tally(cell, trial, answers, "cold_")
                                    if t < cold_trials:
                                        _timed(cell, trial, answers, "cold_")
                                        cell["cold_phases"].append(_phases(trial, answers))
                                finally:
                                    pool.close()
                                if progress:
                                    print(
                                        f"  scale: {size:>4} ranks, {op} {mode} cold trial {t}: wall "
                                        f"{(max(a['end'] for a in answers) - trial['start']) * 1000:.0f} ms "
                                        f"(start-up {spawn_s:.1f} s, available memory {available[-1]:.0f} MiB, "
                                        f"load {os.getloadavg()[0]:.1f})",
                                        file=sys.stderr,
                                        flush=True,
                                    )
                    # warm: one pool, one untimed race first, then the timed trials
                    pool, spawn_s = start(pool_name, size, "warm", stderr)
                    try:
                        first = _setup("makedirs", base / pool_name / str(size) / "first")
                        answers = pool.trial(first)
                        first_race_ms = (max(a["end"] for a in answers) - first["start"]) * 1000
                        for op in ops:
                            for mode in pool_modes:
                                if not _wanted(op, mode, cells_wanted):
                                    continue
                                cell = cells[f"{op}/{size}/{mode}"]
                                cell["spawn_s"] = spawn_s
                                cell["first_race_wall_ms"] = first_race_ms
                                for t in range(trials + syscalls):
                                    trial = _setup(op, base / mode / str(size) / op / str(t), size)
                                    if mode == "rank0+barrier":
                                        trial["rank0_marker"] = str(base / mode / str(size) / op / f"{t}.done")
                                    if t == trials:  # the counting trial: traced, not timed
                                        answers, counts = count_syscalls(pool, trial, base / f"strace-{t}.txt")
                                        cell["syscalls_per_rank"] = (
                                            None if counts is None else {k: v / size for k, v in counts.items()}
                                        )
                                    else:
                                        answers = pool.trial(trial)
                                    _tally(cell, trial, answers)
                                    if t < trials:
                                        _timed(cell, trial, answers)
                        memory[f"{pool_name}/{size}"] = pool.memory_kib()
                        if pool_name == "serialize-store" and size == min(sizes):
                            store = store_requests(pool)
                    finally:
                        pool.close()
                records: dict[str, int] = {}
                for log_dir in (base / "logs").glob(f"{pool_name}-{size}-*"):
                    for k, v in _count_records(log_dir).items():
                        records[k] = records.get(k, 0) + v
                for cell in cells.values():
                    if cell["size"] == size and cell["mode"] in pool_modes:
                        cell["records_in_pools"] = records
                if progress:
                    mem = memory.get(f"{pool_name}/{size}", {})
                    print(
                        f"  scale: {size:>4} ranks, {pool_name:<15} done (start-up {spawn_s:.1f} s, "
                        f"rank USS {mem.get('uss', float('nan')) / 1024:.1f} MiB, available memory "
                        f"{min(available):.0f} MiB, load {os.getloadavg()[0]:.1f}, records {records or '-'})",
                        file=sys.stderr,
                        flush=True,
                    )
    for cell in cells.values():
        for prefix in ("", "cold_"):
            lat = cell.pop(prefix + "latency_s")
            walls = cell.pop(prefix + "wall_s")
            cpu = cell.pop(prefix + "cpu_s")
            late = cell.pop(prefix + "late_s")
            ops_done = cell.pop(prefix + "store_ops")
            if prefix and not cell["cold_calls"]:
                continue
            timed_calls = len(lat)
            nan = float("nan")
            cell[prefix + "wall_ms"] = {
                "p50": common.percentile(walls, 50) * 1000 if walls else nan,
                "max": max(walls) * 1000 if walls else nan,
                "all": [w * 1000 for w in walls],
            }
            calls = cell[prefix + "calls"]
            cell[prefix + "success_rate"] = cell[prefix + "ok"] / calls if calls else nan
            cell[prefix + "latency_ms"] = {
                f"p{q}": common.percentile(lat, q) * 1000 if lat else nan for q in (50, 90, 99)
            }
            cell[prefix + "latency_ms"]["max"] = max(lat) * 1000 if lat else nan
            cell[prefix + "cpu_ms_per_call"] = {
                "p50": common.percentile(cpu, 50) * 1000 if cpu else nan,
                "mean": statistics.fmean(cpu) * 1000 if cpu else nan,
            }
            cell[prefix + "last_wake_ms"] = common.median(late) * 1000 if late else nan
            per_rank = {k: v / timed_calls for k, v in ops_done.items()} if timed_calls else {}
            per_rank["total"] = sum(ops_done.values()) / timed_calls if timed_calls else 0.0
            cell[prefix + "store_ops_per_rank"] = per_rank
        cell.setdefault("syscalls_per_rank", None)
        cell.setdefault("cold_syscalls_per_rank", None)
    return {
        "sizes": list(sizes),
        "trials": trials,
        "cold_trials": cold_trials,
        "cold_gate_s": cold_gate_s,
        "store_listen": store_listen,
        "ranks": ranks,
        "serialize_available": serialize,
        "problems": problems,
        "memory_kib_per_rank": memory,
        "mem_available_min_mib": min(available) if available else None,
        "store_requests_us": store,
        "cells": cells,
    }


def _store_server(listen: str = "ipv4") -> Any:
    """A TCPStore server for the serialize-store arm (None where torch is not importable here); ``listen``: see
    ``RES_OPTIONS``."""
    try:
        from datetime import timedelta

        import torch.distributed as dist
    except ImportError:
        return None
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009
    options: dict[str, Any] = {"is_master": True, "wait_for_workers": False, "timeout": timedelta(seconds=60)}
    if listen == "dual":
        os.environ["RES_OPTIONS"] = RES_OPTIONS  # read by this process's resolver at its first lookup
        return tcp_store("127.0.0.1", 0, **options)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(socket.SOMAXCONN)
    port = listener.getsockname()[1]
    return tcp_store("127.0.0.1", port, master_listen_fd=listener.detach(), **options)


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


def _syscalls(cell: dict[str, Any], prefix: str = "") -> str:
    counts = cell.get(prefix + "syscalls_per_rank")
    if counts is None:
        return "n/a"
    key = sum(v for k, v in counts.items() if k in CHANGES)
    return f"{sum(counts.values()):.1f}/{key:.2f}"


def _store(cell: dict[str, Any], prefix: str = "") -> str:
    return f"{cell[prefix + 'store_ops_per_rank'].get('total', 0.0):.1f}"


def render(result: dict[str, Any]) -> str:
    cells = result["cells"]
    columns = [m for m in MODES if any(c["mode"] == m for c in cells.values())]
    tables: dict[str, list[list[str]]] = {"ok": [], "lat": [], "wall": [], "sys": [], "store": []}
    cold: list[list[str]] = []
    for op in OPS:
        for size in result["sizes"]:
            if not any(c["op"] == op and c["size"] == size for c in cells.values()):
                continue
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
                if cell["cold_calls"]:
                    cold.append(
                        [
                            f"{op} x{size}",
                            mode,
                            f"{cell['cold_success_rate'] * 100:.0f}% {cell['cold_jobs_ok']}/{cell['cold_jobs']}",
                            f"{cell['cold_wall_ms']['p50']:.1f}/{cell['cold_wall_ms']['max']:.1f}",
                            f"{cell['wall_ms']['p50']:.1f}/{cell['wall_ms']['max']:.1f}",
                            f"{_store(cell, 'cold_')} / {_store(cell)}",
                            f"{_syscalls(cell, 'cold_')} / {_syscalls(cell)}",
                            f"{statistics.fmean(cell['cold_spawn_s']):.1f}",
                        ]
                    )
            for name, row in rows.items():
                tables[name].append(row)
    headers = ["op x ranks", *columns]
    lines = [
        f"scale: all ranks make the same call at once (convoy: each its own call onto one name); {result['trials']}"
        f" timed trials per cell; ranks made by {result['ranks']}",
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
    ]
    if cold:
        lines += [
            f"cold (a fresh pool per trial, fsguard started in every rank at one moment, the trial's call"
            f" {result['cold_gate_s']:g} s later, its first; {result['cold_trials']} trial(s); store server listening"
            f" {result.get('store_listen', 'dual')}) beside warm: wall ms p50/max; store requests and syscalls per rank"
            " (all/changing), cold / warm",
            common.table(
                ["op x ranks", "mode", "cold success", "cold wall", "warm wall", "store req", "syscalls", "start-up s"],
                cold,
            ),
            "cold trials' phases, s from fsguard's start in every rank, p50/max over ranks (first trial): started,"
            " each store client's connection, last client made, call done",
        ]
        for cell in cells.values():
            phases = cell.get("cold_phases") or [{}]
            if phases[0]:
                lines.append(
                    f"  {cell['op']} x{cell['size']} {cell['mode']}: "
                    + "; ".join(f"{name} {v['p50']:.2f}/{v['max']:.2f}" for name, v in phases[0].items())
                )
        lines.append("")
    lines += [
        "first race of each warm pool (makedirs; untimed above: first records, first decisions, and for the store "
        "arm the first serialized call of every rank), wall ms: "
        + "; ".join(
            f"{c['mode']}/{c['size']} {c['first_race_wall_ms']:.0f}"
            for c in cells.values()
            if c["op"] == "makedirs" and "first_race_wall_ms" in c
        ),
        "memory per rank, MiB, USS/PSS: "
        + "; ".join(
            f"{k} {v['uss'] / 1024:.1f}/{v['pss'] / 1024:.1f}" for k, v in result["memory_kib_per_rank"].items()
        )
        + f"; machine's available memory at its lowest: {result['mem_available_min_mib'] or float('nan'):.0f} MiB",
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


def least_squares(xs: list[float], ys: list[float], degree: int) -> list[float]:
    """Coefficients ``c0 + c1·x (+ c2·x²)`` minimising the squared residuals (normal equations, solved by Gauss)."""
    k = degree + 1
    rows = [
        [sum(x ** (i + j) for x in xs) for j in range(k)] + [sum(y * x**i for x, y in zip(xs, ys, strict=True))]
        for i in range(k)
    ]
    for i in range(k):
        pivot = max(range(i, k), key=lambda r: abs(rows[r][i]))
        rows[i], rows[pivot] = rows[pivot], rows[i]
        for r in range(k):
            if r != i and rows[i][i]:
                factor = rows[r][i] / rows[i][i]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[i], strict=True)]
    return [rows[i][k] / rows[i][i] if rows[i][i] else 0.0 for i in range(k)]


def fits(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell (op/mode, warm and cold) with three sizes or more: the wall time's least-squares line in N (and, for
    the convoy, a parabola), its residuals, and the store requests per rank by N. A later result's cell replaces
    an earlier one of the same op, mode and size."""
    points: dict[tuple[str, str, str], dict[int, tuple[float, float]]] = {}
    for result in results:
        for cell in result["cells"].values():
            for temp, prefix in (("warm", ""), ("cold", "cold_")):
                wall = cell.get(prefix + "wall_ms", {}).get("p50")
                if wall is None or wall != wall:
                    continue
                store = cell.get(prefix + "store_ops_per_rank", {}).get("total", 0.0)
                points.setdefault((cell["op"], cell["mode"], temp), {})[cell["size"]] = (wall, store)
    out: dict[str, Any] = {}
    for (op, mode, temp), by_size in sorted(points.items()):
        if len(by_size) < 3:
            continue
        sizes = sorted(by_size)
        walls = [by_size[n][0] for n in sizes]
        entry: dict[str, Any] = {"sizes": sizes, "wall_ms": walls, "store_per_rank": [by_size[n][1] for n in sizes]}
        for name, degree in (("line", 1), ("parabola", 2)):
            if degree >= len(sizes) - 1 or (degree == 2 and op != "convoy"):  # a convoy's hand-offs may grow as N²
                continue
            coef = least_squares([float(n) for n in sizes], walls, degree)
            model = [sum(c * n**i for i, c in enumerate(coef)) for n in sizes]
            entry[name] = {
                "coef": coef,
                "residual_ms": [w - m for w, m in zip(walls, model, strict=True)],
                "at_10000_ms": sum(c * 10000.0**i for i, c in enumerate(coef)),
            }
        out[f"{op}/{mode}/{temp}"] = entry
    return out


def render_fits(found: dict[str, Any]) -> str:
    lines = ["fits of the wall time (p50, ms) in N, least squares; residual = measured - model"]
    for key, entry in found.items():
        lines.append(
            f"{key}: N {entry['sizes']}, wall {[round(w, 1) for w in entry['wall_ms']]}, store requests per rank "
            f"{[round(x, 1) for x in entry['store_per_rank']]}"
        )
        for name in ("line", "parabola"):
            if name in entry:
                f = entry[name]
                terms = " + ".join(
                    f"{c:.4g}" + ("" if i == 0 else "·N" if i == 1 else "·N²") for i, c in enumerate(f["coef"])
                )
                lines.append(
                    f"  {name}: {terms}; residuals {[round(r, 1) for r in f['residual_ms']]}; "
                    f"N = 10,000 on this machine: {f['at_10000_ms'] / 1000:.1f} s"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 and 4 ranks, one trial, one cold trial (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--ranks", choices=["fork", "exec"], default="fork", help="fork from one warm zygote (default) or exec each"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--cells", nargs="+", metavar="OP/MODE", help="only these cells (e.g. convoy/serialize-store)")
    parser.add_argument("--cold-trials", type=int, default=0, help="cold trials per cell, each a pool of its own")
    parser.add_argument("--cold-ops", nargs="+", choices=OPS, default=list(OPS), help="cold trials of these only")
    parser.add_argument("--cold-gate-s", type=float, default=0.0, help="cold race this long after the pool is up")
    parser.add_argument(
        "--store-listen", choices=LISTEN, default="ipv4", help="the store server's socket (see RES_OPTIONS)"
    )
    parser.add_argument("--fit", type=Path, nargs="+", metavar="JSON", help="only print the fits of these results")
    parser.add_argument("--trace-network", type=Path, metavar="DIR", help="strace three ranks of each cold pool")
    parser.add_argument("--no-syscalls", action="store_true", help="skip the strace-counted trial of each cell")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.trials, args.cold_trials, args.cold_ops = [2, 4], 1, 1, ["makedirs"]
    for cell in args.cells or ():
        op, _, mode = cell.partition("/")
        if op not in OPS or mode not in MODES:
            parser.error(f"--cells: {cell!r} is not OP/MODE with OP in {OPS} and MODE in {MODES}")
    if args.fit:
        print(render_fits(fits([json.loads(f.read_text(encoding="utf-8"))["scale"] for f in args.fit])))
        return 0
    info = common.machine()
    print(common.machine_line(info), flush=True)
    with common.Workspace() as ws:
        result = run(
            ws,
            sizes=tuple(args.sizes),
            trials=args.trials,
            ranks=args.ranks,
            modes=tuple(args.modes),
            ops=tuple(args.ops),
            cells_wanted=tuple(args.cells) if args.cells else None,
            cold_trials=args.cold_trials,
            cold_ops=tuple(args.cold_ops),
            cold_gate_s=args.cold_gate_s,
            store_listen=args.store_listen,
            trace_network=args.trace_network,
            syscalls=not args.no_syscalls,
        )
    found = fits([result])
    print(render(result) + ("\n\n" + render_fits(found) if found else ""))
    if args.json:
        common.write_json(args.json, {"machine": info, "scale": {**result, "fits": found}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Throughput and memory of ``fsguard report`` and ``fsguard scan`` on a large log with few matches.

``python bench/audit.py [--mb 1024] [--html-mb 100] [--quick] [--gzip] [--json FILE]``

Writes a synthetic training log (progress lines, torch warnings, a rank's traceback of a makedirs race
and an fsguard record every ~64 MiB) into a temporary directory, then runs each command on it in a fresh
interpreter and reports MB/s (wall clock, whole process including start-up) and the peak resident memory
of that process (``wait4`` rusage). The same commands on a log a quarter of the size show that memory
does not grow with the input. Target: >= 100 MB/s on a 2-core development machine.

``report --html`` is measured apart, on what it is for: a records directory (``FSGUARD_LOG``) of a 1,000-rank
job on 125 hosts over three days (``write_records``: one file per rank, nothing but records), ``--html-mb``
MiB of them and a quarter of that: seconds, peak RSS and the page's size. Target: 100 MB in seconds, with
memory that does not grow with the records beyond the duplicate check (one hash per record).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20

TRACEBACK = """\
[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/job/train.py", line 88, in <module>
[rank{r}]:     main()
[rank{r}]:   File "/job/train.py", line 40, in save
[rank{r}]:     os.makedirs(os.path.join(out, f"checkpoint-{{step}}"))
[rank{r}]:   File "<frozen os>", line 225, in makedirs
[rank{r}]: FileExistsError: [Errno 17] File exists: '/ckpt/checkpoint-{step}'
"""
RECORD = (
    "fsguard: absorbed rename rank={r}/64 host=n{h} at /job/train.py:120 in save: source gone, destination "
    'present and changed 0.01 s ago: a peer did the same move :: {{"args": ["/ckpt/tmp-checkpoint-{step}", '
    '"/ckpt/checkpoint-{step}"], "decision": "absorbed", "detail": {{}}, "error": null, "evidence": "a peer '
    'did the same move", "host": "n{h}", "launcher": "torchrun", "local_rank": 0, "op": "rename", "pid": 42, '
    '"rank": {r}, "site": {{"file": "/job/train.py", "function": "save", "line": 120}}, "time": 1796000000.0, '
    '"v": 1, "version": "0.1.0", "waited_s": 0.0, "world_size": 64}}\n'
)


def _filler_block() -> bytes:
    """About 1 MiB of ordinary log lines, none of which either command cares about."""
    lines = []
    i = 0
    size = 0
    while size < MIB:
        if i % 50 == 0:
            line = (
                f"W1202 19:05:{i % 60:02d}.{i:06d} 5189 torch/distributed/run.py:874] Setting OMP_NUM_THREADS "
                f"environment variable for each process to be 1 in default\n"
            )
        else:
            line = (
                f"[rank{i % 8}]: step {i:7d} | loss {1 / (i + 1):.6f} | lr 3.0e-04 | grad_norm {i % 97 / 7:.3f} "
                f"| tokens/s {12000 + i % 513} | mem 23.{i % 10} GiB\n"
            )
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines).encode()


def write_log(path: Path, mb: int, compress: bool) -> int:
    """The log of ``mb`` MiB with a traceback and a record every 64 MiB; returns its size on disk."""
    block = _filler_block()
    opener: Any = gzip.open if compress else open
    with opener(path, "wb") as out:
        written = 0
        n = 0
        while written < mb * MIB:
            out.write(block)
            written += len(block)
            n += 1
            if n % 64 == 0:
                out.write(TRACEBACK.format(r=n % 8, step=n).encode())
                out.write(RECORD.format(r=n % 8, h=n % 4, step=n).encode())
    return path.stat().st_size


_RECORD_LINE = (
    '{{"args": {args}, "decision": "{decision}", "detail": {detail}, "error": {{"errno": "{errno}", "message": '
    '"{errno}", "type": "OSError"}}, "evidence": "{evidence}", "host": "n{host}", "launcher": "torchrun", '
    '"local_rank": {local}, "op": "{op}", "pid": {pid}, "rank": {rank}, "site": {{"file": "/job/train.py", '
    '"function": "{function}", "line": {line}}}, "time": {time:.6f}, "v": 1, "version": "0.1.0", '
    '"waited_s": {waited}, "world_size": {world}}}\n'
)
# (op, decision, function, line, errno, args, evidence): what a long job's ranks race on at each checkpoint
_CHECKPOINT_RACES = (
    ("makedirs", "absorbed", "save", 88, "EEXIST", ["/ckpt/run-{run}/step-{step}"], "directory created by a peer"),
    (
        "rename",
        "absorbed",
        "save",
        120,
        "ENOENT",
        ["/ckpt/run-{run}/tmp-step-{step}", "/ckpt/run-{run}/step-{step}"],
        "source gone, destination present and changed 0.01 s ago: a peer did the same move",
    ),
    (
        "rmtree",
        "absorbed",
        "rotate",
        131,
        "ENOENT",
        ["/ckpt/run-{run}/step-{old}"],
        "tree already removed (its parent changed during this job)",
    ),
    ("replace", "absorbed", "compile", 57, "ENOENT", ["/cache/k-{k}.so.tmp", "/cache/k-{k}.so"], "a peer did it"),
)


def write_records(directory: Path, ranks: int, records: int, per_host: int = 8, days: float = 3.0) -> int:
    """An ``FSGUARD_LOG`` directory of a long job: one JSON-lines file per rank, ``records`` in all.

    Races come in bursts at hourly checkpoints over ``days``; some ranks wait (a lock timed out); after a
    node restart at two thirds of the job, the ranks of one host hit hazards, and three ranks a conflict.
    Returns the bytes written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    start = 1796000000.0
    span = days * 86400
    checkpoints = max(int(span // 3600), 1)
    per_rank = max(records // ranks, 1)
    extra = records - per_rank * ranks
    written = 0
    restart = start + span * 2 / 3
    for rank in range(ranks):
        host = rank // per_host
        lines = []
        count = per_rank + (1 if rank < extra else 0)
        for i in range(count):
            step = i * checkpoints // count
            op, decision, function, line, errno, args, evidence = _CHECKPOINT_RACES[i % len(_CHECKPOINT_RACES)]
            at = start + step * 3600 + (rank % 97) * 0.013 + (i % 7) * 0.2
            waited = 0.0
            detail = "{}"
            if (rank * 31 + i) % 997 == 0:
                decision, waited, evidence = "waited", round(1 + (rank % 29), 2), "lock held by a peer: waited"
            if host == ranks // per_host // 2 and i == count // 2:  # the restarted node: data lost
                op, decision, function, line = "rmtree", "hazard", "cleanup", 140
                at = restart + rank % per_host
                args = ["/ckpt/run-{run}/tmp-step-{step}"]
                detail = json.dumps(
                    {
                        "renamed_to": f"/ckpt/run-0/step-{step}",
                        "removed": ["shard-0.pt", "shard-1.pt"],
                        "removed_count": 2,
                    }
                )
                evidence = f"tree moved to /ckpt/run-0/step-{step} by a peer while this process was removing it"
            elif rank in (5, 6, 7) and i == count - 1:
                op, decision, function, line = "rename", "conflict", "publish", 201
                args = ["/out/tmp-rank{rank}", "/out/final"]
                evidence = "destination is a non-empty directory: two different results for one path"
            values = {"run": 0, "step": step, "old": max(step - 2, 0), "k": i % 13, "rank": rank}
            lines.append(
                _RECORD_LINE.format(
                    args=json.dumps([a.format(**values) for a in args]),
                    decision=decision,
                    detail=detail,
                    errno=errno,
                    evidence=evidence,
                    host=host,
                    local=rank % per_host,
                    op=op,
                    pid=10000 + rank,
                    rank=rank,
                    function=function,
                    line=line,
                    time=at,
                    waited=waited,
                    world=ranks,
                )
            )
        text = "".join(lines)
        (directory / f"fsguard-n{host}-rank{rank}-{10000 + rank}.jsonl").write_text(text)
        written += len(text)
    return written


def measure(command: str, path: Path, *extra: str) -> dict[str, float]:
    """Run ``python -m fsguard <command> path`` once; wall seconds and peak RSS of that process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsguard", command, "--json", *extra, str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    found = json.loads(output)
    count = sum(g["count"] for g in found.get("groups", found.get("findings", [])))
    return {
        "seconds": seconds,
        "cpu_s": usage.ru_utime + usage.ru_stime,  # what the load of a shared machine does not inflate
        "max_rss_mib": usage.ru_maxrss / 1024,
        "exit": proc.returncode,
        "found": count,
    }


RECORD_BYTES = 473  # the mean size of a record of ``write_records``


def run_html(mb: int, workdir: Path) -> dict[str, Any]:
    """``report --html`` on a records directory of a 1,000-rank job, ``mb`` and a quarter of it."""
    runs: dict[str, Any] = {}
    for size in (max(mb // 4, 1), mb):
        records = size * MIB // RECORD_BYTES
        directory = workdir / f"records-{size}"
        on_disk = write_records(directory, ranks=1000, records=records)
        page = workdir / f"report-{size}.html"
        r = measure("report", directory, "--html", str(page))
        r["mb_per_s"] = on_disk / 1e6 / r["seconds"]
        r["bytes_on_disk"] = on_disk
        r["records"] = records
        r["page_mb"] = page.stat().st_size / 1e6
        runs[f"html/{size}"] = r
        if size == mb:  # the same records as one file (a job's merged log): one block holds thousands of them
            merged = workdir / "records.jsonl"
            with open(merged, "wb") as out:
                for part in sorted(directory.iterdir()):
                    out.write(part.read_bytes())
            r = measure("report", merged, "--html", str(page))
            r.update(mb_per_s=on_disk / 1e6 / r["seconds"], bytes_on_disk=on_disk, records=records)
            r["page_mb"] = page.stat().st_size / 1e6
            runs[f"html-1file/{size}"] = r
            merged.unlink()
        shutil.rmtree(directory)
        page.unlink()
    return runs


def run(mb: int, compress: bool, workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "mb": mb,
        "gzip": compress,
        "runs": {},
    }
    for size in (max(mb // 4, 1), mb):
        path = workdir / (f"job-{size}.log" + (".gz" if compress else ""))
        on_disk = write_log(path, size, compress)
        for command in ("report", "scan"):
            r = measure(command, path)
            r["mb_per_s"] = size * MIB / 1e6 / r["seconds"]  # of uncompressed log, decimal MB
            r["bytes_on_disk"] = on_disk
            results["runs"][f"{command}/{size}"] = r
        path.unlink()
    return results


def render(results: dict[str, Any]) -> str:
    lines = [
        (
            f"machine: {results['cores']} cores, Python {results['python']}; log "
            f"{'gzip-compressed' if results['gzip'] else 'plain'}"
        ),
        f"{'command/MiB':<16}{'MB/s':>9}{'seconds':>10}{'peak RSS':>12}{'found':>7}",
    ]
    for name, r in results["runs"].items():
        lines.append(f"{name:<16}{r['mb_per_s']:>9.0f}{r['seconds']:>10.2f}{r['max_rss_mib']:>9.1f} MiB{r['found']:>7}")
    html = results.get("html", {})
    if html:
        lines.append("report --html on the records of a 1,000-rank job (125 hosts), records directory:")
        lines.append(
            f"{'html/MiB':<16}{'MB/s':>9}{'seconds':>10}{'CPU s':>8}{'peak RSS':>12}{'records':>9}{'page MB':>9}"
        )
        for name, r in html.items():
            lines.append(
                f"{name:<16}{r['mb_per_s']:>9.0f}{r['seconds']:>10.2f}{r['cpu_s']:>8.2f}{r['max_rss_mib']:>9.1f} MiB"
                f"{r['records']:>9}{r['page_mb']:>9.1f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the large log in MiB (default 1024)")
    parser.add_argument("--quick", action="store_true", help="a 64 MiB log: checks that everything runs")
    parser.add_argument("--gzip", action="store_true", help="gzip-compressed log (decompression dominates)")
    parser.add_argument(
        "--html-mb", type=int, default=100, help="records for report --html in MiB (default 100; 0: skip)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    mb = 64 if args.quick else args.mb
    html_mb = min(args.html_mb, 4) if args.quick else args.html_mb
    workdir = Path(tempfile.mkdtemp(prefix="fsguard-bench-audit-"))
    try:
        results = run(mb, args.gzip, workdir)
        if html_mb > 0:
            results["html"] = run_html(html_mb, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps({"audit": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

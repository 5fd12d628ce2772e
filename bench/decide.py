"""What a decision costs by filesystem (issue 23): by number of entries beside the path, and for a genuine error.

Each filesystem is a directory on it: ``local`` (a temporary directory on this machine's disk), ``tmpfs``
(``/dev/shm``), ``bindfs`` (a FUSE view of a local directory, caches 1 s), ``juicefs`` (a volume with SQLite
metadata and a local-directory bucket, mounted by its client: caches 1 s), ``glusterfs`` (a one-brick
volume of this machine's ``glusterd``, mounted by its client) and ``moosefs`` (a master and a chunkserver of
this machine, mounted by ``mfsmount``). One that cannot run here is reported skipped,
with the reason. In a fresh interpreter that is rank 1 of a two-node torchrun job (``fsguard.install()`` on the
working tree), on that filesystem:

* **decision cost by entries beside**: a makedirs race that fsguard absorbs (a peer's ``mkdir`` of the name
  just before this rank's ``os.makedirs``), timed whole, with 0, 1k, 10k and 100k other entries in the same
  directory (one directory grown between sizes);
* **genuine-error latency**: how long after the call a genuine error is raised (nothing a peer did: nothing
  to absorb): ``os.rename`` of a missing source, ``os.makedirs`` onto a file (``exist_ok`` False and True), at
  0 entries and at the largest size. Before issue 23 each waited ``FSGUARD_SETTLE_S`` (2 s) on any filesystem.

The unguarded call's time is printed beside each figure. Each call runs in a thread of its own with no handler
around it (a lost race there would crash the thread: fsguard absorbs it; a handler would decide instead).
usage: python bench/decide.py [--quick] [--json FILE] [--sizes N ...] [--filesystems NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common as common

FILESYSTEMS = ("local", "tmpfs", "bindfs", "juicefs", "glusterfs", "moosefs")
SIZES = (0, 1000, 10000, 100000)
JOB = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",  # two nodes: the unguarded mkdirs stand for the other node's peers, whose journal is
    "LOCAL_WORLD_SIZE": "2",  # on their node (a single-node job's directory no guarded call here noted is no peer's)
    "TORCHELASTIC_RUN_ID": "bench",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "FSGUARD_STDERR": "0",
}
GENUINE = ("rename-missing-source", "makedirs-onto-file", "makedirs-exist-ok-onto-file")


# --- in the child: one filesystem -------------------------------------------------------------------------------


def _fill(directory: str, have: int, want: int) -> None:
    for i in range(have, want):
        os.close(os.open(os.path.join(directory, f"entry-{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))


def _timed(call: Callable[[], Any]) -> tuple[float, str]:
    took, escaped = _as_a_crash(call)
    return took, "ok" if escaped is None else type(escaped).__name__


def _as_a_crash(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Time ``call()`` in a thread of its own with no handler around it: a lost race there is a would-be crash,
    which fsguard absorbs (``fsguard.oracle``: a handler around the call would decide instead). (seconds,
    the error that escaped or None)."""
    took, escaped = [0.0], []

    def run() -> None:
        started = time.perf_counter()
        try:
            call()
        except BaseException as error:  # seen, and the thread ends: a program-set excepthook would decide
            escaped.append(error)
            raise SystemExit from error  # (the default excepthook ends a thread on SystemExit quietly)
        finally:
            took[0] = time.perf_counter() - started

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return took[0], (escaped[0] if escaped else None)


def child(directory: str, sizes: list[int], iterations: int, genuine_iterations: int) -> dict[str, Any]:
    """Runs in a fresh interpreter (rank 1 of a two-node job): the figures for one directory."""
    import posix

    os.environ.update(JOB)
    sys.path.insert(0, str(common.ROOT))
    import fsguard
    from fsguard import evidence, mounts

    found = mounts.mount_of(directory)
    work = os.path.join(directory, f"decide-{os.getpid()}")
    posix.mkdir(work)
    blocker = os.path.join(directory, f"blocker-{os.getpid()}")
    with open(blocker, "w") as f:
        f.write("x")
    names = iter(range(10**9))
    result: dict[str, Any] = {
        "mount": {"point": found.point, "fstype": found.fstype, "stale": found.stale, "cache_s": found.cache_s},
        "probe": found.probe(),
        "decision": {},
        "genuine": {},
    }

    def genuine(op: str) -> Callable[[], Any]:
        n = next(names)
        if op == "rename-missing-source":
            src, dst = os.path.join(work, f"missing-{n}"), os.path.join(work, f"dst-{n}")
            return lambda: os.rename(src, dst)
        if op == "makedirs-onto-file":
            return lambda: os.makedirs(blocker)
        return lambda: os.makedirs(blocker, exist_ok=True)

    have = 0
    for size in sorted(sizes):
        started = time.perf_counter()
        _fill(work, have, size)
        have = size
        fill_s = time.perf_counter() - started
        times, outcomes = [], []
        fsguard.install()
        for _ in range(iterations + 1):
            path = os.path.join(work, f"race-{next(names)}")
            posix.mkdir(path)  # the peer's mkdir (posix's: never guarded)
            evidence.MEMORY.clear()
            took, outcome = _timed(lambda path=path: os.makedirs(path))  # type: ignore[misc]
            posix.rmdir(path)
            times.append(took)
            outcomes.append(outcome)
        fsguard.uninstall()
        path = os.path.join(work, f"race-{next(names)}")
        posix.mkdir(path)
        raw, _ = _timed(lambda path=path: os.makedirs(path))  # type: ignore[misc]
        posix.rmdir(path)
        rest = times[1:]
        result["decision"][str(size)] = {
            "median_ms": common.median(rest) * 1000,
            "max_ms": max(rest) * 1000,
            "absorbed": outcomes.count("ok"),
            "raised": len(outcomes) - outcomes.count("ok"),
            "unguarded_ms": raw * 1000,
            "fill_s": round(fill_s, 2),
        }
        if size in (min(sizes), max(sizes)):
            cells: dict[str, Any] = {}
            for op in GENUINE:
                fsguard.install()
                runs = [_timed(genuine(op)) for _ in range(genuine_iterations)]
                fsguard.uninstall()
                raw, raw_outcome = _timed(genuine(op))
                cells[op] = {
                    "median_ms": common.median([t for t, _ in runs]) * 1000,
                    "max_ms": max(t for t, _ in runs) * 1000,
                    "raised": sorted({o for _, o in runs}),
                    "unguarded_ms": raw * 1000,
                    "unguarded_raised": raw_outcome,
                }
            result["genuine"][str(size)] = cells
    return result


# --- in the parent: filesystems ---------------------------------------------------------------------------------


@contextlib.contextmanager
def filesystem(name: str, scratch: Path) -> Iterator[str]:
    """A directory on filesystem ``name``; raises RuntimeError (the reason to skip) where it cannot run."""
    from tests.cluster import backends

    if name == "local":
        yield tempfile.mkdtemp(prefix="local-", dir=scratch)
        return
    if name == "tmpfs":
        if not os.path.isdir("/dev/shm"):
            raise RuntimeError("no /dev/shm")
        with tempfile.TemporaryDirectory(prefix="fsguard-decide-", dir="/dev/shm") as path:
            yield path
        return
    reason = backends.unavailable(name)
    if reason is not None:
        raise RuntimeError(reason)
    point = scratch / f"{name}-mnt"
    if name == "bindfs":
        backing = scratch / "bindfs-backing"
        backing.mkdir()
        point.mkdir()
        options = "entry_timeout=1,attr_timeout=1,negative_timeout=1"
        done = subprocess.run(["bindfs", "-o", options, str(backing), str(point)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"bindfs failed: {done.stderr.strip()}")
        try:
            yield str(point)
        finally:
            backends.unmount(point)
        return
    if name == "juicefs":
        with backends.juicefs_volume(scratch / "juicefs") as volume, backends.juicefs_mount(volume, point):
            yield str(point)
        return
    if name == "moosefs":
        with backends.moosefs_volume(scratch / "moosefs") as mvolume, backends.moosefs_mount(mvolume, point):
            yield str(point)
        return
    with backends.gluster_volume(scratch / "gluster") as gvolume, backends.gluster_mount(gvolume, point):
        yield str(point)


def run(
    *,
    sizes: tuple[int, ...] = SIZES,
    filesystems: tuple[str, ...] = FILESYSTEMS,
    iterations: int = 15,
    genuine_iterations: int = 5,
) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": list(sizes), "iterations": iterations, "filesystems": {}}
    scratch = Path(tempfile.mkdtemp(prefix="fsguard-decide-"))
    try:
        for name in filesystems:
            try:
                with filesystem(name, scratch) as directory:
                    args = [sys.executable, str(Path(__file__).resolve()), "--child", directory]
                    args += ["--iterations", str(iterations), "--genuine-iterations", str(genuine_iterations)]
                    args += ["--sizes", *map(str, sizes)]
                    done = subprocess.run(
                        args, env=common.clean_env(), capture_output=True, text=True, timeout=1800, cwd=common.ROOT
                    )
                    if done.returncode != 0:
                        raise RuntimeError(f"child failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
                    out["filesystems"][name] = json.loads(done.stdout.strip().splitlines()[-1])
            except RuntimeError as why:
                out["filesystems"][name] = {"skipped": str(why)}
            print(render_one(name, out["filesystems"][name]), flush=True)
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return out


def render_one(name: str, r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"{name}: skipped ({r['skipped']})"
    mount = r["mount"]
    cache = "" if mount["cache_s"] is None else f", own cache {mount['cache_s']:g} s"
    lines = [f"{name} ({mount['fstype']}{', lookups may be stale' if mount['stale'] else ', coherent'}{cache})"]
    lines.append(f"  probe: {r['probe']}")
    rows = [
        [
            f"{int(size):,}",
            f"{d['median_ms']:.3f} ms",
            f"{d['max_ms']:.2f} ms",
            f"{d['unguarded_ms']:.3f} ms",
            f"{d['absorbed']}/{d['absorbed'] + d['raised']}",
        ]
        for size, d in r["decision"].items()
    ]
    lines.append(
        common.table(["entries beside", "makedirs race decided", "max", "unguarded failure", "absorbed"], rows)
    )
    rows = []
    for size, cells in r["genuine"].items():
        for op, c in cells.items():
            rows.append(
                [
                    op,
                    f"{int(size):,}",
                    f"{c['median_ms']:.2f} ms",
                    f"{c['max_ms']:.2f} ms",
                    f"{c['unguarded_ms']:.3f} ms",
                    ",".join(c["raised"]),
                ]
            )
    lines.append(common.table(["genuine error", "entries beside", "raised after", "max", "unguarded", "raised"], rows))
    return "\n".join(lines)


def render(result: dict[str, Any]) -> str:
    return "\n\n".join(render_one(name, r) for name, r in result["filesystems"].items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--filesystems", nargs="+", choices=FILESYSTEMS, default=list(FILESYSTEMS))
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--genuine-iterations", type=int, default=5)
    parser.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.sizes, args.iterations, args.genuine_iterations)))
        return 0
    if args.quick:
        args.sizes, args.iterations, args.genuine_iterations = [0, 100], 3, 2
        if args.filesystems == list(FILESYSTEMS):
            args.filesystems = ["local", "juicefs"]
    print(common.machine_line(common.machine()), flush=True)
    result = run(
        sizes=tuple(args.sizes),
        filesystems=tuple(args.filesystems),
        iterations=args.iterations,
        genuine_iterations=args.genuine_iterations,
    )
    if args.json:
        common.write_json(args.json, {"decide": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The yield window's cost (issue 12): time added to one ``shutil.rmtree`` by ``FSGUARD_YIELD_S``.

Four arms, each an rmtree of a 300-file tree in a process that looks like rank 1 of a 4-rank torchrun job
(``fsguard.install()`` on the working tree), against the same removal unpatched:

* ``own``: a tree this process made with ``os.makedirs`` (no ``exist_ok``): no window, nothing added;
* ``mkdtemp``: a tree this process made with ``tempfile.mkdtemp``: private by construction, no window;
* ``rotation``: an old generation this process made with ``makedirs(exist_ok=True)``, a later generation of its
  name beside it (``checkpoint-3`` beside ``checkpoint-1003``): a rotation, no window;
* ``shared, renamed``: a tree this process made with ``makedirs(exist_ok=True)`` (a name peers make too: the
  Trainer's ``tmp-checkpoint-N``; rank 0's note that it found it there is written as its makedirs writes it),
  renamed away by a peer 0-20 ms after the rmtree starts (``yielded``);
* ``shared, nobody renames``: the same tree, not moved: the whole window, then the removal (``hazard``);
* ``old``: a tree older than the job (made before it, ``FSGUARD_FRESH_S=0``): no window;
* ``peer, renamed``: a peer's fresh tree that a peer renames away 0-20 ms after the rmtree starts (uniform):
  the rmtree ends when it sees the tree gone (decision ``yielded``), so the added time is the peer's delay
  plus one poll;
* ``peer, nobody renames``: a peer's fresh tree that stays: the whole window, then the removal (``hazard``);
* ``peer, window off``: the same with ``FSGUARD_YIELD_S=0``: what the checked walk itself adds (one ``lstat``
  of the top per entry, one listing of its parent per directory), the part of every arm that is not waiting;
* ``scratch`` (issue 47): a per-step scratch directory, ``os.makedirs(f"{work}/eval_tmp", exist_ok=True)``, 8
  small files, ``rmtree``, at the same path every round: the first round may still wait (a name peers could
  share), the others are this process's own scratch, removed at once;
* ``pool`` (issue 47): directories made and written by this process's ``multiprocessing.Pool`` (forked children,
  ``makedirs(exist_ok=True)``), removed by the process: their job tag names this rank, no window;
* ``fresh-scratch`` (issue 47): the scratch idiom at a new path every round (``eval_tmp-<k>``): every removal is
  the first at its path (this process made it with ``makedirs(exist_ok=True)``, no peer noted it): no window;
* ``pool-filled`` (issue 47): 16-style directories this process made with ``makedirs(exist_ok=True)`` and its
  ``multiprocessing.Pool`` filled, removed by the process: no window;
* ``tempdir``: a ``tempfile.TemporaryDirectory`` with 8 small files, its ``cleanup()`` timed (an ``rmtree`` with
  the clean-up's own error handler): the short course, as for ``rmtree(path)``.

The arms of issue 47 (``ISSUE_47_ARMS``) are small trees (8 files), run for ``SMALL_TREE_ROUNDS`` times the rounds;
their CPU ratio is the one ``tests/test_bench.py`` checks in the committed results file (at most
``NO_TAX_CPU_RATIO``), and their rounds count the windows waited.

Prints the median and worst added milliseconds per arm, and the ratios to the unpatched removal: of the medians,
of the totals (every round's time, the first round's window included), and of the median CPU time (the process's
user and system time: steadier than wall time on a loaded machine, but blind to waiting) (``--json FILE`` writes
them). For the issue-47 arms and ``tempdir`` also ``cpu_in_process_ratio``: the patched process removes a twin tree,
built the same way, with fsguard's wrappers taken off just before each patched removal (``unpatched_cpu``), so both
sides of that ratio see the same load and the same process (the separate processes' ratio of the same code moved
from 1.14 to 1.57 between runs an hour apart).
usage: python bench/yield_window.py [--quick] [--json FILE] [--arms ARM,ARM...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = 300
ISSUE_47_ARMS = ("scratch", "fresh-scratch", "pool", "pool-filled")
SMALL_TREE_ARMS = (*ISSUE_47_ARMS, "tempdir")  # 8 files each, run for SMALL_TREE_ROUNDS times the rounds
NO_TAX_CPU_RATIO = 1.3  # issue 47: an rmtree no peer renames, at most this many times the unpatched CPU time
SMALL_TREE_ROUNDS = 10  # the issue 47 arms run this many times the rounds: a 0.2 ms removal's median needs them
ARMS = (
    *("own", "mkdtemp", "rotation", "old", "peer-window-off", "peer-renamed", "peer-stays"),
    *("shared-renamed", "shared-stays", *SMALL_TREE_ARMS),
)
JOB = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "4",
    "TORCHELASTIC_RUN_ID": "bench",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def make_tree(path: str, made_by_makedirs: bool, exist_ok: bool = False) -> None:
    if made_by_makedirs:
        os.makedirs(path, exist_ok=exist_ok)
    else:
        import posix

        posix.mkdir(path)  # as a peer would: unguarded, so this process's memory has no trace of it
        if os.environ.get("TORCHELASTIC_RUN_ID") == JOB["TORCHELASTIC_RUN_ID"]:  # a rank's (the parent: no job)
            from fsguard import journal
            from fsguard.launcher import job_tag

            tag = job_tag(os.environ)  # noted in this node's journal, as rank 0's guarded mkdir notes it
            where = journal.directory()
            if tag is not None and where is not None:
                with open(os.path.join(where, journal.file_name(tag)), "ab") as note:
                    note.write(b"%.6f@0 %s\0" % (time.time(), os.fsencode(os.path.abspath(path))))
                journal.SLOTS.bump(tag, 0, journal.tokens_path)  # as rank 0's fsguard does after its note
    for i in range(FILES):
        with open(os.path.join(path, f"shard-{i}"), "w") as f:
            f.write("x")


def peer_tried(path: str) -> None:
    """Note ``path`` as rank 0's ``makedirs(exist_ok=True)`` notes a directory it found there (``fsguard.journal``)."""
    from fsguard import journal
    from fsguard.launcher import job_tag

    tag, where = job_tag(os.environ), journal.directory()
    if tag is not None and where is not None:
        with open(os.path.join(where, journal.file_name(tag, journal.TRIED)), "ab") as note:
            note.write(b"%.6f@0 %s\0" % (time.time(), os.fsencode(os.path.abspath(path))))
        journal.SLOTS.bump(tag, 1, journal.tokens_path)  # as rank 0's fsguard does after its note


def scratch_files(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    for i in range(8):
        with open(os.path.join(path, f"pred-{i}.json"), "w") as f:
            f.write("x")


def pool_dirs(base: str, rounds: int, made_here: bool = False) -> list[str]:
    """``rounds`` directories made and written by a forked ``multiprocessing.Pool`` of this process (``made_here``:
    made by this process with ``makedirs(exist_ok=True)`` first, the pool only writes into them)."""
    import multiprocessing

    tops = [os.path.join(base, f"part-{chr(97 + k % 26)}{k // 26}") for k in range(rounds)]  # no generations
    if made_here:
        for top in tops:
            os.makedirs(top, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(scratch_files, tops)
    return tops


def unpatched_cpu(remove: object) -> float:
    """The CPU time of ``remove()`` with fsguard's wrappers taken off (``os``'s and ``shutil.rmtree``), then put
    back: the same removal without fsguard, in this process (only the call is timed)."""
    import shutil

    wrapped = [(module, name) for module in (os, shutil) for name in dir(module)]
    wrapped = [(m, n) for m, n in wrapped if hasattr(getattr(m, n), "__wrapped__") and callable(getattr(m, n))]
    saved = [(m, n, getattr(m, n)) for m, n in wrapped]
    for module, name, function in saved:
        setattr(module, name, function.__wrapped__)
    try:
        cpu = time.process_time()
        remove()  # type: ignore[operator]
        return time.process_time() - cpu
    finally:
        for module, name, function in saved:
            setattr(module, name, function)


def child(arm: str, rounds: int, base: str) -> None:
    """One arm, in this process (patched unless FSGUARD=0): prints the rmtree durations as JSON. Patched, each removal
    of an issue-47 arm is paired with a twin's removal unpatched in this process (``unpatched_cpu``), just before it."""
    import shutil

    guarded = os.environ.get("FSGUARD") != "0"
    if guarded:
        import fsguard

        fsguard.install()
    rename = os.rename.__wrapped__ if hasattr(os.rename, "__wrapped__") else os.rename  # the peer's: unguarded
    twins = guarded and arm in SMALL_TREE_ARMS
    times: list[float] = []
    cpus: list[float] = []  # the process's CPU time (user and system) per rmtree: steadier on a loaded machine
    bare: list[float] = []  # the twin's, unpatched in this process (issue 47 arms, patched)
    made = (
        pool_dirs(base, rounds * (2 if twins else 1), made_here=arm == "pool-filled") if arm.startswith("pool") else []
    )
    for k in range(rounds):
        if twins:  # the same tree, built the same way, removed without fsguard's wrappers
            if arm == "tempdir":
                twin = tempfile.TemporaryDirectory(dir=base)
                scratch_files(twin.name)
                bare.append(unpatched_cpu(twin.cleanup))
            else:
                if arm.startswith("pool"):
                    twin_top = made[rounds + k]
                else:
                    twin_top = os.path.join(base, "twin" if arm == "scratch" else f"twin-{chr(97 + k % 26)}{k // 26}")
                    scratch_files(twin_top)
                bare.append(unpatched_cpu(lambda top=twin_top: shutil.rmtree(top)))  # (rmtree read when called)
        top = os.path.join(base, f"{arm}-{k}")
        if arm in ("scratch", "fresh-scratch"):
            top = os.path.join(base, "eval_tmp" if arm == "scratch" else f"eval_tmp-{chr(97 + k % 26)}{k // 26}")
            scratch_files(top)
        elif arm.startswith("pool"):
            top = made[k]
        elif arm == "own":
            make_tree(top, made_by_makedirs=True)
        elif arm == "mkdtemp":
            top = tempfile.mkdtemp(dir=base)
            make_tree(os.path.join(top, "data"), made_by_makedirs=True)
        elif arm == "rotation":
            top = os.path.join(base, f"checkpoint-{k}")
            make_tree(top, made_by_makedirs=True, exist_ok=True)
            os.makedirs(os.path.join(base, f"checkpoint-{k + 1000}"), exist_ok=True)
        elif arm.startswith("shared"):
            make_tree(top, made_by_makedirs=True, exist_ok=True)
            peer_tried(top)  # rank 0 makes the same name too, and finds it there
        elif arm.startswith("peer"):
            make_tree(top, made_by_makedirs=False)  # as a peer would: this process's memory has no makedirs
        elif arm == "tempdir":
            scratch = tempfile.TemporaryDirectory(dir=base)
            scratch_files(scratch.name)
            started, cpu = time.perf_counter(), time.process_time()
            scratch.cleanup()
            times.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
            continue
        # "old": made by the parent before this process started
        peer = None
        if arm in ("peer-renamed", "shared-renamed"):
            delay = random.uniform(0, 0.02)
            peer = threading.Timer(delay, rename, (top, top + ".committed"))
        started, cpu = time.perf_counter(), time.process_time()
        if peer is not None:
            peer.start()
        shutil.rmtree(top)
        times.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
        if peer is not None:
            peer.join()
    print(json.dumps([times, cpus, bare]))


def windows(log: str) -> int:
    """How many rmtree calls waited in the yield window, by their records in the ``FSGUARD_LOG`` directory ``log``:
    a window nobody used (``detail.not_moved_within_s``) or one a peer's rename ended (``yielded``)."""
    sys.path.insert(0, ROOT)
    from fsguard.records import parse_line

    count = 0
    for name in os.listdir(log) if os.path.isdir(log) else []:
        with open(os.path.join(log, name)) as f:
            for line in f:
                record = parse_line(line)
                if record is not None and record.op == "rmtree":
                    count += "not_moved_within_s" in record.detail or record.decision == "yielded"
    return count


def run_arm(arm: str, rounds: int, guarded: bool) -> tuple[list[float], list[float], int, list[float]]:
    """One arm's rounds in a fresh process: wall seconds per rmtree, CPU seconds per rmtree, windows waited, and the
    CPU seconds of each twin removed unpatched in the same process (patched issue-47 arms; else none)."""
    base = tempfile.mkdtemp(prefix="fsguard-yield-")
    log = os.path.join(base, "log")  # records go there, not into the tree the arm removes
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSGUARD")}
        env.update(JOB, PYTHONPATH=ROOT, FSGUARD="1" if guarded else "0", FSGUARD_STDERR="0", FSGUARD_LOG=log)
        work = os.path.join(base, "work")
        os.mkdir(work)
        if arm == "old":
            for k in range(rounds):
                make_tree(os.path.join(work, f"old-{k}"), made_by_makedirs=False)
            time.sleep(1.5)  # older than the child's start (whole-second /proc start times)
            env["FSGUARD_FRESH_S"] = "0"
        if arm == "peer-window-off":
            arm, env["FSGUARD_YIELD_S"] = "peer-stays", "0"
        # Through a shell that forks: the child's parent (its "launcher", which dates the job) starts now.
        done = subprocess.run(
            ["sh", "-c", '"$0" "$@"; exit $?', sys.executable, __file__, "--child", arm, str(rounds), work],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        wall, cpu, bare = json.loads(done.stdout.strip().splitlines()[-1])
        return wall, cpu, windows(log), bare
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--arms", help="a comma-separated subset of the arms (default: all)")
    parser.add_argument("--chunks", type=int, help="alternating chunks per arm (default: 3; 1 with --quick)")
    args = parser.parse_args()
    rounds = 3 if args.quick else 30
    chunks = args.chunks or (1 if args.quick else 3)
    # Each arm against its own unpatched removal, built the same way (a tree removed at once after it was
    # written is faster to remove than one written seconds earlier), in alternating chunks: on a shared machine
    # the load changes from second to second, and both sides of one ratio must see the same load.
    results, base = {}, {}
    print(
        f"rmtree of a {FILES}-file tree, {rounds} rounds per arm, patched vs unpatched in {chunks} alternating chunks"
    )
    print(
        f"{'arm':<24}{'unpatched ms':>14}{'median added ms':>16}{'worst added ms':>16}{'median ratio':>14}"
        f"{'total ratio':>13}{'cpu ratio':>12}{'paired':>9}{'in-proc':>9}{'windows':>9}"
    )
    for arm in args.arms.split(",") if args.arms else ARMS:
        # the same tree removed unpatched (a rename racing an unpatched rmtree fails: the rename's arm is timed
        # against the tree nobody moves)
        unpatched_arm = {"peer-window-off": "peer-stays", "peer-renamed": "peer-stays"}.get(arm, arm)
        unpatched_arm = unpatched_arm.replace("shared-renamed", "shared-stays")
        off: list[float] = []
        on: list[float] = []
        off_cpu: list[float] = []
        on_cpu: list[float] = []
        waits = 0
        paired: list[float] = []  # each chunk's CPU ratio: both of its sides ran within a second of each other
        per_chunk = rounds // chunks * (SMALL_TREE_ROUNDS if arm in SMALL_TREE_ARMS and not args.quick else 1)
        twin_cpu: list[float] = []  # the patched process's own unpatched removals (issue-47 arms)
        for _ in range(chunks):
            wall, cpu, _, _ = run_arm(unpatched_arm, per_chunk, guarded=False)
            off, off_cpu, baseline_cpu = off + wall, off_cpu + cpu, statistics.median(cpu)
            wall, cpu, waited, bare = run_arm(arm, per_chunk, guarded=True)
            on, on_cpu, waits, twin_cpu = on + wall, on_cpu + cpu, waits + waited, twin_cpu + bare
            paired.append(statistics.median(cpu) / max(baseline_cpu, 1e-9))
        baseline = base[arm] = statistics.median(off)
        results[arm] = {
            "median_added_ms": (statistics.median(on) - baseline) * 1000,
            "worst_added_ms": (max(on) - baseline) * 1000,
            "median_ratio": statistics.median(on) / baseline,
            "total_ratio": sum(on) / sum(off),
            "cpu_median_ratio": statistics.median(on_cpu) / max(statistics.median(off_cpu), 1e-9),
            "cpu_total_ratio": sum(on_cpu) / max(sum(off_cpu), 1e-9),
            "cpu_paired_ratio": statistics.median(paired),
            # issue 47: each patched removal over its twin's removed unpatched just before it, in the same process
            **(
                {"cpu_in_process_ratio": statistics.median(on_cpu) / max(statistics.median(twin_cpu), 1e-9)}
                if twin_cpu
                else {}
            ),
            "windows": waits,
            "calls": len(on),
        }
        print(
            f"{arm:<24}{baseline * 1000:>14.2f}{results[arm]['median_added_ms']:>16.2f}"
            f"{results[arm]['worst_added_ms']:>16.2f}{results[arm]['median_ratio']:>14.2f}"
            f"{results[arm]['total_ratio']:>13.2f}{results[arm]['cpu_median_ratio']:>12.2f}"
            f"{results[arm]['cpu_paired_ratio']:>9.2f}{results[arm].get('cpu_in_process_ratio', float('nan')):>9.2f}"
            f"{waits:>9}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"baseline_ms": {k: v * 1000 for k, v in base.items()}, "rounds": rounds, "arms": results}, f, indent=2
            )


if __name__ == "__main__":
    main()

"""Failure paths (issue 35): ordinary programs whose calls fail, with and without fsguard in one run, and the cost
of deciding a failing makedirs/mkdir by the number of calls remembered before it.

Programs, each run by fresh interpreters of the working tree (``PYTHONPATH``) that call ``fsguard._boot.start()``
as the ``.pth`` does: ranks of a 2-rank job (torchrun's variables) started by one shell, their launcher (which
dates the job). Arms ``off`` (``FSGUARD=0``) and ``fsguard`` (``FSGUARD=1``, every other setting its default)
alternate in chunks, so both sides of a ratio see the same load:

* ``ensure-dir``: 2 ranks share 10,000 items (500 class directories, each rank meets every class), and for each
  item ``try: os.makedirs(d) except OSError as e: if e.errno != errno.EEXIST: raise``, then an atomic write (a
  temporary file, ``os.replace``). Timed: the loop (the slower rank; the ratio's figure) and the directory calls
  alone (summed per rank, the slower rank). With fsguard each failing makedirs is decided (its handler decides:
  ``deferred``), after thousands of remembered calls: the decision asked own memory "made anything below
  this?" by a pass over all of it.
* ``big-parent``: ``shutil.rmtree`` of a 400-directory tree (20 x 20, a file in each) older than the job
  (``FSGUARD_FRESH_S=0``: a previous run's cache) inside a directory of 60,000 entries (a dataset folder). The
  checked walk (the tree must stay at its path while it is removed) read the parent's listing for every
  directory it opened.
* ``tar``: per shard, ``tar -xf`` (a subprocess made the tree: 10 directories of 10 files) into a directory of
  this rank's, then ``shutil.rmtree`` of the shard. Timed: the rmtree.
* ``deep-makedirs``: ``os.makedirs`` of a 400-level chain: the standard makedirs recurses through the guarded
  ``os.makedirs`` once a level (``RecursionError`` at about 334 levels when each level added frames).

Decisions, in one process (rank 1 of a two-node job, ``fsguard.install()``, records off): after 0, 4,096 and 32,768
remembered calls (half ``makedirs`` of new directories, half ``os.replace``), a failing ``makedirs`` and
``mkdir`` of a directory a peer just made (unguarded ``posix.mkdir``): absorbed. Median of the rest after the
first (the first pays for indexing what was remembered since the last decision), and the first apart.

Targets: each program at most 2x without fsguard; the deep makedirs succeeds; the decision within 2x from 0 to
32k remembered calls. Run: ``python bench/failures.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench import _common as common

PROGRAMS = ("ensure-dir", "big-parent", "tar", "deep-makedirs")
ARMS = ("off", "fsguard")
JOB = {
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "bench-failures",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}
FULL = {
    "items": 10_000,
    "classes": 500,
    "entries": 60_000,
    "tree": 20,  # 20 x 20 directories
    "rmtree_rounds": 3,
    "shards": 20,
    "depth": 400,
    "deep_rounds": 5,
    "chunks": 2,
    "remembered": (0, 4096, 32768),
    "decisions": 200,
}
QUICK = {
    "items": 400,
    "classes": 20,
    "entries": 2_000,
    "tree": 4,
    "rmtree_rounds": 1,
    "shards": 2,
    "depth": 400,
    "deep_rounds": 1,
    "chunks": 1,
    "remembered": (0, 4096),
    "decisions": 10,
}


# --- the programs, in a rank ------------------------------------------------------------------------------


def _ensure_dir(root: str, items: int, classes: int) -> dict[str, Any]:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    perf = time.perf_counter
    dirs_s = 0.0
    started = perf()
    for i in range(rank, items, world):
        directory = os.path.join(root, f"class-{(i // world) % classes}")
        t = perf()
        try:
            os.makedirs(directory)
        except OSError as e:
            if e.errno != errno.EEXIST:
                raise
        dirs_s += perf() - t
        temporary = os.path.join(directory, f".item-{i}.tmp")
        with open(temporary, "wb") as f:
            f.write(b"x" * 64)
        os.replace(temporary, os.path.join(directory, f"item-{i}"))
    return {"dirs_s": dirs_s, "loop_s": perf() - started}


def _big_parent(parent: str, trees: list[str]) -> dict[str, Any]:
    times = []
    for top in trees:
        t = time.perf_counter()
        shutil.rmtree(os.path.join(parent, top))
        times.append(time.perf_counter() - t)
    return {"rmtree_s": times}


def _tar(base: str, tarball: str, shards: int) -> dict[str, Any]:
    times, untar = [], []
    for k in range(shards):
        where = os.path.join(base, f"shard-{k}")
        os.makedirs(where)
        t = time.perf_counter()
        subprocess.run(["tar", "-xf", tarball, "-C", where], check=True)
        untar.append(time.perf_counter() - t)
        t = time.perf_counter()
        shutil.rmtree(os.path.join(where, "shard"))
        times.append(time.perf_counter() - t)
    return {"rmtree_s": times, "tar_s": untar}


def _deep_makedirs(base: str, depth: int, rounds: int) -> dict[str, Any]:
    times: list[float] = []
    errors: list[str] = []
    for k in range(rounds):
        t = time.perf_counter()
        try:
            os.makedirs(os.path.join(base, f"chain-{k}", *["d"] * depth))
        except RecursionError as error:
            errors.append(type(error).__name__)
            continue
        times.append(time.perf_counter() - t)
    return {"makedirs_s": times, "errors": errors}


def child(program: str, args: list[str]) -> None:
    """One rank of a program (patched where FSGUARD says, as the ``.pth`` would): prints its figures as JSON."""
    from fsguard import _boot

    _boot.start()
    if program == "ensure-dir":
        result = _ensure_dir(args[0], int(args[1]), int(args[2]))
    elif program == "big-parent":
        result = _big_parent(args[0], args[1:])
    elif program == "tar":
        result = _tar(args[0], args[1], int(args[2]))
    else:
        result = _deep_makedirs(args[0], int(args[1]), int(args[2]))
    result["active"] = hasattr(os.makedirs, "__wrapped__")
    print(json.dumps(result))


def launch(program: str, args: list[str], arm: str, ranks: list[int], env: dict[str, str] | None = None) -> list[Any]:
    """The ranks of one job, started by one shell (their launcher): each rank's JSON and its fsguard lines."""
    with tempfile.TemporaryDirectory(prefix="fsguard-failures-out-") as out:
        base = {k: v for k, v in os.environ.items() if not k.startswith("FSGUARD")}
        base.update(JOB, PYTHONPATH=str(common.ROOT), FSGUARD="1" if arm == "fsguard" else "0", **(env or {}))
        script = " ".join(
            f'RANK={r} LOCAL_RANK={r} "$0" "$@" >{out}/out{r} 2>{out}/err{r} & pid{r}=$!;' for r in ranks
        ) + "".join(f" wait $pid{r} || exit 1;" for r in ranks)
        command = ["sh", "-c", script, sys.executable, str(Path(__file__).resolve()), "--child", program, *args]
        done = subprocess.run(command, env=base, capture_output=True, text=True, timeout=900)
        results = []
        for r in ranks:
            text = Path(out, f"out{r}").read_text()
            err = Path(out, f"err{r}").read_text()
            if done.returncode != 0 or not text.strip():
                raise RuntimeError(f"{program}/{arm} rank {r} failed:\n{text}\n{err}")
            result = json.loads(text.strip().splitlines()[-1])
            if result["active"] != (arm == "fsguard"):
                raise RuntimeError(f"{program}/{arm} rank {r}: fsguard active is {result['active']}")
            result["records"] = sum(1 for line in err.splitlines() if line.startswith("fsguard:"))
            results.append(result)
        return results


# --- set-up, in this process (unguarded) -------------------------------------------------------------------


def _fill(parent: str, entries: int) -> None:
    os.makedirs(parent)
    for i in range(entries):
        os.close(os.open(os.path.join(parent, f"sample-{i:06d}.jpg"), os.O_CREAT | os.O_WRONLY, 0o644))


def _tree(top: str, width: int) -> None:
    for a in range(width):
        for b in range(width):
            os.makedirs(os.path.join(top, f"a{a}", f"b{b}"))
            with open(os.path.join(top, f"a{a}", f"b{b}", "part"), "wb") as f:
                f.write(b"x")


def _tarball(where: str) -> str:
    source = os.path.join(where, "src")
    for d in range(10):
        os.makedirs(os.path.join(source, "shard", f"d{d}"))
        for i in range(10):
            with open(os.path.join(source, "shard", f"d{d}", f"f{i}"), "wb") as f:
                f.write(b"x" * 128)
    tarball = os.path.join(where, "shard.tar")
    with tarfile.open(tarball, "w") as tar:
        tar.add(os.path.join(source, "shard"), arcname="shard")
    return tarball


def run_program(program: str, size: dict[str, Any]) -> dict[str, Any]:
    """Both arms of one program, alternating in chunks (the order flipped every chunk)."""
    samples: dict[str, list[Any]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix=f"fsguard-failures-{program}-") as tmp:
        tarball = _tarball(tmp) if program == "tar" else ""
        parent = os.path.join(tmp, "dataset")
        if program == "big-parent":
            _fill(parent, size["entries"])
        for chunk in range(size["chunks"]):
            for arm in ARMS if chunk % 2 == 0 else ARMS[::-1]:
                work = os.path.join(tmp, f"{arm}-{chunk}")
                os.makedirs(work)
                if program == "ensure-dir":
                    ranks = launch(program, [work, str(size["items"]), str(size["classes"])], arm, [0, 1])
                    samples[arm].append(
                        {
                            "dirs_s": max(r["dirs_s"] for r in ranks),
                            "loop_s": max(r["loop_s"] for r in ranks),
                            "records": sum(r["records"] for r in ranks),
                        }
                    )
                elif program == "big-parent":
                    trees = [f"cache-{arm}-{chunk}-{k}" for k in range(size["rmtree_rounds"])]
                    for top in trees:
                        _tree(os.path.join(parent, top), size["tree"])
                    time.sleep(1.5)  # older than the job: its launcher starts after this (whole-second times)
                    (rank,) = launch(program, [parent, *trees], arm, [1], {"FSGUARD_FRESH_S": "0"})
                    samples[arm].append({"rmtree_s": rank["rmtree_s"], "records": rank["records"]})
                elif program == "tar":
                    (rank,) = launch(program, [work, tarball, str(size["shards"])], arm, [1])
                    samples[arm].append(
                        {"rmtree_s": rank["rmtree_s"], "tar_s": rank["tar_s"], "records": rank["records"]}
                    )
                else:
                    (rank,) = launch(program, [work, str(size["depth"]), str(size["deep_rounds"])], arm, [1])
                    samples[arm].append(
                        {"makedirs_s": rank["makedirs_s"], "errors": rank["errors"], "records": rank["records"]}
                    )
                shutil.rmtree(work, ignore_errors=True)
    return _summarise(program, samples)


def _summarise(program: str, samples: dict[str, list[Any]]) -> dict[str, Any]:
    """Per arm: the median of the figure that the target is about (seconds), records; the ratio."""
    arms: dict[str, Any] = {}
    for arm, runs in samples.items():
        if program == "ensure-dir":
            figure = common.median(r["loop_s"] for r in runs)
            extra = {"dirs_s": common.median(r["dirs_s"] for r in runs)}
        elif program == "deep-makedirs":
            times = [t for r in runs for t in r["makedirs_s"]]
            figure = common.median(times) if times else float("nan")
            extra = {"errors": [e for r in runs for e in r["errors"]]}
        else:
            figure = common.median(t for r in runs for t in r["rmtree_s"])
            extra = {"tar_s": common.median(t for r in runs for t in r["tar_s"])} if program == "tar" else {}
        arms[arm] = {"median_s": figure, "records": sum(r["records"] for r in runs), **extra}
    off, on = arms["off"]["median_s"], arms["fsguard"]["median_s"]
    result = {"arms": arms, "ratio": on / off if off and off == off and on == on else None, "runs": samples}
    if program == "ensure-dir":
        result["dirs_ratio"] = arms["fsguard"]["dirs_s"] / arms["off"]["dirs_s"]
    return result


# --- decisions by remembered calls ------------------------------------------------------------------------


def _peer_made(call: Any, path: str) -> tuple[float, bool]:
    """``call(path)`` timed in a thread of its own, with no handler around it: a would-be crash, which fsguard
    absorbs when a peer made the directory (a ``try``/``except`` here would be a handler that decides, and every
    call would be deferred). (seconds, whether it raised)"""
    import threading

    took: list[float] = []
    escaped: list[BaseException] = []

    def timed() -> None:
        t = time.perf_counter()
        try:
            call(path)
        except BaseException as error:  # seen, and the thread ends: a program-set excepthook would decide
            escaped.append(error)
            raise SystemExit from error  # (the default excepthook ends a thread on SystemExit quietly)
        finally:  # not a handler: the error goes on to the thread's top
            took.append(time.perf_counter() - t)

    thread = threading.Thread(target=timed)
    thread.start()
    thread.join()
    return took[0], bool(escaped)


def _decision_child(remembered: int, decisions: int) -> dict[str, Any]:
    import posix

    # A rank of a two-node job (2 ranks a node): the unguarded mkdirs stand for the other node's peers, whose
    # journal is on their node (in a single-node job a directory no guarded call of this node noted is no peer's).
    os.environ.update(JOB, RANK="1", LOCAL_RANK="1", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", FSGUARD_STDERR="0")
    os.environ.pop("FSGUARD_LOG", None)
    sys.path.insert(0, str(common.ROOT))
    import fsguard

    fsguard.install()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fsguard-failures-decide-") as tmp:
        fill = os.path.join(tmp, "fill")
        os.mkdir(fill)
        scratch = os.path.join(tmp, "scratch")
        open(scratch, "wb").close()
        for i in range(remembered // 2):
            os.makedirs(os.path.join(fill, f"a{i // 256}", f"b{i % 256}"), exist_ok=True)
            os.replace(scratch, scratch)
        for op, call in (("makedirs", os.makedirs), ("mkdir", os.mkdir)):
            times, raised = [], 0
            for k in range(decisions + 1):
                path = os.path.join(tmp, f"{op}-{k}")
                posix.mkdir(path)  # a peer's: unguarded
                took, failed = _peer_made(call, path)
                raised += failed
                times.append(took)
            results[op] = {
                "first_ms": times[0] * 1000,
                "median_ms": common.median(times[1:]) * 1000,
                "p90_ms": common.percentile(times[1:], 90) * 1000,
                "raised": raised,
            }
    return results


def decisions(size: dict[str, Any]) -> dict[str, Any]:
    """Each number of remembered calls in a fresh interpreter."""
    by: dict[str, Any] = {}
    for remembered in size["remembered"]:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--decisions", str(remembered), str(size["decisions"])],
            env=common.clean_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stdout + done.stderr)
        by[str(remembered)] = json.loads(done.stdout.strip().splitlines()[-1])
    first, last = by[str(size["remembered"][0])], by[str(size["remembered"][-1])]
    ratios = {op: last[op]["median_ms"] / first[op]["median_ms"] for op in first}
    return {"by_remembered": by, "ratio_last_to_first": ratios}


# --- run, render ------------------------------------------------------------------------------------------


def run(quick: bool = False, programs: tuple[str, ...] = PROGRAMS) -> dict[str, Any]:
    size = QUICK if quick else FULL
    result: dict[str, Any] = {"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in size.items()}}
    result["programs"] = {program: run_program(program, size) for program in programs}
    result["decisions"] = decisions(size)
    return result


def render(result: dict[str, Any]) -> str:
    rows = []
    for program, r in result["programs"].items():
        off, on = r["arms"]["off"], r["arms"]["fsguard"]
        errors = on.get("errors") or off.get("errors")
        rows.append(
            [
                program,
                common.fmt(off["median_s"] * 1000, " ms"),
                common.fmt(on["median_s"] * 1000, " ms"),
                common.fmt(r["ratio"], "x") if r["ratio"] is not None else "n/a",
                str(on["records"]),
                f"errors off {off.get('errors', [])} / fsguard {on.get('errors', [])}" if errors else "",
            ]
        )
        if "dirs_ratio" in r:
            rows.append(
                [
                    f"{program}: its directory calls",
                    common.fmt(off["dirs_s"] * 1000, " ms"),
                    common.fmt(on["dirs_s"] * 1000, " ms"),
                    common.fmt(r["dirs_ratio"], "x"),
                    "",
                    "",
                ]
            )
    text = common.table(["program (median)", "off", "fsguard", "ratio", "records", ""], rows)
    d = result["decisions"]
    rows = [
        [
            f"{op}, {int(n):,} remembered",
            f"{cells[op]['median_ms']:.3f} ms",
            f"{cells[op]['p90_ms']:.3f} ms",
            f"{cells[op]['first_ms']:.3f} ms",
            str(cells[op]["raised"]),
        ]
        for n, cells in d["by_remembered"].items()
        for op in cells
    ]
    text += "\n\n" + common.table(["decision (absorbed)", "median", "p90", "first", "raised"], rows)
    text += "\n" + ", ".join(f"{op}: {ratio:.2f}x" for op, ratio in d["ratio_last_to_first"].items())
    return text + " (most remembered / none; target <= 2x)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2:])
        return 0
    if argv[:1] == ["--decisions"]:
        print(json.dumps(_decision_child(int(argv[1]), int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--programs", nargs="+", choices=PROGRAMS, default=list(PROGRAMS))
    args = parser.parse_args(argv)
    info = common.machine()
    print(common.machine_line(info), flush=True)
    result = run(args.quick, tuple(args.programs))
    print(render(result))
    if args.json:
        common.write_json(args.json, {"machine": info, "failures": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""No tax (issue 47): an ordinary ``rmtree`` in a launched rank pays no yield window where no peer commits the tree.

A rank of a single-node job (the launcher's variables: peers present, so the window is on) runs ordinary idioms,
without fsguard and with ``FSGUARD=1``: a per-step scratch directory (``os.makedirs(f"{work}/eval_tmp",
exist_ok=True)``, files, ``shutil.rmtree``, 30 steps), 16 directories made and written by a ``multiprocessing.Pool``,
and 16 the rank makes with ``makedirs(exist_ok=True)`` and its Pool fills, each then removed by the rank. All end as
without fsguard; what the mechanism did is read from the records (``FSGUARD_LOG``): a window that elapsed with
nobody renaming the tree leaves a ``hazard`` with ``detail.not_moved_within_s``; a tree removed at once leaves none.
Flipped: where a process of another rank of the job tried to make the same directory (a name the ranks share, as
a Trainer's ``tmp-checkpoint-N``), the window stays, but only once at a path where this process makes the name too
(a cache every rank makes each step: in one rank with a peer process, and under real torchrun). No time is asserted (``bench/yield_window.py`` gives the ratio).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.env import clean_env
from tests.support.ranks import rank_env
from tests.support.records import json_records

PROGRAMS = {
    "scratch": """
        import json, os, shutil, sys
        work = sys.argv[1]
        os.makedirs(work, exist_ok=True)
        for step in range(30):
            scratch = f"{work}/eval_tmp"
            os.makedirs(scratch, exist_ok=True)
            for i in range(8):
                with open(os.path.join(scratch, f"pred-{i}.json"), "w") as f:
                    f.write(str(step))
            shutil.rmtree(scratch)
        print(json.dumps(sorted(os.listdir(work))))
    """,
    "pool": """
        import json, multiprocessing, os, shutil, sys
        work = sys.argv[1]

        def part(name):
            where = os.path.join(work, name)
            os.makedirs(where, exist_ok=True)
            for i in range(4):
                with open(os.path.join(where, f"rows-{i}.bin"), "wb") as f:
                    f.write(b"x" * 512)
            return name

        if __name__ == "__main__":
            os.makedirs(work, exist_ok=True)
            names = [f"{letter}-part" for letter in "abcdefghijklmnop"]
            with multiprocessing.get_context("fork").Pool(4) as pool:
                made = pool.map(part, names)
            for name in made:
                shutil.rmtree(os.path.join(work, name))
            print(json.dumps(sorted(os.listdir(work))))
    """,
    "pool-filled": """
        import json, multiprocessing, os, shutil, sys
        work = sys.argv[1]

        def fill(where):
            for i in range(4):
                with open(os.path.join(where, f"rows-{i}.bin"), "wb") as f:
                    f.write(b"x" * 512)
            return where

        if __name__ == "__main__":
            parts = [os.path.join(work, f"{letter}-part") for letter in "abcdefghijklmnop"]
            for where in parts:
                os.makedirs(where, exist_ok=True)
            with multiprocessing.get_context("fork").Pool(4) as pool:
                pool.map(fill, parts)
            for where in parts:
                shutil.rmtree(where)
            print(json.dumps(sorted(os.listdir(work))))
    """,
    "own-functions": """
        import json, os, shutil, subprocess, sys
        work = sys.argv[1]
        real = {name: getattr(os, name) for name in ("unlink", "rmdir")}
        shown = []

        def scratch(step):
            where = os.path.join(work, "eval_tmp")
            os.makedirs(os.path.join(where, "sub"), exist_ok=True)
            for name in ("a", "b", os.path.join("sub", "c")):
                with open(os.path.join(where, name), "w") as f:
                    f.write(str(step))
            return where

        def failing(path, *args, **kwargs):  # the program's own os.unlink (as CPython's test_shutil swaps one)
            shown.append(["unlink", os.path.relpath(path, work) if os.path.isabs(path) else os.fsdecode(path)])
            if os.path.basename(os.fsdecode(path)) == "b":
                raise PermissionError(13, "Permission denied (program)", path)
            return real["unlink"](path, *args, **kwargs)

        def onerror(func, path, exc_info):
            shown.append(["onerror", func is os.unlink, func is real["unlink"], os.path.relpath(path, work),
                          exc_info[0].__name__])

        def wrappers_in(where, **kwargs):  # fsguard's guarded wrappers its rmtree ran, and its full courses
            count = [0, 0]

            def hook(frame, event, arg):
                code = frame.f_code
                if event == "call" and code.co_name == "wrapper" and code.co_filename.endswith("patching.py"):
                    count[0] += 1
                if event == "call" and code.co_name == "run" and code.co_filename.endswith("rmwalk/__init__.py"):
                    count[1] += 1
            sys.setprofile(hook)
            try:
                shutil.rmtree(where, **kwargs)
            finally:
                sys.setprofile(None)
            return count

        counts = [wrappers_in(scratch(0))]  # the plain walk, os as it is
        os.unlink = failing
        counts.append(wrappers_in(scratch(1), onerror=onerror))  # the program's own unlink
        os.unlink = real["unlink"]
        shutil.rmtree(os.path.join(work, "eval_tmp"))
        shutil._use_fd_functions = False  # the walk by path, as on a platform without the fd functions
        os.unlink = failing
        shutil.rmtree(scratch(2), onerror=onerror)
        os.unlink = real["unlink"]
        shutil._use_fd_functions = True
        shutil.rmtree(os.path.join(work, "eval_tmp"))
        counts.append(wrappers_in(scratch(3)))  # back to os's own functions
        where = scratch(4)  # os's own unlink fails (an immutable file: EPERM even as root)
        subprocess.run(["chattr", "+i", os.path.join(where, "b")], check=True)
        try:
            shutil.rmtree(where, onerror=onerror)
        finally:
            subprocess.run(["chattr", "-i", os.path.join(where, "b")], check=True)
        shutil.rmtree(where)
        print(json.dumps({"shown": shown, "left": sorted(os.listdir(work)), "wrappers": counts}))
    """,
    "error-keywords": """
        import json, os, shutil, sys, tempfile
        work = sys.argv[1]
        calls = []

        def courses(remove):  # fsguard's guarded rmtree calls and its full courses (rmwalk.run) while remove runs
            count = [0, 0]

            def hook(frame, event, arg):
                code = frame.f_code
                if event == "call" and code.co_name == "wrapper" and code.co_filename.endswith("patching.py"):
                    count[0] += 1
                if event == "call" and code.co_name == "run" and code.co_filename.endswith("rmwalk/__init__.py"):
                    count[1] += 1
            sys.setprofile(hook)
            try:
                remove()
            finally:
                sys.setprofile(None)
            return count

        def filled(where):
            os.makedirs(os.path.join(where, "sub"), exist_ok=True)
            for name in ("a", os.path.join("sub", "b")):
                with open(os.path.join(where, name), "w") as f:
                    f.write("x")
            return where

        def onerror(func, path, exc_info):
            calls.append(["onerror", os.path.relpath(path, work), exc_info[0].__name__])

        counts = []
        for step in range(2):  # a TemporaryDirectory's clean-up (its own handler), then the error keywords
            scratch = tempfile.TemporaryDirectory(dir=work)
            filled(scratch.name)
            counts.append(courses(scratch.cleanup))
        where = filled(os.path.join(work, "eval_tmp"))
        counts.append(courses(lambda: shutil.rmtree(where, onerror=onerror)))
        where = filled(os.path.join(work, "eval_tmp"))
        counts.append(courses(lambda: shutil.rmtree(where, ignore_errors=True)))
        where = filled(os.path.join(work, "eval_tmp"))
        counts.append(courses(lambda: shutil.rmtree(where, ignore_errors=False, onerror=None)))
        shutil.rmtree(os.path.join(work, "gone"), onerror=onerror)  # missing: the handler is told, as without
        shutil.rmtree(os.path.join(work, "gone"), ignore_errors=True)
        try:
            shutil.rmtree(os.path.join(work, "gone"), ignore_errors=False)
        except FileNotFoundError as error:
            calls.append(["raised", type(error).__name__, os.path.relpath(error.filename, work)])
        print(json.dumps({"counts": counts, "calls": calls, "left": sorted(os.listdir(work))}))
    """,
    "shared": """
        import json, os, shutil, subprocess, sys
        work, how = sys.argv[1], sys.argv[2]
        staging = os.path.join(work, "tmp-checkpoint-1")
        os.makedirs(staging, exist_ok=True)  # this rank comes first
        with open(os.path.join(staging, "rng_state_1.pth"), "w") as f:
            f.write("1")
        # rank 0 of the same job, on this node, makes the same name (and finds it there), and writes its share
        peer = f"os.makedirs({staging!r}, exist_ok=True)" if how == "makedirs" else (
            f"pathlib.Path({staging!r}).mkdir(parents=True, exist_ok=True)")
        code = f"import os, pathlib; {peer}; open(os.path.join({staging!r}, 'model.bin'), 'w').write('0')"
        env = dict(os.environ, RANK="0", LOCAL_RANK="0")
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        shutil.rmtree(staging)
        print(json.dumps(sorted(os.listdir(work))))
    """,
    "shared-scratch": """
        import json, os, shutil, subprocess, sys
        work = sys.argv[1]
        cache = os.path.join(work, "step_cache")

        def peer_writes():  # rank 0 of the job, on this node: makes the same name and writes its part
            code = f"import os; os.makedirs({cache!r}, exist_ok=True); open(os.path.join({cache!r}, 'part0'), 'w')"
            subprocess.run([sys.executable, "-c", code], env=dict(os.environ, RANK="0", LOCAL_RANK="0"), check=True)

        for step in range(8):  # a cache every rank makes and writes into each step; this rank removes it
            if step % 2:
                peer_writes()  # the peer comes first: this rank's makedirs finds it there
            os.makedirs(cache, exist_ok=True)
            with open(os.path.join(cache, "part1"), "w") as f:
                f.write(str(step))
            if not step % 2:
                peer_writes()
            shutil.rmtree(cache)
        print(json.dumps(sorted(os.listdir(work))))
    """,
}


# Rank 1 of a job of two nodes of 4 ranks each (its master on another host): not a single-node job
TWO_NODES = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node0"}


def run(
    python: Path, where: Path, program: str, fsguard: str, *args: str, job: dict[str, str] | None = None
) -> tuple[object, list[dict[str, Any]]]:
    """The program as rank 1 of a 4-rank single-node job (``job``: other launcher variables); what it printed, and its
    records (``FSGUARD_LOG``)."""
    script, log, work = where / f"{program}.py", where / f"log-{fsguard}", where / f"work-{fsguard}"
    script.write_text(textwrap.dedent(PROGRAMS[program]))  # a file: the Pool's children import its functions
    work.mkdir()
    env = clean_env(rank_env(1, 4, "scratch", FSGUARD=fsguard, FSGUARD_LOG=str(log), **(job or {})))
    command = [str(python), str(script), str(work), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), json_records(log)


def windows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rmtree records of a yield window that elapsed with nobody moving the tree."""
    return [r for r in records if r["op"] == "rmtree" and "not_moved_within_s" in r["detail"]]


@pytest.mark.parametrize("job", ["one node", "two nodes"])
def test_a_per_step_scratch_dir_never_waits(fsguard_python: Path, tmp_path: Path, job: str) -> None:
    """30 steps of ``makedirs(eval_tmp, exist_ok=True)`` ... ``rmtree``: this rank made each tree and no process of
    another rank of the job made it or tried to (the node's journal, complete in a single-node job): no window, the
    first removal included, and no record (on c552099 the first removal still waited: one window, 0.25 s; on
    e3a2108 one every step, 7.5 s). In a job of two nodes too, on this node-local filesystem (the short course reads
    the held top's device then: no peer of another node sees it)."""
    extra = TWO_NODES if job == "two nodes" else None
    without, _ = run(fsguard_python, tmp_path, "scratch", "0", job=extra)
    left, records = run(fsguard_python, tmp_path, "scratch", "1", job=extra)
    assert left == without == []
    assert not windows(records), [r["evidence"] for r in windows(records)]
    assert not [r for r in records if r["op"] == "rmtree"], records


def test_directories_a_pool_of_this_rank_wrote_are_removed_without_a_window(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """16 directories made and written by the rank's ``multiprocessing.Pool`` children, removed by the rank: no peer
    of the job made them, no window (on e3a2108: a window each, 4 s)."""
    without, _ = run(fsguard_python, tmp_path, "pool", "0")
    left, records = run(fsguard_python, tmp_path, "pool", "1")
    assert left == without == []
    assert not windows(records), [r["evidence"] for r in windows(records)]


def test_directories_the_rank_made_and_its_pool_filled_are_removed_without_a_window(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """16 directories the rank made with ``makedirs(exist_ok=True)`` and its Pool's children filled, removed by the
    rank: made by this rank alone, no window and no record (on c552099: a window each, 16 hazards, 4 s)."""
    without, _ = run(fsguard_python, tmp_path, "pool-filled", "0")
    left, records = run(fsguard_python, tmp_path, "pool-filled", "1")
    assert left == without == []
    assert not windows(records), [r["evidence"] for r in windows(records)]
    assert not [r for r in records if r["op"] == "rmtree"], records


@pytest.mark.parametrize("how", ["makedirs", "pathlib"])
def test_a_name_a_peer_tried_to_make_keeps_its_window(fsguard_python: Path, tmp_path: Path, how: str) -> None:
    """The rename wins still where a peer's commit is plausible: this rank made ``tmp-checkpoint-1`` first, then a
    process of rank 0 on this node tried to make the same name (``os.makedirs(exist_ok=True)``, or pathlib's
    ``mkdir(exist_ok=True)``, whose ``FileExistsError`` it handles) and wrote into it: the removal waits its window
    for rank 0's rename (nobody renames here: the window elapses, a hazard record)."""
    without, _ = run(fsguard_python, tmp_path, "shared", "0", how)
    left, records = run(fsguard_python, tmp_path, "shared", "1", how)
    assert left == without == []
    assert len(windows(records)) == 1, records


def test_a_cache_every_rank_makes_each_step_waits_once(fsguard_python: Path, tmp_path: Path) -> None:
    """8 steps of a cache directory every rank makes (``makedirs(exist_ok=True)``) and writes into, removed by this
    rank: a name peers make too, so the first removal waits its window for a peer's rename (a hazard record: nobody
    renamed it). After that window that no peer used the path is a scratch path, whoever made the tree (this rank, or a
    peer first and this rank's ``makedirs`` found it): no window again (on 909e862: 5 windows of 8, the first and
    each step a peer made the tree first, 0.25 s each)."""
    without, _ = run(fsguard_python, tmp_path, "shared-scratch", "0")
    left, records = run(fsguard_python, tmp_path, "shared-scratch", "1")
    assert left == without == []
    assert len(windows(records)) == 1, [r["evidence"] for r in windows(records)]


STEP_CACHE_JOB = """
import json, os, shutil, sys
import torch.distributed as dist

dist.init_process_group("gloo")
rank, work = dist.get_rank(), sys.argv[1]
cache = os.path.join(work, "step_cache")
for step in range(6):
    first = step % 2  # which rank makes the cache first this step
    for turn in (first, 1 - first):
        if rank == turn:
            os.makedirs(cache, exist_ok=True)
            with open(os.path.join(cache, f"part{rank}"), "w") as f:
                f.write(str(step))
        dist.barrier()
    if rank == 0:
        shutil.rmtree(cache)
    dist.barrier()
if rank == 0:
    print(json.dumps(sorted(os.listdir(work))))
dist.destroy_process_group()
"""


def test_a_step_cache_under_torchrun_waits_once(fsguard_python: Path, tmp_path: Path) -> None:
    """The same under real torchrun (2 ranks, gloo barriers): each step both ranks make the cache and write into it,
    rank 1 first every other step, and rank 0 removes it. One window, the first step's (on 909e862: 4 of 6, each
    step rank 0's ``makedirs`` found the cache there, and the first)."""
    script = tmp_path / "job.py"
    script.write_text(STEP_CACHE_JOB)
    listed = {}
    for fsguard in ("0", "1"):
        work, log = tmp_path / f"work-{fsguard}", tmp_path / f"log-{fsguard}"
        work.mkdir()
        command = [str(fsguard_python), "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        env = clean_env({"FSGUARD": fsguard, "FSGUARD_LOG": str(log), "FSGUARD_STDERR": "0"})
        done = subprocess.run([*command, str(script), str(work)], env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        listed[fsguard] = json.loads(done.stdout.strip().splitlines()[-1])
    assert listed == {"0": [], "1": []}, listed
    records = json_records(tmp_path / "log-1")
    assert len(windows(records)) == 1, [r["evidence"] for r in windows(records)]


def test_the_plain_walk_skips_the_wrappers_and_obeys_the_programs_own_functions(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """A tree the rank made alone is removed by the standard walk calling ``os``'s own ``unlink`` and ``rmdir``: its
    steps pass no wrapper of fsguard's (only ``rmtree``'s own runs; on 02e2ee3 each entry's step passed one too:
    issue 47, 3,800 instructions each), and ``rmtree(path)`` takes the short course (``fsguard.rmwalk.lane``). A program's own ``os.unlink`` is still what the walk calls, and its handler
    is told ``os.unlink``, as it is when os's own ``unlink`` fails: the same calls, handler calls and tree as without
    fsguard, by descriptor and by path (``shutil._use_fd_functions`` false), and os's own functions again once the
    program puts them back. (``tests/test_versions.py`` runs it on the other versions' walks.)"""
    check_plain_walk(fsguard_python, tmp_path)


def check_plain_walk(python: Path, where: Path) -> None:
    """The plain walk's program under ``python``, without fsguard and with it, in ``where``."""
    without, _ = run(python, where, "own-functions", "0")
    got, records = run(python, where, "own-functions", "1")
    assert isinstance(without, dict) and isinstance(got, dict)
    assert got["shown"] == without["shown"] and got["left"] == without["left"] == [], (got, without)
    program = ["onerror", True, False, "eval_tmp/b", "PermissionError"]
    own = ["onerror", True, True, "eval_tmp/b", "PermissionError"]
    assert got["shown"].count(program) == 2 and got["shown"].count(own) == 1, got["shown"]  # told os.unlink
    # rmtree's own wrapper; with the program's unlink also the two calls it makes through the os.unlink it kept. Each
    # goes down the short course, the one with the program's handler too (on 2ae4547 that one took the full course:
    # rmwalk.run and its course's run)
    assert without["wrappers"] == [[0, 0]] * 3 and got["wrappers"] == [[1, 0], [3, 0], [1, 0]], got
    assert not [r for r in records if r["op"] == "rmtree"], records


def test_a_temporary_directorys_clean_up_and_the_error_keywords_take_the_short_course(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """``rmtree`` with its error keywords (``onerror``, ``onexc``, ``ignore_errors``: every ``TemporaryDirectory``'s
    clean-up passes one) of a tree the rank made alone goes down the short course too, none through the full one (on
    2ae4547 every one did: 1.5-1.8x the CPU time of a clean-up without fsguard). The handler still gets what the
    standard walk gives it, ``ignore_errors`` still ignores, a missing tree still raises: the same calls, handler calls
    and tree as without fsguard. (``tests/test_versions.py`` runs it on the other versions: 3.12+ pass ``onexc``.)"""
    check_error_keywords(fsguard_python, tmp_path)


def check_error_keywords(python: Path, where: Path) -> None:
    """The error keywords' program under ``python``, without fsguard and with it, in ``where``."""
    without, _ = run(python, where, "error-keywords", "0")
    got, records = run(python, where, "error-keywords", "1")
    assert isinstance(without, dict) and isinstance(got, dict)
    assert got["calls"] == without["calls"] and got["left"] == without["left"] == [], (got, without)
    assert ["raised", "FileNotFoundError", "gone"] in got["calls"], got["calls"]
    assert any(call[0] == "onerror" and call[1] == "gone" for call in got["calls"]), got["calls"]
    assert without["counts"] == [[0, 0]] * 5, without
    # no full course; one guarded call each (3.15's clean-up passes dir_fd and a private keyword: that rmtree is
    # passed through as fsguard cannot bind it, and its walk's steps are os's guarded functions)
    assert [full for _, full in got["counts"]] == [0] * 5 and got["counts"][2:] == [[1, 0]] * 3, got
    # (the missing tree's calls go down the full course: what the handler got is recorded there, as before)
    assert not [r for r in records if r["op"] == "rmtree" and not r["args"][0].endswith("gone")], records

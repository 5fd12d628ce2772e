"""No tax (issue 47): an ordinary ``rmtree`` in a launched rank pays no yield window where no peer commits the tree.

A rank of a single-node job (the launcher's variables: peers present, so the window is on) runs ordinary idioms,
without fsguard and with ``FSGUARD=1``: a per-step scratch directory (``os.makedirs(f"{work}/eval_tmp",
exist_ok=True)``, files, ``shutil.rmtree``, 30 steps), 16 directories made and written by a ``multiprocessing.Pool``,
and 16 the rank makes with ``makedirs(exist_ok=True)`` and its Pool fills, each then removed by the rank. All end as
without fsguard; what the mechanism did is read from the records (``FSGUARD_LOG``): a window that elapsed with
nobody renaming the tree leaves a ``hazard`` with ``detail.not_moved_within_s``; a tree removed at once leaves none.
Flipped: where a process of another rank of the job tried to make the same directory (a name the ranks share, as
a Trainer's ``tmp-checkpoint-N``), the window stays. No time is asserted (``bench/yield_window.py`` gives the ratio).
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
}


def run(python: Path, where: Path, program: str, fsguard: str, *args: str) -> tuple[object, list[dict[str, Any]]]:
    """The program as rank 1 of a 4-rank single-node job; what it printed, and its records (``FSGUARD_LOG``)."""
    script, log, work = where / f"{program}.py", where / f"log-{fsguard}", where / f"work-{fsguard}"
    script.write_text(textwrap.dedent(PROGRAMS[program]))  # a file: the Pool's children import its functions
    work.mkdir()
    env = clean_env(rank_env(1, 4, "scratch", FSGUARD=fsguard, FSGUARD_LOG=str(log)))
    command = [str(python), str(script), str(work), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), json_records(log)


def windows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rmtree records of a yield window that elapsed with nobody moving the tree."""
    return [r for r in records if r["op"] == "rmtree" and "not_moved_within_s" in r["detail"]]


def test_a_per_step_scratch_dir_never_waits(fsguard_python: Path, tmp_path: Path) -> None:
    """30 steps of ``makedirs(eval_tmp, exist_ok=True)`` ... ``rmtree``: this rank made each tree and no process of
    another rank of the job made it or tried to (the node's journal, complete in a single-node job): no window, the
    first removal included, and no record (on c552099 the first removal still waited: one window, 0.25 s; on
    e3a2108 one every step, 7.5 s)."""
    without, _ = run(fsguard_python, tmp_path, "scratch", "0")
    left, records = run(fsguard_python, tmp_path, "scratch", "1")
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

"""No tax (issue 47): an ordinary ``rmtree`` in a launched rank pays no yield window where no peer commits the tree.

A rank of a job (the launcher's variables: peers present, so the window is on) runs two ordinary idioms, without
fsguard and with ``FSGUARD=1``: a per-step scratch directory (``os.makedirs(f"{work}/eval_tmp", exist_ok=True)``,
files, ``shutil.rmtree``, 30 steps) and 16 directories made and written by a ``multiprocessing.Pool``, then removed
by the rank. Both end as without fsguard; what the mechanism did is read from the records (``FSGUARD_LOG``): a
window that elapsed with nobody renaming the tree leaves a ``hazard`` with ``detail.not_moved_within_s``. No time is
asserted (``bench/yield_window.py`` gives the ratio).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

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
}


def run(python: Path, where: Path, program: str, fsguard: str) -> tuple[object, list[dict[str, Any]]]:
    """The program as one rank of a 4-rank job; what it printed, and its records (``FSGUARD_LOG``)."""
    script, log, work = where / f"{program}.py", where / f"log-{fsguard}", where / f"work-{fsguard}"
    script.write_text(textwrap.dedent(PROGRAMS[program]))  # a file: the Pool's children import its functions
    env = clean_env(rank_env(1, 4, "scratch", FSGUARD=fsguard, FSGUARD_LOG=str(log)))
    done = subprocess.run([str(python), str(script), str(work)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), json_records(log)


def windows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rmtree records of a yield window that elapsed with nobody moving the tree."""
    return [r for r in records if r["op"] == "rmtree" and "not_moved_within_s" in r["detail"]]


def test_a_per_step_scratch_dir_waits_at_most_once(fsguard_python: Path, tmp_path: Path) -> None:
    """30 steps of ``makedirs(eval_tmp, exist_ok=True)`` ... ``rmtree``: the first removal may still wait (the tree
    is one a peer's makedirs could share, and nothing tells yet that none did), the 29 others at the same path
    are this process's own scratch, removed at once (on e3a2108: a window every step, 7.5 s)."""
    without, _ = run(fsguard_python, tmp_path, "scratch", "0")
    left, records = run(fsguard_python, tmp_path, "scratch", "1")
    assert left == without == []
    assert len(windows(records)) <= 1, [r["evidence"] for r in windows(records)]
    assert all(r["decision"] == "hazard" for r in records), records


def test_directories_a_pool_of_this_rank_wrote_are_removed_without_a_window(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """16 directories made and written by the rank's ``multiprocessing.Pool`` children, removed by the rank: no peer
    of the job made them, no window (on e3a2108: a window each, 4 s)."""
    without, _ = run(fsguard_python, tmp_path, "pool", "0")
    left, records = run(fsguard_python, tmp_path, "pool", "1")
    assert left == without == []
    assert not windows(records), [r["evidence"] for r in windows(records)]

"""A process's first guarded ``rmtree`` (issue 47): its CPU time, and the modules it imports, as a user has them.

The first guarded call of a process imports what its course needs; an ``rmtree`` that meets no failure imports the
walk's modules only, not the oracle and the records a failure needs. A process that removes one scratch directory
(``tempfile``'s clean-up included) pays this once. Measured as an installed package is: fsguard's sources copied
into a temporary directory and byte-compiled there (as ``pip install`` does), the children run without
``PYTHONDONTWRITEBYTECODE``, each a fresh process that looks like rank 1 of a 4-rank torchrun job, the scratch idiom
of ``bench/yield_window.py`` (8 small files), ``FSGUARD=1`` against ``FSGUARD=0`` in alternating rounds.

Prints the median CPU milliseconds of the first and of the second removal in each arm, and the modules the first
guarded one imported (``--json FILE`` writes them).
usage: python bench/first_call.py [--quick] [--rounds N] [--source CHECKOUT] [--json FILE]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1"}
JOB.update(MASTER_PORT="29500", FSGUARD_STDERR="0")
CHILD = """
import json, os, shutil, sys, time
if os.environ.get("FSGUARD") != "0":
    import fsguard

    fsguard.install()
work = sys.argv[1]
cpu, before = [], set(sys.modules)
for _ in range(2):
    top = os.path.join(work, "eval_tmp")
    os.makedirs(top, exist_ok=True)
    for i in range(8):
        with open(os.path.join(top, f"pred-{i}.json"), "w") as f:
            f.write("x")
    started = time.process_time()
    shutil.rmtree(top)
    cpu.append(time.process_time() - started)
    if len(cpu) == 1:
        imported = sorted(set(sys.modules) - before)
print(json.dumps({"cpu": cpu, "imported": imported, "fsguard": getattr(sys.modules.get("fsguard"), "__file__", None)}))
"""


def run(where: str, guarded: bool, round_: int) -> dict[str, Any]:
    """One fresh process's two removals: their CPU seconds, and what the first imported."""
    work = tempfile.mkdtemp(dir=where)
    # Unmeasured by coverage (a test run's ``COVERAGE_*``): it would time coverage, and name a copy that is gone.
    drop = ("FSGUARD", "COVERAGE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(JOB, PYTHONPATH=where, FSGUARD="1" if guarded else "0", FSGUARD_LOG=os.path.join(where, "log"))
    env["TORCHELASTIC_RUN_ID"] = f"first-call-{os.getpid()}-{round_}"
    # Through a shell that forks: the child's parent (its "launcher", which dates the job) starts now.
    command = ["sh", "-c", '"$0" "$@"', sys.executable, "-c", CHILD, work]
    # From its work directory: ``-c`` puts the current directory first on the path, before the copy.
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=120, cwd=work)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if guarded and not str(found["fsguard"]).startswith(where):
        raise RuntimeError(f"the child imported another fsguard: {found['fsguard']}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--source", default=ROOT, help="the checkout whose fsguard/ to measure (default: this one)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 15)
    where = tempfile.mkdtemp(prefix="fsguard-first-call-")
    try:
        shutil.copytree(os.path.join(args.source, "fsguard"), os.path.join(where, "fsguard"))
        compileall.compile_dir(os.path.join(where, "fsguard"), quiet=1)  # as pip install does
        arms: dict[str, list[dict[str, Any]]] = {"unpatched": [], "fsguard": []}
        for k in range(rounds):
            for arm in arms:
                arms[arm].append(run(where, arm == "fsguard", k))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    result: dict[str, Any] = {"rounds": rounds}
    for arm, runs in arms.items():
        first = statistics.median(r["cpu"][0] for r in runs)
        second = statistics.median(r["cpu"][1] for r in runs)
        result[arm] = {"first_cpu_ms": first * 1000, "second_cpu_ms": second * 1000}
    imported = sorted(arms["fsguard"][-1]["imported"])
    result["fsguard_first_imports"] = imported
    result["first_added_ms"] = added = result["fsguard"]["first_cpu_ms"] - result["unpatched"]["first_cpu_ms"]
    print(f"first guarded rmtree of a process, {rounds} fresh processes per arm (medians, CPU ms)")
    for arm in arms:
        row = result[arm]
        print(f"  {arm:<10} first {row['first_cpu_ms']:7.2f}  second {row['second_cpu_ms']:7.3f}")
    print(f"  added by fsguard's first call: {added:.2f} ms; it imported {len(imported)} modules")
    print("  " + " ".join(imported))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

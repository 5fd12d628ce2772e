"""Instructions per call (issue 47): user-space instructions of one guarded call against the unpatched one, counted.

A small call's CPU time on these shared 2-core machines moves by a third from one run to the next
(``bench/yield_window.py``'s ratio for the same code: 1.13-1.92), so a change of a few microseconds cannot be seen
in it. Instructions can: valgrind's ``callgrind`` counts those the process executes in user space, the same from run
to run to within a few hundred. Only the call itself is counted: it runs inside ``itertools.starmap`` and callgrind
collects inside ``starmap_next`` only; its first calls (imports, caches) run before, uncounted.

What is not counted: the kernel's work (the system calls themselves: an unpatched small ``rmtree`` is mostly that)
and waiting. So the ratio here is of fsguard's own work, not of the call's CPU time; the CPU ratio is
``bench/yield_window.py``'s.

Arms, each in a rank-1 process of a 4-rank job on this node (``FSGUARD=1``), and unpatched (``FSGUARD=0``):

* ``rmtree-plain``: the scratch idiom of issue 47 (``os.makedirs(eval_tmp, exist_ok=True)``, 8 small files,
  ``shutil.rmtree``), at the same path every round: a tree this rank made alone, removed by the plain walk;
* ``rmtree-checked``: the same tree made unguarded (``posix.mkdir``, as a tool or a peer without fsguard makes it):
  the checked walk, no window (``FSGUARD_YIELD_S=0``);
* ``makedirs-found``: ``os.makedirs(out, exist_ok=True)`` of a directory that is there (the call a program makes
  before every write).

usage: python bench/instructions.py [--calls N] [--json FILE]   (needs valgrind; Debian's ``valgrind``)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARMS = ("rmtree-plain", "rmtree-checked", "makedirs-found")
WARM = 20  # calls made before counting: the first call's imports and caches are not the call's
JOB = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1"}
JOB.update(MASTER_PORT="29500", FSGUARD_STDERR="0")


def child(arm: str, calls: int, base: str) -> None:
    """One arm's calls in this process: the first ``WARM`` plainly, then ``calls`` inside ``starmap`` (counted)."""
    import itertools

    if os.environ.get("FSGUARD") != "0":
        import fsguard

        fsguard.install()
    import posix

    top = os.path.join(base, "eval_tmp")

    def step() -> tuple[object, tuple[str]]:
        if arm == "makedirs-found":
            return os.makedirs, (top,)
        if arm == "rmtree-plain":
            os.makedirs(top, exist_ok=True)
        else:
            posix.mkdir(top)
        for i in range(8):
            with open(os.path.join(top, f"pred-{i}.json"), "w") as f:
                f.write("x")
        return shutil.rmtree, (top,)

    if arm == "makedirs-found":
        os.makedirs(top, exist_ok=True)
    for k in range(WARM + calls):
        func, args = step()
        if arm == "makedirs-found":
            args = (top, 0o777, True)
        if k < WARM:
            func(*args)  # type: ignore[operator]
        else:
            for _ in itertools.starmap(func, [args]):  # type: ignore[arg-type]
                pass


def count(arm: str, calls: int, guarded: bool) -> int:
    """User-space instructions of ``calls`` calls of ``arm``, in a fresh process under callgrind."""
    base = tempfile.mkdtemp(prefix="fsguard-instructions-")
    out = os.path.join(base, "callgrind.out")
    work = os.path.join(base, "work")
    os.mkdir(work)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSGUARD")}
        env.update(JOB, PYTHONPATH=ROOT, FSGUARD="1" if guarded else "0", FSGUARD_LOG=os.path.join(base, "log"))
        env.update(TORCHELASTIC_RUN_ID=f"instructions-{os.getpid()}-{arm}", FSGUARD_YIELD_S="0.25")
        if arm == "rmtree-checked":
            env["FSGUARD_YIELD_S"] = "0"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no"]
        command += ["--toggle-collect=starmap_next", sys.executable, __file__, "--child", arm, str(calls), work]
        # Through a shell that forks: the child's parent (its "launcher", which dates the job) starts now.
        subprocess.run(["sh", "-c", '"$0" "$@"', *command], env=env, capture_output=True, check=True, timeout=900)
        with open(out) as f:
            totals = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.MULTILINE)
        if totals is None:
            raise RuntimeError(f"no totals in {out}")
        return int(totals.group(1))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py: needs valgrind (Debian: apt-get install valgrind)")
    results: dict[str, dict[str, float]] = {}
    print(f"user-space instructions per call, {args.calls} calls counted per arm (callgrind)")
    print(f"{'arm':<18}{'unpatched':>12}{'fsguard':>12}{'added':>12}{'ratio':>8}")
    for arm in ARMS:
        off = count(arm, args.calls, guarded=False) / args.calls
        on = count(arm, args.calls, guarded=True) / args.calls
        results[arm] = {"unpatched": round(off), "fsguard": round(on), "added": round(on - off), "ratio": on / off}
        print(f"{arm:<18}{off:>12,.0f}{on:>12,.0f}{on - off:>12,.0f}{on / off:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calls": args.calls, "arms": results}, f, indent=2)


if __name__ == "__main__":
    main()

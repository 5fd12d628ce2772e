"""Never worse, third pass (issue 33): fsguard absorbs only a would-be crash; the program's own handling
decides, wherever it is.

One section per idiom class, each with programs of its own run as real jobs (ranks of the wheel's venv in a
torchrun environment, started together by the test; arrival order varies), once with ``FSGUARD=1`` and once
without. A program that handles the failure ends the same both ways (exit codes, names claimed, ranks in the
critical section at once, files left), its lost races ``deferred``; a program whose failure would crash it
completes with fsguard (``absorbed``):

1. a claim loop through a helper, the handler one frame up and broad (the errno idiom; methods of a class);
2. a mkdir lock written as a context manager, polled by a loop with ``except OSError: sleep``;
3. the error carried to another frame or thread: a ``ThreadPoolExecutor`` future's ``result()``,
   ``asyncio.to_thread``, ``multiprocessing.Pool.apply``, ``asyncio.wait_for``;
4. handler forms: a class-based suppressing context manager, ``cm = ignoring(...); with cm:``,
   ``except self.retry_on``, ``except*``, a handler more than 8 frames up;
5. the opposite: a handler that converts the error (``raise AlreadyExistsError``) or exits the process, with
   nobody above it: a would-be crash, absorbed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_never_worse_peers import GATE, records_of, run_ranks, tree

RANKS = 3


def claims_program(claim: str) -> str:
    """A job whose every rank claims a run directory of its own with ``claim`` (which defines
    ``claim_one(root) -> int``, the index claimed) and writes its rank into it."""
    return (
        GATE
        + claim
        + """
    import json, sys
    mine = claim_one(root)
    with open(os.path.join(root, f"runs/run-{mine}/owner"), "a") as f:
        f.write(f"{rank}\\n")
    sys.stdout.write(json.dumps({"claimed": mine}) + "\\n")  # one write: ranks share the pipe
"""
    )


def both_ways(python: Path, program: str, where: Path, **extra: str) -> dict[str, list[dict[str, Any]]]:
    return {
        mode: run_ranks(python, program, where / mode, RANKS, guarded=mode == "with", **extra)
        for mode in ("without", "with")
    }


def check_claims(runs: dict[str, list[dict[str, Any]]], where: Path) -> None:
    """Every rank claimed a name of its own, both ways; the same exit codes, names and files."""
    for mode, results in runs.items():
        assert [r["code"] for r in results] == [0] * RANKS, (mode, [r["err"][-2000:] for r in results])
    for mode in runs:
        claimed = sorted(r["out"]["claimed"] for r in runs[mode])
        assert claimed == list(range(RANKS)), (mode, claimed)
        owners = {k: v for k, v in tree(where / mode).items() if k.endswith("owner")}
        assert sorted(owners.values()) == [f"{r}\n" for r in range(RANKS)], (mode, owners)  # one owner each
    assert tree(where / "with").keys() == tree(where / "without").keys()
    records = records_of(runs["with"])
    assert records, "no race was deferred: the claims never collided"
    assert {r.decision for r in records} == {"deferred"}, records


# --- 1. a claim loop through a helper, the handler one frame up and broad --------------------------------

ERRNO_HELPER = """
    import errno

    def make_run_dir(i):
        os.makedirs(os.path.join(root, f"runs/run-{i}"))

    def claim_one(root):
        i = 0
        while True:
            try:
                make_run_dir(i)
                return i
            except OSError as e:  # the classic errno idiom
                if e.errno != errno.EEXIST:
                    raise
                i += 1
"""

CLASS_HELPER = """
    import errno

    class Runs:
        def __init__(self, root):
            self.root = os.path.join(root, "runs")

        def make(self, i):
            os.mkdir(os.path.join(self.root, f"run-{i}"))

        def claim(self):
            i = 0
            while True:
                try:
                    self.make(i)
                    return i
                except OSError as e:
                    if e.errno != errno.EEXIST:
                        raise
                    i += 1

    def claim_one(root):
        os.makedirs(os.path.join(root, "runs"), exist_ok=True)
        return Runs(root).claim()
"""


@pytest.mark.parametrize("claim", ["errno_helper", "class_helper"])
def test_claim_loop_through_a_helper(fsguard_python: Path, tmp_path: Path, claim: str) -> None:
    program = claims_program({"errno_helper": ERRNO_HELPER, "class_helper": CLASS_HELPER}[claim])
    runs = both_ways(fsguard_python, program, tmp_path)
    check_claims(runs, tmp_path)
    assert {r.detail["handler"] for r in records_of(runs["with"])} == {"except OSError"}


# --- 2. a mkdir lock written as a context manager ------------------------------------------------------------

LOCKED = """
    import json, sys
    lock = os.path.join(root, "lock")

    def critical_section():
        mark = os.path.join(root, f"inside-{rank}")
        os.mkdir(mark)
        most = len([n for n in os.listdir(root) if n.startswith("inside-")])
        time.sleep(0.03)
        os.rmdir(mark)
        return most

    most, polls = 0, 0
    for _ in range(3):
        while True:
            try:
                with locked(lock):
                    most = max(most, critical_section())
                break
            except OSError:  # held by another rank: poll
                polls += 1
                time.sleep(0.003)
        time.sleep(0.005)
    sys.stdout.write(json.dumps({"most_inside": most, "polls": polls}) + "\\n")
"""

CONTEXTMANAGER_LOCK = """
    import contextlib

    @contextlib.contextmanager
    def locked(path):
        os.mkdir(path)
        try:
            yield
        finally:
            os.rmdir(path)
"""

CLASS_LOCK = """
    class locked:
        def __init__(self, path):
            self.path = path

        def __enter__(self):
            os.makedirs(self.path)
            return self

        def __exit__(self, *exc):
            os.rmdir(self.path)
"""


@pytest.mark.parametrize("lock", ["contextmanager", "class"])
def test_mkdir_lock_as_a_context_manager(fsguard_python: Path, tmp_path: Path, lock: str) -> None:
    program = GATE + {"contextmanager": CONTEXTMANAGER_LOCK, "class": CLASS_LOCK}[lock] + LOCKED
    for attempt in range(4):  # until both runs were contended: on a loaded machine the ranks may arrive apart
        runs = both_ways(fsguard_python, program, tmp_path / str(attempt))
        for mode, results in runs.items():
            assert [r["code"] for r in results] == [0] * RANKS, (mode, [r["err"][-2000:] for r in results])
            assert [r["out"]["most_inside"] for r in results] == [1] * RANKS, (mode, results)
            assert tree(tmp_path / str(attempt) / mode).keys() == {f"ready-{r}" for r in range(RANKS)}
        if all(sum(r["out"]["polls"] for r in results) for results in runs.values()):
            break
    else:
        pytest.fail("the lock was never contended in both runs of one attempt")
    records = records_of(runs["with"])
    assert records and {r.decision for r in records} == {"deferred"}, records
    assert {r.detail["handler"] for r in records} == {"except OSError"}


# --- 3. the error carried to another frame or thread ---------------------------------------------------------

CARRIED = {
    "thread_pool": """
    import concurrent.futures

    def make_run_dir(path):
        os.mkdir(path)

    def claim_one(root):
        os.makedirs(os.path.join(root, "runs"), exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            i = 0
            while True:
                try:
                    pool.submit(make_run_dir, os.path.join(root, f"runs/run-{i}")).result()
                    return i
                except FileExistsError:
                    i += 1
""",
    "to_thread": """
    import asyncio

    def make_run_dir(path):
        os.makedirs(path)

    async def claim(root):
        i = 0
        while True:
            try:
                await asyncio.to_thread(make_run_dir, os.path.join(root, f"runs/run-{i}"))
                return i
            except FileExistsError:
                i += 1

    def claim_one(root):
        return asyncio.run(claim(root))
""",
    "pool_apply": """
    import multiprocessing

    def make_run_dir(path):
        os.makedirs(path)

    def claim_one(root):
        with multiprocessing.get_context("fork").Pool(1) as pool:
            i = 0
            while True:
                try:
                    pool.apply(make_run_dir, (os.path.join(root, f"runs/run-{i}"),))
                    return i
                except FileExistsError:
                    i += 1
""",
    "wait_for": """
    import asyncio

    async def make(path):
        os.makedirs(path)

    async def claim(root):
        i = 0
        while True:
            try:
                await asyncio.wait_for(make(os.path.join(root, f"runs/run-{i}")), 30)
                return i
            except FileExistsError:
                i += 1

    def claim_one(root):
        return asyncio.run(claim(root))
""",
}


@pytest.mark.parametrize("carrier", list(CARRIED))
def test_error_carried_to_another_frame_or_thread(fsguard_python: Path, tmp_path: Path, carrier: str) -> None:
    runs = both_ways(fsguard_python, claims_program(CARRIED[carrier]), tmp_path)
    check_claims(runs, tmp_path)


# --- 4. handler forms -----------------------------------------------------------------------------------------

FORMS = {
    "class_suppressing": """
    class Ignored:
        def __init__(self, *classes):
            self.classes = classes

        def __enter__(self):
            return self

        def __exit__(self, kind, value, tb):
            return kind is not None and issubclass(kind, self.classes)

    def claim_one(root):
        os.makedirs(os.path.join(root, "runs"), exist_ok=True)
        i = 0
        while True:
            made = False
            with Ignored(FileExistsError):
                os.mkdir(os.path.join(root, f"runs/run-{i}"))
                made = True
            if made:
                return i
            i += 1
""",
    "contextmanager_object": """
    import contextlib

    @contextlib.contextmanager
    def ignoring(*classes):
        try:
            yield
        except classes:
            pass

    def claim_one(root):
        i = 0
        while True:
            made = False
            cm = ignoring(FileExistsError)
            with cm:
                os.makedirs(os.path.join(root, f"runs/run-{i}"))
                made = True
            if made:
                return i
            i += 1
""",
    "instance_attribute": """
    class Claimer:
        def __init__(self, root, retry_on):
            self.root, self.retry_on = root, retry_on

        def claim(self):
            i = 0
            while True:
                try:
                    os.makedirs(os.path.join(self.root, f"runs/run-{i}"))
                    return i
                except self.retry_on:
                    i += 1

    def claim_one(root):
        return Claimer(root, (FileExistsError,)).claim()
""",
    "except_star": """
    def claim_one(root):
        i = 0
        while True:
            made = False
            try:
                os.makedirs(os.path.join(root, f"runs/run-{i}"))
                made = True
            except* FileExistsError:
                pass
            if made:
                return i
            i += 1
""",
    "nine_layers_up": """
    import functools

    def logged(function):  # two decorators per layer, as a framework's call stack has
        @functools.wraps(function)
        def wrapper(*args):
            return function(*args)
        return wrapper

    def timed(function):
        @functools.wraps(function)
        def wrapper(*args):
            return function(*args)
        return wrapper

    @logged
    @timed
    def make(path, depth):
        if depth:
            return make(path, depth - 1)
        os.makedirs(path)

    def claim_one(root):
        i = 0
        while True:
            try:
                make(os.path.join(root, f"runs/run-{i}"), 3)  # 12 frames below the handler
                return i
            except FileExistsError:
                i += 1
""",
}


@pytest.mark.parametrize("form", list(FORMS))
def test_handler_forms(fsguard_python: Path, tmp_path: Path, form: str) -> None:
    if form == "except_star" and sys.version_info < (3, 11):
        pytest.skip("except* is Python 3.11+")
    runs = both_ways(fsguard_python, claims_program(FORMS[form]), tmp_path)
    check_claims(runs, tmp_path)


# --- 5. the opposite: a handler that converts or exits, nobody above: absorbed -----------------------------

CRASHES = {
    "converting": """
    import json, sys

    class AlreadyExistsError(Exception):
        pass

    def gfile_makedirs(path):  # tensorboard <= 2.5's gfile.makedirs
        try:
            os.makedirs(path)
        except FileExistsError:
            raise AlreadyExistsError("Directory already exists")

    gfile_makedirs(os.path.join(root, "results"))
    with open(os.path.join(root, "results", f"rank-{rank}"), "w") as f:
        f.write("done")
    sys.stdout.write(json.dumps({"done": rank}) + "\\n")
""",
    "exiting": """
    import json, logging, sys

    try:
        os.makedirs(os.path.join(root, "results"))
    except OSError as error:
        logging.error("cannot make the results directory: %s", error)
        sys.exit(3)
    with open(os.path.join(root, "results", f"rank-{rank}"), "w") as f:
        f.write("done")
    sys.stdout.write(json.dumps({"done": rank}) + "\\n")
""",
}


@pytest.mark.parametrize("crash", list(CRASHES))
def test_a_converting_or_exiting_handler_with_nobody_above_is_absorbed(
    fsguard_python: Path, tmp_path: Path, crash: str
) -> None:
    """Every rank makes the results directory: without fsguard all ranks but one crash (the converted error,
    or the handler's ``sys.exit``); with fsguard every rank completes, its lost race absorbed."""
    runs = both_ways(fsguard_python, GATE + CRASHES[crash], tmp_path)
    codes = sorted(r["code"] for r in runs["without"])
    assert codes == [0] + [1 if crash == "converting" else 3] * (RANKS - 1), [r["err"] for r in runs["without"]]
    assert [r["code"] for r in runs["with"]] == [0] * RANKS, [r["err"][-2000:] for r in runs["with"]]
    assert sorted(r["out"]["done"] for r in runs["with"]) == list(range(RANKS))
    assert sorted(tree(tmp_path / "with")) == sorted(
        [*(f"ready-{r}" for r in range(RANKS)), "results", *(f"results/rank-{r}" for r in range(RANKS))]
    )
    records = records_of(runs["with"])
    assert [(r.op, r.decision) for r in records] == [("makedirs", "absorbed")] * (RANKS - 1), records

"""Never worse, the handler classes of issue 45: programs that handle their own lost races end as without fsguard.

Each program runs as one job of 3 ranks started at once (a torchrun environment each, ``tests/support/ranks.py``),
once with ``FSGUARD=1`` and once without, each run in a directory of its own. A rank's claims and locks are
racy (which rank wins is the race), so the outcome compared is what the program promises: every rank exits
0, each name is claimed once, one rank holds a lock, each task runs once. On e3a2108 each of them failed with
fsguard (the oracle said "ends the thread" where the program handles the error): several ranks took one claim.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.test_never_worse_peers import records_of, run_ranks

RANKS = 3

# A "never raises" helper: its finally returns (issue 45: a clause-less try is not assumed to re-raise).
FINALLY_RETURN = """
    import json, os, sys
    root = sys.argv[1]

    def try_mkdir(path):
        made = False
        try:
            os.mkdir(path)
            made = True
        finally:
            return made

    i = 0
    while not try_mkdir(os.path.join(root, f"run-{i}")):
        i += 1
    print(json.dumps({"claims": [f"run-{i}"]}))
"""

# contextlib's frames read: a @contextmanager and a ContextDecorator used as decorators, as contextlib's docs show.
DECORATORS = """
    import contextlib, json, os, sys
    root = sys.argv[1]

    @contextlib.contextmanager
    def ignoring(*errors):
        try:
            yield
        except errors:
            pass

    class Ignoring(contextlib.ContextDecorator):
        def __init__(self, *errors):
            self.errors = errors
        def __enter__(self):
            return self
        def __exit__(self, kind, value, tb):
            return kind is not None and issubclass(kind, self.errors)

    held = []

    @ignoring(FileExistsError)
    def take(name):
        os.mkdir(os.path.join(root, name))
        held.append(name)

    @Ignoring(FileExistsError)
    def take_too(name):
        os.mkdir(os.path.join(root, name))
        held.append(name)

    take("lock-a")
    take_too("lock-b")
    print(json.dumps({"claims": held}))
"""

# A conditional manager: every branch is read, or the program decides.
CONDITIONAL = """
    import contextlib, json, os, sys
    root = sys.argv[1]
    quiet = os.environ.get("QUIET", "1") == "1"
    held = []
    with contextlib.suppress(FileExistsError) if quiet else contextlib.nullcontext():
        os.mkdir(os.path.join(root, "lock"))
        held.append("lock")
    print(json.dumps({"claims": held}))
"""

# A supervised thread: a Maildir-style spool claimed with os.rename; a worker that loses a claim dies, the
# program's threading.excepthook sees it and a new worker takes its place.
SPOOL = """
    import json, os, sys, threading, time
    root = sys.argv[1]
    queue, claimed, done = (os.path.join(root, d) for d in ("queue", "claimed", "done"))
    rank = os.environ["RANK"]
    lock, deaths, workers = threading.Lock(), [], []

    def work():
        for task in sorted(os.listdir(queue)):
            os.rename(os.path.join(queue, task), os.path.join(claimed, task))  # a lost claim ends this worker
            with open(os.path.join(done, task), "a") as f:
                f.write(f"rank {rank}\\n")
            time.sleep(0.01)  # the task's work

    def start():
        worker = threading.Thread(target=work)
        workers.append(worker)
        worker.start()

    def died(args):
        with lock:
            deaths.append(type(args.exc_value).__name__)
        start()  # respawned: it takes the next task still queued

    threading.excepthook = died
    open(os.path.join(root, "ready", rank), "w").close()  # every rank starts together (bounded)
    deadline = time.monotonic() + 30
    while len(os.listdir(os.path.join(root, "ready"))) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
        time.sleep(0.005)
    for _ in range(2):
        start()
    while any(w.is_alive() for w in list(workers)):
        for w in list(workers):
            w.join(0.05)
    print(json.dumps({"deaths": sorted(set(deaths))}))
"""


def _run(python: Path, code: str, where: Path, guarded: bool, **extra: str) -> list[dict[str, Any]]:
    return run_ranks(python, code, where / ("guarded" if guarded else "plain"), RANKS, guarded, **extra)


def _claims(results: list[dict[str, Any]]) -> Counter[str]:
    assert [r["code"] for r in results] == [0] * RANKS, [r["err"][-2000:] for r in results]
    return Counter(claim for r in results for claim in r["out"]["claims"])


def _both(python: Path, code: str, where: Path, **extra: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    plain = _run(python, code, where, False, **extra)
    guarded = _run(python, code, where, True, **extra)
    return plain, guarded


def test_a_finally_return_helper_claims_each_run_once(fsguard_python: Path, tmp_path: Path) -> None:
    plain, guarded = _both(fsguard_python, FINALLY_RETURN, tmp_path)
    assert _claims(plain) == _claims(guarded) == Counter({f"run-{i}": 1 for i in range(RANKS)})
    assert all(r.decision == "deferred" for r in records_of(guarded)), records_of(guarded)


def test_contextmanager_and_context_decorator_as_decorators_give_one_holder(
    fsguard_python: Path, tmp_path: Path
) -> None:
    plain, guarded = _both(fsguard_python, DECORATORS, tmp_path)
    assert _claims(plain) == _claims(guarded) == Counter({"lock-a": 1, "lock-b": 1})
    for record in records_of(guarded):
        assert record.decision == "deferred" and record.detail["handler"] == "with self._recreate_cm()", record


def test_a_conditional_manager_gives_one_holder(fsguard_python: Path, tmp_path: Path) -> None:
    plain, guarded = _both(fsguard_python, CONDITIONAL, tmp_path)
    assert _claims(plain) == _claims(guarded) == Counter({"lock": 1})
    reasons = {r.detail.get("reason") for r in records_of(guarded)}
    assert all(r.decision == "deferred" for r in records_of(guarded)) and reasons <= {
        "a conditional or computed context manager"
    }, records_of(guarded)


def _spool(where: Path, tasks: int) -> None:
    for name in ("queue", "claimed", "done", "ready"):
        (where / name).mkdir(parents=True)
    for t in range(tasks):
        (where / "queue" / f"t{t:02d}").write_text("task")


def test_a_supervised_spool_runs_each_task_once(fsguard_python: Path, tmp_path: Path) -> None:
    tasks = 30
    outcomes, records = {}, []
    for guarded in (False, True):
        where = tmp_path / ("guarded" if guarded else "plain")
        _spool(where, tasks)
        results = run_ranks(fsguard_python, SPOOL, where, RANKS, guarded)
        assert [r["code"] for r in results] == [0] * RANKS, [r["err"][-2000:] for r in results]
        runs = {p.name: p.read_text().count("\n") for p in sorted((where / "done").iterdir())}
        outcomes[guarded] = (runs, sorted(p.name for p in (where / "queue").iterdir()))
        records = records_of(results) if guarded else records
    expected = ({f"t{t:02d}": 1 for t in range(tasks)}, [])
    assert outcomes[False] == outcomes[True] == expected, outcomes
    assert all(r.decision == "deferred" for r in records), records

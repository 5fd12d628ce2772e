"""The four races fsguard exists for, run by 4 real ranks: they fail without fsguard and are absorbed with it.

Each test starts ``RANKS`` fresh interpreters of the venv built from the wheel (so the real ``fsguard.pth``
and launcher detection run), each with its own torchrun environment, running ``workers/race_worker.py``:
the ranks meet at a file barrier before every iteration and then make the same call on the same path.
Without fsguard the race must really happen (some call fails with the expected error, reported by the
worker as JSON). With ``FSGUARD=1`` no call fails, the files end up right, and every absorbed failure has
a well-formed record, on stderr and in ``FSGUARD_LOG``, naming the worker's line of the racing call.
"""

# ruff: noqa: F811  (pytest fixtures are imported, then named as parameters)
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import fsguard
from fsguard.launcher import hostname
from fsguard.records import Record, jsonl_path, parse_line
from tests.cluster.fixtures import StaleViews, needs_fuse, stale_mounts  # noqa: F401 (fixture)
from tests.conftest import TORCHRUN_ENV, clean_env, run_python
from tests.support.ranks import launch, rank_env
from tests.support.records import check_lines_stand_for
from tests.support.threads import with_crash_of
from tests.workers import race_worker as worker

RANKS = 4
WORKER = Path(worker.__file__).resolve()
JOB_TIMEOUT_S = 120


@dataclass(frozen=True)
class Race:
    """One race: how often to run it, what fails without fsguard, what the end state and records must be."""

    op: str
    iterations: int
    error: tuple[str, str]  # exception type and errno name of a lost race
    args: Callable[[Path, int], list[str]]  # the racing call's path arguments in iteration k
    records_per_iteration: tuple[int, int]  # with fsguard: fewest and most absorbed failures in one iteration
    check_end_state: Callable[[Path, int], None]


def _made(root: Path, k: int) -> None:
    assert (root / f"made-{k}").is_dir() and (root / f"shared-{k}" / "a" / "b").is_dir()


def _renamed(root: Path, k: int) -> None:
    assert not (root / f"tmp-checkpoint-{k}").exists()
    checkpoint = root / f"checkpoint-{k}"
    assert sorted(p.name for p in checkpoint.iterdir()) == [f"shard-{i}.bin" for i in range(worker.SHARDS)]
    for i in range(worker.SHARDS):
        assert (checkpoint / f"shard-{i}.bin").read_text() == worker.shard_text(k, i)


def _replaced(root: Path, k: int) -> None:
    target = root / f"kernel-{k}.so"
    assert target.read_text() in {worker.kernel_text(k, r) for r in range(RANKS)}
    assert not Path(f"{target}{worker.TEMP_SUFFIX}").exists()
    assert not list(root.glob(f"kernel-{k}.so.rank*"))


def _removed(root: Path, k: int) -> None:
    assert not (root / f"staging-{k}").exists()


RACES = [
    # makedirs, rename and replace (all temps published before any replace) fail for every rank but one.
    Race("makedirs", 20, ("FileExistsError", "EEXIST"), lambda r, k: [f"{r}/made-{k}"], (RANKS - 1,) * 2, _made),
    Race(
        "rename",
        20,
        ("FileNotFoundError", "ENOENT"),
        lambda r, k: [f"{r}/tmp-checkpoint-{k}", f"{r}/checkpoint-{k}"],
        (RANKS - 1,) * 2,
        _renamed,
    ),
    Race(
        "replace",
        20,
        ("FileNotFoundError", "ENOENT"),
        lambda r, k: [f"{r}/kernel-{k}.so{worker.TEMP_SUFFIX}", f"{r}/kernel-{k}.so"],
        (RANKS - 1,) * 2,
        _replaced,
    ),
    # Every rank but the one whose final rmdir wins meets a missing entry or top; that one may have too.
    Race(
        "rmtree", 15, ("FileNotFoundError", "ENOENT"), lambda r, k: [f"{r}/staging-{k}"], (RANKS - 1, RANKS), _removed
    ),
]


@dataclass
class Job:
    root: Path
    reports: list[dict[str, Any]]  # the workers' JSON lines, by rank
    stderr: list[str]  # by rank
    log_dir: Path


def run_job(python: Path, race: Race, where: Path, guarded: bool) -> Job:
    """Start RANKS workers at once, as one torchrun job would, and wait for all of them (bounded)."""
    root, log_dir = where / "root", where / "log"
    (root / "gate").mkdir(parents=True)
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(log_dir)} if guarded else {}
    envs = [rank_env(rank, RANKS, f"races-{race.op}", **extra) for rank in range(RANKS)]
    ranks = launch([str(python), str(WORKER), race.op, str(root), str(race.iterations)], envs, JOB_TIMEOUT_S)
    stderr = [r.err for r in ranks]
    assert [r.code for r in ranks] == [0] * RANKS, stderr
    reports = [r.report() for r in ranks]
    assert [r["rank"] for r in reports] == list(range(RANKS))
    return Job(root, reports, stderr, log_dir)


def failures(job: Job) -> list[dict[str, Any]]:
    return [f for report in job.reports for f in report["failures"]]


def guarded_line(op: str) -> int:
    """The worker's line of the racing call: the site every record must name."""
    lines = WORKER.read_text().splitlines()
    (number,) = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# guarded call: {op}")]
    return number


@pytest.mark.parametrize("race", RACES, ids=lambda r: r.op)
def test_race_happens_without_fsguard(fsguard_python: Path, tmp_path: Path, race: Race) -> None:
    """The test's own premise: unguarded, the ranks really collide (else the guarded run proves nothing)."""
    job = run_job(fsguard_python, race, tmp_path, guarded=False)
    lost = failures(job)
    print(f"{race.op}: {len(lost)} failed calls in {race.iterations} iterations x {RANKS} ranks")
    assert lost, f"{race.op}: the race never happened in {race.iterations} iterations"
    assert {(f["call"], f["type"], f["errno"]) for f in lost} == {(race.op, *race.error)}
    assert not any("fsguard" in text for text in job.stderr)
    if race.op == "rmtree":
        # Not only "the tree was already gone": ranks really walked it together.
        inside = [f for f in lost if f["filename"] != str(job.root / f"staging-{f['iteration']}")]
        print(f"rmtree: {len(inside)} of them on an entry a peer removed mid-walk")
        assert inside


@pytest.mark.parametrize("race", RACES, ids=lambda r: r.op)
def test_race_absorbed_with_fsguard(fsguard_python: Path, tmp_path: Path, race: Race) -> None:
    check_race_absorbed(fsguard_python, tmp_path, race)


def check_race_absorbed(fsguard_python: Path, tmp_path: Path, race: Race) -> None:
    """With FSGUARD=1 every call succeeds, the result is right, and each absorption is recorded in full."""
    job = run_job(fsguard_python, race, tmp_path, guarded=True)
    assert failures(job) == [], job.stderr  # (stderr says why fsguard did not absorb, or was not active)
    for k in range(race.iterations):
        race.check_end_state(job.root, k)

    # Every stderr line is a record the per-process JSONL files hold; the files hold every record, and the
    # lines stand for all of them (a few per call site, the last carrying the count held back: detail.more).
    lines = [line for text in job.stderr for line in text.splitlines()]
    assert all(line.startswith("fsguard: ") for line in lines), lines
    from_stderr = [parse_line(line) for line in lines]
    assert all(isinstance(rec, Record) for rec in from_stderr)
    from_log = [parse_line(line) for path in job.log_dir.glob("*.jsonl") for line in path.read_text().splitlines()]

    check_lines_stand_for([rec for rec in from_stderr if rec], [rec for rec in from_log if rec])

    rank_of_pid = {report["pid"]: report["rank"] for report in job.reports}
    iteration_of = {tuple(race.args(job.root, k)): k for k in range(race.iterations)}
    line = guarded_line(race.op)
    per_iteration: Counter[int] = Counter()
    for rec in from_log:
        assert rec is not None
        assert (rec.decision, rec.op) == ("absorbed", race.op)
        assert tuple(rec.args) in iteration_of, rec.args
        if rec.error is None:  # rmtree: waited (FSGUARD_YIELD_S) for a peer's tree, which a peer removed meanwhile
            assert race.op == "rmtree" and "while this process waited" in rec.evidence, rec
        else:
            assert (rec.error["type"], rec.error["errno"]) == race.error
        assert rec.evidence.strip()
        assert rec.origin.host == hostname(clean_env())
        assert rec.origin.pid in rank_of_pid and rec.origin.rank == rank_of_pid[rec.origin.pid] == rec.origin.local_rank
        assert (rec.origin.world_size, rec.origin.launcher, rec.origin.version) == (
            RANKS,
            "torchrun",
            fsguard.__version__,
        )
        assert rec.site == {"file": str(WORKER), "line": line, "function": f"race_{race.op}"}
        per_iteration[iteration_of[tuple(rec.args)]] += 1
        assert Path(jsonl_path(str(job.log_dir), rec.origin.host, rec.origin.rank, rec.origin.pid)).exists()
    assert len(set((r.origin.pid, r.args[0]) for r in from_log if r)) == len(from_log)  # one per rank and iteration
    fewest, most = race.records_per_iteration
    counts = [per_iteration[k] for k in range(race.iterations)]
    print(f"{race.op}: {sum(counts)} absorbed in {race.iterations} iterations: {counts}")
    assert all(fewest <= n <= most for n in counts), counts
    assert sum(counts) >= 1


# A lost race in these programs ends a thread of their own (a would-be crash, which fsguard absorbs when a peer
# did the same thing); ``try: ... except OSError`` around it would be the program's own handler, which decides.
# ``crash_of`` (tests/support/threads.py) runs it so.

REPUBLISHED_TEMP = with_crash_of(
    """
    import os, sys, tempfile
    import fsguard.patching
    d = tempfile.mkdtemp()
    temp, target = os.path.join(d, "kernel.so.tmp.pid_4242_7"), os.path.join(d, "kernel.so")
    with open(temp + ".rank1", "w") as f:
        f.write("build")
    os.rename(temp + ".rank1", temp)  # this rank's build, published whole under the shared temp name
    fsguard.patching.original("replace")(temp, target)  # rank 0's replace consumed it
    fired = False

    def rank2_publishes_its_temp(event, args):
        global fired
        if event in ("os.scandir", "os.listdir") and not fired:  # fsguard looks, after the failure
            fired = True
            with open(temp, "w") as f:
                f.write("rank 2's build")

    sys.addaudithook(rank2_publishes_its_temp)

    def publish():
        os.replace(temp, target)  # the temp was consumed by rank 0: ENOENT

    outcome = "raised" if crash_of(publish)[1] else "absorbed"
    print(hasattr(os.replace, "__wrapped__"), fired, outcome)
"""
)


def test_replace_lost_to_a_republished_temp_is_absorbed(fsguard_python: Path) -> None:
    """Compiler cache, 3+ ranks: this rank's temp was consumed by a peer's replace, and a third rank publishes
    its temp under the same name before fsguard decides. Both parents exist, so ENOENT can only mean the
    source was missing when the call ran: this lost replace is the same race and should be absorbed (an
    ``absorbed`` record: this rank published its build whole, by a rename of its own, so nothing was mixed).
    An audit hook on fsguard's first directory listing plays the third rank, so the interleaving is certain.
    (Found by the random-pause version of the replace race: ~2-3 % of iterations re-raised before the fix.)
    """
    result = run_python(fsguard_python, REPUBLISHED_TEMP, {**TORCHRUN_ENV, "FSGUARD": "1"})
    if result.returncode != 0 or result.stdout.split()[:2] != ["True", "True"]:
        pytest.fail(f"set-up: fsguard not active or never looked: {result.stdout!r} {result.stderr!r}")
    assert result.stdout.split()[2] == "absorbed", result.stderr
    (rec,) = [parse_line(line) for line in result.stderr.splitlines() if line.startswith("fsguard: ")]
    assert rec is not None and rec.decision == "absorbed" and rec.op == "replace"
    assert "re-published" in rec.evidence, rec.evidence


ROTATION = with_crash_of(
    """
    import os, sys, tempfile, time
    import fsguard.patching
    os.chdir(tempfile.mkdtemp())
    with open("latest.tmp", "w") as f:
        f.write("step 1")
    os.replace("latest.tmp", "latest")  # this rank's own move, remembered
    time.sleep(1.5)  # the next step (longer apart than fsguard's own-move slack of 1 s)
    with open("latest.tmp", "w") as f:
        f.write("step 2")
    moved = False

    def peer_moves_the_same_temp_name(event, args):
        global moved
        if event == "os.rename" and args[0] == "latest.tmp" and not moved:  # just before this rank's replace
            moved = True
            fsguard.patching.original("replace")("latest.tmp", "latest")

    sys.addaudithook(peer_moves_the_same_temp_name)
    outcomes = []

    def publish():
        os.replace("latest.tmp", "latest")

    for attempt in ("peer won", "twice"):
        outcomes.append("raised" if crash_of(publish)[1] else "absorbed")
    print(moved, *outcomes)
"""
)


def test_rotation_reusing_a_temp_name_is_told_from_this_rank_s_own_move(fsguard_python: Path) -> None:
    """``replace(latest.tmp, latest)`` every step: this rank's own move one step ago must not hide a peer's
    move of the same temp name now (absorbed), while replacing twice in a row still raises like the stdlib."""
    result = run_python(fsguard_python, ROTATION, {**TORCHRUN_ENV, "FSGUARD": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "absorbed", "raised"], (result.stdout, result.stderr)
    (rec,) = [parse_line(line) for line in result.stderr.splitlines() if line.startswith("fsguard: ")]
    assert rec is not None and rec.op == "replace" and "after this process's own move" in rec.evidence


NESTED_MAKEDIRS = """
    import os, sys, tempfile
    os.chdir(tempfile.mkdtemp())
    made = False

    def peer_makes_the_parent(event, args):
        global made
        if event == "os.mkdir" and os.fspath(args[0]) == "results" and not made:  # just before this rank's
            made = True
            os.mkdir("results")  # this audit event is nested: the hook does not run again

    sys.addaudithook(peer_makes_the_parent)
    os.makedirs("results/run1")
    print(made, os.path.isdir("results/run1"))
"""


def test_a_parent_made_by_a_peer_inside_makedirs_leaves_no_record(fsguard_python: Path) -> None:
    """The standard makedirs catches its own parent call's ``FileExistsError``; nobody sees that failure, so
    fsguard neither decides nor records it (records count races the caller would have crashed on)."""
    for fsguard_value in ("0", "1"):
        result = run_python(fsguard_python, NESTED_MAKEDIRS, {**TORCHRUN_ENV, "FSGUARD": fsguard_value})
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["True", "True"], result.stdout
        assert "fsguard: " not in result.stderr, result.stderr


ENTRIES_ADDED_MID_WALK = """
    import json, os, shutil, sys, tempfile
    root = tempfile.mkdtemp()
    top = os.path.join(root, "staging")
    os.makedirs(os.path.join(top, "sub"))
    for name in ("a", "b"):
        open(os.path.join(top, "sub", name), "w").close()
    variant = os.environ["VARIANT"]
    replace_dir = variant == "replace"
    # A peer's new entry, or what an NFS client leaves of an open file that was unlinked (a removal's residue).
    added = ".nfs" + "0123456789abcdef" + "00000001" if variant == "residue" else "new-entry"
    fired = False

    def peer_writes_into_sub(event, args):
        # Just before rmtree removes the emptied "sub", a peer adds an entry (or swaps in a new "sub").
        global fired
        if event == "os.rmdir" and os.fspath(args[0]) in ("sub", os.path.join(top, "sub")) and not fired:
            fired = True
            if replace_dir:  # a different directory now stands there, with a peer's file in it
                os.rename(os.path.join(top, "sub"), os.path.join(root, "old-sub"))
                os.mkdir(os.path.join(top, "sub"))
            open(os.path.join(top, "sub", added), "w").close()

    sys.addaudithook(peer_writes_into_sub)
    try:
        shutil.rmtree(top)
        outcome = "ok"
    except OSError as error:
        outcome = f"{type(error).__name__}:{error.errno}"
    print(json.dumps({"fired": fired, "outcome": outcome, "top_left": os.path.lexists(top),
                      "patched": hasattr(shutil.rmtree, "__wrapped__")}))
"""


@pytest.mark.parametrize("variant", ["peer", "residue", "replace"])
def test_rmtree_retries_a_directory_that_gained_entries_mid_walk(fsguard_python: Path, variant: str) -> None:
    check_rmtree_retry(fsguard_python, variant)


def check_rmtree_retry(fsguard_python: Path, variant: str) -> None:
    """Race 4's ENOTEMPTY: an entry appears in a directory rmtree just emptied. The standard rmtree fails. A
    peer's new entry is not the call's to remove (it appeared after the walk listed the directory): the error is
    raised as without fsguard. What an NFS client leaves of an unlinked open file (``.nfs`` and 24 hex digits)
    is a removal's residue: fsguard removes that same directory again (bounded) and records it. If a *different*
    directory stands there by then, it is not fsguard's to remove: the error is raised as without."""
    import errno
    import json

    outcomes = {}
    for fsguard_value in ("0", "1"):
        env = {**TORCHRUN_ENV, "FSGUARD": fsguard_value, "VARIANT": variant}
        result = run_python(fsguard_python, ENTRIES_ADDED_MID_WALK, env)
        assert result.returncode == 0, result.stderr
        outcomes[fsguard_value] = (json.loads(result.stdout), result.stderr)
    (off, _), (on, on_err) = outcomes["0"], outcomes["1"]
    assert off["fired"] and on["fired"] and on["patched"] and not off["patched"]
    assert off["outcome"] == f"OSError:{errno.ENOTEMPTY}" and off["top_left"]  # the race is real without fsguard
    if variant == "residue":
        assert on["outcome"] == "ok" and not on["top_left"]
        (rec,) = [parse_line(line) for line in on_err.splitlines() if line.startswith("fsguard: ")]
        assert rec is not None and rec.op == "rmtree" and rec.decision == "absorbed"
        assert "gained entries mid-walk and were removed again" in rec.evidence, rec.evidence
    else:
        assert on["outcome"] == off["outcome"] and on["top_left"]  # the peer's entry (or directory) is left alone
        assert "fsguard: " not in on_err, on_err


STALE_EXIST_OK = """
    import json, os, sys, tempfile, time
    d = os.path.join(tempfile.mkdtemp(dir=os.environ["BASE"]), "results")
    variant = os.environ["VARIANT"]
    state = {"mkdir": False, "look": False}

    def node_view(event, args):
        if event == "os.mkdir" and os.fspath(args[0]) == d and not state["mkdir"]:
            state["mkdir"] = True  # mkdir fails with EEXIST and the lookup that follows sees no directory:
            open(d, "w").close()  # a file stands there (variant "file"), or a stale lookup (variant "peer")
        elif event == "os.scandir" and state["mkdir"] and not state["look"] and variant == "peer":
            state["look"] = True  # fsguard's fresh listing shows what the peer really made: a directory
            os.unlink(d)
            os.mkdir(d)

    sys.addaudithook(node_view)
    started = time.monotonic()
    try:
        os.makedirs(d, exist_ok=True)
        outcome = "ok"
    except FileExistsError as error:
        outcome = f"FileExistsError:{error.filename == d}"
    print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - started, "isdir": os.path.isdir(d)}))
"""


@needs_fuse
@pytest.mark.parametrize("variant", ["peer", "file"])
def test_makedirs_exist_ok_decides_from_the_listing(
    fsguard_python: Path, variant: str, stale_mounts: StaleViews
) -> None:
    """Race 1 with ``exist_ok=True``: mkdir says EEXIST while this node's lookup says "no directory".
    "peer": the fresh listing shows a peer's directory (a stale lookup cache) -> absorbed, recorded.
    "file": the listing shows a file: a genuine error, raised at once (no settle wait), as without fsguard.
    On a FUSE view (bindfs), where lookups may be stale and fsguard reads the listing; on a coherent local
    filesystem a lookup is never stale, and the name's own lstat decides (tests/test_mounts.py)."""
    import json

    runs = {}
    for fsguard_value in ("0", "1"):
        env = {**TORCHRUN_ENV, "FSGUARD": fsguard_value, "FSGUARD_SETTLE_S": "5", "VARIANT": variant}
        env["BASE"] = str(stale_mounts.a)
        result = run_python(fsguard_python, STALE_EXIST_OK, env)
        assert result.returncode == 0, result.stderr
        runs[fsguard_value] = (json.loads(result.stdout), result.stderr)
    (off, _), (on, on_err) = runs["0"], runs["1"]
    assert off["outcome"] == "FileExistsError:True"  # the standard makedirs fails in both variants
    if variant == "peer":
        assert on["outcome"] == "ok" and on["isdir"]
        (rec,) = [parse_line(line) for line in on_err.splitlines() if line.startswith("fsguard: ")]
        assert rec is not None and rec.op == "makedirs" and "lookup cache was stale" in rec.evidence
    else:
        assert on["outcome"] == off["outcome"] and "fsguard: " not in on_err
        assert on["seconds"] < 2.5, on  # decided from the listing, not after the 5 s settle wait


RENAMED_MID_WALK = with_crash_of(
    """
    import json, os, shutil, sys, tempfile
    root = tempfile.mkdtemp()
    top, moved = os.path.join(root, "staging"), os.path.join(root, "checkpoint-7")
    os.makedirs(os.path.join(top, "sub"))
    for name in ("a", "b"):
        open(os.path.join(top, "sub", name), "w").close()
    fired = False

    def peer_renames_the_tree(event, args):
        # Just before rmtree removes the emptied top, a peer renames it (and writes into it under the new name).
        global fired
        if event == "os.rmdir" and os.fspath(args[0]) == top and not fired:
            fired = True
            os.rename(top, moved)
            open(os.path.join(moved, "peer-file"), "w").close()

    sys.addaudithook(peer_renames_the_tree)

    def clean():
        shutil.rmtree(top)

    _, error = crash_of(clean)
    outcome = "ok" if error is None else f"{type(error).__name__}:{error.errno}"
    print(json.dumps({"fired": fired, "outcome": outcome, "moved": sorted(os.listdir(moved)),
                      "patched": hasattr(shutil.rmtree, "__wrapped__")}))
"""
)


def test_rmtree_of_a_tree_a_peer_renamed_mid_walk_is_a_hazard(fsguard_python: Path) -> None:
    check_rmtree_hazard(fsguard_python)


def check_rmtree_hazard(fsguard_python: Path) -> None:
    """Race 4's rename: a peer renames the tree this rank is emptying. The standard rmtree fails on the top;
    fsguard absorbs it, finds the tree under its new name by the inode the walk started on, and says in a
    ``hazard`` record that the renamed tree may be missing entries."""
    import errno
    import json
    import subprocess
    import tempfile
    import textwrap

    runs = {}
    # From a file, as programs are: on 3.10 fsguard reads handlers from the source, and a ``python -c``
    # program has none (its frames are not understood, so the program decides: every error deferred).
    with tempfile.TemporaryDirectory() as where:
        script = Path(where) / "renamed_mid_walk.py"
        script.write_text(textwrap.dedent(RENAMED_MID_WALK))
        for fsguard_value in ("0", "1"):
            result = subprocess.run(
                [str(fsguard_python), str(script)],
                env=clean_env({**TORCHRUN_ENV, "FSGUARD": fsguard_value}),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert result.returncode == 0, result.stderr
            runs[fsguard_value] = (json.loads(result.stdout), result.stderr)
    (off, _), (on, on_err) = runs["0"], runs["1"]
    assert off["fired"] and on["fired"] and on["patched"] and not off["patched"]
    assert off["outcome"] == f"FileNotFoundError:{errno.ENOENT}"  # the race is real without fsguard
    assert on["outcome"] == "ok" and on["moved"] == off["moved"] == ["peer-file"]
    (rec,) = [parse_line(line) for line in on_err.splitlines() if line.startswith("fsguard: ")]
    assert rec is not None and (rec.op, rec.decision) == ("rmtree", "hazard"), on_err
    assert rec.detail.get("renamed_to", "").endswith("checkpoint-7"), rec

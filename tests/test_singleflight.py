"""Singleflight under store serialization (fsguard.locks.flight): many ranks making one identical call cost one
filesystem operation; a genuine error stays each rank's own error; different calls are not collapsed.

Real processes (fresh interpreters with fsguard from the wheel) against a real TCPStore standing in for the
launcher's agent store. No timings are asserted (bench/scale.py measures them).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env
from tests.support.net import free_port
from tests.support.records import json_records as records

WORKER = Path(__file__).resolve().parent / "workers" / "singleflight_rank.py"


def _env(tmp_path: Path, port: int, ranks: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "FSGUARD": "1",
        "FSGUARD_SERIALIZE": "1",
        "FSGUARD_LOCK": "store",
        "FSGUARD_STDERR": "0",
        "FSGUARD_LOG": str(tmp_path / "logs"),
        "WORLD_SIZE": str(ranks),
        "TORCHELASTIC_RUN_ID": "test",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        **(extra or {}),
    }


def _rank(
    python: Path, env: dict[str, str], rank: int, op: str, target: Path, gate: Path, strace: bool = False
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        (["strace", "-f", "-c", "-e", "trace=unlinkat", "-o", f"{gate}.strace{rank}"] if strace else [])
        + [str(python), str(WORKER), op, str(target), str(gate)],
        env=clean_env(dict(env, RANK=str(rank), LOCAL_RANK=str(rank))),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(paths: list[str], procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 300
    while not all(os.path.exists(p) for p in paths):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a rank did not get there"
        time.sleep(0.05)


def _answers(procs: list[subprocess.Popen[str]]) -> tuple[list[dict[str, Any]], list[str]]:
    answers, errs = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
        errs.append(err)
    return answers, errs


def _storm(
    python: Path,
    tmp_path: Path,
    port: int,
    ops: list[str],
    target: Path,
    extra: dict[str, str] | None = None,
    strace: bool = False,
    before_gate: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], Path]:
    gate = tmp_path / "gate"
    env = _env(tmp_path, port, len(ops), extra)
    procs = [_rank(python, env, rank, op, target, gate, strace) for rank, op in enumerate(ops)]
    _wait_for([f"{gate}.ready{r}" for r in range(len(ops))], procs)
    if before_gate is not None:
        before_gate()
    gate.touch()
    answers, _ = _answers(procs)
    return answers, tmp_path / "logs"


def _tree(top: Path) -> Path:
    """A 210-entry tree: 10 directories of 20 files."""
    for i in range(10):
        (top / f"d{i}").mkdir(parents=True)
        for j in range(20):
            (top / f"d{i}" / f"f{j}").write_bytes(b"x")
    return top


def _unlinkats(gate: Path, ranks: int) -> int:
    calls = 0
    for rank in range(ranks):
        for line in Path(f"{gate}.strace{rank}").read_text().splitlines():
            fields = line.split()
            if fields and fields[-1] == "unlinkat":
                calls += int(fields[3])
    return calls


def test_16_ranks_one_makedirs_reach_the_filesystem_about_once(
    fsguard_python: Path, tmp_path: Path, store_port: int
) -> None:
    target = tmp_path / "results"
    answers, logs = _storm(fsguard_python, tmp_path, store_port, ["makedirs"] * 16, target)
    assert all(a["ok"] for a in answers), answers
    assert target.is_dir()
    found = [r for r in records(logs) if r["args"] == [str(target)]]
    assert not [r for r in found if r["decision"] not in ("shared", "absorbed")], found
    shared = sum(r["detail"]["ranks"] for r in found if r["decision"] == "shared")
    performed = 16 - shared  # a rank that shared an outcome made no filesystem call
    assert 1 <= performed <= 4, found
    # every rank that performed and found the directory made by a peer says so, and nobody else does
    assert len([r for r in found if r["decision"] == "absorbed"]) == performed - 1, found


def test_a_genuine_error_is_each_ranks_own(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    target = tmp_path / "old"
    target.write_text("a file, not a directory")  # a genuine FileExistsError, never a peer's race
    answers, logs = _storm(fsguard_python, tmp_path, store_port, ["makedirs"] * 8, target)
    assert all(a == {"ok": False, "type": "FileExistsError", "errno": 17, "filename": str(target)} for a in answers), (
        answers
    )
    assert not [r for r in records(logs) if r["decision"] == "absorbed"]


def test_different_calls_are_not_collapsed(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    from fsguard.calls import Call
    from fsguard.locks.flight import flight_key

    target = tmp_path / "results"
    one = flight_key(Call("makedirs", (str(target),), {}), [str(target)], "node1")
    assert one == flight_key(Call("makedirs", (str(target),), {}), [str(target)], "node1")
    assert one != flight_key(Call("makedirs", (str(target),), {"exist_ok": True}), [str(target)], "node1")
    assert one != flight_key(Call("makedirs", (str(target),), {}), [str(target)], "node2")  # tmp_path: node-local
    assert flight_key(Call("makedirs", (str(target), 0o777, object()), {}), [str(target)], "node1") is None
    # Mixed calls on one path: each makes (or shares) its own kind, and all end as without fsguard.
    answers, _ = _storm(fsguard_python, tmp_path, store_port, ["makedirs", "makedirs_exist_ok"] * 4, target)
    assert all(a["ok"] for a in answers), answers
    assert target.is_dir()


def test_default_mode_rmtree_storm_removes_each_entry_about_once(fsguard_python: Path, tmp_path: Path) -> None:
    # 16 ranks rmtree one 210-entry tree, FSGUARD=1 without serialization: a rank that meets entries vanishing
    # under it (a peer removes the same tree) waits for the tree to go instead of racing it entry by entry.
    tree = _tree(tmp_path / "scratch")
    ranks = 8  # every rank runs under strace: 16 took a minute of the suite on 2 cores
    strace = shutil.which("strace") is not None
    extra = {"FSGUARD_SERIALIZE": "0", "FSGUARD_SETTLE_S": "20"}  # generous: a loaded machine is slow
    answers, logs = _storm(fsguard_python, tmp_path, free_port(), ["rmtree"] * ranks, tree, extra, strace)
    assert all(a["ok"] for a in answers), answers
    assert not tree.exists()
    assert not [r for r in records(logs) if r["decision"] in ("conflict", "unserialized")]
    if strace:
        calls = _unlinkats(tmp_path / "gate", ranks)
        # each entry once, and at most a few failed attempts per rank (today's walk: up to ranks x 210)
        assert calls <= 210 + 4 * ranks, calls


# --- rmtree under store serialization: one walk for N ranks --------------------------------------------------


def test_8_ranks_one_rmtree_walk_the_tree_once(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    from fsguard import journal
    from fsguard.launcher import job_tag

    tree = _tree(tmp_path / "scratch")
    ranks = 8  # every rank runs under strace: 16 took a minute of the suite on 2 cores
    strace = shutil.which("strace") is not None
    # A peer's tree, as a Trainer's ranks leave one: made by a guarded mkdir of this job (in this node's journal,
    # once the job has started). A tree no peer made is removed at once: a walk too short for the ranks of a
    # loaded machine to meet in (0 shared, once in a full run).
    tag = job_tag(_env(tmp_path, store_port, ranks))
    assert tag is not None

    def peer_made_it() -> None:
        journal.made(str(tree), tag)
        # ... and wrote into it once every rank had started: a tree older than a rank's start (here, strace's
        # start) by more than FSGUARD_FRESH_S is older than the job, removed with no record (once in CI, loaded)
        os.utime(tree)

    answers, logs = _storm(
        fsguard_python, tmp_path, store_port, ["rmtree"] * ranks, tree, strace=strace, before_gate=peer_made_it
    )
    assert all(a["ok"] for a in answers), answers
    assert not tree.exists()
    found = [r for r in records(logs) if r["args"] == [str(tree)]]
    assert not [r for r in found if r["decision"] not in ("shared", "absorbed", "hazard")], found
    shared = sum(r["detail"]["ranks"] for r in found if r["decision"] == "shared")
    assert shared >= 1, found  # the ranks that waited for the walk, in one record (late joiners: their own)
    # every rank that did not share its call made it, and has its one record (absorbed: a peer had removed it;
    # hazard: the one that removed a peer's fresh tree that nobody moved within the window)
    assert len([r for r in found if r["decision"] != "shared"]) == ranks - shared, found
    print(f"{ranks} ranks, one rmtree, store serialization: {shared} shared, records {[r['decision'] for r in found]}")
    if strace:
        calls = _unlinkats(tmp_path / "gate", ranks)
        print(f"unlinkat in all: {calls}")
        assert calls <= 210 + 4 * ranks  # one walk, not one per rank


def test_an_rmtree_error_is_each_ranks_own(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    # rmtree of a symlink raises OSError in every rank: the performer's error is not shared, each rank makes
    # its own call and gets its own error (and the link's target is left alone, as without fsguard).
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    answers, logs = _storm(fsguard_python, tmp_path, store_port, ["rmtree"] * 6, link)
    assert all(a == {"ok": False, "type": "OSError", "errno": None, "filename": None} for a in answers), answers
    assert (tmp_path / "real" / "keep").exists() and link.is_symlink()
    shared = [r for r in records(logs) if r["decision"] == "shared"]
    assert all(r["detail"]["outcome"] == "err" for r in shared), shared
    assert not [r for r in records(logs) if r["decision"] == "absorbed"]


def test_killed_performer_its_waiters_take_over(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    # The performer of an rmtree stops inside its walk (holding its flight and the path's lock) and is killed
    # with SIGKILL. Its waiters find the flight's lease unrenewed, give it up, go to the lock, take it over
    # (lease = 12 / 3 = 4 s) and remove the tree themselves; nobody hangs, and no c10d warning is printed
    # for the waits that ended on the dead holder. (A 6 s bound left the waiters about one lease of margin: the
    # same shape as the store holder's test that CI's load failed after 3152790.)
    tree = _tree(tmp_path / "scratch")
    env = _env(tmp_path, store_port, 4, {"FSGUARD_LOCK_TIMEOUT": "12"})
    first = tmp_path / "gate0"
    performer = _rank(fsguard_python, env, 0, "rmtree_stuck", tree, first)
    _wait_for([f"{first}.ready0"], [performer])
    first.touch()
    _wait_for([f"{first}.stuck"], [performer])
    gate = tmp_path / "gate"
    waiters = [_rank(fsguard_python, env, rank, "rmtree", tree, gate) for rank in (1, 2, 3)]
    _wait_for([f"{gate}.ready{r}" for r in (1, 2, 3)], waiters)
    gate.touch()
    time.sleep(1.0)  # let them join the flight (if one comes later, it finds the dead flight: the same path)
    assert performer.poll() is None
    performer.send_signal(signal.SIGKILL)
    performer.wait()
    answers, errs = _answers(waiters)
    assert all(a["ok"] for a in answers), answers
    assert not tree.exists()
    for err in errs:
        assert "[c10d]" not in err and "socket.cpp" not in err, err
    found = records(logs := tmp_path / "logs")
    assert found, logs
    gave_up = [r for r in found if r["decision"] == "waited" and r["detail"].get("flight")]
    assert gave_up and all(f"pid {performer.pid} " in r["evidence"] for r in gave_up), found
    took_over = [r for r in found if r["decision"] == "waited" and r["detail"]["took_over"]]
    assert len(took_over) == 1 and f"pid {performer.pid} " in took_over[0]["evidence"], found
    assert not [r for r in found if r["decision"] in ("unserialized", "conflict")], found


def test_the_outcome_rides_on_the_seal_of_the_waiter_count(store_port: int) -> None:
    """The store's flight protocol against a real TCPStore, in-process: the performer publishes its outcome and
    reads how many waited in one request (the seal added to the waiter count: once for ok, twice for err); a
    waiter that joined in time and one that joined after the end both get that outcome; an uncontended flight is
    three requests (claim, seal, close)."""
    import threading

    from fsguard.locks.store import StoreBackend

    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port), "TORCHELASTIC_RESTART_COUNT": "seal"}
    performer, waiter, late = (StoreBackend(30.0, env) for _ in range(3))
    calls: list[str] = []

    class Counted:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(self.inner, name)

    performer.prepare()
    performer.requests.store = Counted(performer.requests.store)

    claimed = performer.flight_claim("alone", "rank 0")
    assert claimed is not None and claimed[0]
    assert performer.flight_done("alone", claimed[1], b"ok") == 0
    assert calls == ["compare_set", "add", "compare_set"], calls

    claimed = performer.flight_claim("shared", "rank 0")
    joined = waiter.flight_claim("shared", "rank 1")
    assert claimed is not None and claimed[0] and joined is not None and not joined[0]
    answers: list[Any] = []
    in_time = threading.Thread(target=lambda: answers.append(waiter.flight_wait("shared", joined[1], 20.0)))
    in_time.start()
    token = joined[1].partition(b" ")[0].partition(b"#")[0].decode()
    count = f"{performer.prefix}flight/shared/n/{token}"
    deadline = time.monotonic() + 20
    while performer.requests.store.inner.add(count, 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the waiter has joined: it is then counted, and told at the end
    assert performer.flight_done("shared", claimed[1], b"err") == 1
    in_time.join(20)
    assert answers == [(b"err", False, "gone")], answers
    assert late.flight_wait("shared", joined[1], 20.0) == (b"err", True, "gone")


# --- claims and reused outcomes (issue 47) -------------------------------------------------------------------

CLAIMS = {  # what every losing rank gets from the standard library, as the program sees it
    "claim_makedirs": lambda t: ("FileExistsError", errno.EEXIST, t),
    "claim_mkdir": lambda t: ("FileExistsError", errno.EEXIST, t),
    "claim_rename": lambda t: ("FileNotFoundError", errno.ENOENT, f"{t}.src"),
    "claim_excl": lambda t: ("FileExistsError", errno.EEXIST, t),
}


def _staged(target: Path, op: str, ranks: int) -> None:
    if op == "claim_rename":
        (target.parent / f"{target.name}.src").mkdir()
    for rank in range(ranks if op == "claim_rename_own" else 0):
        own = target.parent / f"{target.name}.src{rank}"
        own.mkdir()
        (own / "rank").write_text(str(rank))


@pytest.mark.parametrize("op", [*CLAIMS, "claim_rename_own"])
def test_a_claim_has_exactly_one_winner_and_the_others_get_the_standard_error(
    fsguard_python: Path, tmp_path: Path, store_port: int, op: str
) -> None:
    # 12 ranks claim one name at once, each in a ``try`` of its own: without fsguard exactly one wins and every
    # other gets the standard library's error. Serialized, a peer's outcome must never be handed to a rank
    # whose program tells winning from losing: each makes its own call (before issue 47, identical makedirs and
    # renames were collapsed: every waiting rank "won").
    ranks = 12
    target = tmp_path / "claimed"
    _staged(target, op, ranks)
    answers, logs = _storm(fsguard_python, tmp_path, store_port, [op] * ranks, target)
    winners = [rank for rank, a in enumerate(answers) if a["won"]]
    assert len(winners) == 1, answers
    losers = [a for a in answers if not a["won"]]
    if op == "claim_rename_own":  # a directory onto a non-empty one: ENOTEMPTY (or EEXIST), the loser's source
        assert all(a["type"] == "OSError" and a["errno"] in (errno.ENOTEMPTY, errno.EEXIST) for a in losers), losers
        assert (target / "rank").read_text() == str(winners[0])
    else:
        kind, number, name = CLAIMS[op](str(target))
        want = {"type": kind, "errno": number, "filename": name}
        assert all(a == {"won": False, **want} for a in losers), losers
    assert not [r for r in records(logs) if r["decision"] in ("absorbed", "shared")], records(logs)


def _alone(python: Path, env: dict[str, str], rank: int, op: str, target: Path, tmp_path: Path) -> dict[str, Any]:
    """One rank's call made alone (after the others'), under strace: its answer; its file syscalls are in
    ``<tmp_path>/alone<rank>.strace``."""
    gate = tmp_path / f"alone{rank}"
    gate.touch()  # no waiting: the call is made as soon as the rank is up
    trace = ["strace", "-f", "-e", "trace=%file", "-o", f"{tmp_path}/alone{rank}.strace"]
    proc = subprocess.Popen(
        [*trace, str(python), str(WORKER), op, str(target), str(gate)],
        env=clean_env(dict(env, RANK=str(rank), LOCAL_RANK=str(rank))),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def _named(tmp_path: Path, rank: int, path: Path) -> list[str]:
    """The file syscalls of rank ``rank``'s ``_alone`` run that name ``path`` itself."""
    return [line for line in (tmp_path / f"alone{rank}.strace").read_text().splitlines() if f'"{path}"' in line]


@pytest.fixture
def own_store_port() -> Iterator[int]:
    """A TCPStore server of this test's job alone. The session's store is every test's of this worker under one
    job identity: a rank an earlier test killed inside an rmtree (``test_killed_performer_its_waiters_take_over``)
    left that job's moves counter with a move under way for good, and no outcome is reused while one is."""
    from datetime import timedelta

    import torch.distributed as dist

    server = getattr(dist, "TCPStore")(  # noqa: B009 - not re-exported for type checkers
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
    )
    yield int(server.port)
    del server


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_makedirs_a_peer_made_returns_without_a_filesystem_call_until_the_job_removes_it(
    fsguard_python: Path, tmp_path: Path, own_store_port: int
) -> None:
    # makedirs(p, exist_ok=True) after a peer's identical call returned: the same outcome, from the job's store
    # (before issue 47, every later rank made its own mkdir and stat of p). A removal by a rank of the job ends
    # that: the next identical call makes p again, and the one after it reuses that.
    target = tmp_path / "results"
    env = _env(tmp_path, own_store_port, 5, {"KEEP_WARM": "1"})  # the workers' warm-up removes nothing
    assert _alone(fsguard_python, env, 0, "makedirs_exist_ok", target, tmp_path) == {"ok": True}
    assert target.is_dir()
    assert _alone(fsguard_python, env, 1, "makedirs_exist_ok", target, tmp_path) == {"ok": True}
    assert _named(tmp_path, 1, target) == []  # no mkdir, no stat of p: the peer's outcome
    assert _alone(fsguard_python, env, 2, "rmtree", target, tmp_path) == {"ok": True}
    assert not target.exists()
    assert _alone(fsguard_python, env, 3, "makedirs_exist_ok", target, tmp_path) == {"ok": True}
    assert target.is_dir(), "an outcome from before the removal was reused"
    assert [line for line in _named(tmp_path, 3, target) if "mkdir" in line], "rank 3 did not make p again"
    assert _alone(fsguard_python, env, 4, "makedirs_exist_ok", target, tmp_path) == {"ok": True}
    assert _named(tmp_path, 4, target) == []
    assert not [r for r in records(tmp_path / "logs") if r["decision"] not in ("shared", "absorbed", "hazard")]

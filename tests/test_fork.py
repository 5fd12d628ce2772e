"""Forking while fsguard is busy in another thread (DataLoader workers, compile pools, async checkpoints).

A fork copies only the forking thread: every lock another thread held at that moment stays held in the child
forever, and every descriptor it held is shared with the child. ``fsguard.state``'s one at-fork hook gives the
child fresh locks and closes the lock descriptors it inherited; the file backend gives a lock back with
``flock(LOCK_UN)`` before closing, so a parent's release holds even while children keep a copy.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TORCHRUN_ENV, clean_env, run_python
from tests.workers.fork_worker import CHILD_LIFE_S

WORKER = Path(__file__).resolve().parent / "workers" / "fork_worker.py"


def test_forks_while_a_thread_decides_and_records(fsguard_python: Path, tmp_path: Path) -> None:
    env = {"FSGUARD": "force", "FSGUARD_LOG": str(tmp_path / "logs"), "FSGUARD_SETTLE_S": "0"}
    result = subprocess.run(
        [str(fsguard_python), str(WORKER), "stress", str(tmp_path), "200"],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["absorbed"] > 0 and "fsguard: absorbed makedirs" in result.stderr, out  # the thread did record
    other = [line for line in result.stderr.splitlines() if not line.startswith("fsguard: absorbed makedirs")]
    assert (out["forks"], out["hung"], out["failed"]) == (200, 0, 0), (out, other[-40:])  # a child's traceback


@pytest.mark.parametrize("lock", ["file", "store"])
def test_long_lived_forked_children_keep_no_lock(
    fsguard_python: Path, tmp_path: Path, lock: str, request: pytest.FixtureRequest
) -> None:
    env = dict(
        TORCHRUN_ENV,
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        FSGUARD="1",
        FSGUARD_SERIALIZE="1",
        FSGUARD_LOCK=lock,
        FSGUARD_LOCK_TIMEOUT="20",
        FSGUARD_STDERR="0",
        FSGUARD_LOG=str(tmp_path / "logs"),
    )
    if lock == "store":
        env["MASTER_PORT"] = str(request.getfixturevalue("store_port"))
    ready = tmp_path / "ready"
    forker = subprocess.Popen(
        [str(fsguard_python), str(WORKER), "forker", str(tmp_path), str(ready), "20"],
        env=clean_env(dict(env, RANK="0", LOCAL_RANK="0")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        peer = subprocess.run(
            [str(fsguard_python), str(WORKER), "peer", str(tmp_path), str(ready), "5"],
            env=clean_env(dict(env, RANK="1", LOCAL_RANK="1")),
            capture_output=True,
            text=True,
            timeout=300,
        )
        out, err = forker.communicate(timeout=300)
    finally:
        forker.kill()
    assert peer.returncode == 0, peer.stderr[-2000:]
    assert forker.returncode == 0, err[-2000:]
    forked = json.loads(out.strip().splitlines()[-1])
    assert forked["children"] == 20 and forked["statuses"] == [0] * 20 and forked["replaces"] > 0, forked
    waited = json.loads(peer.stdout.strip().splitlines()[-1])
    # Each call holds the lock for one replace (microseconds); a lock kept by the children lasts until they exit,
    # CHILD_LIFE_S after their fork. A loaded machine holds it for longer now and then: the forker's thread holds
    # it while it waits for the CPU, or for the GIL while the main thread forks (at load 14-17 on 2 cores: up to
    # 1.0 s with no child forked, up to 2.0 s with 20, 16 runs each; over 1.0 s in 9 of 45 runs).
    assert waited["calls"] > 0 and waited["worst_s"] < CHILD_LIFE_S / 2, waited


RANKS = 6  # the hazard lies in the first milliseconds after the import: each rank is one more chance (3 in 8 on main)


def test_forks_right_after_importing_torch_distributed_make_name_lookups(
    fsguard_python: Path, tmp_path: Path, store_port: int
) -> None:
    """Serialized with the store: fsguard's connect-ahead thread opens its store connections as soon as the
    program has imported ``torch.distributed`` (imports, name lookups). A rank that forks at that moment (a
    DataLoader) must not leave a child waiting forever for a lock that thread held (on main: 2-12 of 500 hung in
    3 of 8 ranks, waiting for the idna codec's module lock in their first ``getaddrinfo``)."""
    env = dict(
        TORCHRUN_ENV,
        WORLD_SIZE=str(RANKS),
        LOCAL_WORLD_SIZE=str(RANKS),
        MASTER_PORT=str(store_port),
        FSGUARD="1",
        FSGUARD_SERIALIZE="1",
        FSGUARD_LOCK="store",
        FSGUARD_LOG=str(tmp_path / "logs"),
    )
    ranks = [
        subprocess.Popen(
            [str(fsguard_python), str(WORKER), "lookups", str(tmp_path), "500"],
            env=clean_env(dict(env, RANK=str(rank), LOCAL_RANK=str(rank))),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(RANKS)
    ]
    outs = []
    try:
        for rank in ranks:
            out, err = rank.communicate(timeout=400)
            assert rank.returncode == 0, err[-2000:]
            outs.append((json.loads(out.strip().splitlines()[-1]), err))
    finally:
        for rank in ranks:
            rank.kill()
    counts = [(out["forks"], out["hung"], out["failed"]) for out, _ in outs]
    worst = max(range(RANKS), key=lambda i: counts[i][1] + counts[i][2])
    assert counts == [(500, 0, 0)] * RANKS, (counts, outs[worst][0], outs[worst][1][-3000:])


def test_a_fork_waits_for_another_threads_unforkable_section_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In-process: a fork waits for another thread's section to end; one that outlasts ``FORK_WAIT_S`` holds back
    one fork by the bound (then a ``waited`` record), and the next forks not at all."""
    import importlib
    import os
    import threading
    import time

    from fsguard import runtime, state

    serializer = importlib.import_module("fsguard.locks.serializer")  # writes the late fork's record

    assert serializer._forked_late in state._late_fork_reporters
    bound = 1.0
    records: list[tuple[str, str]] = []
    monkeypatch.setattr(state, "FORK_WAIT_S", bound)
    monkeypatch.setattr(runtime, "record", lambda op, decision, *args, **kwargs: records.append((op, decision)))

    def fork_time() -> float:
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        took = time.monotonic() - started
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        return took

    def section(entered: threading.Event, release: threading.Event) -> None:
        with state.Unforkable():
            entered.set()
            release.wait(30)

    entered, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=section, args=(entered, release))
    thread.start()
    entered.wait()
    threading.Timer(0.2, release.set).start()
    fork_time()
    assert release.is_set() and records == []  # the fork came after the section's end
    thread.join()

    entered, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=section, args=(entered, release))
    thread.start()
    entered.wait()
    first, second = fork_time(), fork_time()
    release.set()
    thread.join()
    for writer in [t for t in threading.enumerate() if t.name == "fsguard-fork-record"]:
        writer.join(10)  # the record is written after the fork, by a thread of its own
    assert first >= bound and second < bound, (first, second)  # the bound, once
    assert records == [("fork", "waited")]

    with state.Unforkable():  # the forking thread's own section never holds its fork back
        assert fork_time() < bound


LATE_FORK = """
import json, os, threading, time
from fsguard import state

state.FORK_WAIT_S = 0.5
with state.Unforkable():  # the gate's hook is registered at the first section
    pass
# A fork hook registered after the gate's, whose lock the section needs: logging's, when the section imports it.
taken_for_fork = threading.Lock()
os.register_at_fork(before=taken_for_fork.acquire, after_in_parent=taken_for_fork.release)
# What writing the record takes and the section holds: the import lock of fsguard.records while it imports it.
held_by_section = threading.Lock()
written = []


@state.report_late_forks
def report(waited, threads):
    with held_by_section:
        written.append(threads)


inside = threading.Event()


def section():
    with state.Unforkable(), held_by_section:
        inside.set()
        while not taken_for_fork.locked():  # the fork has begun
            time.sleep(0.001)
        with taken_for_fork:  # given back when the fork returns
            pass


thread = threading.Thread(target=section, name="opening")
thread.start()
inside.wait()
pid = os.fork()
if pid == 0:
    os._exit(0)
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
thread.join()
deadline = time.monotonic() + 10
while not written and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({"status": status, "written": written}))
"""


def test_a_late_forks_record_is_written_after_the_fork_returns(fsguard_python: Path) -> None:
    """A fork that waited out its bound for a section is recorded once the fork has returned, not from inside the
    fork's hooks: there, hooks registered after the gate's still hold their locks, and the section, held up by
    one of them, holds what writing the record takes. Written from the hook, the parent hung for good (a rank's
    first failure importing ``fsguard.records``, and ``logging`` with it, while the main thread forked: 2 of 30
    forker runs under load, ``test_long_lived_forked_children_keep_no_lock[file]``)."""
    result = run_python(fsguard_python, LATE_FORK, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {"status": 0, "written": [["opening"]]}


FORK_WHILE_A_SECTION_LOGS = """
import json, os, sys, threading, time
from fsguard import state

assert "logging" not in sys.modules, "imported before the first section"
state.FORK_WAIT_S = 3.0
late = []
state.report_late_forks(lambda waited, threads: late.append(threads))
inside = threading.Event()


def section():  # the first failure's imports: fsguard.records imports logging, whose module body takes its lock
    with state.Unforkable():
        import logging

        inside.set()
        while not state._gate.held:  # the fork has begun
            time.sleep(0.001)
        logging.getLogger("fsguard.test")


thread = threading.Thread(target=section, name="first-failure")
thread.start()
inside.wait()
started = time.monotonic()
pid = os.fork()
if pid == 0:
    os._exit(0)
took = time.monotonic() - started
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
thread.join()
time.sleep(0.2)  # a late fork's record is written by a thread of its own
print(json.dumps({"status": status, "late": late, "took": took}))
"""


def test_a_fork_waits_for_a_section_that_logs_not_for_its_bound(fsguard_python: Path) -> None:
    """``logging`` first imported inside a section registers its at-fork hook after the gate's, so a fork takes
    logging's lock before it waits for the section (hooks run newest first): it lends the lock back while it
    waits, and the section, which needs it, ends. Before, the fork waited out ``FORK_WAIT_S`` for a section
    waiting for that lock, and split it: the first failure's imports (``fsguard.records`` imports logging, whose
    module body takes its lock) while another thread forked."""
    result = run_python(fsguard_python, FORK_WHILE_A_SECTION_LOGS, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert (out["status"], out["late"]) == (0, []), out


FIRST_FAILURES = """
import os, posix, sys, threading
from _thread import get_ident
from fsguard import state

outside = []


class Watch:  # every import from here on is the failure path's: fsguard's, or the standard library's for it
    def find_spec(self, name, path=None, target=None):
        gate = state._gate  # none before the first section: nothing can be held back from forks yet
        if gate is not None and get_ident() not in gate.inside:
            outside.append(name)
        return None


sys.meta_path.insert(0, Watch())
base = os.environ["WHERE"]


def makedirs(name, handled):
    parent = os.path.join(base, name)
    os.mkdir(parent)
    path = os.path.join(parent, "d")
    posix.mkdir(path)  # not guarded: as a peer would have made it
    if not handled:
        os.makedirs(path)  # a would-be crash: absorbed
        return
    try:
        os.makedirs(path)  # the program handles it: deferred
    except FileExistsError:
        pass


def replace(name):
    os.mkdir(os.path.join(base, name))
    open(os.path.join(base, name, "dst"), "w").close()
    os.replace(os.path.join(base, name, "src"), os.path.join(base, name, "dst"))  # a peer's replace came first


def rmtree(name):
    import shutil  # the program's first: fsguard's handlers have imported it already, if they needed it

    shutil.rmtree(os.path.join(base, name))  # a peer removed it first


def scratch(name):  # a first rmtree that meets no failure: the walk's imports in one section, the failure's later
    import shutil

    os.makedirs(os.path.join(base, name, "sub"))
    open(os.path.join(base, name, "sub", "f"), "w").close()
    shutil.rmtree(os.path.join(base, name))
    print(sorted(m for m in sys.modules if m in ("fsguard.oracle", "fsguard.records", "fsguard.rmwalk")))


jobs = (lambda: makedirs("a", False), lambda: makedirs("b", True), lambda: replace("c"), lambda: rmtree("d"))
for job in (lambda: scratch("s"), *jobs):
    thread = threading.Thread(target=job)  # a thread's would-be crash is absorbed, not the whole program's end
    thread.start()
    thread.join()
print(outside)
"""


@pytest.mark.parametrize("mode", ["default", "serialized"])
def test_a_first_failure_imports_nothing_outside_its_section(fsguard_python: Path, tmp_path: Path, mode: str) -> None:
    """Every module the failure path imports (fsguard's and the standard library's it imports where it first
    needs them) is imported inside the first failure's section, so that no fork from another thread splits an
    import: a child waits forever for the lock of a module it inherited half-imported. Under load, 3 of 12
    ``test_forks_while_a_thread_decides_and_records`` runs had a child stuck in its first decision's
    ``import ctypes`` (``evidence.birth_time``) or ``import pathlib`` (``handlers``) outside the section. A first
    ``rmtree`` that meets no failure imports the walk's modules (in their own section), not the failure's."""
    env = {"FSGUARD": "force", "FSGUARD_LOG": str(tmp_path / "logs"), "WHERE": str(tmp_path)}
    if mode == "serialized":
        env.update(TORCHRUN_ENV, FSGUARD="1", FSGUARD_SERIALIZE="1", FSGUARD_LOCK="file")
    result = run_python(fsguard_python, FIRST_FAILURES, env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "absorbed makedirs" in result.stderr and "deferred makedirs" in result.stderr, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["['fsguard.rmwalk']", "[]"], result.stdout


GATE_BEING_MADE = """
import os, threading, time
from fsguard import state

holding, done = threading.Event(), threading.Event()


def making():  # another thread making the gate at its first section (``state._hook_gate``) when the fork comes
    with state._gate_making:
        holding.set()
        done.wait()


thread = threading.Thread(target=making)
thread.start()
holding.wait()
pid = os.fork()
if pid == 0:
    with state.Unforkable():  # the child's own first section makes its gate
        pass
    os._exit(0)
done.set()
thread.join()
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    exited, status = os.waitpid(pid, os.WNOHANG)
    if exited:
        print(os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.01)
else:
    os.kill(pid, 9)
    print("hung")
"""


def test_a_child_forked_while_the_gate_was_being_made_makes_its_own(fsguard_python: Path) -> None:
    """The lock around making the gate is made anew in a forked child: a fork while another thread was making it
    left the child's copy held, and the child's first section waited for it forever."""
    result = run_python(fsguard_python, GATE_BEING_MADE, timeout=60)
    assert (result.returncode, result.stdout.strip()) == (0, "0"), result.stderr[-2000:]

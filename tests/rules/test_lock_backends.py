"""Every serialization backend speaks the whole ``Backend`` protocol, and keeps its contract.

The serializer calls these methods directly (no ``getattr`` that would let a missing capability pass silently):
a backend that lacks one, or whose announcement of a rename is not seen by a peer, fails here. Each backend
runs through the same contract, in-process: two instances stand for two ranks (for the store, two clients of
one ``TCPStore`` server; for files, two instances on one private lock directory).
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from fsguard.locks.base import Backend, LockTimeout
from fsguard.locks.file import FileBackend
from fsguard.locks.store import StoreBackend

BACKENDS = (FileBackend, StoreBackend)
PROTOCOL = sorted(
    name for name, value in vars(Backend).items() if not name.startswith("_") and inspect.isfunction(value)
)


def test_the_protocol_names_every_capability_the_serializer_calls() -> None:
    """The capabilities a rename-first serializer needs are part of the protocol itself."""
    assert {"acquire", "release", "announce", "withdraw", "pending", "flight_claim"} <= set(PROTOCOL), PROTOCOL


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_each_backend_implements_the_whole_protocol(backend: type) -> None:
    for name in PROTOCOL:
        method = getattr(backend, name, None)
        assert callable(method), f"{backend.__name__} lacks {name}()"
        wanted = list(inspect.signature(getattr(Backend, name)).parameters)
        have = list(inspect.signature(method).parameters)
        assert have[: len(wanted)] == wanted, f"{backend.__name__}.{name}{have} is not Backend.{name}{wanted}"
    assert isinstance(getattr(backend, "name", None), str) and getattr(backend, "scope", None) in ("job", "node")


@pytest.fixture(params=BACKENDS, ids=lambda b: b.__name__)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Backend, Backend]:
    """Two backends that stand for two ranks of one job (of one node, for the file backend)."""
    make: Callable[[], Backend]
    if request.param is FileBackend:
        (tmp_path / "locks").mkdir(mode=0o755)
        make = partial(FileBackend, "node0", candidates=(str(tmp_path / "locks"),))
    else:
        port = request.getfixturevalue("store_port")
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": str(os.getpid())}
        make = partial(StoreBackend, 15.0, env)  # a loaded machine took 3 s to connect once (2026-12-06)
    return make(), make()


def test_a_lock_excludes_the_other_rank(pair: tuple[Backend, Backend]) -> None:
    one, two = pair
    held = one.acquire("k1", 1.0, "one")
    with pytest.raises(LockTimeout):
        two.acquire("k1", 0.2, "two")
    one.release(held)
    again = two.acquire("k1", 1.0, "two")
    two.release(again)


def test_a_release_lets_a_waiter_in(pair: tuple[Backend, Backend]) -> None:
    one, two = pair
    held = one.acquire("k2", 1.0, "one")
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(two.acquire("k2", 5.0, "two")))
    waiter.start()
    one.release(held)
    waiter.join(10)
    assert got, "the waiter never got the lock"
    two.release(got[0])


def test_an_announced_rename_is_pending_for_the_other_rank_until_withdrawn(pair: tuple[Backend, Backend]) -> None:
    one, two = pair
    assert not two.pending("k3")
    token = one.announce("k3")
    assert two.pending("k3"), "a peer's announced rename is not seen: the rmtree would not let it go first"
    one.withdraw(token)
    assert not two.pending("k3")


def test_two_announcements_stay_pending_until_both_are_withdrawn(pair: tuple[Backend, Backend]) -> None:
    one, two = pair
    first, second = one.announce("k4"), two.announce("k4")
    one.withdraw(first)
    assert one.pending("k4") or two.pending("k4")
    two.withdraw(second)
    assert not one.pending("k4") and not two.pending("k4")


def test_a_flight_is_shared_or_declined(pair: tuple[Backend, Backend]) -> None:
    one, two = pair
    first = one.flight_claim("f1", "one")
    if first is None:
        assert one.scope == "node" and two.flight_claim("f1", "two") is None
        return
    performer, held = first
    assert performer
    joined = two.flight_claim("f1", "two")
    assert joined is not None and joined[0] is False
    assert one.flight_done("f1", held, b"ok") == 0


def _in_a_forked_child(check: Callable[[], bool]) -> bool:
    """``check()`` run in a forked child of this process (its answer as the child's exit code)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if check() else 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_forked_child_starts_each_backend_afresh(pair: tuple[Backend, Backend]) -> None:
    """A rank that forks while it holds a lock (a DataLoader worker, an async checkpoint): the child shares none
    of its parent's store connections and keeps none of its lock descriptors, and giving back its copy of the
    parent's lock leaves the lock with the parent."""
    one, two = pair
    held = one.acquire("k6", 1.0, "one")

    def fresh() -> bool:
        if isinstance(one, StoreBackend):
            parts_fresh = one.requests.store is None and one.wakes.waiter is None
        else:
            parts_fresh = isinstance(one, FileBackend) and not one._open
        one.release(held)  # the parent's lease: not the child's to give back
        return parts_fresh

    assert _in_a_forked_child(fresh), "a forked child kept its parent's connection or lock descriptors"
    with pytest.raises(LockTimeout):
        two.acquire("k6", 0.2, "two")  # still the parent's
    one.release(held)


def test_a_forkable_object_is_reset_in_a_forked_child_and_held_weakly() -> None:
    """``state.forkable``: what the lock backends and the serializer register to be made afresh in a forked
    child, without being kept alive by it."""
    import gc
    import weakref

    from fsguard import state

    class Resettable:
        def __init__(self) -> None:
            self.reset = False

        def after_fork_in_child(self) -> None:
            self.reset = True

    kept, dropped = Resettable(), Resettable()
    state.forkable(kept)
    state.forkable(dropped)
    gone = weakref.ref(dropped)
    del dropped
    gc.collect()
    assert gone() is None, "state.forkable kept an object alive"
    assert _in_a_forked_child(lambda: kept.reset), "a forked child did not reset a forkable object"
    assert not kept.reset  # the parent's object is left alone


class _Counted:
    """A store client that counts the requests sent through it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.requests = inner, 0

    def __getattr__(self, name: str) -> Any:
        self.requests += 1
        return getattr(self.inner, name)


def test_a_hand_off_wakes_the_next_ticket_only_and_passes_over_one_that_gave_up(store_port: int) -> None:
    """Issue 24, the lock convoy: a release wakes the waiter of the next ticket and no other (the waiters behind
    it send no request at all), and a waiter that gave up does not stall the queue: its turn is passed on at once,
    not a lease later (the lease here is 10 s: the waiter served says how it was served)."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port), "TORCHELASTIC_RESTART_COUNT": f"q{os.getpid()}"}
    holder, quitter, *waiters = [StoreBackend(30.0, env) for _ in range(4)]
    first = holder.acquire("q", 1.0, "holder")
    with pytest.raises(LockTimeout):
        quitter.acquire("q", 0.2, "quitter")  # ticket 2, gives up
    got: dict[int, Any] = {}
    events = [threading.Event() for _ in waiters]
    for waiter in waiters:  # connected first: a loaded machine once took 5 s to connect the second (CI, 2026-12-06)
        waiter.requests.connect()

    def wait(i: int) -> None:
        # A bound past the lease: a turn passed on a lease later shows in the note (asserted below), not as a timeout.
        got[i] = waiters[i].acquire("q", 25.0, f"waiter {i}")
        events[i].set()

    threads = []
    for i in range(len(waiters)):  # tickets 3 and 4, in this order
        threads.append(threading.Thread(target=wait, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while holder.requests.add(holder.prefix + "q/n", 0) < 3 + i:
            assert time.monotonic() < deadline, "no ticket taken"
            time.sleep(0.005)
    counted = [_Counted(w.requests.store) for w in waiters]
    for backend, client in zip(waiters, counted, strict=True):
        backend.requests.store = client
    # A waiter may still be between taking its ticket and blocking (a loaded machine): wait until the last one
    # sends nothing more for half a second, then count what the hand-off makes it send.
    before, quiet_since, deadline = -1, time.monotonic(), time.monotonic() + 10
    while time.monotonic() - quiet_since < 0.5 and time.monotonic() < deadline:
        if counted[1].requests != before:
            before, quiet_since = counted[1].requests, time.monotonic()
        time.sleep(0.05)
    holder.release(first)
    assert events[0].wait(30), "the next live ticket was not served"
    assert got[0].note == "" and not got[0].took_over, got[0].note  # served by the hand-off, not passed over
    assert counted[1].requests == before, "a waiter behind the next ticket was woken by the hand-off"
    assert not events[1].is_set()
    waiters[0].release(got[0])
    assert events[1].wait(30), "the last ticket was not served"
    waiters[1].release(got[1])
    for thread in threads:
        thread.join(10)


def test_a_ticket_that_never_claims_its_turn_is_passed_over_after_a_lease(store_port: int) -> None:
    """A rank killed while queued (here: a ticket taken and never used) does not stall the queue for good: its
    turn, unclaimed for a lease (0.5 s here), goes to the next ticket."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port), "TORCHELASTIC_RESTART_COUNT": f"d{os.getpid()}"}
    holder, waiter = StoreBackend(1.5, env), StoreBackend(1.5, env)
    first = holder.acquire("d", 1.0, "holder")
    assert holder.requests.add(holder.prefix + "d/n", 1) == 2  # the ghost's ticket
    got: list[Any] = []
    # Given back first: the turn is then ticket 2's, whatever the holder's renewals do on a loaded machine.
    holder.release(first)
    thread = threading.Thread(target=lambda: got.append(waiter.acquire("d", 5.0, "waiter")))
    thread.start()
    thread.join(10)
    assert got, "the queue stalled behind a ticket that never came"
    assert "ticket 2 did not claim its turn" in got[0].note and not got[0].took_over, got[0].note
    waiter.release(got[0])

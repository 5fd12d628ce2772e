"""The small protocol every lock backend speaks, and how a lock's holder is named.

A backend does one thing: take or give back a mutual-exclusion lock named by a short key, waiting at most a
given time. What to lock, in which order, what to record and when to give up is ``Serializer``'s business.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

from .. import state


class LockTimeout(Exception):
    """The lock stayed held by someone else for the whole wait."""

    def __init__(self, holder: str | None, waited_s: float) -> None:
        super().__init__(f"held by {holder or 'an unknown holder'} for {waited_s:.2f} s")
        self.holder = holder
        self.waited_s = waited_s


class Unreachable(Exception):
    """The backend cannot be used right now (no store to talk to, unsafe lock directory...)."""


class Held:
    """One lock this thread holds, and what taking it took.

    ``holder`` is who held the lock while we waited (None when it was free). ``took_over`` says we took it from a holder
    whose lease had run out (dead or stalled). The backend fills in ``lost`` when the lock was taken from *us* before we
    gave it back. (A plain class: a dataclass would cost a millisecond of every serialized job's startup.)
    """

    __slots__ = ("holder", "key", "lock", "lost", "note", "pid", "token", "took_over", "waited_s")

    def __init__(
        self, key: str, token: Any, waited_s: float = 0.0, holder: str | None = None, took_over: bool = False
    ) -> None:
        self.key = key
        self.token = token
        self.waited_s = waited_s
        self.holder = holder
        self.took_over = took_over
        self.note = ""
        self.lost: str | None = None
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child never gives back its parent's lock (see ``forked``)

    def forked(self) -> bool:
        """Taken by another process: this forked child's copy is not its to give back."""
        return self.pid != os.getpid()


class Backend(Protocol):
    """Every capability the serializer uses. Each backend implements all of them. Mypy checks it, and
    ``tests/rules/test_lock_backends.py`` runs every backend through the same contract.

    Mutual exclusion by key: ``acquire`` raises ``LockTimeout`` or ``Unreachable``; the caller treats anything else as
    ``Unreachable``. ``release`` returns nothing and never raises for a lock that was lost: it sets ``held.lost``
    instead.

    Renames announced ahead of their locks: a rename says it is coming (``announce``, before waiting for its locks) and
    is done (``withdraw``). ``pending`` tells an ``rmtree`` of the same key that a peer's rename of it is on its way.
    The rmtree then lets it go first: the rename wins. An announcement must be visible to every process the backend's
    ``scope`` covers.

    Singleflight: ``flight_claim`` returns None where the backend cannot share one call's outcome with peers
    (then ``flight_wait``/``flight_done`` are never called). With ``reuse``, a finished call's outcome may be
    handed to a later identical call (``(False, REUSED)``) until ``moved`` says that a removal or rename of the
    job started.

    ``prepare`` opens what the first serialized call would open (a connection), ahead of it, from a background
    thread; it may do nothing. Errors are the first call's to report."""

    name: str
    scope: str  # "job" (every rank of the job) or "node" (ranks of this node only)

    def prepare(self) -> None: ...

    def acquire(self, key: str, timeout: float, what: str) -> Held: ...

    def release(self, held: Held) -> None: ...

    def announce(self, key: str) -> Any: ...

    def withdraw(self, token: Any) -> None: ...

    def pending(self, key: str) -> bool: ...

    def flight_claim(self, flight: str, what: str, reuse: bool = False) -> tuple[bool, Any] | None: ...

    def moved(self, ended: bool) -> None: ...

    def flight_wait(self, flight: str, value: bytes, timeout: float) -> tuple[bytes | None, bool, str]: ...

    def flight_done(self, flight: str, held: Held, outcome: bytes) -> int: ...


def holder_text(rank: int | None, host: str, what: str) -> str:
    """How a holder is named in lock values and records. ``rank 3 pid 4711 on node7 (rmtree /ckpt/tmp)``."""
    who = f"rank {rank} " if rank is not None else ""
    return f"{who}pid {os.getpid()} on {host} ({what})"


def process_nonce() -> str:
    """Random per process (renewed after fork), so tokens of two processes never compare equal."""
    return f"{state.STATE.nonce}.{os.getpid()}"

"""The small protocol every lock backend speaks, and the words a lock's holder is known by.

A backend does one thing: take or give back a mutual-exclusion lock named by a short key, waiting at most a
given time. What to lock, in which order, what to record and when to give up is ``Serializer``'s business.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol


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

    ``holder`` is who held the lock while we waited (None when it was free), ``took_over`` says that we took
    it from a holder whose lease had run out (dead or stalled), and ``lost`` is filled in by the backend when
    the lock was taken from *us* before we gave it back. (A plain class: a dataclass would cost a
    millisecond of every serialized job's startup.)
    """

    __slots__ = ("holder", "key", "lock", "lost", "note", "token", "took_over", "waited_s")

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


class Backend(Protocol):
    """Mutual exclusion by key. ``acquire`` raises ``LockTimeout`` or ``Unreachable`` (or anything else,
    which the caller treats as ``Unreachable``); ``release`` returns nothing and never raises for a lock
    that was lost: it sets ``held.lost`` instead."""

    name: str
    scope: str  # "job" (every rank of the job) or "node" (ranks of this node only)

    def acquire(self, key: str, timeout: float, what: str) -> Held: ...

    def release(self, held: Held) -> None: ...


_NONCE = os.urandom(4).hex()


def holder_text(rank: int | None, host: str, what: str) -> str:
    """How a holder is named in lock values and records: ``rank 3 pid 4711 on node7 (rmtree /ckpt/tmp)``."""
    who = f"rank {rank} " if rank is not None else ""
    return f"{who}pid {os.getpid()} on {host} ({what})"


def process_nonce() -> str:
    """Random per process (renewed after fork), so tokens of two processes never compare equal."""
    return f"{_NONCE}.{os.getpid()}"


def _renew_nonce() -> None:
    global _NONCE
    _NONCE = os.urandom(4).hex()


os.register_at_fork(after_in_child=_renew_nonce)

"""Job-wide serialization: a lease lock in the job's own ``torch.distributed`` key-value store.

Which store: the server behind the default process group's store once ``init_process_group`` has run
(``PrefixStore`` layers unwrapped, so every rank meets under the same keys whatever its group's prefix);
before that, the launcher's store at ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent store; or rank 0's server
once it has started one). Its keys live under ``/fsguard/lock/<restart>/`` where no torch key lives. torch is
imported on the first serialized call, never at startup.

Connections (the requests', the one for waits, the alarms that bound waits): ``fsguard.locks.connection``.

The lock: a ticket queue under key ``/fsguard/lock/<restart>/<stripe>`` (``K``). A caller takes a ticket
``t = add(K/n, 1)``; the lock's value is either a reservation, free for one ticket only (``=<t>``; empty for
ticket 1), or its holder's ``<t>:<token>#<seq> <holder text>``. Taking it is ``compare_set(K, reservation of
t, mine)``; giving it back is ``compare_set(K, mine, reservation of t + 1)`` (it changes the value only if it is
still ours) and then ``add(K/go/<t+1>, 1)``, which wakes the waiter of ticket ``t + 1``, and only that one. An
uncontended call costs five round trips (ticket, take, give back, wake the next ticket, delete its own go key);
a waiter four more or less whatever the number of waiters (ticket, a failed take, one ``wait`` on its go key, the
take): store requests per hand-off do not grow with the queue.

Waiting is not polling: a waiter blocks in the store's ``wait`` on its own go key. Waits use a client connection
of their own, so a thread blocked in one never delays the renewal of a lock this process holds. A wait ends by
a key being set, never by the socket timing out (c10d prints two warning lines for every wait that times out):
at the end of its bound, the waiter's own alarm thread adds 0 to the key it waits on (``Alarms``); the waiter
then deletes the key and looks at the lock's value again (a hand-off in between shows in the value), so a go
key never wakes it twice. The go key of a ticket is deleted by its holder when it gives the lock back.

Tickets that do not come: a waiter that gives up at its bound adds ``DEPART`` to its go key, and passes the turn
on itself if it came already; a hand-off that finds ``DEPART`` there passes the turn on at once. A ticket whose
turn came but was not claimed for a lease (its process killed before its turn, or frozen) is passed over by
the next ticket; a thread that comes back to find its turn passed takes a new ticket. Keys live under the
restart count, so a restarted job starts with empty queues.

Leases, without trusting clocks: while a lock is held, a daemon thread of the holder rewrites its value
(``seq`` + 1, again by ``compare_set``) every quarter lease. A waiter that sees the *same* value for a whole
lease on its own monotonic clock knows the holder stopped renewing (killed, or frozen), and takes the lock
over (the next ticket looks at the value every eighth of a lease, the others once a lease): the next ticket
takes it with ``compare_set(K, that value, mine)``, the waiters behind it pass it on to that ticket a lease
later (it may be gone as well). Atomic, so exactly one wins, and a holder that wakes up again finds its lock
gone (and says so in a record) instead of clearing the new owner's. No wall-clock times are compared, so clock
skew between nodes does not matter.

Lease length: a third of ``FSGUARD_LOCK_TIMEOUT``, between 0.5 s and 10 s (10 s at the default 30 s). A
peer of a killed holder is then served *serialized* after at most one lease, well inside its own bound;
renewal keeps a long ``rmtree`` of a live holder safe however long it takes (its waiters time out and go
on unserialized, with a record, rather than "taking over" from a live process).

Parts, one class each (a forked child makes them all afresh): ``Requests``, the connection requests go
through; ``Wakes``, the connection for waits, the waiters' alarms and the keys that wake them; ``_Renewer``,
the thread that renews what this process holds; ``_Tickets``, the lock's ticket queue; ``_Flights``,
singleflight. ``StoreBackend`` is the ``Backend`` the serializer calls, made of them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..state import forkable
from ..waiting import Backoff
from .base import Held, LockTimeout, Unreachable, process_nonce
from .connection import Requests, Wakes, holder_of, running
from .flight import REUSED  # a finished flight whose outcome later identical calls may reuse: ``=ok <moves>``

MOVE_START = 1 << 32  # the job's moves counter: started moves in its high bits, ended moves in its low bits
MOVE_ENDS = MOVE_START - 1

SEAL = 1 << 40  # added to a flight's waiter count by its performer when it ends: once for "ok", twice for "err"
DEPART = 1 << 30  # added to a ticket's go counter by its waiter when it gives up: a hand-off passes the turn on


def lease_for(lock_timeout: float) -> float:
    return min(max(lock_timeout / 3.0, 0.5), 10.0)


@dataclass
class _Lease:
    """One lock or flight this process holds, and its value in the store: renewing it rewrites the value."""

    key: str
    token: bytes
    what: bytes
    seq: int = 0
    released: bool = False
    ticket: int = 0  # a lock's place in its queue (0: a flight)
    epoch: int | None = None  # a reusable flight: the job's moves counter read before it was performed

    def value(self) -> bytes:
        if self.ticket:
            return b"%d:%s#%d %s" % (self.ticket, self.token, self.seq, self.what)
        return b"%s#%d %s" % (self.token, self.seq, self.what)


def _reserved(ticket: int) -> bytes:
    """The value of a lock that is free for ``ticket`` (and for no other): empty for the first ticket."""
    return b"" if ticket == 1 else b"=%d" % ticket


def _ticket_of(value: bytes) -> int:
    """The ticket a lock value belongs to: a reservation (``=<t>``, or empty for ticket 1) or a holder's value
    (``<t>:<token>#<seq> <holder text>``)."""
    if not value:
        return 1
    head = value[1:] if value.startswith(b"=") else value.partition(b":")[0]
    return int(head) if head.isdigit() else 0


def _holds(value: bytes) -> bool:
    """Whether a lock value is a holder's (not a reservation)."""
    return bool(value) and not value.startswith(b"=")


def _sealed(count: int) -> bytes | None:
    """The outcome a flight's sealed waiter count carries (``SEAL`` added once: ``ok``, twice: ``err``), or None
    while it is not sealed."""
    return b"err" if count >= 2 * SEAL else b"ok" if count >= SEAL else None


def _go_key(name: str, ticket: int) -> str:
    return f"{name}/go/{ticket}"


class _Renewer:
    """The holder's side of a lease: one daemon thread rewrites the value of every lock and flight this process
    holds every quarter lease, so that a waiter can tell a live holder (however long its call takes) from one
    that was killed or froze, without comparing clocks."""

    def __init__(self, requests: Requests, wakes: Wakes, lease_s: float) -> None:
        self._requests = requests
        self._wakes = wakes
        self._lease_s = lease_s
        self._cond = threading.Condition()
        self._held: dict[int, Held] = {}
        self._thread: threading.Thread | None = None

    def hold(self, held: Held) -> Held:
        with self._cond:
            self._held[id(held)] = held
            self._thread = running(self._thread, self._loop, "fsguard-lease")
            self._cond.notify()
        return held

    def drop(self, held: Held) -> None:
        with self._cond:
            self._held.pop(id(held), None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._held:
                    self._cond.wait()
            time.sleep(self._lease_s / 4)
            with self._cond:
                holds = list(self._held.values())
            for held in holds:
                try:
                    self._renew(held)
                except Exception:  # noqa: BLE001 - a failed renewal shows as a lost lease at release
                    pass

    def _renew(self, held: Held) -> None:
        lease: _Lease = held.token
        with held.lock:
            if lease.released or held.lost:
                return
            old = lease.value()
            lease.seq += 1
            try:
                after = self._requests.cas(lease.key, old, lease.value())
            except BaseException:
                lease.seq -= 1
                raise
            if after != lease.value():
                lease.seq -= 1
                # compare_set answers the expected value itself when the key has gone
                held.lost = "cleared by someone else" if after in (old, b"") else f"taken over by {holder_of(after)}"
                return
        if not lease.ticket:  # a flight's waiters wait for its value to change; a lock's, for their turn
            self._wakes.post(lease.key, old)


class _Tickets:
    """The lock itself: a ticket queue per key (see the module docstring). Each hand-off wakes the next ticket
    only, a ticket that gave up or never came is passed over, and a holder whose lease stopped being renewed is
    taken over by exactly one waiter."""

    def __init__(self, requests: Requests, wakes: Wakes, renewer: _Renewer, prefix: str, lease_s: float) -> None:
        self._requests = requests
        self._wakes = wakes
        self._renewer = renewer
        self._prefix = prefix
        self._lease_s = lease_s
        self._tokens = itertools.count()

    def acquire(self, key: str, timeout: float, what: str) -> Held:
        self._requests.connect()
        name = self._prefix + key
        started = time.monotonic()
        holder: str | None = None
        try:
            while True:  # a second ticket only when this one's turn was passed on while this thread stalled
                lease = _Lease(
                    name,
                    b"%s.%d" % (process_nonce().encode(), next(self._tokens)),
                    what.encode("utf-8", "replace"),
                    ticket=self._requests.add(name + "/n", 1),
                )
                held, holder = self._queue(key, lease, started, timeout, holder)
                if held is not None:
                    return self._renewer.hold(held)
        except (LockTimeout, Unreachable):
            raise
        except Exception as error:
            raise self._requests.broken(error) from error

    def _queue(
        self, key: str, lease: _Lease, started: float, timeout: float, holder: str | None
    ) -> tuple[Held | None, str | None]:
        """Wait for ``lease``'s ticket to be served: (the lock, who held it), or (None, ...) when its turn came and
        was passed on while this thread could not claim it (it then takes a new ticket)."""
        name, ticket, mine = lease.key, lease.ticket, lease.value()
        go = _go_key(name, ticket)
        seen, since = b"", started
        woken = False  # go key set (by a hand-off or this waiter's alarm): deleted before waiting on it again
        backoff = Backoff(timeout, 0.0002, 0.05, started=started)  # its steps: only a store that cannot wait
        while True:
            current = self._requests.cas(name, _reserved(ticket), mine)
            if current == mine:
                return Held(key, lease, time.monotonic() - started, holder), holder
            now = time.monotonic()
            at = _ticket_of(current)
            if at > ticket:
                return None, holder
            holder = holder_of(current) or holder
            if woken:
                # then look again: a hand-off between the look above and here is in the value
                self._requests.delete(go)
                woken = False
                continue
            successor = at + 1 == ticket
            if current != seen:
                seen, since = current, now
            elif now - since >= self._lease_s * (1 if successor else 2):
                # The holder of ticket ``at`` stopped renewing (killed or frozen), or ticket ``at`` has not
                # claimed its turn for a lease: its successor takes the lock over; the others pass it on a lease
                # later (the successor may be gone as well).
                if self._skip(name, current, at, mine if successor else None):
                    return self._taken_over(key, lease, started, holder, current, now - since), holder
                seen, since = b"", now
                continue
            if backoff.left() <= 0:
                self._depart(name, ticket)
                raise LockTimeout(holder, backoff.waited())
            # The next ticket looks at the value every eighth of a lease (a killed holder is then taken over about
            # a lease after its last renewal), the others once a lease (and act on two).
            due = since + 2 * self._lease_s - now + 0.01
            bound = min(backoff.left(), self._lease_s / 8 if successor else min(due, self._lease_s))
            woke = self._wakes.wait(go, bound)
            if woke is None:  # a store that cannot wait (not a TCPStore): poll
                backoff.pause(bound)
            else:
                woken = True

    @staticmethod
    def _taken_over(key: str, lease: _Lease, started: float, holder: str | None, stale: bytes, for_s: float) -> Held:
        """The lock, claimed from ticket ``stale``'s holder that stopped renewing, or from a ticket that did not
        claim its turn."""
        held = Held(key, lease, time.monotonic() - started, holder, took_over=_holds(stale))
        held.note = (
            f"; took over its lease, not renewed for {for_s:.1f} s (holder killed or frozen)"
            if _holds(stale)
            else f"; ticket {_ticket_of(stale)} did not claim its turn for {for_s:.1f} s: passed over"
        )
        return held

    def _skip(self, name: str, stale: bytes, at: int, mine: bytes | None) -> bool:
        """Pass the turn of ticket ``at`` (lock value ``stale``) on to the next ticket; with ``mine``, that ticket
        is this waiter's: take the lock itself. True when it did."""
        if mine is not None:
            if self._requests.cas(name, stale, mine) != mine:
                return False
        elif self._requests.cas(name, stale, _reserved(at + 1)) == _reserved(at + 1):
            self._hand(name, at + 1)
        if at > 1:
            self._requests.delete(_go_key(name, at))
        return mine is not None

    def _hand(self, name: str, ticket: int) -> None:
        """The lock is now reserved for ``ticket``: wake its waiter (only that one). A ticket whose waiter gave
        up (``DEPART`` in its counter) is passed on at once."""
        while self._requests.add(_go_key(name, ticket), 1) >= DEPART:
            self._requests.delete(_go_key(name, ticket))
            if self._requests.cas(name, _reserved(ticket), _reserved(ticket + 1)) != _reserved(ticket + 1):
                return
            ticket += 1

    def _depart(self, name: str, ticket: int) -> None:
        """This waiter gives up: its ticket must not stall the queue. Marked first (a hand-off that comes later
        passes the turn on), then passed on here if the turn came already. Never raises."""
        try:
            self._requests.add(_go_key(name, ticket), DEPART)
            if self._requests.cas(name, _reserved(ticket), _reserved(ticket + 1)) == _reserved(ticket + 1):
                self._requests.delete(_go_key(name, ticket))
                self._hand(name, ticket + 1)
        except Exception:  # noqa: BLE001 - the next waiter then passes the turn on a lease later
            pass

    def release(self, held: Held) -> None:
        if held.forked():
            return  # a forked child's copy: the lease is the parent's, renewed and given back by it
        lease: _Lease = held.token
        self._renewer.drop(held)
        with held.lock:
            lease.released = True
            if held.lost:
                return
            try:
                after = self._requests.cas(lease.key, lease.value(), _reserved(lease.ticket + 1))
                if after != _reserved(lease.ticket + 1):
                    held.lost = f"taken over by {holder_of(after) or 'a later ticket'}"
                else:
                    self._hand(lease.key, lease.ticket + 1)
                if lease.ticket > 1:
                    self._requests.delete(_go_key(lease.key, lease.ticket))
            except Exception as error:
                raise self._requests.broken(error) from error


class _Flights:
    """Singleflight (``fsguard.locks.flight``): one rank performs a call, the others wait for its outcome. A
    flight is a lease like a lock (renewed while it is performed, so its waiters can tell a killed performer),
    and its outcome rides on the seal added to its waiter count."""

    def __init__(self, requests: Requests, wakes: Wakes, renewer: _Renewer, prefix: str, lease_s: float) -> None:
        self._requests = requests
        self._wakes = wakes
        self._renewer = renewer
        self._prefix = prefix + "flight/"
        self._lease_s = lease_s
        self._tokens = itertools.count()

    def claim(self, flight: str, what: str, reuse: bool = False) -> tuple[bool, Any] | None:
        """See ``StoreBackend.flight_claim``."""
        self._requests.connect()
        if self._requests.tcp is None:
            return None
        lease = _Lease(
            self._prefix + flight,
            b"%s.f%d" % (process_nonce().encode(), next(self._tokens)),
            what.encode("utf-8", "replace"),
        )
        # The job's moves counter is read only where it decides (a waiter for a flight in progress never needs
        # it): after the claim, still before the call is made (see ``StoreBackend.moved``), or on a reusable
        # outcome, as fresh as the request that found it.
        moves: int | None = None
        expected = b""
        for _ in range(4):  # a finished flight is taken over in turn by one rank per move of the job at most
            current = self._requests.cas(lease.key, expected, lease.value())
            if current == lease.value():
                if reuse:
                    moves = self.moves() if moves is None else moves
                    if moves >> 32 == moves & MOVE_ENDS:  # no move under way: reusable
                        lease.epoch = moves
                return True, self._renewer.hold(Held(flight, lease))
            if not current.startswith(REUSED):
                return False, current  # performed right now: wait for its outcome
            if reuse:
                moves = self.moves() if moves is None else moves
                if current == b"%s %d" % (REUSED, moves):
                    return False, REUSED  # performed and returned, and no move of the job started since
            expected = current  # a move since (or not reusable by this call): perform it again
        return None

    def moves(self) -> int:
        """The job's moves counter (``StoreBackend.moved``): those started times ``MOVE_START``, plus those
        ended."""
        return self._requests.add(self._prefix + "moved", 0)

    def moved(self, ended: bool) -> None:
        self._requests.add(self._prefix + "moved", 1 if ended else MOVE_START)

    def wait(self, flight: str, value: bytes, timeout: float) -> tuple[bytes | None, bool, str]:
        """See ``StoreBackend.flight_wait``."""
        key = self._prefix + flight
        token = value.partition(b" ")[0].partition(b"#")[0]
        joined = self._requests.add(key + "/n/" + token.decode("ascii", "replace"), 1)
        if joined > SEAL:
            return _sealed(joined), True, "gone"
        started = since = time.monotonic()
        seen, stale, current = value, None, b""
        backoff = Backoff(timeout, 0.0002, 0.05, started=started)  # its steps: only where no blocking wait can
        while True:
            if not current:
                current = value  # first, wait on the value the claim saw: no peek before
            else:  # woken (or polling): the sealed count is the common answer, in one request
                sealed = self._outcome(key, token)
                if sealed is not None:
                    return sealed, False, "gone"
                current = self._requests.cas(key, b"\0", b"\0")  # a peek: the value ("" or b"\0" when ended)
                if not current.startswith(token + b"#"):
                    return self._outcome(key, token), False, "gone"
            now = time.monotonic()
            if current != seen:
                seen, since = current, now
            elif now - since >= self._lease_s:
                self._requests.cas(key, current, b"")  # close the dead flight: later callers make their own calls
                return None, False, "dead"
            remaining = backoff.left()
            if remaining <= 0:
                return None, False, "timeout"
            due = since + self._lease_s - now + 0.01
            woke = None if current == stale else self._wakes.wait_for_change(key, current, min(remaining, due))
            if woke is None:
                backoff.pause(due)
            elif woke:
                stale = current

    def _outcome(self, key: str, token: bytes) -> bytes | None:
        """The outcome a closed flight's sealed count carries; None: closed without one (its performer was
        found dead)."""
        return _sealed(self._requests.add(key + "/n/" + token.decode("ascii", "replace"), 0))

    def done(self, held: Held, outcome: bytes) -> int:
        """See ``StoreBackend.flight_done``."""
        lease: _Lease = held.token
        count_key = lease.key + "/n/" + lease.token.decode("ascii", "replace")
        self._renewer.drop(held)
        with held.lock:
            lease.released = True
            seal = SEAL if outcome == b"ok" else 2 * SEAL
            shared = self._requests.add(count_key, seal) - seal
            ended = lease.value()
            after = b"%s %d" % (REUSED, lease.epoch) if outcome == b"ok" and lease.epoch is not None else b""
            self._requests.cas(lease.key, ended, after)
        if shared:
            self._wakes.post(lease.key, ended)  # wake them (a later joiner has the outcome without waiting)
        self._wakes.expire(count_key)
        return shared


class StoreBackend:
    """Lease locks in the job's key-value store (see the module docstring): the ``Backend`` the serializer
    calls, made of its parts (the connection for requests, the waits, the lease renewer, the ticket queue, the
    flights), which a forked child makes afresh."""

    name = "store"
    scope = "job"

    def __init__(self, lock_timeout: float, env: Mapping[str, str]) -> None:
        self.lease_s = lease_for(lock_timeout)
        self.prefix = f"/fsguard/lock/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self._lock_timeout = lock_timeout
        self._env = env
        self._reset()
        forkable(self)

    @property
    def address(self) -> str | None:
        """Where requests go (``host:port``, and whose client), once connected."""
        return self.requests.address

    def after_fork_in_child(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Fresh parts (also in a forked child: the parent's connections and threads are not ours)."""
        self.requests = Requests(self._lock_timeout, self._env, lambda: self.wakes.open_soon())
        self.wakes = Wakes(self.requests, self.lease_s)
        renewer = _Renewer(self.requests, self.wakes, self.lease_s)
        self._tickets = _Tickets(self.requests, self.wakes, renewer, self.prefix, self.lease_s)
        self._flights = _Flights(self.requests, self.wakes, renewer, self.prefix, self.lease_s)

    def prepare(self) -> None:
        """Connect now, ahead of the first serialized call (a background thread's job), the connection for waits
        too. Never raises."""
        try:
            self.requests.connect()
        except Exception:  # noqa: BLE001 - the first call tries again (after RETRY_S) and records why
            return
        self.wakes.open()

    # --- the lock: a ticket queue ------------------------------------------------------------------------

    def acquire(self, key: str, timeout: float, what: str) -> Held:
        return self._tickets.acquire(key, timeout, what)

    def release(self, held: Held) -> None:
        self._tickets.release(held)

    # --- renames announced ahead of their locks (fsguard.locks.serializer): a counter per stripe ----------

    def announce(self, key: str) -> str:
        """Count a rename of ``key`` as on its way (every rank of the job sees the counter)."""
        self._count(key, 1)
        return key

    def withdraw(self, token: str) -> None:
        self._count(token, -1)

    def pending(self, key: str) -> bool:
        return self._count(key, 0) > 0

    def _count(self, key: str, amount: int) -> int:
        try:
            return self.requests.add(self.prefix + "rename/" + key, amount)
        except Unreachable:
            raise
        except Exception as error:
            raise self.requests.broken(error) from error

    # --- singleflight (fsguard.locks.flight): one rank performs, the others wait for its outcome ---------

    def flight_claim(self, flight: str, what: str, reuse: bool = False) -> tuple[bool, Any] | None:
        """(True, the flight's ``Held``) for the performer, (False, the flight's current value) for a waiter;
        None when this store cannot wait on keys (no singleflight). A flight is a lease like a lock: renewed by
        the holder's renewal thread while it is performed, so that its waiters can tell a killed performer.

        ``reuse``: the call's outcome stays true until something of the job is removed or renamed (a
        ``makedirs``: the directory exists). Its performer then leaves ``=ok <moves>`` behind, and a later
        identical call gets (False, ``REUSED``) while the job's moves counter still reads the same: the outcome
        applies without a filesystem call. After a move, the first rank to come performs the call again."""
        return self._flights.claim(flight, what, reuse)

    def moved(self, ended: bool) -> None:
        """A removal or rename of this job starts (``ended`` False), or ended: outcomes published before no
        longer apply. One counter, read in one request, says both how many started and how many ended: an
        outcome is left for reuse only by a call made while no move was under way (a move under way may undo
        it after the fact), and reused only while no move started since."""
        try:
            self._flights.moved(ended)
        except Unreachable:
            raise
        except Exception as error:
            raise self.requests.broken(error) from error

    def flight_wait(self, flight: str, value: bytes, timeout: float) -> tuple[bytes | None, bool, str]:
        """(outcome, late, why): the outcome the performer of flight ``value`` published (``ok`` or ``err``),
        and whether it had counted its waiters already when this one joined (it then records itself). None
        with why: given up after ``timeout`` (``"timeout"``), or because the flight's lease was not renewed for
        a whole lease (``"dead"``: the performer was killed or frozen; the caller goes to the lock, whose
        take-over serves it), or because the performer ended without an outcome to share (``"gone"``).

        No polling: the waiter blocks on the flight's hand-off key, which the performer sets at each renewal
        and when it ends (``Wakes.post``), and its own alarm at the end of the lease."""
        return self._flights.wait(flight, value, timeout)

    def flight_done(self, flight: str, held: Held, outcome: bytes) -> int:
        """Publish the outcome, close the flight, wake its waiters; how many ranks waited for it. One request
        publishes and counts: the outcome is the seal added to the waiter count (``_sealed``), so a rank that
        joins later knows it was not counted and has the outcome in the answer to its joining. An uncontended
        flight costs three requests: the claim, the seal, the close."""
        return self._flights.done(held, outcome)

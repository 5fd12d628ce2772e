"""The job's store, reached: requests, blocking waits, and the alarms bounding them.

``fsguard.locks.store`` builds its lock and its flights on them.

- Requests go through the default process group's store client where one exists on that server. Otherwise they go
  through a connection of fsguard's own, given up for the group's client once such a group exists. fsguard's own
  connections are ``wire.StoreClient``s: no torch import (c10d's client where a server fails their handshake).
- Blocking waits use one more connection of their own, each bounded by its own alarm (``Alarms``).
- Connections are opened ahead of the first serialized call, off its critical path (``prepare``). A background thread
  opens them once the program has imported ``torch.distributed``.
- A call that comes first opens one connection at most on its own path. Its waits poll until the one for waits is
  open (``waiting.Backoff``'s steps, up to 50 ms).
- Opening a connection is a ``state.Unforkable`` section. A fork from another thread waits for it to end
  (milliseconds; at most ``state.FORK_WAIT_S``).
- At the interpreter's exit, c10d calls under way on other threads are waited for, and no new one starts there
  (``NativeCalls``): a daemon thread ended inside one aborts the process.
"""

# Why waits have a connection of their own (b60a4ba): a c10d client serves one request at a time, so a ``wait`` on the
# group's client holds up the job's own requests until it ends (measured: a ``set`` behind a 1.5 s ``wait`` took
# 1.5 s). A wait bounded without c10d's timeout warnings also needs a second connection to set its key.
# Why connect ahead (7110e9e): each new c10d client reverse-resolves the store's address (``getnameinfo``, for its log
# text; the IPv4-mapped ``::ffff:127.0.0.1`` is in no ``/etc/hosts``). When many ranks connect at once, the resolver
# waits out its 5 s timeout for queries a busy DNS server dropped ("The hostname of the client socket cannot be
# retrieved. err=-3").
# Why a section (a5b7a70): opening imports modules (the idna codec, for ``socket.create_connection``) and makes name
# lookups inside c10d and the C library (``Requests._open``, ``Wakes.open``, the whole ``prepare``). A child forked
# meanwhile waits forever for a lock that thread held: a rank forking 500 children right after importing
# ``torch.distributed`` left 1 to 12 hung in their first ``getaddrinfo``, in 3 of 8 runs. The other threads (alarm,
# lease renewal) only send requests on connections already open, which a forked child never uses
# (``after_fork_in_child``: its backend starts afresh); one that has to reconnect does so in the same section.

from __future__ import annotations

import atexit
import itertools
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..state import Unforkable, forkable
from .base import Unreachable

RETRY_S = 10.0  # after a failed connection, fail fast for this long before trying to connect again
BACKSTOP_S = 5.0  # a wait's socket timeout beyond its own bound: reached only when the store fails to set a key
EXIT_WAIT_S = 3.0  # at the interpreter's exit, the longest wait for c10d calls under way on other threads


class NativeCalls:
    """The c10d calls under way off the main thread: the interpreter's exit waits for them.

    The exiting interpreter ends a daemon thread as it takes the GIL back. One that does so on its way out of a c10d
    call ends through C++ frames that cannot unwind, and the whole process aborts ("terminate called without an
    active exception", SIGABRT). Seen in a whole test run: a serialized rank that had printed its answer died so. So,
    at exit (``atexit``, before the interpreter stops its threads), no new call starts off the main thread (it gets
    ``Unreachable``: the caller goes on unserialized), and the calls under way are waited for, at most
    ``EXIT_WAIT_S``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._closing = False
        self._registered = False
        forkable(self)

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around one c10d call; on the main thread it only runs it."""
        if threading.current_thread() is threading.main_thread():
            yield
            return
        with self._cond:
            if self._closing:
                raise Unreachable("the interpreter is exiting: no store request off the main thread")
            self._running += 1
            if not self._registered:
                self._registered = True
                atexit.register(self.at_exit)
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def at_exit(self) -> None:
        """Refuse new calls off the main thread; wait for those under way, at most ``EXIT_WAIT_S``."""
        with self._cond:
            self._closing = True
            self._cond.wait_for(lambda: not self._running, EXIT_WAIT_S)

    def after_fork_in_child(self) -> None:
        self._cond = threading.Condition()
        self._running = 0  # the parent's other threads are not the child's


NATIVE = NativeCalls()


def running(thread: threading.Thread | None, target: Callable[[], None], name: str) -> threading.Thread:
    """``thread`` while it runs, otherwise a new daemon thread running ``target``. Such a thread starts once a lock or
    an alarm needs it. It starts again in a forked child, which has none of its parent's threads."""
    if thread is not None and thread.is_alive():
        return thread
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


class Alarms:
    """A waiter's own bound on a blocking ``wait``. At the deadline, this thread sets the key waited for, through the
    other connection. So a wait ends by a key being set, never by its socket timing out. c10d reports a timed-out wait
    on stderr (two ``[c10d] waitForInput`` warning lines), even when the caller expects it. A waiter on a killed holder
    would print them at every wait. With the alarm, only a store that fails to answer (``BACKSTOP_S`` later) still shows
    its warnings, as it should.

    A key set by an alarm is the key the value's holder would set when that value stops being current. Other waiters on
    it wake too, see the value unchanged, and poll with backoff instead of waiting again. The alarm's owner is then
    about to change the value itself: take the lock over, or close a flight."""

    def __init__(self, fire: Callable[[str], None]) -> None:
        self._fire = fire
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, str]] = {}
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def at(self, when: float, name: str) -> int:
        with self._cond:
            ident = next(self._ids)
            self._due[ident] = (when, name)
            self._thread = running(self._thread, self._run, "fsguard-alarm")
            self._cond.notify()
        return ident

    def cancel(self, ident: int) -> bool:
        """Forget alarm ``ident``; True when it had gone off already."""
        with self._cond:
            self._due.pop(ident, None)
            fired = ident in self._fired
            self._fired.discard(ident)
            return fired

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    ready = [(i, name) for i, (when, name) in self._due.items() if when <= now]
                    if ready:
                        break
                    self._cond.wait(min((when for when, _ in self._due.values()), default=now + 3600.0) - now)
                for ident, _ in ready:
                    del self._due[ident]
                    self._fired.add(ident)
            for _, name in ready:
                self._fire(name)


def holder_of(value: bytes) -> str | None:
    """The holder text of a lock value, or None for a free lock."""
    if not value or value.startswith(b"="):
        return None
    return value.partition(b" ")[2].decode("utf-8", "replace") or value.decode("utf-8", "replace")


def next_key(key: str, value: bytes) -> str:
    """The key a flight's waiters that saw ``value`` block on. It is set when the value changes (``Wakes.post``)."""
    return key + "/next/" + value.partition(b" ")[0].decode("ascii", "replace")


class Requests:
    """The connection every request goes through. That is the process group's own client where one talks to the same
    server, otherwise one of fsguard's own. One class opens it, at most once per ``RETRY_S`` after a failure. It joins a
    group that appears later, and forgets a connection that broke. So the lock, the flights and the lease renewals share
    one client and one lock around its requests."""

    def __init__(self, lock_timeout: float, env: Mapping[str, str], opened: Callable[[], None]) -> None:
        self.op_timeout = min(max(lock_timeout, 1.0), 30.0)
        self._address = (env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""))
        self._opened = opened  # a TCP server was found: open the connection for waits (off this path)
        self.store: Any = None
        self.address: str | None = None
        self._failure: tuple[float, str, bool] | None = None  # (when, why, process group was up)
        self._lock = threading.Lock()  # held while connecting
        self.io = threading.Lock()  # around each request: a c10d client serves one at a time
        self.tcp: tuple[str, int] | None = None  # where a second connection for waits can be opened
        self._may_join = False  # requests on our own connection until a process group on the same server exists
        self.c10d_client = False  # fsguard's own connections are c10d's (the server failed the wire handshake)

    def connect(self) -> Any:
        store = self.store
        if store is not None and not (self._may_join and group_initialized()):
            return store
        with self._lock:
            if self.store is not None:
                if self._may_join and group_initialized():
                    self._join_group()
                return self.store
            if self._failure is not None:
                when, why, had_group = self._failure
                if time.monotonic() - when < RETRY_S and (had_group or not group_initialized()):
                    raise Unreachable(why)
            try:
                with NATIVE.call():
                    self.store = self._open()
            except Exception as error:
                why = str(error) if isinstance(error, Unreachable) else f"{type(error).__name__}: {error}"
                self._failure = (time.monotonic(), why, group_initialized())
                raise Unreachable(why) from error
            self._failure = None
            return self.store

    @staticmethod
    def _group_store() -> Any:
        """The default process group's store with its ``PrefixStore`` layers unwrapped (torch imported)."""
        import torch.distributed as dist

        root = dist.distributed_c10d._get_default_store()
        while isinstance(root, getattr(dist, "PrefixStore")):  # noqa: B009
            root = root.underlying_store
        return root

    def _join_group(self) -> None:
        """Send requests through the new process group's client where it shares the server. Peers still on their own
        connections meet it there: the same server has the same keys. Ours is closed; the connection for waits stays.
        Another server: ours stays for good (peers without a group could not meet us there)."""
        self._may_join = False  # asked once
        try:
            root = self._group_store()
            if (str(root.host), int(root.port)) != self.tcp:
                return
        except Exception:  # noqa: BLE001 - not a TCPStore, or no group after all: keep our connection
            return
        self.store = root
        self.address = f"{root.host}:{root.port} (the process group's client)"

    def _open(self) -> Any:
        with Unforkable():  # imports (the idna codec's, c10d's) and name lookups: no fork may split them
            return self._open_client()

    def _open_client(self) -> Any:
        host, port = self._address
        group = None
        if group_initialized():  # torch.distributed is imported already: no import here
            import torch.distributed as dist

            root = self._group_store()
            if not isinstance(root, getattr(dist, "TCPStore")):  # noqa: B009 - not re-exported for type checkers
                self.address = type(root).__name__
                return root  # a FileStore or HashStore the job shares already: use it as it is
            host, port, group = root.host, str(root.port), root
        elif not (host and port):
            raise Unreachable("no process group yet and no MASTER_ADDR/MASTER_PORT to find the job's store")

        # A plain connect first: "nothing listens there" then fails in microseconds, without the retry
        # loop and the C++ stack traces that a c10d client prints for the same answer.
        try:
            socket.create_connection((host, int(port)), timeout=min(self.op_timeout, 5.0)).close()
        except (OSError, ValueError) as error:
            raise Unreachable(f"the job's store at {host}:{port} does not answer ({error})") from error
        self.tcp = (str(host), int(port))
        if group is not None:  # requests through the group's client (c10d serializes its requests and ours)
            self.address = f"{host}:{port} (the process group's client)"
            store = group
        else:
            store = self.client(host, int(port))
            whose = " (c10d's client: the server did not answer fsguard's handshake)" if self.c10d_client else ""
            self.address = f"{host}:{port}{whose}"
            self._may_join = True
        self._opened()  # the second connection, off this path (``prepare`` opens it itself)
        return store

    def client(self, host: str, port: int) -> Any:
        """A new client connection to the store's server. It is fsguard's own (``wire``, no torch import), or c10d's
        where the server does not answer its handshake as c10d's TCPStore server does."""
        from .wire import StoreClient, WireMismatch

        try:
            return StoreClient(host, port, self.op_timeout)
        except WireMismatch:
            self.c10d_client = True
        try:
            import torch.distributed as dist
        except ImportError as error:
            raise Unreachable(
                f"{host}:{port} is no TCPStore fsguard can speak to, and torch is not importable"
            ) from error
        from datetime import timedelta

        return getattr(dist, "TCPStore")(  # noqa: B009 - not re-exported for type checkers
            host, port, is_master=False, timeout=timedelta(seconds=self.op_timeout), wait_for_workers=False
        )

    def cas(self, key: str, expected: bytes, desired: bytes) -> bytes:
        store = self.connect()
        with self.io, NATIVE.call():
            result = store.compare_set(key, expected, desired)
        return bytes(result)

    def add(self, name: str, amount: int) -> int:
        store = self.connect()
        with self.io, NATIVE.call():
            return int(store.add(name, amount))

    def delete(self, name: str) -> None:
        store = self.connect()
        with self.io, NATIVE.call():
            store.delete_key(name)

    def broken(self, error: BaseException) -> Unreachable:
        """Forget a connection that failed mid-use; the next call reconnects (after ``RETRY_S``)."""
        why = f"the job's store failed ({type(error).__name__}: {error})"
        with self._lock:
            self.store = None
            self._failure = (time.monotonic(), why, group_initialized())
        return Unreachable(why)


class Wakes:
    """How a waiter blocks without polling. It waits on a connection of its own: a c10d client serves one request at a
    time. A wait on the requests' connection would hold up the job's own requests and this process's lease renewals. It
    is bounded by its own alarm rather than a socket timeout. The keys it waits on are deleted a lease after they were
    set (``post``), when every waiter has seen them."""

    def __init__(self, requests: Requests, lease_s: float) -> None:
        self._requests = requests
        self._lease_s = lease_s
        self.waiter: Any = None  # the connection for waits
        self._io = threading.Lock()  # one wait at a time on it
        self._opening = threading.Lock()  # held while the connection for waits is being opened
        self._posted: deque[tuple[float, str]] = deque()  # keys set for waiters, deleted a lease later
        self._alarms = Alarms(self._ring)

    def open(self) -> None:
        """Open the connection for waits, if none is open or being opened (another thread). Never raises: until
        it exists, waits poll (``wait``)."""
        tcp = self._requests.tcp
        if self.waiter is not None or tcp is None or not self._opening.acquire(blocking=False):
            return
        try:
            if self.waiter is None:
                with Unforkable(), NATIVE.call():  # name lookups: no fork may split them (``Requests._open``)
                    self.waiter = self._requests.client(*tcp)
        except Exception:  # noqa: BLE001 - waits keep polling; the next wait tries again
            pass
        finally:
            self._opening.release()

    def open_soon(self) -> None:
        """Open the connection for waits off the calling thread. Each new connection looks the store's address up
        (c10d's reverse-resolve it too). That costs seconds where a DNS server drops a burst of queries (many ranks at
        once). So only one connection is ever opened on a call's path."""
        if self.waiter is None and self._requests.tcp is not None and not self._opening.locked():
            threading.Thread(target=self.open, name="fsguard-wait-connect", daemon=True).start()

    def wait(self, name: str, timeout: float) -> bool | None:
        """Block until key ``name`` exists, at most ``timeout``. True when someone set it; False when this waiter's own
        bound did (``Alarms``: a timeout without c10d's warnings). None when this store cannot wait (not a TCPStore) or
        its connection for waits is still being opened. The caller then polls."""
        if self._requests.tcp is None or timeout <= 0:
            return None
        if self.waiter is None:
            self.open_soon()
            return None
        from datetime import timedelta

        # One wait at a time on the connection: another thread's wait is bounded too (by its own bound here,
        # answered as an alarm: the caller looks again).
        if not self._io.acquire(timeout=timeout):
            return False
        try:
            waiter = self.waiter
            if waiter is None:  # dropped by another thread's failed wait: poll until it is open again
                self.open_soon()
                return None
            alarm = self._alarms.at(time.monotonic() + timeout, name)
            try:
                with NATIVE.call():
                    waiter.wait([name], timedelta(seconds=timeout + BACKSTOP_S))
            except Exception as error:
                self._alarms.cancel(alarm)
                if "timeout" not in str(error).lower():
                    self.waiter = None
                    raise
                return False
            return not self._alarms.cancel(alarm)
        finally:
            self._io.release()

    def wait_for_change(self, key: str, value: bytes, timeout: float) -> bool | None:
        """Block until the holder of ``value`` renews or gives the lock back. At most ``timeout`` (see ``wait``)."""
        return self.wait(next_key(key, value), timeout)

    def post(self, key: str, value: bytes) -> None:
        """Wake the waiters that saw ``value``: it is no longer the lock's value. Never raises."""
        try:
            store = self._requests.connect()
            name = next_key(key, value)
            now = time.monotonic()
            with self._requests.io, NATIVE.call():
                store.set(name, b"1")
                while self._posted and now - self._posted[0][0] > self._lease_s:
                    store.delete_key(self._posted.popleft()[1])
            self._posted.append((now, name))
        except Exception:  # noqa: BLE001 - waiters then wake at the end of their bounded wait
            pass

    def expire(self, name: str) -> None:
        """Delete key ``name`` a lease from now (with the next ``post``)."""
        self._posted.append((time.monotonic(), name))

    def _ring(self, name: str) -> None:
        """An alarm went off: set ``name`` (deleted a lease later, as a holder's hand-off keys). Never raises."""
        try:
            store = self._requests.connect()
            with self._requests.io, NATIVE.call():
                store.add(name, 0)  # a go key is a counter (``_Tickets._hand``); a flight's next key only has to exist
            if "/go/" not in name:  # a go key is deleted by its waiter
                self.expire(name)
        except Exception:  # noqa: BLE001 - the wait then ends at its backstop, and c10d says why
            pass


def group_initialized() -> bool:
    """Whether a default process group exists (False, without importing torch, if torch is not loaded)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001
        return False

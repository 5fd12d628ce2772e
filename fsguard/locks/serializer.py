"""One guarded call at a time per path: lock, run, unlock, record the wait.

Keys: the normalised path (absolute, ``..`` folded), hashed into one of ``STRIPES`` stripes. Stripes bound
what a long job leaves behind (lock files on the node, keys in the store) whatever number of paths it
touches; two paths sharing a stripe only wait for each other needlessly, once in 4096. A rename locks the
stripes of both its source and its destination, taken in sorted order: every call takes its locks in one
global order, so no two calls can each hold what the other waits for.

Never a collective, never a hang, never an error of its own: a rank that calls alone takes a free lock
and goes on; every wait is bounded by ``FSGUARD_LOCK_TIMEOUT`` for the whole call; on timeout or when the
backend cannot be used the call runs unserialized (the guard's idempotence rule still protects it) and a
record says so. A thread that already holds a stripe (a caller's ``onerror`` calling back into a guarded
function) does not wait for itself.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import runtime
from ..calls import Call
from ..runtime import busy
from ..state import Unforkable, forkable, report_late_forks
from ..waiting import wait_for
from . import flight
from .base import Backend, Held, LockTimeout, Unreachable, holder_text
from .flight import REUSED

STRIPES_HEX = 3  # 16**3 = 4096 stripes
WAIT_RECORD_S = 1.0  # a wait at least this long becomes part of the operation's record

GuardedCall = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
Choice = Callable[[], tuple[Backend, Backend | None, str | None]]  # (backend, fallback, note for stderr)


@report_late_forks
def _forked_late(waited: float, threads: list[str]) -> None:
    """The record of a fork made while other threads were inside ``Unforkable`` sections."""
    runtime.record(
        "fork",
        "waited",
        f"forked after waiting {waited:.2f} s for {', '.join(threads) or 'another thread'} to finish opening a "
        "store connection (imports, name lookups); later forks do not wait for it: a child that imports the same "
        "modules or looks names up meanwhile may hang",
        [],
        waited_s=waited,
        detail={"threads": threads},
    )


def _imported(name: str) -> bool:
    """Whether module ``name`` has been imported completely (not still being imported by another thread)."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def stripe(path: str) -> str:
    from hashlib import sha1  # here, not at startup: a cached import costs well under a microsecond

    return sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:STRIPES_HEX]


class Serializer:
    """What ``fsguard.patching`` calls around every guarded operation when ``FSGUARD_SERIALIZE=1``."""

    def __init__(self, choose: Choice, timeout: float, rank: int | None, host: str) -> None:
        self._choose: Choice | None = choose
        self._backend: Backend | None = None
        self.fallback: Backend | None = None  # node-local locks when the job-wide backend cannot be reached
        self.timeout = timeout
        self._rank = rank
        self._host = host
        self._local = threading.local()
        self._choosing = threading.Lock()
        self._devices: dict[str, int] = {}  # a directory's st_dev, asked once (``flight.flight_key``)
        # Whether an error of a given class, raised where the call is being made, would crash its thread (no
        # handler of the program's decides): ``fsguard.patching`` sets it (the caller's context is
        # ``fsguard.handlers``', a module of this layer that ``locks`` does not import). None: never assumed.
        self.crashes: Callable[[type[OSError]], bool] | None = None
        forkable(self)

    def after_fork_in_child(self) -> None:
        """Fresh locks: the parent may have been choosing the backend, or holding keys."""
        self._local = threading.local()
        self._choosing = threading.Lock()

    @property
    def backend(self) -> Backend:
        """The lock backend, chosen at the first serialized call. Not at startup: whether torch is importable is only
        known once every ``.pth`` file has run. One of them may be what puts torch on ``sys.path``."""
        if self._backend is None:
            with self._choosing, Unforkable():  # imports the backend's module: no fork may split that
                if self._choose is not None:
                    backend, self.fallback, note = self._choose()
                    if note:
                        from .._warn import warn

                        warn(note)
                    self._backend, self._choose = backend, None
        assert self._backend is not None
        return self._backend

    def prepare_in_background(self) -> None:
        """Open the backend's connection ahead of the first serialized call. Off its critical path, a daemon thread
        waits until the program has imported ``torch.distributed``. (fsguard never imports torch before its first
        serialized call.) It then chooses the backend and connects. In ``fsguard.locks.store``, a connection made by
        many ranks at once can cost seconds. It ends at once when a serialized call chose first."""
        threading.Thread(target=self._prepare, name="fsguard-connect", daemon=True).start()

    def _prepare(self) -> None:
        def ready() -> bool | None:
            if self._backend is not None or (_imported("torch") and _imported("torch.distributed")):
                return True
            return None

        # Every 20 ms for the first minute (a program imports torch at its start), then every half second for
        # as long as the process runs: a daemon thread's wait, which nothing waits for.
        seen, _ = wait_for(ready, 60.0, 0.02, 0.02, factor=1.0)
        if seen is None:
            wait_for(ready, float("inf"), 0.5, 0.5, factor=1.0)
        if self._backend is not None:
            return
        try:
            # Its own filesystem calls (imports) are neither guarded nor serialized, and no fork splits its imports
            # and name lookups (``state.Unforkable``): a child would wait forever for a lock this thread held.
            with runtime.Busy(), Unforkable():
                self.backend.prepare()
        except Exception:  # noqa: BLE001 - the first serialized call connects (and records what failed)
            pass

    def describe(self) -> str:
        if self._backend is None:
            return f"chosen at the first serialized call, timeout {self.timeout:g} s"
        text = f"{self.backend.name} ({'whole job' if self.backend.scope == 'job' else 'this node only'})"
        if self.fallback is not None:
            text += f", falling back to {self.fallback.name} ({self.fallback.scope} only) when unreachable"
        return f"{text}, timeout {self.timeout:g} s"

    def run(
        self,
        op: str,
        wrapped: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        guarded_call: GuardedCall,
    ) -> Any:
        """Run ``guarded_call`` with the original function locked. The lock covers the filesystem call itself (for
        ``rmtree``, the whole walk). It is given back before a failure goes to the guard's rule. A rule may wait up to
        ``FSGUARD_SETTLE_S`` for a slow filesystem to show a peer's change; waiting that out while holding the lock
        would make every later rank wait for it too."""
        call = Call(op, args, kwargs)
        paths = call.targets()
        if not paths:
            return guarded_call(wrapped, args, kwargs)

        def locked(*call_args: Any, **call_kwargs: Any) -> Any:
            return self.call(op, paths, wrapped, call_args, call_kwargs)

        # The performer of a shared makedirs(exist_ok=True) takes no lock: the identical calls are one call
        # already, and the standard makedirs(exist_ok=True) tolerates any other call on its path.
        unlocked = op in flight.REUSABLE and flight.claim_error(call) is None
        return self.flown(
            call,
            lambda: guarded_call(locked, args, kwargs),
            paths=paths,
            performer=(lambda: guarded_call(wrapped, args, kwargs)) if unlocked else None,
        )

    # --- singleflight (fsguard.locks.flight) -----------------------------------------------------------

    def flown(
        self,
        call: Call,
        perform: Callable[[], Any],
        shared: Any = None,
        paths: list[str] | None = None,
        performer: Callable[[], Any] | None = None,
    ) -> Any:
        """Run ``perform()``, or share a peer's identical call made at this moment. When peers make the identical call
        at this moment, one performs it (the whole guarded call). The others return ``shared`` as soon as its
        ``perform()`` returned. When it raised (or ended without an outcome: killed, frozen, too slow), every waiting
        rank calls its own ``perform()``, so each gets its own result and its own error object (``performer``: what the
        rank that performs a shared call calls instead of ``perform``). A ``makedirs`` that a peer made and returned
        from earlier returns ``shared`` at once while nothing of the job was removed or renamed since
        (``flight.REUSABLE``). A claim (``flight.claim_error``) shares a peer's outcome only where its own error would
        crash its thread (``crashes``): a caller that handles it makes its own call."""
        op = call.op
        paths = paths or call.targets()
        claimed = self._claim(call, paths) if paths else None
        if claimed is None or paths is None:
            return perform()
        backend, name, token, performs = claimed
        if not performs:
            lost = flight.claim_error(call)
            if lost is not None and not self._crashes(lost):
                return perform()  # its caller handles the error: it gets its own, as without fsguard
            if token == REUSED:
                if lost is not None:
                    self._reused_record(backend, op, paths, lost)
                return shared  # a peer's identical call returned, and nothing of the job moved since
            outcome, late = self._wait_flight(backend, op, paths, name, token)
            if late and outcome is not None:
                self._shared_record(backend, op, paths, 1, outcome)  # the performer counted its waiters before
            if outcome == b"ok":
                return shared  # the performer's call returned: so does this one, without a filesystem call
            return perform()  # it raised: this rank makes (and fails) its own call
        try:
            result = (performer or perform)()
        except BaseException:
            self._land(backend, op, paths, name, token, b"err")
            raise
        self._land(backend, op, paths, name, token, b"ok")
        return result

    def _crashes(self, error: type[OSError]) -> bool:
        """Whether an ``error`` of the call being made would crash its thread. No handler of the program's decides.
        False where that cannot be told: no ``crashes`` set (``fsguard.patching`` sets it)."""
        crashes = self.crashes
        if crashes is None:
            return False
        try:
            with runtime.Busy():
                return bool(crashes(error))
        except Exception:  # noqa: BLE001 - not understood: the program's own call decides
            return False

    def _claim(self, call: Call, paths: list[str]) -> tuple[Any, str, Any, bool] | None:
        """(backend, flight, token, performer?) for a call identical calls of peers can share, else None."""
        if busy() or self._local.__dict__.get("keys"):
            return None  # a call made while this thread holds locks (an onerror handler's) is its own
        try:
            with runtime.Busy():
                backend = self.backend
                if backend.scope != "job":
                    return None
                name = flight.flight_key(call, paths, self._host, self._devices)
                if name is None:
                    return None
                what = f"{call.op} {' -> '.join(paths)}"
                claimed = backend.flight_claim(
                    name, holder_text(self._rank, self._host, what), call.op in flight.REUSABLE
                )
        except Exception:  # noqa: BLE001 - no singleflight: the call goes to the lock as before
            return None
        if claimed is None:
            return None
        return backend, name, claimed[1], claimed[0]

    def _wait_flight(
        self, backend: Any, op: str, paths: list[str], name: str, value: bytes
    ) -> tuple[bytes | None, bool]:
        started = time.monotonic()
        try:
            with runtime.Busy():
                outcome, late, why = backend.flight_wait(name, value, self.timeout)
        except Exception as error:  # noqa: BLE001 - no outcome to share: this rank makes its own call
            outcome, late, why = None, False, f"the store failed ({type(error).__name__}: {error})"
        if outcome is None:
            self._abandoned(backend, op, paths, value, why, time.monotonic() - started)
        return outcome, bool(late)

    def _abandoned(self, backend: Any, op: str, paths: list[str], value: bytes, why: str, waited: float) -> None:
        """A record: this rank waited in vain for a peer's identical call."""
        from .connection import holder_of

        performer = holder_of(value) or "an unknown performer"
        because = {
            "dead": "its lease was not renewed for a whole lease (killed or frozen)",
            "timeout": f"it was still running after FSGUARD_LOCK_TIMEOUT ({self.timeout:g} s)",
            "gone": "it ended without an outcome (a peer found its lease unrenewed and closed it)",
        }.get(why, why)
        runtime.record(
            op,
            "waited",
            f"waited {waited:.2f} s for the identical call of {performer}, which peers shared; {because}: "
            "made its own call",
            paths,
            waited_s=waited,
            detail={"backend": backend.name, "holders": [performer], "took_over": False, "flight": why},
        )

    def _land(self, backend: Any, op: str, paths: list[str], name: str, token: Any, outcome: bytes) -> None:
        """Publish the outcome to the waiting ranks; one ``shared`` record says how many there were."""
        try:
            with runtime.Busy():
                count = int(backend.flight_done(name, token, outcome))
        except Exception:  # noqa: BLE001 - waiters then give up at their bound and make their own calls
            return
        if count > 0:
            self._shared_record(backend, op, paths, count, outcome)

    def _reused_record(self, backend: Any, op: str, paths: list[str], lost: type[OSError]) -> None:
        runtime.record(
            op,
            "shared",
            f"a peer rank's identical call returned earlier and nothing of the job was removed or renamed since: "
            f"returned as it did, without a filesystem call (alone, this call would have raised {lost.__name__}, "
            "which would have ended its thread)",
            paths,
            detail={"backend": backend.name, "ranks": 1, "outcome": "ok", "reused": True},
        )

    def _shared_record(self, backend: Any, op: str, paths: list[str], count: int, outcome: bytes) -> None:
        ending = "returned as it did, without a filesystem call" if outcome == b"ok" else "made their own calls"
        runtime.record(
            op,
            "shared",
            f"{count} peer rank(s) made the same call at the same time and waited for this one; they {ending}",
            paths,
            detail={"backend": backend.name, "ranks": count, "outcome": outcome.decode()},
        )

    def call(
        self, op: str, paths: list[str], function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``function(*args, **kwargs)`` holding the locks of ``paths`` (those this thread does not hold yet)."""
        mine: set[str] = self._local.__dict__.setdefault("keys", set())
        keys = sorted({stripe(p) for p in paths} - mine)
        if not keys:
            return function(*args, **kwargs)
        what = holder_text(self._rank, self._host, f"{op} {' -> '.join(paths)}")
        # A rename says first that it is coming: an rmtree of its source that holds (or waits for) the lock
        # lets it go first (the rename wins; see fsguard.rmwalk).
        announced = self._announce(paths[0]) if op in flight.ANNOUNCED else None
        moves = op in flight.MOVES
        try:
            backend, held = self._acquire(op, paths, keys, what)
            mine.update(h.key for h in held)
            try:
                if moves:
                    self._moved(False)  # before it starts: no outcome published before is reused
                return function(*args, **kwargs)
            finally:
                if moves:
                    self._moved(True)  # and after: an outcome of a call made meanwhile was never left for reuse
                mine.difference_update(h.key for h in held)
                if backend is not None:
                    self._release(op, paths, backend, held)
        finally:
            if announced is not None:
                self._withdraw(*announced)

    # --- renames announced ahead of their locks --------------------------------------------------------

    def _announce(self, source: str) -> tuple[Backend, Any] | None:
        try:
            with runtime.Busy():
                backend = self.backend
                return backend, backend.announce(stripe(source))
        except Exception:  # noqa: BLE001 - no announcement: the rmtree's yield window still watches the path
            return None

    def _withdraw(self, backend: Backend, token: Any) -> None:
        try:
            with runtime.Busy():
                backend.withdraw(token)
        except Exception:  # noqa: BLE001
            pass

    def _moved(self, ended: bool) -> None:
        """Count a removal or rename of the job (``Backend.moved``). With the store out of reach, no outcome is reused
        meanwhile either: ``flight_claim`` fails too, and every call is made."""
        try:
            with runtime.Busy():
                self.backend.moved(ended)
        except Exception:  # noqa: BLE001
            pass

    def pending(self, path: str) -> bool:
        """Whether a peer announced a rename whose source is ``path`` and has not finished it. ``path`` is matched by
        its stripe."""
        try:
            with runtime.Busy():
                return self.backend.pending(stripe(path))
        except Exception:  # noqa: BLE001 - cannot tell: nothing pending
            return False

    # --- taking and giving back ------------------------------------------------------------------------

    def _take(self, backend: Backend, keys: list[str], what: str, deadline: float) -> list[Held]:
        """Take all keys in order, or none. On any failure the ones taken are given back before raising."""
        held: list[Held] = []
        try:
            with runtime.Busy():  # torch's import and our own file calls must not be guarded (or locked) again
                for key in keys:
                    held.append(backend.acquire(key, max(deadline - time.monotonic(), 0.0), what))
        except BaseException:
            self._give_back(backend, held)
            raise
        return held

    def _give_back(self, backend: Backend, held: list[Held]) -> list[str]:
        problems = []
        with runtime.Busy():
            for h in reversed(held):
                try:
                    backend.release(h)
                except Exception as error:  # noqa: BLE001 - the call is done; a lost release is only recorded
                    problems.append(f"release failed ({error})")
                if h.lost:
                    problems.append(f"lock lost mid-call: {h.lost}")
        return problems

    def _acquire(self, op: str, paths: list[str], keys: list[str], what: str) -> tuple[Backend | None, list[Held]]:
        started = time.monotonic()
        deadline = started + self.timeout
        try:
            held = self._take(self.backend, keys, what, deadline)
        except LockTimeout as timeout:
            self._unserialized(
                op,
                paths,
                started,
                f"{self.backend.name} lock still held by "
                f"{timeout.holder or 'an unknown holder'} after {timeout.waited_s:.2f} s",
                reason="timeout",
                holder=timeout.holder,
            )
            return None, []
        except Exception as error:  # noqa: BLE001 - Unreachable, or anything a backend raised
            why = str(error) if isinstance(error, Unreachable) else f"{type(error).__name__}: {error}"
            if self.fallback is None:
                self._unserialized(
                    op, paths, started, f"{self.backend.name} backend unusable: {why}", reason="unreachable"
                )
                return None, []
            return self._fall_back(op, paths, keys, what, started, deadline, why)
        self._waited(op, paths, self.backend, held)
        return self.backend, held

    def _fall_back(
        self, op: str, paths: list[str], keys: list[str], what: str, started: float, deadline: float, why: str
    ) -> tuple[Backend | None, list[Held]]:
        assert self.fallback is not None
        try:
            held = self._take(self.fallback, keys, what, deadline)
        except Exception as error:  # noqa: BLE001
            self._unserialized(
                op,
                paths,
                started,
                f"{self.backend.name} backend unusable: {why}; {self.fallback.name} fallback too: {error}",
                reason="unreachable",
            )
            return None, []
        self._unserialized(
            op,
            paths,
            started,
            f"{self.backend.name} backend unusable: {why}; serialized "
            f"with this node's ranks only ({self.fallback.name} locks), not across nodes",
            reason="unreachable",
            fallback=self.fallback.name,
        )
        return self.fallback, held

    def _release(self, op: str, paths: list[str], backend: Backend, held: list[Held]) -> None:
        problems = self._give_back(backend, held)
        if problems:
            runtime.record(
                op,
                "unserialized",
                f"{backend.name} lock: {'; '.join(problems)}: the call may have overlapped a peer's",
                paths,
                detail={"backend": backend.name, "reason": "lost"},
            )

    # --- records ---------------------------------------------------------------------------------------

    def _unserialized(self, op: str, paths: list[str], started: float, why: str, **detail: Any) -> None:
        detail["backend"] = self.backend.name
        runtime.record(
            op,
            "unserialized",
            f"{why}: proceeded without the lock",
            paths,
            waited_s=time.monotonic() - started,
            detail=detail,
        )

    def _waited(self, op: str, paths: list[str], backend: Backend, held: list[Held]) -> None:
        waited = sum(h.waited_s for h in held)
        took_over = [h for h in held if h.took_over]
        if waited < WAIT_RECORD_S and not took_over:
            return
        holders = sorted({h.holder for h in held if h.holder})
        notes = "".join(sorted({h.note for h in held if h.note}))
        runtime.record(
            op,
            "waited",
            f"waited {waited:.2f} s for the {backend.name} lock held by "
            f"{', '.join(holders) or 'an unknown holder'}{notes}",
            paths,
            waited_s=waited,
            detail={"backend": backend.name, "holders": holders, "took_over": bool(took_over)},
        )

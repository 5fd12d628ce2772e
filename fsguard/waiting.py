"""Bounded waits with backoff: the one way fsguard waits for something. A peer's rename, a lock, a listing.

Every wait has a budget on the monotonic clock and is never longer (principle 5: never hang a job). Its
steps start at ``first_s`` and grow by ``factor`` up to ``cap_s``; the last step is cut to what is left of
the budget. A ``stop`` event ends a wait at once (its ``wait`` is the sleep). ``wait_for`` polls a probe;
``Backoff`` is the same schedule for a loop that does more between its steps (a blocking wait of its own
that a step may replace, a budget that grows): see ``Backoff.pause``.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not typing's: imported on the startup path (see bench/startup.py)
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")


class Backoff:
    """The steps of one bounded wait, started when it is made.

    ``budget_s`` may be raised while waiting (a wait that learns it should wait longer); ``tries``: at most
    this many pauses (None: as many as the budget allows); ``started``: a ``time.monotonic()`` reading where
    the budget began, when that was before the wait was made (a first probe that decided the budget);
    ``paused_only``: only the pauses count as waited (a loop that does work of its own between its steps, such
    as removing a directory again: that work is not waiting)."""

    __slots__ = ("budget_s", "cap_s", "factor", "paused_only", "slept_s", "started", "step_s", "stop", "tries")

    def __init__(
        self,
        budget_s: float,
        first_s: float,
        cap_s: float,
        *,
        factor: float = 2.0,
        tries: int | None = None,
        stop: threading.Event | None = None,
        started: float | None = None,
        paused_only: bool = False,
    ) -> None:
        self.started = time.monotonic() if started is None else started
        self.paused_only = paused_only
        self.slept_s = 0.0
        self.budget_s = budget_s
        self.step_s = first_s
        self.cap_s = cap_s
        self.factor = factor
        self.tries = tries
        self.stop = stop

    def waited(self) -> float:
        """Seconds since the wait began (with ``paused_only``: seconds paused)."""
        return self.slept_s if self.paused_only else time.monotonic() - self.started

    def left(self) -> float:
        """Seconds left of the budget (0 or less: spent)."""
        return self.budget_s - self.waited()

    def pause(self, limit_s: float | None = None) -> bool:
        """Sleep the next step; False once the budget or tries are spent. The step is cut to what is left of the budget
        and to ``limit_s``. False, without sleeping, once the budget is spent, the tries are used up or ``stop`` is set.
        It is also False when ``stop`` is set meanwhile.

        A loop whose own blocking wait (a store's ``wait`` on a key) did the waiting skips ``pause`` for that
        round: only the loops that sleep advance the steps."""
        left = self.left()
        if left <= 0 or self.tries == 0 or (self.stop is not None and self.stop.is_set()):
            return False
        if self.tries is not None:
            self.tries -= 1
        step = min(self.step_s, left) if limit_s is None else min(self.step_s, left, limit_s)
        self.step_s = min(self.step_s * self.factor, self.cap_s)
        self.slept_s += step
        if self.stop is None:
            time.sleep(step)
            return True
        return not self.stop.wait(step)


def wait_for(
    probe: Callable[[], T | None],
    budget_s: float,
    first_s: float,
    cap_s: float,
    *,
    factor: float = 2.0,
    stop: threading.Event | None = None,
) -> tuple[T | None, float]:
    """Call ``probe`` now and after each step, until it returns non-None. It stops when the budget is spent or ``stop``
    is set. Returns (what it returned last, seconds waited)."""
    backoff = Backoff(budget_s, first_s, cap_s, factor=factor, stop=stop)
    while True:
        seen = probe()
        if seen is not None or not backoff.pause():
            return seen, backoff.waited()

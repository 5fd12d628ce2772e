"""Mechanism: run one guarded ``shutil.rmtree``: the yield window, the checked walk, fsguard's error handler.

What to decide is ``fsguard.guards.rmtree``'s business; this package waits, walks, retries, locks, and asks the
``World`` it is given (``fsguard.guards.World``; live: ``fsguard.world.LIVE``) what it needs to know beyond its own
steps. Its modules, from the call down:

* here: ``run``, the course of one call (its plan, the yield window, the walk alone or under the path's lock);
* ``handler``: ``Walk``, fsguard's error handler for the walk, and what the caller asked of its errors;
* ``standard``: the standard library's own ``rmtree`` code, copied per walk so that its ``os`` is the walk's;
* ``position``: where the tree is, and the walk's own ``os`` functions that check it before each removal;
* ``tree``: what the walk reads of the tree besides its own steps (lookups, listings, the held top).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..calls import Call, norm
from ..guards import Rules, World, by_tag, own_event
from ..guards import rmtree as rule
from ..guards.rmtree import Plan, RmtreeVerdict
from ..state import MEMORY_SIZE, STATE
from ..waiting import Backoff
from .handler import Caller, Vanishing, Walk
from .position import Moved, Position
from .standard import checked
from .tree import Held, find_renamed

__all__ = ["Walk", "checked", "run", "wait_for_move"]

# --- the call ------------------------------------------------------------------------------------------


def wait_for_move(
    top: str, world: World, budget_s: float, pending: Callable[[], bool] | None, settle_s: float
) -> tuple[str, float]:
    """Poll fresh listings of the parent, up to ``budget_s``, for ``top`` to disappear. A peer moved it.

    ``pending``: whether a peer announced a rename of ``top`` (serialized mode); while one is announced the
    wait goes on up to ``settle_s`` more. Returns ("" when it stayed, else how it went, seconds waited)."""
    backoff = Backoff(budget_s, 0.002, 0.02)
    how = "(its name left the fresh listing)"
    extended = False
    while True:
        seen = world.look(top)
        if seen.parent_exists and not seen.present:
            return how, backoff.waited()
        if not seen.parent_exists:
            return "", backoff.waited()
        if pending is not None and not extended and pending():
            backoff.budget_s, extended = max(backoff.budget_s, backoff.waited() + settle_s), True
            how = "(a rename announced to the serialization backend went first)"
        if not backoff.pause():
            return "", backoff.waited()


def run(
    original: Callable[..., Any],
    call: Call,
    world: World,
    rules: Rules,
    use_onexc: bool,
    yield_s: float,
    serializer: Any = None,
) -> RmtreeVerdict | None:
    """One guarded ``rmtree`` call; a verdict when something needs a record. ``world``: what the walk asks
    (live: ``fsguard.world.LIVE``), ``rules``: the numbers (``fsguard.failure.rules()``).

    The walk gets the caller's own arguments, fsguard's handler in place of the caller's (``Caller``), so it
    accepts or rejects the call as the standard ``rmtree`` would alone. With a serializer, the walk runs holding
    the path's lock, after letting a rename of the same path that a peer announced go first."""
    top, args, kwargs = call.path, call.args, call.kwargs  # the call's parts this module reads: here only
    if top is None:
        original(*args, **kwargs)  # the standard rmtree says what is wrong (outside any except)
        return None
    caller = Caller(call.on_error.ignore_errors, call.on_error.onerror, call.on_error.onexc, use_onexc)
    with Held() as held:  # the top's descriptor: see find_renamed
        position = Position(top, world, held)
        walk = Walk(position, original, caller, world, rules)
        positional, named = caller.arguments(args, kwargs, walk)
        return _Course(walk, positional, named, serializer).run(yield_s)


def _remember_scratch(scratch: dict[str, None], top: str) -> None:
    """Note ``top`` as this process's own scratch path (``fsguard.guards.rmtree.plan``), keeping the newest
    ``MEMORY_SIZE`` paths."""
    scratch.pop(top, None)
    scratch[top] = None
    while len(scratch) > MEMORY_SIZE:
        del scratch[next(iter(scratch))]


class _Course:
    """The course of one guarded ``rmtree``, into one verdict. Its plan, the yield window, the walk (alone, or holding
    the path's lock), and a failure that escaped the walk's handler."""

    def __init__(self, walk: Walk, positional: list[Any], named: dict[str, Any], serializer: Any) -> None:
        self.walk = walk
        self.arguments = (positional, named)  # the caller's, with fsguard's handler in place of the caller's
        self.serializer = serializer
        self.top = walk.position.top
        self.pending: Callable[[], bool] | None = None  # whether a peer announced a rename of the top (serialized)
        self.window = 0.0  # seconds waited for a peer to move the tree before (or instead of) the walk

    def run(self, yield_s: float) -> RmtreeVerdict | None:
        walk, top, world, rules = self.walk, self.top, self.walk.world, self.walk.rules
        position = walk.position
        tree = position.is_tree()
        serializer = self.serializer
        if serializer is not None and tree:
            self.pending = lambda: bool(serializer.pending(top))
        # The cheap tests first: own memory is asked only where the plan needs it (a directory, in a job with peers).
        remembered: list[str | None] = []

        def own() -> str | None:
            if not remembered:
                remembered.append(own_event(world, top) if tree and rules.peers else None)
            return remembered[0]

        scratch = STATE.memory.scratch
        plan: Plan = "check"
        if tree:
            plan = rule.plan(top, position.top_st, own, world, rules, yield_s, top in scratch, serializer is not None)
        if tree and position.top_st is not None:
            # See find_renamed; a plain walk too: a peer may still remove (or, against the plan, move) the tree, and
            # without a held descriptor a directory made since could carry its inode number (a false rename record).
            position.held.take(top, position.top_st)
        # "plain": nobody can move it meanwhile: the standard walk itself, with fsguard's error handler
        walk.set_checking(plan != "plain", serialized=serializer is not None)
        if plan == "wait" or self._announced():
            yielded = self._yield(yield_s)
            if yielded is not None:
                self._tell_handler()
                return yielded
        try:
            yielded = self._walk()
            if yielded is not None:
                return yielded
        except Moved as moved:
            removed, waited = position.removed.names, walk.found.waited + self.window
            return rule.moved_mid_walk(top, moved.renamed_to, removed, waited)
        except FileNotFoundError as exc:
            if not self._absorbs(exc):
                raise
        found = walk.found.verdict(world)
        if plan == "wait" and position.removed.count:
            made_here = own() == "made-shared"
            if made_here:  # no peer used the window: this process's own scratch at this path
                _remember_scratch(scratch, top)
            identity = by_tag(rules.whose(world.job_tag(top)))
            return rule.removed_peer_tree(top, self.window, found, made_here=made_here, identity=identity)
        return found

    def _tell_handler(self) -> None:
        """Show the caller's handler the tree that left while this process waited. Where the caller passed its own
        handler, the standard walk runs now all the same. So the handler sees the missing tree as the standard
        ``rmtree`` called now shows it. A tree that stands there meanwhile is another one: the checked walk stops before
        removing anything."""
        walk, (positional, named) = self.walk, self.arguments
        if walk.caller.handler is None or not walk.position.checking:
            return
        try:
            walk.remove(positional, named)
        except Moved:
            pass

    def _announced(self) -> bool:
        return self.pending is not None and self.pending()

    def _yield(self, budget_s: float) -> RmtreeVerdict | None:
        """Wait up to ``budget_s`` for a peer to move the tree away. It waits longer while a peer's announced rename is
        pending. Returns the verdict saying where it went, or None when it stayed."""
        walk = self.walk
        how, waited = wait_for_move(self.top, walk.world, budget_s, self.pending, walk.rules.settle_s)
        self.window += waited
        if not how:
            return None
        position = walk.position
        return rule.yielded(self.top, self.window, how, find_renamed(self.top, position.top_st, position.held))

    def _walk(self) -> RmtreeVerdict | None:
        """Remove the tree, alone or holding the path's lock. Alone, it waits for a peer that removes it too. Holding
        the path's lock, a rename of it a peer announced meanwhile goes first: its verdict."""
        walk, (positional, named) = self.walk, self.arguments
        if self.serializer is None:
            # Only in a job with peers (a lone process has nobody to wait for); serialized, peers do not walk
            # the tree meanwhile.
            try:
                raises = not walk.caller.ignore and walk.caller.handler is None  # no handler of the caller's
                walk.remove(positional, named, wait_on_vanish=raises and walk.rules.peers)
            except Vanishing:
                if not walk.wait_for_peer_removal():
                    walk.remove(positional, named)  # the peer stopped (or is slow): remove what is left
            return None

        walk.position.forget_missing()  # the lock may be a wait: the walk asks the top's name again

        def call() -> bool:
            walk.remove(positional, named)
            return True

        def call_unless_announced() -> bool:
            return False if self._announced() else call()

        if self.serializer.call("rmtree", [self.top], call_unless_announced, (), {}):
            return None
        # A peer announced a rename of this path while this process waited for the lock: give the lock back so
        # that it goes first, then remove only what is still here.
        yielded = self._yield(0.0)
        if yielded is None:
            self.serializer.call("rmtree", [self.top], call, (), {})
        else:
            self._tell_handler()
        return yielded

    def _absorbs(self, error: FileNotFoundError) -> bool:
        """Whether a failure that escaped the handler (e.g. ``fstat`` of the top on FUSE after a peer removed it)
        is the top gone meanwhile. One the handler passed on to the caller (raised, or raised by the caller's
        handler) is the caller's, and so is any with ``ignore_errors``."""
        caller = self.walk.caller
        if error is caller.forwarded or caller.ignore:
            return False
        name = getattr(error, "filename", None)
        if name is not None and norm(name) != self.top:
            return False
        return self.walk.top_went(error)

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

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from ..calls import Call, norm
from ..guards import Rules, World, by_tag, own_event
from ..guards import rmtree as rule
from ..guards.rmtree import Plan, RmtreeVerdict
from ..state import MEMORY_SIZE, STATE
from ..waiting import Backoff
from .handler import Caller, Vanishing, Walk
from .position import Moved, Position
from .standard import checked, plain, real
from .tree import HOLD_FLAGS, Held, TopStat, find_renamed

__all__ = ["NotTaken", "Walk", "checked", "lane", "run", "wait_for_move"]

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
    read: NotTaken | None = None,
) -> RmtreeVerdict | None:
    """One guarded ``rmtree`` call; a verdict when something needs a record. ``world``: what the walk asks
    (live: ``fsguard.world.LIVE``), ``rules``: the numbers (``fsguard.failure.rules()``). ``read``: what the short
    course (``lane``) read of the same top before it left the call to this one.

    The walk gets the caller's own arguments, fsguard's handler in place of the caller's (``Caller``), so it
    accepts or rejects the call as the standard ``rmtree`` would alone. With a serializer, the walk runs holding
    the path's lock, after letting a rename of the same path that a peer announced go first."""
    top, args, kwargs = call.path, call.args, call.kwargs  # the call's parts this module reads: here only
    if top is None:
        original(*args, **kwargs)  # the standard rmtree says what is wrong (outside any except)
        return None
    caller = Caller(call.on_error.ignore_errors, call.on_error.onerror, call.on_error.onexc, use_onexc)
    if read is not None and read.top != top:
        read = None
    with Held() as held:  # the top's descriptor: see find_renamed
        position = Position(top, world, held, None if read is None else read.before)
        walk = Walk(position, original, caller, world, rules)
        positional, named = caller.arguments(args, kwargs, walk)
        return _Course(walk, positional, named, serializer, None if read is None else read.at_once).run(yield_s)


class NotTaken(NamedTuple):
    """``lane``'s answer where the full course (``run``) decides the call. With what it read before (None: nothing):
    the top, its ``lstat_top``, whether the plan is plain at once (``fsguard.guards.rmtree.plain_at_once``)."""

    top: str | None
    before: tuple[Any, bool] | None
    at_once: bool | None


NOT_TAKEN = NotTaken(None, None, None)
# The caller's own handler alone, in the keyword the walk's handler takes (without, with ``onexc``): the call the short
# course makes is then the one ``Caller.arguments`` would make (a ``TemporaryDirectory``'s clean-up passes it)
_HANDLER_ALONE = (frozenset(("onerror",)), frozenset(("onexc",)))


def lane(
    original: Callable[..., Any], path: Any, kwargs: dict[str, Any], world: World, rules: Rules, use_onexc: bool
) -> Any:
    """``rmtree(path, **kwargs)`` of a tree removed plainly, down a short course. ``NotTaken`` (with what it read)
    before anything is removed, where the full course (``run``) must decide. Else what ``run`` returns for it: None, or
    the verdict of what its walk met. ``kwargs``: the call's error keywords, or none (``ignore_errors``, ``onerror``,
    ``onexc``: a ``TemporaryDirectory``'s clean-up passes one).

    The course of a call not serialized, whose plan is ``"plain"`` at once (``fsguard.guards.rmtree.plain_at_once``):
    the top held open and its ``fstat``, the plan, the standard walk (its kept copy, ``plain``) with the caller's
    arguments as ``run`` passes them (``Caller.arguments``). fsguard's error handler for the walk (``Walk``) and its
    position are made at the walk's first error: from there the walk goes on as ``run``'s would (issue 47)."""
    try:
        top = norm(path)
    except (TypeError, ValueError, OSError):  # the full course lets the standard rmtree say what is wrong
        return NOT_TAKEN
    # The held top (find_renamed): an O_PATH open (no lstat; a symlink: the full course), its fstat when asked (TopStat)
    try:
        fd = os.open(top, HOLD_FLAGS)
    except FileNotFoundError:
        return NotTaken(top, (None, True), None)
    except (OSError, ValueError):  # not a directory one can hold: lstat_top tells
        return NotTaken(top, None, None)
    attributes = TopStat(fd)
    handler = _LaneHandler((top, attributes, fd, original, world, rules, kwargs, use_onexc))
    try:
        try:
            at_once = rule.plain_at_once(top, attributes, world, rules)
        except OSError:  # its fstat failed: the full course reads the top again
            return NotTaken(top, None, None)
        if not at_once:
            return NotTaken(top, attributes.before(), False)
        remover = plain(original)
        if remover is None:
            return NOT_TAKEN
        try:
            if not kwargs or kwargs.keys() == _HANDLER_ALONE[use_onexc]:  # (fsguard's handler in its keyword's place)
                if use_onexc:
                    remover(path, onexc=handler.onexc)
                else:
                    remover(path, onerror=handler.onerror)
            else:
                positional, named = handler.caller().arguments((path,), kwargs, handler)
                remover(*positional, **named)
        except Vanishing:  # (only without the caller's handler: see _LaneHandler.walk)
            walk = handler.walk()
            if not walk.wait_for_peer_removal():
                positional, named = walk.caller.arguments((path,), kwargs, walk)
                walk.remove(positional, named)  # the peer stopped (or is slow): remove what is left
        except FileNotFoundError as exc:
            if not _escaped_absorbed(handler.walk(), exc):
                raise
        built = handler.built
        return None if built is None else built.found.verdict(world)
    finally:
        held = handler.held
        if held is None:
            os.close(fd)
        else:
            held.__exit__()  # the held top, and whatever the walk's Held took besides


class _LaneHandler:
    """The short course's error handler. It is the full course's ``Walk`` for this call, made at the walk's first
    error, with its ``Caller`` and ``Held`` (the held top's descriptor; ``lane`` closes it): none of them is made for
    a walk without errors. Its handler is called as ``Walk.onerror``/``onexc`` would be, one frame below the standard
    walk's (``Walk._retry`` reads that frame)."""

    __slots__ = ("built", "held", "made_of", "wanted")

    def __init__(self, made_of: tuple[Any, ...]) -> None:
        self.made_of = made_of  # top, its TopStat, the held top's descriptor, original, world, rules, kwargs, use_onexc
        self.wanted: Caller | None = None
        self.held: Held | None = None
        self.built: Walk | None = None

    def caller(self) -> Caller:
        """What the caller asked of its errors (its keywords), made once."""
        if self.wanted is None:
            kwargs, use_onexc = self.made_of[-2:]
            ignore = kwargs.get("ignore_errors", False)
            self.wanted = Caller(ignore, kwargs.get("onerror"), kwargs.get("onexc"), use_onexc)
        return self.wanted

    def walk(self) -> Walk:
        """The ``Walk`` that ``run`` would have made for this call, for a plain walk."""
        if self.built is None:
            top, attributes, fd, original, world, rules = self.made_of[:6]
            held = self.held = Held()
            before = attributes.before()  # (read now: the same directory, held)
            if before is not None:
                held.adopt(fd, before[0])
            else:  # nothing to tell it by: not held (Position reads the top's lstat_top itself)
                os.close(fd)
            caller = self.caller()
            walk = Walk(Position(top, world, held, before), original, caller, world, rules)
            walk.set_checking(False)
            # as run's walk: peers to wait for where the caller's errors raise (no handler of its own)
            walk.wait_on_vanish = rules.peers and not caller.ignore and caller.handler is None
            self.built = walk
        return self.built

    def onerror(self, func: Callable[..., Any], path: Any, exc_info: Any) -> None:
        self.walk()._handle(real(func), path, exc_info[1], exc_info)

    def onexc(self, func: Callable[..., Any], path: Any, exc: BaseException) -> None:
        self.walk()._handle(real(func), path, exc, None)


def _escaped_absorbed(walk: Walk, error: FileNotFoundError) -> bool:
    """Whether a failure that escaped the handler (e.g. ``fstat`` of the top on FUSE after a peer removed it) is the
    top gone meanwhile. One the handler passed on to the caller (raised, or raised by the caller's handler) is the
    caller's, and so is any with ``ignore_errors``."""
    caller = walk.caller
    if error is caller.forwarded or caller.ignore:
        return False
    name = getattr(error, "filename", None)
    if name is not None and norm(name) != walk.position.top:
        return False
    return walk.top_went(error)


def _remember_scratch(scratch: dict[str, None], top: str) -> None:
    """Note ``top`` as one of this process's scratch paths (``fsguard.guards.rmtree.plan``), keeping the newest
    ``MEMORY_SIZE`` paths."""
    scratch.pop(top, None)
    scratch[top] = None
    while len(scratch) > MEMORY_SIZE:
        try:
            del scratch[next(iter(scratch))]
        except (KeyError, RuntimeError, StopIteration):  # another thread's removal meanwhile
            break


class _Course:
    """The course of one guarded ``rmtree``, into one verdict. Its plan, the yield window, the walk (alone, or holding
    the path's lock), and a failure that escaped the walk's handler."""

    def __init__(
        self, walk: Walk, positional: list[Any], named: dict[str, Any], serializer: Any, at_once: bool | None
    ) -> None:
        self.walk = walk
        self.at_once = at_once  # plain at once (``plain_at_once``), where the short course asked already
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
            serialized = serializer is not None
            plan = rule.plan(top, position.top_st, own, world, rules, yield_s, top in scratch, serialized, self.at_once)
        if tree and position.top_st is not None:
            # See find_renamed; a plain walk too: a peer may still remove (or, against the plan, move) the tree, and
            # without a held descriptor a directory made since could carry its inode number (a false rename record).
            position.held.take(top, position.top_st)
        # "plain": nobody can move it meanwhile: the standard walk itself, with fsguard's error handler
        walk.set_checking(plan != "plain", serialized=serializer is not None)
        if plan == "wait" or self._announced():
            yielded = self._yield(yield_s)
            if yielded is not None:
                scratch.pop(top, None)  # a peer moved it: no scratch path
                self._tell_handler()
                return yielded
        try:
            yielded = self._walk()
            if yielded is not None:
                return yielded
        except Moved as moved:
            scratch.pop(top, None)  # a peer moved it: no scratch path
            removed, waited = position.removed.names, walk.found.waited + self.window
            return rule.moved_mid_walk(top, moved.renamed_to, removed, waited)
        except FileNotFoundError as exc:
            if not _escaped_absorbed(walk, exc):
                raise
        found = walk.found.verdict(world)
        if plan == "wait" and position.removed.count:
            event = own()
            made_here = event == "made-shared"
            if event in rule.MAKES_THE_NAME:  # no peer used the window: a scratch path (a name this process makes)
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

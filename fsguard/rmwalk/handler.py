"""fsguard's error handler for one walk (``Walk``). It knows what the caller asked of its errors, and what a peer did.

It passes the caller's errors on to the caller's handler (or raises them), absorbs only what the rule
(``fsguard.guards.rmtree``) says a peer did, retries a directory that is not empty at its removal, and waits for a
peer that removes the same tree.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import mounts
from ..calls import norm
from ..guards import Rules, World
from ..guards import rmtree as rule
from ..guards.rmtree import RmtreeVerdict
from ..waiting import Backoff, wait_for
from .position import Position
from .standard import checked, plain, real
from .tree import removal_residue, unguarded

RETRIES = 4


class Vanishing(BaseException):
    """Entries vanish under the walk: a peer is removing the same tree. Stop walking (and wait for it)."""


class Handlers(Protocol):
    """What ``Caller.arguments`` passes in place of the caller's handler. A ``Walk``, or the short course's."""

    def onerror(self, func: Callable[..., Any], path: Any, exc_info: Any) -> None: ...

    def onexc(self, func: Callable[..., Any], path: Any, exc: BaseException) -> None: ...


class Caller:
    """What the caller of ``rmtree`` asked of its errors, and what it got. ``ignore_errors`` and its own
    ``onerror``/``onexc`` (``onexc``: whether this ``rmtree`` takes one, 3.12+). ``forwarded``: the error that escaped
    to it, the caller's, never absorbed."""

    __slots__ = ("forwarded", "ignore", "onerror", "onexc", "use_onexc")

    def __init__(
        self, ignore: bool, onerror: Callable[..., Any] | None, onexc: Callable[..., Any] | None, use_onexc: bool
    ) -> None:
        self.ignore = ignore
        self.onerror = onerror
        self.onexc = onexc
        self.use_onexc = use_onexc
        self.forwarded: BaseException | None = None

    @property
    def handler(self) -> str | None:
        """The caller's own handler's keyword, ``"onexc"`` or ``"onerror"``, or None. Only where the caller passed its
        own handler; ``ignore_errors`` overrides it. Every error the walk meets is then the handler's to decide, as in
        the standard ``rmtree``."""
        if self.ignore:
            return None
        return "onexc" if self.onexc is not None else "onerror" if self.onerror is not None else None

    def arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], walk: Handlers
    ) -> tuple[list[Any], dict[str, Any]]:
        """The caller's arguments with the walk's handler in place of the caller's. ``onexc`` where it exists, else
        ``onerror``, in the position the caller used; none with ``ignore_errors``."""
        positional, named = list(args), dict(kwargs)
        if not self.ignore:
            if self.use_onexc:
                named["onexc"] = walk.onexc
            elif len(positional) > 2:
                positional[2] = walk.onerror
            else:
                named["onerror"] = walk.onerror
        return positional, named

    def forward(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        """Pass an error on as the standard library does: to the caller's handler, or raise."""
        try:
            if self.onexc is not None:
                self.onexc(func, path, exc)
            elif self.onerror is not None:
                self.onerror(func, path, exc_info or (type(exc), exc, exc.__traceback__))
            else:
                raise exc
        except BaseException as raised:
            self.forwarded = raised
            raise


class Found:
    """What a walk absorbed. Entries a peer removed first, directories removed again, seconds waited. The top gone
    (``"before"`` or ``"after"`` the walk), and where a peer renamed it. The first error absorbed."""

    __slots__ = ("entries_gone", "first_error", "handed", "renamed_to", "retried", "top_gone", "waited")

    def __init__(self) -> None:
        self.entries_gone: list[str] = []
        self.retried: list[str] = []
        self.waited = 0.0
        self.top_gone: str | None = None
        self.renamed_to: str | None = None
        self.first_error: BaseException | None = None
        self.handed: str | None = None  # the caller's handler that got what a peer did (``Walk._hand``)

    def verdict(self, world: World) -> RmtreeVerdict | None:
        return rule.walk_verdict(
            self.entries_gone,
            self.retried,
            self.top_gone,
            self.renamed_to,
            self.waited,
            self.first_error,
            world,
            self.handed,
        )


class Walk:
    """fsguard's error handler for one guarded ``rmtree`` call, and what it found. The standard rmtree calls it as
    ``onerror(func, path, exc_info)`` or ``onexc(func, path, exc)``. It passes the caller's errors on to the caller's
    handler (or raises them), and absorbs only what the rule says a peer did."""

    def __init__(self, position: Position, original: Callable[..., Any], caller: Caller, world: World, rules: Rules):
        self.position = position
        self.remover = original  # the caller's rmtree; ``checked`` makes it the checked walk
        self.caller = caller
        self.world = world
        self.rules = rules
        self.found = Found()
        self.wait_on_vanish = False  # stop at the first vanished entry and wait for the peer (``remove``)

    def set_checking(self, checking: bool, serialized: bool = False) -> None:
        """Remove the tree with the position checked, or plainly where no peer can move it. Checked: the standard walk's
        copy for this walk, where the caller's ``rmtree`` is the standard one. Plain, for a tree no peer can move
        meanwhile: no checks; not serialized, the standard walk's kept copy whose steps skip fsguard's wrappers
        (``plain``), else the caller's ``rmtree`` as it is."""
        position = self.position
        position.checking = checking
        if checking:
            self.remover = checked(self.remover, position) or self.remover
        elif not serialized:
            self.remover = plain(self.remover) or self.remover

    def remove(self, positional: list[Any], named: dict[str, Any], wait_on_vanish: bool = False) -> None:
        """Run the remover on the caller's arguments, with this walk's position checked. ``wait_on_vanish``:
        stop at the first entry a peer removed (``Vanishing``), to wait for it instead of racing it."""
        self.wait_on_vanish = wait_on_vanish
        self.remover(*positional, **named)

    def top_went(self, error: FileNotFoundError) -> bool:
        """Whether the top went while the walk ran; the rule waits for the evidence. ``error``, saying so, escaped the
        handler."""
        found = self.found
        gone, waited = rule.escaped_gone(self.position.top, self.world, self.rules)
        found.waited += waited
        if gone:
            found.top_gone = "after"
            found.first_error = found.first_error or error
        return gone

    def onerror(self, func: Callable[..., Any], path: Any, exc_info: Any) -> None:
        self._handle(real(func), path, exc_info[1], exc_info)

    def onexc(self, func: Callable[..., Any], path: Any, exc: BaseException) -> None:
        self._handle(real(func), path, exc, None)

    def _handle(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        code = getattr(exc, "errno", None)
        found, top = self.found, self.position.top
        is_top = norm(path) == top
        if code == errno.ENOENT and found.first_error is None:
            found.first_error = exc
        if self.caller.handler is not None:
            # The caller's own handler is the program's decision: it gets every error, as from the standard rmtree
            # (a tree or entries a peer removed included; the record says what it got).
            if code == errno.ENOENT:
                self._hand(func, is_top, path)
            self.caller.forward(func, path, exc, exc_info)
            return
        if code == errno.ENOENT:
            if not is_top and not rule.entry_gone_by_peer(self.rules):
                self.caller.forward(func, path, exc, exc_info)  # the standard library's error, at once
                return
            if not is_top:
                found.entries_gone.append(norm(path))
                if self.wait_on_vanish and rule.settle_on_vanishing(len(found.entries_gone)):
                    self.wait_on_vanish = False  # once per call: a resumed walk goes to its end
                    raise Vanishing
                return
            if func is os.rmdir:
                found.top_gone = "after"
                found.renamed_to = self.position.renamed()
                return
            missed = func is os.lstat or func is os.open  # the top's own lookup said it just now
            gone, waited = rule.top_gone_before_by_peer(top, self.world, self.rules, missed)
            found.waited += waited
            if gone:
                found.top_gone = "before"
                return
        elif code in (errno.ENOTEMPTY, errno.EBUSY) and func is os.rmdir and self._retry(path, code, sys._getframe(2)):
            return
        self.caller.forward(func, path, exc, exc_info)

    def _hand(self, func: Callable[..., Any], is_top: bool, path: Any) -> None:
        """Note a ``FileNotFoundError`` the caller's handler gets that a peer caused. The rule would have absorbed it as
        a peer's doing, decided from what the listings show now. The handler gets it anyway, with no waiting."""
        found, rules = self.found, self.rules
        if not is_top:
            if not rule.entry_gone_by_peer(rules):
                return
            found.entries_gone.append(norm(path))
        elif func is os.rmdir:
            found.top_gone = "after"
        else:
            gone, _ = rule.top_gone_before_by_peer(self.position.top, self.world, rules.without_waits())
            if not gone:
                return
            found.top_gone = "before"
        found.handed = self.caller.handler

    def _retry(self, path: Any, code: int, frame: Any) -> bool:
        """Remove a directory again that was not empty at its removal, if still safe. It must still be the same
        directory. Everything in it now must have been in it when the walk listed it, or be what a removal in progress
        leaves. (An NFS or FUSE client's silly-renamed ``.nfs…``/``.fuse_hidden…`` file of an unlinked open one.) An
        entry that appeared after the walk's listing (a peer publishing into the tree) is not the call's to remove, and
        neither is a busy mount point (no peer's removal ends that): the error goes where the standard rmtree sends
        it."""
        where = norm(path)
        before = self._started_on(where, frame)
        if code == errno.EBUSY and before is not None and not rule.busy_may_clear(where, before, self.world):
            return False
        found = self.found
        backoff = Backoff(self.rules.settle_s - found.waited, 0.02, 0.16, tries=RETRIES, paused_only=True)
        try:
            while backoff.pause():
                now = self.world.lstat(where)
                if now is None:
                    found.retried.append(where)
                    return True  # a peer finished it
                if before is None or not os.path.samestat(before, now):
                    return False  # a different directory now stands there (or no telling): not ours to remove
                done = self._remove_again(where)
                if done is None:
                    return False  # something was put there after the walk listed it: not ours to remove
                if done:
                    found.retried.append(where)
                    return True
            return False
        finally:
            found.waited += backoff.waited()

    def _remove_again(self, where: str) -> bool | None:
        """Remove the directory ``where`` and its contents, if the walk listed all of it. A removal's residue counts as
        listed, and so do directories among it. True when it is gone. False when something of it stays (``_retry`` tries
        again, bounded). None when something in it appeared after the walk's listing."""
        try:
            names = os.listdir(where)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        listed = self.position.listings.get(where, set())
        if not all(name in listed or removal_residue(name) for name in names):
            return None
        for name in names:
            full = os.path.join(where, name)
            try:
                if stat.S_ISDIR(os.lstat(full).st_mode):
                    done = self._remove_again(full)
                    if done is not True:
                        return done
                else:
                    unguarded("unlink")(full)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        try:
            unguarded("rmdir")(where)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    def _started_on(self, path: str, frame: Any) -> os.stat_result | None:
        """The directory the standard ``rmtree`` found at ``path`` when it started. It is read from its failing frame:
        ``orig_st`` for the recursive walk. For the stack-based walk, the stat cached in ``orig_entry``. That walk keeps
        no stat of the top; for the top, the walk's own."""
        frame = _walk_frame(frame)
        found: Any = frame.f_locals if frame is not None else {}
        st = found.get("orig_st")
        entry = found.get("orig_entry")
        if st is None and entry is not None:
            try:
                st = entry.stat(follow_symlinks=False)  # cached when the walk reached the entry: no new lookup
            except OSError:
                st = None
        if st is None and path == self.position.top:
            st = self.position.identity()
        return st if isinstance(st, os.stat_result) else None

    def wait_for_peer_removal(self) -> bool:
        """Wait for a peer removing this tree instead of racing it. It waits at most ``FSGUARD_SETTLE_S`` for the tree's
        name to leave the parent's fresh listing. Racing the peer entry by entry would cost N ranks N times the tree's
        metadata operations. True when the tree went (removed, or renamed: then where), False to walk on.

        Each probe is the name's own lookup (a peer's removal on this node shows there at once, and where the mount
        caches no missing names a miss is the truth: ``World.look``); while the lookup still shows the tree, a
        listing (several requests to a distributed filesystem's metadata server) is read only when one is due:
        ``_LISTING_EVERY_S`` into the wait, or the mount's own lookup cache time where it shows one (JuiceFS's
        1 s: the lookup is fresh by then), then each after at least as long again as the wait has lasted (a
        handful in a long wait, however slow the peer), and listings taking at most a tenth of the time."""
        found, world, position = self.found, self.world, self.position
        top = position.top
        start = position.top_st or position.identity()  # what the name showed when the call began (see ``check``)
        began = time.monotonic()
        # Where the mount says how long a lookup may stay stale, the lookup itself is fresh by then: no listing before
        cached = mounts.cache_s(start.st_dev) if start is not None else None
        listing = _Spacing(began + max(_LISTING_EVERY_S, cached or 0.0), began)

        def went() -> bool | None:
            now = world.lstat(top)
            if now is not None and start is not None and not os.path.samestat(now, start):
                found.top_gone = "after"  # our tree went; another one stands there now: not ours to remove
                return True
            if now is not None and not listing.due():
                return None  # still there by its lookup; no listing due yet
            seen = listing.timed(lambda: world.look(top, missed=now is None))  # a miss is not asked twice
            if not seen.present:  # gone (its parent too, or its parent unreadable: the walk will tell)
                if not seen.parent_exists:
                    return False
                found.top_gone = "after"
                # the plain walk's tree, which no peer moves: removed by the peer this wait was for, not searched
                found.renamed_to = position.renamed() if position.checking else None
                return True
            return None

        gone, waited = wait_for(went, self.rules.settle_s, 0.005, 0.05)
        found.waited += waited
        if not gone:
            position.restart()  # the same tree (checked): the resumed walk's open is its top again
        return bool(gone)


_LISTING_EVERY_S = 0.05  # a wait for a peer's removal reads its first fresh listing this far in (see above)


class _Spacing:
    """When the next fresh listing of a wait that began at ``began`` is due. At ``after``, then each after at least as
    long again as the wait has lasted. Listings take at most a tenth of the time, and are at least ``_LISTING_EVERY_S``
    apart."""

    __slots__ = ("after", "began")

    def __init__(self, after: float, began: float) -> None:
        self.after = after
        self.began = began

    def due(self) -> bool:
        return time.monotonic() >= self.after

    def timed(self, read: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return read()
        finally:
            now = time.monotonic()
            self.after = now + max(_LISTING_EVERY_S, 9 * (now - started), now - self.began)


def _walk_frame(frame: Any) -> Any:
    """The standard walk's frame that met the error. It is the handler's caller, or the caller of ``rmtree``'s own
    ``onexc`` adapter where one stands between them. 3.15 wraps a caller's ``onexc`` in one that drops the
    ``direntry`` and ``dir_fd`` keywords."""
    while frame is not None and frame.f_code.co_name == "onexc" and frame.f_code.co_filename == shutil.__file__:
        frame = frame.f_back
    return frame

"""``shutil.rmtree``: finish removing a tree that peers of this job are removing at the same time.

The standard ``rmtree`` runs unchanged, with an error handler of fsguard's in front of the caller's:
  * ``FileNotFoundError`` on an entry inside the tree (it was listed a moment ago): a peer removed it.
  * ``FileNotFoundError`` on the top path before anything was removed: absorbed when its parent changed
    during this job and this process did not remove or move it itself (idempotence; a README deviation).
  * ``FileNotFoundError`` on the top path after the walk: a peer removed or renamed the emptied tree. If a
    peer *renamed* it (its inode is found under another name), entries removed before the rename may be
    missing from the renamed result: a ``hazard`` record says where (the standard rmtree does not report
    what it removed, so the record cannot list the names or tell that none were).
  * ``ENOTEMPTY``/``EBUSY`` on a directory: a peer (or NFS's ``.nfsXXXX`` files) added entries mid-walk;
    removal of that directory is retried, bounded by ``FSGUARD_SETTLE_S``, while it is still the same
    directory.
Every other error goes to the caller's ``onexc``/``onerror``, or is raised, exactly as without fsguard;
once passed on, an error is the caller's: if it (or the caller's handler) raises out of ``rmtree``, it is
never absorbed afterwards. ``ignore_errors=True`` and ``dir_fd`` calls, and calls the standard ``rmtree``
rejects (bad arguments, ``onexc`` before Python 3.12), pass straight through.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import evidence
from . import Rules, Verdict

_RETRIES = 4


class _Walk:
    """Error handler for one guarded ``rmtree`` call; collects what it absorbed."""

    def __init__(
        self,
        original: Callable[..., Any],
        top: Any,
        rules: Rules,
        use_onexc: bool,
        onerror: Callable[..., Any] | None,
        onexc: Callable[..., Any] | None,
    ) -> None:
        self.original = original
        self.top = top
        self.top_norm = evidence.norm(top)
        # The top as it is before the walk: which directory "the tree" is, where the failing frame does not
        # say (see ``_started_on``). One lstat per guarded call; None if it cannot be read (rmtree will say why).
        self.top_st = _lstat_quietly(self.top_norm)
        self.rules = rules
        self.use_onexc = use_onexc
        self.user_onerror = onerror
        self.user_onexc = onexc
        self.entries_gone: list[str] = []
        self.retried: list[str] = []
        self.waited = 0.0
        self.top_gone: str | None = None  # "before" or "after" the walk
        self.renamed_to: str | None = None
        self.first_error: BaseException | None = None
        self.forwarded: BaseException | None = None  # what escaped _forward: the caller's, never absorbed

    # Called by the standard rmtree as onerror(func, path, exc_info) or onexc(func, path, exc).
    def onerror(self, func: Callable[..., Any], path: Any, exc_info: Any) -> None:
        self._handle(func, path, exc_info[1], exc_info)

    def onexc(self, func: Callable[..., Any], path: Any, exc: BaseException) -> None:
        self._handle(func, path, exc, None)

    def _handle(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        code = getattr(exc, "errno", None)
        is_top = evidence.norm(path) == self.top_norm
        if code == errno.ENOENT and self.first_error is None:
            self.first_error = exc
        if code == errno.ENOENT:
            if not is_top:
                self.entries_gone.append(evidence.norm(path))
                return
            if func is os.rmdir:
                self.top_gone = "after"
                self.renamed_to = _find_renamed(self.top_norm, self._started_on(self.top_norm, sys._getframe(2)))
                return
            if self._top_gone_before_by_peer():
                self.top_gone = "before"
                return
        elif code in (errno.ENOTEMPTY, errno.EBUSY) and func is os.rmdir and self._retry(path, sys._getframe(2)):
            return
        self._forward(func, path, exc, exc_info)

    def _top_gone_before_by_peer(self) -> bool:
        if evidence.own_last_event(self.top_norm) in ("removed", "moved-away"):
            return False  # this process removed it itself: raise as the standard library does
        parent = os.path.dirname(self.top_norm)

        def gone_from_listing() -> evidence.Look | None:
            seen = evidence.look(self.top_norm)
            return seen if (not seen.parent_exists or not seen.present) else None

        # A stale lookup cache can say "missing" while peers are still deleting the tree: wait (bounded)
        # for the fresh listing to drop the name.
        seen, waited = evidence.settle(gone_from_listing, self.rules.settle_s)
        self.waited += waited
        if seen is None or not seen.parent_exists:
            return False
        st = evidence.lstat_or_none(parent)
        return st is not None and self.rules.is_fresh(st.st_ctime)

    def _retry(self, path: Any, frame: Any) -> bool:
        """Remove a directory again that gained entries mid-walk, if it is still the same directory."""
        before = self._started_on(evidence.norm(path), frame)
        for attempt in range(_RETRIES):
            if self.waited >= self.rules.settle_s:
                return False
            pause = min(0.02 * (2**attempt), max(self.rules.settle_s - self.waited, 0.0))
            time.sleep(pause)
            self.waited += pause
            now = evidence.lstat_or_none(evidence.norm(path))
            if now is None:
                self.retried.append(evidence.norm(path))
                return True  # a peer finished it
            if before is None or not os.path.samestat(before, now):
                return False  # a different directory now stands there (or no telling): not ours to remove
            failures = _Failures()
            kwargs = {"onexc": failures.add} if self.use_onexc else {"onerror": failures.add}
            self.original(path, **kwargs)
            if not any(getattr(e, "errno", None) != errno.ENOENT for e in failures.seen):
                self.retried.append(evidence.norm(path))
                return True
        return False

    def _started_on(self, path: str, frame: Any) -> os.stat_result | None:
        """The directory the standard ``rmtree`` found at ``path`` when it started removing it, to tell it from
        one that stands there since. Read from the standard ``rmtree``'s failing frame, whichever form it has:
        ``orig_st`` (the recursive walk), or the stat cached in ``orig_entry`` (the stack-based walk, which
        keeps no stat of the top: for the top, fsguard's own lstat from just before the call)."""
        found: Any = frame.f_locals if frame is not None else {}
        st = found.get("orig_st")
        entry = found.get("orig_entry")
        if st is None and entry is not None:
            try:
                st = entry.stat(follow_symlinks=False)  # cached when the walk reached the entry: no new lookup
            except OSError:
                st = None
        if st is None and path == self.top_norm:
            st = self.top_st
        return st if isinstance(st, os.stat_result) else None

    def absorb_escaped(self, exc: BaseException) -> bool:
        """A ``FileNotFoundError`` that bypassed the handler: absorbed if a peer removed the whole tree."""
        name = getattr(exc, "filename", None)
        if name is not None and evidence.norm(name) != self.top_norm:
            return False
        if evidence.own_last_event(self.top_norm) in ("removed", "moved-away"):
            return False

        def gone() -> bool | None:
            seen = evidence.look(self.top_norm)
            return True if seen.parent_exists and not seen.present else None

        result, waited = evidence.settle(gone, self.rules.settle_s)
        self.waited += waited
        if result is None:
            return False
        self.top_gone = "after"
        self.first_error = self.first_error or exc
        return True

    def _forward(self, func: Callable[..., Any], path: Any, exc: BaseException, exc_info: Any) -> None:
        """Pass an error on as the standard library does: to the caller's handler, or raise it."""
        try:
            if self.user_onexc is not None:
                self.user_onexc(func, path, exc)
            elif self.user_onerror is not None:
                self.user_onerror(func, path, exc_info or (type(exc), exc, exc.__traceback__))
            else:
                raise exc
        except BaseException as raised:
            self.forwarded = raised
            raise

    def verdict(self) -> Verdict | None:
        if not (self.entries_gone or self.top_gone or self.retried):
            return None
        parts = []
        if self.top_gone == "before":
            parts.append("tree already removed (its parent changed during this job)")
        if self.entries_gone:
            parts.append(
                f"{len(self.entries_gone)} entr{'y' if len(self.entries_gone) == 1 else 'ies'} removed by a peer first"
            )
        if self.retried:
            parts.append(
                f"{len(self.retried)} director{'y' if len(self.retried) == 1 else 'ies'} "
                f"gained entries mid-walk and were removed again"
            )
        detail: dict[str, Any] = {
            "entries_gone": self.entries_gone[:50],
            "retried": self.retried[:50],
            "error": self.first_error,
            "top_gone": self.top_gone,  # the top's error escapes the standard rmtree: a caller's handler decides
        }
        if self.top_gone == "after":
            if self.renamed_to:
                detail["renamed_to"] = self.renamed_to
                return Verdict(
                    True,
                    "hazard",
                    f"tree renamed to {self.renamed_to} by a peer while this process was removing it: "
                    f"{self.renamed_to} may be missing entries removed before the rename (the standard "
                    f"rmtree does not say which, or whether any; still there: {_count(self.renamed_to)})",
                    self.waited,
                    detail,
                )
            parts.append("top directory removed by a peer at the end")
        return Verdict(True, "absorbed", "; ".join(parts), self.waited, detail)


class _Failures:
    """Collects the errors of a retried removal (as ``onexc`` or ``onerror``)."""

    def __init__(self) -> None:
        self.seen: list[BaseException] = []

    def add(self, func: Callable[..., Any], path: Any, exc: Any) -> None:
        self.seen.append(exc if isinstance(exc, BaseException) else exc[1])


def _count(path: str) -> str:
    try:
        n = len(os.listdir(path))
    except OSError:
        return "unknown"
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _lstat_quietly(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (OSError, ValueError):  # missing, unreadable, a NUL in the name: the standard rmtree reports it
        return None


def _find_renamed(top: str, orig: os.stat_result | None) -> str | None:
    """Where the tree went, if a peer renamed it within its parent (found by the inode rmtree started on)."""
    if orig is None:
        return None
    parent = os.path.dirname(top)
    try:
        with os.scandir(parent) as entries:
            for entry in entries:
                if entry.inode() == orig.st_ino:
                    st = entry.stat(follow_symlinks=False)
                    if st.st_dev == orig.st_dev:
                        return entry.path
    except OSError:
        return None
    return None


def _walk(
    original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules, use_onexc: bool
) -> _Walk | None:
    """fsguard's handler for one call, or None for a call the standard ``rmtree`` rejects by itself: more
    positional arguments than it takes (adding fsguard's handler would change its message), no path at all."""
    if len(args) > 3:
        return None
    onerror = args[2] if len(args) > 2 else kwargs.get("onerror")
    try:
        return _Walk(original, args[0] if args else kwargs["path"], rules, use_onexc, onerror, kwargs.get("onexc"))
    except (TypeError, ValueError):
        return None


def run(
    original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules, use_onexc: bool
) -> Verdict | None:
    """Call the standard ``rmtree`` with fsguard's handler; return a verdict when something was absorbed.

    The standard ``rmtree`` gets the caller's own arguments, fsguard's handler in place of the caller's
    (``onexc`` where it exists, else ``onerror``, in the position the caller used), so it accepts or
    rejects the call (an argument given twice, ``onexc`` before Python 3.12) as it would alone.
    """
    walk = _walk(original, args, kwargs, rules, use_onexc)
    if walk is None:
        original(*args, **kwargs)  # the standard rmtree says what is wrong (outside any except: no __context__)
        return None
    positional, named = list(args), dict(kwargs)
    if use_onexc:
        named["onexc"] = walk.onexc
    elif len(positional) > 2:
        positional[2] = walk.onerror
    else:
        named["onerror"] = walk.onerror
    try:
        original(*positional, **named)
    except FileNotFoundError as exc:
        # Some failures escape the handler (e.g. ``fstat`` of the top on FUSE after a peer removed it);
        # one the handler passed on to the caller (raised, or raised by the caller's handler) stays raised.
        if exc is walk.forwarded or not walk.absorb_escaped(exc):
            raise
    return walk.verdict()

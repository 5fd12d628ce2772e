"""The one failure pipeline: a guarded call failed; absorb its error, or leave it to the program unchanged.

``fsguard.patching`` builds one :class:`~fsguard.calls.Call` for the failing call and hands ``(call, error)`` to
:func:`absorbs`, which goes down once: what no evidence can absorb (one ``lstat``), fsguard's own or a finalizing
interpreter's call, the standard library's own business (frames) -> the rule, ``guards.<op>.decide(call, error,
world, rules)`` -> the caller's context (``fsguard.handlers``: deferred where the calling code handles the error)
-> the record. The rules and the evidence are imported at the first failure, not at startup.
"""

from __future__ import annotations

import os
import stat
import sys

from .calls import FAMILY, Call
from .state import STATE, Busy, Unforkable, busy

TYPE_CHECKING = False  # not typing's (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .guards import Rules, Verdict, World
    from .guards.rmtree import Removal


class _Rule:
    """``fsguard.guards.<module>.<function>``, imported at its first call (the first failure), not at startup."""

    __slots__ = ("function", "module")

    def __init__(self, module: str, function: str = "decide") -> None:
        self.module = f"fsguard.guards.{module}"
        self.function = function

    def load(self) -> Callable[..., Any]:
        found: Callable[..., Any] = getattr(__import__(self.module, fromlist=[self.function]), self.function)
        return found

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)


def _rule(module: str, function: str = "decide") -> Callable[..., Any]:
    return _Rule(module, function)


DECIDE: dict[str, Callable[[Call, OSError, World, Rules], Verdict]] = {
    "makedirs": _rule("makedirs"),
    "rename": _rule("rename"),
    "replace": _rule("rename"),
    "remove": _rule("remove"),
    "rmdir": _rule("remove"),  # the same evidence: a missing name, a directory a peer changed moments ago
    "mkdir": _rule("mkdir"),
    "symlink": _rule("symlink"),
    "link": _rule("link"),
}
_STDLIB_CALLERS = frozenset(("os", "shutil", "tempfile"))
_PATHLIB_OPTIONS = {"mkdir": "exist_ok", "unlink": "missing_ok"}  # Path method -> its "that is fine" flag
# Operations whose rule may wait up to FSGUARD_SETTLE_S for evidence that never comes (a rename whose source
# never existed waits for a destination nobody makes): when the calling code handles the error, that wait
# would only delay its handler (an ``os.rename(lock, mine)`` lock's every failed try), so the rule decides
# without it.
_WAIT_FOR_EVIDENCE = frozenset({"rename", "replace"})
_NOT_ASKED: Any = object()
# Where a makedirs calls itself for a missing parent: the standard makedirs, and patching's level taken in turn
_IN_TURN = ("fsguard.patching", "_parents_in_turn")


def load_policy() -> None:
    """Import the rules and the evidence now rather than at the first failure: for a process about to lose
    access to its own site-packages (dropping privileges to a user that cannot read them, ``chroot``).
    Without it such a process still runs: a rule that cannot be imported re-raises the original error."""
    _import_failure_path()
    rules()


def _import_failure_path() -> None:
    """The modules a failure needs, imported together at the first failure (or by ``load_policy``)."""
    for rule in DECIDE.values():
        if isinstance(rule, _Rule):
            rule.load()
    from . import handlers, records, rmwalk, runtime, world  # noqa: F401 - loaded now, used at the first failure


def shutting_down() -> bool:
    """Whether the interpreter is finalizing (``__del__`` of module globals, late finalizers): imports fail then
    (``sys.meta_path`` is None) and records could not be written, so a guarded call is the unpatched call.
    Asked only where fsguard would import or record: a failure's decision, a serialized call (every rmtree
    asks ``sys.meta_path`` alone: the import its walk needs is what fails)."""
    return sys.meta_path is None or sys.is_finalizing()


def rules() -> Rules:
    """The rules' numbers, made once per settings object (every guarded rmtree asks, not only failures)."""
    settings = STATE.settings
    made = STATE.rules_for
    if made is None or made[0] is not settings:
        if made is None:
            # Imports hold a per-module lock that a child forked meanwhile by another thread would wait on
            # forever (a DataLoader's fork during a first failure): no fork splits them (``state.Unforkable``).
            with Unforkable():
                _import_failure_path()
        from . import evidence
        from .guards import Rules

        launched = STATE.launch is not None
        job_start = evidence.job_start(launched)
        peers = STATE.launch is not None and STATE.launch.distributed
        source, attempt = evidence.job_start_source, evidence.attempt_start(launched)
        numbers = Rules(settings.settle_s, settings.fresh_s, job_start, peers, source, STATE.job, attempt)
        made = STATE.rules_for = (settings, numbers)
    found: Rules = made[1]
    return found


def absorbs(call: Call, error: OSError) -> bool:
    """The pipeline: True to absorb ``error``, the failure of ``call``. Called by the guarded function's wrapper
    itself (the frame questions below count from it). Any failure inside fsguard's own decision means: re-raise
    the original."""
    op = call.op
    if _stays_raised(call, error):
        return False
    if busy() or shutting_down() or (op == "makedirs" and _inside_makedirs()) or (op in FAMILY and left_to_caller()):
        return False
    try:
        with Busy():
            numbers = rules()
            handler = _NOT_ASKED
            if op in _WAIT_FOR_EVIDENCE and isinstance(error, FileNotFoundError) and numbers.settle_s > 0:
                # The caller will get the error anyway: decide from what the listings show now, no waiting.
                handler = _caller_handler(error)
                if handler is not None:
                    numbers = numbers.without_waits()
            from .world import LIVE

            verdict = DECIDE[op](call, error, LIVE, numbers)
    except Exception as failure:  # noqa: BLE001 - a broken rule must not change what the caller sees
        rule_failed(op, failure)
        return False
    # makedirs(exist_ok=True) absorbs only a stale lookup's FileExistsError for a directory that is there:
    # absorbing keeps the meaning a handler waits for ("exists and is not a directory").
    if verdict.absorb and not (op == "makedirs" and call.options.exist_ok):
        verdict = defer_to_caller(verdict, error, handler)
    return settle(verdict, call, error)


def walked(verdict: Removal, call: Call) -> bool:
    """An rmtree walk's verdict (``fsguard.rmwalk``), deferred and recorded as a failure's; True: absorbed."""
    error = verdict.error
    settled: Verdict = verdict
    if verdict.absorb and verdict.top_gone and isinstance(error, OSError):
        settled = defer_to_caller(verdict, error)  # the error the standard rmtree lets escape
    return settle(settled, call, error)


def settle(verdict: Verdict, call: Call, error: BaseException | None) -> bool:
    """Record a verdict that needs one; True when the failure is absorbed."""
    if verdict.decision is not None:
        from . import runtime  # records, call sites: only once there is something to write

        runtime.record(
            call.op, verdict.decision, verdict.evidence, call.shown(), error, verdict.waited_s, verdict.detail
        )
    return verdict.absorb


def _stays_raised(call: Call, error: OSError) -> bool:
    """:func:`_stands_before` for a mkdir or makedirs(exist_ok=False) that met something at its name."""
    if error.__class__ is not FileExistsError or call.op not in ("mkdir", "makedirs"):
        return False
    name = call.given[0] if call.bound else None
    return not call.options.exist_ok and name is not None and call.fds.dir_fd is None and _stands_before(name)


def _stands_before(name: Any) -> bool:
    """Whether a mkdir's (or makedirs(exist_ok=False)'s) ``FileExistsError`` at ``name`` is one no evidence can
    absorb, told by one lstat before any decision: something other than a directory stands there, or a
    directory older than the job (the rule, :func:`fsguard.guards.makedirs.made_by_peer`, re-raises both,
    whatever else it finds). A handled ``try: os.mkdir(lock) except FileExistsError`` on such a path costs one
    lstat: no listing, no handler analysis. False: not sure (no lstat: a stale lookup cache may say missing;
    a fresh directory), the full decision follows."""
    try:
        st = os.lstat(name)
    except Exception:  # noqa: BLE001 - anything odd: the full decision
        return False
    if not stat.S_ISDIR(st.st_mode):
        return True
    made = STATE.rules_for
    if made is None or made[0] is not STATE.settings:
        try:
            with Busy():  # the first failure imports the rules (imports may write caches)
                rules()
        except Exception:  # noqa: BLE001 - no rules to be had: the decision says so
            return False
        made = STATE.rules_for
        if made is None:
            return False
    numbers: Rules = made[1]
    return numbers.before_job(st.st_ctime)


def _inside_makedirs() -> bool:
    """Whether this failing makedirs is the standard makedirs' own call for a missing parent.

    The standard makedirs calls ``makedirs(head, exist_ok=exist_ok)`` through the module attribute, so that
    call is guarded too; its ``FileExistsError`` is caught by the outer standard makedirs, which goes on.
    Deciding (and recording) it here would only add a record for a failure nobody sees.
    """
    code = getattr(STATE.originals.get("makedirs"), "__code__", None)
    frame: Any = sys._getframe(2)  # callers of absorbs: the wrapper (and a serializer)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code is code or (frame.f_globals.get("__name__"), frame.f_code.co_name) == _IN_TURN:
            return True
        frame = frame.f_back
    return False


def left_to_caller(depth: int = 2) -> bool:
    """Whether a failing remove/mkdir/symlink/link is the standard library's own business (the first frame
    outside fsguard and wrapt): ``os.makedirs`` calls ``mkdir`` and is decided itself (one decision, not two),
    shutil's tree walks hand errors to their own handlers, ``tempfile`` claims names by ``mkdir`` and
    ``FileExistsError`` means "try another"; ``Path.mkdir(exist_ok=True)`` and ``Path.unlink(missing_ok=True)``
    settle the very error themselves (a decision there would only add a record). Such calls are not serialized
    either: ``os.makedirs`` already holds the lock on its path, and would wait for itself."""
    frame: Any = sys._getframe(depth)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "wrapt" or module.startswith(("wrapt.", "fsguard."))) or module.startswith(
            ("fsguard.demo", "fsguard.cli")
        ):
            if module == "pathlib" or module.startswith("pathlib."):  # 3.13: pathlib._local
                return (
                    frame.f_code.co_name in _PATHLIB_OPTIONS
                    and frame.f_locals.get(_PATHLIB_OPTIONS[frame.f_code.co_name]) is True
                )
            return module in _STDLIB_CALLERS
        frame = frame.f_back
    return False


def _caller_handler(error: BaseException) -> dict[str, Any] | None:
    from . import handlers  # the failure path only

    with Busy():
        return handlers.caller_handles(error, sys._getframe(1))  # fsguard's own frames are passed over


def rule_failed(op: str, failure: Exception) -> None:
    """One line on stderr, once per operation, when its rule raised (the caller's error is re-raised)."""
    if op not in STATE.caches.failed_rules:
        STATE.caches.failed_rules.add(op)
        try:
            from ._warn import warn
        except ImportError:  # nothing importable any more (dropped privileges): the original error, silently
            return

        warn(
            f"the {op} rule failed ({type(failure).__name__}: {failure}); the original error is re-raised "
            "unchanged (said once per operation)"
        )


def defer_to_caller(verdict: Verdict, error: BaseException, found: dict[str, Any] | None = _NOT_ASKED) -> Verdict:
    """The same verdict where ``error`` would crash its thread or process (fsguard absorbs only a would-be
    crash); otherwise a ``deferred`` one: re-raised to the program's own handling (or left to the program where
    fsguard cannot read it), recorded with the evidence that would have absorbed it and what decides instead
    (fsguard.handlers). ``found``: the handler already looked for, if it was."""
    from .guards import Verdict

    if found is _NOT_ASKED:
        found = _caller_handler(error)
    if found is None:
        return verdict
    if verdict.decision != "absorbed":  # a hazard stays visible in the audit
        found["instead_of"] = verdict.decision
    return Verdict(False, "deferred", verdict.evidence, verdict.waited_s, {**verdict.detail, **found})

"""The one failure pipeline: absorb a guarded call's error, or leave it unchanged.

``fsguard.patching`` builds one :class:`~fsguard.calls.Call` for the failing call. It hands ``(call, error)`` to
:func:`absorbs`, which goes down once, asking each stage in turn. First what no evidence can absorb (one ``lstat``), and
fsguard's own or a finalizing interpreter's call. Then the standard library's own business (``fsguard.callers``' frame
questions). Then the caller's context (``fsguard.oracle``: what the calling code does with the error). Then the rule,
``guards.<op>.decide(call, error, world, rules)``. Then defer (where the calling code handles the error) or absorb, and
last the record. A guarded ``rmtree`` goes down the same way (:func:`walk`). First the rules, then the walk
(``fsguard.rmwalk``, which asks its rule at each step). Then the context of the error it let escape, and the record. The
rules, the caller's context and the evidence are imported at the first failure, not at startup.
"""

from __future__ import annotations

import os
import stat
import sys

from . import callers
from .calls import FAMILY, Call
from .launcher import is_single_node
from .operations import OPERATIONS
from .state import STATE, Busy, Unforkable, busy, shutting_down

TYPE_CHECKING = False  # not typing's (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from .config import Settings
    from .guards import Rules, Verdict, World
    from .guards.rmtree import RmtreeVerdict


class _Made:
    """The rules' numbers and the settings they were made from. Made once per install (a ``STATE.caches`` cache).
    ``failure_path``: whether what a failure needs is imported (``failure_path_ready``)."""

    __slots__ = ("failure_path", "lane", "rules")

    def __init__(self) -> None:
        self.rules: tuple[Settings, Rules] | None = None
        self.failure_path = False
        self.lane: tuple[Any, Any, World] | None = None  # fsguard.rmwalk's lane and NotTaken, and the live world

    def clear(self) -> None:
        self.rules = None
        self.lane = None


MADE = STATE.caches.register(_Made())
FAILED_RULES: set[str] = STATE.caches.register(set())  # operations whose rule failed (reported once each)


class _Rule:
    """An operation's rule, ``fsguard.guards.<module>.decide``, imported at its first call (the first failure)."""

    __slots__ = ("module",)

    def __init__(self, module: str) -> None:
        self.module = module

    def load(self) -> Callable[..., Any]:
        found: Callable[..., Any] = _rule_modules()[self.module].decide
        return found

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)


def _rule_modules() -> dict[str, ModuleType]:
    """Every rule module by name (``guards.rule_modules``: plain imports), at the first failure, not at startup."""
    from .guards import rule_modules

    return rule_modules()


# A view of fsguard.operations' table: each operation's rule (rmtree's is its walk: ``walk`` below).
DECIDE: dict[str, Callable[[Call, OSError, World, Rules], Verdict]] = {
    op.name: _Rule(op.rule) for op in OPERATIONS.values() if op.rule is not None
}


def load_policy() -> None:
    """Import the rules and the evidence now rather than at the first failure. For a process about to lose access to its
    own site-packages: dropping privileges to a user that cannot read them, or ``chroot``. Without it such a process
    still runs: a rule that cannot be imported re-raises the original error."""
    rules()
    failure_path_ready()


# Imports hold a per-module lock that a child forked meanwhile by another thread would wait on forever (a DataLoader's
# fork during a first failure): each set below is imported whole inside ``state.Unforkable``, so that no fork splits
# one, and no module of it is first imported outside the section (a child forked while another thread imported one
# there waited forever for that module's lock at its own first failure).


def _import_walk_path() -> None:
    """The modules every guarded ``rmtree`` needs: its rules, walk and evidence. Imported at the first one."""
    import ctypes  # noqa: F401 - evidence's statx

    from . import evidence, rmwalk, world  # noqa: F401 - loaded now, used by the walk


def _import_failure_path() -> None:
    """The other modules a failure needs, imported at the first failure. The rules of every operation, the caller's
    context (the oracle, and the standard library's bytecode and source readers it uses), the records. A first
    ``rmtree`` that meets no failure imports none of them (issue 47: 40 ms of a first call's 70)."""
    _rule_modules()
    import ast  # noqa: F401
    import dis  # noqa: F401
    import inspect  # noqa: F401
    import linecache  # noqa: F401
    import pathlib  # noqa: F401

    from . import oracle, records, runtime  # noqa: F401 - loaded now, used at the first failure

    runtime.site_dirs()  # a record's call site: ``sysconfig``, and the data module it imports at its first use


def failure_path_ready() -> None:
    """Import what a failure needs (``_import_failure_path``), once, no fork splitting it."""
    if not MADE.failure_path:
        with Unforkable():
            _import_failure_path()
        MADE.failure_path = True


def _ready(name: str) -> ModuleType | None:
    """fsguard's module ``name`` where it is imported whole, else None. None: not yet, or another thread still imports
    it. One dictionary lookup: a relative import inside a function costs 2-4 us at every call (``__spec__.parent`` is a
    Python property), issue 47."""
    module = sys.modules.get(f"{__package__}.{name}")
    if module is None or getattr(module.__spec__, "_initializing", False):
        return None
    return module


def _live_world() -> World:
    """``fsguard.world.LIVE``, imported if need be (``_ready``)."""
    world = _ready("world")
    if world is None:
        from .world import LIVE

        return LIVE
    live: World = world.LIVE
    return live


def _rmwalk() -> ModuleType:
    """``fsguard.rmwalk``, imported if need be (``_ready``)."""
    found = _ready("rmwalk")
    if found is None:
        from . import rmwalk

        return rmwalk
    return found


def rules() -> Rules:
    """The rules' numbers, made once per settings object (every guarded rmtree asks, not only failures)."""
    settings = STATE.settings
    made = MADE.rules
    if made is None or made[0] is not settings:
        if made is None:
            with Unforkable():  # see _import_walk_path
                _import_walk_path()
        from . import evidence
        from .guards import Rules

        launched = STATE.launch is not None
        job_start = evidence.job_start(launched)
        peers = STATE.launch is not None and STATE.launch.distributed
        source, attempt = evidence.job_start_source, evidence.attempt_start(launched)
        numbers = Rules(settings.settle_s, settings.fresh_s, job_start, peers, source, STATE.job, attempt)
        made = MADE.rules = (settings, numbers)
    found: Rules = made[1]
    return found


def absorbs(call: Call, error: OSError) -> bool:
    """The pipeline: True to absorb ``error``, the failure of ``call``. Called by the guarded function's wrapper itself
    (the frame questions below count from it). Any failure inside fsguard's own decision means: re-raise the original.
    Each stage is asked once, in turn. What no evidence can absorb, fsguard's own call and the standard library's own
    business. Then the caller's context; the rule; defer or absorb; the record."""
    op = call.op
    if busy() or shutting_down() or _stays_raised(call, error):
        return False
    wrapper = sys._getframe(1)
    if (op == "makedirs" and callers.inside_makedirs(wrapper)) or (op in FAMILY and callers.left_to_caller(wrapper)):
        return False
    # makedirs(exist_ok=True) absorbs only a stale lookup's FileExistsError for a directory that is there:
    # absorbing keeps the meaning a handler waits for ("exists and is not a directory"); it is never deferred.
    settles = not (op == "makedirs" and call.options.exist_ok)
    context: dict[str, Any] | None = None
    asked = False
    try:
        with Busy():
            numbers = rules()
            failure_path_ready()
            if settles and numbers.settle_s and _may_wait(op, error, numbers.job):
                # The rule may wait for evidence: where the caller gets the error anyway, decide from what the
                # listings show now, no waiting (the context is asked first, and only here).
                context, asked = _caller_handler(error), True
                if context is not None:
                    numbers = numbers.without_waits()
            verdict = DECIDE[op](call, error, _live_world(), numbers)
            if verdict.absorb and settles and not asked:
                # The context costs only a failure the evidence would absorb (handler analysis reads code).
                context = _caller_handler(error)
    except Exception as failure:  # noqa: BLE001 - a broken rule must not change what the caller sees
        rule_failed(op, failure)
        return False
    if verdict.absorb and settles:
        verdict = defer_to_caller(verdict, context)
    return settle(verdict, call, error)


def _may_wait(op: str, error: OSError, job: str | None) -> bool:
    """A rename's missing source may wait: a peer's destination may still show. So may a mkdir's existing directory in a
    single-node job: a peer's journal note may be one ``write`` behind."""
    operation = OPERATIONS[op]
    if operation.waits is None or not isinstance(error, operation.waits):
        return False
    return not operation.waits_alone or is_single_node(job)


def walk(
    wrapped: Callable[..., Any], call: Call, use_onexc: bool, yield_s: float, serializer: Any, read: Any = None
) -> OSError | None:
    """One guarded ``rmtree``, down the pipeline once. The rules, then the walk (``fsguard.rmwalk``, which asks the
    rmtree rule at each step). Its verdict is deferred and recorded as a failure's. Returns the error the caller gets
    (None: removed, or absorbed); the walk raises what it does not decide."""
    try:
        numbers = rules()  # the first imports the failure path, the walk with it
        rmwalk, world = _rmwalk(), _live_world()
    except Exception as broken:  # noqa: BLE001 - no policy to be had: the standard rmtree, unguarded
        rule_failed("rmtree", broken)
        wrapped(*call.args, **call.kwargs)
        return None
    verdict = rmwalk.run(wrapped, call, world, numbers, use_onexc, yield_s, serializer, read)
    if verdict is None or walked(verdict, call) or verdict.handled_by is not None:
        return None  # removed, absorbed, or the caller's own handler got the error (as from the standard rmtree)
    return verdict.error if isinstance(verdict.error, OSError) else None


def short_walk(
    wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], use_onexc: bool
) -> tuple[bool, Any]:
    """``rmtree(path, **kwargs)`` down the short course of a plain removal (``fsguard.rmwalk.lane``). ``kwargs``: its
    error keywords only (``ignore_errors``, ``onerror``, ``onexc``). Returns (True, the error
    the caller gets: None where removed or absorbed), or (False, what the short course read for ``walk``:
    ``rmwalk.NotTaken``, or None). Its verdict goes down the pipeline as ``walk``'s does."""
    made = MADE.rules
    if made is not None and made[0] is STATE.settings:
        numbers = made[1]  # (``rules()``'s answer, one call fewer on every rmtree: issue 47)
    else:
        try:
            numbers = rules()  # the first imports the walk's modules
        except Exception:  # noqa: BLE001 - ``walk`` meets it again, and says so
            return False, None
    found = MADE.lane
    if found is None:
        rmwalk = _ready("rmwalk")
        if rmwalk is None:  # another thread still imports it
            return False, None
        found = MADE.lane = (rmwalk.lane, rmwalk.NotTaken, _live_world())
    lane, not_taken, world = found
    verdict = lane(wrapped, args[0], kwargs, world, numbers, use_onexc)
    if verdict is None:  # removed, nothing met (the most common answer first)
        return True, None
    if isinstance(verdict, not_taken):
        return False, verdict
    if walked(verdict, Call("rmtree", args, kwargs)) or verdict.handled_by is not None:
        return True, None
    return True, verdict.error if isinstance(verdict.error, OSError) else None


def walked(verdict: RmtreeVerdict, call: Call) -> bool:
    """An rmtree walk's verdict (``fsguard.rmwalk``), deferred and recorded as a failure's; True: absorbed. A walk
    whose errors went to the caller's ``onerror``/``onexc`` (``handled_by``) is recorded as it is: that handler
    decided, not the context around the call."""
    error = verdict.error
    settled: Verdict = verdict
    if verdict.decision is not None or verdict.absorb:
        try:
            with Busy():
                failure_path_ready()
        except Exception as broken:  # noqa: BLE001 - nothing to decide or record with: the walk's error stands
            rule_failed("rmtree", broken)
            return False
    if verdict.absorb and verdict.top_gone and isinstance(error, OSError) and verdict.handled_by is None:
        with Busy():
            context = _caller_handler(error)  # the error the standard rmtree lets escape
        settled = defer_to_caller(verdict, context)
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
    """Whether a mkdir's ``FileExistsError`` is one no evidence can absorb. (A ``makedirs(exist_ok=False)``'s too.) One
    lstat before any decision tells it. Something other than a directory stands there, or a directory older than the
    job. The rule, :func:`fsguard.guards.makedirs.made_by_peer`, re-raises both, whatever else it finds. A handled
    ``try: os.mkdir(lock) except FileExistsError`` on such a path costs one lstat: no listing, no handler analysis.
    False: not sure (no lstat: a stale lookup cache may say missing; a fresh directory), the full decision follows."""
    try:
        st = os.lstat(name)
    except Exception:  # noqa: BLE001 - anything odd: the full decision
        return False
    if not stat.S_ISDIR(st.st_mode):
        return True
    made = MADE.rules
    if made is None or made[0] is not STATE.settings:
        try:
            with Busy():  # the first failure imports the rules (imports may write caches)
                rules()
        except Exception:  # noqa: BLE001 - no rules to be had: the decision says so
            return False
        made = MADE.rules
        if made is None:
            return False
    numbers: Rules = made[1]
    return numbers.before_job(st.st_ctime)


def _oracle() -> Any:
    """``fsguard.oracle`` (the caller's context), imported at the first failure. It is imported as the rules are: no
    fork splits the import (``state.Unforkable``). fsguard's own calls inside it are not guarded."""
    found = sys.modules.get("fsguard.oracle")
    if found is None:
        with Busy(), Unforkable():
            from . import oracle

        found = oracle
    return found


def _caller_handler(error: BaseException) -> dict[str, Any] | None:
    """The caller's context (``fsguard.oracle``): what the calling code does with ``error``; None: a would-be
    crash. Asked inside ``Busy`` (fsguard's own frames are passed over)."""
    found: dict[str, Any] | None = _oracle().caller_handles(error, sys._getframe(1))
    return found


def rule_failed(op: str, failure: Exception) -> None:
    """One line on stderr, once per operation, when its rule raised. The caller's error is re-raised."""
    if op not in FAILED_RULES:
        FAILED_RULES.add(op)
        try:
            from ._warn import warn
        except ImportError:  # nothing importable any more (dropped privileges): the original error, silently
            return

        warn(
            f"the {op} rule failed ({type(failure).__name__}: {failure}); the original error is re-raised "
            "unchanged (said once per operation)"
        )


def defer_to_caller(verdict: Verdict, found: dict[str, Any] | None) -> Verdict:
    """Defer a verdict to the program where its error would not crash it. Where it would crash its thread or process
    (``found`` None), the verdict stands: fsguard absorbs only a would-be crash. Otherwise it is ``deferred``: re-raised
    to the program's own handling, or left to the program where fsguard cannot read it. The record keeps the evidence
    that would have absorbed it, and what decides instead (``found``, the caller's context from fsguard.oracle)."""
    from .guards import Verdict

    if found is None:
        return verdict
    if verdict.decision != "absorbed":  # a hazard stays visible in the audit
        found["instead_of"] = verdict.decision
    return Verdict(False, "deferred", verdict.evidence, verdict.waited_s, {**verdict.detail, **found})

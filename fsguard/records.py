"""The record of an absorbed race, hazard, conflict or deferral. One type, one writer, one parser.

A record is written as one line on stderr (through the ``fsguard`` logger) and, with ``FSGUARD_LOG=<dir>``,
as one JSON line in a per-process file. The stderr line reads::

    fsguard: absorbed rename rank=3/8 host=n1 at train.py:120 in save: <evidence> :: {"v": 1, ...}

Everything after the first `` :: {`` is the record's JSON, so launcher prefixes before ``fsguard:``
(``[rank3]:``, ``3: ``, ``[1,3]<stderr>:``) do not matter. ``parse_line`` is the only reader.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from time import time as _now

from . import state
from ._values import Value
from ._warn import warn as _warn

TYPE_CHECKING = False  # not typing's
if TYPE_CHECKING:
    from typing import Any

SCHEMA = 1
DECISIONS = ("absorbed", "hazard", "conflict", "unserialized", "waited", "yielded", "deferred", "shared")
_MARKER = " :: {"
_LINE = re.compile(r"fsguard: (?P<decision>[a-z]+) ")


class Origin(Value):
    """Who wrote a record: which process of which job, with which fsguard. The process is ``host`` and ``pid``; the job
    is ``rank``, ``local_rank``, ``world_size``, ``launcher`` (None outside a launcher). ``version`` is fsguard's."""

    _fields = ("host", "pid", "rank", "local_rank", "world_size", "launcher", "version")
    __slots__ = _fields
    host: str
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    launcher: str | None
    version: str

    def __init__(
        self,
        host: str = "",
        pid: int = 0,
        rank: int | None = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        launcher: str | None = None,
        version: str = "",
    ) -> None:
        super().__init__(host, pid, rank, local_rank, world_size, launcher, version)


_NOWHERE = Origin()
# The record's JSON object's fields, in order (docs/record.schema.json): a public format.
FIELDS = (
    "op",
    "decision",
    "evidence",
    "args",
    "error",
    "waited_s",
    "site",
    "time",
    *Origin._fields,
    "detail",
    "v",
)


class Record(Value):
    """One decision fsguard made, with everything a person needs to audit it. What was decided about which call: ``op``,
    ``decision``, ``evidence``, ``args``, ``error``, ``waited_s``, ``detail``. Where and when: ``site``, ``time``. Who
    wrote it: ``origin``. In which version of the format: ``v``. Its JSON (``FIELDS``) is flat: the origin's fields
    stand beside the others.

    Not imported at startup: ``fsguard.runtime`` imports this module when it writes its first record.
    """

    _fields = ("op", "decision", "evidence", "args", "error", "waited_s", "site", "time", "origin", "detail", "v")
    __slots__ = _fields
    op: str
    decision: str
    evidence: str
    args: list[str]
    error: dict[str, Any] | None  # {"type", "errno", "message"}
    waited_s: float
    site: dict[str, Any] | None  # {"file", "line", "function"}
    time: float
    origin: Origin
    detail: dict[str, Any]
    v: int

    def __init__(
        self,
        op: str,
        decision: str,
        evidence: str,
        args: list[str],
        error: dict[str, Any] | None = None,
        waited_s: float = 0.0,
        site: dict[str, Any] | None = None,
        time: float | None = None,  # None: now
        origin: Origin = _NOWHERE,
        detail: dict[str, Any] | None = None,
        v: int = SCHEMA,
    ) -> None:
        super().__init__(
            op,
            decision,
            evidence,
            args,
            error,
            waited_s,
            site,
            _now() if time is None else time,
            origin,
            {} if detail is None else detail,
            v,
        )

    def as_dict(self) -> dict[str, Any]:
        """The record as its JSON object (field name -> value)."""
        return {name: getattr(self.origin if name in Origin._fields else self, name) for name in FIELDS}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, default=str)

    def site_text(self) -> str:
        if not self.site:
            return "?"
        return f"{self.site.get('file')}:{self.site.get('line')} in {self.site.get('function')}"

    def deferred_by(self) -> str | None:
        """What decided instead of fsguard, for a ``deferred`` record; else None. It is read from its ``detail``: the
        handler and where it is, what carried the error, and why fsguard left the error to it. ``except OSError at
        train.py:41: a handler that may swallow it``. A record that says nothing of it: ``not recorded``."""
        if self.decision != "deferred":
            return None
        detail = self.detail if isinstance(self.detail, dict) else {}
        handler, frame, reason = detail.get("handler"), detail.get("frame"), detail.get("reason")
        carried, inside = detail.get("carried"), detail.get("inside")
        if not (handler or frame or reason or carried):
            return "not recorded"
        text = str(handler or "the program's own handling")
        if inside and inside != handler:
            text += f" (inside: {inside})"
        if frame:
            text += f" at {frame}"
        if carried:
            text += f", carried by {carried}"
        why = reason or ("a handler that may swallow the error" if handler else None)
        return f"{text}: {why}" if why else text

    def to_line(self) -> str:
        """The one-line stderr form: human words first, the JSON after `` :: ``."""
        origin = self.origin
        world = "?" if origin.world_size is None else origin.world_size
        rank = "?" if origin.rank is None else origin.rank
        return (
            f"fsguard: {self.decision} {self.op} rank={rank}/{world} host={origin.host} "
            f"at {self.site_text()}: {self.evidence}{_MARKER}{self.to_json()[1:]}"
        )


def from_dict(data: dict[str, Any]) -> Record:
    """Build a record from its JSON object, ignoring unknown keys (newer writers)."""
    known = {k: data[k] for k in Record._fields if k in data}
    for required in ("op", "decision", "evidence", "args"):
        if required not in known:
            raise ValueError(f"record lacks {required!r}")
    known["origin"] = Origin(**{k: data[k] for k in Origin._fields if k in data})
    return Record(**known)


def parse_line(line: str) -> Record | None:
    """The record in one log line, else None. The line is in stderr form with any prefix, or a bare JSON line."""
    text = line.strip()
    if text.startswith("{"):
        payload = text
    else:
        match = _LINE.search(text)
        if match is None:
            return None
        at = text.find(_MARKER, match.end())
        if at < 0:
            return None
        payload = text[at + len(_MARKER) - 1 :]
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict) or "op" not in data or "decision" not in data:
        return None
    try:
        return from_dict(data)
    except (TypeError, ValueError):
        return None


# --- emitting ---------------------------------------------------------------------------------------------


@state.at_fork
def _after_fork_in_child() -> None:
    """Fresh lock; the parent's open file is left alone. Closing it would flush the parent's buffer here, or wait
    forever on its buffer's lock. The child opens its own on its first record."""
    writer = state.STATE.writer
    writer.lock = threading.RLock()
    writer.held_for_fork = False
    _limiter().sites.clear()  # the parent's counts are the parent's to report
    if writer.jsonl is not None:
        writer.inherited.append(writer.jsonl[1])
        writer.jsonl = None


FORK_WAIT_S = 5.0


def _before_fork() -> None:
    """Let a record being written finish before the fork. A thread writing to stderr holds ``sys.stderr``'s own buffer
    lock. No reset can give it back in the child, whose next write to stderr would wait forever. Bounded: after
    ``FORK_WAIT_S`` the fork goes on without it."""
    state.STATE.writer.held_for_fork = state.STATE.writer.lock.acquire(timeout=FORK_WAIT_S)


def _after_fork_in_parent() -> None:
    writer = state.STATE.writer
    if writer.held_for_fork:
        writer.held_for_fork = False
        writer.lock.release()


# The one hook besides fsguard.state's: registered here, after ``logging`` (imported above) registered its own,
# so it runs before logging's (hooks run newest first): the lock order is that of ``emit`` (this lock, then
# logging's), never the reverse. The child's side is ``_after_fork_in_child``, through ``fsguard.state``.
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)


def _get_logger(stderr: bool) -> logging.Logger:
    """The ``fsguard`` logger, with fsguard's own stderr handler attached only while it should be.

    Looked at again for every record (records are rare), so a change after the first record, of the
    settings (``FSGUARD_STDERR`` of a later ``install``) or of the logger's configuration by the
    application, holds from the next record on:

    * ``stderr`` true and no handler of the application's on the ``fsguard`` logger: fsguard's handler
      writes each record's line (the message alone) to the current ``sys.stderr``, and the logger stops
      propagating while it is attached, so a root handler does not print the line a second time;
    * a handler of the application's on the ``fsguard`` logger: the application has taken the output
      over; fsguard's handler is removed, ``propagate`` is put back as it was, and records go to the
      application's handlers (and on up, if it propagates);
    * ``stderr`` false: fsguard's handler is removed likewise; records go to the application's handlers
      on the ``fsguard`` logger, if it has any, and nowhere else (``emit`` does not log them at all).

    An application that sets ``propagate`` while fsguard's handler is attached gets what it asked for: the
    line from fsguard's handler and from the handlers above. The logger's level is set to INFO on first use
    unless the application set one. Callers hold the writer's lock; errors are ``emit``'s to catch.
    """
    writer = state.STATE.writer
    if writer.logger is None or writer.handler is None:
        writer.logger = logging.getLogger("fsguard")
        if writer.logger.level == logging.NOTSET:
            writer.logger.setLevel(logging.INFO)
        writer.handler = logging.StreamHandler(sys.stderr)
        writer.handler.setFormatter(logging.Formatter("%(message)s"))
    logger: logging.Logger = writer.logger
    handler: logging.StreamHandler[Any] = writer.handler
    attached = handler in logger.handlers
    wanted = stderr and all(h is handler for h in logger.handlers)
    if wanted:
        handler.setStream(sys.stderr)  # the current one: it may have been replaced since
        if not attached:
            writer.propagate_before = logger.propagate
            logger.addHandler(handler)
            logger.propagate = False
    elif attached:
        logger.removeHandler(handler)
        if not logger.propagate:
            logger.propagate = writer.propagate_before
    return logger


def jsonl_path(log_dir: str, host: str, rank: int | None, pid: int) -> str:
    """One file per process, named by host, rank and pid: never shared by writers."""
    safe_host = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"
    rank_part = "norank" if rank is None else f"rank{rank}"
    return os.path.join(log_dir, f"fsguard-{safe_host}-{rank_part}-{pid}.jsonl")


def _write_jsonl(record: Record, log_dir: str) -> None:
    if state.STATE.writer.jsonl_failed:
        return
    try:
        if state.STATE.writer.jsonl is None or state.STATE.writer.jsonl[0] != os.getpid():
            os.makedirs(log_dir, exist_ok=True)
            path = jsonl_path(log_dir, record.origin.host, record.origin.rank, record.origin.pid)
            state.STATE.writer.jsonl = (os.getpid(), open(path, "a", encoding="utf-8"))  # noqa: SIM115 - one per process
        stream = state.STATE.writer.jsonl[1]
        stream.write(record.to_json() + "\n")
        stream.flush()
    except OSError as error:
        state.STATE.writer.jsonl_failed = True
        _warn(f"cannot write records to FSGUARD_LOG={log_dir!r} ({error.strerror or error}); logging to stderr only")


def emit(record: Record, *, stderr: bool = True, log_dir: str | None = None) -> None:
    """Write a record to the per-process file and to the logger. The file gets every record; the logger's are
    rate-limited per call site and decision (``_Limiter``). Never raises into the caller."""
    try:
        with state.STATE.writer.lock:
            if log_dir:
                _write_jsonl(record, log_dir)
            for shown in _limiter().admit(record):
                _log(shown, stderr)
    except Exception as error:  # noqa: BLE001 - logging must never break the guarded call
        _warn(f"could not write a record ({type(error).__name__}: {error})")


def _log(record: Record, stderr: bool) -> None:
    """One record's line through the ``fsguard`` logger's handlers. Callers hold the writer's lock.

    While fsguard's own handler is the writer, the line is handed to that handler directly: an application's
    ``logging.config.dictConfig`` (whose default ``disable_existing_loggers`` disables the ``fsguard`` logger
    if it existed) or ``logging.disable`` cannot silence the audit trail (``FSGUARD_STDERR=0`` does). A level
    the application set on the ``fsguard`` logger still holds. Where the application's own handlers are on
    the ``fsguard`` logger, the logger is used as configured (disabled or not)."""
    logger = _get_logger(stderr)
    level = logging.WARNING if record.decision in ("hazard", "conflict") else logging.INFO
    handler = state.STATE.writer.handler
    if handler is not None and handler in logger.handlers:
        if level >= logger.getEffectiveLevel():
            handler.handle(logger.makeRecord(logger.name, level, __file__, 0, record.to_line(), (), None))
    elif logger.handlers:
        logger.log(level, record.to_line())


# --- floods: rate-limited lines per call site and decision -------------------------------------------------

BURST = 3  # lines per call site, operation and decision within one window
WINDOW_S = 30.0


class _Limiter:
    """At most ``BURST`` stderr lines per (operation, decision, call site) every ``WINDOW_S`` seconds.

    A rank polling a mkdir lock makes a ``deferred`` record per try (hundreds a second). The rest of a window's
    records are counted, not printed: the first record of that site after the window (or, at the end of the
    process, the last one held back) is printed with ``detail.more`` = how many lines like it were not, so
    ``fsguard report`` reading stderr alone still counts every record. ``FSGUARD_LOG`` files keep every
    record, printed or not."""

    def __init__(self) -> None:
        self.sites: dict[Any, list[Any]] = {}  # key -> [window start, shown in window, held back, last held]
        self.registered = False

    def admit(self, record: Record) -> list[Record]:
        site = record.site or {}
        key = (record.op, record.decision, site.get("file"), site.get("line"))
        now = record.time
        entry = self.sites.get(key)
        if entry is None or now - entry[0] >= WINDOW_S:
            held = entry[2] if entry is not None else 0
            self.sites[key] = [now, 1, 0, None]
            return [_with_more(record, held)] if held else [record]
        if entry[1] < BURST:
            entry[1] += 1
            return [record]
        entry[2] += 1
        entry[3] = record
        if not self.registered:
            import atexit

            atexit.register(_say_held_back)
            self.registered = True
        return []

    def held_back(self) -> list[Record]:
        """The last record held back at each site, carrying the count of the others. It forgets them."""
        out = [_with_more(entry[3], entry[2] - 1) for entry in self.sites.values() if entry[2] and entry[3]]
        for entry in self.sites.values():
            entry[2], entry[3] = 0, None
        return out


def _with_more(record: Record, more: int) -> Record:
    if more <= 0:
        return record
    fields = record.as_dict()
    fields["detail"] = {**record.detail, "more": more}
    fields["evidence"] = f"{record.evidence} (and {more} more like it)"
    return from_dict(fields)


def _limiter() -> _Limiter:
    """The process's limiter (made with the first record)."""
    limiter = state.STATE.writer.limiter
    if not isinstance(limiter, _Limiter):
        limiter = state.STATE.writer.limiter = _Limiter()
    return limiter


def _say_held_back() -> None:
    """At the end of the process, the lines held back, one per site. The JSONL file has them all."""
    try:
        with state.STATE.writer.lock:
            for record in _limiter().held_back():
                _log(record, state.STATE.settings.stderr)
    except Exception:  # noqa: BLE001 - interpreter shutdown: nothing to report to
        pass

"""The record of an absorbed race, hazard or conflict: one type, one writer, one parser.

A record is written as one line on stderr (through the ``fsguard`` logger) and, with ``FSGUARD_LOG=<dir>``,
as one JSON line in a per-process file. The stderr line reads::

    fsguard: absorbed rename rank=3/8 host=n1 at train.py:120 in save: <evidence> :: {"v": 1, ...}

Everything after the first `` :: {`` is the record's JSON, so launcher prefixes before ``fsguard:``
(``[rank3]:``, ``3: ``, ``[1,3]<stderr>:``) do not matter. ``parse_line`` is the only reader.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = 1
DECISIONS = ("absorbed", "hazard", "conflict", "unserialized", "waited")
_MARKER = " :: {"
_LINE = re.compile(r"fsguard: (?P<decision>[a-z]+) ")


@dataclass
class Record:
    """One decision fsguard made, with everything a person needs to audit it later."""

    op: str
    decision: str
    evidence: str
    args: list[str]
    error: dict[str, Any] | None = None  # {"type", "errno", "message"}
    waited_s: float = 0.0
    site: dict[str, Any] | None = None  # {"file", "line", "function"}
    time: float = field(default_factory=time.time)
    host: str = ""
    pid: int = 0
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    launcher: str | None = None
    version: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    v: int = SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    def site_text(self) -> str:
        if not self.site:
            return "?"
        return f"{self.site.get('file')}:{self.site.get('line')} in {self.site.get('function')}"

    def to_line(self) -> str:
        """The one-line stderr form: human words first, the JSON after `` :: ``."""
        world = "?" if self.world_size is None else self.world_size
        rank = "?" if self.rank is None else self.rank
        return (
            f"fsguard: {self.decision} {self.op} rank={rank}/{world} host={self.host} "
            f"at {self.site_text()}: {self.evidence}{_MARKER}{self.to_json()[1:]}"
        )


def from_dict(data: dict[str, Any]) -> Record:
    """Build a record from its JSON object, ignoring unknown keys (newer writers)."""
    known = {k: data[k] for k in Record.__dataclass_fields__ if k in data}
    for required in ("op", "decision", "evidence", "args"):
        if required not in known:
            raise ValueError(f"record lacks {required!r}")
    return Record(**known)


def parse_line(line: str) -> Record | None:
    """The record in one log line (stderr form, with any prefix, or a bare JSON line), else None."""
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

_lock = threading.Lock()
_logger: Any = None
_jsonl: Any = None
_jsonl_failed = False


def _get_logger(stderr: bool) -> Any:
    global _logger
    if _logger is None:
        import logging

        logger = logging.getLogger("fsguard")
        if stderr and not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        _logger = logger
    return _logger


def jsonl_path(log_dir: str, host: str, rank: int | None, pid: int) -> str:
    """One file per process, named by host, rank and pid: never one file shared by many writers."""
    safe_host = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"
    rank_part = "norank" if rank is None else f"rank{rank}"
    return os.path.join(log_dir, f"fsguard-{safe_host}-{rank_part}-{pid}.jsonl")


def _write_jsonl(record: Record, log_dir: str) -> None:
    global _jsonl, _jsonl_failed
    if _jsonl_failed:
        return
    try:
        if _jsonl is None or _jsonl[0] != os.getpid():
            os.makedirs(log_dir, exist_ok=True)
            path = jsonl_path(log_dir, record.host, record.rank, record.pid)
            _jsonl = (os.getpid(), open(path, "a", encoding="utf-8"))  # noqa: SIM115 - one per process
        stream = _jsonl[1]
        stream.write(record.to_json() + "\n")
        stream.flush()
    except OSError as error:
        _jsonl_failed = True
        _warn(f"cannot write records to FSGUARD_LOG={log_dir!r} ({error.strerror or error}); logging to stderr only")


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"fsguard: {message}\n")
    except Exception:  # noqa: BLE001
        pass


def emit(record: Record, *, stderr: bool = True, log_dir: str | None = None) -> None:
    """Write a record to the logger and the per-process file. Never raises into the caller."""
    try:
        with _lock:
            if log_dir:
                _write_jsonl(record, log_dir)
            logger = _get_logger(stderr)
            if stderr or logger.handlers:
                logger.warning(record.to_line()) if record.decision in ("hazard", "conflict") else logger.info(
                    record.to_line()
                )
    except Exception as error:  # noqa: BLE001 - logging must never break the guarded call
        _warn(f"could not write a record ({type(error).__name__}: {error})")

"""Reading records back, only through ``fsguard.records.parse_line`` (the one reader)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fsguard.records import Record, parse_line


def from_lines(lines: Iterable[str], *, only_records: bool = False) -> list[Record]:
    """The records among ``lines`` (stderr lines, or JSON lines). ``only_records``: every line must be one
    (an ``fsguard:`` line that is not a record, or any other line, fails)."""
    found = []
    for line in lines:
        if only_records:
            assert line.startswith("fsguard: "), f"unexpected stderr line: {line!r}"
        record = parse_line(line)
        if record is None:
            assert not only_records, f"an fsguard: line that is not a record: {line!r}"
            continue
        found.append(record)
    return found


def from_log_dir(log_dir: Path) -> list[Record]:
    """Every record in the ``FSGUARD_LOG`` directory's per-process files, file by file (sorted by name)."""
    found = []
    for path in sorted(log_dir.glob("*.jsonl")) if log_dir.is_dir() else []:
        for line in path.read_text().splitlines():
            if line.strip():
                record = parse_line(line)
                assert record is not None, f"unparsable line in {path.name}: {line!r}"
                found.append(record)
    return found


def json_records(log_dir: Path) -> list[dict[str, Any]]:
    """``from_log_dir`` as JSON objects (field name -> value), for tests that compare plain data."""
    return [record.as_dict() for record in from_log_dir(log_dir)]


def check_lines_stand_for(shown: Iterable[Record], logged: Iterable[Record]) -> None:
    """stderr's records (a few per call site and decision, the last of a run carrying ``detail.more``, the
    count held back) are records of the complete ``FSGUARD_LOG`` files, and stand for all of them."""

    def identity(record: Record) -> tuple[object, ...]:
        return (record.origin.pid, record.time, record.op, record.decision, tuple(record.args))

    complete = {identity(r): r for r in logged}
    total = 0
    for record in shown:
        assert identity(record) in complete, record
        more = int(record.detail.get("more", 0))
        if not more:
            assert record.to_json() == complete[identity(record)].to_json()
        total += 1 + more
    assert total == len(complete), (total, len(complete))

"""The timeline of ``fsguard report --html``: records binned by process and time, in bounded memory.

Records are not read in time order, and the job's span is known only at the end. So the bins adapt while reading. A bin
is ``[origin + k*width, origin + (k+1)*width)``, with the first record's time as the origin. When the bins in use would
span more than ``BINS``, the width doubles and neighbouring bins merge (``k // 2``). Cells are per process up to
``MAX_PROCESS_LANES`` processes, per host beyond. They merge once, when the next process appears. So memory is bounded
by lanes x ``BINS`` cells, whatever the number of records. A cell keeps the count per decision, the longest wait, the
ranks it holds and one record that stands for it: the first of its worst decision.

Hazards and conflicts are kept whole (``ATTENTION_KEPT`` of them), and the ``LONGEST_KEPT`` longest waits.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass, field
from typing import Any

from ..records import Record
from .report import SEVERITY

BINS = 200
FIRST_WIDTH_S = 0.001
ATTENTION = ("conflict", "hazard")
ATTENTION_KEPT = 500
MAX_PROCESS_LANES = 64  # above this, one lane per host
MAX_LANES = 128  # above this, one lane per run of hosts
LONGEST_KEPT = 10
# Worst first: the text report's order; ``shared`` (a plain success) last.
ORDER = (*SEVERITY, "shared")


def severity(decision: str) -> int:
    return ORDER.index(decision) if decision in ORDER else len(ORDER)


@dataclass(frozen=True, slots=True)
class Sample:
    """What the page shows of one record."""

    time: float
    host: str
    rank: int | None
    pid: int
    op: str
    decision: str
    site: str
    args: tuple[str, ...]
    evidence: str
    waited_s: float
    detail: dict[str, Any]

    @classmethod
    def of(cls, record: Record) -> Sample:
        detail = record.detail if isinstance(record.detail, dict) else {}
        return cls(
            float(record.time),
            sys.intern(str(record.origin.host or "")),
            record.origin.rank,
            int(record.origin.pid or 0),
            sys.intern(str(record.op)),
            sys.intern(str(record.decision)),
            sys.intern(record.site_text()),
            tuple(str(a) for a in record.args),
            str(record.evidence),
            float(record.waited_s or 0.0),
            detail,
        )


@dataclass(slots=True)
class Cell:
    """The records of one process (or of one lane, once merged) in one bin."""

    counts: dict[str, int] = field(default_factory=dict)
    longest_wait: float = 0.0
    ranks: set[int] = field(default_factory=set)
    sample: Sample | None = None

    def merge(self, other: Cell) -> None:
        for decision, n in other.counts.items():
            self.counts[decision] = self.counts.get(decision, 0) + n
        self.longest_wait = max(self.longest_wait, other.longest_wait)
        self.ranks |= other.ranks
        if other.sample is not None and (
            self.sample is None
            or (severity(other.sample.decision), other.sample.time) < (severity(self.sample.decision), self.sample.time)
        ):
            self.sample = other.sample

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def decision(self) -> str:
        return min(self.counts, key=severity)


# A process: (host, rank, pid); the pid only tells processes without a rank apart (FSGUARD=force).
Process = tuple[str, int, int]


class Timeline:
    """Cells by (process, bin), hazards and conflicts, longest waits; fed one record at a time."""

    def __init__(self) -> None:
        self.origin: float | None = None
        self.width = FIRST_WIDTH_S
        self.low = 0
        self.high = 0
        self.cells: dict[tuple[int, int], Cell] = {}
        self.processes: dict[Process, int] = {}
        self.hosts: dict[str, int] = {}
        self.by_host = False  # cells per host rather than per process (more than MAX_PROCESS_LANES processes)
        self.attention: list[Sample] = []
        self.attention_total = 0
        self._waits: list[tuple[float, int, Sample]] = []
        self._seq = 0

    def add(self, record: Record) -> None:
        at = float(record.time)
        decision = record.decision
        waited = float(record.waited_s or 0.0)
        if self.origin is None:
            self.origin = at
        k = int((at - self.origin) // self.width)
        if not self.cells:
            self.low = self.high = k
        self.low, self.high = min(self.low, k), max(self.high, k)
        while self.high - self.low + 1 > BINS:
            self._coarsen()
            k //= 2
        host = record.origin.host or ""
        process = (
            host,
            -1 if record.origin.rank is None else record.origin.rank,
            record.origin.pid if record.origin.rank is None else 0,
        )
        lane = self.processes.setdefault(process, len(self.processes))
        host_lane = self.hosts.setdefault(host, len(self.hosts))
        if not self.by_host and len(self.processes) > MAX_PROCESS_LANES:
            self._by_host()
        cell = self.cells.get((host_lane if self.by_host else lane, k))
        if cell is None:
            cell = self.cells[(host_lane if self.by_host else lane, k)] = Cell()
        # the cell's counts; a Sample is made only for a record that is kept (most are only counted)
        cell.counts[decision] = cell.counts.get(decision, 0) + 1
        cell.longest_wait = max(cell.longest_wait, waited)
        if record.origin.rank is not None:
            cell.ranks.add(record.origin.rank)
        sample = None
        if cell.sample is None or severity(decision) < severity(cell.sample.decision):
            sample = cell.sample = Sample.of(record)
        if decision in ATTENTION:
            self.attention_total += 1
            if len(self.attention) < ATTENTION_KEPT:
                self.attention.append(sample or Sample.of(record))
        if waited > 0:
            self._seq += 1
            if len(self._waits) < LONGEST_KEPT:
                heapq.heappush(self._waits, (waited, -self._seq, sample or Sample.of(record)))
            elif (waited, -self._seq) > self._waits[0][:2]:
                heapq.heapreplace(self._waits, (waited, -self._seq, sample or Sample.of(record)))

    def _by_host(self) -> None:
        """Switch to one lane per host: too many processes to draw one each. From now on memory is hosts x BINS."""
        host_of = {index: self.hosts[host] for (host, _, _), index in self.processes.items()}
        merged: dict[tuple[int, int], Cell] = {}
        for (lane, k), cell in self.cells.items():
            key = (host_of[lane], k)
            into = merged.get(key)
            if into is None:
                merged[key] = cell
            else:
                into.merge(cell)
        self.cells = merged
        self.by_host = True

    def _coarsen(self) -> None:
        """Double the bin width: bins 2k and 2k+1 become bin k."""
        merged: dict[tuple[int, int], Cell] = {}
        for (lane, k), cell in self.cells.items():
            into = merged.get((lane, k // 2))
            if into is None:
                merged[(lane, k // 2)] = cell
            else:
                into.merge(cell)
        self.cells = merged
        self.width *= 2
        self.low //= 2
        self.high //= 2

    @property
    def start(self) -> float:
        """Where the first bin in use starts (epoch seconds)."""
        return (self.origin or 0.0) + self.low * self.width

    @property
    def bins(self) -> int:
        return self.high - self.low + 1 if self.cells else 0

    def longest_waits(self) -> list[Sample]:
        return [s for _, _, s in sorted(self._waits, key=lambda e: e[:2], reverse=True)]


@dataclass
class Lane:
    """One row of the picture: a process, a host, or a run of hosts. Runs of hosts keep 1,000 ranks readable."""

    label: str
    host: str
    cells: dict[int, Cell] = field(default_factory=dict)  # bin (from 0) -> cell
    ranks: set[int] = field(default_factory=set)


def _natural(text: str) -> tuple[Any, ...]:
    """``n2`` before ``n10``."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def lanes(timeline: Timeline) -> tuple[list[Lane], str]:
    """The rows to draw, and what one row is (``process``, ``host`` or ``hosts``)."""
    rows: list[Lane] = []
    row_of: dict[int, int] = {}  # the cells' lane index -> row
    if not timeline.by_host:
        kind = "process"
        ordered = sorted(timeline.processes.items(), key=lambda item: (_natural(item[0][0]), item[0][1], item[0][2]))
        for (host, rank, pid), index in ordered:
            row_of[index] = len(rows)
            rows.append(Lane(f"rank {rank}" if rank >= 0 else f"pid {pid}", host or "?"))
    else:
        hosts = sorted(timeline.hosts.items(), key=lambda item: _natural(item[0]))
        per_lane = -(-len(hosts) // MAX_LANES)
        kind = "host" if per_lane == 1 else "hosts"
        for start in range(0, len(hosts), per_lane):
            chunk = hosts[start : start + per_lane]
            first, last = chunk[0][0] or "?", chunk[-1][0] or "?"
            label = first if len(chunk) == 1 else f"{first} .. {last}"
            for _, index in chunk:
                row_of[index] = len(rows)
            rows.append(Lane(label, label))
    fresh: set[int] = set()  # the ids of cells made here (the timeline's own are never changed)
    for (lane, k), cell in timeline.cells.items():
        row = rows[row_of[lane]]
        row.ranks |= cell.ranks
        into = row.cells.get(k - timeline.low)
        if into is None:
            row.cells[k - timeline.low] = cell
            continue
        if id(into) not in fresh:
            copy = Cell()
            copy.merge(into)
            into = row.cells[k - timeline.low] = copy
            fresh.add(id(copy))
        into.merge(cell)
    return rows, kind

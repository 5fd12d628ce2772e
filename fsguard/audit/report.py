"""What ``fsguard report PATH...`` finds. It says what fsguard absorbed in a job, where, how often, and whether anything
was at risk.

Inputs: per-process JSON-lines files (``FSGUARD_LOG``) and directories of them. Also job logs, where the records are
stderr lines among everything else, with any launcher prefix. They may be gzip/bzip2/xz compressed; ``-`` is standard
input. Records are read with ``fsguard.records.parse_line``, the one parser, so this command reads exactly what fsguard
writes.

Records are grouped by operation and call site; within a group the paths are folded into patterns (``checkpoint-<n>``).
Groups that hold a hazard or a conflict are listed first, marked ``!!``. Their heading says data may have been lost; the
others follow under their own. ``--html OUT.html`` (``fsguard.audit.html``) also writes the same analysis as a web page
with a timeline. The same record read twice (a job's log *and* its JSON-lines files) counts once. A stderr line may
stand for lines held back (``detail.more``): fsguard prints a few lines per call site and decision, then counts. It
counts for them too, unless the JSON-lines files read show them one by one.

A line that announces a record but does not parse is a damaged or truncated record. (It starts ``fsguard: <decision>
...`` or is a JSON object with a ``decision``.) It is named with its line number, and the exit status is 2.

Exit status: 0 no records, 1 records found, 2 usage or read errors (which win: a damaged input may hide
more).
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..records import DECISIONS, Record, parse_line
from . import inputs, patterns, tables

# Worst first: the decision that names a group, and the order of groups.
SEVERITY = ("conflict", "hazard", "unserialized", "waited", "deferred", "yielded", "absorbed")
ATTENTION = ("conflict", "hazard")
_ANNOUNCED = re.compile("fsguard: (?:" + "|".join(DECISIONS) + ") ")


@functools.lru_cache(maxsize=4096)
def _pattern(args: tuple[str, ...]) -> str:
    """The folded pattern of a call's paths, cached: ranks race on the same paths."""
    return patterns.fold_args(list(args))


def _severity(decision: str) -> int:
    return SEVERITY.index(decision) if decision in SEVERITY else len(SEVERITY)


@dataclass
class Waits:
    """What the records of one call site waited: the longest wait, and all together."""

    longest: float = 0.0
    total: float = 0.0

    def add(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)
        self.total += seconds


@dataclass
class Group(tables.Tally):
    """The records of one operation at one call site."""

    op: str
    site: dict[str, Any] | None
    site_text: str
    decisions: Counter[str] = field(default_factory=Counter)
    other_paths: int = 0
    waits: Waits = field(default_factory=Waits)
    first: float = float("inf")
    last: float = float("-inf")
    evidence: str = ""
    evidence_severity: int = len(SEVERITY) + 1
    deferred_by: Counter[str] = field(default_factory=Counter)  # what decided instead, per deferred record

    def add(self, record: Record) -> None:
        self.count += 1
        self.decisions[record.decision] += 1
        if record.origin.rank is not None:
            self.ranks.add(record.origin.rank)
        if record.origin.host:
            self.hosts.add(record.origin.host)
        if not self.add_path(_pattern(tuple(str(a) for a in record.args))):
            self.other_paths += 1
        self.waits.add(float(record.waited_s or 0.0))
        self.first = min(self.first, record.time)
        self.last = max(self.last, record.time)
        by = record.deferred_by()
        if by is not None and (by in self.deferred_by or len(self.deferred_by) < tables.MAX_PATTERNS):
            self.deferred_by[by] += 1
        severity = _severity(record.decision)
        if severity < self.evidence_severity:  # the first record of the worst decision explains the group
            self.evidence, self.evidence_severity = record.evidence, severity

    @property
    def decision(self) -> str:
        return min(self.decisions, key=_severity)

    @property
    def longest_wait(self) -> float:
        return self.waits.longest

    @property
    def total_wait(self) -> float:
        return self.waits.total

    @property
    def attention(self) -> bool:
        return any(d in self.decisions for d in ATTENTION)

    def sort_key(self) -> tuple[int, int, str, str]:
        return (_severity(self.decision), -self.count, self.op, self.site_text)

    def as_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "site": self.site,
            "site_text": self.site_text,
            "attention": self.attention,
            "decision": self.decision,
            "decisions": dict(sorted(self.decisions.items(), key=lambda kv: _severity(kv[0]))),
            "count": self.count,
            "ranks": sorted(self.ranks),
            "hosts": sorted(self.hosts),
            "paths": [{"pattern": p, "count": n} for p, n in self.paths.most_common()],
            "other_paths": self.other_paths,
            "longest_wait_s": round(self.longest_wait, 6),
            "total_wait_s": round(self.total_wait, 6),
            "first": tables.iso(self.first),
            "last": tables.iso(self.last),
            "first_epoch": self.first,
            "last_epoch": self.last,
            "evidence": self.evidence,
            "deferred_by": [{"text": text, "count": n} for text, n in self.deferred_by.most_common()],
        }

    def deferrals(self, shown: int = 3) -> list[str]:
        """What deferred the group's deferred records, most often first: ``except OSError at a.py:3: ... (x2)``."""
        top = self.deferred_by.most_common(shown)
        lines = [f"{text} (x{n})" if n > 1 else text for text, n in top]
        hidden = len(self.deferred_by) - len(top)
        return lines + ([f"(and {hidden} more)"] if hidden > 0 else [])


class Collector:
    """The ``inputs.Sink`` of this command: records from any line that holds one."""

    markers: tuple[bytes, ...] = (b"fsguard: ", b'"decision"')

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], Group] = {}
        self.records = 0
        self.duplicates = 0
        self._seen: set[int] = set()
        self._damaged: list[int] = []
        # per process, call site and decision: (records read, records shown on stderr + their ``more``)
        self._shown: dict[tuple[Any, ...], list[int]] = {}
        self._more_added = False

    def begin(self, source: str) -> None:
        self._damaged = []

    def busy(self) -> bool:
        return False

    def feed(self, line: bytes, lineno: int) -> None:
        text = line.decode("utf-8", "replace")
        record = parse_line(text)
        if record is None:
            stripped = text.strip()
            if _ANNOUNCED.search(text) or (stripped.startswith("{") and '"decision"' in stripped):
                self._damaged.append(lineno)
            return
        self.add(record, stderr=not text.lstrip().startswith("{"))

    def add(self, record: Record, stderr: bool = False) -> bool:
        """Count ``record`` into its group; False (and nothing counted) when it was seen before."""
        identity = hash(
            (
                record.origin.host,
                record.origin.pid,
                record.time,
                record.op,
                record.decision,
                tuple(str(a) for a in record.args),
            )
        )
        process = (record.origin.host, record.origin.pid, record.op, record.decision, record.site_text())
        tally = self._shown.setdefault(process, [0, 0])
        if stderr:
            more = record.detail.get("more") if isinstance(record.detail, dict) else None
            tally[1] += 1 + (more if isinstance(more, int) and more > 0 else 0)
        if identity in self._seen:
            self.duplicates += 1
            return False
        tally[0] += 1
        self._seen.add(identity)
        self.records += 1
        site_text = record.site_text()
        key = (record.op, site_text)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(record.op, record.site, site_text)
        group.add(record)
        return True

    def end(self) -> list[str]:
        if not self._damaged:
            return []
        lines = ", ".join(str(n) for n in self._damaged[:5])
        more = f" and {len(self._damaged) - 5} more" if len(self._damaged) > 5 else ""
        plural = "s" if len(self._damaged) > 1 else ""
        return [f"line{plural} {lines}{more}: damaged or truncated fsguard record{plural}, skipped"]

    def sorted_groups(self) -> list[Group]:
        self.finish()
        return sorted(self.groups.values(), key=Group.sort_key)

    def finish(self) -> None:
        """Count, once, the records a process's stderr lines stand for beyond those read."""
        if self._more_added:
            return
        self._more_added = True
        for (_, _, op, decision, site_text), (read, shown) in self._shown.items():
            group = self.groups.get((op, site_text))
            if group is not None and shown > read:
                group.count += shown - read
                group.decisions[decision] += shown - read
                self.records += shown - read


COLUMNS = (
    tables.Column("DECISION", 12),
    tables.Column("OP", 8),
    tables.Column("N", 5, right=True),
    tables.Column("RANKS", 10),
    tables.Column("HOSTS", 5, right=True),
    tables.Column("WAIT", 7, right=True),
    tables.Column("FIRST", 8),
    tables.Column("LAST", 8),
)


def mix(group: Group) -> str:
    """``1 hazard, 1 absorbed``: the group's decisions, worst first."""
    return ", ".join(f"{n} {d}" for d, n in sorted(group.decisions.items(), key=lambda kv: _severity(kv[0])))


def path_patterns(group: Group, shown: int = 3) -> tuple[list[str], int]:
    """The group's most frequent path patterns, and how many more there are."""
    top = [pattern for pattern, _ in group.paths.most_common(shown)]
    return top, len(group.paths) - len(top) + (1 if group.other_paths else 0)


def more_patterns(hidden: int) -> str:
    return f"(and {hidden} more path pattern{'s' if hidden > 1 else ''})"


def _path_details(group: Group) -> list[tables.Detail]:
    shown, hidden = path_patterns(group)
    details = [("path" if i == 0 else "", pattern, tables.PATH) for i, pattern in enumerate(shown)]
    if hidden > 0:
        details.append(("", more_patterns(hidden), tables.CUT))
    return details


def summary(collector: Collector, read: int) -> str:
    """``10 records at 3 call sites in 1 input; 1 with hazards or conflicts (!!)``."""
    groups = collector.sorted_groups()
    attention = sum(1 for g in groups if g.attention)
    head = (
        f"{collector.records} record{'s' if collector.records != 1 else ''} at {len(groups)} "
        f"call site{'s' if len(groups) != 1 else ''} in {read} input{'s' if read != 1 else ''}"
    )
    if attention:
        head += f"; {attention} with hazards or conflicts (!!)"
    if collector.duplicates:
        head += f"; {collector.duplicates} duplicate{'s' if collector.duplicates != 1 else ''} ignored"
    return head


def nothing_found(read: int) -> str:
    return f"no fsguard records in {read} input{'s' if read != 1 else ''}"


def sites(n: int) -> str:
    return f"{n} call site{'s' if n != 1 else ''}"


AT_RISK = "DATA MAY HAVE BEEN LOST: hazards and conflicts"
WAITED_SHOWN_S = 1.0  # a call site's waits in all, from which its row says so (``waits``)
OTHERS = "OTHER RECORDS"


def _row(g: Group) -> tables.Row:
    details: list[tables.Detail] = [("at", g.site_text, tables.PATH)]
    details += _path_details(g)
    if len(g.decisions) > 1:
        details.append(("mix", mix(g), tables.WRAP))
    if g.hosts:
        details.append(("hosts", ", ".join(sorted(g.hosts)), tables.WRAP))
    if g.evidence:
        details.append(("why", g.evidence, tables.WRAP))
    if g.total_wait >= WAITED_SHOWN_S and g.total_wait > g.longest_wait:  # several waits here (a window a step)
        details.append(("waits", f"{g.total_wait:.2f} s in all, over {g.count} records", tables.WRAP))
    details += [("defer" if i == 0 else "", text, tables.WRAP) for i, text in enumerate(g.deferrals())]
    return tables.Row(
        "!!" if g.attention else "",
        [
            g.decision,
            g.op,
            str(g.count),
            tables.ranks_text(g.ranks),
            str(len(g.hosts) or "?"),
            f"{g.longest_wait:.2f}s",
            tables.clock(g.first),
            tables.clock(g.last),
        ],
        details,
    )


def render_human(collector: Collector, read: int, width: int, wide: bool = False) -> str:
    """The table; call sites with hazards or conflicts first, under their own heading."""
    groups = collector.sorted_groups()
    if not groups:
        return f"fsguard report: {nothing_found(read)}"
    lines = textwrap.wrap(f"fsguard report: {summary(collector, read)}", width, break_on_hyphens=False)
    first = min(g.first for g in groups)
    last = max(g.last for g in groups)
    lines.append(f"from {tables.stamp(first)} to {tables.stamp(last)} (local time)")
    lines.append("")
    at_risk = [g for g in groups if g.attention]
    rest = [g for g in groups if not g.attention]
    if at_risk:
        lines.append(f"!! {AT_RISK} at {sites(len(at_risk))}")
        lines += tables.human(COLUMNS, [_row(g) for g in at_risk], width, wide)
        if rest:
            lines += ["", f"{OTHERS}: {sites(len(rest))}"]
    if rest:
        lines += tables.human(COLUMNS, [_row(g) for g in rest], width, wide)
    return "\n".join(lines)


MARKDOWN_HEADERS = (
    "",
    "Decision",
    "Op",
    "Call site",
    "Paths",
    "N",
    "Ranks",
    "Hosts",
    "Longest wait",
    "First",
    "Last",
    "Evidence",
)


def _markdown_row(g: Group) -> list[str]:
    decision = mix(g) if len(g.decisions) > 1 else g.decision
    return [
        "⚠️" if g.attention else "",
        f"**{decision}**" if g.attention else decision,
        g.op,
        tables.code(g.site_text),
        "<br>".join(tables.code(p) for p in path_patterns(g)[0]),
        str(g.count),
        tables.ranks_text(g.ranks),
        ", ".join(sorted(g.hosts)),
        f"{g.longest_wait:.2f} s",
        tables.stamp(g.first),
        tables.stamp(g.last),
        g.evidence + "".join(f"<br>deferred by: {text}" for text in g.deferrals()),
    ]


def render_markdown(collector: Collector, read: int) -> str:
    groups = collector.sorted_groups()
    if not groups:
        return f"**fsguard report**: {nothing_found(read)}."
    lines = [f"**fsguard report**: {summary(collector, read)}."]
    at_risk = [g for g in groups if g.attention]
    rest = [g for g in groups if not g.attention]
    if at_risk:
        lines += ["", f"**⚠️ {AT_RISK}** at {sites(len(at_risk))}:", ""]
        lines += tables.markdown(MARKDOWN_HEADERS, [_markdown_row(g) for g in at_risk])
        if rest:
            lines += ["", f"**{OTHERS.capitalize()}**: {sites(len(rest))}"]
    if rest:
        lines.append("")
        lines += tables.markdown(MARKDOWN_HEADERS, [_markdown_row(g) for g in rest])
    return "\n".join(lines)


def collect(paths: list[str], problems: tables.Problems, collector: Collector | None = None) -> tuple[Collector, int]:
    """Collect the records of every input; return the collector and how many inputs were read. ``collector`` is a new
    one by default."""
    collector = Collector() if collector is None else collector
    read = inputs.process(paths, collector, problems)
    collector.finish()
    return collector, read


def document(collector: Collector, read: int, problems: tables.Problems, status: int, version: str) -> dict[str, Any]:
    """The ``--json`` form."""
    groups = [g.as_json() for g in collector.sorted_groups()]
    return tables.document(
        read, problems, status, version, records=collector.records, duplicates=collector.duplicates, groups=groups
    )

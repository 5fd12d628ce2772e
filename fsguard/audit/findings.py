"""Tracebacks grouped by call site, operation and error: what ``fsguard scan`` counts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..guards import ABSORBED, NOT_FIXABLE
from . import ordering, patterns, tables
from .failed import operation, parse_error, unproven
from .known_bugs import known_bug
from .tracebacks import Frame, Traceback
from .verdicts import DEPENDS, DEPENDS_WHY, VERDICT_ORDER, verdict

MAX_PATTERNS = tables.MAX_PATTERNS
MAX_SEEN_KEYS = 1_000_000  # dedupe memory bound; beyond it duplicates are counted, not dropped


@dataclass(frozen=True)
class Raised:
    """The error a finding's tracebacks end in. It holds its type's name, its errno's name (None where the message shows
    none) and the first traceback's message."""

    type: str
    errno: str | None
    message: str

    def text(self) -> str:
        return f"{self.type} {self.errno}" if self.errno else self.type


@dataclass(frozen=True)
class Place:
    """Where a traceback was read: the input (a file, or ``-``) and its header's line."""

    source: str
    line: int


@dataclass
class Finding(tables.Tally):
    """The tracebacks of one call site, operation and error."""

    op: str
    site: Frame | None
    error: Raised
    verdict: str
    why: str
    first_seen: Place
    sources: set[str] = field(default_factory=set)
    ordering: bool = False  # a missing staging directory (``ordering.py``): decided once all inputs are read
    race: bool = False  # an ordering race that the inputs prove: counts for the exit status
    unproven: str | None = None  # why one of its tracebacks cannot prove the crash (``unproven``)
    dirs: dict[str, set[int | None]] = field(default_factory=dict)  # ordering: missing directory -> ranks

    @property
    def site_text(self) -> str:
        return self.site.text() if self.site else "?"

    @property
    def error_text(self) -> str:
        return self.error.text()

    @property
    def counts(self) -> bool:
        """Whether it makes the exit status 1. It does for a race fsguard absorbs or serializes, or a proven ordering
        race."""
        return self.verdict != NOT_FIXABLE or self.race

    def sort_key(self) -> tuple[int, int, int, str]:
        return (VERDICT_ORDER.index(self.verdict), not self.race, -self.count, self.site_text)

    def as_json(self) -> dict[str, Any]:
        site = (
            None
            if self.site is None
            else {"file": self.site.file, "line": self.site.line, "function": self.site.function}
        )
        return {
            "op": self.op,
            "site": site,
            "site_text": self.site_text,
            "error": {"type": self.error.type, "errno": self.error.errno, "message": self.error.message},
            "verdict": self.verdict,
            "why": self.why,
            "race": self.counts,
            "ordering": self.ordering,
            "count": self.count,
            "ranks": sorted(self.ranks),
            "hosts": sorted(self.hosts),
            "paths": [{"pattern": p, "count": n} for p, n in self.paths.most_common()],
            "first_seen": {"source": self.first_seen.source, "line": self.first_seen.line},
            "sources": len(self.sources),
        }


_MOVES = ("rename", "replace", "move", "rmtree")


def _earlier(finding: Finding, tb: Traceback) -> None:
    """Where a finding was first seen: the earliest line of its first input. A traceback is reported once the next line
    of its stream says whether it was handled. So an interleaved one may come later than it began."""
    if tb.source == finding.first_seen.source and tb.lineno < finding.first_seen.line:
        finding.first_seen = Place(tb.source, tb.lineno)
        finding.error = Raised(finding.error.type, finding.error.errno, tb.message)


class Findings:
    """Tracebacks of filesystem operations, grouped; the same rank's traceback read twice counts once."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str, str, str | None], Finding] = {}
        self._seen: set[tuple[Any, ...]] = set()
        self._moved: set[str] = set()  # paths whose rename or removal found them gone
        self._finished = False

    def add(self, tb: Traceback) -> None:
        if self._add_known(tb):
            return
        error = parse_error(tb.exception, tb.message)
        if error is not None:
            error_type, errno_name, paths = error
            op, site = operation(tb.frames)
        else:
            error_type, errno_name, paths, op, site = tb.exception.rsplit(".", 1)[-1], None, [], None, None
        dirs: list[str] = []
        if op is None:
            site = ordering.program_site(tb.frames)
            op = ordering.call_name(site)
            dirs = ordering.missing(tb.exception, tb.message, errno_name, paths, op)
            dirs = [d for d in dirs if ordering.staging_like(d)][:1]
            if not dirs:
                return
        elif op in _MOVES and errno_name == "ENOENT" and paths and len(self._moved) < MAX_SEEN_KEYS:
            self._moved.add(paths[0])  # its source was gone: a peer had moved or removed it
        site_text = site.text() if site else "?"
        key = (op, site_text, error_type, errno_name)
        finding = self.groups.get(key)
        staging = any(patterns.is_staging(p) for p in paths) or patterns.mentions_staging(site.source if site else "")
        if finding is None:
            why = ("", "") if dirs else verdict(op, errno_name, staging)
            raised, first = Raised(error_type, errno_name, tb.message), Place(tb.source, tb.lineno)
            finding = self.groups[key] = Finding(op, site, raised, why[0] or NOT_FIXABLE, why[1], first)
            finding.ordering = bool(dirs)
        elif staging and not dirs:  # one staging tree among the call site's is enough for its row (rmtree's)
            finding.verdict, finding.why = verdict(op, errno_name, staging)
        _earlier(finding, tb)
        if finding.unproven is None and not dirs:
            finding.unproven = unproven(tb)
        if finding.unproven is not None and finding.verdict == ABSORBED:
            finding.verdict, finding.why = DEPENDS, DEPENDS_WHY.format(reason=finding.unproven)
        self._count(finding, key, tb, paths, dirs)

    def _add_known(self, tb: Traceback) -> bool:
        """A traceback of a known library bug (``KNOWN_BUGS``): one not-fixable finding, counted as a race."""
        found = known_bug(tb)
        if found is None:
            return False
        bug, site = found
        error = parse_error(tb.exception, tb.message)
        error_type, errno_name, paths = error if error is not None else (tb.exception.rsplit(".", 1)[-1], None, [])
        key = (bug.op, site.text(), error_type, errno_name)
        finding = self.groups.get(key)
        if finding is None:
            raised, first = Raised(error_type, errno_name, tb.message), Place(tb.source, tb.lineno)
            finding = self.groups[key] = Finding(bug.op, site, raised, NOT_FIXABLE, bug.why, first)
            finding.race = True
        _earlier(finding, tb)
        self._count(finding, key, tb, paths, [])
        return True

    def _count(self, finding: Finding, key: tuple[Any, ...], tb: Traceback, paths: list[str], dirs: list[str]) -> None:
        """One more traceback of ``finding`` (``dirs``: the missing staging directory of an ordering race)."""
        if tb.host:  # the summary's copy of a rank's traceback still tells its host
            finding.hosts.add(tb.host)
        if tb.rank is not None:
            seen = (tb.source, tb.rank, key, tb.message)
            if seen in self._seen:
                return
            if len(self._seen) < MAX_SEEN_KEYS:
                self._seen.add(seen)
            finding.ranks.add(tb.rank)
        finding.count += 1
        if dirs and (dirs[0] in finding.dirs or len(finding.dirs) < MAX_PATTERNS):
            finding.dirs.setdefault(dirs[0], set()).add(tb.rank)
        shown = paths or dirs
        if shown:
            finding.add_path(patterns.fold_args(shown))
        if len(finding.sources) < MAX_PATTERNS:
            finding.sources.add(tb.source)

    def finish(self) -> None:
        """Decide the ordering findings once every input is read. Their evidence is in other tracebacks."""
        if self._finished:
            return
        self._finished = True
        failing: dict[str, set[int | None]] = {}
        for f in self.groups.values():
            for directory, ranks in f.dirs.items():
                failing.setdefault(directory, set()).update(ranks)
        for f in self.groups.values():
            if not f.ordering:
                continue
            proven = [
                d
                for d in f.dirs
                if len(failing[d] - {None}) >= 2 or any(ordering.related(d, moved) for moved in self._moved)
            ]
            f.race = bool(proven)
            directory = patterns.fold_component(os.path.basename((proven or list(f.dirs))[0].rstrip("/")))
            f.why = (ordering.WHY if f.race else ordering.WHY_UNPROVEN).format(dir=directory, verb=ordering.verb(f.op))

    def sorted(self) -> list[Finding]:
        self.finish()
        return sorted(self.groups.values(), key=Finding.sort_key)

    @property
    def races(self) -> int:
        self.finish()
        return sum(1 for f in self.groups.values() if f.counts)

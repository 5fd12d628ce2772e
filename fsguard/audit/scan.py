"""What ``fsguard scan LOG...`` finds: races that crashed jobs run without fsguard. It reads logs of jobs that ran
*without* fsguard. It finds the filesystem races that crashed them, and whether fsguard would have saved the job.

A traceback counts when its exception is an ``OSError`` raised from a guarded operation. These are ``os.makedirs``,
``os.mkdir``, ``os.rename``, ``os.replace``, ``os.remove``, ``os.unlink``, ``os.rmdir``, ``os.symlink``, ``os.link``,
``shutil.rmtree`` and ``shutil.move``. ``pathlib``'s ``mkdir``, ``rename``, ``replace``, ``unlink``, ``rmdir``,
``symlink_to`` and ``hardlink_to`` count too. The operation is read from the standard library's frames (``makedirs`` in
``os``, ``rmtree`` in ``shutil``). C functions have no frame. For them it is read from the call in the source line of
the program's innermost frame, the one under the carets. That frame is the call site; findings are grouped by call site,
operation and error.

Ordering races outside those calls count too (``ordering.py``). A peer moved or removed a staging directory while this
rank still listed or wrote into it. Examples: ``os.listdir``, ``open``, ``torch.save``'s "Parent directory ... does not
exist", safetensors' "os error 2". No patch of ``os.*`` can fix those; they are reported ``not fixable`` *and* make the
exit status 1, with what would fix them in the program.

Known library bugs count too (``KNOWN_BUGS``): ordering or shared-writer bugs that users filed upstream. Examples:
``torch.hub.load`` on every rank (pytorch/pytorch #68320). Or a ``datasets`` cache entry built by several nodes whose
lock does not lock across them (transformers #30859). A traceback through such code is ``not fixable`` whatever call it
failed in, and counts as a race, with the library's fix. fsguard may absorb a duplicated call inside it, but the job
still fails (``tests/test_real_programs.py`` runs both).

Verdicts, one per (operation, error), are the guards' own. Each rule's module ends in a ``SCAN`` table
(``fsguard.guards.Scan``). It says which errors of its operations it absorbs, on what evidence, and which it re-raises.
``fsguard.guards.SCAN`` holds the errors no rule absorbs (``ESTALE``, permission, space). A row for a staging or
temporary tree wins over the plain one (``rmtree`` of ``tmp-checkpoint-5`` may race a rename: data loss). An error no
table names is not fixable: not a race fsguard can prove.

"absorbed": fsguard's default mode (``FSGUARD=1``) turns the crash into a record. "serialize": it takes
``FSGUARD_SERIALIZE=1``, which runs the calls on one path one rank at a time. "not fixable": fsguard re-raises it,
rightly: a genuine error, or an ordering bug of the application. Errno numbers in a log are read with this machine's
table (logs from Linux, read on Linux).

The same traceback printed twice (by the rank, then again in torchrun's failure summary) counts once per rank. Exit
status: 0 no races found; 2 usage or read errors. 1 races found: ones fsguard absorbs or serializes, or ordering races
no patch can fix (a CI gate). A read error is a truncated, binary or unreadable input, or one that ends inside a
traceback. Genuine errors are listed but do not make the status 1: they are not races.
"""

from __future__ import annotations

import errno
import os
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import guards
from ..guards import (
    ABSORBED,
    EVERY_OP,
    NOT_FIXABLE,
    SERIALIZE,
    Scan,
    link,
    makedirs,
    mkdir,
    remove,
    rename,
    rmtree,
    symlink,
)
from . import inputs, ordering, patterns, tables
from .tracebacks import Frame, Reader, Traceback

# A race the traceback cannot prove fsguard absorbs: it absorbs only an error that would end its thread, and the
# log shows the program's own handling on the way, or no way to the top (issue 45).
DEPENDS = "depends"
VERDICT_ORDER = (SERIALIZE, ABSORBED, DEPENDS, NOT_FIXABLE)
MAX_PATTERNS = tables.MAX_PATTERNS
MAX_SEEN_KEYS = 1_000_000  # dedupe memory bound; beyond it duplicates are counted, not dropped

OS_ERRORS = {
    "OSError": None,
    "IOError": None,
    "EnvironmentError": None,
    "FileExistsError": "EEXIST",
    "FileNotFoundError": "ENOENT",
    "PermissionError": "EACCES",
    "IsADirectoryError": "EISDIR",
    "NotADirectoryError": "ENOTDIR",
}
# Functions of the standard library whose frame names the operation (outermost wins: shutil.move over
# the os.rename inside it).
_STDLIB_OPS = {
    "makedirs": "makedirs",
    "mkdir": "mkdir",
    "rename": "rename",
    "replace": "replace",
    "rmtree": "rmtree",
    "_rmtree_safe_fd": "rmtree",
    "_rmtree_safe_fd_step": "rmtree",
    "_rmtree_unsafe": "rmtree",
    "move": "move",
    "unlink": "remove",  # pathlib's Path.unlink
    "rmdir": "rmdir",  # pathlib's Path.rmdir
    "symlink_to": "symlink",
    "hardlink_to": "link",
}
_CALL = re.compile(
    r"(?P<qual>\b(?:os|shutil)\.)?\b(?P<op>makedirs|mkdir|rename|replace|rmtree|move|remove|unlink|rmdir|symlink|link)\s*\("
)
_ALIASES = {"unlink": "remove"}  # one operation name for both functions, as FSGUARD_OPS has it
_INTERNAL = re.compile(
    r"^<frozen |[/\\][Ll]ib[/\\]python\d[\d.]*[/\\](?!site-packages|dist-packages)[^/\\]+"
    r"(?:[/\\][^/\\]+)?\.py$|[/\\](?:fsguard|wrapt)[/\\][^/\\]+\.py$"
)
# fsguard's own wrappers and wrapt's (a log of a guarded job): their frames are named after no operation.
_WRAPPER = re.compile(r"[/\\](?:fsguard|wrapt)[/\\][^/\\]+\.py$")
_ERRNO = re.compile(
    r"\[Errno (?P<num>\d+)\] (?P<text>.*?)(?:: (?P<a>'[^']*'|\"[^\"]*\")"
    r"(?: -> (?P<b>'[^']*'|\"[^\"]*\"))?)?$"
)
_WRAPPED = re.compile(r"\s*(?P<type>[A-Za-z_][\w.]*Error): (?P<message>\[Errno \d+\] .*)$")


def _verdicts() -> dict[tuple[str, str, bool], Scan]:
    """Every row of the guards' ``SCAN`` tables, by (operation, errno name, staging)."""
    found: dict[tuple[str, str, bool], Scan] = {}
    for row in (*guards.SCAN, *[row for rule in RULES for row in rule.SCAN]):
        for key in ((op, name, row.staging) for op in row.ops for name in row.errors):
            if key in found:
                raise ValueError(f"two guards' SCAN rows for {key}: {found[key]} and {row}")
            found[key] = row
    return found


RULES = (makedirs, mkdir, remove, rename, rmtree, symlink, link)  # fsguard/guards/*.py, each with its SCAN table
VERDICTS = _verdicts()


def verdict(op: str, errno_name: str | None, staging: bool = False) -> tuple[str, str]:
    """The verdict for one operation and error, with one sentence of why. It is read from the guards' ``SCAN`` tables,
    for a staging or temporary tree."""
    name = errno_name or ""
    keys = [(op, name, True), (op, name, False)] if staging else [(op, name, False)]
    for key in [*keys, (EVERY_OP, name, False)]:
        row = VERDICTS.get(key)
        if row is not None:
            return row.verdict, row.why
    return NOT_FIXABLE, f"fsguard does not absorb {errno_name or 'this error'} from {op}: not a race it can prove."


def _internal(frame: Frame) -> bool:
    return bool(_INTERNAL.search(frame.file))


def operation(frames: list[Frame]) -> tuple[str | None, Frame | None]:
    """The filesystem operation that raised, and the program's frame that called it (the call site)."""
    site_at = next((i for i in range(len(frames) - 1, -1, -1) if not _internal(frames[i])), None)
    site = frames[site_at] if site_at is not None else None
    below = frames[site_at + 1 :] if site_at is not None else frames
    for frame in below:  # outermost library frame first
        if frame.function in _STDLIB_OPS and not _WRAPPER.search(frame.file):
            return _STDLIB_OPS[frame.function], site
    if site is None or not site.source:
        return None, site
    calls = list(_CALL.finditer(site.source))
    if site.caret >= 0:
        calls = [c for c in calls if c.start() >= site.caret] or calls
    else:
        calls = [c for c in calls if c.group("qual")] or calls
    op = calls[0].group("op") if calls else None
    return _ALIASES.get(op, op) if op else None, site


# The first frame of a thread or process: an error that reaches it ends the thread (the default hooks).
_TOP = re.compile(
    r"(?:^<frozen runpy>$|[/\\]runpy\.py$)|(?P<threading>[/\\]threading\.py$)"
    r"|(?P<process>[/\\]multiprocessing[/\\]process\.py$)|(?P<record>[/\\]torch[/\\]distributed[/\\]elastic[/\\]multiprocessing[/\\]errors[/\\]__init__\.py$)"
)
# Standard modules whose frames on the way say the error was carried or may be suppressed.
_CARRIED = re.compile(
    r"[/\\](?:contextlib\.py|asyncio[/\\][^/\\]+\.py|concurrent[/\\]futures[/\\][^/\\]+\.py"
    r"|multiprocessing[/\\]pool\.py|socketserver\.py|unittest[/\\][^/\\]+\.py)$"
)
_CONTEXT_LINE = re.compile(r"^(?:async\s+)?with\b|^yield\b|(?:^|[=(\s])await\s")
DEPENDS_WHY = (
    "{reason}: fsguard absorbs a race only where the error would end its thread; here that depends on the "
    "program's handling (what a handler or context manager may swallow, fsguard leaves to the program: a deferred "
    "record, the job as without fsguard)."
)


def _top(frame: Frame) -> bool:
    """Whether ``frame`` is the first of a thread or process. A thread's first frame is a script's module, runpy, or a
    thread's or process's bootstrap. It is also the re-raising ``@record`` wrapper of torch's elastic agent, where its
    summary's copy starts."""
    if frame.function == "<module>":
        return True
    found = _TOP.search(frame.file)
    if found is None:
        return False
    if found["threading"]:
        return frame.function in ("_bootstrap", "_bootstrap_inner")
    if found["process"]:
        return frame.function == "_bootstrap"
    return not found["record"] or frame.function == "wrapper"


def unproven(tb: Traceback) -> str | None:
    """Why a traceback cannot prove its error ended its thread unhandled, or None. The reasons: the exception was
    handled (another followed it), or was raised while handling another. Or it never reaches a thread's top. Or it
    passed through a frame that carries errors (a future, a task) or may suppress them (a context manager's exit, a
    generator)."""
    if tb.chained:
        return "the program handled it (another exception followed during its handling)"
    if tb.handling:
        return "it was raised while the program handled an earlier exception"
    if not tb.frames or not _top(tb.frames[0]):
        return "its traceback does not start at the top of a thread (a handler caught it there, or printed it)"
    for frame in tb.frames:
        if _CARRIED.search(frame.file) or frame.function in ("__exit__", "__aexit__"):
            return f"it passed through {frame.text()}, which may carry or suppress it"
        if _CONTEXT_LINE.search(frame.source):
            return f"it passed through a context at {frame.text()} ({frame.source})"
    return None


def _unquote(text: str | None) -> str | None:
    return text[1:-1] if text else None


def parse_error(exception: str, message: str) -> tuple[str, str | None, list[str]] | None:
    """``(type, errno name, paths)`` of an OSError's exception line, or None for any other exception.

    An OSError that a library re-raised inside its own exception counts as that OSError. The library's message holds the
    original's type and text (torch's ``InductorError: FileNotFoundError: [Errno 2] ...``). The frames are the
    original's (``with_traceback``), down to the failing call."""
    name = exception.rsplit(".", 1)[-1]
    if name not in OS_ERRORS:
        wrapped = _WRAPPED.match(message)
        if wrapped is None or wrapped["type"].rsplit(".", 1)[-1] not in OS_ERRORS:
            return None
        name, message = wrapped["type"].rsplit(".", 1)[-1], wrapped["message"]
    match = _ERRNO.match(message)
    if match is None:
        return name, OS_ERRORS[name], []
    errno_name = errno.errorcode.get(int(match["num"]), OS_ERRORS[name])
    paths = [p for p in (_unquote(match["a"]), _unquote(match["b"])) if p is not None]
    return name, errno_name, paths


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


@dataclass(frozen=True)
class KnownBug:
    """Library code whose failures are the library's own ordering or shared-writer bug. Whatever error they end in,
    these failures are the library's bug when its ranks run it together. No patch of ``os.*`` can fix them; the fix is
    the program's."""

    op: str  # shown in the OP column
    file: re.Pattern[str]  # a frame of the library, by its file
    functions: frozenset[str]  # ... and its function
    errors: frozenset[str]  # exception types (last dotted part) that this bug ends in
    why: str


_FS_ERRORS = frozenset({"OSError", "IOError", "FileNotFoundError", "FileExistsError", "NotADirectoryError"})
KNOWN_BUGS = (
    KnownBug(
        "torch.hub",
        re.compile(r"[/\\]torch[/\\]hub\.py$"),
        frozenset({"_get_cache_or_reload", "_load_local"}),
        _FS_ERRORS | {"ModuleNotFoundError", "ImportError", "BadZipFile", "Error"},
        "torch.hub.load run by several ranks at once on one hub directory (pytorch/pytorch #68320): each rank "
        "removes the shared zip and <owner>_<repo>_<ref>, extracts over the peers' extraction and moves its own "
        "there, so a rank imports hubconf.py from a directory a peer just removed, or shutil.move finds a peer's "
        "tree at the destination and moves its own into it. fsguard absorbs the duplicated removals, not the "
        "ordering: call torch.hub.load on one rank first (or torch.hub.download on one rank), barrier, then "
        "load on the others without force_reload; or give each rank its own TORCH_HOME.",
    ),
    KnownBug(
        "datasets",
        re.compile(r"[/\\]datasets[/\\](?:builder|arrow_reader|arrow_writer|table)\.py$"),
        frozenset({"download_and_prepare", "_download_and_prepare", "incomplete_dir", "as_dataset"}),
        _FS_ERRORS | {"ArrowInvalid", "ArrowIOError", "DatasetGenerationError"},
        "datasets built one cache entry from several nodes at once (transformers #30859): its FileLock did not "
        "lock across nodes (flock on NFS or Lustre with localflock: tox-dev/filelock #389), so the nodes wrote "
        "one <entry>.incomplete directory and moved or read it under each other: a shared writer, not a "
        "duplicated call. Prepare the dataset on one rank first (with training_args.main_process_first(): or "
        "a barrier), or put HF_DATASETS_CACHE on node-local disk, or mount the filesystem with working "
        "cross-node locks (Lustre -o flock).",
    ),
)


def known_bug(tb: Traceback) -> tuple[KnownBug, Frame] | None:
    """The known library bug a traceback ends in, and the library's innermost frame of it."""
    name = tb.exception.rsplit(".", 1)[-1]
    for bug in KNOWN_BUGS:
        if name not in bug.errors:
            continue
        frames = [f for f in tb.frames if bug.file.search(f.file)]
        if any(f.function in bug.functions for f in frames):
            return bug, frames[-1]
    return None


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


def collect(paths: list[str], problems: tables.Problems) -> tuple[Findings, int]:
    """The findings of every input, and how many inputs were read."""
    findings = Findings()
    read = inputs.process(paths, Reader(findings.add), problems)
    findings.finish()
    return findings, read


def document(findings: Findings, read: int, problems: tables.Problems, status: int, version: str) -> dict[str, Any]:
    """The ``--json`` form."""
    return tables.document(read, problems, status, version, findings=[f.as_json() for f in findings.sorted()])


COLUMNS = (
    tables.Column("VERDICT", 11),
    tables.Column("OP", 10),
    tables.Column("ERROR", 24),
    tables.Column("N", 5, right=True),
    tables.Column("RANKS", 10),
    tables.Column("HOSTS", 5, right=True),
)
LEGEND = (
    "absorbed: fsguard's default mode (FSGUARD=1) absorbs it; serialize: it needs FSGUARD=1 "
    "FSGUARD_SERIALIZE=1; not fixable: fsguard rightly re-raises it."
)
LEGEND_ORDERING = " !! not fixable: an ordering race that only a change to the program fixes."
LEGEND_DEPENDS = (
    " depends: a race fsguard absorbs only if the error would end its thread; the log shows the program's own "
    "handling on the way, or cannot show it reached the top."
)


def _legend(found: list[Finding]) -> str:
    return (
        LEGEND
        + (LEGEND_DEPENDS if any(f.verdict == DEPENDS for f in found) else "")
        + (LEGEND_ORDERING if any(f.race for f in found) else "")
    )


def _summary(findings: Findings, read: int) -> str:
    found = findings.sorted()
    counts = Counter(f.verdict for f in found)
    ordering_races = sum(1 for f in found if f.race)
    parts = [
        f"{counts[ABSORBED]} absorbed by default",
        *(
            [f"{counts[DEPENDS]} depend{'s' if counts[DEPENDS] == 1 else ''} on the program's handling"]
            * bool(counts[DEPENDS])
        ),
        f"{counts[SERIALIZE]} need serialization",
        f"{counts[NOT_FIXABLE]} not fixable" + (f" (ordering races: {ordering_races})" if ordering_races else ""),
    ]
    return (
        f"{len(found)} call site{'s' if len(found) != 1 else ''} with filesystem errors in {read} "
        f"input{'s' if read != 1 else ''}: " + ", ".join(parts)
    )


def _seen_text(f: Finding) -> str:
    more = len(f.sources) - 1
    return f"{f.first_seen.source}:{f.first_seen.line}" + (
        f" (and {more} more input{'s' if more > 1 else ''})" if more else ""
    )


def render_human(findings: Findings, read: int, width: int, wide: bool = False) -> str:
    found = findings.sorted()
    if not found:
        return f"fsguard scan: no filesystem-race tracebacks in {read} input{'s' if read != 1 else ''}"
    rows = []
    for f in found:
        details: list[tables.Detail] = [("at", f.site_text, tables.PATH)]
        details += [("path" if i == 0 else "", p, tables.PATH) for i, (p, _) in enumerate(f.paths.most_common(3))]
        if f.hosts:
            details.append(("hosts", ", ".join(sorted(f.hosts)), tables.WRAP))
        details += [("seen", _seen_text(f), tables.PATH), ("why", f.why, tables.WRAP)]
        rows.append(
            tables.Row(
                "!!" if f.verdict == SERIALIZE or f.race else "",
                [f.verdict, f.op, f.error_text, str(f.count), tables.ranks_text(f.ranks), str(len(f.hosts) or "?")],
                details,
            )
        )
    lines = [*textwrap.wrap(f"fsguard scan: {_summary(findings, read)}", width, break_on_hyphens=False), ""]
    lines += tables.human(COLUMNS, rows, width, wide)
    lines += ["", *textwrap.wrap(_legend(found), width)]
    return "\n".join(lines)


def render_markdown(findings: Findings, read: int) -> str:
    found = findings.sorted()
    if not found:
        return f"**fsguard scan**: no filesystem-race tracebacks in {read} input{'s' if read != 1 else ''}."
    headers = ["Verdict", "Op", "Error", "Call site", "Paths", "N", "Ranks", "Hosts", "Why"]
    rows = [
        [
            f"**{f.verdict}**" if f.verdict == SERIALIZE or f.race else f.verdict,
            f.op,
            f.error_text,
            tables.code(f.site_text),
            "<br>".join(tables.code(p) for p, _ in f.paths.most_common(3)),
            str(f.count),
            tables.ranks_text(f.ranks),
            ", ".join(sorted(f.hosts)),
            f.why,
        ]
        for f in found
    ]
    return "\n".join(
        [
            f"**fsguard scan**: {_summary(findings, read)}.",
            "",
            *tables.markdown(headers, rows),
            "",
            f"_{_legend(found)}_",
        ]
    )

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

import textwrap
from collections import Counter
from typing import Any

from ..guards import ABSORBED, NOT_FIXABLE, SERIALIZE
from . import inputs, tables
from .failed import operation, parse_error, unproven
from .findings import Finding, Findings, Place, Raised
from .known_bugs import KNOWN_BUGS, KnownBug, known_bug
from .tracebacks import Reader
from .verdicts import DEPENDS, RULES, VERDICTS, verdict

# Its parts (issue 49): ``failed`` reads one traceback, ``verdicts`` holds the guards' SCAN verdicts, ``known_bugs``
# the library bugs, ``findings`` groups tracebacks. Their names stay importable from here, as before.
__all__ = [
    "KNOWN_BUGS",
    "RULES",
    "VERDICTS",
    "Finding",
    "Findings",
    "KnownBug",
    "Place",
    "Raised",
    "collect",
    "document",
    "known_bug",
    "operation",
    "parse_error",
    "render_human",
    "render_markdown",
    "unproven",
    "verdict",
]


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

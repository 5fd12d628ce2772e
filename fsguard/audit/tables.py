"""Output shared by ``report`` and ``scan``: tables, Markdown, JSON, and ``Tally``. The table is an 80-column human
table; ``Tally`` is what both count of a group.

The human form is one row of short columns per group, then indented detail lines. The details are call site, path
pattern and a sentence of why. It reads at a glance in an 80-column terminal without wrapping. Long paths are cut in the
*middle* (``/tmp/.../runs/checkpoint-<n>``), keeping the first component and the last ones, which say the most;
``--wide`` prints them whole. Sentences are wrapped, never cut.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .._version import __version__
from . import inputs, patterns

Found = TypeVar("Found", contravariant=True)

WIDTH = 80
MAX_PATTERNS = 50  # per group: bounded memory on a job that touched millions of distinct paths
INDENT = "     "
LABEL = 6  # "path  ", "why   "
# How a detail line's text is fitted: wrapped (sentences), shortened in the middle (paths), cut at the start.
WRAP, PATH, CUT = "wrap", "path", "cut"
Detail = tuple[str, str, str]  # (label, text, how)


@dataclass(kw_only=True)
class Tally:
    """The events of one call site: how many, from which ranks, hosts and path patterns."""

    count: int = 0
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    paths: Counter[str] = field(default_factory=Counter)

    def add_path(self, pattern: str) -> bool:
        """Count ``pattern``; False when the group already holds ``MAX_PATTERNS`` others."""
        if pattern in self.paths or len(self.paths) < MAX_PATTERNS:
            self.paths[pattern] += 1
            return True
        return False


@dataclass(frozen=True)
class Column:
    title: str
    width: int
    right: bool = False

    def cell(self, text: str) -> str:
        text = elide(text, self.width)
        return text.rjust(self.width) if self.right else text.ljust(self.width)


@dataclass
class Row:
    """One group: a mark, its cells, and ``(label, text, how)`` details. The mark is ``!!`` for what needs attention."""

    mark: str
    cells: list[str]
    details: list[Detail] = field(default_factory=list)


def elide(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, keeping its end."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[-width:]
    return "..." + text[-(width - 3) :]


def ranks_text(ranks: Iterable[int]) -> str:
    """``0-3,7``: sorted ranks with runs collapsed."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts) or "?"


def _fit(text: str, how: str, room: int, wide: bool) -> list[str]:
    if how == WRAP:
        return textwrap.wrap(text, room, break_on_hyphens=False)
    if wide:
        return [text]
    if how == PATH:
        return [patterns.shorten(text, room)]
    return [elide(text, room)]


def human(columns: Sequence[Column], rows: Sequence[Row], width: int = WIDTH, wide: bool = False) -> list[str]:
    """The table's lines: header, then each row with its details (paths whole when ``wide``)."""
    lines = ["   " + "  ".join(c.cell(c.title) for c in columns).rstrip()]
    room = max(width - len(INDENT) - LABEL, 20)
    for row in rows:
        lines.append(
            f"{row.mark:<2} " + "  ".join(c.cell(v) for c, v in zip(columns, row.cells, strict=False)).rstrip()
        )
        for label, text, how in row.details:
            pieces = _fit(text, how, room, wide)
            for n, piece in enumerate(pieces or [""]):
                lines.append(f"{INDENT}{(label if n == 0 else ''):<{LABEL}}{piece}".rstrip())
    return lines


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table; cells are escaped, never cut."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return lines


def code(text: str) -> str:
    """Markdown inline code for a path or site. Backticks inside are rare enough to swap for quotes."""
    return f"`{text.replace('`', chr(39))}`" if text else ""


def to_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--json`` / ``--markdown`` (default: the human table), ``--width`` and ``--wide``."""
    form = parser.add_mutually_exclusive_group()
    form.add_argument(
        "--json", dest="format", action="store_const", const="json", help="one JSON document on stdout, for tools"
    )
    form.add_argument(
        "--markdown",
        dest="format",
        action="store_const",
        const="markdown",
        help="a Markdown table, for issues and reports",
    )
    parser.set_defaults(format="human")
    parser.add_argument(
        "--width", type=int, default=WIDTH, metavar="COLUMNS", help=f"width of the human table (default {WIDTH})"
    )
    parser.add_argument("--wide", action="store_true", help="print paths and call sites whole, never shortened")


def clock(epoch: float) -> str:
    """``HH:MM:SS`` in local time, for the human table."""
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def stamp(epoch: float) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in local time."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def iso(epoch: float) -> str:
    """ISO 8601 with the local UTC offset, for JSON."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(epoch))


class Problems:
    """Problems with inputs: printed as they happen, kept for JSON and the exit status."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.items: list[inputs.Problem] = []

    def __call__(self, problem: inputs.Problem) -> None:
        self.items.append(problem)
        kind = "" if problem.error else "note: "
        print(f"fsguard {self.command}: {kind}{problem.text()}", file=sys.stderr, flush=True)

    @property
    def error(self) -> bool:
        return any(p.error for p in self.items)

    def as_json(self) -> list[dict[str, Any]]:
        return [{"source": p.source, "message": p.message, "error": p.error} for p in self.items]


def exit_status(problems: Problems, found: bool) -> int:
    """The exit status: 2 for read errors, else 1 when something was found, else 0. Read errors come first, since they
    hide what the input held."""
    return 2 if problems.error else 1 if found else 0


def document(read: int, problems: Problems, status: int, version: str, **found: Any) -> dict[str, Any]:
    """A command's ``--json`` form. It holds what the command read, what it ``found`` (its own fields), its problems and
    exit status."""
    head = {"command": problems.command, "version": version, "inputs_read": read}
    return {**head, **found, "problems": problems.as_json(), "exit_status": status}


class Analysis(Protocol[Found]):
    """``fsguard.audit.report`` or ``fsguard.audit.scan``: its three output forms of what it found."""

    def document(self, found: Found, read: int, problems: Problems, status: int, version: str) -> dict[str, Any]: ...

    def render_markdown(self, found: Found, read: int) -> str: ...

    def render_human(self, found: Found, read: int, width: int, wide: bool = False) -> str: ...


def output(
    analysis: Analysis[Found], found: Found, read: int, problems: Problems, status: int, args: argparse.Namespace
) -> str:
    """What a command prints: the form ``args`` asks for (``add_output_options``)."""
    if args.format == "json":
        return to_json(analysis.document(found, read, problems, status, __version__))
    if args.format == "markdown":
        return analysis.render_markdown(found, read)
    return analysis.render_human(found, read, args.width, args.wide)

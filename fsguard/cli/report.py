"""``fsguard report PATH...``: arguments and output; the analysis is ``fsguard.audit.report``."""

from __future__ import annotations

import argparse
import sys

from .._version import __version__
from ..audit import report, tables


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="JSON-lines file, directory of them, job log (.gz/.bz2/.xz too), or - for stdin",
    )
    tables.add_output_options(parser)
    parser.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write the audit as one self-contained web page (summary, hazards, timeline, call sites)",
    )


def run(args: argparse.Namespace) -> int:
    problems = tables.Problems("report")
    page = None
    if args.html:
        from ..audit import html

        page = html.Collector()
    collector, read = report.collect(args.paths, problems, page)
    status = tables.exit_status(problems, collector.records > 0)
    written = False
    if page is not None:
        try:
            html.write(args.html, html.render(page, read, problems, status, __version__, args.paths))
            written = True
        except OSError as error:
            print(f"fsguard report: cannot write {args.html}: {error.strerror or error}", file=sys.stderr)
            status = 2
    print(tables.output(report, collector, read, problems, status, args))
    if written:  # on stderr beside --json, whose stdout is one JSON document
        print(f"fsguard report: HTML report in {args.html}", file=sys.stderr if args.format == "json" else sys.stdout)
    return status

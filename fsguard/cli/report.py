"""``fsguard report PATH...``: arguments and output; the analysis is ``fsguard.audit.report``."""

from __future__ import annotations

import argparse

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


def run(args: argparse.Namespace) -> int:
    problems = tables.Problems("report")
    collector, read = report.collect(args.paths, problems)
    status = tables.exit_status(problems, collector.records > 0)
    if args.format == "json":
        print(tables.to_json(report.document(collector, read, problems, status, __version__)))
    elif args.format == "markdown":
        print(report.render_markdown(collector, read))
    else:
        print(report.render_human(collector, read, args.width, args.wide))
    return status

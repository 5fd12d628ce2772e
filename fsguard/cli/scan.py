"""``fsguard scan LOG...``: arguments and output; the analysis is ``fsguard.audit.scan``."""

from __future__ import annotations

import argparse

from .._version import __version__
from ..audit import scan, tables


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="LOG", help="job log, directory of logs (.gz/.bz2/.xz too), or - for stdin"
    )
    tables.add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    problems = tables.Problems("scan")
    findings, read = scan.collect(args.paths, problems)
    status = tables.exit_status(problems, findings.races > 0)
    if args.format == "json":
        print(tables.to_json(scan.document(findings, read, problems, status, __version__)))
    elif args.format == "markdown":
        print(scan.render_markdown(findings, read))
    else:
        print(scan.render_human(findings, read, args.width, args.wide))
    return status

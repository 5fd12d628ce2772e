"""``fsguard scan LOG...``: arguments and output; the analysis is ``fsguard.audit.scan``."""

from __future__ import annotations

import argparse

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
    print(tables.output(scan, findings, read, problems, status, args))
    return status

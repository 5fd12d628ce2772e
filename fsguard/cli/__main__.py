"""``fsguard`` / ``python -m fsguard``: one sub-command per module of this package.

Each sub-command module exposes ``configure(parser)`` and ``run(args) -> int``; it is imported only when used.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .._version import __version__

COMMANDS = {
    "status": "show whether fsguard is installed and active here, and its effective configuration",
    "report": "summarise fsguard's records from JSON-lines files or job logs",
    "scan": "find filesystem-race tracebacks in logs of jobs that ran without fsguard",
    "demo": "run a small local job with races, without and then with fsguard",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fsguard", description="Guard distributed jobs against filesystem races.")
    parser.add_argument("--version", action="version", version=f"fsguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        try:
            module = importlib.import_module(f"fsguard.cli.{name}")
        except ImportError:
            continue
        module.configure(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = getattr(args, "_module", None)
    if module is None:
        if args.command:
            print(f"fsguard: '{args.command}' is not available in this installation", file=sys.stderr)
            return 2
        parser.print_help()
        return 2
    try:
        return int(module.run(args))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

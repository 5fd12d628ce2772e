"""``fsguard`` / ``python -m fsguard``: one sub-command per module of this package.

Each sub-command module exposes ``configure(parser)`` and ``run(args) -> int``. It is imported only when that
sub-command runs: ``fsguard status`` never imports the audit code, ``fsguard --help`` imports none of them.
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


def chosen(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line, if any."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported, to add its arguments."""
    parser = argparse.ArgumentParser(prog="fsguard", description="Guard distributed jobs against filesystem races.")
    parser.add_argument("--version", action="version", version=f"fsguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name != command:
            continue
        try:
            module = importlib.import_module(f"fsguard.cli.{name}")
        except ImportError:
            continue
        module.configure(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen(argv))
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

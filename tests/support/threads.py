"""The tests' one way to run a call in a thread of its own, with no handler around it.

An error that escapes such a thread is a would-be crash, which fsguard may absorb; a handler around the call
would be the program's own, and decide (issue 45). The helper is ``crash_of`` in ``tests/workers/gate.py``:
workers run as scripts import it from there, and a program given as text starts with :func:`with_crash_of`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

WORKERS = Path(__file__).resolve().parent.parent / "workers"
IMPORT_CRASH_OF = f"import sys; sys.path.insert(0, {str(WORKERS)!r}); from gate import crash_of\n"


def with_crash_of(program: str) -> str:
    """``program``, dedented, after the line that imports ``crash_of``."""
    return IMPORT_CRASH_OF + textwrap.dedent(program)

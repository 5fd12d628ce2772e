"""The handler oracle: does a failing call's error end its thread?

fsguard absorbs only a would-be crash (issue 45). The oracle answers "ends the thread" only where it has
read every construct on the error's way out and each passes it on: ``except`` clauses that do not match or
re-raise on every path, ``finally`` blocks that cannot return, break or continue, ``with`` blocks whose
``__exit__`` cannot return true (contextlib's own read as any other: ``suppress``, ``@contextmanager``
helpers yield by yield, ``ContextDecorator`` used as a decorator), up to a thread's top with the default
hook. Anything else decides: the program's handler, or fsguard cannot read it (a conditional manager, a
program-set ``threading.excepthook``, a future, a task). Soundness first: tests/oracle_fuzz.py checks it
against ground truth.

Modules: ``walk`` (the frames), ``judge`` (one layer in its frame), ``bytecode`` (3.11+) and ``source``
(3.10) (the layers around an instruction), ``names`` (expressions read without running them),
``delegation`` (a handler that hands its error to a function), ``values`` (the small types).
"""

from __future__ import annotations

import sys
from typing import Any

from .walk import CONVERSIONS, walk


def caller_handles(error: BaseException, frame: Any = None) -> dict[str, Any] | None:
    """None when ``error`` would end its thread or process; else what decides instead. For the record: ``{"reason": ...,
    "handler": "except OSError", "frame": "file:line", ...}``. Never raises."""
    try:
        start = frame if frame is not None else sys._getframe(1)
        return walk(type(error), start, 0, CONVERSIONS)
    except Exception as failure:  # noqa: BLE001 - not understood: the program decides
        return {"reason": f"fsguard's handler analysis failed ({type(failure).__name__}: {failure})"}

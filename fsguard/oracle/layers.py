"""The layers of handling around a frame's current instruction, cached per code object and position."""

from __future__ import annotations

import sys
from typing import Any

from ..state import STATE
from . import bytecode, source
from .values import Layer, Unknown

# (code, offset or line) -> the layers handling it: found once per install (a cache of state.STATE.caches)
HANDLER_LAYERS: dict[tuple[Any, int], list[Layer]] = STATE.caches.register({})

_CACHE_SIZE = 2048


def at_frame(frame: Any) -> list[Layer]:
    """The layers around ``frame``'s current instruction (3.11+: its offset; 3.10: its line)."""
    if sys.version_info >= (3, 11):
        return at(frame.f_code, frame.f_lasti, None, frame.f_globals)
    return at(frame.f_code, None, frame.f_lineno, frame.f_globals)


def at(code: Any, offset: int | None, line: int | None, module_globals: Any) -> list[Layer]:
    """The layers around ``offset`` (3.11+) or ``line`` (3.10) of ``code``."""
    key = (code, offset if offset is not None else -1_000_000 - (line or 0))
    cache = HANDLER_LAYERS
    found = cache.get(key)
    if found is None:
        if offset is not None:
            found = bytecode.layers(code, offset)
        elif line is not None:
            found = source.layers(code, line, module_globals)
        else:
            found = [Unknown("no position")]
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        cache[key] = found
    return found


def yield_points(code: Any, module_globals: Any) -> list[tuple[int | None, int | None]] | None:
    """Each ``yield`` of a generator function as (offset, line) for :func:`at`; None: it delegates."""
    if sys.version_info >= (3, 11):
        offsets = bytecode.yields(code)
        return None if offsets is None else [(offset, None) for offset in offsets]
    lines = source.yields(code, module_globals)
    return None if lines is None else [(None, line) for line in lines]

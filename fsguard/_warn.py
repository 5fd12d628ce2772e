"""Leaf: fsguard's one-line warning, and the values of on/off settings that mean off. Imports only ``sys``, so any
module, the startup path first, can use it.

``fsguard.pth`` repeats ``OFF`` as a literal: it must decide before importing anything.
"""

from __future__ import annotations

import sys

OFF = ("", "0", "false", "off", "no")


def warn(message: str) -> None:
    """Print ``fsguard: <message>`` as one line on stderr; never raise."""
    try:
        sys.stderr.write(f"fsguard: {message}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not break the interpreter
        pass

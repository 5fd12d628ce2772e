"""fsguard: make concurrent filesystem calls of a distributed job idempotent where a peer already did the work.

Importing this package is cheap: nothing here imports wrapt, logging or json until a function below is used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

__version__ = "0.1.0"

__all__ = ["__version__", "guarded", "install", "installed", "uninstall"]


def install(ops: Iterable[str] | None = None) -> list[str]:
    """Patch the given operations (default: all four) in place; return the names now patched.

    Idempotent: operations already patched stay patched once.
    """
    from . import patching

    return patching.install(ops)


def uninstall() -> None:
    """Restore the exact original function objects (``os.rename is original`` holds again)."""
    from . import patching

    patching.uninstall()


def installed() -> list[str]:
    """Names of the operations currently patched."""
    from . import patching

    return patching.installed()


@contextlib.contextmanager
def guarded(ops: Iterable[str] | None = None) -> Iterator[None]:
    """Patch for the duration of a ``with`` block; restores only what this block patched."""
    from . import patching

    before = set(patching.installed())
    added = [op for op in patching.install(ops) if op not in before]
    try:
        yield
    finally:
        patching.uninstall(added)

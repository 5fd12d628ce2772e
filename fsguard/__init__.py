"""fsguard: absorb the filesystem races a peer of a distributed job already settled.

Importing this package is cheap: it runs in every interpreter where ``FSGUARD`` is set. It imports nothing;
``__version__`` is read from the leaf ``_version`` when asked for. Nothing imports wrapt, logging or json until a
function below is used.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._version import __version__ as __version__


__all__ = ["__version__", "guarded", "install", "installed", "uninstall"]


def __getattr__(name: str) -> str:
    """``fsguard.__version__``, from ``_version`` on first use (startup does not need it)."""
    if name == "__version__":
        from ._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def guarded(ops: Iterable[str] | None = None) -> _Guarded:
    """Patch for the duration of a ``with`` block; restores only what this block patched."""
    return _Guarded(ops)


class _Guarded:
    """``guarded``'s context manager (a class: ``contextlib`` is not imported at startup)."""

    __slots__ = ("_added", "_ops")

    def __init__(self, ops: Iterable[str] | None = None) -> None:
        self._ops = ops
        self._added: list[str] = []

    def __enter__(self) -> None:
        from . import patching

        before = set(patching.installed())
        self._added = [op for op in patching.install(self._ops) if op not in before]

    def __exit__(self, *exc: object) -> None:
        from . import patching

        patching.uninstall(self._added)
        self._added = []

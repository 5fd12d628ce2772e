"""Startup entry point, called from ``fsguard.pth`` (and ``fsguard.start`` on Python 3.15+).

Runs in every interpreter of the environment, so it imports only what it needs, never raises,
and reports any problem as one line on stderr prefixed ``fsguard:``.
"""

from __future__ import annotations

import os
import sys

from ._warn import OFF, warn

# Whether ``start`` ran, and from which start-up file (``fsguard status``): the one mark of process state kept
# outside ``fsguard.state``, because importing that module (its ``State``, the fork hooks) costs about 2 ms, a
# quarter more than the settings and the launcher, in every interpreter started with FSGUARD=1 and no launcher.
_started: list[str] = []


def start(via: str = "fsguard.start") -> None:
    """Decide from the environment whether to patch, and patch. Safe to call any number of times.

    Python 3.15+ calls this directly from ``fsguard.start``, with no argument, and skips the ``.pth`` line. So the "off"
    test comes first: disabled, it costs importing this module and the package, nothing more. The ``.pth`` line passes
    ``via="fsguard.pth"``.
    """
    if _started or os.environ.get("FSGUARD", "").strip().lower() in OFF:
        return
    _started.append(via)
    try:
        try:
            _start()
        except ImportError as error:
            if not _beside_the_site_packages(error):
                raise
    except ImportError as error:
        warn(f"not active: cannot import {error.name or error} ({error}); running unpatched")
    except Exception as error:  # noqa: BLE001 - startup must never break an interpreter
        warn(f"not active: {type(error).__name__}: {error}; running unpatched")


def _start() -> None:
    from . import config

    settings = config.load(os.environ)
    for problem in settings.problems:
        warn(problem)
    if settings.mode == "off":
        return
    from . import launcher

    launch = launcher.detect(os.environ)
    active, _ = launcher.activation(settings.mode, launch, getattr(sys, "orig_argv", sys.argv))
    if not active:
        return
    from . import patching

    patching.install(settings.ops, settings=settings)


def _beside_the_site_packages(error: ImportError) -> bool:
    """Retry with the interpreter's site-packages on ``sys.path``; False where that cannot help. ``site`` runs the
    ``.pth`` files of the user site (``pip install --user fsguard``) before it adds the interpreter's own site-packages,
    where wrapt may be: importable a moment later. ``sys.path`` is left as ``site`` will make it; the modules imported
    meanwhile stay imported."""
    if (error.name or "").partition(".")[0] != "wrapt" or "site" not in sys.modules:
        return False
    missing = [d for d in sys.modules["site"].getsitepackages() if d not in sys.path and os.path.isdir(d)]
    if not missing:
        return False
    sys.path.extend(missing)
    try:
        _start()
    finally:
        for directory in missing:
            if directory in sys.path:
                sys.path.remove(directory)
    return True


def started_by() -> str | None:
    """The start-up file that ran ``start`` in this process (``fsguard.pth`` or ``fsguard.start``), if any."""
    return _started[0] if _started else None

"""Turning decisions into records: the call site, the error, the launch, written by ``fsguard.records``.

Mechanism only: the guards decide, this module writes down what they decided and where it was called from. The settings
and the launch are read from ``fsguard.state.STATE``. The thread-local ``Busy`` mark is ``fsguard.state``'s too; it is
imported here for the modules that mark their own calls through this one.
"""

from __future__ import annotations

import os
import sys

from . import launcher
from ._version import __version__
from .state import STATE
from .state import Busy as Busy  # the thread-local mark lives with the process state
from .state import busy as busy

TYPE_CHECKING = False  # not typing's: records, sysconfig and typing are not imported at startup
if TYPE_CHECKING:
    from typing import Any

    SiteDirs = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


class _Sites:
    """The directory prefixes a call site is told by. Found once per install (a cache of ``state.STATE.caches``)."""

    __slots__ = ("dirs",)

    def __init__(self) -> None:
        self.dirs: SiteDirs | None = None

    def clear(self) -> None:
        self.dirs = None


SITES = STATE.caches.register(_Sites())


def site_dirs() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Directory prefixes for ``call_site``, found once, each skipped or not. The standard library: skipped.
    Site-packages, inside the standard library's directory: not skipped."""
    if SITES.dirs is None:
        import sysconfig  # not at startup: only a record needs a call site

        package = os.path.dirname(os.path.abspath(__file__)) + os.sep
        own = {package}
        # wrapt's directory, from the module fsguard loaded (``import wrapt`` would run the whole package)
        wrapt = sys.modules.get("wrapt._wrappers") or sys.modules.get("wrapt")
        location = getattr(wrapt, "__file__", None)
        if location:
            own.add(os.path.dirname(os.path.abspath(location)) + os.sep)
        applications = (package + "demo" + os.sep, package + "cli" + os.sep)
        paths = sysconfig.get_paths()
        stdlib = set()
        for key in ("stdlib", "platstdlib"):
            path = paths.get(key)
            if path:
                stdlib.add(os.path.realpath(path) + os.sep)
                stdlib.add(path + os.sep)
        keep = {p + os.sep for k in ("purelib", "platlib") if (p := paths.get(k))}
        keep.update(p + os.sep for p in sys.path if p.endswith(("site-packages", "dist-packages")))
        SITES.dirs = tuple(own), applications, tuple(stdlib), tuple(keep)
    return SITES.dirs


def call_site(depth: int = 2) -> dict[str, Any] | None:
    """File, line and function of the first frame outside fsguard, wrapt and the standard library. Frames in
    ``fsguard/demo`` and ``fsguard/cli`` are callers, as a user's training script is: they are programs that use fsguard
    (the demo's workload, the command line)."""
    own, applications, stdlib, keep = site_dirs()
    frame: Any = sys._getframe(depth)
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(own) or filename.startswith(applications):
            if fallback is None:
                fallback = frame
            internal = filename.startswith("<frozen") or (filename.startswith(stdlib) and not filename.startswith(keep))
            if not internal:
                break
        frame = frame.f_back
    chosen = frame or fallback
    if chosen is None:
        return None
    return {"file": chosen.f_code.co_filename, "line": chosen.f_lineno, "function": chosen.f_code.co_name}


def describe_error(error: BaseException | None) -> dict[str, Any] | None:
    if error is None:
        return None
    import errno

    code = getattr(error, "errno", None)
    return {
        "type": type(error).__name__,
        "errno": errno.errorcode.get(code, str(code)) if code is not None else None,
        "message": str(error),
    }


def path_text(value: Any) -> str:
    try:
        text = os.fspath(value)
    except TypeError:
        return repr(value)
    return os.fsdecode(text) if isinstance(text, bytes) else text


def record(
    op: str,
    decision: str,
    evidence: str,
    args: list[Any],
    error: BaseException | None = None,
    waited_s: float = 0.0,
    detail: dict[str, Any] | None = None,
) -> None:
    """Build and emit one record for a decision. Never raises."""
    try:
        with Busy():
            from . import records  # json, re and logging only once there is something to write

            current = STATE.launch
            rec = records.Record(
                op=op,
                decision=decision,
                evidence=evidence,
                args=[path_text(a) for a in args],
                error=describe_error(error),
                waited_s=round(waited_s, 4),
                site=call_site(3),
                origin=records.Origin(
                    host=current.host if current else launcher.hostname(os.environ),
                    pid=os.getpid(),
                    rank=current.rank if current else None,
                    local_rank=current.local_rank if current else None,
                    world_size=current.world_size if current else None,
                    launcher=current.launcher if current else None,
                    version=__version__,
                ),
                detail=detail or {},
            )
            records.emit(rec, stderr=STATE.settings.stderr, log_dir=STATE.settings.log_dir)
    except Exception as failure:  # noqa: BLE001 - a record must never break the guarded call
        try:
            sys.stderr.write(f"fsguard: could not record a decision ({type(failure).__name__}: {failure})\n")
        except Exception:  # noqa: BLE001
            pass

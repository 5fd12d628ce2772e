"""The bad-input table's vocabulary: a ``Row`` and ``row`` to register one, and the unguarded helpers rows build
their scenarios with (``j``, ``touch``, ``mkdir``, ``onerror``, ``onexc``, ``show``...), the ``stale`` and
``nobody`` preparations. The rows themselves are in ``parity_<operation>.py``; ``parity_cases.py`` runs them.

A row's ``act`` builds what it needs with unguarded calls (``os.mkdir``, ``open``, ``os.symlink``: nothing
fsguard remembers as this process's own doing), then makes the call under test; those lines end in
``# <- call`` so the test can check that a failure came from the call under test, not from the scenario's
setup. Groups: ``main`` (the worker itself builds everything), ``stale`` (``prepare`` ran in an earlier
process before this interpreter started, so those paths are older than the job), ``nobody`` (prepared as
root, then the worker drops to user ``nobody`` before acting, for EACCES/EPERM).
"""

from __future__ import annotations

import inspect
import os
import pathlib
import pwd
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Calls = list[dict[str, Any]]


HAS_ONEXC = "onexc" in inspect.signature(shutil.rmtree).parameters  # Python 3.12+


HAS_RMTREE_DIR_FD = "dir_fd" in inspect.signature(shutil.rmtree).parameters  # Python 3.11+


CALL_MARK = "# <- call"


class Skip(Exception):
    """The row cannot run here (reason in the message)."""


@dataclass
class Row:
    name: str
    act: Callable[[str, Calls], Any]
    group: str = "main"
    # What the standard library does: an exception class name, or "ok".
    outcome: str | None = None
    # "same": identical outcome, no record; "conflict": identical outcome, and fsguard writes one conflict
    # record; "absorbed": a documented deviation (README): fsguard absorbs with one record, the stdlib raises;
    # "deferred": identical outcome, and one deferred record (the program handles what fsguard would absorb).
    expect: str = "same"
    handler: bool = False  # the row passes onerror/onexc: the handler must have been called
    prepare: Callable[[str], None] | None = None
    xfail: str | None = None  # a known parity gap (strict: the test fails once it is fixed)
    # In a launched rank (peers present, none acting): "same", "conflict" or "absorbed"; None: as ``expect``.
    launched: str | None = None
    launched_xfail: str | None = None  # a known parity gap in a launched rank


ROWS: dict[str, Row] = {}


def row(
    outcome: str | None,
    *,
    name: str | None = None,
    group: str = "main",
    expect: str = "same",
    handler: bool = False,
    prepare: Callable[[str], None] | None = None,
    xfail: str | None = None,
    launched: str | None = None,
    launched_xfail: str | None = None,
) -> Callable[[Callable[[str, Calls], Any]], Callable[[str, Calls], Any]]:
    def register(act: Callable[[str, Calls], Any]) -> Callable[[str, Calls], Any]:
        key = name or act.__name__
        assert key not in ROWS, key
        ROWS[key] = Row(key, act, group, outcome, expect, handler, prepare, xfail, launched, launched_xfail)
        return act

    return register


def handled_rows(rows: dict[str, Row]) -> None:
    """For each row a guarded mode absorbs (a documented deviation), the same scenario under the program's own
    ``except OSError`` (``<row>_handled``): the program decides, so fsguard must hand it the standard library's
    error, unchanged, and say so (``deferred``)."""
    for item in list(rows.values()):
        if "absorbed" not in (item.expect, item.launched) or item.name.endswith("_handled") or item.xfail:
            continue
        name = f"{item.name}_handled"
        rows[name] = Row(
            name,
            _handled(item.act, name),
            item.group,
            "ok",
            "deferred" if item.expect == "absorbed" else "same",
            item.handler,
            item.prepare,
            None,
            "deferred" if (item.launched or item.expect) == "absorbed" else "same",
        )


def _handled(act: Callable[[str, Calls], Any], name: str) -> Callable[[str, Calls], Any]:
    def handled(d: str, calls: Calls) -> Any:
        try:
            act(d, calls)
        except OSError as error:
            return ["caught", type(error).__name__, error.errno, show(error.filename), show(error.filename2)]
        return "not raised"

    handled.__name__ = name
    return handled


def j(*parts: str) -> str:
    return os.path.join(*parts)


def touch(path: str, text: str = "x") -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def mkdir(path: str, *files: str) -> str:
    os.mkdir(path)
    for name in files:
        touch(j(path, name), name)
    return path


def onerror(calls: Calls, reraise: bool = False) -> Callable[[Any, Any, Any], None]:
    """A handler that notes each call; with ``reraise``, it raises the error it was given (a common idiom)."""

    def handler(func: Any, path: Any, exc_info: Any) -> None:
        exc = exc_info[1]
        consistent = exc_info[0] is type(exc) and exc_info[2] is exc.__traceback__
        calls.append({**_call(func, path, exc), "exc_info_consistent": consistent})
        if reraise:
            raise exc

    return handler


def onexc(calls: Calls) -> Callable[[Any, Any, Any], None]:
    def handler(func: Any, path: Any, exc: BaseException) -> None:
        calls.append(_call(func, path, exc))

    return handler


def _call(func: Any, path: Any, exc: BaseException) -> dict[str, Any]:
    return {
        "func": f"{getattr(func, '__module__', None)}.{getattr(func, '__qualname__', repr(func))}",
        "path": show(path),
        "path_type": type(path).__name__,
        "exc": type(exc).__name__,
        "errno": getattr(exc, "errno", None),
    }


def needs_rmtree_dir_fd() -> None:
    if not HAS_RMTREE_DIR_FD:
        raise Skip(f"shutil.rmtree has no dir_fd on Python {sys.version_info[0]}.{sys.version_info[1]} (3.11+)")


class PathLikeArg:
    """A user-defined ``os.PathLike`` (not a ``pathlib.Path``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"PathLikeArg({self.path!r})"


KINDS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "bytes": os.fsencode,
    "path": pathlib.Path,
    "pathlike": PathLikeArg,
}


def _prepare_old_dir(d: str) -> None:
    mkdir(j(d, "old"), "f")


def _prepare_old_file(d: str) -> None:
    touch(j(d, "dst"))


def _prepare_old_parent(d: str) -> None:
    pass  # d itself: nothing is made or removed in it after this


NOBODY = pwd.getpwnam("nobody") if "nobody" in {p.pw_name for p in pwd.getpwall()} else None


def _own(path: str, mode: int) -> str:
    """Give ``path`` to nobody with ``mode``."""
    assert NOBODY is not None
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    os.chmod(path, mode)
    return path


def _prepare_root_dir(d: str) -> None:
    """``d/ro``: root's, 0755 (nobody may not write in it), with root's file ``a``."""
    os.chmod(mkdir(j(d, "ro"), "a"), 0o755)


def _prepare_sticky(d: str) -> None:
    """``d/sticky``: 1777 like /tmp, with root's file ``a`` and root's sticky directory ``x`` holding ``f``."""
    os.chmod(mkdir(j(d, "sticky"), "a"), 0o1777)
    os.chmod(mkdir(j(d, "sticky", "x"), "f"), 0o1777)


def _prepare_read_only_subdir(d: str) -> None:
    """``d/t``: nobody's, writable, holding nobody's read-only directory ``ro`` with a file ``f``."""
    _own(mkdir(j(d, "t"), "keep"), 0o755)
    _own(j(d, "t", "keep"), 0o644)
    _own(mkdir(j(d, "t", "ro")), 0o755)
    _own(touch(j(d, "t", "ro", "f")), 0o644)
    os.chmod(j(d, "t", "ro"), 0o555)


def _prepare_unreadable_subdir(d: str) -> None:
    """``d/t``: nobody's, holding nobody's directory ``u`` that nobody may not list (0311), with a file."""
    _own(mkdir(j(d, "t")), 0o755)
    _own(mkdir(j(d, "t", "u")), 0o755)
    _own(touch(j(d, "t", "u", "f")), 0o644)
    os.chmod(j(d, "t", "u"), 0o311)


BASE = ""


SHM = ""


def show(value: Any) -> str:
    """``repr`` with this run's roots replaced, so the two modes' outcomes compare equal."""
    text = repr(value)
    for root, label in ((BASE, "<base>"), (SHM, "<shm>")):
        if root:
            text = text.replace(root, label)
    return text

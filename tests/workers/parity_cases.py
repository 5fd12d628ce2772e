"""The bad-input table: one scenario per row, run in a fresh interpreter with fsguard forced on and off.

``tests/test_parity.py`` runs this script as::

    python parity_cases.py prepare GROUP BASE [SHM]   # "stale" only: what must exist before the interpreter
    python parity_cases.py run GROUP BASE [SHM]       # every row of GROUP; one JSON object on stdout

Each row works in its own directory ``BASE/<row>`` (and ``SHM/<row>`` on tmpfs, for EXDEV). A row's
``act`` builds what it needs with unguarded calls (``os.mkdir``, ``open``, ``os.symlink``: nothing fsguard
remembers as this process's own doing), then makes the call under test; those lines end in ``# <- call``
so the test can check that a failure came from the call under test, not from the scenario's setup.
Groups: ``main`` (the worker itself builds everything), ``stale`` (``prepare`` ran in an earlier process
before this interpreter started, so those paths are older than the job), ``nobody`` (prepared as root,
then the worker drops to user ``nobody`` before acting, for EACCES/EPERM).

Before each row the worker writes ``parity-row: <name>`` on stderr, so the test can tell which row wrote
which ``fsguard:`` record line. The JSON holds ``meta`` and, per row: ``ok``, ``result`` or ``exc`` (type,
errno, strerror, filename(2) and their types, args, str, context, cause, worker frames, failing source
line), ``calls`` (onerror/onexc calls in order), ``warnings`` (category, message, raised at the worker's line), ``state`` (the row directory's tree afterwards), or
``skip`` with a reason. Paths are shown with the run's own roots replaced by ``<base>`` and ``<shm>``.
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import pwd
import shutil
import stat
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Calls = list[dict[str, Any]]

HAS_ONEXC = "onexc" in inspect.signature(shutil.rmtree).parameters  # Python 3.12+
HAS_RMTREE_DIR_FD = "dir_fd" in inspect.signature(shutil.rmtree).parameters  # Python 3.11+
CALL_MARK = "# <- call"
with open(__file__) as _source:
    SOURCE = _source.read().splitlines()  # read now: after dropping to nobody this file may be out of reach


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
    # record; "absorbed": a documented deviation (README): fsguard absorbs with one record, the stdlib raises.
    expect: str = "same"
    handler: bool = False  # the row passes onerror/onexc: the handler must have been called
    prepare: Callable[[str], None] | None = None
    xfail: str | None = None  # a known parity gap (strict: the test fails once it is fixed)


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
) -> Callable[[Callable[[str, Calls], Any]], Callable[[str, Calls], Any]]:
    def register(act: Callable[[str, Calls], Any]) -> Callable[[str, Calls], Any]:
        key = name or act.__name__
        assert key not in ROWS, key
        ROWS[key] = Row(key, act, group, outcome, expect, handler, prepare, xfail)
        return act

    return register


# --- unguarded scenario helpers ---------------------------------------------------------------------------


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

# --- main: makedirs -----------------------------------------------------------------------------------------


@row("FileExistsError")
def makedirs_file_in_the_way(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.makedirs(j(d, "f"))  # <- call


@row("FileExistsError")
def makedirs_file_in_the_way_exist_ok(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.makedirs(j(d, "f"), exist_ok=True)  # <- call


@row("NotADirectoryError")
def makedirs_file_in_an_intermediate(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.makedirs(j(d, "f", "sub", "deeper"))  # <- call


@row("NotADirectoryError")
def makedirs_file_in_an_intermediate_exist_ok(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.makedirs(j(d, "f", "sub"), exist_ok=True)  # <- call


@row("FileExistsError")
def makedirs_symlink_to_file_exist_ok(d: str, calls: Calls) -> Any:
    os.symlink(touch(j(d, "f")), j(d, "link"))
    os.makedirs(j(d, "link"), exist_ok=True)  # <- call


@row("FileExistsError")
def makedirs_symlink_to_dir(d: str, calls: Calls) -> Any:
    os.symlink(mkdir(j(d, "target")), j(d, "link"))
    os.makedirs(j(d, "link"))  # <- call


@row("FileExistsError")
def makedirs_dangling_symlink_exist_ok(d: str, calls: Calls) -> Any:
    os.symlink(j(d, "nowhere"), j(d, "link"))
    os.makedirs(j(d, "link"), exist_ok=True)  # <- call


@row("FileExistsError")
def makedirs_twice(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a"))
    os.makedirs(j(d, "a"))  # <- call


@row("FileExistsError")
def makedirs_twice_nested(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a", "b", "c"))
    os.makedirs(j(d, "a", "b"))  # <- call


@row("ok")
def makedirs_twice_exist_ok(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a", "b"))
    return os.makedirs(j(d, "a", "b"), exist_ok=True)


@row("FileExistsError")
def copytree_twice(d: str, calls: Calls) -> Any:
    src = mkdir(j(d, "src"), "f")
    shutil.copytree(src, j(d, "dst"))
    shutil.copytree(src, j(d, "dst"), dirs_exist_ok=False)  # <- call


@row("FileExistsError")
def copytree_into_own_makedirs(d: str, calls: Calls) -> Any:
    src = mkdir(j(d, "src"), "f")
    os.makedirs(j(d, "dst"))
    shutil.copytree(src, j(d, "dst"))  # <- call


@row("ok")
def copytree_twice_dirs_exist_ok(d: str, calls: Calls) -> Any:
    src = mkdir(j(d, "src"), "f")
    shutil.copytree(src, j(d, "dst"))
    return shutil.copytree(src, j(d, "dst"), dirs_exist_ok=True)


@row("ok")
def makedirs_mode(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a", "b"), mode=0o700)
    return os.makedirs(j(d, "c"), 0o750)


@row("FileExistsError")
def makedirs_mode_twice(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a"), 0o700)
    os.makedirs(j(d, "a"), 0o700)  # <- call


@row("FileExistsError")
def makedirs_relative_after_chdir(d: str, calls: Calls) -> Any:
    os.chdir(d)
    os.makedirs(j("rel", "x"))
    os.makedirs(j("rel", "x"))  # <- call


@row("ok")
def makedirs_relative_after_chdir_exist_ok(d: str, calls: Calls) -> Any:
    os.chdir(d)
    os.makedirs("rel", mode=0o711)
    return os.makedirs(j("rel", "x"), exist_ok=True)


@row(
    "FileExistsError",
    xfail="known limit (README): own memory keeps relative paths without the working directory of the call "
    "(reading it would cost every relative call a getcwd): after a chdir the process's own makedirs is not "
    "recognised, the directory looks fresh and made by a peer",
)
def makedirs_relative_chdir_in_between(d: str, calls: Calls) -> Any:
    mkdir(j(d, "elsewhere"))
    os.chdir(d)
    os.makedirs("sub")
    os.chdir("elsewhere")
    os.makedirs(j("..", "sub"))  # <- call


@row("FileExistsError", expect="absorbed")
def makedirs_made_by_peer(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))  # unguarded: as a peer of this job would, moments ago
    os.makedirs(j(d, "a"))  # <- call


# --- main: rename and replace ---------------------------------------------------------------------------------


def _rename_rows(op: str) -> None:
    """The same rows for os.rename and os.replace (looked up in each row: the guarded one when fsguard is on)."""

    @row("FileNotFoundError", name=f"{op}_source_and_destination_missing")
    def both_missing(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        call(j(d, "src"), j(d, "dst"))  # <- call

    @row("FileNotFoundError", name=f"{op}_destination_parent_missing")
    def dst_parent(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        touch(j(d, "src"))
        call(j(d, "src"), j(d, "nope", "dst"))  # <- call

    @row("FileNotFoundError", name=f"{op}_source_and_destination_parent_missing")
    def both_parents(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        call(j(d, "src"), j(d, "nope", "dst"))  # <- call

    @row("FileNotFoundError", name=f"{op}_twice")
    def twice(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        touch(j(d, "a"))
        call(j(d, "a"), j(d, "b"))
        call(j(d, "a"), j(d, "b"))  # <- call

    @row("FileNotFoundError", name=f"{op}_directory_twice")
    def twice_dir(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        mkdir(j(d, "a"), "f")
        call(j(d, "a"), j(d, "b"))
        call(j(d, "a"), j(d, "b"))  # <- call

    @row("FileNotFoundError", name=f"{op}_relative_twice_after_chdir")
    def twice_relative(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        os.chdir(d)
        touch("a")
        call("a", "b")
        call("a", "b")  # <- call

    @row("IsADirectoryError", name=f"{op}_file_onto_directory")
    def file_onto_dir(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        touch(j(d, "f"))
        mkdir(j(d, "D"))
        call(j(d, "f"), j(d, "D"))  # <- call

    @row("NotADirectoryError", name=f"{op}_directory_onto_file")
    def dir_onto_file(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        mkdir(j(d, "D"))
        touch(j(d, "f"))
        call(j(d, "D"), j(d, "f"))  # <- call

    @row("OSError", name=f"{op}_directory_onto_non_empty_directory", expect="conflict")
    def onto_non_empty(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        mkdir(j(d, "a"), "mine")
        mkdir(j(d, "b"), "theirs")
        call(j(d, "a"), j(d, "b"))  # <- call

    @row("ok", name=f"{op}_directory_onto_empty_directory")
    def onto_empty(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        mkdir(j(d, "a"), "mine")
        mkdir(j(d, "b"))
        return call(j(d, "a"), j(d, "b"))

    @row("OSError", name=f"{op}_directory_into_itself")
    def into_itself(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        mkdir(j(d, "a"))
        call(j(d, "a"), j(d, "a", "sub"))  # <- call

    @row("OSError", name=f"{op}_across_devices")
    def exdev(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        if not SHM:
            raise Skip("no /dev/shm here")
        other = j(SHM, os.path.basename(d))
        os.mkdir(other)
        if os.stat(other).st_dev == os.stat(d).st_dev:
            raise Skip(f"{SHM} and {d} are on the same device: no EXDEV to provoke")
        touch(j(other, "f"))
        call(j(other, "f"), j(d, "f"))  # <- call  (the test removes SHM afterwards)

    @row("ok", name=f"{op}_dir_fd")
    def dir_fd_ok(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        touch(j(d, "a"))
        fd = os.open(d, os.O_RDONLY)
        try:
            return call("a", "b", src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)

    @row("FileNotFoundError", name=f"{op}_dir_fd_source_missing_destination_present")
    def dir_fd_missing(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        touch(j(d, "there"))  # fresh, and would look like a peer's result if resolved against d
        os.chdir(d)  # the same names relative to the working directory too
        fd = os.open(d, os.O_RDONLY)
        try:
            call("gone", "there", src_dir_fd=fd, dst_dir_fd=fd)  # <- call
        finally:
            os.close(fd)

    @row("FileNotFoundError", name=f"{op}_dir_fd_then_path")
    def dir_fd_then_path(d: str, calls: Calls) -> Any:
        call = getattr(os, op)
        touch(j(d, "a"))
        fd = os.open(d, os.O_RDONLY)
        try:
            call("a", "b", src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)
        call(j(d, "a"), j(d, "b"))  # <- call


_rename_rows("rename")
_rename_rows("replace")


# --- main: path types (str, bytes, pathlib.Path, a user os.PathLike) -------------------------------------------


def _kind_rows(kind: str, wrap: Callable[[str], Any]) -> None:
    @row("ok", name=f"rename_{kind}")
    def rename_ok(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        return os.rename(wrap(j(d, "a")), wrap(j(d, "b")))

    @row("FileNotFoundError", name=f"rename_missing_{kind}")
    def rename_missing(d: str, calls: Calls) -> Any:
        os.rename(wrap(j(d, "a")), wrap(j(d, "b")))  # <- call

    @row("FileNotFoundError", name=f"replace_twice_{kind}")
    def replace_twice(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        os.replace(wrap(j(d, "a")), wrap(j(d, "b")))
        os.replace(wrap(j(d, "a")), wrap(j(d, "b")))  # <- call

    @row("ok", name=f"makedirs_{kind}")
    def makedirs_ok(d: str, calls: Calls) -> Any:
        return os.makedirs(wrap(j(d, "x", "y")))

    @row("FileExistsError", name=f"makedirs_file_in_the_way_{kind}")
    def makedirs_file(d: str, calls: Calls) -> Any:
        touch(j(d, "f"))
        os.makedirs(wrap(j(d, "f")))  # <- call

    @row("FileExistsError", name=f"makedirs_twice_{kind}")
    def makedirs_twice(d: str, calls: Calls) -> Any:
        os.makedirs(wrap(j(d, "x")))
        os.makedirs(wrap(j(d, "x")))  # <- call

    @row("ok", name=f"rmtree_{kind}")
    def rmtree_ok(d: str, calls: Calls) -> Any:
        mkdir(j(d, "t"), "f")
        return shutil.rmtree(wrap(j(d, "t")))

    @row("NotADirectoryError", name=f"rmtree_file_{kind}")
    def rmtree_file(d: str, calls: Calls) -> Any:
        touch(j(d, "f"))
        shutil.rmtree(wrap(j(d, "f")))  # <- call

    @row("FileNotFoundError", name=f"rmtree_twice_{kind}")
    def rmtree_twice(d: str, calls: Calls) -> Any:
        mkdir(j(d, "t"), "f")
        shutil.rmtree(wrap(j(d, "t")))
        shutil.rmtree(wrap(j(d, "t")))  # <- call


for _kind, _wrap in KINDS.items():
    _kind_rows(_kind, _wrap)


# --- main: rmtree --------------------------------------------------------------------------------------------


@row("NotADirectoryError")
def rmtree_regular_file(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    shutil.rmtree(j(d, "f"))  # <- call


@row("ok", handler=True)
def rmtree_regular_file_onerror(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    return shutil.rmtree(j(d, "f"), onerror=onerror(calls))


@row("OSError")
def rmtree_symlink_to_directory(d: str, calls: Calls) -> Any:
    os.symlink(mkdir(j(d, "target"), "f"), j(d, "link"))
    shutil.rmtree(j(d, "link"))  # <- call


@row("ok", handler=True)
def rmtree_symlink_to_directory_onerror(d: str, calls: Calls) -> Any:
    os.symlink(mkdir(j(d, "target"), "f"), j(d, "link"))
    return shutil.rmtree(j(d, "link"), False, onerror(calls))


@row("FileNotFoundError", expect="absorbed")
def rmtree_missing_parent_changed_during_job(d: str, calls: Calls) -> Any:
    # README deviation: a top path already gone is absorbed when its parent changed during the job.
    shutil.rmtree(j(d, "never"))  # <- call


@row("FileNotFoundError")
def rmtree_missing_parent_missing(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "nope", "never"))  # <- call


@row("FileNotFoundError")
def rmtree_twice(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    shutil.rmtree(j(d, "t"))
    shutil.rmtree(j(d, "t"))  # <- call


@row("ok", handler=True)
def rmtree_twice_onerror(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    shutil.rmtree(j(d, "t"))
    return shutil.rmtree(j(d, "t"), onerror=onerror(calls))


@row("FileNotFoundError")
def rmtree_twice_relative_after_chdir(d: str, calls: Calls) -> Any:
    os.chdir(d)
    mkdir("t", "f")
    shutil.rmtree("t")
    shutil.rmtree("t")  # <- call


@row("FileNotFoundError")
def rmtree_inside_a_tree_this_process_removed(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"))
    mkdir(j(d, "t", "sub"), "f")
    shutil.rmtree(j(d, "t"))
    shutil.rmtree(j(d, "t", "sub"))  # <- call


@row("ok")
def rmtree_ignore_errors_missing(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), ignore_errors=True)


@row("ok")
def rmtree_ignore_errors_file(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    return shutil.rmtree(j(d, "f"), True)


@row("ok")
def rmtree_dir_fd(d: str, calls: Calls) -> Any:
    needs_rmtree_dir_fd()
    mkdir(j(d, "t"), "f")
    fd = os.open(d, os.O_RDONLY)
    try:
        return shutil.rmtree("t", dir_fd=fd)
    finally:
        os.close(fd)


@row(None)
def rmtree_dir_fd_missing(d: str, calls: Calls) -> Any:
    # Python >= 3.11: FileNotFoundError; older: the standard library rejects the keyword (TypeError).
    fd = os.open(d, os.O_RDONLY)
    try:
        shutil.rmtree("gone", dir_fd=fd)  # <- call
    finally:
        os.close(fd)


@row("FileNotFoundError")
def rmtree_dir_fd_then_path(d: str, calls: Calls) -> Any:
    needs_rmtree_dir_fd()
    mkdir(j(d, "t"), "f")
    fd = os.open(d, os.O_RDONLY)
    try:
        shutil.rmtree("t", dir_fd=fd)
    finally:
        os.close(fd)
    shutil.rmtree(j(d, "t"))  # <- call


@row(None)
def rmtree_onexc(d: str, calls: Calls) -> Any:
    # Python >= 3.12: onexc is called like onerror; older: the standard library rejects the keyword.
    touch(j(d, "f"))
    return shutil.rmtree(j(d, "f"), onexc=onexc(calls))  # <- call


@row("TypeError")
def rmtree_extra_positional_argument(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    shutil.rmtree(j(d, "t"), False, None, "extra")  # <- call


@row("TypeError")
def rmtree_path_given_twice(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    shutil.rmtree(j(d, "t"), path=j(d, "t"))  # <- call


@row("TypeError")
def rmtree_onerror_given_twice(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    shutil.rmtree(j(d, "t"), False, onerror(calls), onerror=onerror(calls))  # <- call


@row("TypeError")
def rmtree_not_a_path(d: str, calls: Calls) -> Any:
    shutil.rmtree(3.5)  # <- call


# Up to Python 3.12 the standard rmtree hands lstat's TypeError to onerror ("ok", the handler called); the
# stack-based walk of 3.13+ catches only OSError, so the TypeError is raised. Either way: the same with fsguard.
@row(None)
def rmtree_not_a_path_onerror(d: str, calls: Calls) -> Any:
    return shutil.rmtree(None, onerror=onerror(calls))  # <- call


@row("ValueError")
def rmtree_nul_byte(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "a\0b"))  # <- call


@row("TypeError")
def makedirs_not_a_path(d: str, calls: Calls) -> Any:
    os.makedirs(3.5)  # <- call


@row("ValueError")
def rename_nul_byte(d: str, calls: Calls) -> Any:
    os.rename(j(d, "a\0b"), j(d, "c"))  # <- call


# --- stale: paths older than the job (prepared before the interpreter started; FSGUARD_FRESH_S=0) ---------


def _prepare_old_dir(d: str) -> None:
    mkdir(j(d, "old"), "f")


def _prepare_old_file(d: str) -> None:
    touch(j(d, "dst"))


def _prepare_old_parent(d: str) -> None:
    pass  # d itself: nothing is made or removed in it after this


@row("FileExistsError", group="stale", prepare=_prepare_old_dir)
def makedirs_directory_older_than_the_job(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "old"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_file)
def rename_destination_older_than_the_job(d: str, calls: Calls) -> Any:
    os.rename(j(d, "src"), j(d, "dst"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_file)
def replace_destination_older_than_the_job(d: str, calls: Calls) -> Any:
    os.replace(j(d, "src"), j(d, "dst"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_dir)
def rename_directory_destination_older_than_the_job(d: str, calls: Calls) -> Any:
    os.rename(j(d, "src"), j(d, "old"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_parent)
def rmtree_missing_parent_older_than_the_job(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "never"))  # <- call


@row("ok", group="stale", prepare=_prepare_old_parent, handler=True)
def rmtree_missing_parent_older_than_the_job_onerror(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), onerror=onerror(calls))


@row("FileNotFoundError", group="stale", prepare=_prepare_old_parent, handler=True)
def rmtree_missing_parent_older_than_the_job_onerror_raises(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "never"), onerror=onerror(calls, reraise=True))  # <- call


# --- nobody: EACCES / EPERM (prepared as root, acted as nobody) ------------------------------------------------

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


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def makedirs_without_write_permission(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "ro", "new"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def makedirs_nested_without_write_permission_exist_ok(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "ro", "new", "sub"), exist_ok=True)  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def rename_without_write_permission(d: str, calls: Calls) -> Any:
    os.rename(j(d, "ro", "a"), j(d, "ro", "b"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def replace_without_write_permission(d: str, calls: Calls) -> Any:
    os.replace(j(d, "ro", "a"), j(d, "ro", "b"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_sticky)
def rename_in_sticky_directory_eperm(d: str, calls: Calls) -> Any:
    os.rename(j(d, "sticky", "a"), j(d, "sticky", "b"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_sticky)
def replace_in_sticky_directory_eperm(d: str, calls: Calls) -> Any:
    os.replace(j(d, "sticky", "a"), j(d, "sticky", "b"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_read_only_subdir)
def rmtree_read_only_subdir(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "t"))  # <- call


@row("ok", group="nobody", prepare=_prepare_read_only_subdir, handler=True)
def rmtree_read_only_subdir_onerror(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "t"), onerror=onerror(calls))


@row("ok", group="nobody", prepare=_prepare_read_only_subdir, handler=True)
def rmtree_read_only_subdir_onexc(d: str, calls: Calls) -> Any:
    if not HAS_ONEXC:
        raise Skip(f"shutil.rmtree has no onexc on Python {sys.version_info[0]}.{sys.version_info[1]} (3.12+)")
    return shutil.rmtree(j(d, "t"), onexc=onexc(calls))


@row("ok", group="nobody", prepare=_prepare_unreadable_subdir, handler=True)
def rmtree_unlistable_subdir_onerror(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "t"), onerror=onerror(calls))


@row("PermissionError", group="nobody", prepare=_prepare_sticky)
def rmtree_in_sticky_directory_eperm(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "sticky", "x"))  # <- call


@row("ok", group="nobody", prepare=_prepare_sticky, handler=True)
def rmtree_in_sticky_directory_eperm_onerror(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "sticky", "x"), onerror=onerror(calls))


# --- the harness --------------------------------------------------------------------------------------------

BASE = ""
SHM = ""


def show(value: Any) -> str:
    """``repr`` with this run's roots replaced, so the two modes' outcomes compare equal."""
    text = repr(value)
    for root, label in ((BASE, "<base>"), (SHM, "<shm>")):
        if root:
            text = text.replace(root, label)
    return text


def describe(exc: BaseException, act: Callable[..., Any]) -> dict[str, Any]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__]
    # The line where the exception left the row's own function: the call under test, if all is well.
    last = next((f for f in reversed(frames) if f.name == act.__name__), None)
    return {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "errno": getattr(exc, "errno", None),
        "strerror": getattr(exc, "strerror", None),
        "filename": show(getattr(exc, "filename", None)),
        "filename_type": type(getattr(exc, "filename", None)).__name__,
        "filename2": show(getattr(exc, "filename2", None)),
        "filename2_type": type(getattr(exc, "filename2", None)).__name__,
        "args": show(exc.args),
        "str": show(str(exc)),
        "context": None if exc.__context__ is None else type(exc.__context__).__name__,
        "cause": None if exc.__cause__ is None else type(exc.__cause__).__name__,
        "suppress_context": exc.__suppress_context__,
        "worker_frames": [[f.name, f.lineno] for f in frames],
        "failing_line": SOURCE[last.lineno - 1].strip() if last and last.lineno else None,
    }


def snapshot(d: str) -> list[list[Any]]:
    """The tree under ``d``: relative path, kind, permission bits, file text or link target."""
    found: list[list[Any]] = []
    for top, dirs, files in os.walk(d, onerror=lambda e: found.append(["<walk error>", show(e)])):
        dirs.sort()
        for name in sorted(dirs + files):
            path = j(top, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, d)
            mode = oct(stat.S_IMODE(st.st_mode))
            if stat.S_ISLNK(st.st_mode):
                found.append([rel, "link", show(os.readlink(path))])
            elif stat.S_ISDIR(st.st_mode):
                found.append([rel, "dir", mode, st.st_uid])
            else:
                try:
                    with open(path) as f:
                        text: str | None = f.read()
                except OSError as error:
                    text = f"<unreadable: {error.strerror}>"
                found.append([rel, "file", mode, st.st_uid, text])
    return found


def drop_to_nobody() -> None:
    assert NOBODY is not None
    __import__("logging")  # fsguard imports it to write a record: the standard library may be root's alone
    if hasattr(os.makedirs, "__wrapped__"):  # fsguard's rules load at the first failure: this venv is root's alone
        __import__("fsguard.patching", fromlist=["load_policy"]).load_policy()
    os.setgroups([])
    os.setgid(NOBODY.pw_gid)
    os.setuid(NOBODY.pw_uid)


def run_row(item: Row, d: str) -> dict[str, Any]:
    calls: Calls = []
    cwd = os.getcwd()
    sys.stderr.write(f"parity-row: {item.name}\n")
    sys.stderr.flush()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            outcome: dict[str, Any] = {"ok": True, "result": show(item.act(d, calls))}
        except Skip as reason:
            return {"skip": str(reason)}
        except Exception as exc:
            outcome = {"ok": False, "exc": describe(exc, item.act)}
        finally:
            os.chdir(cwd)
    sys.stderr.flush()
    outcome["warnings"] = [[w.category.__name__, show(str(w.message)), w.filename == __file__] for w in warned]
    outcome["calls"] = calls
    outcome["state"] = snapshot(d)
    return outcome


def main(argv: list[str]) -> int:
    global BASE, SHM
    command, group, BASE = argv[0], argv[1], argv[2]
    SHM = argv[3] if len(argv) > 3 else ""
    rows = [r for r in ROWS.values() if r.group == group]
    if command == "prepare":
        for item in rows:
            os.mkdir(j(BASE, item.name))
            if item.prepare is not None:
                item.prepare(j(BASE, item.name))
        return 0
    if group != "stale":  # stale rows were prepared by an earlier process
        for item in rows:
            os.mkdir(j(BASE, item.name))
            if item.prepare is not None:
                item.prepare(j(BASE, item.name))
    if group == "nobody":
        drop_to_nobody()
    functions = {"makedirs": os.makedirs, "rename": os.rename, "replace": os.replace, "rmtree": shutil.rmtree}
    meta = {
        "patched": sorted(op for op, f in functions.items() if hasattr(f, "__wrapped__")),
        "uid": os.getuid(),
        "python": list(sys.version_info[:3]),
        "onexc": HAS_ONEXC,
    }
    results = {item.name: run_row(item, j(BASE, item.name)) for item in rows}
    sys.stdout.write(json.dumps({"meta": meta, "rows": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The bad-input table's ``shutil.rmtree`` rows (``onerror``/``onexc`` handlers, ``dir_fd``, bad arguments)."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from parity_table import (
    HAS_ONEXC,
    Calls,
    Skip,
    _prepare_old_parent,
    _prepare_read_only_subdir,
    _prepare_sticky,
    _prepare_unreadable_subdir,
    j,
    mkdir,
    needs_rmtree_dir_fd,
    onerror,
    onexc,
    row,
    touch,
)


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


@row("FileNotFoundError", group="stale", prepare=_prepare_old_parent)
def rmtree_missing_parent_older_than_the_job(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "never"))  # <- call


@row("ok", group="stale", prepare=_prepare_old_parent, handler=True)
def rmtree_missing_parent_older_than_the_job_onerror(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), onerror=onerror(calls))


@row("FileNotFoundError", group="stale", prepare=_prepare_old_parent, handler=True)
def rmtree_missing_parent_older_than_the_job_onerror_raises(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "never"), onerror=onerror(calls, reraise=True))  # <- call


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

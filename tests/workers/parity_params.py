"""The bad-input table's rows for each parameter of ``os.makedirs``, ``os.rename``/``os.replace`` and
``shutil.rmtree`` (issue 45: the standard call's contract, with and without fsguard, in a launched rank too).

The scenarios are those where fsguard's rules look hardest: the path a peer of the job could have made or removed
moments ago (the row's directory changed just now), with each parameter that changes what the standard call
does: ``exist_ok``, ``mode``, ``src_dir_fd``/``dst_dir_fd`` alone, ``ignore_errors``, ``onerror``, ``onexc``,
``dir_fd``. Setup steps use ``os.mkdir``/``os.symlink`` (unguarded in this table: a peer's doing).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import sys
from collections.abc import Callable
from typing import Any

from parity_table import HAS_ONEXC, Calls, Skip, j, mkdir, needs_rmtree_dir_fd, onerror, onexc, row, touch


def _mode(path: str) -> str:
    return oct(stat.S_IMODE(os.lstat(path).st_mode))


def _needs_onexc() -> None:
    if not HAS_ONEXC:
        raise Skip(f"shutil.rmtree has no onexc on Python {sys.version_info[0]}.{sys.version_info[1]} (3.12+)")


def _at(d: str, call: Callable[[int], Any]) -> Any:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return call(fd)
    finally:
        os.close(fd)


# --- makedirs: exist_ok, mode --------------------------------------------------------------------------------


@row("ok")
def makedirs_exist_ok_made_by_peer(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))
    return os.makedirs(j(d, "a"), exist_ok=True)


@row("ok")
def makedirs_exist_ok_mode_made_by_peer(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"), 0o755)
    os.makedirs(j(d, "a"), mode=0o700, exist_ok=True)
    return _mode(j(d, "a"))  # the standard makedirs leaves an existing directory's mode alone


@row("ok")
def makedirs_mode_applies_to_the_leaf_only(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "x", "y"), 0o700)
    return [_mode(j(d, "x")), _mode(j(d, "x", "y"))]


@row("FileExistsError")
def makedirs_exist_ok_mode_file_in_the_way(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.makedirs(j(d, "f"), 0o700, True)  # <- call


@row("FileExistsError")
def makedirs_exist_ok_false_given(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a"), exist_ok=False)
    os.makedirs(j(d, "a"), exist_ok=False)  # <- call


@row("ok")
def makedirs_exist_ok_symlink_to_directory_made_by_peer(d: str, calls: Calls) -> Any:
    os.symlink(mkdir(j(d, "target")), j(d, "link"))
    return os.makedirs(j(d, "link"), exist_ok=True)


@row("TypeError")
def makedirs_mode_not_an_int(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a"), mode="0o700")  # type: ignore[arg-type]  # <- call


@row("TypeError")
def makedirs_unknown_keyword(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a"), exists_ok=True)  # type: ignore[call-arg]  # <- call


# --- rename / replace: src_dir_fd, dst_dir_fd alone ----------------------------------------------------------


def _rename_rows(op: str) -> None:
    call = getattr(os, op)

    @row("FileNotFoundError", name=f"{op}_src_dir_fd_source_missing_destination_present")
    def src_dir_fd_only(d: str, calls: Calls) -> Any:
        touch(j(d, "there"))  # fresh: would look like a peer's result
        _at(d, lambda fd: call("gone", j(d, "there"), src_dir_fd=fd))  # <- call

    @row("FileNotFoundError", name=f"{op}_dst_dir_fd_source_missing_destination_present")
    def dst_dir_fd_only(d: str, calls: Calls) -> Any:
        touch(j(d, "there"))
        _at(d, lambda fd: call(j(d, "gone"), "there", dst_dir_fd=fd))  # <- call

    @row("ok", name=f"{op}_src_dir_fd_only")
    def src_dir_fd_ok(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        return _at(d, lambda fd: call("a", j(d, "b"), src_dir_fd=fd))

    @row("ok", name=f"{op}_dst_dir_fd_only")
    def dst_dir_fd_ok(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        return _at(d, lambda fd: call(j(d, "a"), "b", dst_dir_fd=fd))

    @row("FileNotFoundError", name=f"{op}_dir_fd_none_twice")
    def dir_fd_none(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        call(j(d, "a"), j(d, "b"), src_dir_fd=None, dst_dir_fd=None)
        call(j(d, "a"), j(d, "b"), src_dir_fd=None, dst_dir_fd=None)  # <- call

    @row("TypeError", name=f"{op}_dir_fd_not_an_int")
    def dir_fd_bad(d: str, calls: Calls) -> Any:
        call(j(d, "a"), j(d, "b"), src_dir_fd="3")  # <- call


_rename_rows("rename")
_rename_rows("replace")


# --- rmtree: ignore_errors, onerror, onexc, dir_fd, of a top missing from a directory changed moments ago ------
# (issue 45: in a launched rank the standard rmtree's contract must hold: the handler sees what it would show
# it, and nothing is raised that the standard rmtree would not raise; where fsguard would have absorbed the
# missing top, the caller's handler decides, with a deferred record.)


@row("ok")
def rmtree_missing_ignore_errors_changed_during_job(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), ignore_errors=True)


@row("ok", handler=True, expect="deferred")
def rmtree_missing_onerror_changed_during_job(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), onerror=onerror(calls))


@row("ok", handler=True, expect="deferred")
def rmtree_missing_onerror_positional_changed_during_job(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), False, onerror(calls))


@row("ok", handler=True, expect="deferred")
def rmtree_missing_onexc_changed_during_job(d: str, calls: Calls) -> Any:
    _needs_onexc()
    return shutil.rmtree(j(d, "never"), onexc=onexc(calls))


@row("FileNotFoundError", handler=True)
def rmtree_missing_onerror_reraises_changed_during_job(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "never"), onerror=onerror(calls, reraise=True))  # <- call


@row("ok", handler=True, expect="deferred")
def rmtree_missing_onerror_under_a_handler(d: str, calls: Calls) -> Any:
    try:
        return shutil.rmtree(j(d, "never"), onerror=onerror(calls))
    except Exception as error:
        return f"caught {type(error).__name__}"


@row("ok", handler=True)
def rmtree_missing_onerror_in_a_removed_parent(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    shutil.rmtree(j(d, "t"))
    return shutil.rmtree(j(d, "t", "sub"), onerror=onerror(calls))


@row("ok")
def rmtree_missing_dir_fd_ignore_errors(d: str, calls: Calls) -> Any:
    needs_rmtree_dir_fd()
    return _at(d, lambda fd: shutil.rmtree("never", ignore_errors=True, dir_fd=fd))


@row("ok", handler=True)
def rmtree_missing_dir_fd_onerror(d: str, calls: Calls) -> Any:
    needs_rmtree_dir_fd()
    return _at(d, lambda fd: shutil.rmtree("never", onerror=onerror(calls), dir_fd=fd))


@row("ok", handler=True)
def rmtree_file_onexc_and_ignore_errors_false(d: str, calls: Calls) -> Any:
    _needs_onexc()
    return shutil.rmtree(touch(j(d, "f")), ignore_errors=False, onexc=onexc(calls))


@row("ok")
def rmtree_file_ignore_errors_with_onerror(d: str, calls: Calls) -> Any:
    # ignore_errors wins: the handler is never called.
    return shutil.rmtree(touch(j(d, "f")), True, onerror(calls))


@row("ok", handler=True)
def rmtree_onexc_and_onerror(d: str, calls: Calls) -> Any:
    # 3.12+: onexc wins, onerror is never called.
    _needs_onexc()
    return shutil.rmtree(touch(j(d, "f")), onerror=onerror(calls, reraise=True), onexc=onexc(calls))


@row("ok", handler=True)
def rmtree_symlink_to_directory_onexc(d: str, calls: Calls) -> Any:
    _needs_onexc()
    os.symlink(mkdir(j(d, "target"), "f"), j(d, "link"))
    return shutil.rmtree(j(d, "link"), onexc=onexc(calls))


# --- the arguments by keyword, where the rules look (a peer's result moments ago) ------------------------------


@row("FileExistsError", expect="absorbed")
def makedirs_keywords_made_by_peer(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))  # unguarded: as a peer of this job would, moments ago
    os.makedirs(name=j(d, "a"), mode=0o777, exist_ok=False)  # <- call


@row("FileExistsError")
def makedirs_keywords_file_in_the_way(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.makedirs(name=j(d, "f"), exist_ok=True)  # <- call


@row("FileNotFoundError", expect="absorbed")
def rmtree_keywords_missing_parent_changed_during_job(d: str, calls: Calls) -> Any:
    shutil.rmtree(path=j(d, "never"), ignore_errors=False)  # <- call


@row("ok")
def rmtree_keywords(d: str, calls: Calls) -> Any:
    mkdir(j(d, "t"), "f")
    return shutil.rmtree(path=j(d, "t"), ignore_errors=False, onerror=None)


def _rename_keyword_rows(op: str) -> None:
    call = getattr(os, op)

    @row("FileNotFoundError", name=f"{op}_keywords_twice")
    def twice(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        call(src=j(d, "a"), dst=j(d, "b"))
        call(src=j(d, "a"), dst=j(d, "b"))  # <- call

    @row("FileNotFoundError", name=f"{op}_source_missing_destination_made_by_peer", expect="absorbed")
    def made_by_peer(d: str, calls: Calls) -> Any:
        touch(j(d, "there"))  # a peer's result moments ago (a peer renamed its copy onto it)
        call(j(d, "gone"), j(d, "there"))  # <- call

    @row("FileNotFoundError", name=f"{op}_keywords_source_missing_destination_made_by_peer", expect="absorbed")
    def keywords_made_by_peer(d: str, calls: Calls) -> Any:
        touch(j(d, "there"))
        call(src=j(d, "gone"), dst=j(d, "there"), src_dir_fd=None, dst_dir_fd=None)  # <- call


_rename_keyword_rows("rename")
_rename_keyword_rows("replace")


# --- flags read for their truth, as the standard functions read them ------------------------------------------


@row("ok")
def rmtree_missing_ignore_errors_truthy_int(d: str, calls: Calls) -> Any:
    return shutil.rmtree(j(d, "never"), ignore_errors=1)


@row("NotADirectoryError")
def rmtree_file_ignore_errors_falsy_string(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    shutil.rmtree(j(d, "f"), "", None)  # <- call


@row("ok")
def makedirs_exist_ok_truthy_string_made_by_peer(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))
    return os.makedirs(j(d, "a"), 0o777, "yes")


@row("FileExistsError")
def makedirs_exist_ok_falsy_int_twice(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a"), exist_ok=0)
    os.makedirs(j(d, "a"), exist_ok=0)  # <- call


@row("ok")
def path_rename_returns_the_target(d: str, calls: Calls) -> Any:
    touch(j(d, "a"))
    return pathlib.Path(d, "a").rename(j(d, "b"))


@row("FileNotFoundError")
def path_replace_twice(d: str, calls: Calls) -> Any:
    touch(j(d, "a"))
    pathlib.Path(d, "a").replace(j(d, "b"))
    pathlib.Path(d, "a").replace(j(d, "b"))  # <- call


# --- a rename onto its own source -----------------------------------------------------------------------------


def _onto_itself_rows(op: str) -> None:
    call = getattr(os, op)

    @row("ok", name=f"{op}_onto_itself")
    def onto_itself(d: str, calls: Calls) -> Any:
        return call(touch(j(d, "a")), j(d, "a"))

    @row("FileNotFoundError", name=f"{op}_missing_onto_itself")
    def missing_onto_itself(d: str, calls: Calls) -> Any:
        call(j(d, "a"), j(d, "a"))  # <- call

    @row("ok", name=f"{op}_onto_a_hard_link_of_itself")
    def onto_a_hard_link(d: str, calls: Calls) -> Any:
        os.link(touch(j(d, "a")), j(d, "b"))
        call(j(d, "a"), j(d, "b"))  # the standard rename does nothing: both names stay
        return sorted(os.listdir(d))


_onto_itself_rows("rename")
_onto_itself_rows("replace")


# --- spellings the kernel reads more strictly than a normalised path --------------------------------------------


def _slash_rows(op: str) -> None:
    call = getattr(os, op)

    @row("FileNotFoundError", name=f"{op}_directory_source_missing_file_destination_made_by_peer")
    def slash_onto_file(d: str, calls: Calls) -> Any:
        # The trailing slashes name directories: no peer's identical call can have left a file there.
        touch(j(d, "there"))
        call(j(d, "gone") + os.sep, j(d, "there") + os.sep)  # <- call

    @row("OSError", name=f"{op}_name_too_long")
    def too_long(d: str, calls: Calls) -> Any:
        touch(j(d, "there"))
        call(j(d, "x" * 300), j(d, "there"))  # <- call

    @row("OSError", name=f"{op}_through_a_symlink_loop")
    def loop(d: str, calls: Calls) -> Any:
        os.symlink("loop", j(d, "loop"))
        touch(j(d, "there"))
        call(j(d, "loop", "a"), j(d, "there"))  # <- call


_slash_rows("rename")
_slash_rows("replace")


@row("FileExistsError", expect="absorbed")
def makedirs_trailing_slash_made_by_peer(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))
    os.makedirs(j(d, "a") + os.sep)  # <- call


@row("OSError")
def rmtree_name_too_long(d: str, calls: Calls) -> Any:
    shutil.rmtree(j(d, "x" * 300))  # <- call

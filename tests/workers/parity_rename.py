"""The bad-input table's ``os.rename`` and ``os.replace`` rows (one set of rows, made for each)."""

from __future__ import annotations

import os
from typing import Any

import parity_table as table
from parity_table import (
    Calls,
    Skip,
    _prepare_old_dir,
    _prepare_old_file,
    _prepare_root_dir,
    _prepare_sticky,
    j,
    mkdir,
    row,
    touch,
)


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
        if not table.SHM:  # set by the runner: read it now, not at import
            raise Skip("no /dev/shm here")
        other = j(table.SHM, os.path.basename(d))
        os.mkdir(other)
        if os.stat(other).st_dev == os.stat(d).st_dev:
            raise Skip(f"{table.SHM} and {d} are on the same device: no EXDEV to provoke")
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


@row("ValueError")
def rename_nul_byte(d: str, calls: Calls) -> Any:
    os.rename(j(d, "a\0b"), j(d, "c"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_file)
def rename_destination_older_than_the_job(d: str, calls: Calls) -> Any:
    os.rename(j(d, "src"), j(d, "dst"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_file)
def replace_destination_older_than_the_job(d: str, calls: Calls) -> Any:
    os.replace(j(d, "src"), j(d, "dst"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_old_dir)
def rename_directory_destination_older_than_the_job(d: str, calls: Calls) -> Any:
    os.rename(j(d, "src"), j(d, "old"))  # <- call


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

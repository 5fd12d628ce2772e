"""The bad-input table of the newer guarded operations: ``remove``/``unlink``, ``rmdir``, ``mkdir``, ``symlink``,
``link``.

Run by ``tests/test_parity_family.py`` exactly as ``parity_cases.py`` is run by ``tests/test_parity.py``
(``prepare``/``run GROUP BASE [SHM]``), with the same harness (rows, groups, snapshots, the ``# <- call``
mark); only the rows differ. Setup steps use ``posix.*`` (the unwrapped functions: ``os.mkdir`` and
``os.symlink`` are guarded now, and fsguard would remember them as this process's own doing) unless a row
means the setup to be this process's own guarded call.
"""

from __future__ import annotations

import json
import os
import pathlib
import posix
import sys
import warnings
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_cases as base  # the shared harness, next to this file

Calls = base.Calls
Row = base.Row
Skip = base.Skip
KINDS = base.KINDS
CALL_MARK = base.CALL_MARK
NOBODY = base.NOBODY
j, touch = base.j, base.touch
PATCHED = ["link", "mkdir", "remove", "rmdir", "rmtree", "symlink", "unlink"]
# In a launched rank, a name missing from a directory that changed moments ago, during the job (here: the row's
# directory, just made), is absorbed: a peer may have removed it, and a missing name leaves no trace of whether it
# ever existed (README, docs/decides/remove.md: a documented deviation). Outside a job (no peers) it is raised.
IN_A_JOB = "absorbed"

ROWS: dict[str, Row] = {}


def row(
    outcome: str | None,
    *,
    name: str | None = None,
    group: str = "main",
    expect: str = "same",
    prepare: Callable[[str], None] | None = None,
    launched: str | None = None,
) -> Callable[[Callable[[str, Calls], Any]], Callable[[str, Calls], Any]]:
    def register(act: Callable[[str, Calls], Any]) -> Callable[[str, Calls], Any]:
        key = name or act.__name__
        assert key not in ROWS, key
        ROWS[key] = Row(key, act, group, outcome, expect, False, prepare, None, launched)
        return act

    return register


def mkdir(path: str) -> str:
    posix.mkdir(path)  # unguarded: as a peer would, or as setup fsguard must not remember
    return path


def dir_fd(d: str) -> int:
    return os.open(d, os.O_RDONLY | os.O_DIRECTORY)  # left open: the worker process is short-lived


# --- remove / unlink ----------------------------------------------------------------------------------------


@row("FileNotFoundError", launched=IN_A_JOB)
def remove_parent_missing(d: str, calls: Calls) -> Any:
    os.remove(j(d, "nope", "never"))  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def unlink_parent_missing(d: str, calls: Calls) -> Any:
    os.unlink(j(d, "nope", "never"))  # <- call


@row("FileNotFoundError")
def remove_removed_by_itself(d: str, calls: Calls) -> Any:
    os.remove(touch(j(d, "f")))
    os.remove(j(d, "f"))  # <- call


@row("FileNotFoundError")
def unlink_renamed_away_by_itself(d: str, calls: Calls) -> Any:
    os.rename(touch(j(d, "f")), j(d, "g"))
    os.unlink(j(d, "f"))  # <- call


@row("FileNotFoundError")
def remove_inside_removed_tree(d: str, calls: Calls) -> Any:
    touch(j(mkdir(j(d, "t")), "f"))
    import shutil

    shutil.rmtree(j(d, "t"))
    os.remove(j(d, "t", "f"))  # <- call


@row("IsADirectoryError")
def remove_a_directory(d: str, calls: Calls) -> Any:
    os.remove(mkdir(j(d, "sub")))  # <- call


@row("NotADirectoryError")
def remove_file_in_an_intermediate(d: str, calls: Calls) -> Any:
    os.remove(j(touch(j(d, "f")), "x"))  # <- call


@row("FileNotFoundError")
def remove_empty_path(d: str, calls: Calls) -> Any:
    os.chdir(d)
    os.remove("")  # <- call


@row("FileNotFoundError")
def remove_dir_fd_missing(d: str, calls: Calls) -> Any:
    os.remove("never", dir_fd=dir_fd(d))  # <- call


@row("OSError")
def remove_bad_dir_fd(d: str, calls: Calls) -> Any:
    os.remove("never", dir_fd=987654)  # <- call


@row("TypeError")
def remove_none(d: str, calls: Calls) -> Any:
    os.remove(None)  # type: ignore[arg-type]  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def path_unlink_parent_missing(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "nope", "never").unlink()  # <- call


@row("ok")
def path_unlink_missing_ok(d: str, calls: Calls) -> Any:
    return pathlib.Path(d, "nope", "never").unlink(missing_ok=True)


@row("FileNotFoundError", launched=IN_A_JOB)
def remove_never_existed_outside_a_job(d: str, calls: Calls) -> Any:
    # d changed moments ago, but FSGUARD=force without a launcher has no peers: never absorbed (inside a job
    # this is a README deviation, tests/test_family_races.py).
    os.remove(j(d, "never"))  # <- call


@row("FileNotFoundError")
def remove_after_own_unguarded_rmdir(d: str, calls: Calls) -> Any:
    # CPython's test_pathlib.test_rmdir: made by this process, removed by its own os.rmdir.
    os.mkdir(j(d, "a"))
    os.rmdir(j(d, "a"))
    pathlib.Path(d, "a").unlink()  # <- call


for _kind, _convert in KINDS.items():

    def _parent_missing(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.unlink(convert(j(d, "nope", "never")))  # <- call

    def _removed_by_itself(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.remove(convert(touch(j(d, "f"))))
        os.remove(convert(j(d, "f")))  # <- call

    row("FileNotFoundError", name=f"remove_parent_missing_{_kind}", launched=IN_A_JOB)(_parent_missing)
    row("FileNotFoundError", name=f"remove_removed_by_itself_{_kind}")(_removed_by_itself)


# --- rmdir --------------------------------------------------------------------------------------------------


@row("FileNotFoundError", launched=IN_A_JOB)
def rmdir_parent_missing(d: str, calls: Calls) -> Any:
    os.rmdir(j(d, "nope", "never"))  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def rmdir_never_existed_outside_a_job(d: str, calls: Calls) -> Any:
    mkdir(j(d, "other"))  # d changed moments ago; no peers without a launcher: never absorbed
    os.rmdir(j(d, "never"))  # <- call


@row("FileNotFoundError")
def rmdir_removed_by_itself(d: str, calls: Calls) -> Any:
    os.rmdir(mkdir(j(d, "a")))
    os.rmdir(j(d, "a"))  # <- call


@row("OSError")
def rmdir_not_empty(d: str, calls: Calls) -> Any:
    touch(j(mkdir(j(d, "full")), "f"))
    os.rmdir(j(d, "full"))  # <- call


@row("NotADirectoryError")
def rmdir_a_file(d: str, calls: Calls) -> Any:
    os.rmdir(touch(j(d, "f")))  # <- call


@row("NotADirectoryError")
def rmdir_symlink_to_directory(d: str, calls: Calls) -> Any:
    posix.symlink(mkdir(j(d, "target")), j(d, "link"))
    os.rmdir(j(d, "link"))  # <- call


@row("FileNotFoundError")
def rmdir_empty_path(d: str, calls: Calls) -> Any:
    os.chdir(d)
    os.rmdir("")  # <- call


@row("FileNotFoundError")
def rmdir_dir_fd_missing(d: str, calls: Calls) -> Any:
    os.rmdir("never", dir_fd=dir_fd(d))  # <- call


@row("ok")
def rmdir_dir_fd(d: str, calls: Calls) -> Any:
    mkdir(j(d, "gone"))
    return os.rmdir("gone", dir_fd=dir_fd(d))


@row("TypeError")
def rmdir_none(d: str, calls: Calls) -> Any:
    os.rmdir(None)  # type: ignore[arg-type]  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def path_rmdir_missing(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "never").rmdir()  # <- call


@row("ok")
def removedirs_stops_at_a_non_empty_parent(d: str, calls: Calls) -> Any:
    touch(j(d, "keep"))
    return os.removedirs(j(mkdir(j(mkdir(j(d, "x")), "y"))))


for _kind, _convert in KINDS.items():

    def _rmdir_parent_missing(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.rmdir(convert(j(d, "nope", "never")))  # <- call

    def _rmdir_made(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        return os.rmdir(convert(mkdir(j(d, "made"))))

    row("FileNotFoundError", name=f"rmdir_parent_missing_{_kind}", launched=IN_A_JOB)(_rmdir_parent_missing)
    row("ok", name=f"rmdir_made_{_kind}")(_rmdir_made)


# --- mkdir --------------------------------------------------------------------------------------------------


@row("FileExistsError")
def mkdir_file_in_the_way(d: str, calls: Calls) -> Any:
    os.mkdir(touch(j(d, "f")))  # <- call


@row("FileExistsError")
def mkdir_symlink_to_directory_in_the_way(d: str, calls: Calls) -> Any:
    posix.symlink(mkdir(j(d, "target")), j(d, "link"))
    os.mkdir(j(d, "link"))  # <- call


@row("FileExistsError")
def mkdir_dangling_symlink_in_the_way(d: str, calls: Calls) -> Any:
    posix.symlink(j(d, "nowhere"), j(d, "link"))
    os.mkdir(j(d, "link"))  # <- call


@row("FileExistsError")
def mkdir_twice(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))
    os.mkdir(j(d, "a"))  # <- call


@row("FileExistsError")
def mkdir_after_own_makedirs(d: str, calls: Calls) -> Any:
    os.makedirs(j(d, "a", "b"))
    os.mkdir(j(d, "a"))  # <- call


@row("FileNotFoundError")
def mkdir_parent_missing(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "nope", "a"))  # <- call


@row("NotADirectoryError")
def mkdir_file_in_an_intermediate(d: str, calls: Calls) -> Any:
    os.mkdir(j(touch(j(d, "f")), "a"))  # <- call


@row("FileExistsError")
def mkdir_dir_fd_made_by_peer(d: str, calls: Calls) -> Any:
    mkdir(j(d, "a"))
    os.mkdir("a", dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def path_mkdir_twice_parents(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "a", "b").mkdir(parents=True)
    pathlib.Path(d, "a", "b").mkdir(parents=True)  # <- call


@row("FileExistsError")
def path_mkdir_file_in_the_way_exist_ok(d: str, calls: Calls) -> Any:
    pathlib.Path(touch(j(d, "f"))).mkdir(parents=True, exist_ok=True)  # <- call


@row("ok")
def path_mkdir_twice_exist_ok(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "a").mkdir()
    return pathlib.Path(d, "a").mkdir(exist_ok=True)


@row("FileExistsError")
def makedirs_after_own_mkdir(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"))
    os.makedirs(j(d, "a"))  # <- call


@row("FileExistsError", expect="absorbed")
def mkdir_made_by_peer(d: str, calls: Calls) -> Any:
    mkdir(j(d, "a"))  # unguarded: as a peer of this job would, moments ago
    os.mkdir(j(d, "a"))  # <- call


@row("FileExistsError", expect="absorbed")
def mkdir_path_parents_made_by_peer(d: str, calls: Calls) -> Any:
    mkdir(j(d, "a"))
    pathlib.Path(d, "a").mkdir(parents=True)  # <- call


for _kind, _convert in KINDS.items():

    def _mkdir_file(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.mkdir(convert(touch(j(d, "f"))))  # <- call

    def _mkdir_twice(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.mkdir(convert(j(d, "a")))
        os.mkdir(convert(j(d, "a")))  # <- call

    row("FileExistsError", name=f"mkdir_file_in_the_way_{_kind}")(_mkdir_file)
    row("FileExistsError", name=f"mkdir_twice_{_kind}")(_mkdir_twice)


# --- symlink ------------------------------------------------------------------------------------------------


@row("FileExistsError")
def symlink_points_elsewhere(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink("two", j(d, "latest"))  # <- call


@row("FileExistsError")
def symlink_same_target_spelt_differently(d: str, calls: Calls) -> Any:
    posix.symlink("./one", j(d, "latest"))
    os.symlink("one", j(d, "latest"))  # <- call


@row("FileExistsError")
def symlink_file_in_the_way(d: str, calls: Calls) -> Any:
    os.symlink("one", touch(j(d, "latest")))  # <- call


@row("FileExistsError")
def symlink_directory_in_the_way(d: str, calls: Calls) -> Any:
    os.symlink("one", mkdir(j(d, "latest")))  # <- call


@row("FileExistsError")
def symlink_twice(d: str, calls: Calls) -> Any:
    os.symlink("one", j(d, "latest"))
    os.symlink("one", j(d, "latest"))  # <- call


@row("FileNotFoundError")
def symlink_parent_missing(d: str, calls: Calls) -> Any:
    os.symlink("one", j(d, "nope", "latest"))  # <- call


@row("FileExistsError")
def symlink_dir_fd_identical(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink("one", "latest", dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def symlink_target_is_directory_elsewhere(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink("two", j(d, "latest"), target_is_directory=True)  # <- call


@row("FileExistsError")
def path_symlink_to_twice(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "latest").symlink_to("one")
    pathlib.Path(d, "latest").symlink_to("one")  # <- call


@row("FileExistsError")
def path_symlink_to_elsewhere(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    pathlib.Path(d, "latest").symlink_to("two")  # <- call


@row("FileExistsError", expect="absorbed")
def symlink_identical_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))  # unguarded: as a peer of this job would, moments ago
    os.symlink("one", j(d, "latest"))  # <- call


for _kind, _convert in KINDS.items():

    def _symlink_elsewhere(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        posix.symlink("one", j(d, "latest"))
        os.symlink(convert("two"), convert(j(d, "latest")))  # <- call

    def _symlink_twice(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.symlink(convert("one"), convert(j(d, "latest")))
        os.symlink(convert("one"), convert(j(d, "latest")))  # <- call

    row("FileExistsError", name=f"symlink_points_elsewhere_{_kind}")(_symlink_elsewhere)
    row("FileExistsError", name=f"symlink_twice_{_kind}")(_symlink_twice)


# --- link ---------------------------------------------------------------------------------------------------


@row("FileExistsError")
def link_other_inode(d: str, calls: Calls) -> Any:
    os.link(touch(j(d, "last")), touch(j(d, "best")))  # <- call


@row("FileExistsError")
def link_directory_in_the_way(d: str, calls: Calls) -> Any:
    os.link(touch(j(d, "last")), mkdir(j(d, "best")))  # <- call


@row("FileExistsError")
def link_twice(d: str, calls: Calls) -> Any:
    os.link(touch(j(d, "last")), j(d, "best"))
    os.link(j(d, "last"), j(d, "best"))  # <- call


@row("FileNotFoundError")
def link_source_missing(d: str, calls: Calls) -> Any:
    os.link(j(d, "last"), j(d, "best"))  # <- call


@row("FileNotFoundError")
def link_destination_parent_missing(d: str, calls: Calls) -> Any:
    os.link(touch(j(d, "last")), j(d, "nope", "best"))  # <- call


@row("PermissionError")
def link_a_directory(d: str, calls: Calls) -> Any:
    os.link(mkdir(j(d, "last")), j(d, "best"))  # <- call


@row("FileExistsError")
def link_no_follow_symlink_source(d: str, calls: Calls) -> Any:
    # best is the target file's inode, but the call links the symlink itself: another inode.
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    posix.link(j(d, "file"), j(d, "best"))
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=False)  # <- call


@row("FileExistsError")
def link_src_dir_fd_same_inode(d: str, calls: Calls) -> Any:
    posix.link(touch(j(d, "last")), j(d, "best"))
    os.link("last", j(d, "best"), src_dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def link_dst_dir_fd_same_inode(d: str, calls: Calls) -> Any:
    posix.link(touch(j(d, "last")), j(d, "best"))
    os.link(j(d, "last"), "best", dst_dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def path_hardlink_to_other_inode(d: str, calls: Calls) -> Any:
    pathlib.Path(touch(j(d, "best"))).hardlink_to(touch(j(d, "last")))  # <- call


@row("FileExistsError", expect="absorbed")
def link_same_inode_made_by_peer(d: str, calls: Calls) -> Any:
    posix.link(touch(j(d, "last")), j(d, "best"))  # unguarded: as a peer of this job would, moments ago
    os.link(j(d, "last"), j(d, "best"))  # <- call


@row("FileExistsError", expect="absorbed")
def link_through_symlink_same_inode_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    posix.link(j(d, "file"), j(d, "best"))
    os.link(j(d, "last"), j(d, "best"))  # <- call


for _kind, _convert in KINDS.items():

    def _link_other(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.link(convert(touch(j(d, "last"))), convert(touch(j(d, "best"))))  # <- call

    def _link_twice(d: str, calls: Calls, convert: Callable[[str], Any] = _convert) -> Any:
        os.link(convert(touch(j(d, "last"))), convert(j(d, "best")))
        os.link(convert(j(d, "last")), convert(j(d, "best")))  # <- call

    row("FileExistsError", name=f"link_other_inode_{_kind}")(_link_other)
    row("FileExistsError", name=f"link_twice_{_kind}")(_link_twice)


# --- each parameter of mkdir, remove/unlink, rmdir, symlink, link (issue 45: the standard call's contract) --------


def _mode(path: str) -> str:
    return oct(os.lstat(path).st_mode & 0o7777)


@row("ok")
def mkdir_mode(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"), 0o700)
    return _mode(j(d, "a"))


@row("ok")
def mkdir_dir_fd_mode(d: str, calls: Calls) -> Any:
    os.mkdir("a", 0o711, dir_fd=dir_fd(d))
    return _mode(j(d, "a"))


@row("FileExistsError")
def mkdir_dir_fd_twice(d: str, calls: Calls) -> Any:
    os.mkdir("a", dir_fd=dir_fd(d))
    os.mkdir("a", dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def mkdir_dir_fd_mode_made_by_peer(d: str, calls: Calls) -> Any:
    mkdir(j(d, "a"))
    os.mkdir("a", 0o700, dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def mkdir_dir_fd_none_twice(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"), dir_fd=None)
    os.mkdir(j(d, "a"), dir_fd=None)  # <- call


@row("TypeError")
def mkdir_mode_not_an_int(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "a"), "0o700")  # type: ignore[arg-type]  # <- call


@row("ok")
def unlink_dir_fd(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    return os.unlink("f", dir_fd=dir_fd(d))


@row("FileNotFoundError")
def unlink_dir_fd_missing(d: str, calls: Calls) -> Any:
    os.unlink("never", dir_fd=dir_fd(d))  # <- call


@row("FileNotFoundError")
def remove_dir_fd_removed_by_itself(d: str, calls: Calls) -> Any:
    touch(j(d, "f"))
    os.remove("f", dir_fd=dir_fd(d))
    os.remove("f", dir_fd=dir_fd(d))  # <- call


@row("FileNotFoundError")
def remove_dir_fd_none_removed_by_itself(d: str, calls: Calls) -> Any:
    os.remove(touch(j(d, "f")), dir_fd=None)
    os.remove(j(d, "f"), dir_fd=None)  # <- call


@row("IsADirectoryError")
def unlink_dir_fd_a_directory(d: str, calls: Calls) -> Any:
    os.unlink(mkdir(j(d, "sub")), dir_fd=dir_fd(d))  # <- call


@row("OSError")
def rmdir_dir_fd_not_empty(d: str, calls: Calls) -> Any:
    touch(j(mkdir(j(d, "full")), "f"))
    os.rmdir("full", dir_fd=dir_fd(d))  # <- call


@row("FileNotFoundError")
def rmdir_dir_fd_removed_by_itself(d: str, calls: Calls) -> Any:
    mkdir(j(d, "a"))
    os.rmdir("a", dir_fd=dir_fd(d))
    os.rmdir("a", dir_fd=dir_fd(d))  # <- call


@row("ok")
def symlink_dir_fd(d: str, calls: Calls) -> Any:
    os.symlink("one", "latest", dir_fd=dir_fd(d))
    return os.readlink(j(d, "latest"))


@row("ok")
def symlink_target_is_directory(d: str, calls: Calls) -> Any:
    return os.symlink(mkdir(j(d, "target")), j(d, "latest"), target_is_directory=True)


@row("FileExistsError")
def symlink_target_is_directory_twice(d: str, calls: Calls) -> Any:
    os.symlink("one", j(d, "latest"), True)
    os.symlink("one", j(d, "latest"), True)  # <- call


@row("FileExistsError")
def symlink_target_is_directory_dir_fd_identical(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink("one", "latest", target_is_directory=True, dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def symlink_dir_fd_twice(d: str, calls: Calls) -> Any:
    os.symlink("one", "latest", dir_fd=dir_fd(d))
    os.symlink("one", "latest", dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def symlink_target_is_directory_file_in_the_way(d: str, calls: Calls) -> Any:
    os.symlink("one", touch(j(d, "latest")), target_is_directory=True)  # <- call


@row("FileExistsError", expect="absorbed")
def symlink_identical_target_is_directory_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))  # unguarded: as a peer of this job would, moments ago
    os.symlink("one", j(d, "latest"), target_is_directory=True)  # <- call


@row("ok")
def link_dir_fds(d: str, calls: Calls) -> Any:
    touch(j(d, "last"))
    return os.link("last", "best", src_dir_fd=dir_fd(d), dst_dir_fd=dir_fd(d))


@row("FileExistsError")
def link_both_dir_fds_same_inode(d: str, calls: Calls) -> Any:
    posix.link(touch(j(d, "last")), j(d, "best"))
    os.link("last", "best", src_dir_fd=dir_fd(d), dst_dir_fd=dir_fd(d))  # <- call


@row("FileExistsError")
def link_dir_fds_twice(d: str, calls: Calls) -> Any:
    touch(j(d, "last"))
    os.link("last", "best", src_dir_fd=dir_fd(d), dst_dir_fd=dir_fd(d))
    os.link("last", "best", src_dir_fd=dir_fd(d), dst_dir_fd=dir_fd(d))  # <- call


@row("ok")
def link_no_follow_symlinks(d: str, calls: Calls) -> Any:
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=False)
    return os.readlink(j(d, "best")) == j(d, "file")


@row("FileExistsError")
def link_no_follow_symlinks_twice(d: str, calls: Calls) -> Any:
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=False)
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=False)  # <- call


@row("FileExistsError")
def link_follow_symlinks_twice(d: str, calls: Calls) -> Any:
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=True)
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=True)  # <- call


@row("FileExistsError")
def link_follow_symlinks_symlink_itself_linked_by_peer(d: str, calls: Calls) -> Any:
    # best is the symlink's own inode; following the symlink, the call links the file: another inode.
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    posix.link(j(d, "last"), j(d, "best"), follow_symlinks=False)
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=True)  # <- call


@row("FileExistsError", expect="absorbed")
def link_no_follow_symlinks_same_inode_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    posix.link(j(d, "last"), j(d, "best"), follow_symlinks=False)  # a peer's identical call, moments ago
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=False)  # <- call


@row("FileExistsError", expect="absorbed")
def link_follow_symlinks_same_inode_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink(touch(j(d, "file")), j(d, "last"))
    posix.link(j(d, "file"), j(d, "best"))
    os.link(j(d, "last"), j(d, "best"), follow_symlinks=True)  # <- call


# --- the arguments by keyword (and the defaults given explicitly), where the rules look ------------------------


@row("FileExistsError", expect="absorbed")
def mkdir_keywords_made_by_peer(d: str, calls: Calls) -> Any:
    mkdir(j(d, "a"))  # unguarded: as a peer of this job would, moments ago
    os.mkdir(path=j(d, "a"), mode=0o777, dir_fd=None)  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def remove_keywords_never_existed(d: str, calls: Calls) -> Any:
    os.remove(path=j(d, "never"), dir_fd=None)  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def unlink_keywords_never_existed(d: str, calls: Calls) -> Any:
    os.unlink(path=j(d, "never"), dir_fd=None)  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def rmdir_keywords_never_existed(d: str, calls: Calls) -> Any:
    os.rmdir(path=j(d, "never"), dir_fd=None)  # <- call


@row("FileNotFoundError")
def remove_keywords_removed_by_itself(d: str, calls: Calls) -> Any:
    os.remove(path=touch(j(d, "f")))
    os.remove(path=j(d, "f"))  # <- call


@row("FileExistsError", expect="absorbed")
def symlink_keywords_identical_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink(src="one", dst=j(d, "latest"), target_is_directory=False, dir_fd=None)  # <- call


@row("FileExistsError")
def symlink_keywords_points_elsewhere(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink(src="two", dst=j(d, "latest"))  # <- call


@row("FileExistsError", expect="absorbed")
def link_keywords_same_inode_made_by_peer(d: str, calls: Calls) -> Any:
    posix.link(touch(j(d, "last")), j(d, "best"))
    os.link(src=j(d, "last"), dst=j(d, "best"), src_dir_fd=None, dst_dir_fd=None, follow_symlinks=True)  # <- call


@row("FileExistsError")
def link_keywords_other_inode(d: str, calls: Calls) -> Any:
    os.link(src=touch(j(d, "last")), dst=touch(j(d, "best")))  # <- call


# --- a link onto its own source: no call, a peer's neither, can have made it (absorbed on e3a2108) ---------------


@row("FileExistsError")
def link_onto_itself(d: str, calls: Calls) -> Any:
    os.link(touch(j(d, "a")), j(d, "a"))  # <- call


@row("FileExistsError")
def link_onto_itself_spelt_differently(d: str, calls: Calls) -> Any:
    touch(j(d, "a"))
    os.chdir(d)
    os.link("a", j(d, ".", "a"))  # <- call


@row("FileExistsError")
def link_onto_itself_through_a_symlinked_directory(d: str, calls: Calls) -> Any:
    touch(j(mkdir(j(d, "real")), "a"))
    posix.symlink("real", j(d, "alias"))
    os.link(j(d, "real", "a"), j(d, "alias", "a"))  # <- call


@row("FileExistsError")
def link_symlink_onto_itself_no_follow(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.link(j(d, "latest"), j(d, "latest"), follow_symlinks=False)  # <- call


# --- trailing separators: names the kernel reads as directories ---------------------------------------------


@row(None)
def symlink_trailing_separator_identical_made_by_peer(d: str, calls: Calls) -> Any:
    posix.symlink("one", j(d, "latest"))
    os.symlink("one", j(d, "latest") + os.sep)  # <- call


@row(None)
def link_trailing_separator_same_inode_made_by_peer(d: str, calls: Calls) -> Any:
    posix.link(touch(j(d, "last")), j(d, "best"))
    os.link(j(d, "last"), j(d, "best") + os.sep)  # <- call


@row(None)
def mkdir_trailing_separator_file_made_by_peer(d: str, calls: Calls) -> Any:
    touch(j(d, "a"))
    os.mkdir(j(d, "a") + os.sep)  # <- call


@row(None)
def remove_trailing_separator_file(d: str, calls: Calls) -> Any:
    os.remove(touch(j(d, "f")) + os.sep)  # <- call


@row("FileNotFoundError", launched=IN_A_JOB)
def rmdir_trailing_separator_never_existed(d: str, calls: Calls) -> Any:
    os.rmdir(j(d, "never") + os.sep + os.sep)  # <- call


# --- stale: made by an earlier process, longer than FSGUARD_FRESH_S before this interpreter ------------------


def _prepare_nothing(d: str) -> None:
    pass  # d itself: nothing is made or removed in it after this


def _prepare_old_dir(d: str) -> None:
    posix.mkdir(j(d, "old"))


def _prepare_old_symlink(d: str) -> None:
    posix.symlink("one", j(d, "latest"))


def _prepare_old_link(d: str) -> None:
    posix.link(touch(j(d, "last")), j(d, "best"))


@row("FileNotFoundError", group="stale", prepare=_prepare_nothing)
def remove_never_existed_in_a_directory_older_than_the_job(d: str, calls: Calls) -> Any:
    os.remove(j(d, "never"))  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_nothing)
def path_unlink_never_existed_in_a_directory_older_than_the_job(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "never").unlink()  # <- call


@row("FileNotFoundError", group="stale", prepare=_prepare_nothing)
def unlink_never_existed_bytes_in_a_directory_older_than_the_job(d: str, calls: Calls) -> Any:
    os.unlink(os.fsencode(j(d, "never")))  # <- call


@row("FileExistsError", group="stale", prepare=_prepare_old_dir)
def mkdir_directory_older_than_the_job(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "old"))  # <- call


@row("FileExistsError", group="stale", prepare=_prepare_old_dir)
def path_mkdir_parents_directory_older_than_the_job(d: str, calls: Calls) -> Any:
    pathlib.Path(d, "old").mkdir(parents=True)  # <- call


@row("FileExistsError", group="stale", prepare=_prepare_old_symlink)
def symlink_identical_older_than_the_job(d: str, calls: Calls) -> Any:
    os.symlink("one", j(d, "latest"))  # <- call


@row("FileExistsError", group="stale", prepare=_prepare_old_link)
def link_same_inode_older_than_the_job(d: str, calls: Calls) -> Any:
    os.link(j(d, "last"), j(d, "best"))  # <- call


# --- nobody: EACCES / EPERM (prepared as root, acted as nobody) ------------------------------------------------


def _prepare_root_dir(d: str) -> None:
    """``d/ro``: root's, 0755 (nobody may not write in it), with root's file ``a``."""
    posix.mkdir(j(d, "ro"))
    touch(j(d, "ro", "a"))
    os.chmod(j(d, "ro"), 0o755)


def _prepare_unsearchable(d: str) -> None:
    """``d/x``: root's, 0700 (nobody may not look inside it)."""
    posix.mkdir(j(d, "x"))
    os.chmod(j(d, "x"), 0o700)


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def remove_without_write_permission(d: str, calls: Calls) -> Any:
    os.remove(j(d, "ro", "a"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_unsearchable)
def remove_missing_in_unsearchable_directory(d: str, calls: Calls) -> Any:
    os.unlink(j(d, "x", "never"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def mkdir_without_write_permission(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "ro", "new"))  # <- call


@row("FileExistsError", group="nobody", prepare=_prepare_root_dir)
def mkdir_existing_without_write_permission(d: str, calls: Calls) -> Any:
    os.mkdir(j(d, "ro", "a"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def symlink_without_write_permission(d: str, calls: Calls) -> Any:
    os.symlink("one", j(d, "ro", "latest"))  # <- call


@row("PermissionError", group="nobody", prepare=_prepare_root_dir)
def link_without_write_permission(d: str, calls: Calls) -> Any:
    os.link(j(d, "ro", "a"), j(d, "ro", "best"))  # <- call


base.table.handled_rows(ROWS)  # each absorbed row again, under the program's own handler


# --- the harness (parity_cases.py's: its describe reads this file's frames and source too) ---------------------------------


def run_row(item: Row, d: str) -> dict[str, Any]:
    cwd = os.getcwd()
    sys.stderr.write(f"parity-row: {item.name}\n")
    sys.stderr.flush()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            outcome: dict[str, Any] = {"ok": True, "result": base.show(base.in_a_thread(item.act, d, []))}
        except Skip as reason:
            return {"skip": str(reason)}
        except Exception as exc:
            outcome = {"ok": False, "exc": base.describe(exc, item.act)}
        finally:
            os.chdir(cwd)
    sys.stderr.flush()
    outcome["warnings"] = [[w.category.__name__, base.show(str(w.message)), w.filename == __file__] for w in warned]
    outcome["calls"] = []
    outcome["state"] = base.snapshot(d)
    outcome["records"] = base.logged()
    return outcome


def main(argv: list[str]) -> int:
    command, group, base.BASE = argv[0], argv[1], argv[2]
    base.SHM = argv[3] if len(argv) > 3 else ""
    base.table.BASE, base.table.SHM = base.BASE, base.SHM  # the shared harness shows paths against these
    rows = [r for r in ROWS.values() if r.group == group]
    if command == "prepare" or group != "stale":  # stale rows were prepared by an earlier process
        for item in rows:
            posix.mkdir(j(base.BASE, item.name))
            if item.prepare is not None:
                item.prepare(j(base.BASE, item.name))
        if command == "prepare":
            return 0
    if group == "nobody":
        base.drop_to_nobody()
    import shutil

    functions = {"remove": os.remove, "unlink": os.unlink, "mkdir": os.mkdir, "symlink": os.symlink}
    functions.update({"link": os.link, "rmtree": shutil.rmtree, "rmdir": os.rmdir})
    meta = {
        "patched": sorted(op for op, f in functions.items() if hasattr(f, "__wrapped__")),
        "uid": os.getuid(),
        "python": list(sys.version_info[:3]),
    }
    results = {item.name: run_row(item, j(base.BASE, item.name)) for item in rows}
    sys.stdout.write(json.dumps({"meta": meta, "rows": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

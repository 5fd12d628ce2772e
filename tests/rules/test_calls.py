"""``fsguard.calls``: one call's arguments, bound as the interpreter binds them, and what a remembered call did."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fsguard.calls import Call, effects, norm

SPELLINGS: list[tuple[str, tuple[Any, ...], dict[str, Any], tuple[Any, ...]]] = [
    ("makedirs", ("/a/b", 0o755, True), {}, ("/a/b",)),
    ("makedirs", (), {"name": "/a/b", "exist_ok": True, "mode": 0o755}, ("/a/b",)),
    ("rename", ("/a/s", "/a/d"), {}, ("/a/s", "/a/d")),
    ("replace", ("/a/s",), {"dst": "/a/d"}, ("/a/s", "/a/d")),
    ("rmtree", ("/a/t", True), {}, ("/a/t",)),
    ("rmtree", (), {"path": "/a/t", "ignore_errors": True}, ("/a/t",)),
]


@pytest.mark.parametrize(("op", "args", "kwargs", "given"), SPELLINGS)
def test_positional_and_keyword_spellings_decode_alike(
    op: str, args: tuple[Any, ...], kwargs: dict[str, Any], given: tuple[Any, ...]
) -> None:
    call = Call(op, args, kwargs)
    assert call.bound and call.given == given
    if op == "makedirs":
        assert call.options.exist_ok and call.options.mode == 0o755, call
    if op == "rmtree":
        assert call.on_error.ignore_errors, call


def test_a_call_its_function_rejects_binds_to_nothing() -> None:
    for op, args, kwargs in (("rmtree", ("/a", False, None, 1), {}), ("mkdir", ("/a",), {"bogus": 1})):
        call = Call(op, args, kwargs)
        assert not call.bound and call.given == () and call.path is None and call.targets() is None


def test_paths_are_normalised_relative_to_the_given_directory(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    w = str(tmp_path)
    call = Call("rename", ("x/../s", b"d/"), {}, cwd=w)
    assert (call.src, call.dst, call.path) == (f"{w}/s", f"{w}/d", None)
    assert call.targets() == [f"{w}/s", f"{w}/d"] and call.shown() == ["x/../s", b"d/"]


def test_dotdot_after_a_symlink_means_what_the_kernel_resolves(tmp_path: Path) -> None:
    """``latest/../cache`` with ``latest`` a link to ``runs/run-3`` is ``runs/cache`` (the kernel resolves ``..``
    after the link), never the lexical ``cache``; a link to an absolute path, a link to a link, and a missing
    component (the call fails there too: the rest is kept as given) alike."""
    (tmp_path / "runs" / "run-3").mkdir(parents=True)
    os.symlink("runs/run-3", tmp_path / "latest")
    os.symlink(str(tmp_path / "runs" / "run-3"), tmp_path / "absolute")
    os.symlink("latest", tmp_path / "again")
    w = str(tmp_path)
    assert norm(os.path.join(w, "latest", "..", "cache")) == f"{w}/runs/cache"
    assert norm("latest/../cache", w) == f"{w}/runs/cache"
    assert norm(f"{w}/absolute/../../x") == f"{w}/x"
    assert norm(f"{w}/again/./../cache/") == f"{w}/runs/cache"
    assert norm(f"{w}/runs/run-3/../cache") == f"{w}/runs/cache"  # no link: folded as before
    assert norm(f"{w}/missing/../cache") == f"{w}/missing/../cache"
    assert Call("rmtree", (f"{w}/latest/../cache",), {}).path == f"{w}/runs/cache"
    assert effects(("makedirs", ("latest/../cache",), {}), w)[0] == (f"{w}/runs/cache", "made")


def test_directory_descriptors_make_a_call_unkeyed_and_unremembered() -> None:
    call = Call("rename", ("s", "d"), {"src_dir_fd": 3})
    assert call.fds and call.targets() is None and call.made() is None and call.gone() is None


ENTRIES: list[tuple[Any, ...]] = [
    ("makedirs", ("/a",), {}),
    ("makedirs-shared", ("/a",), {"exist_ok": True}),
    ("makedirs-found", ("/a", 0o777, True), {}),
    ("mkdir", ("/a",), {}),
    ("symlink", ("t", "/a/l"), {}, 5.0),
    ("link", ("/a/f", "/a/l"), {}, 5.0),
    ("rename", ("/a/s", "/a/d"), {}, 5.0),
    ("replace", ("s", "d"), {}, 5.0),
    ("remove", ("/a/f",), {}),
    ("rmdir", (), {"path": "/a/d"}),
    ("rmtree", ("/a/t",), {}),
    ("rmtree", ("t",), {"dir_fd": 3}),
]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e[0])
def test_what_a_remembered_call_did_is_what_its_call_says(entry: tuple[Any, ...]) -> None:
    call = Call.remembered(entry, "/w")
    assert effects(entry, "/w") == (call.made(), call.gone(), call.time)


def test_arguments_bind_into_named_parts() -> None:
    """Every argument but the paths lands in its part, as given (values read for their truth, as the functions
    read them); ``arguments()`` lists them by name, defaults included, as a flight key compares them."""
    link = Call("link", ("/a/f", "/a/l"), {"follow_symlinks": 0, "src_dir_fd": 3})
    assert link.options.follow_symlinks == 0 and link.fds.src_dir_fd == 3 and link.fds.dst_dir_fd is None
    assert link.fds and not link.on_error.ignore_errors and link.on_error.onerror is None
    handler = print
    tree = Call("rmtree", ("/a/t", 1, handler), {})
    assert (tree.on_error.ignore_errors, tree.on_error.onerror, tree.on_error.onexc) == (1, handler, None)
    assert not tree.fds and tree.options.mode is None
    made = Call("makedirs", ("/a/b",), {"exist_ok": True})
    assert dict(made.arguments()) == {
        "mode": 0o777,
        "exist_ok": True,
        "ignore_errors": False,
        "onerror": None,
        "onexc": None,
        "follow_symlinks": True,
        "dir_fd": None,
        "src_dir_fd": None,
        "dst_dir_fd": None,
    }

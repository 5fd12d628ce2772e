"""``fsguard.calls``: one call's arguments, bound as the interpreter binds them, and what a remembered call did."""

from __future__ import annotations

from typing import Any

import pytest

from fsguard.calls import Call, effects

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
        assert call.exist_ok and call.mode == 0o755, call
    if op == "rmtree":
        assert call.ignore_errors, call


def test_a_call_its_function_rejects_binds_to_nothing() -> None:
    for op, args, kwargs in (("rmtree", ("/a", False, None, 1), {}), ("mkdir", ("/a",), {"bogus": 1})):
        call = Call(op, args, kwargs)
        assert not call.bound and call.given == () and call.path is None and call.targets() is None


def test_paths_are_normalised_relative_to_the_given_directory() -> None:
    call = Call("rename", ("x/../s", b"d/"), {}, cwd="/w")
    assert (call.src, call.dst, call.path) == ("/w/s", "/w/d", None)
    assert call.targets() == ["/w/s", "/w/d"] and call.shown() == ["x/../s", b"d/"]


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

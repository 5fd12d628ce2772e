"""``fsguard.memory``'s index: every question it answers is the one a pass over the whole memory would answer,
and "anything made below this directory" never passes over the history (issue 35: a failing makedirs asked it
of every remembered name, 38.7 million ``str.startswith`` calls for 9,500 decisions)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsguard import memory, state

MADE_KINDS = ("made", "made-shared", "found")
OPS = ("makedirs", "makedirs-shared", "makedirs-found", "mkdir", "rename", "replace", "remove", "rmdir", "rmtree")
OPS += ("symlink", "link", "unlink")


@pytest.fixture
def fresh_memory() -> Iterator[None]:
    """An empty memory and no index, as in a new process; put back afterwards."""
    saved = (list(memory.MEMORY), list(memory.DIRS), state.STATE.memory.index)
    memory.MEMORY.clear()
    memory.DIRS.clear()
    state.STATE.memory.index = None
    yield
    memory.MEMORY.clear()
    memory.DIRS.clear()
    memory.MEMORY.extend(saved[0])
    memory.DIRS.extend(saved[1])
    state.STATE.memory.index = saved[2]


def scanned(index: Any, path: str, within: bool) -> tuple[int, str, float | None] | None:
    """The answer as the index gave it before issue 35: a pass over every name made."""
    found = index.made.get(path)
    kept = index.dirs.get(path)
    if kept is not None and (found is None or kept[0] > found[0]):
        found = kept
    if within:
        prefix = path.rstrip(os.sep) + os.sep
        for made in (index.made, index.dirs):
            for name, value in made.items():
                if (found is None or value[0] > found[0]) and name.startswith(prefix):
                    found = value
    for above in memory._ancestry(path):
        gone = index.gone.get(above)
        if gone is not None and (found is None or gone[0] > found[0]):
            found = gone
    return found


def _same(event: memory.Event | None, value: tuple[int, str, float | None] | None) -> bool:
    if event is None or value is None:
        return event is None and value is None
    # Names made by one update's mkdir/makedirs share a number: among those, either one answers (all "made").
    kinds = (event.kind, value[1])
    return (event.seq, event.time) == (value[0], value[2]) and (
        kinds[0] == kinds[1] or (kinds[0] in MADE_KINDS and kinds[1] in MADE_KINDS)
    )


def _remember(entry: tuple[Any, ...]) -> None:
    dirs = entry[0] in ("mkdir", "makedirs", "makedirs-shared", "makedirs-found")
    (memory.DIRS if dirs else memory.MEMORY).append(entry)


def _entry(rng: random.Random, names: list[str]) -> tuple[Any, ...]:
    name, other = rng.choice(names), rng.choice(names)
    op = rng.choice(OPS)
    if op in ("rename", "replace", "link"):
        return (op, (other, name), {}, rng.random())
    if op == "symlink":
        return (op, ("target", name), {}, rng.random())
    if op.startswith("makedirs-"):
        return (op, (name,), {"exist_ok": True})
    return (op, (name,), {})


@pytest.mark.parametrize("seed", range(6))
def test_the_index_answers_as_a_pass_over_the_memory_would(
    fresh_memory: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random calls on a small tree (some names made for real, so the directory checks see both), questions
    between them; small limits, so that forgetting and rebuilding happen many times."""
    monkeypatch.setattr(memory._Index, "LIMIT", 64)
    monkeypatch.setattr(memory._Index, "DIRS_LIMIT", 16)
    monkeypatch.setattr(memory._Index, "BELOW_LIMIT", 32, raising=False)
    rng = random.Random(seed)
    root = str(tmp_path)
    names = [root] + [
        os.path.join(root, *parts)
        for parts in (("a",), ("a", "b"), ("a", "b", "c"), ("a", "x"), ("d",), ("d", "e"), ("a", "b", "c", "f"))
    ]
    asked = 0
    for step in range(3000):
        if rng.random() < 0.1:
            for name in names[1:4]:
                os.makedirs(name, exist_ok=True) if rng.random() < 0.5 else None
        _remember(_entry(rng, names))
        if rng.random() < 0.3:
            path, within = rng.choice(names), rng.random() < 0.7
            event = memory.own_last(path, within=within)
            expected = scanned(state.STATE.memory.index, path, within)
            assert _same(event, expected), (step, path, within, event, expected)
            asked += 1
    assert asked > 500


class _NoPass(dict):  # type: ignore[type-arg]
    """A dict that may be looked up but never walked."""

    def _walked(self, *args: Any) -> Any:
        raise AssertionError("the question passed over every name remembered")

    __iter__ = items = keys = values = _walked  # type: ignore[assignment]


def test_anything_made_below_is_answered_without_a_pass_over_the_names(fresh_memory: None) -> None:
    """20,000 atomic writes into 500 class directories, then the question a failing makedirs of one class
    directory asks: answered from the names under it alone (fails where it walks every name made)."""
    for i in range(500):
        memory.DIRS.append(("makedirs-shared", (f"/data/class-{i}",), {"exist_ok": True}))
    memory.own_last("/data")
    for i in range(20_000):
        memory.MEMORY.append(("replace", (f"/data/tmp-{i}", f"/data/class-{i % 500}/item-{i}"), {}, float(i)))
        if i % 1000 == 0:
            memory.own_last("/data")  # brings the index up to date
    memory.own_last("/data")
    index = state.STATE.memory.index
    index.made, index.dirs = _NoPass(index.made), _NoPass(index.dirs)
    event = index.last_event("/data/class-7", True)
    assert event is not None and event.kind == "made" and event.time == 19_507.0
    assert index.last_event("/data/class-7/item-7", True) is None  # older than MEMORY_SIZE calls: forgotten
    assert index.last_event("/data", True).time == 19_999.0  # type: ignore[union-attr]
    assert index.last_event("/elsewhere", True) is None


def test_questions_drain_the_memory_and_a_gap_starts_over(fresh_memory: None) -> None:
    """The index takes what was remembered since the last question (no copy of the whole deque); more than
    ``MEMORY_SIZE`` calls since then may have lost one: what the memory told is forgotten, not trusted."""
    memory.MEMORY.append(("rmtree", ("/w/t",), {}))
    assert memory.own_last_event("/w/t/x") == "removed"
    assert len(memory.MEMORY) == 0
    for i in range(memory.MEMORY_SIZE):
        memory.MEMORY.append(("remove", (f"/w/f{i}",), {}))
    assert memory.own_last_event("/w/t/x") is None
    assert memory.own_last_event(f"/w/f{memory.MEMORY_SIZE - 1}") == "removed"

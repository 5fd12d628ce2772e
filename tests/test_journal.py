"""``fsguard.journal.made_alone`` on real node-local files: the tried notes read as they grow (issue 47)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsguard import journal


@pytest.fixture
def tag() -> Iterator[str]:
    name = f"TORCHELASTIC_RUN_ID=test-journal-{uuid.uuid4().hex}"
    journal.TRIED_READ.clear()
    journal.OPENED.clear()
    yield name
    journal.TRIED_READ.clear()
    journal.OPENED.clear()
    where = journal.directory()
    for prefix in (journal.PREFIX, journal.TRIED):
        if where is not None:
            try:
                os.unlink(os.path.join(where, journal.file_name(name, prefix)))
            except FileNotFoundError:
                pass


def _note(tag: str, prefix: str, path: str, rank: int | None, whole: bool = True) -> None:
    where = journal.directory()
    assert where is not None
    entry = b"%.6f%s %s" % (time.time(), b"" if rank is None else b"@%d" % rank, os.fsencode(path))
    with open(os.path.join(where, journal.file_name(tag, prefix)), "ab") as f:
        f.write(entry + (b"\0" if whole else b""))


def test_a_note_another_rank_appends_later_is_read(tag: str, tmp_path: Path) -> None:
    top = str(tmp_path / "eval_tmp")
    _note(tag, journal.PREFIX, top, 1)
    assert journal.made_alone(top, tag, 1)  # no notes file at all yet
    _note(tag, journal.TRIED, str(tmp_path / "other"), 2)
    assert journal.made_alone(top, tag, 1)  # another path's note
    _note(tag, journal.TRIED, top, 1)
    assert journal.made_alone(top, tag, 1)  # this rank's own (its Pool's child) note
    assert journal.made_alone(top, tag, 1)  # nothing appended since: read from what is kept
    _note(tag, journal.TRIED, top, 2)
    assert not journal.made_alone(top, tag, 1)  # appended after this process read the notes
    assert not journal.made_alone(str(tmp_path / "other"), tag, 1)  # rank 2 tried it; rank 1 never made it


def test_a_note_still_being_written_counts_once_whole(tag: str, tmp_path: Path) -> None:
    top = str(tmp_path / "eval_tmp")
    _note(tag, journal.PREFIX, top, 1)
    _note(tag, journal.TRIED, top, 2, whole=False)
    assert journal.made_alone(top, tag, 1)  # half an entry is not read
    where = journal.directory()
    assert where is not None
    with open(os.path.join(where, journal.file_name(tag, journal.TRIED)), "ab") as f:
        f.write(b"\0")
    assert not journal.made_alone(top, tag, 1)


def test_a_longer_path_is_not_the_path(tag: str, tmp_path: Path) -> None:
    top = str(tmp_path / "eval_tmp")
    _note(tag, journal.PREFIX, top, 1)
    _note(tag, journal.TRIED, top + "-2", 2)
    _note(tag, journal.TRIED, "/x" + top, 2)
    assert journal.made_alone(top, tag, 1)
    _note(tag, journal.PREFIX, top, 2)  # rank 2 made it last
    assert not journal.made_alone(top, tag, 1)


def test_notes_swept_and_written_afresh_are_read_afresh(tag: str, tmp_path: Path) -> None:
    top = str(tmp_path / "eval_tmp")
    _note(tag, journal.PREFIX, top, 1)
    _note(tag, journal.TRIED, str(tmp_path / "other"), 2)
    assert journal.made_alone(top, tag, 1)
    where = journal.directory()
    assert where is not None
    os.unlink(os.path.join(where, journal.file_name(tag, journal.TRIED)))  # a sweep (a day unchanged)
    _note(tag, journal.TRIED, top, 2)
    assert not journal.made_alone(top, tag, 1)

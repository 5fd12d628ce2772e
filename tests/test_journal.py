"""``fsguard.journal`` on real node-local files: ``made_alone``'s tried notes read as they grow (issue 47), and
``newest`` reading the newest-changed journals first and stopping where no older one can be newer (issue 48)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsguard import journal
from tests.conftest import clean_env
from tests.support.ranks import rank_env
from tests.support.records import json_records


@pytest.fixture
def tag() -> Iterator[str]:
    name = f"TORCHELASTIC_RUN_ID=test-journal-{uuid.uuid4().hex}"
    journal.TRIED_READ.clear()
    journal.OPENED.clear()
    journal.SLOTS.clear()
    yield name
    journal.TRIED_READ.clear()
    journal.OPENED.clear()
    journal.SLOTS.clear()
    where = journal.directory()
    for prefix in (journal.PREFIX, journal.TRIED, journal.SEQ):
        if where is not None:
            try:
                os.unlink(os.path.join(where, journal.file_name(name, prefix)))
            except FileNotFoundError:
                pass


@pytest.fixture
def other_tags(tag: str) -> Iterator[list[str]]:
    """Two more jobs' tags of this node, their journals removed afterwards."""
    names = [f"{tag}-{k}" for k in range(2)]
    yield names
    where = journal.directory()
    for name in names:
        if where is not None:
            try:
                os.unlink(os.path.join(where, journal.file_name(name)))
            except FileNotFoundError:
                pass


def _note(tag: str, prefix: str, path: str, rank: int | None, whole: bool = True, when: float | None = None) -> None:
    where = journal.directory()
    assert where is not None
    stamp = time.time() if when is None else when
    entry = b"%.6f%s %s" % (stamp, b"" if rank is None else b"@%d" % rank, os.fsencode(path))
    with open(os.path.join(where, journal.file_name(tag, prefix)), "ab") as f:
        f.write(entry + (b"\0" if whole else b""))
    if whole:  # as a peer's fsguard does after each note: a new token (``journal._Slots``)
        journal.SLOTS.bump(tag, 1 if prefix == journal.TRIED else 0, journal.tokens_path)


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


def test_this_process_s_last_note_answers_without_a_read_until_anything_is_appended(
    tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: where this process's note of the path is the journal's last (its size is where that note ended), the
    answer needs no read of the journal. Any note appended since, a peer's or its own of another path, makes it read
    the journal again, so a peer that made the path since is seen."""
    from fsguard.launcher import detect
    from fsguard.state import STATE

    monkeypatch.setattr(STATE, "launch", detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}))
    reads: list[int] = []
    pread = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        reads.append(fd)
        return pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counted)  # counted, not replaced: every answer is the real one
    top, other = str(tmp_path / "eval_tmp"), str(tmp_path / "other")
    journal.made(top, tag)
    assert journal.made_alone(top, tag, 1) and reads == []  # its own note is the last: no read
    assert not journal.made_alone(top, tag, 2) and len(reads) == 1  # another rank asks: read
    journal.made(other, tag)
    assert journal.made_alone(top, tag, 1) and len(reads) == 2  # its own note of another path came since: read
    journal.made(top, tag)
    _note(tag, journal.PREFIX, top, 2)  # a peer of rank 2 made it since (a note just as long)
    assert not journal.made_alone(top, tag, 1) and len(reads) == 3
    _note(tag, journal.PREFIX, other, 2)
    journal.made(top, tag)
    assert journal.made_alone(top, tag, 1) and len(reads) == 3  # its own again, the last


def test_a_note_still_being_written_counts_once_whole(tag: str, tmp_path: Path) -> None:
    top = str(tmp_path / "eval_tmp")
    _note(tag, journal.PREFIX, top, 1)
    _note(tag, journal.TRIED, top, 2, whole=False)
    assert journal.made_alone(top, tag, 1)  # half an entry is not read
    where = journal.directory()
    assert where is not None
    with open(os.path.join(where, journal.file_name(tag, journal.TRIED)), "ab") as f:
        f.write(b"\0")
    journal.SLOTS.bump(tag, 1, journal.tokens_path)  # the note whole: its writer's token
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


def _changed(tag: str, seconds_ago: float) -> None:
    where = journal.directory()
    assert where is not None
    then = time.time() - seconds_ago
    os.utime(os.path.join(where, journal.file_name(tag)), (then, then))


def test_newest_is_the_newest_entry_of_any_journal(tag: str, other_tags: list[str], tmp_path: Path) -> None:
    top, now = str(tmp_path / "results"), time.time()
    _note(tag, journal.PREFIX, top, 0, when=now - 30)
    _note(other_tags[0], journal.PREFIX, top, 3, when=now - 10)  # another job made it since
    _note(other_tags[0], journal.PREFIX, str(tmp_path / "other"), 1, when=now - 5)
    _note(tag, journal.PREFIX, top + "-2", 2, when=now - 1)  # a longer path: not the path
    found = journal.newest(top, tag)
    assert found is not None and found[1:] == (other_tags[0], 3) and abs(found[0] - (now - 10)) < 1e-3, found
    _note(tag, journal.PREFIX, top, 1)  # this job made it again, last
    assert journal.newest(top, tag)[1:] == (tag, 1)  # type: ignore[index]
    assert journal.newest(str(tmp_path / "never"), tag) is None


def test_newest_reads_no_journal_changed_before_the_entry_found(
    tag: str, other_tags: list[str], tmp_path: Path
) -> None:
    """A journal last changed an hour ago holds no newer entry: it is not read. Shown with one that claims one (its
    entry dated now, which a real journal cannot be), so reading it would answer with its tag."""
    top, now = str(tmp_path / "results"), time.time()
    _note(tag, journal.PREFIX, top, 1, when=now - 20)
    _note(other_tags[0], journal.PREFIX, top, 5, when=now)
    _changed(other_tags[0], 3600)
    assert journal.newest(top, tag)[1:] == (tag, 1)  # type: ignore[index]
    _note(other_tags[1], journal.PREFIX, top, 7, when=now - 60)  # changed now, its entry older: read, not newer
    assert journal.newest(top, tag)[1:] == (tag, 1)  # type: ignore[index]
    _changed(other_tags[0], 0)  # changed now: read, and its entry is the newest
    assert journal.newest(top, tag)[1:] == (other_tags[0], 5)  # type: ignore[index]


def test_a_note_longer_than_the_chunks_read_is_found_whole(tag: str, tmp_path: Path) -> None:
    """A path of 3 KB: its note spans the first chunks read backwards (512 bytes, then 2 KiB)."""
    deep = os.path.join(str(tmp_path), *["d" * 200] * 15)
    _note(tag, journal.PREFIX, deep, 4)
    for k in range(3):
        _note(tag, journal.PREFIX, str(tmp_path / f"short{k}"), 2)
    assert journal.newest(deep, tag)[1:] == (tag, 4)  # type: ignore[index]
    assert journal.newest(deep[:-1], tag) is None  # its prefix is no path the journal names
    journal.OPENED.clear()
    assert journal.made_alone(deep, tag, 4)
    assert not journal.made_alone(deep, tag, 2)


def test_newest_since_ignores_an_earlier_directorys_entries(tag: str, other_tags: list[str], tmp_path: Path) -> None:
    top, now = str(tmp_path / "results"), time.time()
    _note(other_tags[0], journal.PREFIX, top, 3, when=now - 600)  # another job made it, and it was removed since
    _changed(other_tags[0], 600)
    assert journal.newest(top, tag)[1:] == (other_tags[0], 3)  # type: ignore[index]
    assert journal.newest(top, tag, since=now - 10) is None
    _note(tag, journal.PREFIX, top, 1, when=now - 1)
    assert journal.newest(top, tag, since=now - 10)[1:] == (tag, 1)  # type: ignore[index]


def test_a_rerun_on_two_nodes_absorbs_a_peers_directory_an_earlier_job_of_this_node_made(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """A two-node job's rank makes ``results``; the job ends and ``results`` is removed. A rerun: the rank on the other
    node makes ``results`` first, and this node's rank's ``os.makedirs(results)`` fails. The journal's entry of the
    first job named the removed directory, not this one: told by time (a peer's, just made), it is absorbed. Read as
    the maker, it re-raised ("made by another job") and the rerun crashed as without fsguard."""
    target, logs = tmp_path / "results", tmp_path / "logs"

    def rank0(run_id: str, guarded: bool) -> subprocess.Popen[str]:
        env = rank_env(0, 2, run_id, LOCAL_WORLD_SIZE="1", FSGUARD="1" if guarded else "0", FSGUARD_LOG=str(logs))
        return subprocess.Popen(
            [str(fsguard_python), "-c", GATED_MAKE, str(target), str(tmp_path / f"go-{run_id}")],
            env=clean_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = rank0("first", guarded=True)
    (tmp_path / "go-first").touch()
    assert first.communicate(timeout=60)[0] == "made\n"
    os.rmdir(target)  # the job's end: its output removed
    time.sleep(5.5)  # the rerun comes later than FSGUARD_FRESH_S (the default, 5 s)
    results = {}
    for guarded in (False, True):
        rerun = rank0(f"rerun-{guarded}", guarded)
        time.sleep(0.5)  # started: this job began before its peer made the directory
        os.mkdir(target)  # the other node's rank, first
        (tmp_path / f"go-rerun-{guarded}").touch()
        out, err = rerun.communicate(timeout=60)
        results[guarded] = (rerun.returncode, out, err)
        os.rmdir(target)
    assert results[False][0] != 0 and "FileExistsError" in results[False][2], results[False]
    assert results[True][:2] == (0, "made\n"), results[True]
    found = [r for r in json_records(logs) if r["op"] == "makedirs"]
    assert [r["decision"] for r in found] == ["absorbed"], found
    assert "told by time" in found[0]["evidence"], found


GATED_MAKE = """
import os, sys, time
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
os.makedirs(sys.argv[1])
print("made")
"""


FOUND_AGAIN = """
import os, sys
for _ in range(300):
    os.makedirs(sys.argv[1], exist_ok=True)  # before every write, as many programs do
os.chdir(os.path.dirname(sys.argv[1]))
for _ in range(300):
    os.makedirs(os.path.basename(sys.argv[1]), exist_ok=True)  # the same directory, named from its parent
print("ok")
"""


def test_a_directory_found_again_and_again_is_noted_once_per_process(fsguard_python: Path, tmp_path: Path) -> None:
    """``makedirs(out, exist_ok=True)`` before every write: the first call of rank 1 makes ``out``, every other call of
    ranks 1 and 2 finds it there. The tried notes name it once per process, not once per call (each call cost an
    ``open``, a ``write`` and a ``close``, and 80 bytes of memory in ``/dev/shm``), and still tell that rank 2 shares
    the name (``made_alone``)."""
    out = tmp_path / "out"
    run_id = f"test-journal-{uuid.uuid4().hex}"
    from fsguard.launcher import job_tag

    tag = job_tag(rank_env(1, 4, run_id))
    assert tag is not None
    where = journal.directory()
    assert where is not None
    try:
        for rank in (1, 2):
            env = clean_env(rank_env(rank, 4, run_id, FSGUARD="1", FSGUARD_STDERR="0"))
            done = subprocess.run(
                [str(fsguard_python), "-c", FOUND_AGAIN, str(out)], env=env, capture_output=True, text=True, timeout=60
            )
            assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
        notes = Path(where, journal.file_name(tag, journal.TRIED)).read_bytes().split(b"\0")
        named = [note.partition(b" ")[0].partition(b"@")[2] for note in notes if note.endswith(b" " + bytes(out))]
        assert named == [b"1", b"2"], notes[:10]  # rank 1's finds (its own directory), then rank 2's: once each
        journal.TRIED_READ.clear()
        journal.OPENED.clear()
        assert not journal.made_alone(str(out), tag, 1)  # rank 2 found it there: a shared name, as before
    finally:
        journal.TRIED_READ.clear()
        journal.OPENED.clear()
        for prefix in (journal.PREFIX, journal.TRIED):
            try:
                os.unlink(os.path.join(where, journal.file_name(tag, prefix)))
            except FileNotFoundError:
                pass


MANY_DIRECTORIES = """
import os, sys
from fsguard import journal
journal.JOURNAL_MAX_BYTES = 4096  # set aside every 50 entries or so, not every 100,000
root, rank = sys.argv[1], os.environ["RANK"]
for k in range(400):
    os.mkdir(os.path.join(root, f"r{rank}-{k:03d}"))
print("ok")
"""


FULL_WITHOUT_FCNTL = """
import os, sys
sys.modules["fcntl"] = None  # its import fails, as in a process whose imports fail (at shutdown, a broken path)
from fsguard import journal
journal.JOURNAL_MAX_BYTES = 512
root = sys.argv[1]
for k in range(40):
    os.mkdir(os.path.join(root, f"d{k:02d}"))
print("ok")
"""


def test_a_full_journal_whose_lock_cannot_be_imported_harms_no_call(fsguard_python: Path, tmp_path: Path) -> None:
    """A journal past its bound is set aside under a lock (``fcntl``), imported then. Where that import fails, the guarded
    ``mkdir`` that noted its directory still returns as the standard one does, and its notes go on into the journal.
    Flipped: with ``fcntl`` importable, the journal is set aside."""
    run_id = f"test-journal-{uuid.uuid4().hex}"
    from fsguard.launcher import job_tag

    tag = job_tag(rank_env(0, 2, run_id))
    where = journal.directory()
    assert tag is not None and where is not None
    try:
        unbroken = FULL_WITHOUT_FCNTL.replace('sys.modules["fcntl"] = None', "")
        for code, name in ((FULL_WITHOUT_FCNTL, "without"), (unbroken, "with")):
            (tmp_path / name).mkdir()
            done = subprocess.run(
                [str(fsguard_python), "-c", code, str(tmp_path / name)],
                env=clean_env(rank_env(0, 2, run_id, FSGUARD="1", FSGUARD_STDERR="0")),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", ""), (name, done.stderr)
            assert len(os.listdir(tmp_path / name)) == 40
            aside = Path(where, journal.file_name(tag, journal.ASIDE))
            assert aside.exists() == (name == "with"), name
    finally:
        journal.OPENED.clear()
        for path in [
            os.path.join(where, journal.file_name(tag, p)) for p in (journal.PREFIX, journal.ASIDE, journal.TRIED)
        ]:
            if os.path.exists(path):
                os.unlink(path)
        tokens = journal.tokens_path(tag)
        if tokens is not None and os.path.exists(tokens):
            os.unlink(tokens)


def test_a_journal_past_its_bound_is_set_aside_and_still_read(fsguard_python: Path, tmp_path: Path) -> None:
    """Two ranks make 400 directories each, the journal's bound lowered to 4 KiB: the journal is set aside again and
    again, one generation is kept, and this node's journals of the job stay within twice the bound (a job that made
    millions of directories filled ``/dev/shm``, which is memory). The newest entries are still read, in the journal
    and in the one set aside, as this job's."""
    run_id = f"test-journal-{uuid.uuid4().hex}"
    from fsguard.launcher import job_tag

    tag = job_tag(rank_env(0, 2, run_id))
    where = journal.directory()
    assert tag is not None and where is not None
    try:
        ranks = [
            subprocess.Popen(
                [str(fsguard_python), "-c", MANY_DIRECTORIES, str(tmp_path)],
                env=clean_env(rank_env(rank, 2, run_id, FSGUARD="1", FSGUARD_STDERR="0")),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in (0, 1)
        ]
        for rank in ranks:
            out, err = rank.communicate(timeout=60)
            assert (rank.returncode, out) == (0, "ok\n"), err
        assert len(os.listdir(tmp_path)) == 800
        current = Path(where, journal.file_name(tag))
        aside = Path(where, journal.file_name(tag, journal.ASIDE))
        entry = 200  # an entry is about 90 bytes here; two ranks may each add one past the bound
        assert 0 < current.stat().st_size <= 4096 + 2 * entry, current.stat()
        assert 4096 <= aside.stat().st_size <= 4096 + 2 * entry, aside.stat()
        notes = [n for n in (aside.read_bytes() + current.read_bytes()).split(b"\0") if n]
        assert 40 <= len(notes) <= 2 * (4096 + 2 * entry) // 80, len(notes)  # two generations, not 800 entries
        newest = sorted(os.fsdecode(n.partition(b" ")[2]) for n in notes)
        for path in (newest[0], newest[-1]):  # the oldest kept (set aside) and the newest (in the journal)
            found = journal.newest(path, tag)
            assert found is not None and found[1] == tag, (path, found)
        assert journal.newest(str(tmp_path / "r0-000"), tag) is None  # two generations ago: dropped
    finally:
        journal.OPENED.clear()
        for prefix in (journal.PREFIX, journal.ASIDE, journal.TRIED):
            try:
                os.unlink(os.path.join(where, journal.file_name(tag, prefix)))
            except FileNotFoundError:
                pass


GATED_REMOVE = """
import os, shutil, sys, time
target, go, started = sys.argv[1], sys.argv[2], sys.argv[3]
if sys.argv[4] == "make":
    os.makedirs(target, exist_ok=True)  # the first job's staging directory (its journal notes it)
    print("made")
    raise SystemExit
os.mkdir(started + ".warm")
shutil.rmtree(started + ".warm")  # fsguard's first rmtree imports its walk: not in the race below
while not os.path.exists(go):
    time.sleep(0.01)
open(started, "w").close()
shutil.rmtree(target)  # a stale staging directory, as this rank believes
print("removed")
"""


def test_a_rerun_on_two_nodes_leaves_a_peers_fresh_tree_to_its_rename(fsguard_python: Path, tmp_path: Path) -> None:
    """A two-node job's rank made ``tmp-checkpoint-5`` and the job ended. A rerun the same day: the rank on the other
    node makes ``tmp-checkpoint-5`` afresh, writes its shard and renames it to ``checkpoint-5`` just after this node's
    rank began to ``rmtree`` it. The first job's journal entry named the removed directory, not this one: the tree is
    a peer's, fresh, and the rmtree waits for its rename (``yielded``). Read as the first job's, it was removed at
    once, and the checkpoint was lost, as without fsguard."""
    staging, final, logs = tmp_path / "tmp-checkpoint-5", tmp_path / "checkpoint-5", tmp_path / "logs"

    def rank1(run_id: str, guarded: bool, step: str) -> subprocess.Popen[str]:
        env = rank_env(1, 2, run_id, LOCAL_WORLD_SIZE="1", FSGUARD="1" if guarded else "0", FSGUARD_LOG=str(logs))
        started = tmp_path / f"started-{run_id}"
        return subprocess.Popen(
            [str(fsguard_python), "-c", GATED_REMOVE, str(staging), str(tmp_path / f"go-{run_id}"), str(started), step],
            env=clean_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = rank1("first", True, "make")
    assert first.communicate(timeout=60)[0] == "made\n"
    os.rmdir(staging)  # the job's end: its staging directory removed
    time.sleep(5.5)  # the rerun comes later than FSGUARD_FRESH_S (the default, 5 s)
    results = {}
    for guarded in (False, True):
        run_id = f"rerun-{guarded}"
        rerun = rank1(run_id, guarded, "remove")
        time.sleep(0.5)  # started: this job began before its peer made the directory
        staging.mkdir()  # the other node's rank: its staging directory and its shard
        (staging / "shard-0").write_text("w")
        (tmp_path / f"go-{run_id}").touch()
        deadline = time.monotonic() + 60
        while not (tmp_path / f"started-{run_id}").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # the rmtree is under way
        try:
            os.rename(staging, final)  # the peer's commit
            committed = sorted(os.listdir(final))
        except FileNotFoundError:
            committed = None  # the rmtree removed it first: the checkpoint is lost
        out, err = rerun.communicate(timeout=60)
        results[guarded] = (rerun.returncode, out, committed)
        assert "Traceback" not in err, err
        shutil.rmtree(final, ignore_errors=True)
    assert results[False] == (0, "removed\n", None), results[False]  # without fsguard: the race is real
    assert results[True] == (0, "removed\n", ["shard-0"]), results[True]
    found = [r for r in json_records(logs) if r["op"] == "rmtree"]
    assert [r["decision"] for r in found] == ["yielded"], found


def test_every_note_sets_a_new_token_and_a_peer_s_note_ends_the_quick_answer(
    tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: each note's writer sets a new token after it, the journal's or the tried notes'. While the journal's
    token is the one this process set after its own note of the path, ``made_alone`` answers with no system call; a
    note by another process of the node (a real one, its own fsguard) changes the token, and is read."""
    from fsguard.launcher import detect
    from fsguard.state import STATE

    top = str(tmp_path / "eval_tmp")
    STATE.launch, launch = detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}), STATE.launch
    try:
        before = journal.SLOTS.read(tag, journal.tokens_path)
        assert before is not None and len(before) == 16
        journal.made(top, tag)
        after = journal.SLOTS.read(tag, journal.tokens_path)
        assert after is not None and after[:8] != before[:8] and after[8:] == before[8:]
        assert journal.made_alone(top, tag, 1)

        def answered_alone_without_a_system_call(path: str) -> bool:
            syscalls: list[str] = []
            with monkeypatch.context() as patched:
                for name in ("lseek", "fstat", "pread", "open"):
                    real = getattr(os, name)
                    patched.setattr(
                        os, name, lambda *a, _real=real, _name=name, **k: syscalls.append(_name) or _real(*a, **k)
                    )
                alone = journal.made_alone(path, tag, 1)
            return alone and syscalls == []

        assert answered_alone_without_a_system_call(top)  # the tokens alone answered
        journal.made(tmp_path / "by_pathlib", tag)  # as Path.mkdir notes it: a Path, its text kept too
        assert answered_alone_without_a_system_call(str(tmp_path / "by_pathlib"))
        peer = (
            "import sys; from fsguard import journal; from fsguard.state import STATE; from fsguard.launcher import "
            "detect; STATE.launch = detect({'RANK': sys.argv[3], 'WORLD_SIZE': '4'}); "
            "(journal.made if sys.argv[4] == 'made' else journal.tried)(sys.argv[1], sys.argv[2])"
        )
        subprocess.run([sys.executable, "-c", peer, top, tag, "2", "tried"], env=clean_env(), check=True, timeout=60)
        assert not journal.made_alone(top, tag, 1)  # rank 2 found it there since: it shares the name
        journal.made(top, tag)
        other = str(tmp_path / "other")
        subprocess.run([sys.executable, "-c", peer, other, tag, "2", "made"], env=clean_env(), check=True, timeout=60)
        assert not journal.made_alone(other, tag, 1) and not journal.made_alone(top, tag, 1)  # still tried by 2
    finally:
        STATE.launch = launch


def test_this_process_s_own_tried_note_is_taken_as_read(
    tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``makedirs(exist_ok=True)`` that found this process's own directory there notes it in the ``tried`` notes;
    the process takes its own note as read where nothing came between, so its next ``made_alone`` reads nothing
    (issue 47: a TemporaryDirectory that a helper ``makedirs`` then cleans up re-read the notes at every removal).
    Flipped: after a peer's note, this process's own note is not taken as read, and the peer's note decides."""
    from fsguard.launcher import detect
    from fsguard.state import STATE

    monkeypatch.setattr(STATE, "launch", detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}))
    mine, other = str(tmp_path / "mine"), str(tmp_path / "other")
    journal.made(mine, tag)
    assert journal.made_alone(mine, tag, 1)  # (the notes opened and read once)
    journal.tried(mine, tag)  # found there: its own
    reads: list[str] = []
    with monkeypatch.context() as patched:
        for name in ("fstat", "pread", "open"):
            real = getattr(os, name)
            patched.setattr(os, name, lambda *a, _real=real, _name=name, **k: reads.append(_name) or _real(*a, **k))
        assert journal.made_alone(mine, tag, 1)
    assert reads == []
    journal.made(other, tag)
    peer = (
        "import sys; from fsguard import journal; from fsguard.state import STATE; from fsguard.launcher import "
        "detect; STATE.launch = detect({'RANK': '2', 'WORLD_SIZE': '4'}); journal.tried(sys.argv[1], sys.argv[2])"
    )
    subprocess.run([sys.executable, "-c", peer, other, tag], env=clean_env(), check=True, timeout=60)
    journal.tried(str(tmp_path / "third"), tag)  # after the peer's note: not all that came after what was read
    assert not journal.made_alone(other, tag, 1)  # rank 2 found it there
    assert journal.made_alone(mine, tag, 1)


def test_a_note_between_this_process_s_note_and_its_token_is_not_passed_over(
    tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer's note that lands after this process's note but before its token: the token does not stand for this
    note being the last (the journal's size read again), so the peer's making is read."""
    from fsguard.launcher import detect
    from fsguard.state import STATE

    top = str(tmp_path / "eval_tmp")
    monkeypatch.setattr(STATE, "launch", detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}))
    bump = type(journal.SLOTS).bump

    def peer_first(self: Any, tag_: str, slot: int, locate: Any) -> bytes | None:
        where = journal.directory()
        assert where is not None
        with open(os.path.join(where, journal.file_name(tag_)), "ab") as f:  # a peer's note, its token after ours
            f.write(b"%.6f@2 %s\0" % (time.time(), os.fsencode(top)))
        return bump(self, tag_, slot, locate)

    with monkeypatch.context() as patched:
        patched.setattr(type(journal.SLOTS), "bump", peer_first)
        journal.made(top, tag)
    assert not journal.made_alone(top, tag, 1)


def test_a_sweep_leaves_the_tokens_of_a_running_job_and_removes_an_ended_job_s(
    tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tokens' file is removed by a sweep only when no process holds it (its shared ``flock``), whatever its age:
    a process that maps it keeps it while it runs."""
    monkeypatch.setattr(journal, "CANDIDATES", (str(tmp_path),))  # a sweep of its own: other tests' files stay
    where = journal.directory()
    assert where is not None
    assert journal.SLOTS.read(tag, journal.tokens_path) is not None
    path = os.path.join(where, journal.file_name(tag, journal.SEQ))
    old = time.time() - 2 * journal.STALE_S
    os.utime(path, (old, old))
    journal._sweep(where)
    assert os.path.exists(path)  # held by this process
    journal.SLOTS.clear()
    journal._sweep(where)
    assert not os.path.exists(path)  # nobody holds it: its job ended
    assert journal.SLOTS.read(tag, journal.tokens_path) is not None and os.path.exists(path)  # made afresh when needed


def test_a_forked_child_draws_tokens_of_its_own(tag: str) -> None:
    """A forked child shares the mapping (its notes are seen) but not the parent's sequence of tokens: a child's token
    equal to one the parent set would hide the notes set between them."""
    assert journal.SLOTS.read(tag, journal.tokens_path) is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, journal.SLOTS.bump(tag, 0, journal.tokens_path) or b"")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 8)
    os.close(read)
    os.close(write)
    tokens = journal.SLOTS.read(tag, journal.tokens_path)
    assert tokens is not None and tokens[:8] == child  # the child's token, in the parent's mapping
    assert journal.SLOTS.bump(tag, 0, journal.tokens_path) != child


def test_a_pool_s_notes_are_read_once_then_answered_from_what_was_kept(
    tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: directories a forked child of this rank made (a ``multiprocessing.Pool``'s) are not this process's last
    note. Their notes are read once, on from where the last read ended; while the journal's token stays, the kept
    ranks answer with no read. A peer's making since is read, and decides."""
    from fsguard.launcher import detect
    from fsguard.state import STATE

    monkeypatch.setattr(STATE, "launch", detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}))
    tops = [str(tmp_path / f"part-{k}") for k in range(20)]
    pid = os.fork()
    if pid == 0:
        try:
            for top in tops:
                journal.made(top, tag)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    reads: list[int] = []
    pread = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        reads.append(fd)
        return pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counted)
    assert journal.made_alone(tops[0], tag, 1) and len(reads) == 1  # the child's notes, read once
    assert all(journal.made_alone(top, tag, 1) for top in tops) and len(reads) == 1  # then what was kept answers
    _note(tag, journal.PREFIX, tops[3], 2)  # a peer of rank 2 made one since
    assert not journal.made_alone(tops[3], tag, 1) and journal.made_alone(tops[4], tag, 1)
    assert len(reads) == 2  # the peer's note read, once


def test_a_note_older_than_what_was_kept_is_still_found(tag: str, tmp_path: Path) -> None:
    """The first read keeps one chunk of notes from the journal's end; a path noted before that is looked up in the
    journal itself, as far back as ``made_alone`` reads."""
    top = str(tmp_path / "eval_tmp")
    _note(tag, journal.PREFIX, top, 1)
    for k in range(2 * journal._CHUNK // 60):  # more than a chunk of other notes after it
        _note(tag, journal.PREFIX, str(tmp_path / f"other-{k}"), 2)
    assert journal.made_alone(top, tag, 1) and not journal.made_alone(top, tag, 2)
    assert journal.made_alone(str(tmp_path / "other-0"), tag, 2)


def test_a_path_no_note_names_is_read_for_once(tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree no guarded call of the job made (a tool's, or one made before the job): the journal is read back as far
    as ``made_alone`` reads once, not at every removal (it was about 0.6 ms a call with a full journal). A note of the
    path since is read, and decides."""
    top = str(tmp_path / "made_by_a_tool")
    for k in range(50):
        _note(tag, journal.PREFIX, str(tmp_path / f"other-{k}"), 2)
    reads: list[int] = []
    pread = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        reads.append(fd)
        return pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counted)
    assert not journal.made_alone(top, tag, 1)
    first = len(reads)
    assert first >= 1 and not journal.made_alone(top, tag, 1) and len(reads) == first  # kept: no read
    _note(tag, journal.PREFIX, top, 1)
    assert journal.made_alone(top, tag, 1) and not journal.made_alone(top, tag, 2)

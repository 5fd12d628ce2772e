"""Issue 14's workload, 4 real ranks x 30 rounds: rotation cleanup (``os.remove``, ``Path.unlink``), check-then-
``os.mkdir``, ``Path.mkdir(parents=True)``, a ``latest`` symlink refresh, an ``os.link`` of ``best``, and a build
directory removed by hand (``os.walk``, ``os.remove``, ``os.rmdir``: torch inductor's C++ builder does that).

Each rank is a fresh interpreter of the venv built from the wheel (real ``.pth``, real launcher detection)
running ``workers/family_race_worker.py``; the ranks meet at a file barrier before every round. Without
fsguard the ranks really collide (calls fail); with ``FSGUARD=1`` none fails, the end state is right (old
files gone, directories present, ``latest`` -> the last round's run, ``best`` the same inode as the last
round's ``last``), and every absorbed race has exactly one well-formed ``absorbed`` record naming the
worker's line of the call that lost it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fsguard
from fsguard.config import Settings
from fsguard.records import Record, parse_line
from tests.conftest import TORCHRUN_ENV, clean_env
from tests.support.ranks import launch, rank_env
from tests.support.records import check_lines_stand_for
from tests.support.threads import with_crash_of

RANKS = 4
ROUNDS = 30
WORKER = Path(__file__).resolve().parent / "workers" / "family_race_worker.py"
JOB_TIMEOUT_S = 180
# the worker's marker -> the operation its records name
OPS = {
    "remove": "remove",
    "unlink": "remove",
    "latest-remove": "remove",
    "best-remove": "remove",
    "mkdir": "mkdir",
    "path-mkdir": "mkdir",
    "symlink": "symlink",
    "link": "link",
    "build-remove": "remove",
    "build-rmdir": "rmdir",
    "rmdir": "rmdir",
}


def sites() -> dict[int, str]:
    """The worker's line number of each guarded call -> its marker."""
    found = {}
    for number, text in enumerate(WORKER.read_text().splitlines(), 1):
        marker = re.search(r"  # guarded call: ([a-z-]+)$", text)
        if marker:
            found[number] = marker.group(1)
    assert set(found.values()) == set(OPS)
    return found


def run_job(python: Path, where: Path, guarded: bool) -> tuple[Path, list[dict[str, Any]], list[str]]:
    root = where / "root"
    (root / "gate").mkdir(parents=True)
    extra = {"FSGUARD": "1", "FSGUARD_LOG": str(where / "log")} if guarded else {}
    envs = [rank_env(rank, RANKS, "family-races", **extra) for rank in range(RANKS)]
    ranks = launch([str(python), str(WORKER), str(root), str(ROUNDS)], envs, JOB_TIMEOUT_S)
    stderr = [r.err for r in ranks]
    assert [r.code for r in ranks] == [0] * RANKS, stderr
    reports = [r.report() for r in ranks]
    return root, reports, stderr


def test_workload_fails_without_fsguard(fsguard_python: Path, tmp_path: Path) -> None:
    """The premise: unguarded, the ranks' housekeeping collides."""
    _, reports, stderr = run_job(fsguard_python, tmp_path, guarded=False)
    lost = [f for r in reports for f in r["failures"]]
    kinds = Counter((f["step"], f["type"]) for f in lost)
    print(f"without fsguard: {len(lost)} failed calls in {ROUNDS} rounds x {RANKS} ranks: {dict(kinds)}")
    assert lost
    assert not any("fsguard" in text for text in stderr)


def test_workload_absorbed_with_fsguard(fsguard_python: Path, tmp_path: Path) -> None:
    root, reports, stderr = run_job(fsguard_python, tmp_path, guarded=True)
    lost = [f for r in reports for f in r["failures"]]
    assert lost == [], json.dumps(lost) + "\n" + "\n".join(stderr)

    # End state: old files gone, directories present, latest -> the last run, best = last round's last.
    for k in range(ROUNDS):
        assert not (root / f"ckpt-{k}").exists() and not (root / f"log-{k}.txt").exists()
        assert (root / f"run-{k}").is_dir() and (root / f"epoch-{k}" / "metrics").is_dir()
        assert not (root / f"build-{k}").exists()
    assert os.readlink(root / "latest") == f"run-{ROUNDS - 1}"
    best, last = os.stat(root / "best"), os.stat(root / f"last-{ROUNDS - 1}")
    assert (best.st_dev, best.st_ino) == (last.st_dev, last.st_ino)

    lines = [line for text in stderr for line in text.splitlines()]
    assert all(line.startswith("fsguard: ") for line in lines), lines
    records = [parse_line(line) for line in lines]
    from_log = [
        parse_line(line) for path in (tmp_path / "log").glob("*.jsonl") for line in path.read_text().splitlines()
    ]
    check_lines_stand_for([r for r in records if r], [r for r in from_log if r])
    records = from_log  # every record (stderr shows a few per call site, with the count held back)

    by_line = sites()
    rank_of_pid = {report["pid"]: report["rank"] for report in reports}
    per_call: Counter[tuple[int, int, str]] = Counter()
    per_site: Counter[str] = Counter()
    for rec in records:
        assert isinstance(rec, Record)
        assert rec.decision == "absorbed" and rec.evidence.strip()
        assert rec.site is not None and rec.site["file"] == str(WORKER), rec.site
        marker = by_line[rec.site["line"]]
        assert rec.op == OPS[marker], (rec.op, marker)
        expected_error = "FileNotFoundError" if rec.op in ("remove", "rmdir") else "FileExistsError"
        assert rec.error is not None and rec.error["type"] == expected_error
        assert rec.origin.rank == rank_of_pid[rec.origin.pid] and (rec.origin.world_size, rec.origin.version) == (
            RANKS,
            fsguard.__version__,
        )
        per_site[marker] += 1
        per_call[rec.origin.pid, rec.site["line"], " ".join(rec.args)] += 1
    print(f"with fsguard: {len(records)} absorbed: {dict(per_site)}")
    assert records
    # One record per absorbed race: a call on a path of one round is absorbed at most once per rank, and a
    # call on the one latest/best path at most once per rank and round.
    for (_, line, args), count in per_call.items():
        assert count <= (ROUNDS if by_line[line] in ("latest-remove", "best-remove", "symlink", "link") else 1), args


@pytest.mark.parametrize("fsguard_ops", ["remove,mkdir,symlink,link", "makedirs,rename,replace,rmtree"])
def test_fsguard_ops_narrows_the_set(fsguard_python: Path, tmp_path: Path, fsguard_ops: str) -> None:
    code = "import os, json; print(json.dumps([hasattr(f, '__wrapped__') for f in (os.remove, os.unlink, os.mkdir, os.symlink, os.link, os.makedirs)]))"
    env = {**TORCHRUN_ENV, "FSGUARD": "1", "FSGUARD_OPS": fsguard_ops}
    done = subprocess.run([str(fsguard_python), "-c", code], env=clean_env(env), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    new = fsguard_ops.startswith("remove")
    assert json.loads(done.stdout) == [new, new, new, new, new, not new]


REMOVE_IN_A_JOB = """
    import json, os, sys
    old, fresh = os.environ["OLD_DIR"], os.environ["FRESH_DIR"]
    os.mkdir(fresh)
    outcomes = {}
    def remove(path):  # no handler around the call: a would-be crash of its thread, fsguard decides
        os.remove(path)
    def attempt(name, path):
        _, escaped = crash_of(remove, path)
        outcomes[name] = type(escaped).__name__ if escaped else "absorbed"
    attempt("never existed, directory changed moments ago", os.path.join(fresh, "never"))
    attempt("never existed, directory older than the job", os.path.join(old, "never"))
    attempt("parent missing, directory above changed moments ago", os.path.join(fresh, "nope", "never"))
    attempt("parent missing, directory above older than the job", os.path.join(old, "nope", "never"))
    attempt("a chain of missing directories", os.path.join(fresh, "a", "b", "c", "never"))
    open(os.path.join(fresh, "f"), "w").close()
    os.remove(os.path.join(fresh, "f"))
    attempt("removed by this process", os.path.join(fresh, "f"))
    attempt("a directory", fresh)
    print(json.dumps(outcomes))
"""


def test_remove_in_a_job_absorbs_only_a_name_gone_from_a_directory_changed_moments_ago(
    fsguard_python: Path, tmp_path: Path
) -> None:
    """Inside a job (peers), a missing name in a directory changed moments ago is absorbed: whether a peer
    removed it or it never existed cannot be told (README deviation); so is a name whose directory is gone too
    when the directory above it changed moments ago (a peer removed the whole directory). Everything else is
    raised."""
    old = tmp_path / "old"
    old.mkdir()
    time.sleep(Settings().fresh_s + 1.5)  # older than the job below by more than the default FSGUARD_FRESH_S
    env = {
        **TORCHRUN_ENV,
        "FSGUARD": "1",
        "OLD_DIR": str(old),
        "FRESH_DIR": str(tmp_path / "f"),
    }
    # Started through a shell that stays its parent: the job's start is the launcher's (the parent's), not pytest's.
    command = ["sh", "-c", '"$0" -c "$1"; exit $?', str(fsguard_python), with_crash_of(REMOVE_IN_A_JOB)]
    done = subprocess.run(command, env=clean_env(env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "never existed, directory changed moments ago": "absorbed",
        "never existed, directory older than the job": "FileNotFoundError",
        "parent missing, directory above changed moments ago": "absorbed",
        "parent missing, directory above older than the job": "FileNotFoundError",
        "a chain of missing directories": "FileNotFoundError",
        "removed by this process": "FileNotFoundError",
        "a directory": "IsADirectoryError",
    }
    found = [parse_line(line) for line in done.stderr.splitlines()]
    assert [(r.op, r.decision) for r in found if r] == [("remove", "absorbed")] * 2, done.stderr
    assert found[1] is not None and "is gone too" in found[1].evidence, found[1]


LEFT_TO_THE_CALLER = """
    import os, pathlib, posix, sys, tempfile
    d = tempfile.mkdtemp()
    parent, child = os.path.join(d, "a"), os.path.join(d, "a", "b")

    fired = []

    def peer_makes_the_parent(event, args):
        if event == "os.mkdir" and os.fsdecode(args[0]) == parent and not fired:
            fired.append(True)
            posix.mkdir(parent)  # a peer, just before pathlib makes the parent (after the child's ENOENT)

    sys.addaudithook(peer_makes_the_parent)
    pathlib.Path(child).mkdir(parents=True)  # the parent's EEXIST: pathlib's own (exist_ok=True) business
    pathlib.Path(d, "never").unlink(missing_ok=True)  # pathlib settles a missing name itself
    os.mkdir(os.path.join(d, "stamp"))
    tempfile.mkdtemp(dir=d)  # tempfile's own mkdir
    print(os.path.isdir(child), hasattr(os.mkdir, "__wrapped__"), bool(fired))
"""


def test_errors_the_standard_library_settles_itself_make_no_record(fsguard_python: Path) -> None:
    """``Path.mkdir(parents=True)`` whose parent a peer made meanwhile, ``Path.unlink(missing_ok=True)``: the
    caller settles the error itself, so fsguard neither decides nor records (one decision per failure)."""
    env = {**TORCHRUN_ENV, "FSGUARD": "1"}
    done = subprocess.run(
        [str(fsguard_python), "-c", textwrap.dedent(LEFT_TO_THE_CALLER)],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
    assert done.stderr == ""


SERIALIZED_MAKEDIRS = """
    import os, pathlib, tempfile
    d = tempfile.mkdtemp()
    os.makedirs(os.path.join(d, "a", "b", "c"))  # its inner os.mkdir calls: the standard library's own
    pathlib.Path(d, "p", "q").mkdir(parents=True)
    os.symlink("a", os.path.join(d, "latest"))
    os.remove(os.path.join(d, "latest"))
    print(hasattr(os.mkdir, "__wrapped__"))
"""


def test_serialized_calls_of_the_newer_operations_make_no_record(fsguard_python: Path, tmp_path: Path) -> None:
    """Under ``FSGUARD_SERIALIZE=1`` ``os.makedirs`` holds its path's lock while the standard makedirs calls
    ``os.mkdir``: that inner call is the standard library's own, not serialized again (with an unreachable store
    it made one more ``unserialized`` record per parent: ``tests/test_serialize.py`` counts them)."""
    env = {
        **TORCHRUN_ENV,
        "FSGUARD": "1",
        "FSGUARD_SERIALIZE": "1",
        "FSGUARD_LOCK": "file",
        "FSGUARD_LOCK_TIMEOUT": "5",
        "FSGUARD_LOG": str(tmp_path / "log"),
    }
    done = subprocess.run(
        [str(fsguard_python), "-c", textwrap.dedent(SERIALIZED_MAKEDIRS)],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.split() == ["True"], done.stderr
    assert done.stderr == ""  # no "unserialized" (lock timeout) or "waited" record
    assert not list((tmp_path / "log").glob("*.jsonl"))

"""Never worse (issue 28), classes 4, 5 and 7: ordinary programs end the same with and without fsguard.

Each program runs in fresh interpreters of the wheel's venv, once with ``FSGUARD=0`` and once with fsguard
active (``FSGUARD=1`` in a torchrun environment of 2 ranks started at once, or ``FSGUARD=force`` alone), each
run in a directory of its own. The exit codes, standard output, the exception each interpreter ended with and
the files left behind (names and contents) must be the same; a program that ends with an error must really
end with it (the test's premise), and fsguard must really have been active.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_python
from tests.support.ranks import launch, rank_env

TIMEOUT_S = 120
_ERROR = re.compile(r"^(\w+(?:Error|Exception)\b.*)$")

# First line of every program: whether fsguard patched this interpreter, on stderr (so stdout stays comparable).
_ACTIVE = 'import os, sys; print("fsguard-active:", hasattr(os.replace, "__wrapped__"), file=sys.stderr)\n'


@dataclass(frozen=True)
class Run:
    """One interpreter's end: exit code, standard output, the last exception line on stderr, fsguard's lines."""

    rc: int
    stdout: str
    error: str | None
    records: list[str]
    active: bool


@dataclass(frozen=True)
class Outcome:
    runs: list[Run]
    files: dict[str, str | None]  # what is left under the run's directory: path -> text (None: a directory)

    def same_as(self, other: Outcome) -> tuple[object, object]:
        def key(o: Outcome) -> object:
            return ([(r.rc, r.stdout, r.error) for r in o.runs], o.files)

        return key(self), key(other)


def _left(root: Path) -> dict[str, str | None]:
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_text(errors="replace") for p in sorted(root.rglob("*"))
    }


def run_program(python: Path, code: str, where: Path, mode: str, ranks: int, job: bool) -> Outcome:
    """Start ``ranks`` interpreters of ``code`` at once (with ``job``, a torchrun environment each), with
    ``FSGUARD=mode``, all given the same empty directory as ``argv[1]`` (shown as ``<dir>`` in errors)."""
    where.mkdir(parents=True)
    world = max(ranks, 2)  # ranks of one torchrun job (a single one has a peer elsewhere)
    envs = [{"FSGUARD": mode, **(rank_env(r, world, "never-worse-own") if job else {})} for r in range(ranks)]
    runs = []
    for rank in launch([str(python), "-c", _ACTIVE + textwrap.dedent(code), str(where)], envs, TIMEOUT_S):
        lines = rank.err.splitlines()
        errors = [m.group(1).replace(str(where), "<dir>") for m in map(_ERROR.match, lines) if m]
        runs.append(
            Run(
                rank.code,
                rank.out,
                errors[-1] if errors else None,
                [line for line in lines if line.startswith("fsguard:")],
                "fsguard-active: True" in lines,
            )
        )
    return Outcome(runs, _left(where))


def compare(python: Path, code: str, where: Path, mode: str, ranks: int = 2) -> tuple[Outcome, Outcome]:
    """The program without fsguard and with ``FSGUARD=mode`` (``1``: in a torchrun job): the same end,
    asserted. Returns both outcomes."""
    plain = run_program(python, code, where / "plain", "0", ranks, mode == "1")
    guarded = run_program(python, code, where / "guarded", mode, ranks, mode == "1")
    assert not any(r.active for r in plain.runs) and all(r.active for r in guarded.runs), (plain, guarded)
    mine, theirs = guarded.same_as(plain)
    assert mine == theirs, (guarded, plain)
    return plain, guarded


# --- class 4: a rank's own failure taken for a peer's move ----------------------------------------------------


PER_RANK_STATE = """
    # Each rank publishes its own state; rank 1's writer produces nothing at step 2.
    os.chdir(sys.argv[1])
    rank = int(os.environ.get("RANK", "0"))
    for step in range(4):
        if not (rank == 1 and step == 2):
            with open(f"state-r{rank}.{step}.tmp", "w") as f:
                f.write(f"rank {rank} step {step}")
        os.replace(f"state-r{rank}.{step}.tmp", f"state-r{rank}.latest")
        with open(f"state-r{rank}.latest") as f:
            print("step", step, "state", f.read(), flush=True)
"""

POINTER_FLIP = """
    # A 'current' symlink flipped to each new checkpoint; at step 3 the save was skipped, so no new link.
    import time
    os.chdir(sys.argv[1])
    for step in range(5):
        if step != 3:
            os.makedirs(f"ckpt-{step}")
            os.symlink(f"ckpt-{step}", f"current.{step}.tmp")
        os.replace(f"current.{step}.tmp", "current")
        print("current ->", os.readlink("current"), flush=True)
        time.sleep(0.05)
"""


def test_class4_per_rank_state_with_a_missing_write_crashes_as_without(fsguard_python: Path, tmp_path: Path) -> None:
    """Class 4: rank 1's own missing state file is not taken for a peer's move onto its own ``latest``."""
    plain, guarded = compare(fsguard_python, PER_RANK_STATE, tmp_path, "1")
    assert [r.rc for r in plain.runs] == [0, 1], plain
    assert plain.runs[1].error is not None and plain.runs[1].error.startswith("FileNotFoundError"), plain
    assert plain.files["state-r1.latest"] == "rank 1 step 1"
    assert guarded.runs[1].records == [], guarded.runs[1].records


def test_class4_pointer_flip_alone_fails_as_without(fsguard_python: Path, tmp_path: Path) -> None:
    """Class 4, ``FSGUARD=force`` in one process: the skipped step's replace fails as the standard library's."""
    plain, guarded = compare(fsguard_python, POINTER_FLIP, tmp_path, "force", ranks=1)
    assert plain.runs[0].rc == 1, plain
    assert plain.runs[0].error == "FileNotFoundError: [Errno 2] No such file or directory: 'current.3.tmp' -> 'current'"
    assert plain.files["current"] is None and (tmp_path / "plain" / "current").resolve().name == "ckpt-2"
    assert (tmp_path / "guarded" / "current").resolve().name == "ckpt-2"
    assert guarded.runs[0].records == [], guarded.runs[0].records


# --- class 5: own memory forgets ----------------------------------------------------------------------------


TEMPDIR_AFTER_MANY_CALLS = """
    # A rank's own TemporaryDirectory, removed after 4,200 guarded calls (a buffer file swapped between two
    # names inside it).
    import tempfile
    rank = os.environ["RANK"]
    with tempfile.TemporaryDirectory(dir=sys.argv[1]) as scratch:
        front, back = os.path.join(scratch, "front"), os.path.join(scratch, "back")
        os.makedirs(os.path.join(scratch, "parts"))
        with open(front, "w") as f:
            f.write(rank)
        for i in range(2100):
            os.rename(front, back)
            os.rename(back, front)
    with open(os.path.join(sys.argv[1], f"done-r{rank}"), "w") as f:
        f.write("done")
"""

REMADE_OUTPUT_DIRS = """
    # Each epoch clears and re-makes this rank's output dir; then 4,200 guarded calls on scratch files in an
    # mkdtemp tree made first; at the end both trees are removed.
    import shutil, tempfile
    rank = os.environ["RANK"]
    work = tempfile.mkdtemp(dir=sys.argv[1])
    out = os.path.join(sys.argv[1], f"out-r{rank}")
    for epoch in range(3):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(os.path.join(out, "shards"))
        with open(os.path.join(out, "shards", "0.bin"), "w") as f:
            f.write(f"epoch {epoch}")
    open(os.path.join(work, "a"), "w").close()
    for i in range(2100):
        os.rename(os.path.join(work, "a"), os.path.join(work, "b"))
        os.unlink(os.path.join(work, "b"))
        open(os.path.join(work, "a"), "w").close()
    shutil.rmtree(out)
    shutil.rmtree(work)
    print("rank", rank, "done", flush=True)
"""


@pytest.mark.parametrize("program", [TEMPDIR_AFTER_MANY_CALLS, REMADE_OUTPUT_DIRS], ids=["tempdir", "remade"])
def test_class5_own_trees_stay_own_after_many_calls(fsguard_python: Path, tmp_path: Path, program: str) -> None:
    """Class 5: directories a rank made itself are its own at cleanup however many calls came between: no
    hazard record, no yield window (a peer's tree is what the window waits for), the same files left."""
    plain, guarded = compare(fsguard_python, program, tmp_path, "1")
    assert [r.rc for r in plain.runs] == [0, 0], plain
    assert all(r.records == [] for r in guarded.runs), [r.records for r in guarded.runs]


# --- class 7: errors at interpreter shutdown ----------------------------------------------------------------


DEL_AT_SHUTDOWN = """
    # A module global whose __del__ runs at interpreter shutdown: a handled failure, then its own tree removed.
    import shutil, tempfile

    class Scratch:
        def __init__(self, where):
            self.path = tempfile.mkdtemp(dir=where)
            self.lock = os.path.join(where, "scratch.lock")
            with open(os.path.join(self.path, "data"), "w") as f:
                f.write("x")

        def __del__(self):
            try:
                os.remove(self.lock)  # never taken: FileNotFoundError, handled
            except FileNotFoundError:
                pass
            shutil.rmtree(self.path)

    scratch = Scratch(sys.argv[1])
    print("made", flush=True)
"""

UNHANDLED_AT_SHUTDOWN = """
    # Cleanups at exit: an atexit rmtree of one tree, and a __del__ at shutdown that removes another and then
    # fails unhandled (Python prints "Exception ignored in ..." and exits 0).
    import atexit, shutil, tempfile

    atexit.register(shutil.rmtree, tempfile.mkdtemp(dir=sys.argv[1]))

    class Publisher:
        def __init__(self, where):
            self.tree = tempfile.mkdtemp(dir=where)
            self.src, self.dst = os.path.join(where, "never-written"), os.path.join(where, "published")

        def __del__(self):
            shutil.rmtree(self.tree)
            os.rename(self.src, self.dst)

    publisher = Publisher(sys.argv[1])
    os.makedirs(os.path.join(sys.argv[1], "kept"))
"""


@pytest.mark.parametrize(
    ("program", "mode", "error"),
    [
        (DEL_AT_SHUTDOWN, "1", None),
        (
            UNHANDLED_AT_SHUTDOWN,
            "force",
            "FileNotFoundError: [Errno 2] No such file or directory: '<dir>/never-written' -> '<dir>/published'",
        ),
    ],
    ids=["del-handled", "del-unhandled-atexit"],
)
def test_class7_cleanup_at_shutdown_as_without(
    fsguard_python: Path, tmp_path: Path, program: str, mode: str, error: str | None
) -> None:
    """Class 7: at interpreter shutdown a guarded call is the unpatched call: no ImportError from fsguard, no
    tree left behind, the program's own error (if any) is what Python prints."""
    plain, guarded = compare(fsguard_python, program, tmp_path, mode, ranks=1)
    assert plain.runs[0].rc == 0, plain
    assert plain.runs[0].error == error, plain
    assert guarded.runs[0].records == [], guarded.runs[0].records
    assert all(name == "kept" for name in guarded.files), guarded.files


# --- a deep makedirs (issue 35) -----------------------------------------------------------------------------


DEEP_MAKEDIRS = """
    # A 400-level chain both ranks make (exist_ok=True), one each rank makes alone, then again (FileExistsError),
    # one under a "." (the standard makedirs' own early return), and a leaf of each rank under 300 levels both make
    # (exist_ok=False: each level's FileExistsError is the standard makedirs' own to swallow). The standard makedirs
    # recurses once a level.
    os.chdir(sys.argv[1])
    rank = os.environ.get("RANK", "0")
    shared = os.path.join("shared", *["d"] * 400)
    os.makedirs(shared, exist_ok=True)
    mine = os.path.join(f"own-r{rank}", *["d"] * 400)
    os.makedirs(mine)
    try:
        os.makedirs(mine)
    except FileExistsError as error:
        print("again:", error.errno, error.filename == mine, flush=True)
    os.makedirs(os.path.join(f"dot-r{rank}", *["d"] * 20, ".", *["e"] * 20))
    os.makedirs(os.path.join("race", *["d"] * 300, f"leaf-r{rank}"))  # the parents: each level's peer race
    print("depth", sum(1 for _ in os.walk("shared")), "limit", sys.getrecursionlimit(), flush=True)
"""


def test_a_deep_makedirs_goes_as_deep_as_without(fsguard_python: Path, tmp_path: Path) -> None:
    """A 400-level ``os.makedirs`` in each rank of a job: the standard makedirs recurses through the guarded
    ``os.makedirs`` once a level, and a guarded level must add no frames (three did: ``RecursionError`` at about
    334 levels, under the 990 the standard makedirs reaches)."""
    plain, guarded = compare(fsguard_python, DEEP_MAKEDIRS, tmp_path, "1")
    assert [r.rc for r in plain.runs] == [0, 0], plain
    assert plain.runs[0].stdout == "again: 17 True\ndepth 401 limit 1000\n", plain
    assert all(r.records == [] for r in guarded.runs), [r.records for r in guarded.runs]


OWN_LEVELS = """
    import os, sys
    import fsguard.memory as memory
    os.chdir(sys.argv[1])
    os.makedirs(os.path.join("made", *["d"] * 200))
    os.makedirs(os.path.join("shared", *["d"] * 200), exist_ok=True)
    os.makedirs(os.path.join("shared", *["d"] * 202), 0o755, True)
    for top in ("made", "shared"):
        levels = [os.path.join(sys.argv[1], top, *["d"] * n) for n in range(203 if top == "shared" else 201)]
        print(top, sorted({memory.own_last_event(level) for level in levels}), flush=True)
"""


def test_every_level_of_a_deep_makedirs_is_remembered_as_made(fsguard_python: Path, tmp_path: Path) -> None:
    """Each level of a deep makedirs is this process's own, as each level of a shallow one: ``made`` (a
    ``makedirs(exist_ok=False)``'s), ``made-shared`` (``exist_ok=True``'s: a name peers make too)."""
    where = tmp_path / "run"
    where.mkdir()
    envs = [{"FSGUARD": "1", **rank_env(r, 2, "deep-levels")} for r in range(1)]
    rank = launch([str(fsguard_python), "-c", textwrap.dedent(OWN_LEVELS), str(where)], envs, TIMEOUT_S)[0]
    assert rank.code == 0, rank.err
    assert rank.out == "made ['made']\nshared ['made-shared']\n", rank.out


def test_a_failing_call_in_a_deleted_working_directory_raises_its_own_error(
    fsguard_python: Path, bare_python: Path, tmp_path: Path
) -> None:
    """A relative path in a working directory removed meanwhile: the failure's ``Call`` cannot make the path
    absolute (``os.getcwd`` fails), and the caller still gets the call's own error, as without fsguard."""
    code = f"""
        import os
        os.mkdir({str(tmp_path / "gone")!r})
        os.chdir({str(tmp_path / "gone")!r})
        os.rmdir({str(tmp_path / "gone")!r})
        for call in (lambda: os.rename("a", "b"), lambda: os.replace("a", "b"), lambda: os.remove("a")):
            try:
                call()
            except OSError as error:
                print(type(error).__name__, error.errno, error.filename)
    """
    without = run_python(bare_python, code)
    with_fsguard = run_python(fsguard_python, code, {"FSGUARD": "force"})
    assert without.returncode == 0, without.stderr
    assert with_fsguard.returncode == 0, with_fsguard.stderr
    assert with_fsguard.stdout == without.stdout and without.stdout.count("FileNotFoundError 2 a") == 3
    assert "fsguard:" not in with_fsguard.stderr, with_fsguard.stderr

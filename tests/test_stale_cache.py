"""Race 5: a node's lookup cache is stale right after a peer's change, and fsguard must not wait it out.

One backing directory is mounted twice with ``bindfs -o entry_timeout=30,attr_timeout=30,negative_timeout=30``:
view A and view B are two "nodes" whose lookups (``stat``, ``open``) are answered from their own kernel cache
for 30 s, while directory listings are always fresh (as on NFS). Every step is a fresh interpreter of the test
venv (``tests/workers/stale_step.py``), with a torchrun rank's environment, ``FSGUARD=1`` or unset. FUSE
entry caches belong to the mount, not to a process: B's lookups in one interpreter stay cached for B's next
interpreter (each test checks that B still sees the old state right before its operation).

Each race: B looks the names up (caching "present"/"missing"), A does the operation, B does the same one.
Without fsguard B fails; with it, the failure is absorbed in well under the 30 s cache, with a record.
Where the standard library does *not* fail on bindfs, the test asserts that instead of pretending a race.
"""

# ruff: noqa: F811  (pytest fixtures are imported, then named as parameters)
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fsguard import config
from fsguard.records import Record, parse_line
from tests.cluster.fixtures import StaleViews, needs_fuse, stale_mounts  # noqa: F401 (fixture)
from tests.conftest import TORCHRUN_ENV, clean_env

pytestmark = [pytest.mark.fuse, needs_fuse]

STEP = Path(__file__).resolve().parent / "workers" / "stale_step.py"
SETTLE_S = 0.5
FAST_S = 5.0  # a correctness bound: a decision that waited out the 30 s cache would take 30 s
GUARDED = pytest.mark.parametrize("guarded", [False, True], ids=["without-fsguard", "with-fsguard"])
ALL_OPS = list(config.ALL_OPS)


class Node:
    """The output of one ``stale_step.py`` run."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        assert proc.returncode == 0, f"stale_step failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        self.out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        self.stderr = proc.stderr
        self.records: list[Record] = [r for r in map(parse_line, proc.stderr.splitlines()) if r is not None]

    @property
    def patched(self) -> list[str]:
        return list(self.out["patched"])

    @property
    def last(self) -> dict[str, Any]:
        return dict(self.out["steps"][-1])

    def seen(self, index: int = 0) -> dict[str, str]:
        return dict(self.out["steps"][index]["seen"])

    def describe(self) -> str:
        return f"{json.dumps(self.out, indent=1)}\nstderr:\n{self.stderr}"


def step(python: Path, *steps: list[Any], guarded: bool = False) -> Node:
    """Run steps in a fresh interpreter with a torchrun rank's environment, fsguard on or off."""
    env = dict(TORCHRUN_ENV)
    if guarded:
        env.update(FSGUARD="1", FSGUARD_SETTLE_S=str(SETTLE_S))
    proc = subprocess.run(
        [
            str(python),
            str(STEP),
            json.dumps([[a, *(str(x) if isinstance(x, Path) else x for x in rest)] for a, *rest in steps]),
        ],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    node = Node(proc)
    assert node.patched == (ALL_OPS if guarded else []), node.describe()
    return node


def assert_stale(node: Node, present: list[Path], missing: list[Path]) -> None:
    """B's lookups still show the state before A's step: the race window is open."""
    expected = {**{str(p): "present" for p in present}, **{str(p): "missing" for p in missing}}
    assert node.seen() == expected, f"view B's cache was not stale (bindfs did not cache?):\n{node.describe()}"


def assert_error(node: Node, kind: str, errno_: int, filename: Path, filename2: Path | None = None) -> None:
    error = node.last["error"]
    assert error is not None, f"expected {kind}, the call succeeded:\n{node.describe()}"
    assert (error["type"], error["errno"], error["filename"], error["filename2"]) == (
        kind,
        errno_,
        str(filename),
        None if filename2 is None else str(filename2),
    ), node.describe()


def assert_absorbed(node: Node, op: str, args: list[Path], decision: str | tuple[str, ...] = "absorbed") -> Record:
    """The call succeeded fast, with exactly one record (of ``decision``, or one of them) for it, decided
    without using up the settle wait."""
    result = node.last
    assert result["ok"], f"fsguard did not absorb:\n{node.describe()}"
    assert result["seconds"] < FAST_S, f"{op} took {result['seconds']:.2f} s through the 30 s cache"
    assert len(node.records) == 1, node.describe()
    (rec,) = node.records
    decisions = (decision,) if isinstance(decision, str) else decision
    assert (rec.op, rec.args) == (op, [str(a) for a in args]) and rec.decision in decisions, rec.to_line()
    assert rec.waited_s < SETTLE_S, f"decided only after the settle wait: {rec.to_line()}"
    assert rec.origin.rank == 1 and rec.origin.launcher is not None, rec.to_line()
    return rec


# --- rename / replace -----------------------------------------------------------------------------------------


@GUARDED
def test_rename_directory_seen_stale(fsguard_python: Path, stale_mounts: StaleViews, guarded: bool) -> None:
    """B cached tmp-checkpoint present and checkpoint missing; A renamed it; B renames too."""
    v = stale_mounts
    (v.backing / "tmp-ckpt").mkdir()
    (v.backing / "tmp-ckpt" / "weights").write_text("w")
    src, dst = v.b / "tmp-ckpt", v.b / "ckpt"

    step(fsguard_python, ["lookup", src, dst])
    step(fsguard_python, ["rename", v.a / "tmp-ckpt", v.a / "ckpt"])
    b = step(fsguard_python, ["lookup", src, dst], ["rename", src, dst], guarded=guarded)

    assert_stale(b, present=[src], missing=[dst])
    if guarded:
        rec = assert_absorbed(b, "rename", [src, dst])
        assert "source gone" in rec.evidence, rec.to_line()
    else:
        assert_error(b, "FileNotFoundError", 2, src, dst)
        assert not b.records
    assert sorted(p.name for p in v.backing.iterdir()) == ["ckpt"]
    assert (v.backing / "ckpt" / "weights").read_text() == "w"


@GUARDED
@pytest.mark.parametrize("dst_before", ["missing", "old-file"])
def test_replace_file_seen_stale(
    fsguard_python: Path, stale_mounts: StaleViews, guarded: bool, dst_before: str
) -> None:
    """B cached the temp file present (and the final one missing, or an older final file); A replaced it; B too."""
    v = stale_mounts
    (v.backing / "model.pt.tmp").write_text("new")
    if dst_before == "old-file":
        (v.backing / "model.pt").write_text("old")
    src, dst = v.b / "model.pt.tmp", v.b / "model.pt"

    first = step(fsguard_python, ["lookup", src, dst])
    assert first.seen()[str(dst)] == ("present" if dst_before == "old-file" else "missing")
    step(fsguard_python, ["replace", v.a / "model.pt.tmp", v.a / "model.pt"])
    b = step(fsguard_python, ["lookup", src, dst], ["replace", src, dst], guarded=guarded)

    if dst_before == "old-file":
        assert_stale(b, present=[src, dst], missing=[])
    else:
        assert_stale(b, present=[src], missing=[dst])
    if guarded:  # one temp file both renamed, written in place (no rename of B's own put it there): a hazard
        assert_absorbed(b, "replace", [src, dst], decision="hazard")
    else:
        assert_error(b, "FileNotFoundError", 2, src, dst)
        assert not b.records
    assert sorted(p.name for p in v.backing.iterdir()) == ["model.pt"]
    assert (v.backing / "model.pt").read_text() == "new"


# --- makedirs -------------------------------------------------------------------------------------------------


@GUARDED
def test_makedirs_exist_ok_seen_stale_does_not_fail_on_fuse(
    fsguard_python: Path, stale_mounts: StaleViews, guarded: bool
) -> None:
    """B cached "missing" for d; A made d; B's ``os.makedirs(d, exist_ok=True)`` succeeds even without fsguard.

    No race on FUSE: ``mkdir`` looks its name up exclusively (``LOOKUP_EXCL``), which makes the kernel
    revalidate the cached negative entry, so ``mkdir`` fails with EEXIST and ``makedirs``' own ``isdir`` check
    then sees the directory. Nothing fails, so fsguard has nothing to absorb and writes no record.
    """
    v = stale_mounts
    d = v.b / "results"
    step(fsguard_python, ["lookup", d])
    step(fsguard_python, ["mkdir", v.a / "results"])
    b = step(fsguard_python, ["lookup", d], ["makedirs", d, True], guarded=guarded)

    assert_stale(b, present=[], missing=[d])
    assert b.last["ok"], f"makedirs(exist_ok=True) failed on bindfs:\n{b.describe()}"
    assert b.last["seconds"] < FAST_S
    assert not b.records, b.describe()
    assert (v.backing / "results").is_dir()


@GUARDED
def test_makedirs_seen_stale(fsguard_python: Path, stale_mounts: StaleViews, guarded: bool) -> None:
    """B cached "missing" for d; A made d; B's ``os.makedirs(d)`` (exist_ok=False): a peer's work, absorbed."""
    v = stale_mounts
    d = v.b / "results"
    step(fsguard_python, ["lookup", d])
    step(fsguard_python, ["mkdir", v.a / "results"])
    b = step(fsguard_python, ["lookup", d], ["makedirs", d, False], guarded=guarded)

    assert_stale(b, present=[], missing=[d])
    if guarded:
        assert_absorbed(b, "makedirs", [d])
    else:
        assert_error(b, "FileExistsError", 17, d)
        assert not b.records
    assert (v.backing / "results").is_dir()


# --- rmtree ---------------------------------------------------------------------------------------------------


@GUARDED
@pytest.mark.parametrize("peer", ["removed", "renamed"])
def test_rmtree_seen_stale(fsguard_python: Path, stale_mounts: StaleViews, guarded: bool, peer: str) -> None:
    """B cached every entry of a tree; A removed it (or renamed it to ``staging.old``); B removes it too.

    Without fsguard, B's walk opens the stale tree, lists nothing (listings are fresh) and fails on the
    final ``rmdir`` with FileNotFoundError. With fsguard that failure is absorbed; when A renamed the tree,
    the record is a hazard naming the renamed tree, which B must have left intact.
    """
    v = stale_mounts
    tree = ["staging", "staging/f1", "staging/sub", "staging/sub/f2"]
    (v.backing / "staging" / "sub").mkdir(parents=True)
    (v.backing / "staging" / "f1").write_text("1")
    (v.backing / "staging" / "sub" / "f2").write_text("2")
    top = v.b / "staging"

    step(fsguard_python, ["lookup", *(v.b / t for t in tree)])
    if peer == "removed":
        step(fsguard_python, ["rmtree", v.a / "staging"])
    else:
        step(fsguard_python, ["rename", v.a / "staging", v.a / "staging.old"])
    b = step(fsguard_python, ["lookup", *(v.b / t for t in tree)], ["rmtree", top], guarded=guarded)

    assert_stale(b, present=[v.b / t for t in tree], missing=[])
    if guarded:
        if peer == "removed":
            assert_absorbed(b, "rmtree", [top])
        else:
            # A hazard names the renamed tree (B cannot tell that its walk deleted nothing); "absorbed" would
            # be as right here, since B deleted nothing.
            # "yielded": the fresh tree was already moved away when B's yield window looked (issue 12).
            rec = assert_absorbed(b, "rmtree", [top], decision=("hazard", "absorbed", "yielded"))
            if rec.decision in ("hazard", "yielded"):
                assert rec.detail.get("renamed_to") == str(v.b / "staging.old"), rec.to_line()
    else:
        assert_error(b, "FileNotFoundError", 2, top)
        assert not b.records
    left = sorted(str(p.relative_to(v.backing)) for p in v.backing.rglob("*"))
    if peer == "removed":
        assert left == []
    else:  # B deleted nothing of the renamed tree
        assert left == ["staging.old", "staging.old/f1", "staging.old/sub", "staging.old/sub/f2"]


# --- genuine errors still raise through the stale view ----------------------------------------------------------


@pytest.mark.parametrize("case", ["rename-source-never-existed", "makedirs-file-in-the-way"])
def test_genuine_error_raised_within_settle(fsguard_python: Path, stale_mounts: StaleViews, case: str) -> None:
    """A real error is raised with fsguard as without it (same type, errno, strerror and filenames relative to
    the scenario's directory), after at most the settle wait, through the same stale view. Each run gets its
    own directory (``plain``, ``guarded``) so that both start from the same stale cache."""
    v = stale_mounts
    errors = {}
    for run in ("plain", "guarded"):
        (v.backing / run).mkdir()
        a, b = v.a / run, v.b / run
        if case == "rename-source-never-existed":
            looked, peer, op = [b / "never", b / "dst"], None, ["rename", b / "never", b / "dst"]
            expected: tuple[str, int, Path, Path | None] = ("FileNotFoundError", 2, b / "never", b / "dst")
        else:
            looked, peer, op = [b / "results"], ["write", a / "results", "a file"], ["makedirs", b / "results", True]
            expected = ("FileExistsError", 17, b / "results", None)
        step(fsguard_python, ["lookup", *looked])
        if peer:
            step(fsguard_python, peer)
        node = step(fsguard_python, ["lookup", *looked], op, guarded=run == "guarded")
        assert_stale(node, present=[], missing=looked)
        assert_error(node, *expected)
        assert not node.records, node.describe()
        error = dict(node.last["error"])
        for key in ("filename", "filename2"):
            if error[key] is not None:
                error[key] = str(Path(error[key]).relative_to(b))
        errors[run] = (error, node.last["seconds"])
    assert errors["plain"][0] == errors["guarded"][0]
    took = errors["guarded"][1]
    assert took < SETTLE_S + 1.5, f"raised only after {took:.2f} s (settle wait {SETTLE_S} s)"
